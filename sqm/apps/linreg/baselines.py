"""The baselines of ``sqm linreg`` at the same (epsilon, delta): central DP on the same sufficient statistics
(:func:`central_dp_linreg`) and non-private ridge (:func:`nonprivate_linreg`, scikit-learn's Ridge)."""
from __future__ import annotations

import time

import numpy as np

from sqm.mechanism.vertical import clip_rows
from sqm.apps.linreg.statistic import joint_matrix, solve_ridge
from sqm.apps.pca import symmetric_gaussian


def central_dp_linreg(X, y, alpha: float, epsilon: float, delta: float, feature_bound: float = 1.0,
                      label_bound: float = 1.0, fit_intercept: bool = True, seed=None) -> dict:
    """A trusted curator clips rows (||x|| <= c_x, |y| <= c_y) and releases [X 1 y]^T [X 1 y] + (G + G^T) / 2,
    G iid N(0, sigma^2): the Gaussian mechanism on the full Gram, whose change when a record z = [x, 1, y] is
    added or removed is z z^T with ||z z^T||_F = ||z||^2 <= c_x^2 + 1 + c_y^2 (its L2 sensitivity; the
    symmetric part is post-processing, as for SQM's noise).  sigma from
    :func:`sqm.mechanism.calibration.gaussian_sigma`."""
    from sqm.mechanism.calibration import gaussian_sigma


    t0 = time.perf_counter()
    Xc, clipped = clip_rows(np.asarray(X, np.float64), feature_bound)
    Z = joint_matrix(Xc, np.clip(y, -label_bound, label_bound), fit_intercept)
    l2 = feature_bound ** 2 + label_bound ** 2 + (1.0 if fit_intercept else 0.0)
    sigma = gaussian_sigma(l2, epsilon, delta)
    A = Z.T @ Z + symmetric_gaussian(Z.shape[1], sigma, seed)
    coef, intercept = solve_ridge(A, alpha, sigma, fit_intercept)
    return {"coef": coef, "intercept": intercept, "sigma": sigma, "l2_sensitivity": l2, "clipped": clipped,
            "seconds": time.perf_counter() - t0}


def nonprivate_linreg(X, y, alpha: float) -> dict:
    """Non-private ridge regression (scikit-learn's Ridge), the utility ceiling: coef, intercept, seconds."""
    from sklearn.linear_model import Ridge

    t0 = time.perf_counter()
    ridge = Ridge(alpha=alpha).fit(X, y)
    return {"coef": ridge.coef_, "intercept": ridge.intercept_, "seconds": time.perf_counter() - t0}
