"""Datasets, loaded once for every application: :func:`load_dataset` returns one :class:`Dataset`.

scikit-learn's bundled sets (digits, breast_cancer, iris, wine, diabetes) and real sets read from files in the
data home (citeseer, adult, credit_default, phishing; :mod:`sqm.data.datahome`: ``$SQM_DATA``, else ``~/sqm_data``),
each file verified against its SHA-256; nothing is downloaded at run time (``sqm data fetch NAME`` does).  The
readers below (``load_adult``, ``load_credit_default``, ``load_citeseer``, ``load_phishing``) parse one file
format each; applications call :func:`load_dataset` and apply their own preprocessing (splits, scaling).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from sqm.data.datahome import fetch
from sqm.errors import UsageError


def scale_rows(X: np.ndarray, row_norm_bound: float = 1.0) -> np.ndarray:
    """Divide all rows by the largest row norm, then multiply by c: every row has ||x|| <= c (the paper's
    experimental preprocessing; relative geometry is kept)."""
    X = np.asarray(X, dtype=np.float64)
    top = float(np.max(np.linalg.norm(X, axis=1))) if X.size else 0.0
    return X if top == 0 else X * (row_norm_bound / top)


# ----- logistic-regression data sets (UCI files, encoding fixed from public metadata) -----------------------
# Nothing here is fitted on the (private) records: categories come from adult.names, numeric columns are
# mapped to [0, 1] (or [-1, 1]) with documented public ranges and clipped there, and every row is divided by
# sqrt(number of original attributes), so ||x||_2 <= 1 holds for every record by construction.

ADULT_CATEGORIES = {  # adult.names, in its order; '?' (missing) encodes as all zeros
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"],
    "education": ["Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc",
                  "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"],
    "marital-status": ["Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
                   "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing",
                   "Transport-moving", "Priv-house-serv", "Protective-serv", "Armed-Forces"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Female", "Male"],
    "native-country": ["United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
                       "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
                       "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti",
                       "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia",
                       "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"],
}
ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
                 "income"]
# public ranges (UCI/Census documentation: ages 17-90, education-num 1-16, capital gain top-coded at 99999,
# hours 1-99); capital gain/loss are log1p-scaled.  fnlwgt (a survey sampling weight) is dropped, as is usual.
ADULT_NUMERIC = {"age": (0.0, 100.0, False), "education-num": (0.0, 16.0, False),
                 "capital-gain": (0.0, 99999.0, True), "capital-loss": (0.0, 4356.0, True),
                 "hours-per-week": (0.0, 100.0, False)}


def _missing(path, what: str, name: str):
    if not os.path.isfile(path):
        raise UsageError(f"{what} not found at {path}: run `sqm data fetch {name}` and pass no path (the data "
                         f"home: --data-home or $SQM_DATA), or pass the path of a copy")


def _home(name: str) -> str:
    """The folder of the real dataset ``name`` in the data home, its files verified (missing: an error saying
    ``sqm data fetch NAME``)."""
    return fetch(name, download_if_missing=False)


def _scale01(v: np.ndarray, lo: float, hi: float, log: bool) -> np.ndarray:
    if log:
        v, lo, hi = np.log1p(np.maximum(v, 0.0)), np.log1p(lo), np.log1p(hi)
    return np.clip((v - lo) / (hi - lo), 0.0, 1.0)


def adult_feature_names() -> list[str]:
    names = []
    for col in ADULT_COLUMNS[:-1]:
        if col in ADULT_NUMERIC:
            names.append(col)
        elif col in ADULT_CATEGORIES:
            names += [f"{col}={c}" for c in ADULT_CATEGORIES[col]]
    return names


def encode_adult(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """One-hot / public-range encoding of parsed adult rows (15 fields); labels '>50K' -> 1, '<=50K' -> 0."""
    groups = [c for c in ADULT_COLUMNS[:-1] if c in ADULT_NUMERIC or c in ADULT_CATEGORIES]
    X = np.zeros((len(rows), len(adult_feature_names())))
    y = np.zeros(len(rows), dtype=np.int64)
    for i, r in enumerate(rows):
        if len(r) != 15:
            raise UsageError(f"adult row {i + 1} has {len(r)} fields, expected 15")
        pos = 0
        for col in groups:
            v = r[ADULT_COLUMNS.index(col)]
            if col in ADULT_NUMERIC:
                lo, hi, log = ADULT_NUMERIC[col]
                X[i, pos] = _scale01(np.array(float(v)), lo, hi, log)
                pos += 1
            else:
                cats = ADULT_CATEGORIES[col]
                if v in cats:
                    X[i, pos + cats.index(v)] = 1.0
                pos += len(cats)
        lab = r[14].rstrip(".")  # the test file's labels end with a period
        if lab not in (">50K", "<=50K"):
            raise UsageError(f"adult row {i + 1}: unknown income label {r[14]!r}")
        y[i] = int(lab == ">50K")
    return X / np.sqrt(len(groups)), y


def _read_adult(path) -> list[list[str]]:
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("|"):
                continue
            rows.append([t.strip() for t in line.split(",")])
    return rows


def load_adult(directory) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test, y_test) from the UCI adult.data / adult.test files in ``directory``.

    5 numeric columns scaled to [0, 1] by public ranges + 8 categoricals one-hot over adult.names' categories
    (103 features), rows divided by sqrt(13): ||x||_2 <= 1 always.  Labels in {0, 1} (1: income > 50K).
    """
    tr, te = os.path.join(directory, "adult.data"), os.path.join(directory, "adult.test")
    for p in (tr, te):
        _missing(p, os.path.basename(p), "adult")
    Xtr, ytr = encode_adult(_read_adult(tr))
    Xte, yte = encode_adult(_read_adult(te))
    return Xtr, ytr, Xte, yte


