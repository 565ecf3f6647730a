"""SIMULATION: a job's party programs run in one process, on one event loop: the ideal functionality.

:func:`run_in_process` takes exactly the party programs that :func:`sqm.mpc.net.launch.run_parties` starts as real
MPyC processes and runs their coroutines side by side, each with an :class:`InProcessTransport`: the same
interface as :class:`sqm.mpc.net.transport.PartyTransport`.  What differs is only below that interface:

- messages travel through in-memory mailboxes instead of TCP, as the same typed frames (:mod:`sqm.mpc.net.wire`),
  checked by the same validators, so a malformed or unexpected frame is refused exactly as between processes;
- an evaluation (:meth:`sqm.mpc.protocols.evaluation.Evaluation.evaluate`) runs the same public agreement and
  client checks as the real protocol, then hands the outputs to :meth:`InProcessTransport.ideal_outputs`, which
  computes them in the clear (the ideal functionality of BGW): the exact integers, reduced into the same field,
  which is what the parties reconstruct; the sharing primitives (:mod:`sqm.mpc.protocols.sharing`) are the real
  ones over the mailboxes, for programs with their own secure kernels.

So a simulation is never a second implementation of an app: it is the app's one party program on another
runner, and for the same program seeds the result is bit for bit what the real parties compute (each app
keeps one test proving it).  Every party sees every other party's data in this process: never use it
between parties that do not trust one process.

Failures mirror real processes: a party whose program raises tells every other party why (the same abort
notice text), exit codes are classified by :func:`sqm.mpc.net.party.failure`, and :class:`sqm.mpc.net.launch.MPCError`
is raised with the same message format and per-party codes.  A deadlock (parties making different sequences of
exchanges, or a party waiting on one that has finished) is detected at once and refused, naming the waiting
parties: in one process there is no silent peer to wait for.

Written by hand because no library offers an in-memory transport for MPyC's message exchanges.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time

import numpy as np

from sqm.mpc.net import wire
from sqm.errors import UsageError
from sqm.errors import EXIT_OK
from sqm.mpc.net.failures import Outcome
from sqm.mpc.net.launch import MPCError, new_job_id, require_two_clients
from sqm.mpc.net.party import abort_reason, describe, failure
from sqm.mpc.net.transport import PartyTransport
from sqm.mpc.net.abort import PartyAborted, ProtocolError, party_label
from sqm.mpc.shares.randomness import secure_generator
from sqm.mpc.net.session import agree_job, job_description
from sqm.mpc.protocols.stream import chunk_count

IN_PROCESS_ADDRESS = "in-process:{}"


class _Hub:
    """The mailboxes between M party coroutines: one FIFO per (sender, receiver), each frame labelled with the
    sender's exchange counter (like MPyC's program counter), so a receiver whose sequence of exchanges
    differs from the sender's is refused instead of reading the wrong message."""

    def __init__(self, M: int):
        self.M = M
        self.boxes: collections.defaultdict[tuple[int, int], collections.deque] = collections.defaultdict(
            collections.deque)  # (src, dst) -> deque of (label, frame)
        self.waiting: dict[int, tuple] = {}  # dst -> (src, future): the one receive each party may have pending
        self.finished: set[int] = set()
        self.abort_message: str | None = None
        self.bytes_sent = [0] * M

    def put(self, src: int, dst: int, label: int, frame) -> None:
        if isinstance(frame, (bytes, bytearray)):
            self.bytes_sent[src] += len(frame)
        w = self.waiting.get(dst)
        if w is not None and w[0] == src and not w[1].done():
            del self.waiting[dst]
            w[1].set_result((label, frame))
        else:
            self.boxes[(src, dst)].append((label, frame))

    async def get(self, src: int, dst: int):
        box = self.boxes[(src, dst)]
        if box:  # a frame that had arrived before an abort notice is still read, as over TCP
            return box.popleft()
        if self.abort_message is not None:
            raise PartyAborted(self.abort_message)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[dst] = (src, fut)
        self._check_deadlock()
        return await fut

    def _check_deadlock(self) -> None:
        live = [p for p in range(self.M) if p not in self.finished]
        if not all(p in self.waiting and not self.waiting[p][1].done() for p in live):
            return
        waits = "; ".join(f"{party_label(d)} waits for {party_label(s)}" for d, (s, _) in sorted(self.waiting.items()))
        which = "finished" if any(s in self.finished for s, _ in self.waiting.values()) else "nothing to send"
        self.fail_all(ProtocolError(f"the parties' sequences of exchanges differ ({waits}, which has "
                                    f"{which}); refused, nothing released"))

    def fail_all(self, exc: BaseException) -> None:
        for _, fut in list(self.waiting.values()):
            if not fut.done():
                fut.set_exception(exc)
        self.waiting.clear()

    def abort(self, message: str) -> None:
        """Another party aborted: every pending and later receive fails with its notice."""
        if self.abort_message is None:
            self.abort_message = message
            self.fail_all(PartyAborted(message))

    def done(self, pid: int) -> None:
        self.finished.add(pid)
        waiting_on_me = [d for d, (s, _) in self.waiting.items() if s == pid]
        if waiting_on_me or self.waiting:
            self._check_deadlock()


