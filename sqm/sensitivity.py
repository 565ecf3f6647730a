"""Proven upper bounds on the L2 and L1 sensitivity of a quantized polynomial sum.

Adding or removing one record x (||x||_2 <= c) changes the integer result by f_hat(x_hat), the compensated
polynomial evaluated on the record's quantized values, so sup ||f_hat(x_hat)|| over admissible records and
all rounding outcomes bounds the sensitivity.  The fact used throughout: stochastic rounding gives
|x_hat_j| <= ceil(gamma |x_j|) < gamma |x_j| + 1.

Note on Lemma 7 of the paper (Delta2 = gamma^2 c^2 + n for the covariance): it assumes
x_hat_j^2 <= gamma^2 x_j^2 + 1, which fails when rounding up, e.g. gamma x_j = 1.5 rounds to 2 and
4 > 2.25 + 1.  With every column at gamma x_j = 1.5, ||x_hat||^2 = 4n exceeds gamma^2 c^2 + n = 3.25n.
We use the sound bound sum_j (gamma |x_j| + 1)^2 <= (gamma c + sqrt(n))^2 instead
(:func:`covariance_l2_paper` keeps the paper's figure for comparison only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .validation import check_gamma, check_positive


@dataclass(frozen=True)
class Sensitivity:
    l2: float
    l1: float
    dim: int
    bound: str  # which bound produced it

    def __post_init__(self):
        if not (self.l2 > 0 and self.l1 > 0):
            raise ValueError(f"sensitivities must be positive, got l2={self.l2}, l1={self.l1}")


def l1_from_l2(l2: float, dim: int) -> float:
    """Delta1 = min(Delta2^2, sqrt(d) Delta2): integers satisfy |v| <= v^2, and ||v||_1 <= sqrt(d)||v||_2."""
    return float(min(l2 * l2, math.sqrt(dim) * l2))


def quantized_norm_bound(gamma: float, party_bounds, party_cols) -> float:
    """Bound on ||x_hat||_2 when each group p of n_p columns (a party's sub-row, or any column group of
    :class:`sqm.vertical.ColumnBounds`) has ||x_p||_2 <= c_p.

    Per group, ||x_hat_p||_2 <= min(gamma c_p + sqrt(n_p), sqrt(n_p) ceil(gamma c_p)): the first by the
    triangle inequality on |x_hat_j| < gamma |x_j| + 1, the second as every |x_hat_j| <= ceil(gamma |x_j|)
    <= ceil(gamma c_p) (it is the smaller for a group of one column, e.g. a label: ceil(gamma c_y)).
    """
    check_gamma(gamma)
    b = np.asarray(party_bounds, np.float64)
    n = np.asarray(party_cols, np.float64)
    per = np.minimum(gamma * b + np.sqrt(n), np.sqrt(n) * np.ceil(gamma * b))
    return float(math.sqrt(np.sum(per ** 2)))


def covariance_sensitivity(gamma: float, row_norm_bound: float, n_vars: int,
                           party_bounds=None, party_cols=None) -> Sensitivity:
    """||x_hat x_hat^T||_F = ||x_hat||_2^2 <= sum_p N_p^2 with N_p of :func:`quantized_norm_bound`
    (<= (gamma c + sqrt(n))^2 for one group of all n columns with ||x|| <= c)."""
    check_positive(row_norm_bound, "row_norm_bound")
    if party_bounds is None:
        party_bounds, party_cols = [row_norm_bound], [n_vars]
    l2 = quantized_norm_bound(gamma, party_bounds, party_cols) ** 2
    return Sensitivity(l2=l2, l1=l1_from_l2(l2, n_vars * n_vars), dim=n_vars * n_vars, bound="covariance")


def gram_sensitivity(gamma: float, bounds) -> Sensitivity:
    """The covariance bound for column groups (:class:`sqm.vertical.ColumnBounds`): adding or removing a record
    changes the quantized Gram sum_i x_hat_i x_hat_i^T by x_hat x_hat^T, whose Frobenius norm is ||x_hat||^2
    <= sum_G N_G^2 (:func:`quantized_norm_bound` per group); L1 = ||x_hat||_1^2 <= min(L2^2, n L2)."""
    return covariance_sensitivity(gamma, float(np.sqrt(np.sum(np.square(bounds.bounds)))), bounds.n_cols,
                                  bounds.bounds, bounds.sizes)


def covariance_l2_paper(gamma: float, row_norm_bound: float, n_vars: int) -> float:
    """Lemma 7's gamma^2 c^2 + n: NOT an upper bound in general (see module docstring); comparison only."""
    return gamma * gamma * row_norm_bound ** 2 + n_vars