# credit default (Yeh & Lien 2009): categories and ranges from the UCI variable description
CREDIT_CATEGORIES = {"X2": [1, 2], "X3": [1, 2, 3, 4], "X4": [1, 2, 3]}  # sex; education; marriage (else zeros)
CREDIT_MONEY_TOP = 1e6  # NT$: amounts are symmetric-log scaled against log1p(1e6) and clipped to [-1, 1]


def credit_feature_names() -> list[str]:
    names = ["X1"]
    for c in ("X2", "X3", "X4"):
        names += [f"{c}={v}" for v in CREDIT_CATEGORIES[c]]
    return names + ["X5"] + [f"X{k}" for k in range(6, 24)]


def load_credit_default(path) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) from UCI_Credit_Card.csv (header ID,X1..X23,Y); y = default next month in {0, 1}.

    X1 (limit) log-scaled on [1e4, 1e6]; X2-X4 one-hot over the documented codes; X5 age / 100; X6-X11
    repayment status (-2..9) mapped to [0, 1]; X12-X23 amounts symmetric-log scaled; rows divided by
    sqrt(23): ||x||_2 <= 1 always.  No train/test split is given: split it yourself.
    """
    _missing(path, "UCI_Credit_Card.csv", "credit-default")
    raw: np.ndarray = np.genfromtxt(path, delimiter=",", names=True, dtype=np.float64)
    assert raw.dtype.names is not None  # names=True: a structured array, one field per column
    need = [f"X{k}" for k in range(1, 24)] + ["Y"]
    missing = [c for c in need if c not in raw.dtype.names]
    if missing:
        raise UsageError(f"{path}: missing columns {missing}")
    col = {c: np.asarray(raw[c], np.float64) for c in need}
    if any(not np.all(np.isfinite(v)) for v in col.values()):
        raise UsageError(f"{path}: missing or non-numeric values")
    parts = [np.clip((np.log(np.maximum(col["X1"], 1.0)) - np.log(1e4)) / (np.log(1e6) - np.log(1e4)), 0, 1)]
    for c in ("X2", "X3", "X4"):
        parts += [(col[c] == v).astype(np.float64) for v in CREDIT_CATEGORIES[c]]
    parts.append(np.clip(col["X5"] / 100.0, 0, 1))
    parts += [np.clip((col[f"X{k}"] + 2.0) / 11.0, 0, 1) for k in range(6, 12)]
    top = np.log1p(CREDIT_MONEY_TOP)
    parts += [np.clip(np.sign(col[f"X{k}"]) * np.log1p(np.abs(col[f"X{k}"])) / top, -1, 1) for k in range(12, 24)]
    X = np.column_stack(parts) / np.sqrt(23.0)
    y = col["Y"]
    if not np.all((y == 0) | (y == 1)):
        raise UsageError(f"{path}: labels Y must be 0 or 1")
    return X, y.astype(np.int64)


# ----- CiteSeer (PCA) and a loader by name -----------------------------------------------------------------

def load_citeseer(path=None) -> tuple[np.ndarray, np.ndarray]:
    """CiteSeer (Planetoid) binary word features of the graph's largest connected component: (X, labels).

    ``path``: ``citeseer_planetoid.npz`` or the folder holding it (default: the data home's).
    The largest connected component of the citation graph has 2,120 nodes, 10 of them without any word;
    dropping those gives the paper's 2,110 x 3,703 matrix (rows in node order).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    path = _home("citeseer") if path is None else str(path)
    if os.path.isdir(path):
        path = os.path.join(path, "citeseer_planetoid.npz")
    _missing(path, "CiteSeer (citeseer_planetoid.npz)", "citeseer")
    with np.load(path, allow_pickle=False) as d:
        F, E, labels = d["features"], d["edges"], d["labels"]
    n = F.shape[0]
    A = coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(n, n))
    _, comp = connected_components(A, directed=False)
    keep = comp == np.argmax(np.bincount(comp))
    keep &= np.asarray(F.sum(axis=1)).ravel() > 0
    idx = np.flatnonzero(keep)
    return np.asarray(F[idx], np.float64), np.asarray(labels[idx])


# ----- phishing websites (PBM-VFL appendix set) ------------------------------------------------------------

