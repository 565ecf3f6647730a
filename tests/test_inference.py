"""Private inference with released models (issue 27, part 2): each client scores its own columns, the partial
scores are summed on secret shares, only the requester learns the scores; they equal the plain computation
within the fixed point's rounding (each client's partial score rounded to 2^-20: |error| <= clients / 2^21)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from sqm.cli.command import main
from sqm.framework.spec import load_job, write_party_csvs
from sqm.framework.runners import run_job
from sqm.methods.inference.job import FRAC_BITS, ScoringJobTask
from sqm.methods.inference.model import ReleasedModel, load_model
from sqm.runtime.errors import UsageError

TOL = 2 / 2 ** (FRAC_BITS + 1)  # two clients, each rounded to the nearest 2^-20


def _records(seed, n=80):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(20, 80, n), rng.normal(0, 2, n), rng.uniform(0, 5000, n)])


def _job(tmp_path, X, ids=None):
    return write_party_csvs(X, str(tmp_path), col_counts=[2, 1], min_intersection=1, ids=ids)


MODEL = ReleasedModel("logistic", ("x0", "x1", "x2"), np.array([[0.03], [-0.7], [0.0004]]), np.array([-2.5]))


@pytest.mark.parametrize("backend", ["plain", "mpyc"])
def test_the_requester_alone_learns_the_scores_and_they_are_the_plain_ones(tmp_path, backend):
    X = _records(0)
    spec = load_job(_job(tmp_path, X))
    recs = run_job(spec, ScoringJobTask(MODEL), backend=backend, timeout=120)
    server, c1, c2 = (r["result"] for r in recs)
    assert "scores" not in server and "scores" not in c1  # the requester (default: the last client) alone
    assert server["scored"] == c1["scored"] == c2["scored"] == len(X)
    ids = [int(i) for i in c2["ids"]]  # the requester maps the scores to its own records
    assert np.allclose(c2["scores"][:, 0], MODEL.plain_scores(X[ids])[:, 0], rtol=0, atol=TOL)


def test_the_server_may_be_the_requester_and_the_records_are_the_intersection(tmp_path):
    X = _records(1, 60)
    job = _job(tmp_path, X, ids=list(range(100, 160)))
    spec = load_job(job)
    other = tmp_path / "party2.csv"  # client 2 holds only the records with even ids
    lines = other.read_text().splitlines()
    other.write_text("\n".join([lines[0]] + [ln for ln in lines[1:] if int(ln.split(",")[0]) % 2 == 0]) + "\n")
    res = run_job(spec, ScoringJobTask(MODEL, requester=0), backend="plain")[0]["result"]
    rows = [i - 100 for i in range(100, 160) if i % 2 == 0]  # the canonical order: ids by value
    assert res["scored"] == 30 and "ids" not in res  # the server learns no id
    assert np.allclose(res["scores"][:, 0], MODEL.plain_scores(X[rows])[:, 0], rtol=0, atol=TOL)


def test_a_client_column_the_model_lacks_or_a_score_over_the_bound_is_refused(tmp_path):
    from sqm.runtime.launch import MPCError

    X = _records(2, 30)
    spec = load_job(_job(tmp_path, X))
    lacking = ReleasedModel("linear", ("x0", "x1", "other"), np.ones((3, 1)), np.zeros(1))
    with pytest.raises(MPCError, match=r"client 2 refused: its column\(s\) \['x2'\] are not in the released model"):
        run_job(spec, ScoringJobTask(lacking), backend="plain")
    with pytest.raises(MPCError, match="exceeds the public bound 0.5"):
        run_job(spec, ScoringJobTask(MODEL, score_bound=0.5), backend="plain")
    with pytest.raises(UsageError):
        ScoringJobTask(MODEL, requester=-1)


@pytest.mark.slow
def test_train_then_score_new_records_with_the_command(tmp_path):
    """sqm linreg --job (in process) releases a model; sqm score --job on new records through real processes
    writes the requester's scores, equal to the released model on the raw new records."""
    rng = np.random.default_rng(3)
    X = _records(3, 300)
    y = 0.05 * X[:, 0] - 0.8 * X[:, 1] + 0.001 * X[:, 2] + rng.normal(0, 0.1, 300)
    train = write_party_csvs(np.column_stack([X, y]), str(tmp_path / "train"), col_counts=[2, 2],
                             min_intersection=1, task={"statistic": "linreg", "epsilon": 2, "label_column": "x3"},
                             bounds=[{"x0": [0, 100], "x1": [-10, 10]}, {"x2": [0, 10000], "x3": [-10, 10]}])
    model_file = tmp_path / "model.json"
    assert main(["linreg", "--job", train, "--backend", "plain", "--json", str(model_file), "-q"]) == 0
    model = load_model(model_file)
    assert model.kind == "linear" and model.columns == ("x0", "x1", "x2")
    new = _records(4, 50)
    job = _job(tmp_path / "new", new)
    scores, out = tmp_path / "scores.csv", tmp_path / "score.json"
    assert main(["score", "--job", job, "--model", str(model_file), "--scores", str(scores), "--json", str(out),
                 "-q"]) == 0
    rows = list(csv.DictReader(open(scores)))
    assert len(rows) == 50 and list(rows[0]) == ["id", "prediction"]
    got = np.array([float(r["prediction"]) for r in rows])
    want = model.plain_scores(new[[int(r["id"]) for r in rows]])[:, 0]
    assert np.allclose(got, want, rtol=0, atol=TOL)
    doc = json.loads(out.read_text())
    assert doc["privacy"] == [] and doc["released"]["records"] == 50


