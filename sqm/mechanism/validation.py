"""Argument checks shared by the mechanism and the applications: each raises ValueError (the privacy parameters:
:class:`sqm.errors.UsageError`, a ValueError) naming the problem; every privacy parameter's domain is declared once
(:data:`DOMAINS`)."""
from __future__ import annotations

import math

import numpy as np

from sqm.errors import UsageError


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise UsageError(f"{name} contains {bad} NaN or infinite value(s)")


class Interval:
    """A parameter's domain, in scikit-learn's constraint style (``sklearn.utils._param_validation.Interval``):
    real numbers (not bools, not NaN) between ``low`` and ``high``, ``closed`` "neither", "left", "right" or
    "both".  Written here because the mechanism's modules must not import scikit-learn (party processes)."""

    def __init__(self, low: float, high: float, closed: str):
        if closed not in ("neither", "left", "right", "both"):
            raise UsageError(f"closed must be neither, left, right or both, got {closed!r}")
        self.low, self.high, self.closed = float(low), float(high), closed

    def __contains__(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or math.isnan(v):
            return False
        lo_ok = v >= self.low if self.closed in ("left", "both") else v > self.low
        hi_ok = v <= self.high if self.closed in ("right", "both") else v < self.high
        return bool(lo_ok and hi_ok)

    def describe(self) -> str:
        lo = ">=" if self.closed in ("left", "both") else ">"
        if self.high == math.inf:
            return f"be > {self.low:g} (math.inf allowed)" if self.closed in ("right", "both") else \
                f"be a finite number {lo} {self.low:g}"
        return (f"lie in {'[' if lo == '>=' else '('}{self.low:g}, {self.high:g}"
                f"{']' if self.closed in ('right', 'both') else ')'}")


# Every privacy parameter's domain, declared once and used by the mechanism, the accountant, the ledger, the
# estimators, the job tasks and the command line.
DOMAINS = {
    "epsilon": Interval(0, math.inf, "neither"),
    "epsilon or inf": Interval(0, math.inf, "right"),  # math.inf: no privacy (the non-private references)
    "delta": Interval(0, 1, "neither"),
    "gamma": Interval(1, math.inf, "left"),
    "mu": Interval(0, math.inf, "neither"),
}


def check_param(name: str, value, label: str | None = None):
    """``value`` if it lies in :data:`DOMAINS` [name], else :class:`sqm.errors.UsageError` naming ``label`` (default
    ``name``), the domain and the value."""
    domain = DOMAINS[name]
    if value not in domain:
        raise UsageError(f"{label or name.split()[0]} must {domain.describe()}, got {value!r}")
    return value


def check_gamma(gamma: float) -> None:
    check_param("gamma", gamma)


def check_epsilon(epsilon: float) -> None:
    check_param("epsilon", epsilon)


def check_delta(delta: float) -> None:
    check_param("delta", delta)


def check_mu(mu: float) -> None:
    check_param("mu", mu, "mu (the Skellam noise parameter)")


def check_positive(value: float, name: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be > 0, got {value!r}")
