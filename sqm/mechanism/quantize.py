"""Stochastic rounding (Algorithm 2 of the SQM paper)."""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache

import numpy as np

from .rng import SeedLike, make_rng
from .validation import check_finite, check_gamma
from sqm.errors import UsageError
from sqm.mpc.shares.kernels import kernel_function


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


# dependent_round keeps every weighted sum it moves along within this bound (columns x weights), so its float
# drift stays far below the 1 that sensitivity.dependent_norm_bound_sq allows for it (see dependent_round)
_DRIFT_SAFE = 2.0 ** 40
_ROWS = 8192  # records per block of the pipage loop: few numpy calls per value, its temporaries in cache
_TILE = 512  # records per tile of the block's transposing copies: both sides of a tile stay in cache


def dependent_round(x, gamma: float = 1.0, groups=None, seed: SeedLike = None, coins: np.ndarray | None = None
                    ) -> np.ndarray:
    """Stochastic rounding of ``gamma * x`` with the same marginals as :func:`stochastic_round`, made dependent
    within each column group so that every group's squared norm stays within about ||gamma x_G||^2 + 2 gamma c_G
    instead of (gamma c_G + sqrt(n_G))^2: a bound the sensitivity of every quantized Gram uses
    (:func:`sqm.mechanism.sensitivity.quantized_norm_bound_sq`).

    ``groups``: the column groups of ``x``'s columns (sequences of column indices, disjoint; None: one group of
    every column).  Write y = gamma x, k = floor(y), f = y - k, and the rounded value k + b with b in {0, 1}.
    Then ||k + b||^2 = sum k^2 + sum w_j b_j with the odd weights w_j = 2 k_j + 1, and
    sum k^2 + sum w_j f_j = ||y||^2 + sum f_j (1 - f_j).  Within a group the fractional parts are rounded by
    weighted pipage (dependent) rounding: a carried fraction p_c and the next fraction p_j move along
    (w_j, -w_c) s, which keeps w_c p_c + w_j p_j, to whichever end of the feasible segment (one of them reaches
    0 or 1) with the probabilities that make E[s] = 0 (Gandhi, Khuller, Parthasarathy and Srinivasan, J. ACM
    53(3), 2006, with weights; Ageev and Sviridenko's pipage rounding).  The one fraction left at the end is
    rounded on its own.  So

    * every marginal is exact: P(b_j = 1) = f_j, E[result] = gamma x, and every value is floor or ceil of
      gamma x_j, as in :func:`stochastic_round`;
    * ||x_hat_G||^2 < ||y_G||^2 + n_G / 4 + |w_l| + drift, with |w_l| <= 2 ceil(max_j |y_j|) + 1 the last
      fraction's weight and drift < 2^-9 from float arithmetic. Each pairing step sets one fraction exactly to
      0 or 1 (off the invariant by |w| 2^-52 at most, as |w s| <= 1 and s carries a relative error of 2^-53)
      and moves the other by one product and one sum (|w| 2^-51 at most, clipping included): at most
      (|w_c| + |w_j|) 2^-50 <= (2 max|y| + 2) 2^-49 per step, and a group takes fewer steps than columns.  This
      function refuses inputs where columns x (2 max|y| + 2) reaches 2^40, so drift < 2^-9.

    The price: within a group the rounding errors are correlated (nearly conditioned on the weighted sum), so a
    record's E[x_hat x_hat^T] = y y^T + C with C the errors' covariance: positive semi-definite with the same
    diagonal f (1 - f), so the same trace (<= n_G / 4), as independent rounding's, which no estimator here
    removes either; what is new is C's off-diagonal part (a product x_hat_i x_hat_j in one group is no longer
    unbiased).  Relative to the record's y y^T (trace up to (gamma c)^2) it is of order n_G / (4 gamma^2 c^2).

    Coins: one uniform per value, drawn as :func:`stochastic_round` draws them (``rng.random(shape)``, row
    major), each used at most once: a pairing step with column j uses column j's coin; the last fraction of a
    chain uses the coin of the column that began it.  ``coins``: those uniforms given instead (an array of
    ``x``'s shape; ``seed`` is then unused): a client's come from its per-block coin keys
    (:class:`sqm.mechanism.coins.CoinKeys`), so a part of its rows rounds as the whole input does.  Written here
    because no library offers dependent rounding vectorized over rows with a fixed coin budget.

    Two kernels give the same integers: a compiled one (``sqm/mechanism/_dependent_round.c``, an optional
    extension doing the numpy kernel's operations in the same order, on rows in vector lanes) where it was built
    and agrees with the numpy kernel on a fixed sample at first use (:func:`kernel_backend`;
    ``SQM_ROUNDING_KERNEL=numpy`` asks for the numpy kernel), else the numpy kernel.  The numpy kernel computes in
    blocks of :data:`_ROWS` records, transposed (:data:`_TILE` records at a time) so that each
    column is contiguous, every pairing step elementwise on whole columns, its sign cases folded into quotients
    by signed weights (min/max instead of selects), with bitwise selects (branch-free, where ``np.where``
    mispredicts on random masks) and no allocation.  Every number it compares or carries equals the one
    :func:`dependent_round_reference` computes (a - b = -(b - a) and x / -y = -(x / y) in IEEE arithmetic,
    and min/max pick equal values), up to the sign of zeros, which no comparison sees (no zero is ever a
    divisor): so both give the same integers, bit for bit."""
    x, groups, coins = _checked(x, gamma, groups, seed, coins)
    fn = _compiled()
    out = None if fn is None else _round_compiled(fn, x, float(gamma), groups, coins)
    return _round_numpy(x, float(gamma), groups, coins) if out is None else out


