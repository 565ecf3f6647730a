"""Argument checks shared by the mechanism: each raises ValueError naming the problem."""
from __future__ import annotations

import math

import numpy as np


def check_finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")


def check_gamma(gamma: float) -> None:
    if not (isinstance(gamma, (int, float, np.integer, np.floating)) and math.isfinite(gamma) and gamma >= 1):
        raise ValueError(f"gamma must be a finite number >= 1, got {gamma!r}")


def check_epsilon(epsilon: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")


def check_delta(delta: float) -> None:
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def check_mu(mu: float) -> None:
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu (the Skellam noise parameter) must be > 0, got {mu!r}")


def check_positive(value: float, name: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
