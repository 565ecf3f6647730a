"""The statistic of private ridge regression: the joint Gram [X 1 y]^T [X 1 y] (:class:`JointGram`, with its
proven sensitivity), its per-column-group bounds (:func:`joint_bounds`), the joint rows (:func:`joint_matrix`) and
the server's solve (:func:`solve_ridge`).

Layout: the clients hold contiguous column blocks of [X, 1, y]; the last client holds the label y (and the
constant column of the intercept).  Bounds are per column group (:class:`sqm.mechanism.vertical.ColumnBounds`): each
party's feature sub-row ||x_p|| <= c_p (sum_p c_p^2 = c_x^2), the constant 1, and the label |y| <= c_y on its
own, so the label is never clipped with its party's features.
"""
from __future__ import annotations

import math

import numpy as np

from sqm.mechanism.polynomial import CovariancePolynomial
from sqm.mechanism.sensitivity import gram_sensitivity
from sqm.mechanism.vertical import ColumnBounds
from sqm.errors import UsageError


class JointGram(CovariancePolynomial):
    """f(z) = z z^T for the joint row z = [x, 1, y] ([x, y] without intercept); sum_z f(z) = [X 1 y]^T [X 1 y]
    holds every sufficient statistic of ridge regression (X^T X, X^T y, y^T y, column sums, the count).

    Proven sensitivity, adding or removing one record, with ``bounds`` from :func:`joint_bounds`.  Each client
    rounds its entries stochastically at scale gamma, z_hat_j in {floor(gamma z_j), ceil(gamma z_j)}; the other
    records' roundings do not depend on the record, so the quantized Gram changes by exactly z_hat z_hat^T:
        L2 = ||z_hat z_hat^T||_F = ||z_hat||_2^2,   L1 = ||z_hat||_1^2.
    Per party feature group (n_p columns, ||x_p|| <= c_p):  ||x_hat_p|| <= min(gamma c_p + sqrt(n_p),
    sqrt(n_p) ceil(gamma c_p)) (|x_hat_j| < gamma |x_j| + 1 and the triangle inequality; or every
    |x_hat_j| <= ceil(gamma c_p)); the constant: |1_hat| <= ceil(gamma); the label: |y_hat| <= ceil(gamma c_y).
    So  L2 <= sum_p min(...)^2 + ceil(gamma)^2 + ceil(gamma c_y)^2  (about gamma^2 (c_x^2 + 1 + c_y^2)) and
    L1 <= min(L2^2, (d + 2) L2) (integers: |v| <= v^2; Cauchy-Schwarz: ||z_hat||_1^2 <= (d + 2) ||z_hat||_2^2).
    This is :func:`sqm.mechanism.sensitivity.gram_sensitivity` on those groups (tests: brute force over every rounding
    outcome of worst-case rows)."""

    def __init__(self, n_vars: int):
        super().__init__(n_vars)
        object.__setattr__(self, "name", "joint-gram")

    def sensitivity(self, gamma: float, bounds: ColumnBounds, preprocess: bool = False):
        if bounds.n_cols != self.n_vars:
            raise UsageError(f"the joint Gram has {self.n_vars} columns, the bounds cover {bounds.n_cols}")
        return gram_sensitivity(gamma, bounds)


def joint_bounds(col_counts, feature_bound: float, label_bound: float, fit_intercept: bool) -> ColumnBounds:
    """Column groups of [X 1 y] split among clients holding ``col_counts`` columns (the last ones: 1 and y)."""
    n = int(sum(col_counts))
    extra = {n - 1: float(label_bound)} | ({n - 2: 1.0} if fit_intercept else {})
    return ColumnBounds.parties(col_counts, feature_bound, separate=extra)


def joint_matrix(X, y, fit_intercept: bool) -> np.ndarray:
    """The joint rows [x, 1, y] ([x, y] without intercept) whose Gram :class:`JointGram` releases."""
    X = np.asarray(X, np.float64)
    return np.hstack([X] + ([np.ones((X.shape[0], 1))] if fit_intercept else []) + [np.asarray(y, float)[:, None]])


