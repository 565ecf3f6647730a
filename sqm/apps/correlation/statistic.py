"""The correlation matrix's statistic: the Gram of the joint rows z = [x, 1], released by SQM through the
mechanism's covariance polynomial (its program is the Gram program, coefficients 1; :func:`correlation_release`),
and the server's post-processing (:func:`correlation_from_gram`).

The Gram of [X 1] holds every sufficient statistic of the correlations: X^T X, the column sums X^T 1 and the
record count 1^T 1.  The last client holds the constant column, as a column group of its own bounded by 1; the
clients' feature sub-rows share the row norm bound c (:meth:`sqm.mechanism.vertical.ColumnBounds.parties`), so the
sensitivity is the covariance polynomial's (:func:`sqm.mechanism.sensitivity.gram_sensitivity`).
"""
from __future__ import annotations

import numpy as np

from sqm.mechanism.polynomial import covariance
from sqm.mechanism.vertical import ColumnBounds


def with_constant(block) -> np.ndarray:
    """The last client's block with the constant column appended: [x, 1]."""
    block = np.asarray(block, np.float64)
    return np.hstack([block, np.ones((block.shape[0], 1))])


def correlation_release(col_counts, params, backend="plain", seed=None, backend_options=None, chunk_rows=None):
    """The SQM release of the Gram of [X 1] over clients holding ``col_counts`` columns of X (the constant
    column is added at the last client), with ``params`` a
    :class:`sqm.apps.correlation.params.CorrelationParams`."""
    from sqm.mechanism.release import SQM

    counts = [int(c) for c in col_counts]
    d = sum(counts)
    counts[-1] += 1
    bounds = ColumnBounds.parties(counts, params.row_norm_bound, params.party_bounds, separate={d: 1.0})
    return SQM(covariance(d + 1), **params.mechanism_kwargs(), column_bounds=bounds, backend=backend, seed=seed,
               backend_options=backend_options, chunk_rows=chunk_rows)


def correlation_from_gram(estimate, n_features: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(correlation matrix, column means, record count) from the released (noisy, rescaled) Gram of [X 1]:
    post-processing, no privacy cost.  Noise can push a variance below zero or a correlation past 1: variances
    are floored at a tiny positive number, correlations clipped to [-1, 1], the diagonal set to 1."""
    d = int(n_features)
    G = np.asarray(estimate, np.float64).reshape(d + 1, d + 1)
    G = (G + G.T) / 2.0
    n = max(float(G[d, d]), 1.0)
    mean = G[:d, d] / n
    cov = G[:d, :d] / n - np.outer(mean, mean)
    sd = np.sqrt(np.maximum(np.diag(cov), 1e-300))
    corr = np.clip(cov / np.outer(sd, sd), -1.0, 1.0)
    np.fill_diagonal(corr, 1.0)
    return corr, mean, n
