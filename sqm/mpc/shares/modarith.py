"""Exact vectorized arithmetic modulo a prime p < 2^62 on int64 arrays with entries in [0, p).

Products use the floating-point quotient trick: q = floor(a b / p) estimated in float64 is off by at most one
wherever a b / p < 2^50, and r = a b - q p computed with wrapping 64-bit integers is exact modulo 2^64 and lies
in [-p, 2p), so one correction each way gives a b mod p exactly (:func:`_float_product`; above 2^50, b is split
in 31-bit halves: :func:`mul_mod`).  Matrix products split operands into
limbs of w bits and run on float64 BLAS, with w and the row chunk chosen so that every float64 partial sum
is an integer below 2^53 (hence exact).
"""
from __future__ import annotations

import numpy as np

from sqm.mpc.shares.field import MAX_FAST_BITS
from sqm.errors import UsageError

_LD = np.longdouble
if np.finfo(_LD).nmant < 63:  # pragma: no cover - platforms without 80/128-bit long double
    raise ImportError("sqm.mpc.shares.modarith needs a long double with >= 64-bit mantissa")


def _check_p(p: int) -> None:
    if not 2 <= p < (1 << MAX_FAST_BITS):
        raise UsageError(f"modulus must lie in [2, 2^{MAX_FAST_BITS}), got {p}")


def add_mod(a, b, p: int, out: np.ndarray | None = None) -> np.ndarray:
    """(a + b) mod p for a, b in [0, p): s = a + b < 2p, then min(s, s - p) read as unsigned 64-bit integers
    (s - p wraps to above 2^63 when s < p), two branch-free passes, in place (into ``out`` when given: an int64
    array of the result's shape)."""
    s = np.asarray(np.add(a, b, dtype=np.int64) if out is None else np.add(a, b, out=out))
    u = s.view(np.uint64)
    np.minimum(u, u - np.uint64(p), out=u)
    return s


def sub_mod(a, b, p: int) -> np.ndarray:
    """(a - b) mod p for a, b in [0, p): d = a - b in (-p, p), then min(d, d + p) read as unsigned 64-bit
    integers (a negative d reads as above 2^63; d + p wraps to its residue)."""
    d = np.asarray(np.subtract(a, b, dtype=np.int64))
    u = d.view(np.uint64)
    np.minimum(u, u + np.uint64(p), out=u)
    return d


def neg_mod(a, p: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.int64)
    return np.where(a == 0, 0, p - a)


FLOAT_QUOTIENT_BITS = 50  # up to this bit length of p, mul_mod's quotient is taken in float64


def mul_mod(a, b, p: int) -> np.ndarray:
    """Elementwise a * b mod p (broadcasting), exact for p < 2^62, for a and b in [0, p).

    p < 2^31: a b < 2^62, plain int64.  Else the quotient q = floor(a b / p) is estimated in floating point and
    r = a b - q p is taken in wrapping 64-bit integers (exact modulo 2^64), then corrected into [0, p):
    - p < 2^50 (:data:`FLOAT_QUOTIENT_BITS`): float64.  a and b convert exactly (< 2^53); the product a b, the
      reciprocal 1/p and their product each round with relative error at most 2^-53, so the estimate is
      a b / p (1 + e) with |e| < 2^-51, and a b / p < p < 2^50 makes its error below 1/2: floor gives q - 1, q or
      q + 1, and r lies in [-p, 2p);
    - above: b = b_hi 2^31 + b_lo, and a b = (a b_hi mod p) 2^31 + a b_lo, three products with a factor below
      2^31, each with a float64 quotient (a x / p < x < 2^31: the estimate's error, at most 4 roundings of
      2^-53 relative, is below 2^-19), the middle one by :func:`scalar_mul_mod`.
    The float64 paths run several times faster than an 80-bit long double quotient (SIMD; x87 has none), which
    every field used before (:func:`quotient_mul_mod` keeps it, for the bench)."""
    _check_p(p)
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if p < (1 << 31):
        return a * b % p
    if int(p).bit_length() <= FLOAT_QUOTIENT_BITS:
        return _float_product(a, b, p)
    af = a.astype(np.float64)
    x = _float_product(a, b >> 31, p, af)
    y = _float_product(a, b & ((1 << 31) - 1), p, af)
    return add_mod(scalar_mul_mod(x, 1 << 31, p), y, p)


def _float_product(a: np.ndarray, b, p: int, af: np.ndarray | None = None) -> np.ndarray:
    """a b mod p with the quotient estimated in float64, exact wherever a b / p < 2^50 (``af``: a as float64,
    when the caller has it).  float(a), float(b), 1/p and the two products are at most five roundings of
    relative error 2^-53 each, so the estimate is a b / p (1 + e) with |e| < 2^-50, and a b / p < 2^50 keeps
    its error below 1: floor is off by at most one, which :func:`_remainder` corrects.  (mul_mod below 2^50:
    a, b < 2^53 convert exactly; above, and in scalar_mul_mod, a b / p is below 2^31 or 2^49.)"""
    af = a.astype(np.float64) if af is None else af
    q = np.floor(af * np.asarray(b).astype(np.float64) * (1.0 / p)).astype(np.int64)
    return _remainder(a, b, p, q)


