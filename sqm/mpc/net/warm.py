"""Warm parties: party processes started ahead of a job, their imports done, that the next job attaches to.

A party process spends most of its start importing (the interpreter, numpy, gmpy2, MPyC's field and share types,
the modules of its program) before it connects to its peers.  A process that runs many jobs one after another (a
sweep over gamma, a benchmark, a notebook, a service) can keep that cost out of every job but the first::

    from sqm.mpc.net.warm import warm_parties

    with warm_parties():
        for gamma in (2 ** 10, 2 ** 12, 2 ** 14):
            release(gamma)          # any call that runs real party processes (run_parties)

Inside the block, every party process the launcher (:class:`sqm.mpc.net.launch.Launch`) starts is taken from a
pool of warm ones when the pool holds one started with the same environment (the first job's start cold); when a
job's processes have exited the pool starts replacements, with the modules of the job's programs preloaded, so the
next job finds them ready (and no job's CPU is spent importing for the next).  A warm process:

- is started exactly as a cold one (``python -m sqm.mpc.net.party --warm``, the same environment, umask 077, its
  own session, killed if this process dies), imports numpy, gmpy2, MPyC's modules but its runtime (which reads
  the job's parties from the command line) and the modules named by ``--preload``, then waits for one line on its
  stdin, a pipe from this process only: the job's party command line and where its messages go;
- runs exactly one job, as :func:`sqm.mpc.net.party.main` with that command line would, and exits: no process,
  and so no state (randomness, keys, shares), ever serves two jobs or two parties;
- draws nothing random before its job arrives (its generators are made by the job), and reads its program from
  the same private file a cold one reads.

Its record says ``warm: true``; its timeline's ``spawned`` is the moment the job was handed to it, so the start a
job pays is the time from there to connected.  Outside the block nothing changes.  On closing, the pool's idle
processes get end-of-file on stdin and exit (killed if they do not within a second).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time

from sqm.errors import UsageError

# Imported by every warm process before it waits: the runtime's own heavy modules (not mpyc.runtime, which reads
# the job's parties from sys.argv when imported).
BASE_PRELOAD = ("numpy", "gmpy2", "mpyc.gmpy", "mpyc.finfields", "mpyc.sectypes", "mpyc.asyncoro",
                "mpyc.mpctools", "sqm.mpc.net.session", "sqm.mpc.net.transport", "sqm.mpc.protocols.sharing")
_PARTY = ["-m", "sqm.mpc.net.party"]


class WarmPool:
    """Idle warm party processes, by environment (see the module docstring)."""

    def __init__(self, size: int = 1):
        if int(size) != size or size < 1:
            raise UsageError(f"a pool of warm parties holds at least one process, got {size!r}")
        self.size = int(size)  # idle processes kept per environment, at least (more if a job started more)
        self._idle: list[tuple[dict, subprocess.Popen]] = []
        self._lock = threading.Lock()
        self.attached = 0  # jobs' party processes this pool served warm
        self.cold = 0  # party processes started cold inside the block (no warm one with their environment)

    def _spawn(self, env: dict, preload: tuple[str, ...], preexec) -> None:
        cmd = [sys.executable, *_PARTY, "--warm"] + (["--preload", ",".join(preload)] if preload else [])
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, umask=0o077, start_new_session=True, preexec_fn=preexec)
        self._idle.append((env, p))

    @staticmethod
    def serves(cmd: list[str]) -> bool:
        """Whether ``cmd`` starts a party process (the only command a warm process runs)."""
        return cmd[:3] == [sys.executable, *_PARTY] and "--warm" not in cmd

    def take(self, cmd: list[str], env: dict, messages: str | None):
        """A warm process running ``cmd`` (a party command line) with ``env``, its stderr to ``messages``; or None
        (cmd is not a party's, or no idle process has ``env``: the caller starts it cold)."""
        if not self.serves(cmd):
            return None
        with self._lock:
            k = next((k for k, (e, p) in enumerate(self._idle) if e == env and p.poll() is None), None)
            if k is None:
                self.cold += 1
                return None
            _, p = self._idle.pop(k)
        line = json.dumps({"argv": cmd[3:], "messages": messages}) + "\n"
        try:
            assert p.stdin is not None  # started with stdin=PIPE
            p.stdin.write(line.encode())
            p.stdin.close()
        except OSError:  # it died idle: a cold start instead
            return None
        self.attached += 1
        return p

    def refill(self, env: dict, preload: tuple[str, ...] = (), count: int = 1, preexec=None) -> None:
        """Start warm processes with ``env`` (importing ``preload`` too) until max(``count``, ``size``) of them are
        idle: called with the number of parties a job started once its processes have exited
        (:meth:`sqm.mpc.net.launch.Launch.close`), so that the next job finds them ready and this one's CPU is its
        own.  ``preexec``: the ``preexec_fn`` a party process starts with (the launcher's: it dies with this
        process)."""
        with self._lock:
            self._idle = [(e, p) for e, p in self._idle if p.poll() is None]
            idle = sum(1 for e, _ in self._idle if e == env)
            for _ in range(max(0, max(count, self.size) - idle)):
                self._spawn(env, preload, preexec)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, p in idle:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()  # end of file: it exits
        deadline = time.monotonic() + 1.0
        for _, p in idle:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


_POOL: WarmPool | None = None


def current() -> WarmPool | None:
    """The pool of the enclosing :func:`warm_parties` block, if any."""
    return _POOL


@contextlib.contextmanager
def warm_parties(size: int = 1):
    """Within this block, party processes start warm (module docstring): after each job, as many idle processes
    as it started parties (at least ``size``) wait per environment.  Yields the :class:`WarmPool`."""
    global _POOL
    if _POOL is not None:
        raise RuntimeError("warm_parties blocks do not nest")
    pool = WarmPool(size)
    _POOL = pool
    try:
        yield pool
    finally:
        _POOL = None
        pool.close()


def wait_for_job(preload: list[str]) -> list[str] | None:
    """In a warm process (``python -m sqm.mpc.net.party --warm``): import :data:`BASE_PRELOAD` and ``preload``, then
    wait for the job's line on stdin; return its party command line (None at end of file: the pool closed), with
    stdout to /dev/null, stderr to the job's messages file and stdin closed."""
    import importlib

    for name in (*BASE_PRELOAD, *preload):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    line = sys.stdin.buffer.readline()
    if not line:
        return None
    req = json.loads(line)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if req.get("messages"):
        err = os.open(req["messages"], os.O_WRONLY | os.O_APPEND)
        os.dup2(err, 2)
        os.close(err)
    os.close(null)
    return [str(a) for a in req["argv"]]
