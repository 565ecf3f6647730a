"""Skellam noise: Sk(mu) = Pois(mu) - Pois(mu), exact int64 integers."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rng import SeedLike, make_rng
from sqm.errors import UsageError


# Above this mean numpy's Poisson sampler works in float64 near lam and its draws lose their low-order
# bits (at lam = 1e19 they are multiples of 2^10): we draw the deviation from floor(lam) instead.
LARGE_POISSON = 2.0 ** 40


def skellam(mu: float, size, seed: SeedLike = None) -> np.ndarray:
    """Draw int64 Skellam noise with parameter ``mu`` (mean 0, variance ``2 mu``); ``mu = 0`` gives zeros.

    Sk(mu) = Pois(mu) - Pois(mu).  For mu >= 2^40 each Poisson draw is taken as its exact integer offset
    from floor(mu) (:func:`poisson_offset`), so the difference is exact whatever the size of mu.
    """
    if not (np.isfinite(mu) and mu >= 0):
        raise UsageError(f"mu must be a finite number >= 0, got {mu!r}")
    rng = make_rng(seed)
    if mu == 0:
        return np.zeros(size, dtype=np.int64)
    if mu < LARGE_POISSON:
        return rng.poisson(mu, size).astype(np.int64) - rng.poisson(mu, size).astype(np.int64)
    return poisson_offset(mu, size, rng) - poisson_offset(mu, size, rng)


def _lam_h(d: np.ndarray, lam: float) -> np.ndarray:
    """lam * h(d / lam) with h(x) = (1 + x) log1p(x) - x, accurately for small |x| (series) and large."""
    x = d / lam
    small = np.abs(x) < 1e-3
    xs = np.where(small, x, 0.0)
    series = lam * xs * xs * (0.5 + xs * (-1 / 6 + xs * (1 / 12 + xs * (-1 / 20 + xs / 30))))
    xl = np.where(small, 0.0, x)
    direct = lam * ((1 + xl) * np.log1p(xl) - xl)
    return np.where(small, series, direct)


def poisson_offset(lam: float, size, rng: np.random.Generator) -> np.ndarray:
    """Pois(lam) - floor(lam) as int64, for lam >= 10 (meant for lam beyond float64's exact integers).

    Hörmann's PTRS transformed rejection (1993; numpy's own algorithm for lam >= 10) written in offset
    coordinates: the candidate is k = floor(lam) + j with j = floor((2a/us + b) U + frac(lam) + 0.43), and
    the acceptance test uses log P(k) = -lam h((k - lam) / lam) - log(2 pi k) / 2 - 1 / (12 k) + 1 / (360 k^3)
    (Stirling's series for log k!, h(x) = (1 + x) log1p(x) - x), which needs no quantity of size lam.
    """
    if not lam >= 10:
        raise UsageError(f"poisson_offset needs lam >= 10, got {lam!r}")
    lam = float(lam)
    lam0 = float(np.floor(lam))
    frac = lam - lam0
    slam = np.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_invalpha = np.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2)
    n = int(np.prod(size)) if np.ndim(size) else int(size)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        want = n - filled
        m = int(want * 1.15) + 16
        U = rng.random(m) - 0.5
        V = rng.random(m)
        us = 0.5 - np.abs(U)
        with np.errstate(divide="ignore", invalid="ignore"):
            jf = np.floor((2 * a / us + b) * U + frac + 0.43)
            ok = np.isfinite(jf) & (jf > -lam0) & (np.abs(jf) < 2.0 ** 62)
            j = np.where(ok, jf, 0.0)
            quick = ok & (us >= 0.07) & (vr >= V)
            maybe = ok & ~quick & ~((us < 0.013) & (us < V))
            d = j - frac
            k = lam + d
            logp = -_lam_h(d, lam) - 0.5 * np.log(2 * np.pi * k) - 1 / (12 * k) + 1 / (360 * k ** 3)
            accept = quick | (maybe & (np.log(V) + log_invalpha - np.log(a / (us * us) + b) <= logp))
        got = j[accept][:want].astype(np.int64)
        out[filled:filled + got.size] = got
        filled += got.size
    return out.reshape(size)


@dataclass(frozen=True)
class SkellamAddend:
    """A client's noise share as a public law for the verified addends (:mod:`sqm.mpc.protocols.addend_check`):
    ``size`` draws of Sk(mu) by :func:`skellam` (the exact sampler) on the generator it is given."""

    mu: float
    size: int

    def __call__(self, rng: np.random.Generator) -> np.ndarray:
        return skellam(self.mu, self.size, rng)


def skellam_share(mu: float, n_parties: int, size, seed: SeedLike = None) -> np.ndarray:
    """One party's share Sk(mu / n_parties); the sum of the ``n_parties`` independent shares is Sk(mu)."""
    if n_parties < 1:
        raise UsageError(f"n_parties must be >= 1, got {n_parties}")
    return skellam(mu / n_parties, size, seed)


def skellam_tail_bound(mu: float, dim: int, log2_failure: float = -64.0) -> int:
    """An integer k with P(max_t |Z_t| > k) < 2^log2_failure for Z ~ Sk^dim(mu).

    Chernoff: E exp(s Z) = exp(2 mu (cosh s - 1)), so for k >= 0
        P(Z >= k) <= exp(-I(k)),  I(k) = k asinh(k / (2 mu)) - 2 mu (sqrt(1 + (k / (2 mu))^2) - 1)
    (s = asinh(k / (2 mu))).  By symmetry and a union bound over the 2 * dim tails we need
    I(k) >= ln(2 dim) - log2_failure * ln 2.  The secure runtime sizes its field with this bound.
    """
    if mu < 0 or not np.isfinite(mu):
        raise UsageError(f"mu must be finite and >= 0, got {mu!r}")
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