def quotient_mul_mod(a: np.ndarray, b: np.ndarray, p: int, ftype) -> np.ndarray:
    """a * b mod p (int64 arrays in [0, p)) with the quotient estimated in ``ftype``: np.float64 (exact for
    p < 2^50, :func:`mul_mod`'s path there) or np.longdouble (p < 2^62; what mul_mod used before, kept for
    ``python -m bench bgw-cost``, which times it against mul_mod)."""
    if ftype is np.float64:
        if int(p).bit_length() > FLOAT_QUOTIENT_BITS:
            raise UsageError(f"a float64 quotient is exact for p below 2^{FLOAT_QUOTIENT_BITS}, not {p}")
        return _float_product(a, b, p)
    return _remainder(a, b, p, np.floor(a.astype(_LD) * b.astype(_LD) / _LD(p)).astype(np.int64))


def _remainder(a: np.ndarray, b, p: int, q: np.ndarray) -> np.ndarray:
    """a b mod p from a quotient estimate q within one of floor(a b / p): r = a b - q p in wrapping 64-bit
    integers (exact modulo 2^64, and in [-p, 2p), so exact), then one correction each way."""
    with np.errstate(over="ignore"):
        r = np.asarray(a.view(np.uint64) * np.asarray(b, dtype=np.int64).view(np.uint64)
                       - q.view(np.uint64) * np.uint64(p)).view(np.int64)
    np.add(r, np.where(r < 0, np.int64(p), np.int64(0)), out=r)  # now in [0, 2p): min(r, r - p) as unsigned
    u = r.view(np.uint64)
    np.minimum(u, u - np.uint64(p), out=u)
    return r


SCALAR_FLOAT_BITS = 49  # a scalar below 2^49 multiplies with a float64 quotient in any field (scalar_mul_mod)


def small_mul_mod(a, s: int, p: int) -> np.ndarray:
    """a * s mod p for a small non-negative integer s with s * p < 2^63 (plain int64 arithmetic; any other s
    goes to :func:`scalar_mul_mod`)."""
    if not s >= 0 or s * p >= (1 << 63):
        return scalar_mul_mod(a, s, p)
    return np.asarray(a, dtype=np.int64) * np.int64(s) % p


def scalar_mul_mod(a, s: int, p: int) -> np.ndarray:
    """a * s mod p for a Python integer s of any size and a in [0, p), by the smaller representative of s or
    -s mod p (e.g. the Lagrange coefficients of points 1..M, which are +-binomial(M, i)):
    - s p < 2^63: plain int64;
    - s < 2^49 (:data:`SCALAR_FLOAT_BITS`): the quotient in float64, in any field up to 2^62.  a s / p < s, and
      the estimate float(a) (s / p) has relative error below 2^-51, so its error is below 1/4: floor is off by
      at most one (corrected by :func:`_remainder`);
    - else :func:`mul_mod`."""
    _check_p(p)
    s = int(s) % p
    neg = p - s < s
    m = p - s if neg else s
    if m * p < (1 << 63):
        out = np.asarray(a, dtype=np.int64) * np.int64(m) % p
    elif m < (1 << SCALAR_FLOAT_BITS):
        out = _float_product(np.asarray(a, dtype=np.int64), np.int64(m), p)
    else:
        return mul_mod(a, np.int64(s), p)
    return neg_mod(out, p) if neg else out


def sum_mod(a, axis, p: int) -> np.ndarray:
    """Exact sum mod p along ``axis`` (31-bit halves summed in int64, safe up to 2^32 terms)."""
    a = np.asarray(a, dtype=np.int64)
    lo = (a & ((1 << 31) - 1)).sum(axis=axis, dtype=np.int64) % p
    hi = (a >> 31).sum(axis=axis, dtype=np.int64) % p
    return add_mod(lo, scalar_mul_mod(hi, 1 << 31, p), p)