def solve_ridge(A, alpha: float, noise_std: float = 0.0, fit_intercept: bool = True,
                floor_factor: float | None = None):
    """(coef, intercept) from the (noisy) joint Gram ``A``: (Z^T Z + alpha I') w = Z^T y, Z = [X 1], I' not
    penalizing the intercept (as scikit-learn's Ridge).  Noise can make Z^T Z indefinite: its symmetric part's
    eigenvalues are floored at :func:`eigen_floor` (``floor_factor`` times 2 sqrt(p) noise_std, about the
    spectral norm of a p x p symmetric noise matrix with entries of std ``noise_std``); post-processing, no
    privacy cost."""
    S, M = ridge_system(A, alpha, noise_std, fit_intercept, floor_factor)
    w = np.linalg.lstsq(M, S[:-1, -1], rcond=None)[0]
    return (w[:-1], float(w[-1])) if fit_intercept else (w, 0.0)


# The eigenvalue floor of the solve as a multiple of the noise's spectral norm 2 sqrt(p) s (:func:`eigen_floor`),
# and how many standard errors below and above the released R^2 its interval reaches (:func:`r2_interval`).
# FLOOR_FACTOR was chosen on 4-fold validation splits of the training parts of diabetes and breast_cancer only
# (``python -m bench linreg-utility --tune``: the best mean validation R^2 among the settings whose worst run was no
# worse than AdaSSP's).  R2_Z_LOW and R2_Z_HIGH on the training
# parts of the same two sets (40 seeded runs at each epsilon 0.5..8): the smallest half-integers that hold every
# cell's 5% and 95% quantiles of (true training R^2 - estimate) / standard error, so the interval held the true
# training R^2 in at least 90% of runs at every epsilon there.  Asymmetric: the estimate stays optimistic (the
# weights fitted the noise beyond the first-order correction).  The bench's other data sets were never used.
FLOOR_FACTOR = 0.5
R2_Z_LOW = 2.5
R2_Z_HIGH = 1.5


def eigen_floor(n_cols: int, noise_std: float, floor_factor: float | None = None) -> float:
    """The floor of the released [X 1] block's eigenvalues: ``floor_factor`` (:data:`FLOOR_FACTOR`) times
    2 sqrt(p) ``noise_std``, p = ``n_cols``; public (the noise std is the mechanism's, fixed before any record
    is read)."""
    f = FLOOR_FACTOR if floor_factor is None else float(floor_factor)
    return f * 2.0 * math.sqrt(int(n_cols)) * float(noise_std)


def ridge_system(A, alpha: float, noise_std: float = 0.0, fit_intercept: bool = True,
                 floor_factor: float | None = None):
    """(S, M): the symmetric part S of ``A`` and the matrix M that :func:`solve_ridge` solves with (the [X 1]
    block with its eigenvalues floored at :func:`eigen_floor`, plus ``alpha`` off the intercept)."""
    S = (np.asarray(A, np.float64) + np.asarray(A, np.float64).T) / 2.0
    p = S.shape[0] - 1
    lam, V = np.linalg.eigh(S[:p, :p])
    M = (V * np.maximum(lam, eigen_floor(p, noise_std, floor_factor))) @ V.T + alpha * np.diag(
        [1.0] * (p - 1) + [0.0 if fit_intercept else 1.0])
    return S, M


# The factor of the default uniform ridge penalty over the noise's spectral norm (:func:`noise_penalty`) and how
# many noise standard deviations the chance-corrected R^2 (:func:`released_r2`) stands below the estimate.  Both
# chosen with FLOOR_FACTOR on the same validation splits.
PENALTY_FACTOR = 0.0
R2_GUARD_SIGMAS = 0.0


