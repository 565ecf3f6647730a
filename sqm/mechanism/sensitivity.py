"""Proven upper bounds on the L2 and L1 sensitivity of a quantized polynomial sum.

Adding or removing one record x (||x||_2 <= c) changes the integer result by f_hat(x_hat), the compensated
polynomial evaluated on the record's quantized values, so sup ||f_hat(x_hat)|| over admissible records and
all rounding outcomes bounds the sensitivity.  The facts used throughout: the clients' rounding
(:func:`sqm.mechanism.quantize.dependent_round`) gives |x_hat_j| <= ceil(gamma |x_j|) < gamma |x_j| + 1, and
keeps each column group's ||x_hat_G||^2 within (gamma c_G)^2 + n_G / 4 + 2 ceil(gamma c_G) + 2.

Note on Lemma 7 of the paper (Delta2 = gamma^2 c^2 + n for the covariance): it assumes
x_hat_j^2 <= gamma^2 x_j^2 + 1, which fails when rounding up, e.g. gamma x_j = 1.5 rounds to 2 and
4 > 2.25 + 1.  With every column at gamma x_j = 1.5, ||x_hat||^2 = 4n exceeds gamma^2 c^2 + n = 3.25n.
We use the sound bound sum_j (gamma |x_j| + 1)^2 <= (gamma c + sqrt(n))^2 instead
(:func:`covariance_l2_paper` keeps the paper's figure for comparison only).

Every bound is computed exactly, in rationals (:class:`fractions.Fraction`: every float is one), with each
square root replaced by a rational upper bound (:func:`sqrt_up`, exact where the root is rational), and is
returned as the smallest float at or above it (:func:`float_up`).  Float arithmetic could land below the true
bound: (sqrt(18))^2 is 17.999999999999996 in floats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .validation import check_base_rate, check_gamma, check_positive
from sqm.errors import UsageError


@dataclass(frozen=True)
class Sensitivity:
    l2: float
    l1: float
    dim: int
    bound: str  # which bound produced it

    def __post_init__(self):
        if not (self.l2 > 0 and self.l1 > 0):
            raise UsageError(f"sensitivities must be positive, got l2={self.l2}, l1={self.l1}")


SQRT_BITS = 80  # sqrt_up's precision: an upper bound within 2^-80 of the root (relative to the denominator)


def sqrt_up(q) -> Fraction:
    """A rational upper bound on sqrt(q) (q >= 0 a rational, int or float), exact when sqrt(q) is rational with
    a denominator dividing q's times 2^80, and otherwise at most 2^-80 / denominator(q) above it: sqrt(a / b)
    = sqrt(a b) / b, and sqrt(a b 4^k) is bounded by ``math.isqrt`` plus one."""
    q = Fraction(q)
    if q < 0:
        raise UsageError(f"sqrt_up of a negative number {q}")
    a, b = q.numerator, q.denominator
    s = (a * b) << (2 * SQRT_BITS)
    r = math.isqrt(s)
    return Fraction(r if r * r == s else r + 1, b << SQRT_BITS)


def float_up(q) -> float:
    """The smallest float at or above the rational ``q``."""
    q = Fraction(q)
    f = float(q)
    return f if Fraction(f) >= q else math.nextafter(f, math.inf)


def l1_from_l2(l2: float, dim: int) -> float:
    """Delta1 = min(Delta2^2, sqrt(d) Delta2): integers satisfy |v| <= v^2, and ||v||_1 <= sqrt(d)||v||_2
    (computed exactly, rounded up)."""
    x = Fraction(l2)
    return float_up(min(x * x, sqrt_up(dim) * x))


# relative slack on ||gamma x_G||^2 <= (gamma c_G)^2 for the float products gamma * x_j and the clip's float norm
_FLOAT_SLACK = Fraction(1, 2 ** 40)


def dependent_norm_bound_sq(gamma_c: Fraction, n: int) -> int:
    """floor((gamma c)^2 (1 + 2^-40) + n / 4) + 2 ceil(gamma c) + 2: an integer bound on ||x_hat_G||^2 for a
    group of n columns with ||x_G|| <= c rounded by :func:`sqm.mechanism.quantize.dependent_round`.

    Proof: its docstring gives ||x_hat_G||^2 < ||y_G||^2 + n/4 + |w_l| + drift with y = gamma x,
    |w_l| <= 2 ceil(max |y_j|) + 1 <= 2 ceil(gamma c) + 1 and drift < 2^-9; ||y_G||^2 <= (gamma c)^2 up to the
    float rounding of gamma x_j and of the clip (relative 2^-40 covers it).  With A the floored part,
    ||x_hat_G||^2 < A + 1 + 2 ceil(gamma c) + 1 + drift, and an integer below an integer plus 1 + drift
    (drift < 1) is at most that integer: ||x_hat_G||^2 <= A + 2 ceil(gamma c) + 2."""
    a = gamma_c * gamma_c * (1 + _FLOAT_SLACK) + Fraction(int(n), 4)
    return math.floor(a) + 2 * math.ceil(gamma_c) + 2


def quantized_norm_bound_sq(gamma: float, party_bounds, party_cols) -> Fraction:
    """A rational upper bound on ||x_hat||_2^2 when each group p of n_p columns (a party's sub-row, or any
    column group of :class:`sqm.mechanism.vertical.ColumnBounds`) has ||x_p||_2 <= c_p and is rounded by
    :func:`sqm.mechanism.quantize.dependent_round`: sum_p N_p^2 with

        N_p^2 = min((gamma c_p + sqrt(n_p))^2, n_p ceil(gamma c_p)^2, D_p),

    the first by the triangle inequality on |x_hat_j| < gamma |x_j| + 1, the second as every
    |x_hat_j| <= ceil(gamma |x_j|) <= ceil(gamma c_p) (the smaller for a group of one column, e.g. a label),
    both true of any rounding to floor or ceil; the third, D_p ~ (gamma c_p)^2 + n_p / 4 + 2 gamma c_p, is
    :func:`dependent_norm_bound_sq`, what dependent rounding adds (the smallest for wide groups: at gamma 4096
    and 64 columns, 1.0005 (gamma c)^2 against the first's 1.0039).  Exact rationals, sqrt(n_p) bounded above by
    :func:`sqrt_up`."""
    check_gamma(gamma)
    g = Fraction(gamma)
    total = Fraction(0)
    for c, n in zip(np.asarray(party_bounds, np.float64).tolist(), np.asarray(party_cols).tolist(), strict=False):
        gc = g * Fraction(c)
        bounds: list[Fraction | int] = [(gc + sqrt_up(int(n))) ** 2, int(n) * math.ceil(gc) ** 2,
                                        dependent_norm_bound_sq(gc, int(n))]
        total += min(bounds)
    return total


# the row limit's relative slack: (1 + 2^-40)^2 < 1 + 2^-38 covers _FLOAT_SLACK (the float products gamma x_j)
# and rows up to ||x||^2 <= c^2 (1 + 2^-40), which a float normalisation may leave a few ulp above c^2
_ROW_SLACK = Fraction(1, 2 ** 38)


def row_limit_sq(gamma: float, row_norm_bound: float, n_cols: int, n_groups: int) -> int:
    """The row limit B of a covariance release with the secure row norm check
    (:attr:`sqm.mpc.protocols.backend.Job.row_limit`): an integer such that every record with ||x||_2 <= c, its G column
    groups (a party's columns each) each clipped to c and rounded on its own by
    :func:`sqm.mechanism.quantize.dependent_round`, has ||x_hat||^2 <= B:

        B = floor((gamma c)^2 (1 + 2^-38) + n / 4 + 2 sqrt(G) gamma c) + 4 G.

    Proof: group g, of n_g columns and norm c_g <= c (so its clip does nothing), has ||x_hat_g||^2 <=
    floor((gamma c_g)^2 (1 + 2^-40) + n_g / 4) + 2 ceil(gamma c_g) + 2 (:func:`dependent_norm_bound_sq`, with c_g
    its own norm) <= (gamma c_g)^2 (1 + 2^-40) + n_g / 4 + 2 gamma c_g + 4.  Summed over the groups: sum c_g^2 =
    ||x||^2 <= c^2 (1 + 2^-40) (the slack admits a row that a float normalisation left a few ulp above c), and
    sum c_g <= sqrt(G) c (Cauchy-Schwarz), so ||x_hat||^2 <= (gamma c)^2 (1 + 2^-40)^2 + n / 4 + 2 sqrt(G) gamma c
    + 4 G, and (1 + 2^-40)^2 < 1 + 2^-38: an integer below the real number under the floor plus 4 G is at most
    B.  Exact rationals, sqrt(G) bounded above by :func:`sqrt_up`.

    The check keeps exactly the records with ||x_hat||^2 <= B, so B is also the release's sensitivity
    (:func:`row_checked_gram_sensitivity`), whatever a record holds."""
    check_gamma(gamma)
    check_positive(row_norm_bound, "row_norm_bound")
    n_cols, n_groups = int(n_cols), int(n_groups)
    if n_cols < 1 or not 1 <= n_groups <= n_cols:
        raise UsageError(f"a row limit needs 1 <= groups <= columns, got {n_groups} groups of {n_cols} columns")
    gc = Fraction(gamma) * Fraction(row_norm_bound)
    a = gc * gc * (1 + _ROW_SLACK) + Fraction(n_cols, 4) + 2 * sqrt_up(n_groups) * gc
    return math.floor(a) + 4 * n_groups


def row_checked_gram_sensitivity(gamma: float, row_norm_bound: float, n_cols: int, n_groups: int) -> Sensitivity:
    """The covariance bound under the secure row norm check: the evaluation keeps only records with
    ||x_hat||^2 <= B (:func:`row_limit_sq`), so adding or removing one changes the quantized Gram by x_hat x_hat^T,
    of Frobenius norm ||x_hat||^2 <= B, whatever the record; L1 = ||x_hat||_1^2 <= min(B^2, n B)."""
    l2 = float_up(row_limit_sq(gamma, row_norm_bound, n_cols, n_groups))
    return Sensitivity(l2=l2, l1=l1_from_l2(l2, n_cols * n_cols), dim=n_cols * n_cols, bound="covariance")


def quantized_norm_bound(gamma: float, party_bounds, party_cols) -> float:
    """Bound on ||x_hat||_2 (:func:`quantized_norm_bound_sq`'s square root, bounded above, as a float)."""
    return float_up(sqrt_up(quantized_norm_bound_sq(gamma, party_bounds, party_cols)))


def covariance_sensitivity(gamma: float, row_norm_bound: float, n_vars: int,
                           party_bounds=None, party_cols=None) -> Sensitivity:
    """||x_hat x_hat^T||_F = ||x_hat||_2^2 <= sum_p N_p^2 of :func:`quantized_norm_bound_sq` (<= (gamma c +
    sqrt(n))^2 for one group of all n columns with ||x|| <= c), exactly, rounded up to a float."""
    check_positive(row_norm_bound, "row_norm_bound")
    if party_bounds is None:
        party_bounds, party_cols = [row_norm_bound], [n_vars]
    l2 = float_up(quantized_norm_bound_sq(gamma, party_bounds, party_cols))
    return Sensitivity(l2=l2, l1=l1_from_l2(l2, n_vars * n_vars), dim=n_vars * n_vars, bound="covariance")


def gram_sensitivity(gamma: float, bounds) -> Sensitivity:
    """The covariance bound for column groups (:class:`sqm.mechanism.vertical.ColumnBounds`): adding or removing a
    record changes the quantized Gram sum_i x_hat_i x_hat_i^T by x_hat x_hat^T, whose Frobenius norm is ||x_hat||^2
    <= sum_G N_G^2 (:func:`quantized_norm_bound` per group); L1 = ||x_hat||_1^2 <= min(L2^2, n L2)."""
    return covariance_sensitivity(gamma, float(np.sqrt(np.sum(np.square(bounds.bounds)))), bounds.n_cols,
                                  bounds.bounds, bounds.sizes)


def covariance_l2_paper(gamma: float, row_norm_bound: float, n_vars: int) -> float:
    """Lemma 7's gamma^2 c^2 + n: NOT an upper bound in general (see module docstring); comparison only."""
    return gamma * gamma * row_norm_bound ** 2 + n_vars


BASE_RATE = 0.5  # Eq. 19's expansion point: the logistic loss expanded at w = 0, where sigma(0) = 1/2


def taylor_slope(base_rate: float = BASE_RATE) -> float:
    """sigma'(b0) = p0 (1 - p0) at the intercept-only model sigma(b0) = p0 = ``base_rate`` (1/4 at 1/2): the slope
    of logistic regression's first-order Taylor gradient (:func:`sqm.mechanism.polynomial.logreg_gradient`)."""
    p0 = check_base_rate(base_rate)
    return p0 * (1.0 - p0)


def logreg_sensitivity(gamma: float, d: int, row_norm_bound: float = 1.0, weight_bound: float = 1.0,
                       party_bounds=None, party_cols=None, base_rate: float = BASE_RATE) -> Sensitivity:
    """Bound for the compensated Eq. 19 gradient of one record (features ||x|| <= c, label y in {0, 1}).

    The compensated gradient is x_hat * s with the scalar
        s = a_half + sum_k a_k x_hat_k - a_y y_hat,
    a_half = SR(gamma^2 / 2), a_k = SR(gamma w_k / 4), a_y = SR(gamma), y_hat = SR(gamma y).  Hence
        |a_half - a_y y_hat| <= A := max(ceil(gamma^2/2), ceil(gamma)^2 - floor(gamma^2/2)),
        ||a||_2 <= K := min(gamma W / 4 + sqrt(d), sqrt(D(gamma W / 4, d))),   ||x_hat||_2 <= N (per party, summed),
    and ||f_hat|| = ||x_hat|| |s| <= N (A + K N)  for ||w|| <= W.  Each output has its own coefficient vector a,
    rounded as one group by dependent rounding (:meth:`sqm.apps.logreg.gradient.LRGradient.compensate`), hence
    D = :func:`dependent_norm_bound_sq` (about (gamma W / 4)^2 + d / 4 + gamma W / 2); the first bound holds for
    any rounding to floor or ceil.
    Leading term 3/4 gamma^3 c^2 (W = c = 1), as in Eq. 22; the overhead is O(gamma^2 sqrt(d)), below Eq. 22's.

    With a ``base_rate`` p0 (the expansion at the intercept-only model sigma(b0) = p0,
    :func:`sqm.mechanism.polynomial.logreg_gradient`): a_half = SR(gamma^2 p0), a_k = SR(gamma p0 (1 - p0) w_k),
    so A = max(ceil(gamma^2 p0), ceil(gamma)^2 - floor(gamma^2 p0)) (gamma^2 p0 both exact and as the float product
    the server rounds) and gamma W p0 (1 - p0) in place of gamma W / 4: at p0 = 1/2 the bound above.
    """
    slope = Fraction(taylor_slope(base_rate))
    check_gamma(gamma)
    check_positive(row_norm_bound, "row_norm_bound")
    check_positive(weight_bound, "weight_bound")
    if party_bounds is None:
        party_bounds, party_cols = [row_norm_bound], [d]
    N = sqrt_up(quantized_norm_bound_sq(gamma, party_bounds, party_cols))
    g = Fraction(gamma)
    # a_half's value before rounding, exact and as the server's float product (compensation.round_scaled)
    half = (g * g * Fraction(float(base_rate)), Fraction(float(base_rate) * (float(gamma) * float(gamma))))
    A = max(max(math.ceil(h) for h in half), math.ceil(g) ** 2 - min(math.floor(h) for h in half))
    gw = g * Fraction(weight_bound) * slope
    coef_norm = min(gw + sqrt_up(d), sqrt_up(dependent_norm_bound_sq(gw, d)))
    l2 = float_up(N * (A + coef_norm * N))
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
        raise UsageError(f"need {polynomial.n_vars} finite non-negative column bounds")
    g = Fraction(gamma)
    qb = [math.ceil(g * Fraction(v)) for v in b.tolist()]  # exact: gamma b_j in floats may round down
    lam = polynomial.degree
    if int_coefs is None:
        if preprocess:
            int_coefs = [math.ceil(abs(Fraction(float(a))) * g ** int(1 + lam - k))
                         for a, k in zip(polynomial.term_coef, polynomial.term_degrees, strict=False)]
        else:
            int_coefs = [abs(a) for a in polynomial.term_coef]
    per_out = [Fraction(0)] * polynomial.n_out  # exact: every coefficient and bound is a rational
    for t, c, mono in zip(polynomial.term_out, int_coefs, polynomial.term_vars, strict=False):
        v = abs(Fraction(int(c)) if float(c).is_integer() else Fraction(float(c)))
        for j in mono:
            v *= qb[j]
        per_out[int(t)] += v
    l2 = sqrt_up(sum(v * v for v in per_out))
    l1 = min(sum(per_out), l2 * l2, sqrt_up(polynomial.n_out) * l2)
    return Sensitivity(l2=float_up(l2), l1=float_up(l1), dim=polynomial.n_out, bound="general")