@pytest.mark.slow
def test_the_estimators_score_vertical_data_through_the_secure_sum():
    """predict / decision_function / transform of a VerticalData with backend 'mpyc': real party processes sum
    the clients' partial scores; equal to the plain computation on the joined matrix within the rounding."""
    from sqm import SQMPCA, SQMLinearRegression, SQMLogisticRegression, VerticalData

    rng = np.random.default_rng(7)
    X = rng.normal(size=(120, 5)) * 0.3
    y = (X[:, 0] - X[:, 3] > 0).astype(int)
    data = VerticalData.split(X, 2)
    lr = SQMLogisticRegression(epsilon=2, backend="plain", seed=1).fit(data, y).set_params(backend="mpyc")
    lin = SQMLinearRegression(epsilon=2, backend="plain", seed=1).fit(X, X[:, 0] * 0.5).set_params(backend="mpyc")
    pca = SQMPCA(n_components=2, epsilon=2, backend="plain", seed=1).fit(data).set_params(backend="mpyc")
    assert np.allclose(lr.decision_function(data), X @ lr.coef_[0] + lr.intercept_[0], rtol=0, atol=TOL)
    assert np.array_equal(lr.predict(data), lr.predict(X)) or np.abs(lr.decision_function(X)).min() < TOL
    assert np.allclose(lin.predict(data), X @ lin.coef_ + lin.intercept_, rtol=0, atol=TOL)
    assert np.allclose(pca.transform(data), X @ pca.components_.T, rtol=0, atol=TOL)


def test_a_malformed_model_from_the_server_is_refused_naming_it(tmp_path, monkeypatch):
    """The model arrives as a typed frame; one of the right form but wrong content (a non-finite weight, more
    weights than columns) makes every client refuse, naming the server's model, before any share."""
    from sqm.runtime.launch import MPCError

    spec = load_job(_job(tmp_path, _records(5, 20)))
    bad = MODEL.to_wire()
    monkeypatch.setattr(ReleasedModel, "to_wire", lambda self: {**bad, "weights": np.full((4, 1), np.inf)})
    with pytest.raises(MPCError, match="the server's released model is malformed") as e:
        run_job(spec, ScoringJobTask(MODEL), backend="plain")
    assert e.value.codes == {0: 3, 1: 3, 2: 3}
