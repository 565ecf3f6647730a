"""The secure-sum primitive: each client inputs an integer array; only the server learns the elementwise sum.  And
:func:`get_backend`, the runner of a job by name."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sqm.mpc.protocols.backend import Backend, Job, JobResult, PlainBackend
from sqm.mpc.protocols.program import SumProgram
from sqm.errors import UsageError


def get_backend(backend: str | Backend, **options) -> Backend:
    """A backend by name ('plain': the simulation, 'mpyc': real party processes) or the instance itself."""
    if isinstance(backend, Backend):
        return backend
    from sqm.mpc.protocols.mpyc_backend import MPyCBackend

    factories = {"plain": PlainBackend, "mpyc": MPyCBackend}
    if backend not in factories:
        raise UsageError(f"unknown backend {backend!r}; choose one of {sorted(factories)}")
    return factories[backend](**options)


@dataclass
class SumClient:
    """A client whose only input is an integer vector (added to the output)."""

    values: np.ndarray

    def __call__(self):
        v = np.asarray(self.values)
        return np.zeros((0, 0), np.int64), v.reshape(-1)


def sum_job(clients, size: int, bound: int) -> Job:
    """Job for a secure sum of ``size``-vectors whose sum is bounded by ``bound`` in absolute value."""
    return Job(program=SumProgram(n_vars=0, n_out=int(size)), clients=list(clients), col_bounds=[],
               n_records=0, addend_bound=int(bound), var_owner=[])


def secure_sum(arrays, bound: int, backend: str | Backend = "mpyc") -> JobResult:
    """Elementwise sum of the clients' integer arrays (|sum| <= bound), revealed to the server only."""
    arrays = [np.asarray(a) for a in arrays]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise UsageError(f"clients' arrays have different shapes: {sorted(shapes)}")
    for a in arrays:
        if not np.issubdtype(a.dtype, np.integer):
            raise UsageError("secure_sum takes integer arrays")
    size = arrays[0].size
    return get_backend(backend).run(sum_job([SumClient(a) for a in arrays], size, bound))