def noise_penalty(n_features: int, noise_std: float, fit_intercept: bool = True,
                  factor: float = PENALTY_FACTOR) -> float:
    """The default uniform ridge penalty, on the record-sum scale, from public quantities only: ``factor``
    times 2 sqrt(p) ``noise_std``, p = d (+ 1 with an intercept) the columns of [X 1].

    Why: the server solves (X^T X + E + alpha I) w = X^T y + e, E the released Gram's noise with entries of std
    s (``noise_std``: the mechanism's own, sqrt(2 mu) / scale, fixed by epsilon, delta, gamma and the declared
    bounds before any record is read).  The spectral norm of such a p x p matrix is about 2 sqrt(p) s
    (semicircle law), so directions of X^T X whose eigenvalue is below it are swamped by noise and the solve
    would amplify the noise along them.  AdaSSP (Wang 2018) adds lambda = (noise norm) - lambda_min(X^T X),
    just enough to lift the smallest eigenvalue to the noise level, spending budget on a private lambda_min.
    :func:`solve_ridge` does the same direction by direction for free: it raises every eigenvalue of the
    released X^T X block below :func:`eigen_floor` (a multiple of 2 sqrt(p) s) to it, a penalty of the noise's
    order on exactly the noise-dominated directions, none on the others.  This uniform penalty comes on top; the
    validation splits chose ``factor`` (:data:`PENALTY_FACTOR`) with the floor's multiple.  Neither grows with
    n: the signal X^T X grows like n, so the regularization's relative weight falls as 1 / n; both scale with s
    (about 1 / epsilon) and sqrt(d).  It reads no record: two data sets of the same shape and declared bounds
    get the same penalty and floor."""
    p = int(n_features) + int(bool(fit_intercept))
    return float(factor) * 2.0 * math.sqrt(p) * float(noise_std)


def released_r2(A, coef, intercept: float, noise_std: float = 0.0, fit_intercept: bool = True,
                sigmas: float = R2_GUARD_SIGMAS, alpha: float = 0.0,
                n_records: int | None = None, floor_factor: float | None = None) -> tuple[float, float]:
    """(estimate, chance-corrected estimate) of the fitted model's training R^2 computed from the released joint
    Gram ``A`` alone (post-processing of the release: no privacy cost).

    Estimate: with u = [-w, 1] over the columns [X 1 y], RSS = u^T A u = y'y - 2 w'X'y + w'X'X w; the
    baseline's (the mean: u0 = [0.., -ybar, 1], ybar = (1'y) / (1'1) from A; the zero model without an
    intercept) TSS = u0^T A u0; R^2 = 1 - RSS / TSS.

    Chance-corrected: the estimate is optimistic, since w was fitted to the same noisy A: if y carried no signal
    at all, the fit would still lower RSS by about b^T M^-1 b, b the part of X'y + e beyond the mean, whose
    expectation is sigma_y^2 (tr(M^-1 C) - 1) + (s^2 / 2) tr(M^-1) (C the released [X 1] block, M the system
    :func:`solve_ridge` solves, sigma_y^2 <= TSS / n, s the noise std per released entry: e, an off-diagonal
    entry of the symmetric part, the mean of two independent noisy copies, has variance s^2 / 2).  That chance share of
    TSS is subtracted (like the adjusted R^2 of least squares; n the released 1'1, or without an intercept the
    public record count ``n_records``, else y'y, which is at most n when |y| <= 1); then the noise of the two
    quadratic forms (u^T E u has std s ||u||^2 for E with independent entries of std s, or its symmetric part)
    moves RSS ``sigmas`` such deviations up and TSS as many down (-inf when TSS could be <= 0)."""
    S, M = ridge_system(A, alpha, noise_std, fit_intercept, floor_factor)
    u, u0, n = _residual_forms(S, coef, intercept, fit_intercept, n_records)
    rss, tss = float(u @ S @ u), float(u0 @ S @ u0)
    estimate = 1.0 - rss / tss if tss > 0 else -math.inf
    Minv = np.linalg.pinv(M)
    chance = (tss / max(n, 1.0)) * max(float(np.trace(Minv @ S[:-1, :-1])) - int(bool(fit_intercept)), 0.0) + \
        float(noise_std) ** 2 / 2.0 * float(np.trace(Minv))
    dr, dt = (sigmas * float(noise_std) * float(v @ v) for v in (u, u0))
    lower = 1.0 - (rss + chance + dr) / (tss - dt) if tss - dt > 0 else -math.inf
    return estimate, lower


