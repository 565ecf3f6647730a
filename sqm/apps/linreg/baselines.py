"""The baselines of ``sqm linreg`` at the same (epsilon, delta): central DP on the same sufficient statistics
(:func:`central_dp_linreg`: the Gaussian mechanism on the joint Gram; :func:`adassp`: AdaSSP, Wang 2018, the
adaptive sufficient-statistics perturbation) and non-private ridge (:func:`nonprivate_linreg`)."""
from __future__ import annotations

import math
import time

import numpy as np

from sqm.mechanism.vertical import clip_rows
from sqm.apps.linreg.statistic import guarded_solve, joint_matrix, solve_ridge
from sqm.apps.pca import symmetric_gaussian


def central_dp_linreg(X, y, alpha: float | None, epsilon: float, delta: float, feature_bound: float = 1.0,
                      label_bound: float = 1.0, fit_intercept: bool = True, seed=None) -> dict:
    """A trusted curator clips rows (||x|| <= c_x, |y| <= c_y) and releases [X 1 y]^T [X 1 y] + (G + G^T) / 2,
    G iid N(0, sigma^2): the Gaussian mechanism on the full Gram, whose change when a record z = [x, 1, y] is
    added or removed is z z^T with ||z z^T||_F = ||z||^2 <= c_x^2 + 1 + c_y^2 (its L2 sensitivity; the
    symmetric part is post-processing, as for SQM's noise).  sigma from
    :func:`sqm.mechanism.calibration.gaussian_sigma`.  ``alpha`` None: the server's solve of SQM
    (:func:`sqm.apps.linreg.statistic.guarded_solve`: the penalty from public quantities and the mean when the
    model does not beat it on the released statistics)."""
    from sqm.mechanism.calibration import gaussian_sigma


    t0 = time.perf_counter()
    Xc, clipped = clip_rows(np.asarray(X, np.float64), feature_bound)
    Z = joint_matrix(Xc, np.clip(y, -label_bound, label_bound), fit_intercept)
    l2 = feature_bound ** 2 + label_bound ** 2 + (1.0 if fit_intercept else 0.0)
    sigma = gaussian_sigma(l2, epsilon, delta)
    A = Z.T @ Z + symmetric_gaussian(Z.shape[1], sigma, seed)
    if alpha is None:
        fit = guarded_solve(A, None, sigma, fit_intercept)
        coef, intercept = fit["coef"], fit["intercept"]
    else:
        coef, intercept = solve_ridge(A, alpha, sigma, fit_intercept)
    return {"coef": coef, "intercept": intercept, "sigma": sigma, "l2_sensitivity": l2, "clipped": clipped,
            "seconds": time.perf_counter() - t0}


def nonprivate_linreg(X, y, alpha: float | None = None) -> dict:
    """Non-private ridge regression (scikit-learn's Ridge; ``alpha`` None or 0: ordinary least squares), the
    utility ceiling: coef, intercept, seconds."""
    from sklearn.linear_model import LinearRegression, Ridge

    t0 = time.perf_counter()
    ridge = Ridge(alpha=alpha).fit(X, y) if alpha else LinearRegression().fit(X, y)
    return {"coef": ridge.coef_, "intercept": ridge.intercept_, "seconds": time.perf_counter() - t0}


ADASSP_RHO = 0.05  # AdaSSP's failure probability of its lambda_min bound (Wang 2018, Algorithm 2's rho)


