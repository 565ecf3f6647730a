"""Argument checks shared by the mechanism and the applications: each raises ValueError (the privacy parameters:
:class:`sqm.errors.UsageError`, a ValueError) naming the problem; every privacy parameter's domain is declared once
(:data:`sqm.mechanism.params.DOMAINS`)."""
from __future__ import annotations

import math

import numpy as np

from sqm.errors import UsageError

# the domains and their constraint class live with the parameters' declarations (sqm.mechanism.params)
from .params import DOMAINS, Interval  # noqa: F401  (re-exported: one declaration)


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise UsageError(f"{name} contains {bad} NaN or infinite value(s)")


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


def check_base_rate(base_rate: float) -> float:
    """``base_rate`` (logistic regression's expansion point p0, in (0, 1)) as a float, else a UsageError."""
    return float(check_param("base_rate", base_rate))


def check_mu(mu: float) -> None:
    check_param("mu", mu, "mu (the Skellam noise parameter)")


def check_positive(value: float, name: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be > 0, got {value!r}")