def _residual_forms(S, coef, intercept: float, fit_intercept: bool, n_records: int | None):
    """(u, u0, n): the model's residual vector over [X 1 y] (RSS = u^T A u), the mean's (or the zero model's)
    and the record count (the released 1'1; without an intercept ``n_records``, else y'y)."""
    u = np.concatenate([-np.asarray(coef, np.float64).ravel()] + ([[-float(intercept)]] if fit_intercept else [])
                       + [[1.0]])
    u0 = np.zeros_like(u)
    u0[-1] = 1.0
    n = float(S[-2, -2]) if fit_intercept else float(n_records) if n_records else float(max(S[-1, -1], 1.0))
    if fit_intercept:
        u0[-2] = -S[-2, -1] / S[-2, -2] if S[-2, -2] > 0 else 0.0
    return u, u0, n


def shrinkage(estimate: float, corrected: float) -> float:
    """The factor t in [0, 1] by which the released model's predictions are pulled toward the released mean
    (ybar + t (f(x) - ybar)): t^2 = corrected / estimate, clipped to [0, 1].

    Why: the spread of the predictions around the mean is what the fit explains (estimate x TSS on the released
    statistics), and scaling them by t scales it by t^2; the release supports only its chance-corrected part
    (:func:`released_r2`), so t^2 keeps exactly that share.  No signal beyond chance: t = 0, the mean; a gain
    far above chance: t near 1, the fitted model.  A function of the released statistics and public noise scale
    only: post-processing, no privacy cost."""
    if not (estimate > 0 and corrected > 0):
        return 0.0
    return float(min(1.0, math.sqrt(corrected / estimate)))


def r2_interval(A, coef, intercept: float, noise_std: float, fit_intercept: bool = True, shrink: float = 1.0,
                alpha: float = 0.0, n_records: int | None = None, floor_factor: float | None = None,
                fitted=None) -> tuple[float, float]:
    """(estimate, standard error) of the released model's training R^2, the R^2 of (``coef``, ``intercept``) on
    the records the release summed, from the release alone (post-processing, no privacy cost).

    RSS = u^T A u of the released model's residual vector u.  The released A = G + E (G the exact Gram) so RSS
    differs from the true one by u^T E u, of std s ||u||^2 (s = ``noise_std``); it is biased low because the
    weights absorbed the noise: the fitted g = [w, b] (``fitted``; default ``coef`` and ``intercept``) solves
    M g = X'y + e with M holding the noise E_xx, so to first order g moves by M^-1 (e - E_xx g), and u^T E u
    by -2 t (e - E_xx g)' M^-1 (e - E_xx g), of expectation -t s^2 (1 + ||g||^2) tr(M^-1) (the symmetric part's
    off-diagonal entries have variance s^2 / 2), which is added back (t = ``shrink``).  TSS likewise, of std
    s ||u0||^2.  The standard error is (s ||u||^2 + |1 - R^2| s ||u0||^2) / TSS, the two errors taken as if
    fully correlated (an upper bound on the delta method's); the interval the output prints reaches
    :data:`R2_Z_LOW` of them below and :data:`R2_Z_HIGH` above.  It says how well the model fits the training
    records, not how it generalises."""
    S, M = ridge_system(A, alpha, noise_std, fit_intercept, floor_factor)
    u, u0, _ = _residual_forms(S, coef, intercept, fit_intercept, n_records)
    s2 = float(noise_std) ** 2
    rss = float(u @ S @ u) + float(shrink) * s2 * float(np.trace(np.linalg.pinv(M)))
    tss = float(u0 @ S @ u0)
    if not tss > 0:
        return -math.inf, math.inf
    estimate = 1.0 - rss / tss
    se = float(noise_std) * (float(u @ u) + abs(1.0 - estimate) * float(u0 @ u0)) / tss
    return estimate, se


