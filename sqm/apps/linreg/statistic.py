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
    S = (np.asarray(A, np.float64) + np.asarray(A, np.float64).T) / 2.0
    p = S.shape[0] - 1
    lam, V = np.linalg.eigh(S[:p, :p])
    M = (V * np.maximum(lam, 2.0 * math.sqrt(p) * noise_std)) @ V.T + alpha * np.diag([1.0] * (p - 1) + [
        0.0 if fit_intercept else 1.0])
    w = np.linalg.lstsq(M, S[:p, p], rcond=None)[0]
    return (w[:-1], float(w[-1])) if fit_intercept else (w, 0.0)
