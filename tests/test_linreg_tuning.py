"""The linreg bench's tuning reads no test record: every test row of every tuning set is NaN here, and every
validation figure of every setting still comes out finite (a NaN read anywhere would propagate)."""
import math

import numpy as np

import bench.linreg_utility as lu
import sqm.apps.linreg.experiment as experiment


def _poisoned(n: int = 120, d: int = 4, seed: int = 0):
    """A small linear data set whose test split (the bench's, :func:`bench.linreg_utility._split`) is all NaN."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-0.5, 0.5, (n, d))
    y = np.clip(X @ np.linspace(-1, 1, d), -1, 1)
    test = lu._split(np.arange(n), np.arange(n))[1]
    X[test], y[test] = np.nan, np.nan
    return X, y


def test_tuning_reads_no_test_row(monkeypatch):
    monkeypatch.setattr(lu, "load", lambda name, records: _poisoned())
    monkeypatch.setattr(experiment, "regression_data", lambda name, *a, **k: (*_poisoned(seed=1), 1.0))
    rep = lu.tune((1.0,), 1, 2000, 1e-5)
    assert len(rep["rows"]) == len(lu.FACTORS) * len(lu.FLOORS) * len(lu.GUARDS)
    for row in rep["rows"]:
        assert math.isfinite(row["validation_r2"]) and math.isfinite(row["worst_run_r2"])
    assert math.isfinite(rep["adassp_validation_r2"])
    # the poison is real: scoring on the test split gives NaN
    X, y = _poisoned()
    _, Xte, _, yte = lu._split(X, y)
    assert math.isnan(lu._r2(np.zeros(4), 0.0, Xte, yte))
