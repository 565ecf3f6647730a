"""A throwaway PostgreSQL server for the tests and the benchmarks of a party's table from a database.

:func:`throwaway_postgres` initialises a cluster in a fresh temporary folder (password authentication, locale C so
text sorts as Python sorts it), starts it on a free loopback port with its socket in that folder, yields its
SQLAlchemy URL and stops and removes it afterwards.  PostgreSQL refuses to run as root: when this process is root,
the server runs as the ``postgres`` user (else ``nobody``) through ``runuser``.  :func:`postgres_bindir` finds the
server's programs (``initdb``, ``pg_ctl``) on PATH or in Debian's ``/usr/lib/postgresql/VERSION/bin``; None if absent.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile

USER, PASSWORD = "sqm", "sqm-throwaway-password"


def postgres_bindir() -> str | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (the newest Debian version first), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]), reverse=True)
    on_path = shutil.which("initdb")
    for initdb in found + ([on_path] if on_path else []):
        d = os.path.dirname(initdb)
        if os.access(os.path.join(d, "pg_ctl"), os.X_OK):
            return d
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def throwaway_postgres(bindir: str | None = None):
    """A running PostgreSQL server of its own; yields ``postgresql+psycopg://sqm:PASSWORD@127.0.0.1:PORT/postgres``
    (user :data:`USER`, password :data:`PASSWORD`).  RuntimeError if the server programs are missing."""
    bindir = bindir or postgres_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    tmp = tempfile.mkdtemp(prefix="sqm-pg-")
    data, pwfile, logfile = (os.path.join(tmp, n) for n in ("data", "pw", "log"))
    with open(pwfile, "w") as f:
        f.write(PASSWORD + "\n")
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses root: it runs as an unprivileged user, owning the folder
        import pwd

        try:
            who = pwd.getpwnam("postgres")
        except KeyError:
            who = pwd.getpwnam("nobody")
        for p in (tmp, pwfile):
            os.chown(p, who.pw_uid, who.pw_gid)
        as_user = ["runuser", "-u", who.pw_name, "--"]
    pg_ctl = os.path.join(bindir, "pg_ctl")
    started = False
    try:
        subprocess.run(as_user + [os.path.join(bindir, "initdb"), "-D", data, "-U", USER, "--auth=scram-sha-256",
                                  f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C"],
                       check=True, capture_output=True, timeout=120)
        port = _free_port()
        subprocess.run(as_user + [pg_ctl, "-D", data, "-l", logfile, "-w", "-t", "60", "-o",
                                  f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120)
        started = True
        yield f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        if started:
            subprocess.run(as_user + [pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], capture_output=True,
                           timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
