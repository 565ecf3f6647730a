"""Start all parties of a job as separate OS processes on this machine (loopback TCP) and collect results."""
from __future__ import annotations

import os
import pickle
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)


class MPCError(RuntimeError):
    """A party failed or refused; no result was released.  ``codes``: each party's exit code (party index ->
    code, :mod:`mpc.exitcodes`; a negative code: killed by that signal); ``exit_code``: the job's root cause."""

    def __init__(self, message: str, codes: dict | None = None):
        super().__init__(message)
        self.codes = dict(codes or {})

    @property
    def exit_code(self) -> int:
        from .exitcodes import EXIT_ERROR, job_exit_code

        return job_exit_code(self.codes) or EXIT_ERROR


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def party_name(i: int) -> str:
    return "server (party 0)" if i == 0 else f"client {i} (party {i})"


def require_two_clients(n_clients: int, where: str = "") -> None:
    """Refuse a secret-sharing job with fewer than two clients, before any party process starts.

    With M = n + 1 parties the Shamir threshold is t = (M - 1) // 2; one client gives t = 0, a degree-0
    "sharing" in which every party's share, the server's included, is the client's data itself."""
    if n_clients < 2:
        raise ValueError(f"{where}a secret-sharing job needs at least two clients, got {n_clients}: with one "
                         f"client the threshold is t = 0 and the server's share would be the client's data "
                         f"in the clear; refused")


def party_env(local_parties: int = 1, blas_threads: int | None = None) -> dict:
    """Environment for a ``python -m mpc.party`` child: it imports what this process can (programs are
    pickled by reference to their classes), and ``local_parties`` parties sharing this machine's cores get
    an equal share of BLAS threads each (unless the environment sets them), or ``blas_threads`` if given."""
    env = dict(os.environ)
    path = [_ROOT] + [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path + [env.get("PYTHONPATH", "")]))
    threads = str(max(1, (os.cpu_count() or 1) // max(1, local_parties)))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if blas_threads is not None:
            env[var] = str(int(blas_threads))
        else:
            env.setdefault(var, threads)
    return env


def new_job_id() -> str:
    """A fresh job id: 128 random bits in hex (every party of one job gets the same)."""
    return secrets.token_hex(16)


def party_command(program_file: str, index: int, addresses: str, result_file: str, timeout: float,
                  connect_timeout: float, ssl_dir: str | None = None, job_id: str | None = None,
                  job_name: str | None = None, insecure_plaintext: bool = False) -> list[str]:
    """The command line starting party ``index`` of job ``job_id`` (``addresses``: comma-separated host:port
    of all parties).  ``ssl_dir``: TLS with this party's keys from ``python -m mpc.certs`` (whose certificates
    name the job ``job_name``, if given); ``insecure_plaintext``: the operator's opt-in to plain TCP across
    hosts."""
    if job_id is None:
        raise ValueError("a party needs its job's id (the same fresh id at every party of the job)")
    cmd = [sys.executable, "-m", "mpc.party", "--program", program_file, "--index", str(index),
           "--parties", addresses, "--result", result_file, "--timeout", str(timeout),
           "--connect-timeout", str(connect_timeout), "--job-id", job_id]
    if ssl_dir is not None:
        cmd += ["--ssl", "--ssl-dir", os.path.abspath(ssl_dir)]
    if job_name is not None:
        cmd += ["--job-name", job_name]
    if insecure_plaintext:
        cmd.append("--insecure-plaintext")
    return cmd


def run_parties(programs: list, timeout: float = 3600.0, connect_timeout: float = 60.0,
                extra_args: list[str] | None = None, on_start=None, addresses=None,
                ssl_dir: str | None = None, blas_threads: int | None = None, min_clients: int = 1,
                job_id: str | None = None, job_name: str | None = None,
                insecure_plaintext: bool = False) -> list[dict]:
    """Run ``programs[i]`` as party ``i`` in its own process; return each party's result record.

    ``ssl_dir``: a folder made by ``python -m mpc.certs``: every connection runs over mutually
    authenticated TLS (its certificates naming job ``job_name``, if given).  ``job_id``: the job's id (a job
    file's; default a fresh random one), agreed by all parties before anything else.  ``blas_threads``: BLAS threads per party (default: this machine's cores / M).
    ``min_clients``: 2 for a job that Shamir-shares client data (refused before any process starts, see
    :func:`require_two_clients`); 1 only for protocols without shares (HDP-VFL's two parties).

    If any party fails, the others are stopped (they also stop by themselves on losing the connection)
    and :class:`MPCError` names the failed party and its message.
    """
    M = len(programs)
    if M < 2:
        raise ValueError(f"a job needs a server and at least one client; got {M} parties")
    if min_clients >= 2:
        require_two_clients(M - 1)
    if addresses is not None:  # e.g. from a job file; default: free loopback ports
        if len(addresses) != M:
            raise ValueError(f"{len(addresses)} party addresses for {M} parties")
        addrs = ",".join(str(a).strip() for a in addresses)
    else:
        addrs = ",".join(f"127.0.0.1:{p}" for p in free_ports(M))
    job_id = job_id or new_job_id()
    # the M parties share this machine's cores: BLAS threads beyond a party's share only spin against each
    # other (a 20,000 x 120 Gram product took 0.43 s with 2 threads per party, 0.023 s with 1)
    env = party_env(local_parties=M, blas_threads=blas_threads)
    with tempfile.TemporaryDirectory(prefix="sqm-job-") as tmp:
        procs, results = [], []
        for i, prog in enumerate(programs):
            pf = os.path.join(tmp, f"party{i}.program")
            with open(pf, "wb") as f:
                pickle.dump(prog, f, protocol=5)
            rf = os.path.join(tmp, f"party{i}.result")
            results.append(rf)
            cmd = party_command(pf, i, addrs, rf, timeout, connect_timeout, ssl_dir, job_id, job_name,
                                insecure_plaintext)
            procs.append(subprocess.Popen(cmd + (extra_args or []), env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        if on_start is not None:
            on_start(procs)
        failed = _wait(procs, timeout + connect_timeout + 30)
        errors = {i: procs[i].stderr.read().strip() for i in range(M)}
        if failed:
            first = failed[0]
            msgs = "; ".join(f"{party_name(i)} exited {procs[i].returncode}: "
                             f"{errors[i].splitlines()[-1] if errors[i] else '(no message)'}"
                             for i in failed)
            raise MPCError(f"MPC job failed, no result released: {msgs}",
                           codes={i: procs[i].returncode for i in range(M)}) from None
        out = []
        for rf in results:
            with open(rf, "rb") as f:
                out.append(pickle.load(f))
        return out


def _wait(procs, deadline_s: float) -> list[int]:
    """Wait for all; on the first failure give the others 30 s to notice, then kill them."""
    start = time.monotonic()
    failed_at = None
    while True:
        codes = [p.poll() for p in procs]
        bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
        if bad and failed_at is None:
            failed_at = time.monotonic()
        if all(c is not None for c in codes):
            return [i for i, c in enumerate(codes) if c != 0]
        now = time.monotonic()
        if (failed_at is not None and now - failed_at > 30) or now - start > deadline_s:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            return [i for i, p in enumerate(procs) if p.returncode != 0]
        time.sleep(0.02)
