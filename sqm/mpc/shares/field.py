"""Prime fields for the secure runtime: choosing p from a proven bound on the result."""
from __future__ import annotations

import functools

import gmpy2
import numpy as np

from sqm.errors import UsageError

MAX_FAST_BITS = 62  # shares live in int64 arrays: p < 2^62 keeps a + b < 2^63


class FieldTooSmall(UsageError):
    """The job's result bound does not fit the largest field the fast runtime handles."""


@functools.cache
def prime_below(bits: int) -> int:
    """The largest prime p < 2^bits (deterministic)."""
    if bits < 2:
        raise UsageError("need at least 2 bits")
    return int(gmpy2.prev_prime(1 << bits)) if hasattr(gmpy2, "prev_prime") else _prev_prime(1 << bits)


def _prev_prime(n: int) -> int:
    c = n - 1
    while not gmpy2.is_prime(c, 50):
        c -= 1
    return int(c)


def prime_for_bound(bound: int, n_parties: int, allow_big: bool = False) -> int:
    """A prime p with p > 2 * bound + 1 (signed results |y| <= bound decode exactly) and p > n_parties.

    We take the largest prime below 2^k for the smallest k >= 8 for which it exceeds both: k is the bit length
    of 2 bound + 1, or one more when the largest prime below 2^k does not exceed it.  No margin beyond that is
    needed (``bound`` is a proven bound) and a bit less can halve the share arithmetic (a 42-bit field takes
    two 21-bit limbs in :func:`sqm.mpc.shares.modarith.gram_mod`, a 43-bit one three).  Above 62 bits the int64 runtime
    cannot hold shares: :class:`FieldTooSmall` is raised (unless ``allow_big``) so an overflowing job is
    refused instead of wrapping silently.
    """
    bound = int(bound)
    if bound < 0:
        raise UsageError("bound must be >= 0")
    k = max((2 * bound + 1).bit_length(), 8, int(n_parties).bit_length() + 1)
    p = prime_below(k) if k <= MAX_FAST_BITS or allow_big else 0
    if p <= 2 * bound + 1 or p <= n_parties:
        k += 1
    if k > MAX_FAST_BITS and not allow_big:
        raise FieldTooSmall(
            f"the job's result bound needs a {k}-bit field (|result| <= 2^{bound.bit_length()}), above the "
            f"{MAX_FAST_BITS}-bit limit of the runtime: lower gamma, the record count or the column bounds")
    p = prime_below(k)
    assert p > 2 * bound + 1 and p > n_parties
    return p


def to_signed(a, p: int) -> np.ndarray:
    """Field elements in [0, p) to signed representatives in (-p/2, p/2]."""
    a = np.asarray(a)
    half = p // 2
    if a.dtype == object:
        return np.array([int(v) - p if int(v) > half else int(v) for v in a.reshape(-1)],
                        dtype=object).reshape(a.shape)
    a = a.astype(np.int64)
    return np.where(a > half, a - p, a)


def from_signed(x, p: int) -> np.ndarray:
    """Signed integers with |x| < p to field elements in [0, p), int64."""
    x = np.asarray(x)
    if x.dtype == object:
        vals = [int(v) for v in x.reshape(-1)]
        if any(abs(v) >= p for v in vals):
            raise UsageError(f"value out of range for the {p.bit_length()}-bit field")
        return np.array([v % p for v in vals], dtype=np.int64).reshape(x.shape)
    x = x.astype(np.int64)
    if x.size and np.max(np.abs(x)) >= p:
        raise UsageError(f"value out of range for the {p.bit_length()}-bit field")
    return np.where(x < 0, x + p, x)
