"""PCA's baselines at the same (epsilon, delta) as SQM, and the non-private optimum.

- :func:`central_dp_pca`: "Analyze Gauss" (Dwork, Talwar, Thakurta, Zhang 2014), a trusted curator adds
  Gaussian noise to ``X^T X``;
- :func:`local_dp_pca`: the VFL local-DP baseline (section 3.3 / Algorithm 4): each party perturbs its
  own column block with Gaussian noise; the server computes the covariance of the noisy matrix;
- :func:`nonprivate_pca`: the optimum.

Both Gaussian baselines are calibrated by the one policy, :func:`sqm.mechanism.calibration.gaussian_sigma`: the smallest
sigma meeting (epsilon, delta) for one release; each returns its :class:`sqm.mechanism.report.PrivacyReport`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from sqm.mechanism.calibration import gaussian_epsilon, gaussian_sigma
from sqm.mechanism.report import PrivacyReport
from sqm.mechanism.rng import make_rng, spawn_seeds
from sqm.mechanism.vertical import VerticalData, clip_rows, party_norm_bounds

from sqm.apps.pca.utility import as_matrix, check_components, top_eigen


def nonprivate_pca(X: np.ndarray, k: int) -> np.ndarray:
    """The optimal d x k basis: top-k eigenvectors of X^T X (uncentered PCA)."""
    X = as_matrix(X)
    return top_eigen(X.T @ X, k)[1]


@dataclass
class BaselineResult:
    components: np.ndarray  # d x k
    report: PrivacyReport  # sigma, the achieved epsilon at delta (<= the target), the L2 sensitivity
    clipped: int
    seconds: float

    @property
    def sigma(self) -> float | None:
        return self.report.sigma

    @property
    def epsilon(self) -> float:
        return self.report.epsilon_server


def _gaussian_report(method: str, sigma: float, l2: float, delta: float, notes: str) -> PrivacyReport:
    from sqm.mechanism.events import gaussian_event

    return PrivacyReport(method=method, epsilon_server=gaussian_epsilon(sigma, l2, delta), delta=delta, sigma=sigma,
                         l2_sensitivity=l2, events=(gaussian_event(sigma, l2),), notes=notes)


def symmetric_gaussian(d: int, sigma: float, seed=None) -> np.ndarray:
    """(G + G^T) / 2 for G with iid N(0, sigma^2) entries: variance sigma^2 on the diagonal, sigma^2 / 2 off it."""
    G = sigma * make_rng(seed).standard_normal((d, d))
    return (G + G.T) / 2.0


def central_dp_pca(X, k: int, epsilon: float, delta: float, row_norm_bound: float = 1.0,
                   seed=None) -> BaselineResult:
    """Analyze Gauss: a trusted curator releases the top-k eigenvectors of X^T X + E.

    Noise: E = (G + G^T) / 2 with G a d x d matrix of iid N(0, sigma^2).  This is the Gaussian mechanism on
    the full d x d matrix vec(X^T X) -- adding or removing a row x with ||x|| <= c changes it by x x^T, whose
    Frobenius (= L2) norm is ||x||^2 <= c^2 -- followed by taking the symmetric part (post-processing).  So
    sigma is calibrated to L2 sensitivity c^2 by the one policy for Gaussian baselines,
    :func:`sqm.mechanism.calibration.gaussian_sigma` (the exact optimum for one release).  E is symmetric, with
    variance sigma^2 on the diagonal and sigma^2 / 2 off it; DTTZ's variant (iid N(0, sigma^2) on the upper triangle,
    mirrored) is also private at this sigma but adds twice the off-diagonal variance.  Ours is the same noise SQM ends
    up with after its symmetrization (Skellam of variance 2 mu per entry), so the comparison isolates quantization and
    distribution.  Rows above the bound are scaled down to norm c first (the curator holds whole rows).
    """
    t0 = time.perf_counter()
    X = as_matrix(X)
    k = check_components(k, X.shape[1])
    c = float(row_norm_bound)
    Xc, clipped = clip_rows(X, c)
    sigma = gaussian_sigma(c * c, epsilon, delta)
    noisy = Xc.T @ Xc + symmetric_gaussian(X.shape[1], sigma, seed)
    V = top_eigen(noisy, k)[1]
    rep = _gaussian_report("central DP (Analyze Gauss)", sigma, c * c, delta, "a trusted curator holds every row")
    return BaselineResult(V, rep, clipped, time.perf_counter() - t0)


def local_dp_pca(data, k: int, epsilon: float, delta: float, row_norm_bound: float = 1.0, seed=None,
                 party_bounds=None) -> BaselineResult:
    """VFL local-DP baseline (Algorithm 4): each party releases its block plus iid N(0, sigma^2) noise.

    Each party first scales its sub-rows to its bound c_j (sum_j c_j^2 = c^2, as for SQM), so whole rows
    have ||x|| <= c.  Neighbouring datasets differ in one record; as record ids are public in VFL, a removed
    record is a row of zeros in the released m x d matrix, so the released matrix changes by x in one row:
    L2 sensitivity ||x|| <= c (this is Lemma 14's server-observed bound; a client-observed replacement
    would double it).  The concatenation of the parties' independent Gaussian noise is one Gaussian
    mechanism on the whole matrix, so sigma is calibrated to sensitivity c by
    :func:`sqm.mechanism.calibration.gaussian_sigma`.  The server's X~^T X~ and its eigenvectors are post-processing.
    """
    t0 = time.perf_counter()
    data = data if isinstance(data, VerticalData) else VerticalData.split(as_matrix(data), 1)
    k = check_components(k, data.n_cols)
    c = float(row_norm_bound)
    bounds = party_norm_bounds(c, data.col_counts, party_bounds)
    sigma = gaussian_sigma(c, epsilon, delta)
    noisy, clipped = [], 0
    for block, b, s in zip(data.blocks, bounds, spawn_seeds(seed, data.n_parties), strict=False):
        cb, n = clip_rows(block, float(b))
        clipped += n
        noisy.append(cb + sigma * make_rng(s).standard_normal(cb.shape))
    Xt = np.hstack(noisy)
    V = top_eigen(Xt.T @ Xt, k)[1]
    rep = _gaussian_report("local DP (VFL baseline)", sigma, c, delta, "each party releases its noisy block")
    return BaselineResult(V, rep, clipped, time.perf_counter() - t0)
