"""The backend interface: run a :class:`~mpc.program.SumProgram` over the clients' integer inputs.

A job has one server (party 0, no data, the only receiver of the result) and ``n`` clients.  Client ``j``
is described by a picklable callable returning ``(block, addend)``: its integer columns (records x its
variables, int64) and an integer vector added to the output; with ``Job.align_ids`` it returns
``(block, addend, ids_digest)`` and the clients check among themselves that their records are the same
records in the same order before anything is shared.  In the MPyC backend each client calls its
own callable in its own process, so nothing but shares ever leaves it; the plain backend calls them all
in one process.  Given the same callables (same seeds), every backend returns the same integers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .program import SumProgram

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

    def result_bound(self) -> int:
        return self.program.output_bound(self.col_bounds, self.n_records) + int(self.addend_bound)


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


def check_client_inputs(job: Job, inputs: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Validate the clients' integer blocks and addends against the program; return the blocks."""
    blocks = []
    counts = set()
    if job.align_ids:
        digests = {bytes(inp[2]) if len(inp) > 2 else None for inp in inputs}
        if len(digests) != 1 or None in digests:
            raise ValueError("clients' record ids differ (or are in a different order): refused")
    for j, (block, addend, *_) in enumerate(inputs):
        block = np.asarray(block)
        if block.ndim != 2:
            raise ValueError(f"client {j + 1} produced a block of shape {block.shape}, expected 2-D")
        counts.add(block.shape[0])
        addend = np.asarray(addend)
        if addend.shape != (job.program.n_out,):
            raise ValueError(f"client {j + 1} addend has shape {addend.shape}, expected ({job.program.n_out},)")
        blocks.append(block)
    if len(counts) > 1:
        raise ValueError(f"clients hold different record counts: {sorted(counts)}")
    n_vars = sum(b.shape[1] for b in blocks)
    if n_vars != job.program.n_vars:
        raise ValueError(f"clients hold {n_vars} columns in all, the program needs {job.program.n_vars}")
    return blocks


class PlainBackend(Backend):
    """SIMULATION: exact integer evaluation in one process, no secret sharing, no network.

    For experiments and sweeps.  It computes bit for bit what the MPyC parties compute (tests prove it),
    but it sees every client's data: never use it where the parties do not trust one process.
    """

    name = "plain"

    def run(self, job: Job) -> JobResult:
        t0 = time.perf_counter()
        inputs = [client() for client in job.clients]
        blocks = check_client_inputs(job, inputs)
        X = np.hstack(blocks) if blocks else np.zeros((0, 0), np.int64)
        y = job.program.evaluate(X)
        for _, addend, *_ in inputs:
            y = y + np.asarray(addend).astype(object)
        return JobResult(values=y, backend=self.name, seconds=time.perf_counter() - t0,
                         bytes_sent=[0] * (len(job.clients) + 1))


_BACKENDS: dict[str, Callable[..., Backend]] = {"plain": PlainBackend}


def register_backend(name: str, factory: Callable[..., Backend]) -> None:
    _BACKENDS[name] = factory


def get_backend(backend: str | Backend, **options) -> Backend:
    """A backend by name ('plain', 'mpyc') or the instance itself."""
    if isinstance(backend, Backend):
        return backend
    if backend == "mpyc" and "mpyc" not in _BACKENDS:
        from . import mpyc_backend  # noqa: F401  (registers itself)
    try:
        return _BACKENDS[backend](**options)
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; choose one of {sorted(set(_BACKENDS) | {'mpyc'})}") from None
