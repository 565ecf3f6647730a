"""Stochastic rounding (Algorithm 2 of the SQM paper)."""
from __future__ import annotations

import numpy as np

from .rng import SeedLike, make_rng
from .validation import check_finite, check_gamma
from sqm.errors import UsageError


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
_ROWS = 16384  # rows per block of the pipage loop (its dozens of temporaries stay in cache: 2x faster at 100k rows)


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
    because no library offers dependent rounding vectorized over rows with a fixed coin budget."""
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
    scaled = x * float(gamma)
    top = float(np.max(np.abs(scaled))) if scaled.size else 0.0
    if top and max(len(g) for g in groups) * (2.0 * top + 2.0) >= _DRIFT_SAFE:
        raise UsageError(f"gamma * |x| reaches {top:.3g}: too large for dependent rounding (its float drift is "
                         f"bounded only while columns x (2 gamma |x| + 2) < 2^40)")
    if coins is None:
        coins = make_rng(seed).random(scaled.shape)
    elif np.shape(coins) != scaled.shape:
        raise UsageError(f"dependent_round: {np.shape(coins)} coins for a block of shape {scaled.shape}")
    low = np.floor(scaled)
    frac = scaled - low  # exact (Sterbenz)
    weight = 2.0 * low + 1.0  # odd, never 0
    up = np.concatenate([_pipage(frac[a:a + _ROWS], weight[a:a + _ROWS], coins[a:a + _ROWS], groups)
                         for a in range(0, n, _ROWS)]) if n else np.zeros((0, d), dtype=bool)
    return low.astype(np.int64) + up.astype(np.int64)


def _pipage(frac, weight, coins, groups) -> np.ndarray:
    """The up-or-down bits of :func:`dependent_round` for a block of rows (fractions, odd weights, coins): each
    group's columns in order, every row at once (elementwise on whole columns, rows independent)."""
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