def mean_model(A, n_features: int, fit_intercept: bool = True, noise_std: float = 0.0):
    """(coef, intercept) of the intercept-only model from the released Gram: zero weights and the released mean
    m = (1'y) / (1'1) (zero without an intercept), 1'y from the symmetric part (the mean of its two noisy copies, as
    every other use of the release), pulled toward 0, the centre of the label's declared bound |y| <= c_y, by the
    empirical-Bayes factor max(0, 1 - v / m^2), v = ``noise_std``^2 / (2 (1'1)^2) the variance the noise gives m
    (:func:`shrink_to_centre`).  Post-processing of the release and public quantities: no privacy cost."""
    S = (np.asarray(A, np.float64) + np.asarray(A, np.float64).T) / 2.0
    if not (fit_intercept and S[-2, -2] > 0):
        return np.zeros(int(n_features)), 0.0
    n = float(S[-2, -2])
    return np.zeros(int(n_features)), shrink_to_centre(float(S[-2, -1] / n), float(noise_std) ** 2 / (2.0 * n * n))


def shrink_to_centre(m: float, v: float) -> float:
    """A noisy mean ``m`` (noise variance ``v``) pulled toward 0: m max(0, 1 - v / m^2).

    Why: at a few hundred records and a small epsilon the released mean's own noise costs more R^2 than the
    fitted model gains (the mean's error enters every prediction).  Under a prior m ~ N(0, tau^2) the posterior
    mean is m tau^2 / (tau^2 + v), and m^2 - v estimates tau^2 (empirical Bayes): a mean within its noise of the
    bound's centre is pulled to it, one many noise deviations away is kept (factor 1 - v / m^2 -> 1).  Its mean
    squared error is a third of the raw mean's at the centre, below it within 1.15 noise deviations of it, and at
    most 1.5 times it (2.35 deviations away; exact integrals over the Gaussian noise in the tests), an excess that
    falls as 1 / n^2 with the record count."""
    if v <= 0.0 or m == 0.0:
        return float(m)
    return float(m * max(0.0, 1.0 - v / (m * m)))


MEAN_NOTE = "the fitted model did not beat the mean on the released statistics: the mean is returned"


def guarded_solve(A, alpha: float | None, noise_std: float, fit_intercept: bool = True,
                  sigmas: float = R2_GUARD_SIGMAS, n_records: int | None = None,
                  floor_factor: float | None = None) -> dict:
    """The server's whole solve from the released Gram ``A`` (post-processing: no privacy cost): the ridge
    penalty (``alpha``, or None: :func:`noise_penalty` from public quantities), :func:`solve_ridge` with its
    eigenvalue floor (:func:`eigen_floor`), the fitted model's released and chance-corrected training R^2
    (:func:`released_r2`, with the public record count ``n_records``), the model pulled toward the released
    mean by :func:`shrinkage` (the mean itself when nothing beyond chance is left), and the released model's
    training R^2 with its standard error (:func:`r2_interval`).  Returns coef, intercept, alpha, shrinkage,
    r2_released, r2_std, r2_lower, r2_upper (:data:`R2_Z_LOW` standard errors below, :data:`R2_Z_HIGH` above),
    r2_fit and r2_corrected (the fitted model's, before shrinking), mean_returned."""
    d = np.asarray(A).shape[0] - 1 - int(bool(fit_intercept))
    a = noise_penalty(d, noise_std, fit_intercept) if alpha is None else float(alpha)
    coef, intercept = solve_ridge(A, a, noise_std, fit_intercept, floor_factor)
    r2, corrected = released_r2(A, coef, intercept, noise_std, fit_intercept, sigmas, a, n_records, floor_factor)
    t = shrinkage(r2, corrected)
    _, ybar = mean_model(A, d, fit_intercept, noise_std)
    fitted = np.concatenate([np.asarray(coef, np.float64)] + ([[intercept]] if fit_intercept else []))
    coef, intercept = t * np.asarray(coef, np.float64), float(ybar + t * (intercept - ybar))
    est, se = r2_interval(A, coef, intercept, noise_std, fit_intercept, t, a, n_records, floor_factor, fitted)
    return {"coef": coef, "intercept": intercept, "alpha": a, "shrinkage": t, "r2_released": est, "r2_std": se,
            "r2_lower": est - R2_Z_LOW * se, "r2_upper": est + R2_Z_HIGH * se, "r2_fit": r2, "r2_corrected": corrected,
            "mean_returned": t == 0.0}
