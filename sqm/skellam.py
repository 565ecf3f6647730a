"""Skellam noise: Sk(mu) = Pois(mu) - Pois(mu), exact int64 integers."""
from __future__ import annotations

import numpy as np

from .rng import SeedLike, make_rng


def skellam(mu: float, size, seed: SeedLike = None) -> np.ndarray:
    """Draw int64 Skellam noise with parameter ``mu`` (mean 0, variance ``2 mu``); ``mu = 0`` gives zeros."""
    if not (np.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu must be a finite number >= 0, got {mu!r}")
    rng = make_rng(seed)
    if mu == 0:
        return np.zeros(size, dtype=np.int64)
    return rng.poisson(mu, size).astype(np.int64) - rng.poisson(mu, size).astype(np.int64)


def skellam_share(mu: float, n_parties: int, size, seed: SeedLike = None) -> np.ndarray:
    """One party's share Sk(mu / n_parties); the sum of the ``n_parties`` independent shares is Sk(mu)."""
    if n_parties < 1:
        raise ValueError(f"n_parties must be >= 1, got {n_parties}")
    return skellam(mu / n_parties, size, seed)


def skellam_tail_bound(mu: float, dim: int, log2_failure: float = -64.0) -> int:
    """An integer k with P(max_t |Z_t| > k) < 2^log2_failure for Z ~ Sk^dim(mu).

    Chernoff: E exp(s Z) = exp(2 mu (cosh s - 1)), so for k >= 0
        P(Z >= k) <= exp(-I(k)),  I(k) = k asinh(k / (2 mu)) - 2 mu (sqrt(1 + (k / (2 mu))^2) - 1)
    (s = asinh(k / (2 mu))).  By symmetry and a union bound over the 2 * dim tails we need
    I(k) >= ln(2 dim) - log2_failure * ln 2.  The secure runtime sizes its field with this bound.
    """
    if mu < 0 or not np.isfinite(mu):
        raise ValueError(f"mu must be finite and >= 0, got {mu!r}")
    if mu == 0:
        return 0
    need = np.log(2.0 * max(dim, 1)) - log2_failure * np.log(2.0)

    def rate(k: float) -> float:
        r = k / (2.0 * mu)
        return k * np.arcsinh(r) - 2.0 * mu * (np.sqrt(1.0 + r * r) - 1.0)

    lo, hi = 0.0, max(1.0, 2.0 * mu)
    while rate(hi) < need:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if rate(mid) >= need:
            hi = mid
        else:
            lo = mid
    return int(np.ceil(hi))