def kernel_backend() -> str:
    """Which kernel :func:`dependent_round` runs here: "compiled" (``sqm/mechanism/_dependent_round.c``, where it
    was built and agrees with the numpy kernel on a sample) or "numpy".  Both give the same integers."""
    return "numpy" if _compiled() is None else "compiled"


def _library():
    """The compiled kernel's C function, or None where the extension was not built or does not load."""
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    return kernel_function("sqm.mechanism._dependent_round", "sqm_dependent_round",
                           [ptr, ptr, i64, i64, ctypes.c_double, ptr, ptr, i64, ptr])


@lru_cache(maxsize=1)
def _compiled():
    """:func:`_library`'s kernel where it gives the numpy kernel's integers on a fixed sample, else None (also
    where ``SQM_ROUNDING_KERNEL=numpy`` asks for the numpy kernel)."""
    if os.environ.get("SQM_ROUNDING_KERNEL", "").strip().lower() == "numpy":
        return None
    fn = _library()
    if fn is None:
        return None
    for block, gamma, grouping, given in _sample():
        x, groups, coins = _checked(block, gamma, grouping, None, given)
        try:
            got = _round_compiled(fn, x, gamma, groups, coins)
        except Exception:  # a kernel that fails its first calls: the numpy kernel
            return None
        if got is None or not np.array_equal(got, _round_numpy(x, gamma, groups, coins)):
            return None
    return fn


