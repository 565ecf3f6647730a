"""The private correlation matrix's parameters, declared once (:mod:`sqm.mechanism.params`): the estimator's
defaults and checks, the job task's public parameters, the job file's task block and ``sqm correlation``'s
options.  Standard library only (``sqm --help`` and a party process import it)."""
from __future__ import annotations

import dataclasses

from sqm.mechanism.params import (DELTA, EPSILON, GAMMA, PARTY_BOUNDS, ROBUST_NOISE, ROW_NORM_BOUND, VERIFY_INPUTS,
                                  VERIFY_SHARING, Params)


@dataclasses.dataclass(frozen=True)
class CorrelationParams(Params):
    """One SQM release of the Gram of [X 1]: the privacy parameters, ``row_norm_bound`` c (every record's
    ||x||; the constant column is a group of its own, bounded by 1), each client's share ``party_bounds`` c_j,
    ``robust_noise``, ``verify_sharing`` and ``verify_inputs`` (:class:`sqm.mechanism.release.SQM`'s)."""

    statistic = "correlation"

    epsilon: float = EPSILON.field()
    delta: float = DELTA.field()
    gamma: float = GAMMA.field()
    # the release's column groups come from it (sqm.apps.correlation.statistic), not SQM's row_norm_bound
    row_norm_bound: float = ROW_NORM_BOUND.field(mechanism=False)
    party_bounds: tuple | None = PARTY_BOUNDS.field(mechanism=False)
    robust_noise: int = ROBUST_NOISE.field()
    verify_sharing: bool = VERIFY_SHARING.field()
    verify_inputs: bool = VERIFY_INPUTS.field()
