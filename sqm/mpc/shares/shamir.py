"""Vectorized Shamir secret sharing over F_p (p < 2^62) for M parties at evaluation points 1..M."""
from __future__ import annotations

import numpy as np

from sqm.mpc.shares import modarith
from sqm.errors import UsageError


def default_threshold(n_parties: int) -> int:
    """t = floor((M - 1) / 2): honest majority, and M >= 2t + 1 so products can be degree-reduced."""
    return (n_parties - 1) // 2


def share(secret, n_parties: int, t: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """Shares of shape (n_parties, *secret.shape): share i is f(i + 1) for a random degree-t f with f(0) = secret.

    f is evaluated at 0..t by Horner's rule, then walked to the points 1..M by forward differences
    (f(x + 1) = f(x) + Delta f(x), Delta^k f(x + 1) = Delta^k f(x) + Delta^(k+1) f(x), Delta^t f constant):
    t modular additions per party instead of t modular multiplications, each share written in place.  For
    t = 1 (3 or 4 parties) f(x) = secret + c x is walked directly: one addition per party.

    ``rng`` draws the t random coefficients, uniform in [0, p): the shares hide the secret only if it is a
    cryptographic generator (:func:`sqm.mpc.shares.randomness.secure_generator`, what every party uses).
    """
    secret = np.asarray(secret, dtype=np.int64)
    if not 0 <= t < n_parties:
        raise UsageError(f"threshold {t} must lie in [0, {n_parties})")
    coefs = [rng.integers(0, p, size=secret.shape, dtype=np.int64) for _ in range(t)]
    out = np.empty((n_parties,) + secret.shape, dtype=np.int64)
    if t == 1:  # f(x) = secret + c x: f(1) = secret + c, f(x + 1) = f(x) + c, each written in place
        modarith.add_mod(secret, coefs[0], p, out=out[0, ...])
        for i in range(1, n_parties):
            modarith.add_mod(out[i - 1, ...], coefs[0], p, out=out[i, ...])
        return out
    vals = [secret]
    for x in range(1, t + 1):
        acc = np.zeros(secret.shape, dtype=np.int64)
        for c in reversed(coefs):  # Horner: ((c_t x + c_{t-1}) x + ...) x + secret
            acc = modarith.add_mod(acc, c, p)
            if x != 1:
                acc = modarith.small_mul_mod(acc, x, p)
        vals.append(modarith.add_mod(acc, secret, p))
    diff = list(vals)  # becomes Delta^k f(0), k = 0..t
    for k in range(1, t + 1):
        for j in range(t, k - 1, -1):
            diff[j] = modarith.sub_mod(diff[j], diff[j - 1], p)
    for i in range(n_parties):  # step x -> x + 1, ascending k uses the not yet updated Delta^(k+1)
        diff[0] = modarith.add_mod(diff[0], diff[1], p, out=out[i, ...])  # f(i + 1), written in place
        for k in range(1, t):
            diff[k] = modarith.add_mod(diff[k], diff[k + 1], p)
    return out


def lagrange_at(points, x: int, p: int) -> list[int]:
    """Coefficients l_i with f(x) = sum_i l_i f(points[i]) for any f of degree < len(points)."""
    pts = [int(v) % p for v in points]
    if len(set(pts)) != len(pts):
        raise UsageError("evaluation points must be distinct mod p")
    out = []
    for i, xi in enumerate(pts):
        num, den = 1, 1
        for j, xj in enumerate(pts):
            if j != i:
                num = num * (x - xj) % p
                den = den * (xi - xj) % p
        out.append(num * pow(den, -1, p) % p)
    return out


def lagrange_at_zero(points, p: int) -> list[int]:
    """Coefficients l_i with f(0) = sum_i l_i f(points[i]) for any f of degree < len(points)."""
    if any(int(v) % p == 0 for v in points):
        raise UsageError("evaluation points must be distinct and non-zero mod p")
    return lagrange_at(points, 0, p)


def consistent(shares, points, degree: int, p: int) -> bool:
    """Whether the shares (len(points), ...) at ``points`` lie, entry by entry, on polynomials of degree <= ``degree``:
    the first degree + 1 points determine them, every further share is checked against its prediction."""
    shares = np.asarray(shares, dtype=np.int64)
    base = list(points[:degree + 1])
    for x, s in zip(points[degree + 1:], shares[degree + 1:], strict=False):
        pred = np.zeros(shares.shape[1:], dtype=np.int64)
        for l_i, b in zip(lagrange_at(base, x, p), shares[:degree + 1], strict=False):
            pred = modarith.add_mod(pred, modarith.scalar_mul_mod(b, l_i, p), p)
        if not np.array_equal(pred, s):
            return False
    return True


def reconstruct(shares, points, p: int) -> np.ndarray:
    """f(0) from shares (len(points), ...) at ``points``; needs more points than the degree."""
    shares = np.asarray(shares, dtype=np.int64)
    lam = lagrange_at_zero(points, p)
    signed = [int(v) if v <= p // 2 else int(v) - p for v in lam]  # small for points 1..M: +-binomials
    if sum(abs(v) for v in signed) * p < (1 << 63):  # sum_i l_i s_i exact in int64, one reduction at the end
        acc = shares[0] * np.int64(signed[0])
        for l_i, s in zip(signed[1:], shares[1:], strict=False):
            acc += s * np.int64(l_i)
        return np.asarray(acc % p)
    acc = np.zeros(shares.shape[1:], dtype=np.int64)
    for l_i, s in zip(lam, shares, strict=False):
        acc = modarith.add_mod(acc, modarith.scalar_mul_mod(s, l_i, p), p)
    return acc


def combine_subshares(subshares, points, p: int) -> np.ndarray:
    """BGW degree reduction at one receiver: sub-shares from every sender i of its degree-2t share,
    combined with the Lagrange coefficients of all senders' points.  Requires M >= 2t + 1."""
    return reconstruct(subshares, points, p)