def _sample():
    """Fixed public blocks (from a fixed seed: nothing secret) on which the compiled kernel must give the numpy
    kernel's integers: rows of mixed norms and signs, exact integers (whole rows, first columns, one column),
    fractions just above 0 and just below 1, halves, ties at every step, coins at 0 and just below 1; one group,
    groups of odd sizes, singletons; at scales from 1 to 2^30; and blocks that are not a whole number of the
    compiled kernel's batches (one row, none)."""
    rng = make_rng(20260)
    n, d = 403, 11
    blocks = []
    for gamma in (1.0, 7.3, 2.0 ** 12, 2.0 ** 30):
        x = rng.normal(size=(n, d))
        x *= rng.random((n, 1)) ** 2 / np.linalg.norm(x, axis=1, keepdims=True)
        x[::13] *= 1e-6
        x[1::17] = 0.0
        x[::5, 0] = 0.0
        x[::3, d // 2] = np.round(x[::3, d // 2] * gamma) / gamma
        x[::7, 1] = (np.floor(x[::7, 1] * gamma) + 2.0 ** -30) / gamma
        x[::9, 2] = (np.floor(x[::9, 2] * gamma) + 1 - 2.0 ** -30) / gamma
        x[::11, 3] = (np.floor(x[::11, 3] * gamma) + 0.5) / gamma
        x[4::23] = 0.0
        x[4::23, d - 1] = 1.0
        x[6::23] = 2.5 / gamma
        x[7::23] = 0.5 / gamma * np.where(np.arange(d) % 2, 1.0, -1.0)
        x[8::23] = 0.25 / gamma
        coins = rng.random((n, d))
        coins[::6] = 0.0
        coins[1::8] = 1.0 - 2.0 ** -53
        blocks.append((x, gamma, coins))
    odd = [np.arange(0, d, 2), np.arange(1, d, 4), np.arange(d - 4, 0, -4)]
    cases = [(x, gamma, groups, coins) for x, gamma, coins in blocks
             for groups in (None, odd, [[j] for j in range(d)])]
    x, gamma, coins = blocks[2]
    return cases + [(x[:1], gamma, None, coins[:1]), (x[:0], gamma, None, coins[:0])]


def _round_compiled(fn, x: np.ndarray, gamma: float, groups, coins: np.ndarray) -> np.ndarray | None:
    """The compiled kernel's integers for checked inputs, or None where it could not run (its work buffer)."""
    n, d = x.shape
    x, coins = np.ascontiguousarray(x), np.ascontiguousarray(coins)
    cols = np.ascontiguousarray(np.concatenate(groups) if groups else np.zeros(0), dtype=np.int64)
    starts = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=starts[1:])
    out = np.empty((n, d), dtype=np.int64)
    rc = fn(x.ctypes.data, coins.ctypes.data, n, d, gamma, cols.ctypes.data, starts.ctypes.data, len(groups),
            out.ctypes.data)
    return out if rc == 0 else None


def _round_numpy(x: np.ndarray, gamma: float, groups, coins: np.ndarray) -> np.ndarray:
    """The numpy kernel: :func:`_round_rows` block by block, for checked inputs."""
    n, d = x.shape
    out = np.empty((n, d), dtype=np.int64)
    work = _Work(d, min(n, _ROWS))
    for a in range(0, n, _ROWS):
        _round_rows(x[a:a + _ROWS], gamma, coins[a:a + _ROWS], groups, out[a:a + _ROWS], work)
    return out


def dependent_round_reference(x, gamma: float = 1.0, groups=None, seed: SeedLike = None,
                              coins: np.ndarray | None = None) -> np.ndarray:
    """:func:`dependent_round` computed as first written: each pairing step in the sign cases of its two weights
    (up and down rooms selected per case), the carried column tracked by index.  The slow reference which the
    tests and ``python -m bench rounding`` hold :func:`dependent_round` to, bit for bit; not used by a job."""
    x, groups, coins = _checked(x, gamma, groups, seed, coins)
    n, d = x.shape
    scaled = x * float(gamma)
    low = np.floor(scaled)
    frac = scaled - low  # exact (Sterbenz)
    weight = 2.0 * low + 1.0  # odd, never 0
    up = np.concatenate([_pipage_reference(frac[a:a + _ROWS], weight[a:a + _ROWS], coins[a:a + _ROWS], groups)
                         for a in range(0, n, _ROWS)]) if n else np.zeros((0, d), dtype=bool)
    return low.astype(np.int64) + up.astype(np.int64)