class InProcessTransport(PartyTransport):
    """:class:`sqm.mpc.net.transport.PartyTransport` for one party of an in-process run (see the module docstring).
    ``ideal``: an evaluation over it is the ideal functionality (:meth:`ideal_outputs`), else the real protocol
    over the mailboxes."""

    def __init__(self, hub: _Hub, pid: int, rng: np.random.Generator | None = None, ideal: bool = True):
        self.rt = None
        self.hub = hub
        self.ideal = ideal
        self._counter = 0
        self._setup(pid, hub.M, (hub.M - 1) // 2, rng or secure_generator())

    async def _transport(self, outgoing: dict, senders: list) -> list:
        self._counter += 1
        label = self._counter
        for pid, frame in outgoing.items():
            if pid != self.pid:
                self.hub.put(self.pid, pid, label, frame)
        got = []
        for s in senders:
            if s == self.pid:
                got.append(outgoing[s])
                continue
            their_label, frame = await self.hub.get(s, self.pid)
            if their_label != label:
                raise ProtocolError(f"party {self.pid}: {party_label(s)} sent exchange {their_label} where this "
                                    f"party is at exchange {label}: the parties' sequences of exchanges differ; "
                                    f"refused, nothing released")
            got.append(frame)
        return got

    async def ideal_outputs(self, evaluation, prog, p: int, n_rows: int, rows_per_chunk: int, feed, receivers):
        """The ideal functionality, in place of an ``evaluation``'s input phase, reduction and opening (every party
        at the same point): every client hands its records (all chunks, stacked) and addend to the receivers in
        the clear, which compute the program's exact integers and reduce them into the field, as the real
        protocol opens (every party follows it: the sharing check has nothing to check)."""
        mine = None
        if feed is not None:
            chunks = list(feed.blocks(rows_per_chunk))
            block = np.vstack(chunks)[:feed.inp.n_rows] if chunks else np.zeros((0, feed.inp.n_cols), np.int64)
            mine = (block, np.asarray(feed.summands()[0]))
        got = await self.ideal_inputs(mine, receivers)
        keep = None
        if evaluation.membership is not None:  # the server's indicator of the intersection, to the receivers
            out = {r: evaluation.membership.indicator for r in receivers} if self.is_server else {}
            ind = await self._transport(out, [0] if self.pid in receivers else [])
            keep = np.asarray(ind[0], dtype=bool) if ind else None
        self.phase("ideal evaluation (simulation)")
        if evaluation.on_chunk is not None:  # every chunk at once
            due = chunk_count(n_rows, rows_per_chunk)
            evaluation.on_chunk(due, due)
        if got is None:
            return None
        blocks = [np.asarray(b, dtype=np.int64) for b, _ in got]
        if evaluation.proofs is not None:  # the input proofs' ideal functionality: every claim checked in the clear
            evaluation.proofs.check_clear(blocks)
        X = np.hstack(blocks) if prog.n_vars else np.zeros((0, 0), np.int64)
        if keep is not None:  # membership hiding: the records of the intersection only
            X = X[keep[:X.shape[0]]] if prog.n_vars else X
        if evaluation.row_limit is not None:  # the records whose squared norm is within the limit only
            X = X[(X.astype(object) ** 2).sum(axis=1) <= evaluation.row_limit] if X.shape[0] else X
        y = prog.evaluate(X)
        for _, addend in got:
            y = y + np.asarray(addend).astype(object)
        y = np.asarray(y, dtype=object)  # reduced mod p as the real protocol's opening does (a deviating client's
        return np.array([int(v) % p for v in y.reshape(-1)], dtype=np.int64).reshape(y.shape)  # values wrap)

    async def ideal_inputs(self, my_input, receivers) -> list | None:
        """The ideal functionality's input step, for secure kernels of their own (an
        application's): each client hands ``my_input`` (any Python object; None at the
        server) to ``receivers`` in the clear; a receiver gets the clients' inputs in client order, any other
        party None.  SIMULATION only: a real :class:`~sqm.mpc.net.transport.PartyTransport` has no such step."""
        receivers = list(receivers)
        outgoing = {} if self.is_server else {r: my_input for r in receivers}
        if any(r != self.pid for r in outgoing):  # the inputs themselves: an output's shares (output_shares_next)
            self.mark_output_shares()
        got = await self._transport(outgoing, self.clients if self.pid in receivers else [])
        return got if self.pid in receivers else None

    async def abort(self, reason: str) -> None:
        self.hub.abort(f"{party_label(self.pid).capitalize()} aborted the job: {reason}")

    async def close(self) -> None:
        await self.send_recv({p: None for p in range(self.M)}, range(self.M), _nothing(), "closing barrier")


def _nothing():
    return wire.nothing


async def _run_all(programs, timeout: float, job_id: str, job_name: str | None, rngs, ideal: bool
                   ) -> tuple[list, list]:
    M = len(programs)
    hub = _Hub(M)
    addrs = [IN_PROCESS_ADDRESS.format(i) for i in range(M)]
    records: list = [None] * M
    errors: list = [None] * M

    async def one(i: int):
        ctx = InProcessTransport(hub, i, None if rngs is None else rngs[i], ideal)
        who = "server" if i == 0 else f"client {i}"
        try:
            digest = await agree_job(ctx, job_description(job_id, addrs, job_name, describe(programs[i])))
            t0 = time.perf_counter()
            try:
                result = await asyncio.wait_for(programs[i].run(ctx), timeout)
            except PartyAborted:
                raise
            except Exception as e:  # noqa: BLE001  the same notice a real party sends
                await ctx.abort(abort_reason(e, who))
                raise
            seconds = time.perf_counter() - t0
            # the result is complete: a peer's abort during the closing barrier cannot spoil it
            with contextlib.suppress(ProtocolError):
                await ctx.close()
            records[i] = {"result": result, "seconds": seconds, "phases": dict(ctx.phases),
                          "exchanges": ctx.exchanges, "waits": ctx.waits,
                          "bytes_sent": hub.bytes_sent[i], "job_digest": digest, "backend": "in-process"}
        except Exception as e:  # noqa: BLE001
            errors[i] = e
            if hub.abort_message is None:
                hub.abort(f"{party_label(i).capitalize()} aborted the job: {abort_reason(e, who)}")
        finally:
            hub.done(i)

    await asyncio.gather(*(one(i) for i in range(M)))
    return records, errors


def run_in_process(programs: list, timeout: float = 3600.0, min_clients: int = 1, job_id: str | None = None,
                   job_name: str | None = None, rngs=None, idle_timeout: float | None = None, ideal: bool = True
                   ) -> list[dict]:
    """SIMULATION: run ``programs[i]`` as party ``i`` (0 the server) in this process; return each party's record
    ``{"result", "seconds", "phases", "bytes_sent", ...}`` as :func:`sqm.mpc.net.launch.run_parties` does.

    ``min_clients``, ``job_id``, ``job_name`` and ``timeout`` mean what they mean there; ``rngs`` (optional) are
    the parties' share generators (default AES-CTR from OS entropy; they never change a result).
    ``ideal=False`` runs evaluations as the real BGW protocol over the in-memory mailboxes (shares, degree
    reduction, opening: every frame a real party would receive) instead of the ideal functionality.
    ``idle_timeout`` is accepted for signature parity and unused: one process has no silent peer, and a party
    waiting forever is a deadlock, refused at once.  Raises :class:`sqm.mpc.net.launch.MPCError` like ``run_parties``
    when any party fails (the same message as there: who failed and why, then one line per party; ``codes``).
    """
    M = len(programs)
    if M < 2:
        raise UsageError(f"a job needs a server and at least one client; got {M} parties")
    if min_clients >= 2:
        require_two_clients(M - 1)
    coro = _run_all(programs, timeout, job_id or new_job_id(), job_name, rngs, ideal)
    records, errors = _run_coroutine(coro)
    if any(e is not None for e in errors):
        codes, lines = {}, {}
        for i, e in enumerate(errors):
            codes[i], lines[i] = (EXIT_OK, "") if e is None else failure(e, "server" if i == 0 else f"client {i}",
                                                                           timeout)
        raise MPCError.of({i: Outcome(codes[i], [lines[i]] if lines[i] else []) for i in range(M)}) from None
    return records


def _run_coroutine(coro):
    """Run ``coro`` on a fresh event loop (in a worker thread if this thread already runs one, e.g. Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box = {}

    def target():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


__all__ = ["InProcessTransport", "run_in_process"]
