"""A lookup argument for ranges (LogUp, Haboeck 2022), on secret shares: a client shows that each of its shared
integers y_1..y_N lies in a table [0, w] by sharing, with the y, the multiplicities m_t (how many y equal t),
then, after a joint constant alpha it could not foresee, the inverses h_i = 1 / (alpha - y_i).  The parties check

- that h_i (alpha - y_i) = 1 for every i: a product of two wires, proved by the fully linear proof's
  :class:`sqm.mpc.protocols.flp.Products` part at degree 2;
- the identity sum_i h_i = sum_t m_t / (alpha - t), linear in the shares of h and m (:func:`table_sum`).

Why it proves the range: F(X) = sum_i 1 / (X - y_i) - sum_t m_t / (X - t) is a rational function fixed before
alpha (the y and the m were shared first).  A y_i outside the table is a pole of F whose coefficient is the count of
the y equal to it, not zero mod p as N < p; so F is not zero, its numerator has degree below N + w + 1, and F(alpha)
= 0 with probability at most (N + w + 1) / (p - w - 1) over alpha drawn outside the table (where an honest h
exists).  The input proof draws :data:`ALPHAS` independent constants and checks the identity for each: a deviating
client passes them all with probability at most ((N + w + 1) / (p - w - 1))^ALPHAS (:func:`error`).

Why not digits, for wide ranges: a base-8 digit is one shared entry and a degree-8 polynomial per 3 bits, so a
13-bit range costs 5 shared entries per value; here a value costs 1 + ALPHAS entries whatever its width, and the
table's multiplicities w + 1 per chunk, so the input proof uses it for widths from :data:`TABLE_MIN` (where digits
need 4 or more) to below :data:`TABLE_MAX` (where the table is still small beside a chunk's values)."""
from __future__ import annotations

import ctypes
import functools
import hashlib

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.protocols import flp
from sqm.mpc.shares import modarith
from sqm.mpc.shares.randomness import secure_generator

TABLE_MIN = 512  # a range of this width or more is looked up (digits: 4 or more of base 8)
TABLE_MAX = 1 << 16  # and of less than this (its table's multiplicities are shared with every chunk)
ALPHAS = 2  # independent constants, each with its own inverses: the error squared (:func:`error`)


def looked_up(width: int) -> bool:
    """Whether a range [lo, lo + width] is checked by this argument (else by digits)."""
    return TABLE_MIN <= int(width) < TABLE_MAX


def alphas(seed: bytes, client: int, top: int, p: int) -> list[int]:
    """:data:`ALPHAS` constants for ``client``, uniform in [top + 1, p) (outside every table [0, w], w <= top: an
    honest client's alpha - y is never zero), from the joint seed."""
    if not 0 <= top < p - 1:
        raise UsageError(f"tables up to {top} need a field above them, got p = {p}")
    rng = secure_generator(int.from_bytes(hashlib.sha256(b"lookup" + seed + int(client).to_bytes(4, "little"))
                                          .digest(), "little"))
    return [int(rng.integers(top + 1, p)) for _ in range(ALPHAS)]


def multiplicities(y, width: int) -> np.ndarray:
    """How many of the integers ``y`` (all in [0, width]) equal each t = 0..width."""
    y = np.asarray(y, dtype=np.int64).reshape(-1)
    if y.size and (int(y.min()) < 0 or int(y.max()) > width):
        raise UsageError(f"a looked-up value outside [0, {width}]")
    return np.bincount(y, minlength=int(width) + 1).astype(np.int64)


def inverses(alpha: int, width: int, p: int) -> np.ndarray:
    """1 / (alpha - t) mod p for t = 0..width (alpha outside [0, width]): the table's side of the identity, and
    an honest client's h = 1 / (alpha - y) by lookup.  Compiled where the kernel is (Montgomery's trick: one
    inversion), else one inversion per entry."""
    v = (int(alpha) - np.arange(int(width) + 1, dtype=np.int64)) % p
    fn = _kernel()
    if fn is not None:
        out = np.empty_like(v)
        rc = fn(v.ctypes.data, v.size, p, out.ctypes.data)
        if rc == 0:
            return out
        if rc == 1:
            raise UsageError(f"alpha = {alpha} lies in the table [0, {width}]")
    if (v == 0).any():
        raise UsageError(f"alpha = {alpha} lies in the table [0, {width}]")
    return np.array([pow(int(x), -1, p) for x in v], dtype=np.int64)


