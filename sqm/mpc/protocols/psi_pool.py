"""A party's own local processes for the CPU work of its record alignment (:mod:`sqm.mpc.protocols.psi`).

The PSI's CPU work is per value and independent from one value to the next: hashing an id onto the curve
(SHA-512 and a Legendre symbol per candidate), blinding a value (an X25519 multiplication) and checking a
received value (a Legendre symbol).  A party that runs W workers (a job's ``"workers"``) does this work on W
local processes of its own while its alignment runs (:func:`pooled`): each batch is cut into W contiguous parts,
each part goes to one process, and the results are put back together in order.  So every value computed is the
one the party's own process would compute, every message, its order and its bytes are the same as without the
pool, and what each party receives (its view) is unchanged.

What the processes are given: the party's PSI key and its own ids, hashed points and received values; they are
the party's own processes on its own host (started here with the 'spawn' method, dying with the party), and they
run only the PSI's own functions on them (:mod:`sqm.mpc.protocols.psi` hands them over by name), never anything a
peer sent.  A process that dies makes the party abort the job naming itself (:class:`PoolFailed`); nothing is
released.

Small batches (below :data:`POOL_MIN` values) stay in the party's process: sending them would cost more than it
saves.  The pool is active for the task that entered :func:`pooled` (a context variable): in a simulation that runs
every party in one process, only the party that entered it uses it.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import resource
from collections import deque

import numpy as np

from sqm.errors import UsageError
from sqm.mpc.net.abort import ProtocolError, party_label

POOL_MIN = 4096  # values in a batch below which the party's own process does the work
_ACTIVE: contextvars.ContextVar[PSIPool | None] = contextvars.ContextVar("sqm_psi_pool", default=None)
_PR_SET_PDEATHSIG = 1


class PoolFailed(ProtocolError):
    """A local process of this party's record alignment died: the job is aborted, nothing released."""


def _init(parent: int) -> None:
    """A pool process's start (Linux): killed when the party's process dies, and gone at once if it already has."""
    import signal

    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux: the pool's shutdown remains
        pass
    if os.getppid() != parent:  # pragma: no cover - the party died before this process started
        os._exit(1)


def cuts(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering 0..n in order, sizes differing by at most one (empty ones left out)."""
    bounds = [n * s // parts for s in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=False) if b > a]


class PSIPool:
    """W local processes of party ``pid`` for its alignment's hashing, blinding and checks (module docstring).
    ``values``: how many values they hashed, blinded or checked (the party's record says the pool ran)."""

    def __init__(self, workers: int, pid: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.workers, self.pid, self.values = int(workers), int(pid), 0
        self._cpu0 = _children_cpu()
        self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init, initargs=(os.getpid(),))
        for _ in range(self.workers):  # every process starts now (its imports), not at the first batch it is sent
            self._executor.submit(int)

    def _failed(self, e: BaseException) -> PoolFailed:
        return PoolFailed(f"{party_label(self.pid)}: a local process of its record alignment (PSI) failed "
                          f"({type(e).__name__}: {e}); job aborted, nothing released",
                          public=f"a local process of {party_label(self.pid)}'s record alignment failed; job "
                                 f"aborted, nothing released")

    def _map(self, fn, args: list[tuple]) -> list:
        """``fn`` of each of ``args`` on the pool, waited for here (the event loop waits as it would for the same
        work in this process), in order."""
        from concurrent.futures.process import BrokenProcessPool

        try:
            futures = [self._executor.submit(fn, *a) for a in args]
            return [f.result() for f in futures]
        except (BrokenProcessPool, OSError) as e:
            raise self._failed(e) from None

    def parts(self, fn, values: np.ndarray) -> list[tuple[int, object]]:
        """``fn`` (a module-level function of the PSI: pickled by name) of each of W contiguous parts of ``values``,
        on the pool: (the part's first index, its result), in order.  An exception ``fn`` raises in a process is
        raised here, as it would be in this process."""
        cut = cuts(values.shape[0], self.workers)
        got = self._map(fn, [(values[a:b],) for a, b in cut])
        self.values += values.shape[0]
        return [(a, g) for (a, _), g in zip(cut, got, strict=False)]

    async def hash_ids(self, fn, ids, n: int | None, batch: int) -> np.ndarray:
        """``fn`` (:func:`sqm.mpc.protocols.psi.hash_ids`) of ``ids`` on the pool, the event loop free meanwhile (the
        caller marks this party busy): the ids are read ``size`` at a time (each process's share of a batch of
        ``batch``, or of the ``n`` ids), at most two parts per process in flight, the results concatenated in order."""
        from concurrent.futures.process import BrokenProcessPool

        size = max(1, batch // self.workers if n is None else min(batch, -(-n // self.workers)))
        it, parts = iter(ids), []
        flight: deque[asyncio.Future] = deque()
        try:
            while True:
                part = list(itertools.islice(it, size))
                if part:
                    flight.append(asyncio.wrap_future(self._executor.submit(fn, part)))
                    self.values += len(part)
                while flight and (len(flight) >= 2 * self.workers or len(part) < size):
                    parts.append(await flight.popleft())
                if len(part) < size:
                    break
        except (BrokenProcessPool, OSError) as e:
            for f in flight:
                f.cancel()
            raise self._failed(e) from None
        got = sum(p.shape[0] for p in parts)
        if n is not None and got != n:
            raise UsageError(f"{got} ids hashed, {n} expected")
        if not parts:
            return fn([])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> float:
        """Stop the processes (waiting for them); returns the CPU seconds they used."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        return _children_cpu() - self._cpu0


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def active(n: int | None) -> PSIPool | None:
    """The pool of the party running here, if it has one and ``n`` values (None: a count not known yet) are worth
    sending it; else None."""
    pool = _ACTIVE.get()
    return pool if pool is not None and (n is None or n >= POOL_MIN) else None


@contextlib.contextmanager
def pooled(workers: int | None, pid: int, log=None):
    """Within this block, party ``pid``'s PSI work runs on ``workers`` local processes (None or fewer than 2: in
    its own process, and this yields None).  ``log``: a logger told, at the end, how much ran there."""
    if workers is None or int(workers) < 2:
        yield None
        return
    pool = PSIPool(int(workers), pid)
    token = _ACTIVE.set(pool)
    try:
        yield pool
    finally:
        _ACTIVE.reset(token)
        cpu = pool.close()
        if log is not None:
            log.info(f"party {pid}: record alignment on {pool.workers} local processes: {pool.values:,} values "
                     f"hashed, blinded or checked there ({cpu:.1f} CPU s)")
