"""Released models in the owners' raw units (issue 27, part 4): with declared column ranges, each job command's
released model is labelled by column and given on the raw columns; it scores raw records exactly as the released
(scaled) model scores the scaled ones, and, nearly noiseless, it is the plain fit on the raw data."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from sqm.cli.command import main
from sqm.framework.spec import write_party_csvs
from sqm.framework.units import feature_columns, raw_linear_model, raw_projection


def _data(seed=0, n=400):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(20, 80, n), rng.uniform(-3, 3, n), rng.uniform(0, 5000, n),
                         rng.uniform(0, 1, n)])
    y = 0.05 * X[:, 0] - 0.8 * X[:, 1] + 0.001 * X[:, 2] + 2.0 * X[:, 3] + 1.5 + rng.normal(0, 0.05, n)
    return X, y


RANGES = [{"age": [0, 100], "debt": [-5, 5]}, {"income": [0, 10000], "score": [0, 1]}]  # the label's: the task's
NAMES = ["age", "debt", "income", "score", "y"]


def _job(tmp_path, X, y, task):
    Z = np.column_stack([X, y])
    job = write_party_csvs(Z, str(tmp_path / "job"), col_counts=[2, 3], min_intersection=1, task=task,
                           bounds=RANGES)
    for j, names in ((1, NAMES[:2]), (2, NAMES[2:])):  # the owners' own column names
        f = tmp_path / "job" / f"party{j}.csv"
        lines = f.read_text().splitlines()
        f.write_text("\n".join([",".join(["id", *names])] + lines[1:]) + "\n")
    return job


def test_the_conversion_is_exact_on_raw_records():
    rng = np.random.default_rng(1)
    cols = ["a", "b", "c"]
    scales = {"a": 0.01, "b": 2.0, "c": 1.0}
    X = rng.normal(size=(50, 3))
    Xs = X * np.array([scales[c] for c in cols])
    w, b = rng.normal(size=3), 0.7
    raw, b_raw = raw_linear_model(w, cols, scales, b, label_scale=0.5)
    assert np.allclose(X @ np.array([raw[c] for c in cols]) + b_raw, (Xs @ w + b) / 0.5, rtol=1e-12, atol=1e-12)
    V = rng.normal(size=(2, 3))
    P = raw_projection(V, cols, scales)
    assert np.allclose(X @ np.array([[p[c] for c in cols] for p in P]).T, Xs @ V.T, rtol=1e-12, atol=1e-12)
    assert feature_columns(["a", "b", "y", "c"], [2, 2], 1, "y") == ["a", "b", "c"]


@pytest.mark.slow
def test_linreg_job_on_own_files_with_declared_ranges_releases_the_raw_model(tmp_path):
    """sqm linreg --job on the owners' files with declared ranges (features and label), real processes: the
    released coefficients are labelled by column in raw units, and, at epsilon 1e6 and gamma 2^16 (seed 0), equal the
    non-private least-squares fit on the raw data within 2%."""
    X, y = _data()
    job = _job(tmp_path, X, y, {"statistic": "linreg", "epsilon": 1e6, "gamma": 65536, "alpha": 0,
                                "label_column": "y", "label_range": [-10, 20]})
    out = tmp_path / "out.json"
    assert main(["linreg", "--job", job, "--json", str(out), "--seed", "0", "--insecure-reproducible"]) == 0
    doc = json.loads(out.read_text())
    rel, cols = doc["released"], doc["columns"]
    assert cols == ["age", "debt", "income", "score"]
    ref = LinearRegression().fit(X, y)
    got = np.array([rel["coef"][c] for c in cols])
    assert np.allclose(got, ref.coef_, rtol=0.02, atol=0), (got, ref.coef_)  # errors scale as 1/epsilon
    pred, best = X @ got + rel["intercept"], ref.predict(X)
    assert np.abs(pred - best).max() < 0.05  # the data's noise sd is 0.05, its range about 14
    # the raw model scores raw records as the released (scaled) model scores the scaled records
    s = rel["column_scales"]
    scaled = np.array([rel["coef_scaled"][c] for c in cols])
    Xs = X * np.array([s[c] for c in cols])
    assert np.allclose(X @ got + rel["intercept"], (Xs @ scaled + rel["intercept_scaled"]) / s["y"], rtol=1e-10)


def test_logreg_and_pca_jobs_release_raw_unit_models(tmp_path, capsys):
    """In process (--backend plain): logistic regression's weights and PCA's projection on the raw columns score
    raw records exactly as the released models score the scaled ones; both are labelled by column."""
    X, y = _data(2)
    lab = (y > np.median(y)).astype(float)
    job = _job(tmp_path / "lr", X, lab, {"statistic": "logreg", "epsilon": 2, "label_column": "y"})
    cfg = json.loads(Path(job).read_text())
    cfg["parties"][2]["bounds"] = {k: v for k, v in cfg["parties"][2]["bounds"].items() if k != "y"}  # no label range
    Path(job).write_text(json.dumps(cfg))
    out = tmp_path / "lr.json"
    assert main(["logreg", "--job", job, "--backend", "plain", "--json", str(out)]) == 0
    assert "weight (scaled)" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    rel, cols = doc["released"], doc["columns"]
    assert cols == ["age", "debt", "income", "score"]
    s = np.array([rel["column_scales"][c] for c in cols])
    w_raw = np.array([rel["coef"][c] for c in cols])
    w = np.array([rel["coef_scaled"][c] for c in cols])
    assert np.allclose(X @ w_raw, (X * s) @ w, rtol=1e-12) and not np.allclose(w_raw, w)

    pjob = _job(tmp_path / "pca", X, y, {"statistic": "pca", "components": 2, "epsilon": 2})
    out = tmp_path / "pca.json"
    assert main(["pca", "--job", pjob, "--backend", "plain", "--json", str(out)]) == 0
    rel = json.loads(out.read_text())["released"]
    cols = list(rel["components"][0])
    assert cols == NAMES
    V = np.array([[c[k] for k in cols] for c in rel["components"]])
    P = np.array([[p[k] for k in cols] for p in rel["projection_raw"]])
    Z = np.column_stack([X, y])
    s = np.array([rel["column_scales"][k] for k in cols])
    assert np.allclose(Z @ P.T, (Z * s) @ V.T, rtol=1e-10)