def _checked(x, gamma, groups, seed, coins) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(x as float64, its column groups, its coins) once every argument of :func:`dependent_round` is checked."""
    x = np.asarray(x, dtype=np.float64)
    check_finite(x, "data")
    check_gamma(gamma)
    if x.ndim != 2:
        raise UsageError(f"dependent_round takes a records x columns block, got shape {x.shape}")
    n, d = x.shape
    if groups is None:
        groups = [np.arange(d)]
    groups = [np.asarray(g, dtype=np.int64).reshape(-1) for g in groups]
    cols = np.sort(np.concatenate(groups)) if groups else np.zeros(0, np.int64)
    if not np.array_equal(cols, np.arange(d)):
        raise UsageError(f"dependent_round: the column groups must be disjoint and cover the block's {d} columns")
    # max |gamma x| without a scaled copy: rounding is monotone, so it is the product of max |x| and gamma
    top = max(float(np.max(x)), -float(np.min(x))) * float(gamma) if x.size else 0.0
    if top and max(len(g) for g in groups) * (2.0 * top + 2.0) >= _DRIFT_SAFE:
        raise UsageError(f"gamma * |x| reaches {top:.3g}: too large for dependent rounding (its float drift is "
                         f"bounded only while columns x (2 gamma |x| + 2) < 2^40)")
    if coins is None:
        coins = make_rng(seed).random(x.shape)
    elif np.shape(coins) != x.shape:
        raise UsageError(f"dependent_round: {np.shape(coins)} coins for a block of shape {x.shape}")
    return x, groups, np.asarray(coins, dtype=np.float64)


def _select(out: np.ndarray, mask: np.ndarray, a: np.ndarray, b: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """``out`` = a where ``mask`` (int64, -1 or 0) else b, bit for bit, in place (``out`` may be ``b``)."""
    bi = b.view(np.int64)
    np.bitwise_xor(a.view(np.int64), bi, out=tmp)
    np.bitwise_and(tmp, mask, out=tmp)
    np.bitwise_xor(tmp, bi, out=out.view(np.int64))
    return out


def _mask(out: np.ndarray, flags: np.ndarray, byte: np.ndarray) -> np.ndarray:
    """``out`` (int64) = -1 where ``flags`` (bool) else 0: negated as bytes, then widened (cheaper than one
    casting negation)."""
    np.negative(flags.view(np.int8), out=byte)
    np.copyto(out, byte)
    return out


class _Work:
    """The buffers of :func:`_round_rows` for blocks of up to ``rows`` records of ``d`` columns, allocated once
    per call (fresh ones per block would cost a page fault per page each time)."""

    def __init__(self, d: int, rows: int):
        self.frac, self.low, self.coins = (np.empty((d, rows)) for _ in range(3))
        self.bit, self.took = np.empty((d, rows), dtype=bool), np.empty((d, rows), dtype=bool)
        self.floats = np.empty((22, rows))
        self.bools = np.empty((9, rows), dtype=bool)
        self.ints = np.empty((2, rows), dtype=np.int64)
        self.bytes = np.empty(rows, dtype=np.int8)
        self.zeros, self.ones = np.zeros(rows), np.ones(rows)  # the clip's bounds (faster than scalars)


def _round_rows(x: np.ndarray, gamma: float, coins: np.ndarray, groups, out: np.ndarray, work: _Work) -> None:
    """:func:`dependent_round` of one block of records into ``out``.

    Per row, a chain carries one fraction p (weight w_c) from column to column; at column j (fraction p_j,
    weight w_j, coin u) the step s moves p by w_j s and p_j by -w_c s.  Each fraction's two bounds on s are
    quotients by a signed weight, one >= 0 (its room up) and one <= 0 (minus its room down), so the step's room
    up is the least of the two maxima and minus its room down the greatest of the two minima: no case on the
    signs.  The fraction that meets its bound first is settled; that bit is recorded with whether column j
    became the carried one, and a backward pass hands each carried column the bit decided when it was next
    settled (or by its chain's last coin)."""
    r, d = x.shape
    frac, low, u_all = work.frac[:, :r], work.low[:, :r], work.coins[:, :r]
    for a in range(0, r, _TILE):  # gamma x and the coins, transposed: one contiguous row per column
        np.multiply(x[a:a + _TILE].T, gamma, out=frac[:, a:a + _TILE])
        np.copyto(u_all[:, a:a + _TILE], coins[a:a + _TILE].T)
    np.floor(frac, out=low)
    np.subtract(frac, low, out=frac)  # exact (Sterbenz)
    dense = (frac.min(axis=1) > 0.0).tolist()  # columns with no integral value
    bit = work.bit[:, :r]  # the bit decided at each column (for the carried column, or its own)
    took = work.took[:, :r]  # whether column j became the carried one there
    (nw2, q2, np2, pm1, a1, a2, b1, b2, ua, ub, la, lb, s_up, nsd, tot, s, m1, m2, pn, p, nw1,
     coin0) = work.floats[:, :r]
    go, f1, f2, live, has, pair, start, nxt, swap = work.bools[:, :r]
    mask, tmp = work.ints[:, :r]
    byte = work.bytes[:r]
    zeros, ones = work.zeros[:r], work.ones[:r]
    for g in groups:
        cols = g.tolist()
        has.fill(False)
        p.fill(0.0)
        nw1.fill(-1.0)  # where no fraction is carried yet: keeps the unused divisions finite
        coin0.fill(0.0)
        all_has = False  # every row carries a fraction (from its first non-integral column on)
        for j in cols:
            p2, u, dj, first = frac[j], u_all[j], bit[j], took[j]
            full = all_has and dense[j]  # every row pairs: no masks
            if not full:
                np.greater(p2, 0.0, out=live)
            np.multiply(low[j], -2.0, out=nw2)
            np.subtract(nw2, 1.0, out=nw2)  # -w_j, odd
            if full or (all_has or bool(has.any())) and bool(np.logical_and(live, has, out=pair).any()):
                # rooms of p (moved by w_j s): (1 - p) / w_j and p / -w_j; of p_j (moved by -w_c s): (1 - p_j) / -w_c
                # and p_j / w_c; each pair has one >= 0, the step's room up, and one <= 0, minus its room down
                np.subtract(p, 1.0, out=pm1)
                np.divide(pm1, nw2, out=a1)
                np.divide(p, nw2, out=a2)
                np.subtract(1.0, p2, out=q2)
                np.negative(p2, out=np2)
                np.divide(q2, nw1, out=b1)
                np.divide(np2, nw1, out=b2)
                np.maximum(a1, a2, out=ua)
                np.maximum(b1, b2, out=ub)
                np.minimum(a1, a2, out=la)
                np.minimum(b1, b2, out=lb)
                np.minimum(ua, ub, out=s_up)
                np.maximum(la, lb, out=nsd)  # minus the largest step down
                # s goes up iff u (s_up + s_dn) < s_dn, that is u (-s_dn - s_up) > -s_dn: P(up) = s_dn /
                # (s_up + s_dn), so E[s] = 0
                np.subtract(nsd, s_up, out=tot)
                np.multiply(tot, u, out=tot)
                np.greater(tot, nsd, out=go)
                # p settles first where its own room binds in that direction
                np.less_equal(ua, ub, out=f1)
                np.greater_equal(la, lb, out=f2)
                np.logical_and(f1, go, out=f1)
                np.greater(f2, go, out=f2)
                np.logical_or(f1, f2, out=first)
                if not full:
                    np.logical_and(first, pair, out=first)
                _mask(mask, go, byte)
                _select(s, mask, s_up, nsd, tmp)
                # the one not settled moves: p + w_j s, or p_j - w_c s where p settles
                np.multiply(nw2, s, out=m1)
                np.subtract(p, m1, out=m1)
                np.multiply(nw1, s, out=m2)
                np.add(p2, m2, out=m2)
                _mask(mask, first, byte)
                new = _select(p if full else pn, mask, m2, m1, tmp)
                np.minimum(new, ones, out=new)
                np.maximum(new, zeros, out=new)
                _select(nw1, mask, nw2, nw1, tmp)
                # the bit decided: p's where it settles (up iff s and w_j have one sign), else p_j's (up iff s and
                # w_c have opposite signs); where p settles w_j is the carried weight now, so either way the bit
                # is go xor first xor (the carried weight > 0)
                np.less(nw1, 0.0, out=dj)
                np.logical_xor(dj, first, out=dj)
                np.logical_xor(dj, go, out=dj)
                if not full:
                    np.copyto(p, pn, where=pair)
                    np.logical_and(dj, pair, out=dj)
            else:
                dj.fill(False)
                first.fill(False)
            if not all_has:
                np.greater(live, has, out=start)  # chains that begin at column j
                if start.any():
                    np.copyto(p, p2, where=start)
                    np.copyto(nw1, nw2, where=start)
                    np.copyto(coin0, u, where=start)
                    np.logical_or(first, start, out=first)
                    np.logical_or(has, start, out=has)
                all_has = bool(has.all())
        # each chain's last fraction by its first coin; then, backwards, each column that became the carried
        # one takes the bit decided where it was next settled
        np.less(coin0, p, out=nxt)
        for j in reversed(cols):
            np.logical_xor(nxt, bit[j], out=swap)
            np.logical_and(swap, took[j], out=swap)
            np.logical_xor(nxt, swap, out=nxt)
            np.logical_xor(bit[j], swap, out=bit[j])
    np.add(low, bit, out=low)
    np.copyto(out, low.T, casting="unsafe")


def _pipage_reference(frac, weight, coins, groups) -> np.ndarray:
    """The up-or-down bits of :func:`dependent_round_reference` for a block of rows (fractions, odd weights,
    coins): each group's columns in order, every row at once (elementwise on whole columns, rows independent)."""
    n, d = frac.shape
    fT, wT, cT = np.ascontiguousarray(frac.T), np.ascontiguousarray(weight.T), np.ascontiguousarray(coins.T)
    upT = np.zeros((d, n), dtype=bool)
    for g in groups:
        carry = np.full(n, -1, dtype=np.int64)  # the column whose fraction is carried, -1 none
        p = np.zeros(n)  # its fraction
        wc = np.ones(n)  # its weight (1 where none is carried: keeps the masked divisions finite)
        coin = np.zeros(n)  # the unused coin of the column that began the chain
        for j in g.tolist():
            p2, w2, u = fT[j], wT[j], cT[j]
            live, has = p2 > 0.0, carry >= 0
            pair = live & has
            if pair.any():
                p1, w1 = p, wc
                pos2, pos1 = w2 > 0, w1 > 0
                a2, a1, q1, q2 = np.abs(w2), np.abs(w1), 1.0 - p1, 1.0 - p2
                # s > 0 moves p1 by w2 s and p2 by -w1 s; the largest step each allows, up and down
                up1, up2 = np.where(pos2, q1, p1) / a2, np.where(pos1, p2, q2) / a1
                dn1, dn2 = np.where(pos2, p1, q1) / a2, np.where(pos1, q2, p2) / a1
                s_up, s_dn = np.minimum(up1, up2), np.minimum(dn1, dn2)
                go_up = u * (s_up + s_dn) < s_dn  # P(up) = s_dn / (s_up + s_dn): E[s] = 0
                s = np.where(go_up, s_up, -s_dn)
                first = np.where(go_up, up1 <= up2, dn1 <= dn2)  # the carried fraction reaches 0 or 1
                # where each ends: up with w2 > 0 (or down with w2 < 0) raises p1 to 1; p2 the other way of w1
                end1, end2 = go_up == pos2, go_up != pos1
                mid1, mid2 = np.clip(p1 + w2 * s, 0.0, 1.0), np.clip(p2 - w1 * s, 0.0, 1.0)
                f_end, s_end = pair & first, pair & ~first
                settled = np.flatnonzero(f_end)  # the carried column is settled; column j carries on
                upT[carry[settled], settled] = end1[settled]
                upT[j] = s_end & end2  # column j settled where the carried one carries on
                p = np.where(f_end, mid2, np.where(s_end, mid1, p))
                wc = np.where(f_end, w2, wc)
                carry = np.where(f_end, j, carry)
            start = live & ~has
            if start.any():
                carry, p = np.where(start, j, carry), np.where(start, p2, p)
                wc, coin = np.where(start, w2, wc), np.where(start, u, coin)
        last = np.flatnonzero(carry >= 0)
        upT[carry[last], last] = coin[last] < p[last]
    return upT.T
