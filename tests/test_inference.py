"""Private inference with released models (issue 27, part 2): each client scores its own columns, the partial
scores are summed on secret shares, only the requester learns the scores; they equal the plain computation
within the fixed point's rounding (each client's partial score rounded to 2^-20: |error| <= clients / 2^21)."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from sqm.cli.command import main
from sqm.framework.spec import load_job, write_party_csvs
from sqm.framework.runners import run_job
from sqm.apps.inference.job import FRAC_BITS, ScoringJobTask
from sqm.apps.inference.model import ReleasedModel, load_model
from sqm.errors import UsageError

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
    from sqm.mpc.net.launch import MPCError

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
                             min_intersection=1, task={"statistic": "linreg", "epsilon": 2, "label_column": "x3",
                                                         "label_range": [-10, 10]},
                             bounds=[{"x0": [0, 100], "x1": [-10, 10]}, {"x2": [0, 10000]}])
    model_file = tmp_path / "model.json"
    assert main(["linreg", "--job", train, "--backend", "plain", "--json", str(model_file), "-q"]) == 0
    model = load_model(model_file)
    assert model.kind == "linear" and model.columns == ("x0", "x1", "x2")
    new = _records(4, 50)
    job = _job(tmp_path / "new", new)
    scores, out = tmp_path / "scores.csv", tmp_path / "score.json"
    assert main(["score", "--job", job, "--model", str(model_file), "--scores", str(scores), "--json", str(out),
                 "-q"]) == 0
    with open(scores) as fh:
        rows = list(csv.DictReader(fh))
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
    from sqm.mpc.net.launch import MPCError

    spec = load_job(_job(tmp_path, _records(5, 20)))
    bad = MODEL.to_wire()
    monkeypatch.setattr(ReleasedModel, "to_wire", lambda self: {**bad, "weights": np.full((4, 1), np.inf)})
    with pytest.raises(MPCError, match="the server's released model is malformed") as e:
        run_job(spec, ScoringJobTask(MODEL), backend="plain")
    assert e.value.codes == {0: 3, 1: 3, 2: 3}


# ---- issue 43, part 3: a model must be a release the clients recorded; scores may not give a column away -----

def _start(command: str, job: str, extra: dict, timeout: int = 300) -> dict:
    """Every party of ``job`` started alone (``sqm COMMAND --job JOB --index I``, as on three hosts; loopback, plain
    TCP), real processes; {index: (exit code, stderr + stdout)}."""
    import os
    import subprocess
    import sys

    from conftest import one_by_one

    shared, files = one_by_one(job)  # the job file every party gets; each its own --data-file
    procs = {i: subprocess.Popen([sys.executable, "-m", "sqm", command, "--job", shared, "--index", str(i),
                                  "--insecure-plaintext", "--timeout", "120", *files[i], *extra.get(i, [])],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for i in range(3)}
    out = {}
    for i, p in procs.items():
        o, e = p.communicate(timeout=timeout)
        out[i] = (p.returncode, e + o)
    return out


def _fresh(job: str, name: str) -> str:
    """The same job file under another name with a fresh job id (a new job over the same files)."""
    import os
    import secrets

    from sqm.mpc.net.launch import free_ports

    doc = json.loads(Path(job).read_text())
    doc["job_id"] = secrets.token_hex(16)
    # ports free now, not the last job's
    for party, port in zip(doc["parties"], free_ports(len(doc["parties"])), strict=False):
        party["address"] = f"127.0.0.1:{port}"
    path = os.path.join(os.path.dirname(job), name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


@pytest.mark.slow
def test_a_projection_that_gives_a_clients_columns_away_is_refused_and_a_crafted_model_too(tmp_path):
    """Issue 43, attacks 3a and 3b, through real processes.  A 6-component PCA over 2 clients x 3 columns is
    released (each client's ledger records the model); scoring 200 new records with it for client 2 would let
    client 2 subtract its own partial scores and solve for client 1's raw block: client 1 refuses, naming the
    columns.  With client 1's operator's --allow-revealing-scores the job runs and the solve recovers the block
    (within the fixed point's rounding).  A crafted identity "model" is refused by both clients: it is not a
    release either recorded."""
    rng = np.random.default_rng(11)
    train = write_party_csvs(rng.normal(size=(300, 6)) * 0.3, str(tmp_path / "train"), col_counts=[3, 3],
                             min_intersection=1, task={"statistic": "pca", "components": 6, "epsilon": 2})
    ledgers = {j: str(tmp_path / f"owner{j}.sqlite") for j in (1, 2)}
    own = {j: ["--ledger", ledgers[j]] for j in (1, 2)}
    model = tmp_path / "pca.json"
    out = _start("pca", train, {0: ["--json", str(model)], **{j: own[j] + ["--budget", "10,1e-5"] for j in (1, 2)}})
    assert {i: c for i, (c, _) in out.items()} == {0: 0, 1: 0, 2: 0}, out
    digest = load_model(model).digest
    for j in (1, 2):  # the server sent the model at the job's end: each owner recorded its digest
        from sqm.mechanism.ledger import Ledger

        led = Ledger(ledgers[j])
        assert [e["model"] for d in led.datasets() for e in led.releases(d)] == [digest]

    X = rng.normal(size=(200, 6))
    new = write_party_csvs(X, str(tmp_path / "new"), col_counts=[3, 3], min_intersection=1)
    scores = tmp_path / "scores.csv"
    refused = _start("score", new, {0: ["--model", str(model)], 1: own[1], 2: own[2] + ["--scores", str(scores)]})
    assert {i: c for i, (c, _) in refused.items()} == {0: 3, 1: 3, 2: 3}, refused
    why = "determine its column(s) ['x0', 'x1', 'x2']"
    assert why in refused[1][1] and "--allow-revealing-scores" in refused[1][1]  # its operator is told how
    assert all(f"client 1 refused: the scores and the requester's own columns {why}" in refused[i][1] for i in (0, 2))
    assert not scores.exists()

    allowed = _start("score", _fresh(new, "again.json"), {0: ["--model", str(model)],
                                                          1: own[1] + ["--allow-revealing-scores"],
                                                          2: own[2] + ["--scores", str(scores)]})
    assert {i: c for i, (c, _) in allowed.items()} == {0: 0, 1: 0, 2: 0}, allowed
    with open(scores) as fh:
        rows = list(csv.DictReader(fh))
    ids = [int(r["id"]) for r in rows]
    S = np.array([[float(r[f"PC{k + 1}"]) for k in range(6)] for r in rows])
    W = load_model(model).weights
    solved = (S - X[ids, 3:] @ W[3:]) @ np.linalg.pinv(W[:3])  # the requester's solve for client 1's block
    assert np.abs(solved - X[ids, :3]).max() < 1e-4  # exact but for the 2^-20 fixed point of each partial score

    crafted = tmp_path / "identity.json"
    crafted.write_text(json.dumps({"command": "pca", "released": {"components": [
        {f"x{c}": float(c == k) for c in range(6)} for k in range(6)]}}))
    fake = _start("score", _fresh(new, "crafted.json"), {0: ["--model", str(crafted)], 1: own[1], 2: own[2]})
    assert {i: c for i, (c, _) in fake.items()} == {0: 3, 1: 3, 2: 3}, fake
    short = load_model(crafted).digest[:16]
    assert f"the model (digest {short}) is not a release it recorded" in fake[0][1]
    # each client checks the model on receipt, and one may hear the other's refusal before its own check: each
    # client names an unrecorded model (its own ledger's verdict, or the other client's refusal of it)
    assert all("is not a completed release in its ledger" in fake[j][1] or
               f"refused: the model (digest {short}) is not a release it recorded" in fake[j][1] for j in (1, 2))
    assert any("is not a completed release in its ledger" in fake[j][1] for j in (1, 2))


def test_a_recorded_logistic_regression_scores_and_other_models_are_refused(tmp_path):
    """Issue 43, part 3, in process (the same party programs): a logistic regression released by a training job
    whose clients keep ledgers (each records the model's digest) scores new records for the requester; a model
    the clients did not record is refused by every client, before any share; a client that keeps no ledger but
    must check (started alone) refuses too."""
    from sqm.framework.ledger_guard import LedgerGuard
    from sqm.framework.party import party_program
    from sqm.apps.logreg.job import LRJobTask
    from sqm.mpc.protocols.inprocess import run_in_process
    from sqm.mpc.net.launch import MPCError

    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 4)) * 0.3
    y = (X[:, 0] - X[:, 2] > 0).astype(float)
    train = load_job(write_party_csvs(np.column_stack([X, y]), str(tmp_path / "train"), col_counts=[2, 3],
                                      min_intersection=1))
    guards = {j: LedgerGuard(str(tmp_path / f"owner{j}.sqlite"), (10.0, 1e-5)) for j in (1, 2)}
    task = LRJobTask(2.0, 1e-5, label_column="x4", solver="moments")
    recs = run_in_process([party_program(train, i, task, guards.get(i)) for i in range(3)], timeout=120)
    model = ReleasedModel.from_wire(task.released_model(recs[0]["result"]))
    assert model.digest == recs[0]["result"]["model_digest"] and model.columns == ("x0", "x1", "x2", "x3")

    Xn = _records(6, 50)[:, :2].repeat(2, axis=1)  # 4 feature columns, 2 at each client
    new = load_job(write_party_csvs(Xn, str(tmp_path / "new"), col_counts=[2, 2], min_intersection=1))
    out = run_in_process([party_program(new, i, ScoringJobTask(model if i == 0 else None), guards.get(i))
                          for i in range(3)], timeout=120)[2]["result"]
    ids = [int(i) for i in out["ids"]]
    assert np.allclose(out["scores"][:, 0], model.plain_scores(Xn[ids])[:, 0], rtol=0, atol=TOL)

    other = ReleasedModel("logistic", model.columns, model.weights + 0.5, model.intercepts)
    with pytest.raises(MPCError, match=r"^client [12] refused: the model \(digest [0-9a-f]{16}\) is not a completed "
                                       r"release in its ledger") as e:
        run_in_process([party_program(new, i, ScoringJobTask(other if i == 0 else None), guards.get(i))
                        for i in range(3)], timeout=120)
    assert e.value.codes == {0: 3, 1: 3, 2: 3}
    assert re.search(r"client [12] refused: the model \(digest [0-9a-f]{16}\) is not a release it recorded",
                     e.value.messages[0])  # what the server is told
    assert all(f"the model (digest {other.digest[:16]}) is not a completed release in its ledger "
               f"{guards[j].path}" in e.value.messages[j] for j in (1, 2))  # each client refused, before any share
    with pytest.raises(MPCError, match="client 1 refused: it keeps no ledger to check the model against"):
        run_in_process([party_program(new, i, ScoringJobTask(model if i == 0 else None, need_record=i == 1),
                                      guards.get(i) if i == 2 else None) for i in range(3)], timeout=120)


def test_which_columns_the_scores_determine():
    """The linear algebra of :func:`sqm.apps.inference.disclosure.determined_columns`: the requester learns
    x_rest W_rest per record; client c's column j is determined iff e_j is in the column space of W_rest."""
    from sqm.apps.inference.disclosure import determined_columns

    rng = np.random.default_rng(0)
    W = rng.normal(size=(6, 6))  # a full projection: every column of the rest is determined
    assert determined_columns(W, [0, 1, 2], [0, 1, 2]) == [0, 1, 2]
    assert determined_columns(W[:, :2], [0, 1, 2], [0, 1, 2]) == []  # 2 outputs, 3 unknowns, generic weights
    w = np.array([[0.03], [-0.7], [4e-4]])  # one score: no column of a rest of two or more is determined
    assert determined_columns(w, [0, 1], [0, 1]) == [] and determined_columns(w, [0, 1, 2], [0]) == []
    assert determined_columns(w, [2], [2]) == [2]  # ... but a rest of one column is given away, whatever its scale
    assert determined_columns(np.array([[1.0], [0.0]]), [0, 1], [0, 1]) == [0]  # a zero weight hides nothing else
    B = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # x0 + x2 and x1 + x2: none alone
    assert determined_columns(B, [0, 1, 2], [0, 1, 2]) == []
    assert determined_columns(np.c_[B, [0.0, 0.0, 1.0]], [0, 1, 2], [0, 1, 2]) == [0, 1, 2]  # x2 too: all
    D = np.diag([1e-8, 1.0, 1e6]) @ W[:3, :3]  # columns' units change the numbers, not the answer
    assert determined_columns(D, [0, 1, 2], [0, 1, 2]) == [0, 1, 2]


def test_the_json_model_is_the_model_the_clients_record(tmp_path, monkeypatch):
    """The digest the server sends every client at a training job's end (the task's released_model of its result)
    is the digest of the model ``sqm score`` reads from the command's --json (load_model), for PCA, linear and
    logistic regression, declared ranges (raw units) included."""
    import sqm.cli.job_cli as job_cli

    seen = []
    real = job_cli.run_job
    monkeypatch.setattr(job_cli, "run_job", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.uniform(0, 10, 200), rng.normal(size=200), rng.uniform(-5, 5, 200),
                         rng.normal(size=200)])
    y = (X[:, 1] > 0).astype(float)
    bounds = [{"x0": [0, 10]}, {"x2": [-5, 5]}]
    for cmd, extra in (("pca", ["--components", "2"]), ("linreg", ["--label-column", "x3", "--label-range", "-5", "5"]),
                       ("logreg", ["--label-column", "x4", "--solver", "moments"])):
        data = np.column_stack([X, y]) if cmd == "logreg" else X
        job = write_party_csvs(data, str(tmp_path / cmd), col_counts=[2, data.shape[1] - 2], min_intersection=1,
                               bounds=bounds)
        out = tmp_path / f"{cmd}.json"
        assert main([cmd, "--job", job, "--backend", "plain", "--json", str(out), "-q", *extra]) == 0
        assert load_model(out).digest == seen[-1][0]["result"]["model_digest"], cmd


def test_scorings_of_the_same_file_add_up(tmp_path):
    """Two recorded one-output models over client 1's two columns: each alone determines none of them, both do.
    Client 1 scores its file with the first, then refuses the second for the same requester, naming the earlier
    scorings; a third model scored for another requester is checked alone."""
    from sqm.framework import released_models as rm
    from sqm.framework.ledger_guard import LedgerGuard
    from sqm.framework.party import party_program
    from sqm.mechanism import events as ev
    from sqm.mechanism.ledger import Ledger
    from sqm.mpc.protocols.inprocess import run_in_process
    from sqm.mpc.net.launch import MPCError

    guards = {j: LedgerGuard(str(tmp_path / f"owner{j}.sqlite")) for j in (1, 2)}
    cols = ("x0", "x1", "x2")
    models = [ReleasedModel("linear", cols, np.array(w, dtype=float)[:, None], np.zeros(1))
              for w in ([1.0, 2.0, 1.0], [1.0, -1.0, 1.0], [3.0, 1.0, 1.0])]
    for j in (1, 2):  # as if each model had been released by a training job these owners took part in
        led = Ledger(guards[j].path)
        led.set_budget("train", 10.0, 1e-5)
        for m in models:
            led.reserve("train", [ev.SkellamDpEvent(10.0, 10.0, 300.0)], refundable=True).complete(
                (m.digest, rm.to_json(m.to_wire())))
    spec = load_job(_job(tmp_path, _records(8, 40)))

    def score(m, requester=None):
        return run_in_process([party_program(spec, i, ScoringJobTask(m if i == 0 else None, requester=requester),
                                             guards.get(i)) for i in range(3)], timeout=120)

    score(models[0])
    with pytest.raises(MPCError, match=r"^client 1 refused: the scores \(with those of earlier scorings\) and the "
                                       r"requester's own columns determine its column\(s\) \['x0', 'x1'\]"):
        score(models[1])
    score(models[2], requester=0)  # the server requests: a rest of three columns, one output