def adassp_sigmas(feature_bound: float, label_bound: float, epsilon: float, delta: float,
                  fit_intercept: bool = True) -> dict:
    """AdaSSP's three Gaussian noise stds at (``epsilon``, ``delta``) overall: for lambda_min(X^T X) (L2
    sensitivity B^2, Weyl: adding a row x adds x x^T, which moves each eigenvalue by at most ||x||^2), for
    X^T X (B^2 = ||x x^T||_F, noise on its upper triangle mirrored: a sub-vector of vec(x x^T)) and for X^T y
    (B c_y), B^2 = c_x^2 (+ 1 for the intercept's column).  The paper splits the budget in three equal parts;
    here the split is equal in the Gaussian sense, the tightest sound calibration: each part's noise is z times
    its sensitivity, and the three releases together are ONE Gaussian mechanism on (f_1/D_1, f_2/D_2, f_3/D_3),
    of L2 sensitivity sqrt(3) and noise std z, so they are (epsilon, delta)-DP exactly when z / sqrt(3) is the
    exact Gaussian optimum :func:`sqm.mechanism.calibration.gaussian_sigma` (Balle & Wang 2018; the paper's
    eps/3, delta/3 split with the classical bound would add more noise)."""
    from sqm.mechanism.calibration import gaussian_sigma

    b2 = float(feature_bound) ** 2 + (1.0 if fit_intercept else 0.0)
    z = gaussian_sigma(math.sqrt(3.0), epsilon, delta)
    return {"lambda_min": z * b2, "xtx": z * b2, "xty": z * math.sqrt(b2) * float(label_bound), "z": z,
            "b2": b2}


def adassp(X, y, epsilon: float, delta: float, feature_bound: float = 1.0, label_bound: float = 1.0,
           fit_intercept: bool = True, rho: float = ADASSP_RHO, seed=None) -> dict:
    """AdaSSP (Wang 2018, "Revisiting differentially private linear regression", Algorithm 2) on the rows
    clipped to ||x|| <= c_x, |y| <= c_y, the intercept's constant column appended to x (not penalized), p the
    columns of [X 1]:

        lambda_min~ = max(lambda_min(X^T X) + s_1 Z - s_1 sqrt(log(6 / delta)), 0)   (a private lower bound)
        lambda = max(0, sqrt(p log(2 p^2 / rho)) s_2 - lambda_min~)
        w = (X^T X + E + lambda I)^{-1} (X^T y + e),   E symmetric with entries N(0, s_2^2), e ~ N(0, s_3^2 I)

    with s_1, s_2, s_3 the noise stds of :func:`adassp_sigmas`: the paper's formulas with its noise std
    sqrt(log(6 / delta)) B^2 / (epsilon / 3) replaced by the calibrated one (its lambda and lambda_min~ are
    these multiples of its std).  Returns coef, intercept, lambda, the sigmas, clipped rows, seconds."""
    from sqm.mechanism.rng import make_rng

    t0 = time.perf_counter()
    rng = make_rng(seed)
    Xc, clipped = clip_rows(np.asarray(X, np.float64), feature_bound)
    Z = joint_matrix(Xc, np.clip(y, -label_bound, label_bound), fit_intercept)
    F, t = Z[:, :-1], Z[:, -1]
    p = F.shape[1]
    s = adassp_sigmas(feature_bound, label_bound, epsilon, delta, fit_intercept)
    xtx, xty = F.T @ F, F.T @ t
    lam_min = float(np.linalg.eigvalsh(xtx)[0])
    shift = s["lambda_min"] * math.sqrt(math.log(6.0 / delta))
    lam_tilde = max(lam_min + s["lambda_min"] * rng.standard_normal() - shift, 0.0)
    lam = max(0.0, math.sqrt(p * math.log(2.0 * p * p / rho)) * s["xtx"] - lam_tilde)
    upper = np.triu(s["xtx"] * rng.standard_normal((p, p)))
    E = upper + np.triu(upper, 1).T
    A = xtx + E + lam * np.diag([1.0] * (p - 1) + [0.0 if fit_intercept else 1.0])
    w = np.linalg.lstsq(A, xty + s["xty"] * rng.standard_normal(p), rcond=None)[0]
    coef, intercept = (w[:-1], float(w[-1])) if fit_intercept else (w, 0.0)
    return {"coef": coef, "intercept": intercept, "lambda": lam, "sigmas": s, "clipped": clipped,
            "seconds": time.perf_counter() - t0}