def logreg_sensitivity(gamma: float, d: int, row_norm_bound: float = 1.0, weight_bound: float = 1.0,
                       party_bounds=None, party_cols=None) -> Sensitivity:
    """Bound for the compensated Eq. 19 gradient of one record (features ||x|| <= c, label y in {0, 1}).

    The compensated gradient is x_hat * s with the scalar
        s = a_half + sum_k a_k x_hat_k - a_y y_hat,
    a_half = SR(gamma^2 / 2), a_k = SR(gamma w_k / 4), a_y = SR(gamma), y_hat = SR(gamma y).  Hence
        |a_half - a_y y_hat| <= A := max(ceil(gamma^2/2), ceil(gamma)^2 - floor(gamma^2/2)),
        ||a||_2 <= gamma ||w|| / 4 + sqrt(d),   ||x_hat||_2 <= N := gamma c + sqrt(d)  (per party, summed),
    and ||f_hat|| = ||x_hat|| |s| <= N (A + (gamma W / 4 + sqrt(d)) N)  for ||w|| <= W.
    Leading term 3/4 gamma^3 c^2 (W = c = 1), as in Eq. 22; the overhead is O(gamma^2 sqrt(d)), below Eq. 22's.
    """
    check_gamma(gamma)
    check_positive(row_norm_bound, "row_norm_bound")
    check_positive(weight_bound, "weight_bound")
    if party_bounds is None:
        party_bounds, party_cols = [row_norm_bound], [d]
    N = quantized_norm_bound(gamma, party_bounds, party_cols)
    A = max(math.ceil(gamma * gamma / 2), math.ceil(gamma) ** 2 - math.floor(gamma * gamma / 2))
    coef_norm = gamma * weight_bound / 4 + math.sqrt(d)
    l2 = N * (A + coef_norm * N)
    return Sensitivity(l2=l2, l1=l1_from_l2(l2, d), dim=d, bound="logreg-gradient")


def logreg_l2_paper(gamma: float, d: int) -> float:
    """Eq. 22 of the paper, sqrt((3/4 gamma^3)^2 + 9 gamma^5 d + 36 gamma^4), for comparison."""
    return math.sqrt((0.75 * gamma ** 3) ** 2 + 9 * gamma ** 5 * d + 36 * gamma ** 4)


def general_sensitivity(polynomial, gamma: float, col_bounds, int_coefs=None, preprocess: bool = True
                        ) -> Sensitivity:
    """Triangle-inequality bound for any polynomial: |f_hat_t| <= sum_l |a_hat_tl| prod_j ceil(gamma b_j)^B_tlj.

    ``col_bounds[j]`` bounds |x_j| (e.g. the clip bound of the party holding column j).  Without the rounded
    coefficients ``int_coefs``, |a_hat| <= ceil(|a| gamma^(1 + lambda - lambda_l)) is used (or |a| when the
    coefficients are not pre-processed).  L1 is bounded by the sum over outputs directly.
    """
    check_gamma(gamma)
    b = np.asarray(col_bounds, np.float64)
    if b.shape != (polynomial.n_vars,) or np.any(~np.isfinite(b)) or np.any(b < 0):
        raise ValueError(f"need {polynomial.n_vars} finite non-negative column bounds")
    qb = [math.ceil(gamma * v) for v in b]
    lam = polynomial.degree
    if int_coefs is None:
        if preprocess:
            scales = float(gamma) ** (1 + lam - polynomial.term_degrees)
            int_coefs = [math.ceil(abs(a) * s) for a, s in zip(polynomial.term_coef, scales)]
        else:
            int_coefs = [abs(a) for a in polynomial.term_coef]
    per_out = np.zeros(polynomial.n_out, dtype=object)
    per_out[:] = 0
    for t, c, mono in zip(polynomial.term_out, int_coefs, polynomial.term_vars):
        v = abs(int(c)) if float(c).is_integer() else abs(c)
        for j in mono:
            v *= qb[j]
        per_out[int(t)] += v
    l2 = math.sqrt(float(sum(v * v for v in per_out)))
    l1 = float(min(sum(per_out), l2 * l2, math.sqrt(polynomial.n_out) * l2))
    return Sensitivity(l2=l2, l1=l1, dim=polynomial.n_out, bound="general")
