"""Shard workers: a party's share of a secure evaluation split between several processes of its own.

The inner-product evaluation multiplies shares locally and needs no communication per record beyond the input
sharing, so the records can be split: with ``S`` shards,

1. the aligned records are cut into ``S`` contiguous ranges of positions (:func:`shard_ranges`, public, the
   same at every party: position k is the k-th record of the record alignment's order);
2. party i runs ``S`` worker processes; worker s of every party forms one MPC session of its own (shard s:
   the same parties, indices, threshold and field as the job, its own job id :func:`shard_job_id`, the same
   TLS identities), in which the clients share shard s's records chunk by chunk and the workers add their
   moments (:meth:`sqm.mpc.protocols.evaluation.Evaluation.shard_moments`);
3. each worker returns its shares of its shard's moments to its own party (nothing crosses to another
   organisation: the worker is the party's own process), which adds them: shares of a sum, at the same
   point, in the same field;
4. the party goes on in its own session as it would after its last chunk: the summands (the addend: the
   noise share, drawn once) in one exchange, one degree reduction, one opening.  The noise is added once.

A client's workers round its records exactly as it would (:meth:`sqm.mpc.protocols.stream.ChunkedInput.part`), so the
release is bit for bit the unsharded one's for the same randomness (tests/test_shards.py).  What a worker is
handed of its party's secrets: for a client, the keys of the rounding coins of the blocks of records its shard
touches (:mod:`sqm.mechanism.coins`), never the party's generator or the coins' master key, so never its noise
share; with the sharing check, seeds derived for its shard alone (:func:`shard_seeds`); at the server under
membership hiding, the indicator of its shard's positions.  The party's TLS key is read by each worker from the
party's own ``--ssl-dir`` on the host that runs it (a path on its command line, never the key itself).  Any shard
failing (a worker killed, a worker's peer lost, a refusal inside a shard) makes the party abort the whole job naming the
shard; the other parties see their own workers of that shard fail, or the abort notice, and name it too; nothing is
released.

Contiguous ranges, not a keyed hash of the position: positions are public after the alignment, so any public
assignment reveals nothing; ranges let each worker read only its part of a file sorted by id (Parquet row
groups before it are skipped) and start the rounding stream with one jump, and they balance to one record.

Engines (:class:`ShardRunner`): the party's own local processes by default (each a ``python -m
sqm.mpc.net.party`` process in a private folder that dies with the party); or a Dask distributed cluster of the
party's own (``engine="tcp://scheduler:8786"``), whose workers each start the same process where the cluster
places them.  An engine never spans organisations and never runs anything a peer sent: it runs this party's
own pickled programs, and the shard sessions authenticate as the party's sessions do (TLS, job id).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import sys
import time
from dataclasses import dataclass

import numpy as np

from sqm.errors import UsageError
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.net.abort import ProtocolError, party_label
from sqm.mpc.protocols.evaluation import Evaluation
from sqm.mpc.protocols.psi import Union

POLL_S = 0.05  # how often a party looks at its shard workers
SETTLE_S = 1.0  # a worker that lost a peer: how long its party waits for the cause before naming the shard


def shard_ranges(n_rows: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous ranges of positions covering ``0..n_rows`` in order, sizes differing by at most one."""
    n_rows, count = int(n_rows), int(count)
    if count < 1:
        raise UsageError(f"a job runs on at least one shard, got {count}")
    cuts = [n_rows * s // count for s in range(count + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=False))


def shard_job_id(job_id: str, shard: int) -> str:
    """The job id of shard ``shard``'s session: derived from the job's (fresh per job), distinct per shard, so a
    worker of one shard or job never joins another's session."""
    return hashlib.sha256(f"{job_id}/shard {int(shard)}".encode()).hexdigest()[:32]


def shard_seeds(seeds: dict, shard: int) -> dict:
    """The sharing check's seeds for shard ``shard``'s workers: SHA-256 of each seed and the shard, so that a worker
    holds only its own shard's coefficients' keys (every party but the client derives the same ones), never the
    seeds of its party's session."""
    return {c: hashlib.sha256(b"sqm shard check seed\x00" + bytes(v) + int(shard).to_bytes(8, "little")).digest()[:16]
            for c, v in seeds.items()}


def worker_addresses(address: str, count: int) -> list[str]:
    """A party's default worker addresses: the ports after its own (``host:port+1`` ... ``host:port+count``)."""
    from sqm.mpc.net.session import split_address

    host, port = split_address(address)
    if port + count > 65535:
        raise UsageError(f"party address {address}: no room for {count} worker ports after it; give the "
                         f"workers' addresses")
    host = f"[{host}]" if ":" in host else host
    return [f"{host}:{port + 1 + s}" for s in range(count)]


async def agree_worker_addresses(ctx, count: int, own) -> list[list[str]]:
    """Every party's workers' addresses, shard by shard, from each party itself: this party sends its own ``own``
    (``count`` addresses, from its operator) to every peer and receives theirs, over the job's authenticated
    session (a job file names no party's workers).  Refused, naming the party: a list of another length or a
    malformed address, or an address that is a party's or another worker's.  A party that tells two peers different
    addresses is caught when the shard sessions compare their job descriptions (every worker lists the same
    addresses, :func:`sqm.mpc.net.session.agree_job`)."""
    from sqm.mpc.net import wire
    from sqm.mpc.net.session import split_address

    def ok(v) -> bool:
        if not (isinstance(v, list) and len(v) == count and all(isinstance(a, str) and 0 < len(a) <= 300 for a in v)):
            return False
        try:
            return all(0 < split_address(a)[1] < 65536 for a in v)
        except (ValueError, UsageError):
            return False

    own = [str(a) for a in own]
    others = [q for q in range(ctx.M) if q != ctx.pid]
    got = await ctx.send_recv({q: own for q in others}, others,
                              wire.value(list, f"{count} worker addresses 'host:port'", ok), "worker addresses")
    table = [own if q == ctx.pid else got[others.index(q)] for q in range(ctx.M)]
    parties = [getattr(getattr(ctx, "rt", None), "parties", None) or []][0]
    seen: dict[str, int] = {f"{p.host}:{p.port}": q for q, p in enumerate(parties) if getattr(p, "host", None)}
    for q, addrs in enumerate(table):
        for a in addrs:
            if seen.setdefault(a, q) != q or addrs.count(a) > 1:
                whose = "twice" if seen[a] == q else f"which is also {party_label(seen[a])}'s"
                raise ProtocolError(f"refused before any share was sent: {party_label(q)} announces worker address "
                                    f"{a}, {whose}")
    return table


@dataclass
class ShardWork(PartyProgram):
    """Shard ``shard``'s part of one evaluation at one party (public parameters, and at a client its ``part``
    of the records): run in the shard's session by :meth:`sqm.mpc.protocols.evaluation.Evaluation.shard_moments`."""

    shard: int
    count: int
    start: int
    stop: int
    program: object
    p: int
    widths: list | None
    rows_per_chunk: int
    workers: list
    bounds: object
    n_out: int
    part: object
    job_digest: str
    membership: tuple | None = None  # membership hiding: (m, None at a client; the server's indicator here or None)
    seeds: dict | None = None  # the sharing check's seeds this party holds (secret: never in describe)
    row_limit: int | None = None  # the job's row limit (sqm.mpc.protocols.compare): public, in describe

    def describe(self) -> str:
        return (f"shard {self.shard} of {self.count}: records [{self.start}, {self.stop}) of job "
                f"{self.job_digest[:16]}, {int(self.p).bit_length()}-bit field, {self.rows_per_chunk} records per "
                f"chunk, workers {list(self.workers)}" + (", membership hidden" if self.membership else "")
                + (", sharings checked" if self.seeds is not None else "")
                + (f", row limit {int(self.row_limit)}" if self.row_limit is not None else ""))

    async def run(self, ctx):
        union = None
        if self.membership is not None:  # membership hiding: the server's indicator of this shard's positions
            union = Union(self.stop - self.start, self.membership[0],
                          indicator=None if self.membership[1] is None else np.asarray(self.membership[1], dtype=bool))
        row_limit = None if self.row_limit is None else int(self.row_limit)
        return await Evaluation(ctx, membership=union, row_limit=row_limit).shard_moments(self)


class ShardFailed(ProtocolError):
    """A shard of the job failed at this party (its worker died, or stopped with an error): the whole job is
    aborted, nothing released."""


class ShardRunner:
    """This party's shard workers for a job of ``count`` shards.  ``addresses[i][s]``: where party i's worker of
    shard s listens (public: every party holds the same table).  ``engine``: None (local processes) or a
    Dask scheduler's address (``tcp://host:8786``) of this party's own cluster."""

    def __init__(self, count: int, addresses, engine: str | None = None, wrap=None):
        self.count = int(count)
        if self.count < 2:
            raise UsageError(f"shard workers are for 2 or more shards, got {count}")
        self.addresses = [list(a) for a in addresses]
        if any(len(a) != self.count for a in self.addresses):
            raise UsageError(f"every party needs {self.count} worker addresses, got "
                             f"{[len(a) for a in self.addresses]}")
        self.engine = engine
        self.wrap = wrap  # BENCH AND TESTS ONLY: applied to each shard's program (fault injection in a worker)
        self.records: list[dict] = []  # each worker's record (timings, memory) once the shards are done
        self._reported: int | None = None  # the chunks last reported to the progress callback

    def public(self):
        return (self.count, tuple(tuple(a) for a in self.addresses))

    async def moments(self, evaluation, prog, p: int, n_rows: int, rows_per_chunk: int, widths, feed, workers,
                      check=None):
        """This party's shares of the moments over every record (None at a party that is no worker), made by its
        shard workers: shard s's records go through one MPC session of the parties' s-th workers, each returns
        its shares of its records' moments to its own party, which adds them (shares of a sum at the same
        point, in the same field).  ``feed``: a client's input (its parts round its records exactly as it
        would: :meth:`sqm.mpc.protocols.stream.ChunkedInput.part`), None at the server; ``check``: the sharing check of
        the party's session, to which the workers' sums are added.  ``evaluation``: the party's
        (:class:`sqm.mpc.protocols.evaluation.Evaluation`), whose options its workers take."""
        ctx = evaluation.tr
        works = []
        for s, (a, b) in enumerate(shard_ranges(n_rows, self.count)):
            part, bounds = None, None
            if feed is not None:
                own = feed.inp.n_rows
                part, bounds = feed.inp.part(min(a, own), min(b, own)), feed.bounds
            mask = None  # membership hiding: (m, the server's indicator of this shard's positions, None elsewhere)
            if evaluation.membership is not None:
                ind = evaluation.membership.indicator
                mask = (evaluation.membership.intersection, None if ind is None else ind[a:b].copy())
            works.append(ShardWork(s, self.count, a, b, prog, p, widths, rows_per_chunk, workers, bounds,
                                   prog.n_out, part, ctx.job_digest, mask,
                                   None if check is None else shard_seeds(check.seeds, s), evaluation.row_limit))
        results = await self.run(ctx, works, evaluation.on_chunk)
        ctx.worker_records = self.records
        ctx.phase("shards")
        if feed is not None:
            feed.inp.parts_taken([r["counts"] for r in results])
        if check is not None:  # the workers' sums of the check, shard by shard
            for r in results:
                for c, v in r["lam"].items():
                    check.lam[int(c)] = (check.lam[int(c)] + int(v)) % p
        return sum_moments(results, p) if ctx.pid in workers else None

    def command(self, ctx, s: int, program_file: str, result_file: str) -> list[str]:
        from sqm.mpc.net.launch import party_command

        st = ctx.session
        cmd = party_command(program_file, ctx.pid, ",".join(a[s] for a in self.addresses), result_file,
                            st.timeout, st.connect_timeout, st.ssl_dir, shard_job_id(st.job_id, s), st.job_name,
                            st.insecure_plaintext, st.pins)
        return cmd + ["--idle-timeout", str(st.idle_timeout), "--progress-timeout", str(st.progress_timeout)]

    async def run(self, ctx, works: list, on_chunk=None) -> list[dict]:
        """Run every shard's work on this party's workers; their results in shard order.  Raises
        :class:`ShardFailed` naming the first shard that failed (every worker of this party is then stopped),
        or what the job's own session raises if a peer aborts or is lost meanwhile."""
        if ctx.session is None:
            raise UsageError("shard workers need a party process's session settings (sqm.mpc.net.party)")
        from sqm.mpc.net.liveness import busy

        with busy():  # peers waiting on this party meanwhile see it computing, not stalled
            if self.engine is None:
                return await self._run_local(ctx, works, on_chunk)
            return await self._run_dask(ctx, works, on_chunk)

    async def _run_local(self, ctx, works, on_chunk=None) -> list[dict]:
        from sqm.mpc.net.launch import Launch, party_env

        with Launch(prefix="sqm-shards-") as launch:
            procs, files = [], []
            env = party_env(blas_threads=1)
            for w in works:
                prog = launch.write(f"shard{w.shard}.program", w if self.wrap is None else self.wrap(w))
                res = launch.path(f"shard{w.shard}.result")
                procs.append(launch.start(self.command(ctx, w.shard, prog, res), env,
                                          messages=launch.path(f"shard{w.shard}.log")))
                files.append(res)
            seen: dict[int, float] = {}  # shard -> when its worker's failure was first seen
            while True:
                _check_session()
                codes = [p.poll() for p in procs]
                for s, c in enumerate(codes):
                    if c not in (None, 0):
                        seen.setdefault(s, time.monotonic())
                if seen and time.monotonic() - min(seen.values()) >= self._settle(codes, seen):
                    s = min(seen, key=lambda k: (seen[k], k))  # the first seen to fail
                    code = codes[s]
                    assert code is not None  # seen: it exited
                    why = _why(code, launch.read_text(f"shard{s}.log"))
                    raise ShardFailed(f"{party_label(ctx.pid)}: shard {s} of {self.count} failed: its worker "
                                      f"{why}; job aborted, nothing released",
                                      public=f"shard {s} of {self.count} failed at {party_label(ctx.pid)} "
                                             f"({_public_why(code)}); job aborted, nothing released")
                self._progress(on_chunk, works, [c == 0 for c in codes])
                if all(c == 0 for c in codes):
                    break
                await asyncio.sleep(POLL_S)
            records = [launch.load(f) for f in files]
        return self._results(records)

    def _progress(self, on_chunk, works, done) -> None:
        """The evaluation's progress callback (``on_chunk``) in chunks: those of the shards done so far."""
        if on_chunk is None:
            return
        from sqm.mpc.protocols.stream import chunk_count

        sizes = [chunk_count(w.stop - w.start, w.rows_per_chunk) for w in works]
        finished = sum(k for k, d in zip(sizes, done, strict=False) if d)
        if finished != self._reported:
            self._reported = finished
            on_chunk(finished, sum(sizes))

    @staticmethod
    def _settle(codes, seen) -> float:
        """Seconds to wait, once a shard failed, before naming it: none if a worker of this party died or
        refused itself; a moment if its workers only lost a peer (the job's session may meanwhile bring the
        abort notice of the party whose worker failed first, which names the cause)."""
        from sqm.errors import EXIT_LOST, EXIT_TIMEOUT

        own = any(codes[s] not in (EXIT_LOST, EXIT_TIMEOUT) for s in seen)
        return 0.0 if own else SETTLE_S

    def _results(self, records) -> list[dict]:
        self.records = [{k: v for k, v in r.items() if k != "result"} for r in records]
        return [r["result"] for r in records]

    async def _run_dask(self, ctx, works, on_chunk=None) -> list[dict]:
        try:
            from distributed import Client
        except ImportError:
            raise UsageError("this party's shard engine is a Dask cluster, but the 'distributed' package is not "
                             "installed here: pip install 'sqm-vfl[scale]' (or 'distributed')") from None
        loop = asyncio.get_running_loop()
        try:
            client = await loop.run_in_executor(None, lambda: Client(self.engine,
                                                                     timeout=ctx.session.connect_timeout))
        except Exception as e:  # noqa: BLE001  (OSError, TimeoutError, a malformed address: all the same here)
            raise ShardFailed(f"{party_label(ctx.pid)}: could not reach its Dask scheduler {self.engine} "
                              f"({type(e).__name__}: {e}); job aborted, nothing released",
                              public=f"{party_label(ctx.pid)} could not start its shard workers; job aborted, "
                                     f"nothing released") from None
        futures = []
        try:
            slots = sum((await loop.run_in_executor(None, client.nthreads)).values())
            if slots < self.count:  # each shard's session needs every party's worker of it at once
                raise ShardFailed(f"{party_label(ctx.pid)}: its Dask cluster {self.engine} has {slots} worker "
                                  f"thread(s); the job's {self.count} shards must all run at once; job aborted, "
                                  f"nothing released", public=f"{party_label(ctx.pid)} has fewer shard workers "
                                  f"than the job's {self.count} shards; job aborted, nothing released")
            for w in works:
                blob = pickle.dumps(w if self.wrap is None else self.wrap(w), protocol=5)
                argv = self.command(ctx, w.shard, "{program}", "{result}")
                futures.append(client.submit(run_worker_process, argv, blob, pure=False,
                                             key=f"sqm-shard-{shard_job_id(ctx.session.job_id, w.shard)}-"
                                                 f"party{ctx.pid}"))
            while True:
                _check_session()
                states = [f.status for f in futures]
                failed = [s for s, st in enumerate(states) if st in ("error", "cancelled", "lost")]
                if failed:
                    s = failed[0]
                    exc = await loop.run_in_executor(None, futures[s].exception)
                    raise ShardFailed(f"{party_label(ctx.pid)}: shard {s} of {self.count} failed on the Dask "
                                      f"cluster {self.engine}: {exc}; job aborted, nothing released",
                                      public=f"shard {s} of {self.count} failed at {party_label(ctx.pid)}; job "
                                             f"aborted, nothing released")
                self._progress(on_chunk, works, [st == "finished" for st in states])
                if all(st == "finished" for st in states):
                    break
                await asyncio.sleep(POLL_S)
            records = await loop.run_in_executor(None, lambda: client.gather(futures))
        finally:
            for f in futures:
                f.cancel()
            await loop.run_in_executor(None, client.close)
        return self._results(records)


def run_worker_process(argv: list[str], program: bytes) -> dict:
    """On an engine's worker (this party's own cluster): run one shard worker process from ``argv`` (its
    ``{program}`` and ``{result}`` placeholders filled with files in a private folder here) and return its
    record.  Raises RuntimeError with the worker's last message if it fails."""
    from sqm.mpc.net.launch import Launch, party_env

    with Launch(prefix="sqm-shard-") as launch:
        prog = launch.path("program")
        with os.fdopen(os.open(prog, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(program)
        res = launch.path("result")
        argv = [a.replace("{program}", prog).replace("{result}", res) for a in argv]
        argv[0] = sys.executable  # this worker's interpreter
        p = launch.start(argv, party_env(blas_threads=1), messages=launch.path("log"))
        code = p.wait()
        launch.reaped(p)
        if code != 0:
            raise RuntimeError(f"its worker {_why(code, launch.read_text('log'))}")
        return launch.load(res)


def _check_session() -> None:
    from sqm.mpc.net.liveness import raise_if_job_over

    raise_if_job_over()


def _public_why(code: int) -> str:
    if code < 0:
        return f"its worker was killed by signal {-code}"
    from sqm.errors import NAMES

    return f"its worker stopped: {NAMES.get(code, f'exit {code}')}"


def _why(code: int, log: str) -> str:
    """A failed worker's story for this party's operator: how it ended and its last message."""
    from sqm.mpc.net.launch import _last_words

    words = _last_words(log, code)
    if code < 0:
        return f"was killed by signal {-code}" + ("" if words == "(no message)" else f" (it said: {words})")
    from sqm.errors import NAMES

    return f"stopped ({NAMES.get(code, f'exit {code}')}): {words}"


def sum_moments(results, p: int):
    """This party's moments over every shard (None where it is no worker)."""
    from sqm.mpc.shares import modarith

    total = None
    for r in results:
        m = r["moments"]
        if m is not None:
            total = m if total is None else modarith.add_mod(total, np.asarray(m), p)
    return total


__all__ = ["ShardFailed", "ShardRunner", "ShardWork", "agree_worker_addresses", "run_worker_process", "shard_job_id",
           "shard_ranges", "worker_addresses"]
