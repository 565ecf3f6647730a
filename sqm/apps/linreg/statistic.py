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


def solve_ridge(A, alpha: float, noise_std: float = 0.0, fit_intercept: bool = True):
    """(coef, intercept) from the (noisy) joint Gram ``A``: (Z^T Z + alpha I') w = Z^T y, Z = [X 1], I' not
    penalizing the intercept (as scikit-learn's Ridge).  Noise can make Z^T Z indefinite: its symmetric part's
    eigenvalues are floored at 2 sqrt(p) noise_std, about the spectral norm of a p x p symmetric noise matrix
    with entries of std ``noise_std`` (directions below it are noise); post-processing, no privacy cost."""
    S, M = ridge_system(A, alpha, noise_std, fit_intercept)
    w = np.linalg.lstsq(M, S[:-1, -1], rcond=None)[0]
    return (w[:-1], float(w[-1])) if fit_intercept else (w, 0.0)


def ridge_system(A, alpha: float, noise_std: float = 0.0, fit_intercept: bool = True):
    """(S, M): the symmetric part S of ``A`` and the matrix M that :func:`solve_ridge` solves with (the [X 1]
    block with its eigenvalues floored at 2 sqrt(p) ``noise_std``, plus ``alpha`` off the intercept)."""
    S = (np.asarray(A, np.float64) + np.asarray(A, np.float64).T) / 2.0
    p = S.shape[0] - 1
    lam, V = np.linalg.eigh(S[:p, :p])
    M = (V * np.maximum(lam, 2.0 * math.sqrt(p) * noise_std)) @ V.T + alpha * np.diag([1.0] * (p - 1) + [
        0.0 if fit_intercept else 1.0])
    return S, M


# The factor of the default uniform ridge penalty over the noise's spectral norm (:func:`noise_penalty`) and how
# many noise standard deviations the released R^2's lower bound (:func:`released_r2`) stands below the estimate
# (the released model is replaced by the mean when that bound is not above 0).  Both chosen on the validation
# splits of the training parts of diabetes and breast_cancer only, over factors 0..2 and 0..2 sigmas
# (``python -m bench linreg-utility --tune``); the bench's other data sets were never used to choose them.
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
    released X^T X block below 2 sqrt(p) s to it, a penalty of exactly the noise's order on exactly the
    noise-dominated directions, none on the others.  This uniform penalty comes on top; the validation splits
    chose ``factor`` (:data:`PENALTY_FACTOR`).  Neither grows with n: the signal X^T X grows like n, so the
    regularization's relative weight falls as 1 / n; both scale with s (about 1 / epsilon) and sqrt(d).  It
    reads no record: two data sets of the same shape and declared bounds get the same penalty and floor."""
    p = int(n_features) + int(bool(fit_intercept))
    return float(factor) * 2.0 * math.sqrt(p) * float(noise_std)


def released_r2(A, coef, intercept: float, noise_std: float = 0.0, fit_intercept: bool = True,
                sigmas: float = R2_GUARD_SIGMAS, alpha: float = 0.0,
                n_records: int | None = None) -> tuple[float, float]:
    """(estimate, lower bound) of the model's training R^2 computed from the released joint Gram ``A`` alone
    (post-processing of the release: no privacy cost).

    Estimate: with u = [-w, 1] over the columns [X 1 y], RSS = u^T A u = y'y - 2 w'X'y + w'X'X w; the
    baseline's (the mean: u0 = [0.., -ybar, 1], ybar = (1'y) / (1'1) from A; the zero model without an
    intercept) TSS = u0^T A u0; R^2 = 1 - RSS / TSS.

    Lower bound: the estimate is optimistic, since w was fitted to the same noisy A: if y carried no signal at
    all, the fit would still lower RSS by about b^T M^-1 b, b the part of X'y + e beyond the mean, whose
    expectation is sigma_y^2 (tr(M^-1 C) - 1) + s^2 tr(M^-1) (C the released [X 1] block, M the system
    :func:`solve_ridge` solves, sigma_y^2 <= TSS / n, s the noise std per entry: e's).  That chance share of
    TSS is subtracted (the chance-corrected R^2, like the adjusted R^2 of least squares; n the released 1'1,
    or without an intercept the public record count ``n_records``, else y'y, which is at most n when |y| <= 1);
    then the noise of the two quadratic forms (u^T E u has std s ||u||^2 for E with independent entries of std
    s, or its symmetric part) moves RSS ``sigmas`` such deviations up and TSS as many down (-inf when TSS
    could be <= 0)."""
    S, M = ridge_system(A, alpha, noise_std, fit_intercept)
    u = np.concatenate([-np.asarray(coef, np.float64).ravel()] + ([[-float(intercept)]] if fit_intercept else [])
                       + [[1.0]])
    u0 = np.zeros_like(u)
    u0[-1] = 1.0
    n = float(S[-2, -2]) if fit_intercept else float(n_records) if n_records else float(max(S[-1, -1], 1.0))
    if fit_intercept:
        u0[-2] = -S[-2, -1] / S[-2, -2] if S[-2, -2] > 0 else 0.0
    rss, tss = float(u @ S @ u), float(u0 @ S @ u0)
    estimate = 1.0 - rss / tss if tss > 0 else -math.inf
    Minv = np.linalg.pinv(M)
    chance = (tss / max(n, 1.0)) * max(float(np.trace(Minv @ S[:-1, :-1])) - int(bool(fit_intercept)), 0.0) + \
        float(noise_std) ** 2 * float(np.trace(Minv))
    dr, dt = (sigmas * float(noise_std) * float(v @ v) for v in (u, u0))
    lower = 1.0 - (rss + chance + dr) / (tss - dt) if tss - dt > 0 else -math.inf
    return estimate, lower


def mean_model(A, n_features: int, fit_intercept: bool = True):
    """(coef, intercept) of the intercept-only model from the released Gram: zero weights and the released mean
    (1'y) / (1'1) (zero without an intercept)."""
    S = np.asarray(A, np.float64)
    b = float(S[-2, -1] / S[-2, -2]) if fit_intercept and S[-2, -2] > 0 else 0.0
    return np.zeros(int(n_features)), b


MEAN_NOTE = "the fitted model did not beat the mean on the released statistics: the mean is returned"


def guarded_solve(A, alpha: float | None, noise_std: float, fit_intercept: bool = True,
                  sigmas: float = R2_GUARD_SIGMAS, n_records: int | None = None) -> dict:
    """The server's whole solve from the released Gram ``A`` (post-processing: no privacy cost): the ridge
    penalty (``alpha``, or None: :func:`noise_penalty` from public quantities), :func:`solve_ridge`, the
    released training R^2 (:func:`released_r2`, with the public record count ``n_records``) and, when its
    lower bound is not above 0, the mean instead
    (:func:`mean_model`).  Returns coef, intercept, alpha, r2_released, r2_lower, mean_returned."""
    d = np.asarray(A).shape[0] - 1 - int(bool(fit_intercept))
    a = noise_penalty(d, noise_std, fit_intercept) if alpha is None else float(alpha)
    coef, intercept = solve_ridge(A, a, noise_std, fit_intercept)
    r2, lower = released_r2(A, coef, intercept, noise_std, fit_intercept, sigmas, a, n_records)
    fallback = not lower > 0.0
    if fallback:
        coef, intercept = mean_model(A, d, fit_intercept)
    return {"coef": coef, "intercept": intercept, "alpha": a, "r2_released": r2, "r2_lower": lower,
            "mean_returned": fallback}