@functools.lru_cache(maxsize=1)
def _kernel():
    """The compiled batch inversion where it gives the field's inverses on a fixed sample, else None (also where
    ``SQM_FLP_KERNEL=numpy``)."""
    fn = flp.kernel("sqm_ip_inverses", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p])
    if fn is None:
        return None
    from sqm.mpc.shares.field import prime_below

    for bits in (13, 42, 61):
        p = prime_below(bits)
        v = np.array([1, 2, p - 1, p // 3, 12345 % p, p - 2], dtype=np.int64)
        out = np.empty_like(v)
        try:
            if fn(v.ctypes.data, v.size, p, out.ctypes.data) != 0:
                return None
        except Exception:  # a kernel that fails its first call: Python's inverses
            return None
        if [int(x) for x in out] != [pow(int(x), -1, p) for x in v]:
            return None
    return fn


def table_sum(m, inv, p: int) -> int:
    """sum_t m_t inv_t mod p: the table's side of the identity, from shares (or values) of the multiplicities."""
    return int(modarith.matmul_mod(np.asarray(m, dtype=np.int64)[None, :], np.asarray(inv, dtype=np.int64), p)[0])


def error(lookups: int, width: int, p: int) -> float:
    """The probability that a client with a value outside the table passes every identity: ((N + w + 1) /
    (p - w - 1))^ALPHAS for N looked-up values (the module docstring)."""
    return ((int(lookups) + int(width) + 1) / (p - int(width) - 1)) ** ALPHAS


# ----- a claim's looked-up columns (an input proof's Claim: its ``tables`` and ``looked``) ----------------------

def table_counts(W, claim) -> np.ndarray:
    """An honest client's multiplicities: per table (the claim's ``tables``, in order), how many of its looked-up
    witness entries (x - lo) equal each t = 0..w, concatenated."""
    W = np.asarray(W, dtype=np.int64)
    out = [multiplicities(W[:, [wc for _, wc, q in claim.looked if q == t]], w)
           for t, w in enumerate(claim.tables)]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def table_starts(claim) -> np.ndarray:
    """Where each of the claim's tables begins in the multiplicities (and in the concatenated inverses), then
    their length: the running sums of w + 1."""
    return np.cumsum([0] + [w + 1 for w in claim.tables])


def table_size(claim) -> int:
    """The multiplicities' length: sum of w + 1 over the claim's tables."""
    return int(table_starts(claim)[-1])


def table_inverses(consts, claim, p: int) -> list[list[np.ndarray]]:
    """Per alpha and table, 1 / (alpha - t) for t = 0..w (:func:`inverses`)."""
    return [[inverses(a, w, p) for w in claim.tables] for a in consts]


def inverse_witness(W, claim, invs) -> np.ndarray:
    """An honest client's inverses (records x ALPHAS n_l): column i n_l + q holds 1 / (alpha_i - y) for the
    witness entries y of its q-th looked-up column (a lookup in the table of 1 / (alpha_i - t))."""
    W = np.asarray(W, dtype=np.int64)
    nl = len(claim.looked)
    out = np.empty((W.shape[0], len(invs) * nl), dtype=np.int64)
    fn = _gather_kernel()
    if fn is not None and W.ndim == 2 and W.shape[0] and nl and W.strides[1] == 8 and W.strides[0] % 8 == 0 and \
            max(wc for _, wc, _ in claim.looked) < W.shape[1]:
        starts = table_starts(claim)
        tabs = np.ascontiguousarray(np.concatenate([np.concatenate(per_table) for per_table in invs]))
        cols = np.array([wc for _, wc, _ in claim.looked], dtype=np.int64)
        toff = np.array([starts[t] for *_, t in claim.looked], dtype=np.int64)
        width = np.array([claim.tables[t] for *_, t in claim.looked], dtype=np.int64)
        if fn(W.ctypes.data, W.shape[0], W.strides[0] // 8, cols.ctypes.data, toff.ctypes.data, width.ctypes.data,
              nl, tabs.ctypes.data, int(starts[-1]), len(invs), out.ctypes.data) == 0:
            return out
    for q, (_, wc, t) in enumerate(claim.looked):  # numpy: a gather per column
        y = W[:, wc]
        if y.size and (int(y.min()) < 0 or int(y.max()) > claim.tables[t]):
            raise UsageError(f"a looked-up value outside [0, {claim.tables[t]}]")
        for i, per_table in enumerate(invs):
            out[:, i * nl + q] = per_table[t][y]
    return out


@functools.lru_cache(maxsize=1)
def _gather_kernel():
    """The compiled row-by-row gather of :func:`inverse_witness`, or None where it was not built (or
    ``SQM_FLP_KERNEL=numpy``); the tests compare it with the numpy gather."""
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    return flp.kernel("sqm_ip_table_gather", [ptr, i64, i64, ptr, ptr, ptr, i64, ptr, i64, i64, ptr])


def check(H, M, claim, co, invs, p: int) -> int:
    """Shares (or values) of the random combination (``lin_h``) of the identities sum h = sum_t m_t / (alpha - t),
    one per table and alpha, over the inverses ``H`` and the multiplicities ``M`` (0 for an honest client)."""
    if not claim.tables:
        return 0
    nl = len(claim.looked)
    H = np.asarray(H, dtype=np.int64)
    # per column of H: in one int64 pass where the sums stay below 2^63 (entries in [0, p))
    sums = H.sum(axis=0) % p if H.shape[0] * (p - 1) < 1 << 63 else modarith.sum_mod(H, 0, p)
    starts = table_starts(claim)
    total = 0
    for i, per_table in enumerate(invs):
        for t in range(len(claim.tables)):
            h = sum(int(sums[i * nl + q]) for q, (*_, u) in enumerate(claim.looked) if u == t)
            term = (h - table_sum(M[starts[t]:starts[t + 1]], per_table[t], p)) % p
            total = (total + int(co["lin_h"][i * len(claim.tables) + t]) * term) % p
    return total
