"""The backend interface: run a :class:`~sqm.mpc.protocols.program.SumProgram` over the clients' integer inputs.

A job has one server (party 0, no data, the only receiver of the result) and ``n`` clients.  Client ``j``
is described by a picklable callable returning ``(block, addend)``: its integer columns (records x its
variables, int64) and an integer vector added to the output; with ``Job.align_ids`` it returns
``(block, addend, ids_digest)`` and the clients check among themselves that their records are the same
records in the same order before anything is shared.  In the MPyC backend each client calls its
own callable in its own process, so nothing but shares ever leaves it; the plain backend calls them all
in one process.  Given the same callables (same seeds), every backend returns the same integers.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence

import numpy as np

from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.program import SumProgram

ClientInput = Callable[[], tuple[np.ndarray, np.ndarray]]


@dataclass
class Job:
    program: SumProgram
    clients: Sequence[ClientInput]
    col_bounds: Sequence[int]  # public: |x[i, j]| <= col_bounds[j] for every integer input column j
    n_records: int  # public upper bound on the record count
    addend_bound: int = 0  # public: |sum of the clients' addends| <= addend_bound (except w.p. < 2^-64)
    var_owner: Sequence[int] | None = None  # client index owning each variable (in client order)
    align_ids: bool = False  # clients return (block, addend, ids_digest); digests must agree before sharing
    # records per input chunk (public; None: sqm.mpc.protocols.stream.chunk_rows of the columns)
    chunk_rows: int | None = None
    verify_sharing: bool = False  # check every client's input sharing has degree <= t before any output opens
    row_limit: int | None = None  # keep only records with sum_j x_ij^2 <= row_limit (secure comparison, in secret)
    # each client proves its values within col_bounds and, per (columns, limit), each record's squared norm over
    # those columns (one client's) at most limit (sqm.mpc.protocols.input_proof); None: no proof
    input_limits: Sequence[tuple[Sequence[int], int]] | None = None
    # each client's addend is this public law's draw (a callable on a generator, ``size`` entries, a deterministic
    # repr) from a key of committed randomness, checked by another client (sqm.mpc.protocols.addend_check)
    addend_law: Callable | None = None

    def public(self) -> Job:
        """The job without client programs: what the server and every other party may see."""
        return dataclasses.replace(self, clients=[])

    def result_bound(self) -> int:
        """What the field must hold: |each output| and, with a row limit, |row_limit - sum_j x_ij^2| for any
        record within the column bounds (:func:`sqm.mpc.protocols.compare.at_most` needs it below p / 2)."""
        bound = self.program.output_bound(self.col_bounds, self.n_records) + int(self.addend_bound)
        if self.row_limit is not None:
            bound = max(bound, int(self.row_limit), sum(int(b) ** 2 for b in self.col_bounds))
        if self.input_limits is not None:
            from sqm.mpc.protocols.input_proof import needed_bound

            bound = max(bound, needed_bound(self.claims()))
        return bound

    def claims(self) -> list:
        """Each client's :class:`sqm.mpc.protocols.input_proof.Claim` (client order): its columns within
        [-col_bounds[j], col_bounds[j]] and the ``input_limits`` over its columns."""
        from sqm.mpc.protocols.input_proof import Claim

        owner = list(self.var_owner or [])
        for cols, _ in self.input_limits or ():
            if not cols or len({owner[int(j)] for j in cols}) != 1:
                from sqm.errors import UsageError

                raise UsageError(f"an input limit's columns {list(cols)} must be non-empty and one client's")
        out = []
        for c in range(max(owner, default=-1) + 1):
            mine = [j for j, o in enumerate(owner) if o == c]
            local = {j: k for k, j in enumerate(mine)}
            groups = tuple((tuple(local[j] for j in cols), int(lim)) for cols, lim in (self.input_limits or ())
                           if cols and all(j in local for j in cols))
            lo = tuple(-int(self.col_bounds[j]) for j in mine)
            out.append(Claim(lo, tuple(int(self.col_bounds[j]) for j in mine), groups))
        return out


@dataclass
class JobResult:
    values: np.ndarray  # object array of Python ints (signed)
    backend: str
    seconds: float
    bytes_sent: list[int] = field(default_factory=list)  # per party, party 0 (server) first
    field_bits: int | None = None
    max_rss_bytes: list[int] = field(default_factory=list)  # peak resident memory per party process
    party_seconds: list[float] = field(default_factory=list)  # time inside the protocol, per party
    phases: list[dict] = field(default_factory=list)  # seconds per protocol phase, per party

    @property
    def total_bytes(self) -> int:
        return int(sum(self.bytes_sent))


@dataclass
class FixedClient:
    """A client whose input is a given integer block and addend (None: zeros of length ``n_out``)."""

    block: np.ndarray
    n_out: int
    addend: np.ndarray | None = None

    def __call__(self):
        add = np.zeros(self.n_out, dtype=np.int64) if self.addend is None else np.asarray(self.addend)
        return np.asarray(self.block), add


class Backend:
    name = "abstract"

    def run(self, job: Job) -> JobResult:  # pragma: no cover - interface
        raise NotImplementedError


class PlainBackend(Backend):
    """SIMULATION: the job's party programs (:class:`sqm.mpc.protocols.context.EvaluateJob`) run in this process by
    :func:`sqm.mpc.protocols.inprocess.run_in_process`, which evaluates in the clear (the ideal functionality).

    For experiments and sweeps.  It runs the same checks and returns bit for bit what the MPyC parties compute
    (tests prove it), but it sees every client's data: never use it where the parties do not trust one process.
    """

    name = "plain"

    def run(self, job: Job) -> JobResult:
        from sqm.mpc.protocols.inprocess import run_in_process

        t0 = time.perf_counter()
        pub = job.public()
        programs = [EvaluateJob(pub)] + [EvaluateJob(pub, c) for c in job.clients]
        records = run_in_process(programs)
        return JobResult(values=records[0]["result"], backend=self.name, seconds=time.perf_counter() - t0,
                         bytes_sent=[0] * (len(job.clients) + 1),
                         party_seconds=[float(r["seconds"]) for r in records])
