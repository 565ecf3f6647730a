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


# ----- CiteSeer (PCA) and a loader by name -----------------------------------------------------------------

import os as _os  # noqa: E402

# the project's read-only data folder (../shared/data next to the repository)
SHARED_DATA = _os.path.normpath(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "shared", "data"))


def load_citeseer(path=None) -> tuple[np.ndarray, np.ndarray]:
    """CiteSeer (Planetoid) binary word features of the graph's largest connected component: (X, labels).

    ``path``: ``citeseer_planetoid.npz`` or the folder holding it (default ``../shared/data/citeseer/``).
    The largest connected component of the citation graph has 2,120 nodes, 10 of them without any word;
    dropping those gives the paper's 2,110 x 3,703 matrix (rows in node order).
    """
    import os

    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    path = os.path.join(SHARED_DATA, "citeseer") if path is None else str(path)
    if os.path.isdir(path):
        path = os.path.join(path, "citeseer_planetoid.npz")
    if not os.path.isfile(path):
        raise ValueError(f"CiteSeer not found at {path}: fetch the Planetoid files (github.com/kimiyoung/planetoid, "
                         f"data/ind.citeseer.*), assemble citeseer_planetoid.npz as described in "
                         f"shared/data/citeseer/SOURCE.md and put it there; nothing is downloaded at run time")
    with np.load(path, allow_pickle=False) as d:
        F, E, labels = d["features"], d["edges"], d["labels"]
    n = F.shape[0]
    A = coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(n, n))
    _, comp = connected_components(A, directed=False)
    keep = comp == np.argmax(np.bincount(comp))
    keep &= np.asarray(F.sum(axis=1)).ravel() > 0
    idx = np.flatnonzero(keep)
    return np.asarray(F[idx], np.float64), np.asarray(labels[idx])


def load_dataset(name: str, path=None) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) by name: a scikit-learn bundled set (digits, breast_cancer, iris, wine, diabetes), or 'citeseer'
    (from ``path``, default ``../shared/data/citeseer/``).  Rows are not rescaled (see :func:`scale_rows`)."""
    if name == "citeseer":
        return load_citeseer(path)
    return load_bundled(name)


# ----- phishing websites (PBM-VFL appendix set) ------------------------------------------------------------

def load_phishing(path=None) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of the UCI Phishing Websites data: 11,055 records x 30 features in {-1, 0, 1}.

    ``path``: ``phishing.csv`` (header row, 31 columns, ``Result`` last), ``Training_Dataset.arff``, or the
    folder holding either (default ``../shared/data/phishing/``).  Labels: ``Result`` 1 -> 1, -1 -> 0.
    """
    import os

    if path is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "phishing")
    path = os.path.normpath(str(path))
    if os.path.isdir(path):
        for name in ("phishing.csv", "Training_Dataset.arff"):
            if os.path.isfile(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
    if not os.path.isfile(path):
        raise ValueError(f"phishing data not found at {path}: fetch the UCI Phishing Websites data "
                         f"(UCI id 327 / OpenML 4534, see shared/data/phishing/SOURCE.md) and put phishing.csv "
                         f"there; nothing is downloaded at run time")
    rows = []
    with open(path) as f:
        in_data = not path.endswith(".arff")
        for line in f:
            line = line.strip()
            if not line or line.startswith("%"):
                continue
            if not in_data:
                in_data = line.lower().startswith("@data")
                continue
            if line[0].isalpha():  # the CSV header
                continue
            rows.append(line.split(","))
    try:
        A = np.array(rows, dtype=np.float64)
    except ValueError:
        raise ValueError(f"{path}: non-numeric or ragged rows") from None
    if A.ndim != 2 or A.shape[1] != 31:
        raise ValueError(f"{path}: expected 31 columns (30 features + Result), got shape {A.shape}")
    if not np.all(np.isin(A, (-1.0, 0.0, 1.0))) or not np.all(np.isin(A[:, -1], (-1.0, 1.0))):
        raise ValueError(f"{path}: features must lie in {{-1, 0, 1}} and Result in {{-1, 1}}")
    return A[:, :30], (A[:, 30] == 1).astype(np.int64)
