"""Datasets: scikit-learn's bundled sets and real sets from files (nothing is downloaded at run time)."""
from __future__ import annotations

import numpy as np


def scale_rows(X: np.ndarray, row_norm_bound: float = 1.0) -> np.ndarray:
    """Divide all rows by the largest row norm, then multiply by c: every row has ||x|| <= c (the paper's
    experimental preprocessing; relative geometry is kept)."""
    X = np.asarray(X, dtype=np.float64)
    top = float(np.max(np.linalg.norm(X, axis=1))) if X.size else 0.0
    return X if top == 0 else X * (row_norm_bound / top)


def load_bundled(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of a scikit-learn bundled dataset: digits, breast_cancer, iris, wine, diabetes."""
    from sklearn import datasets

    loaders = {"digits": datasets.load_digits, "breast_cancer": datasets.load_breast_cancer,
               "iris": datasets.load_iris, "wine": datasets.load_wine, "diabetes": datasets.load_diabetes}
    if name not in loaders:
        raise ValueError(f"unknown bundled dataset {name!r}; choose one of {sorted(loaders)}")
    d = loaders[name]()
    return np.asarray(d.data, np.float64), np.asarray(d.target)
