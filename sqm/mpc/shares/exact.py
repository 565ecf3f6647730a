"""Exact integer reductions over records: float64 BLAS where provably exact, Python integers beyond."""
from __future__ import annotations

import numpy as np

_EXACT_FLOAT = 2**53  # every integer of magnitude <= 2^53 is a float64, and so is every partial sum below it
_INT64_SAFE = 2**62


def _maxabs(X: np.ndarray) -> int:
    if X.size == 0:
        return 0
    if X.dtype == object:
        return int(max(abs(int(v)) for v in X.flat))
    return int(np.max(np.abs(X.astype(np.int64))))


def exact_gram(X: np.ndarray) -> np.ndarray:
    """X^T X exactly, as an object array of Python ints.

    Rows are taken in chunks small enough that every float64 dot product of a chunk stays below 2^53
    (so BLAS is exact); chunk results are summed in int64 while that is provably safe, else as Python ints.
    """
    X = np.asarray(X)
    m, n = X.shape
    amax = _maxabs(X)
    if amax >= 2**26 or X.dtype == object:  # squares would not be exact in float64: Python integers
        Xo = X.astype(object)
        return Xo.T.dot(Xo)
    sq = max(amax * amax, 1)
    chunk = max(1, min(m, _EXACT_FLOAT // sq))
    total_bound = m * sq
    acc = np.zeros((n, n), dtype=np.int64 if total_bound < _INT64_SAFE else object)
    Xf = X.astype(np.float64, copy=False)
    for s in range(0, m, chunk):
        part = Xf[s:s + chunk]
        acc += (part.T @ part).astype(np.int64)
    return acc.astype(object)


def exact_colsum(X: np.ndarray) -> np.ndarray:
    """Column sums exactly (object array)."""
    X = np.asarray(X)
    if X.dtype != object and X.shape[0] * _maxabs(X) < _INT64_SAFE:
        return X.astype(np.int64).sum(axis=0).astype(object)
    return X.astype(object).sum(axis=0)


def exact_monomial_sum(X: np.ndarray, mono: tuple[int, ...]) -> int:
    """sum_i prod_{j in mono} X[i, j] exactly."""
    X = np.asarray(X)
    if not mono:
        return int(X.shape[0])
    bound = X.shape[0]
    for j in mono:
        bound *= max(_maxabs(X[:, j]), 1)
    if X.dtype != object and bound < _INT64_SAFE:
        prod = np.ones(X.shape[0], dtype=np.int64)
        for j in mono:
            prod = prod * X[:, j].astype(np.int64)
        return int(prod.sum())
    prod = np.ones(X.shape[0], dtype=object)
    for j in mono:
        prod = prod * X[:, j].astype(object)
    return int(prod.sum())
