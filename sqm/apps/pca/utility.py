"""PCA's linear algebra and utility (no scikit-learn at import: a party process imports this module).

Utility (the paper's): ``||X V||_F^2`` for the found orthonormal d x k basis V, and its ratio to the
non-private optimum (the sum of the top-k eigenvalues of ``X^T X``; the ratio is <= 1 by Ky Fan's theorem).
PCA here is uncentered, as in the paper (centering would need the column means, another release).
"""
from __future__ import annotations

import numpy as np

from sqm.mechanism.polynomial import covariance
from sqm.mechanism.vertical import VerticalData
from sqm.apps.pca.params import N_COMPONENTS
from sqm.errors import UsageError


def check_components(k, n_cols: int) -> int:
    """k must be an integer in 1..n_cols (:data:`sqm.apps.pca.params.N_COMPONENTS`, then the columns)."""
    k = int(N_COMPONENTS.check(k, "n_components"))
    if k > n_cols:
        raise UsageError(f"cannot find {k} components in data with {n_cols} columns (need k <= columns)")
    return k


def top_eigen(C: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues, d x k eigenvectors) of the symmetric part of ``C``, largest first.

    Signs are fixed (the largest-magnitude entry of each vector is positive) so results are reproducible.
    """
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise UsageError(f"need a square matrix, got shape {C.shape}")
    if not np.all(np.isfinite(C)):
        raise UsageError("the matrix contains NaN or infinite values")
    d = C.shape[0]
    k = check_components(k, d)
    S = (C + C.T) / 2.0
    w, V = np.linalg.eigh(S)  # all of them (LAPACK syevd): numpy's, so a PCA job's server loads no SciPy
    w, V = w[::-1][:k], V[:, ::-1][:, :k]
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(k)])
    signs[signs == 0] = 1.0
    return w.copy(), np.ascontiguousarray(V * signs)


def pca_utility(X: np.ndarray, V: np.ndarray) -> float:
    """The paper's utility ||X V||_F^2 of the subspace spanned by the orthonormal columns of V."""
    X = np.asarray(X, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[0] != X.shape[1]:
        raise UsageError(f"basis of shape {V.shape} does not fit data with {X.shape[1]} columns")
    return float(np.sum((X @ V) ** 2))


def optimal_utility(X: np.ndarray, k: int) -> float:
    """max ||X V||_F^2 over orthonormal d x k V: the sum of the top-k eigenvalues of X^T X."""
    X = np.asarray(X, dtype=np.float64)
    w, _ = top_eigen(X.T @ X, k)
    return float(np.sum(w))


def utility_ratio(X: np.ndarray, V: np.ndarray) -> float:
    """||X V||_F^2 over its non-private optimum at the same k (<= 1)."""
    return pca_utility(X, V) / optimal_utility(X, V.shape[1])


def as_matrix(X) -> np.ndarray:
    """A finite float64 records x columns matrix (scikit-learn's ``check_array`` checks and messages)."""
    from sklearn.utils.validation import check_array

    if isinstance(X, VerticalData):
        return X.to_matrix()
    return check_array(X, dtype=np.float64, ensure_min_samples=1)



def covariance_release(n_cols: int, gamma: float, epsilon: float, delta: float, backend="plain", seed=None,
                       backend_options=None, **options):
    """The SQM release of X^T X over ``n_cols`` columns (the covariance polynomial; checks every parameter;
    ``options``: :class:`sqm.mechanism.release.SQM`'s other keyword arguments, e.g. a
    :meth:`sqm.apps.pca.params.PCAParams.mechanism_kwargs`)."""
    from sqm.mechanism.release import SQM

    return SQM(covariance(n_cols), gamma, epsilon=epsilon, delta=delta, backend=backend, seed=seed,
               backend_options=backend_options, **options)


def components_from_covariance(raw_estimate: np.ndarray, n_cols: int, k: int, n_records: int):
    """Server post-processing: (noisy covariance, eigenvalues / m, d x k basis) from SQM's rescaled estimate."""
    C = np.asarray(raw_estimate, dtype=np.float64).reshape(n_cols, n_cols)
    w, V = top_eigen(C, k)
    return (C + C.T) / 2.0, w / float(n_records), V
