"""Stochastic rounding (Algorithm 2 of the SQM paper)."""
from __future__ import annotations

import numpy as np

from .rng import SeedLike, make_rng
from .validation import check_finite, check_gamma
from sqm.runtime.errors import UsageError


def stochastic_round(x, gamma: float = 1.0, seed: SeedLike = None) -> np.ndarray:
    """Scale ``x`` by ``gamma`` and round each entry up with probability equal to its fractional part.

    The result is an int64 array with ``E[result] = gamma * x`` and ``|result - gamma * x| < 1``
    entrywise.  The coins come from AES-128-CTR (:func:`sqm.mechanism.rng.make_rng`) keyed from OS entropy unless
    ``seed`` (an int, SeedSequence or Generator, used as given) is given.
    """
    x = np.asarray(x, dtype=np.float64)
    check_finite(x, "data")
    check_gamma(gamma)
    scaled = x * float(gamma)
    if scaled.size and np.max(np.abs(scaled)) >= 2.0**62:
        raise UsageError(f"gamma * |x| reaches {np.max(np.abs(scaled)):.3g}: too large for int64 quantization")
    rng = make_rng(seed)
    low = np.floor(scaled)
    frac = scaled - low
    up = rng.random(scaled.shape) < frac
    return (low.astype(np.int64) + up.astype(np.int64)).reshape(scaled.shape)