def _limb_plan(bits: int, inner: int, signed: bool = False) -> tuple[int, int, int]:
    """(limb width w, number of limbs L, inner chunk) with L * chunk * (largest limb product) < 2^53: (2^w - 1)^2
    for unsigned limbs, 2^(2w-2) for balanced (``signed``) ones, see :func:`_signed_limb_plan`.

    The fewest limbs whose exact chunk still holds min(inner, 2048) terms: float64 sums of up to L limb
    products over a chunk are then integers below 2^53, hence exact.  Fewer limbs means L^2 fewer BLAS
    products; chunks of a few thousand rows also keep each chunk's limbs in cache.
    """
    for L in range(1, 9):
        w = -(-bits // L)
        chunk = ((1 << 53) - 1) // (L * ((1 << (2 * w - 2)) if signed else ((1 << w) - 1) ** 2))
        if chunk >= min(inner, 2048):
            return w, L, max(1, min(inner, chunk, 16384))
    raise UsageError("no exact limb plan")  # pragma: no cover


def _limbs_into(A: np.ndarray, w: int, L: int, out: np.ndarray) -> np.ndarray:
    """The L limbs of A side by side in ``out`` (rows x L cols), float64, without temporaries."""
    rows, cols = A.shape
    buf = np.empty((rows, cols), dtype=np.int64)
    for u in range(L):
        np.right_shift(A, w * u, out=buf)
        np.bitwise_and(buf, (1 << w) - 1, out=buf)
        out[:rows, u * cols:(u + 1) * cols] = buf
    return out[:rows]


def _shift_sum(partials: list[np.ndarray], w: int, p: int) -> np.ndarray:
    """sum_s partials[s] * 2^(w s) mod p, partials exact float64 integers < 2^53.

    Horner's rule from the top partial in int64: acc * 2^w is taken in steps of 62 - bitlen(p) bits, each
    followed by a reduction mod p (acc < p, so no step overflows), which is much cheaper than a general
    modular product per partial; for p of 59 bits and more, the general product is used."""
    step = 62 - int(p).bit_length()
    if step < 4:
        out = None
        for s, P in enumerate(partials):
            term = scalar_mul_mod(np.rint(P).astype(np.int64) % p, pow(2, w * s, p), p)
            out = term if out is None else add_mod(out, term, p)
        assert out is not None  # callers pass 2 L - 1 >= 1 partials
        return out
    acc = None
    for P in reversed(partials):
        Q = np.rint(P).astype(np.int64)
        if acc is None:
            acc = Q % p
            continue
        k = w
        while k > 0:
            s = min(k, step)
            acc = (acc << s) % p
            k -= s
        acc = (acc + Q) % p  # acc < 2^58, Q < 2^53
    assert acc is not None  # callers pass 2 L - 1 >= 1 partials
    return acc


def matmul_mod(A, B, p: int) -> np.ndarray:
    """Exact (A @ B) mod p for int64 A (m x k), B (k x n) in [0, p); a 1-D B gives a vector."""
    _check_p(p)
    A = np.asarray(A, dtype=np.int64)
    B = np.asarray(B, dtype=np.int64)
    vec = B.ndim == 1
    if vec:
        B = B[:, None]
    m, k = A.shape
    if B.shape[0] != k:
        raise UsageError(f"shapes {A.shape} and {B.shape} do not align")
    n = B.shape[1]
    w, L, chunk = _limb_plan(p.bit_length(), k)
    out = np.zeros((m, n), dtype=np.int64)
    c = min(chunk, k)
    abuf, bbuf = np.empty((m, L * c), dtype=np.float64), np.empty((c, L * n), dtype=np.float64)
    for s0 in range(0, k, chunk):
        a = A[:, s0:s0 + chunk]
        acat = _limbs_into(a, w, L, abuf)  # m x L c
        bcat = _limbs_into(B[s0:s0 + chunk], w, L, bbuf)  # c x L n
        cc = a.shape[1]
        partials = [np.zeros((m, n)) for _ in range(2 * L - 1)]
        for u in range(L):
            prod = acat[:, u * cc:(u + 1) * cc] @ bcat
            for v in range(L):
                partials[u + v] += prod[:, v * n:(v + 1) * n]
        out = add_mod(out, _shift_sum(partials, w, p), p)
    return out[:, 0] if vec else out


def matmul_small_mod(S, B, p: int) -> np.ndarray:
    """(S @ B) mod p, exactly, for field elements S (int64 in [0, p)) and a public matrix B of small signed
    integers: only S is cut into w-bit limbs, every limb product sum is an exact float64 integer, and the limb
    results are combined by Horner's rule mod p in int64 (acc * 2^w + Q stays below 2^63).  Falls back to
    :func:`matmul_mod` when B's entries are too large for that."""
    _check_p(p)
    S = np.asarray(S, dtype=np.int64)
    B = np.asarray(B, dtype=np.int64)
    bits = int(p).bit_length()
    bmax = int(np.max(np.abs(B))) if B.size else 0
    w = min(62 - bits, 16)
    if w < 4 or (2 ** w) * max(bmax, 1) * max(S.shape[1], 1) >= 2 ** 53:
        from sqm.mpc.shares.field import from_signed

        return matmul_mod(S, from_signed(B, p), p)
    Bf = B.astype(np.float64)
    acc = np.zeros((S.shape[0], B.shape[1]), dtype=np.int64)
    mask = (1 << w) - 1
    for u in reversed(range(-(-bits // w))):
        Q = (((S >> (w * u)) & mask).astype(np.float64) @ Bf).astype(np.int64)
        acc = (acc * (1 << w) + Q) % p
    return acc


def rowdot_mod(A, B, p: int) -> np.ndarray:
    """Exact sum_k A[i, k] B[i, k] mod p for each row i, int64 A and B of the same shape (m x k) in [0, p):
    limb products summed along rows in float64 (exact chunks, as :func:`matmul_mod`), reduced mod p only for
    the m results."""
    _check_p(p)
    A = np.asarray(A, dtype=np.int64)
    B = np.asarray(B, dtype=np.int64)
    if A.shape != B.shape or A.ndim != 2:
        raise UsageError(f"rowdot_mod needs two matrices of the same shape, got {A.shape} and {B.shape}")
    m, k = A.shape
    w, L, chunk = _limb_plan(p.bit_length(), k)
    mask = (1 << w) - 1
    out = np.zeros(m, dtype=np.int64)
    for s0 in range(0, k, chunk):
        a, b = A[:, s0:s0 + chunk], B[:, s0:s0 + chunk]
        al = [((a >> (w * u)) & mask).astype(np.float64) for u in range(L)]
        bl = [((b >> (w * u)) & mask).astype(np.float64) for u in range(L)]
        partials = [np.zeros(m) for _ in range(2 * L - 1)]
        for u in range(L):
            for v in range(L):
                partials[u + v] += np.einsum("ij,ij->i", al[u], bl[v])
        out = add_mod(out, _shift_sum(partials, w, p), p)
    return out


def _signed_limb_plan(bits: int, inner: int) -> tuple[int, int, int]:
    """(limb width w, number of limbs L, inner chunk) for balanced limbs: a field element taken as its signed
    representative (|x| <= (p - 1) / 2 < 2^(bits-1)) has L = ceil(bits / w) digits in [-2^(w-1), 2^(w-1)]
    (see :func:`_balanced_limbs`), so a limb product is at most 2^(2w-2) in magnitude, four times less than
    with unsigned limbs: a 42-bit field then needs 2 limbs of 21 bits (4096-row chunks) where unsigned limbs
    need 3, and the Gram product costs 4/9 of the flops.  Exact: L * chunk * 2^(2w-2) < 2^53."""
    return _limb_plan(bits, inner, signed=True)


def _balanced_limbs(A: np.ndarray, w: int, L: int, p: int) -> list[np.ndarray]:
    """The L balanced limbs of A's signed representatives, each a contiguous float64 array of A's shape:
    s = sum_u limb_u 2^(w u), every limb in [-2^(w-1), 2^(w-1)] (the top one: what is left, which L w >= bits
    keeps inside that range), s = A or A - p, whichever is smaller in magnitude.  Digits are cut in int64
    (exact for any p < 2^62), then converted (exact: below 2^53)."""
    h = (p - 1) // 2
    t = add_mod(A, h, p)  # (A + h) mod p - h is the signed representative
    np.subtract(t, h, out=t)
    half, mask = 1 << (w - 1), (1 << w) - 1
    d = np.empty_like(t)
    limbs = []
    for _ in range(L - 1):
        np.add(t, half, out=d)
        np.bitwise_and(d, mask, out=d)
        np.subtract(d, half, out=d)
        np.subtract(t, d, out=t)
        np.right_shift(t, w, out=t)  # exact: t - d is a multiple of 2^w
        limbs.append(d.astype(np.float64))
    limbs.append(t.astype(np.float64))
    return limbs


def gram_mod(S, p: int) -> np.ndarray:
    """Exact S^T S mod p for int64 S (m x n) in [0, p): per row chunk, the BLAS products of its balanced limbs
    (:func:`_signed_limb_plan`) two by two, limb_a^T limb_b for a <= b (the pair b, a is the transpose), so
    L (L + 1) / 2 products of n x n instead of L^2, and no strided copies."""
    _check_p(p)
    S = np.asarray(S, dtype=np.int64)
    m, n = S.shape
    w, L, chunk = _signed_limb_plan(p.bit_length(), m)
    out = np.zeros((n, n), dtype=np.int64)
    for s0 in range(0, m, chunk):
        limbs = _balanced_limbs(S[s0:s0 + chunk], w, L, p)
        partials = [np.zeros((n, n)) for _ in range(2 * L - 1)]
        for a in range(L):
            for b in range(a, L):
                G = limbs[a].T @ limbs[b]
                partials[a + b] += G
                if a != b:
                    partials[a + b] += G.T
        out = add_mod(out, _shift_sum(partials, w, p), p)
    return out