def load_phishing(path=None) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of the UCI Phishing Websites data: 11,055 records x 30 features in {-1, 0, 1}.

    ``path``: ``phishing.csv`` (header row, 31 columns, ``Result`` last), ``Training_Dataset.arff``, or the
    folder holding either (default: the data home's).  Labels: ``Result`` 1 -> 1, -1 -> 0.
    """
    path = _home("phishing") if path is None else os.path.abspath(str(path))
    if os.path.isdir(path):
        for name in ("phishing.csv", "Training_Dataset.arff"):
            if os.path.isfile(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
    _missing(path, "phishing data (phishing.csv or Training_Dataset.arff)", "phishing")
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
        raise UsageError(f"{path}: non-numeric or ragged rows") from None
    if A.ndim != 2 or A.shape[1] != 31:
        raise UsageError(f"{path}: expected 31 columns (30 features + Result), got shape {A.shape}")
    if not np.all(np.isin(A, (-1.0, 0.0, 1.0))) or not np.all(np.isin(A[:, -1], (-1.0, 1.0))):
        raise UsageError(f"{path}: features must lie in {{-1, 0, 1}} and Result in {{-1, 1}}")
    return A[:, :30], (A[:, 30] == 1).astype(np.int64)


# ----- the one loader ----------------------------------------------------------------------------------------

BUNDLED = ("digits", "breast_cancer", "iris", "wine", "diabetes")
DATASETS = BUNDLED + ("citeseer", "adult", "credit_default", "phishing")


@dataclass(frozen=True)
class Dataset:
    """One dataset: records ``X`` (float64), labels ``y`` (None where it has none), ``feature_names``; the
    test records a dataset ships (adult: adult.test) in ``X_test``/``y_test``; ``party_columns``: the
    dataset's own vertical split where a paper defines one (the HDP-VFL paper's Table 1: the active party's
    columns first, then the passive party's), else None.  Rows are not rescaled (see :func:`scale_rows`)."""

    name: str
    X: np.ndarray
    y: np.ndarray | None
    feature_names: tuple[str, ...]
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    party_columns: tuple[tuple[int, ...], ...] | None = None

    @property
    def attributes(self) -> list[str]:
        """The original attribute of each column (one-hot columns ``attr=value`` share one): public metadata."""
        return [f.split("=")[0] for f in self.feature_names]

    def train_test(self, test_size: float = 0.25, seed: int = 0):
        """(X_train, y_train, X_test, y_test): the shipped test set where there is one, else a stratified split
        of ``X`` (scikit-learn's ``train_test_split``, ``random_state=seed``)."""
        if self.X_test is not None:
            return self.X, self.y, self.X_test, self.y_test
        from sklearn.model_selection import train_test_split

        Xtr, Xte, ytr, yte = train_test_split(self.X, self.y, test_size=test_size, stratify=self.y,
                                              random_state=seed)
        return Xtr, ytr, Xte, yte


def _two_parties(d: int, active: int) -> tuple[tuple[int, ...], ...]:
    return tuple(range(active)), tuple(range(active, d))


def _default(path, name: str) -> str:
    return _home(name) if path is None else str(path)


def load_dataset(name: str, path=None) -> Dataset:
    """The dataset ``name`` (one of :data:`DATASETS`).  ``path``: the file or folder of a dataset read from
    files (default its folder in the data home, :func:`sqm.data.datahome.data_home`; missing there: an error saying
    ``sqm data fetch NAME``); bundled sets ignore it."""
    if name in BUNDLED:
        from sklearn import datasets

        raw = getattr(datasets, f"load_{name}")()
        X, y = np.asarray(raw.data, np.float64), np.asarray(raw.target)
        names = tuple(str(f) for f in raw.feature_names)
        split = _two_parties(X.shape[1], 10) if name == "breast_cancer" else None
        return Dataset(name, X, y, names, party_columns=split)
    if name == "citeseer":
        X, y = load_citeseer(path)
        return Dataset(name, X, y, tuple(f"word{j}" for j in range(X.shape[1])))
    if name == "adult":
        Xtr, ytr, Xte, yte = load_adult(_default(path, "adult"))
        names = tuple(adult_feature_names())
        first = set(ADULT_COLUMNS[:6])  # age .. marital-status (fnlwgt is not encoded)
        active = sum(1 for f in names if f.split("=")[0] in first)
        return Dataset(name, Xtr, ytr, names, Xte, yte, _two_parties(len(names), active))
    if name == "credit_default":
        p = _default(path, "credit_default")
        if os.path.isdir(p):
            p = os.path.join(p, "UCI_Credit_Card.csv")
        X, y = load_credit_default(p)
        names = tuple(credit_feature_names())
        return Dataset(name, X, y, names, party_columns=_two_parties(len(names), names.index("X14")))
    if name == "phishing":
        X, y = load_phishing(path)
        return Dataset(name, X, y, tuple(f"x{j}" for j in range(X.shape[1])))
    raise UsageError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
