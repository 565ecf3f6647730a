"""The label's range is part of the task: a linear-regression job declares it once (``label_range``), a job without
it or declaring it twice is refused before any party starts, a label outside it on more than ``max_label_clipped``
of the label party's rows is refused by that party before anything derived from its records is sent, logistic
regression's 0/1 labels are never clipped, and a scoring job needs no label column.  Checks that need only the
clients' column names run before any party process is spawned, and ``sqm score --help`` lists only options that
do something in a scoring job."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from sqm.cli.command import main
from sqm.errors import UsageError
from sqm.framework.spec import load_job, write_party_csvs, write_shared_job


def _raw(n=200, seed=0):
    """Raw units: features age in [20, 80], debt in [-3, 3], income in [0, 5000]; a target y about 2..8."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(20, 80, n), rng.uniform(-3, 3, n), rng.uniform(0, 5000, n)])
    y = 0.05 * X[:, 0] - 0.8 * X[:, 1] + 0.001 * X[:, 2] + rng.normal(0, 0.05, n)
    return X, y


def _job(folder, X, y, task=None, bounds=None) -> str:
    """Client 1: x0, x1; client 2 (the label party): x2 and the label x3."""
    bounds = bounds or [{"x0": [0, 100], "x1": [-5, 5]}, {"x2": [0, 10000]}]
    return write_party_csvs(np.column_stack([X, y]), str(folder), col_counts=[2, 2], min_intersection=1,
                            task=task, bounds=bounds)


def _task(label_range, max_label_clipped=None, **est):
    from sqm.apps.linreg import LinRegJobTask, SQMLinearRegression

    extra = {} if max_label_clipped is None else {"max_label_clipped": max_label_clipped}
    return LinRegJobTask(SQMLinearRegression(seed=1, **est), "x3", True, label_range=label_range, **extra)


@pytest.fixture
def no_spawn(monkeypatch):
    """Party processes may not be started: the local launcher's and one party's spawn functions fail the test."""
    import sqm.framework.runners as runners

    calls = []

    def spawn(*args, **kwargs):
        calls.append(args)
        raise AssertionError("a party process was spawned")

    monkeypatch.setattr(runners, "run_parties", spawn)
    monkeypatch.setattr(runners, "Launch", spawn)
    return calls


def _printed(capsys) -> str:
    """What sqm printed on stderr, its first line's break undone (sqm.cli.command.short_first_line), after checking
    that the first line of each message is short."""
    err = capsys.readouterr(raw=True).err
    assert all(len(ln) < 160 for ln in err.splitlines() if ln.startswith("sqm: ")), err
    return err.replace("\n  ", " ")


# ----- one declaration ---------------------------------------------------------------------------------------


def test_a_linreg_job_without_a_label_range_is_refused_before_any_party_starts(tmp_path, capsys, no_spawn):
    X, y = _raw()
    job = _job(tmp_path, X, y, {"statistic": "linreg", "label_column": "x3"})
    assert main(["linreg", "--job", job]) == 2
    err = _printed(capsys)
    assert (f"job file {job}: a linreg job needs its label's public range, declared once: \"label_range\": "
            f"[lo, hi] in the task block, or --label-range LO HI") in err
    assert no_spawn == []
    with pytest.raises(UsageError, match="needs its label's public range"):
        _task(None)


def test_the_label_range_is_declared_once(tmp_path, capsys, no_spawn):
    """A range for the label in the label party's "bounds" as well as the task's is refused, naming both places;
    a bad range is refused naming the parameter."""
    X, y = _raw()
    job = _job(tmp_path, X, y, {"statistic": "linreg", "label_column": "x3", "label_range": [-10, 20]},
               bounds=[{"x0": [0, 100]}, {"x2": [0, 10000], "x3": [-10, 20]}])
    assert main(["linreg", "--job", job]) == 2
    assert ("client 2 declares a range (\"bounds\") for the label column 'x3': the label's range is declared "
            "once, in the task") in _printed(capsys)
    assert no_spawn == []
    with pytest.raises(UsageError, match=r"label_range must be a range \[lo, hi\] of finite numbers with lo < hi"):
        _task((5, 1))


def test_the_task_block_and_the_option_are_one_parameter(tmp_path, capsys):
    """The block's list and the option's two numbers are the same value (repeating it is allowed, a different one
    refused); the range is agreed by every party (a tagged public parameter)."""
    X, y = _raw()
    job = _job(tmp_path, X, y, {"statistic": "linreg", "label_column": "x3", "label_range": [-10, 20]})
    assert main(["linreg", "--job", job, "--label-range", "-10", "20", "--backend", "plain", "-q"]) == 0
    assert main(["linreg", "--job", job, "--label-range", "-10", "30", "--backend", "plain"]) == 2
    assert "--label-range [-10.0, 30.0] differs from the task in job file" in _printed(capsys)
    assert ("label_range", (-10.0, 20.0)) in _task([-10, 20]).public()


def test_a_job_with_a_label_range_releases_with_no_label_clipped(tmp_path):
    """Raw labels (about -2..7, far beyond the label bound 1): with their range declared, the label party clamps
    nothing, clips no row and the release's label column scale is the declared one; nearly noiseless, the raw
    model is least squares on the raw data."""
    from sklearn.linear_model import LinearRegression

    from sqm.framework.runners import simulate

    X, y = _raw()
    assert np.abs(y).max() > 5
    recs = simulate(load_job(_job(tmp_path, X, y)), _task([-10, 20], epsilon=1e6, gamma=65536.0, alpha=0.0))
    label_party = recs[2]["result"]
    assert label_party["clipped"] == 0 and label_party["outside_declared_range"] == 0
    assert recs[1]["result"]["clipped"] == 0
    assert recs[0]["result"]["column_scales"]["x3"] == 1.0 / 20.0  # the label bound 1 over max(|lo|, |hi|)
    model = _task([-10, 20]).released_model(recs[0]["result"])  # in raw units
    ref = LinearRegression().fit(X, y)
    assert model["columns"] == ["x0", "x1", "x2"]
    assert np.allclose(model["weights"][:, 0], ref.coef_, rtol=0.05, atol=0), (model["weights"], ref.coef_)


def test_the_task_range_releases_the_integers_a_range_in_bounds_did(tmp_path, monkeypatch):
    """The label's range declared in the task is the range the label party's "bounds" used to declare: the same
    clamp and the same scale, so a job moved to the new declaration releases the same integers (the old
    declaration re-enabled here by undoing the one-place check)."""
    from sqm.apps.linreg.job import LinRegJobTask
    from sqm.framework.runners import simulate

    X, y = _raw()
    y[:2] = [25.0, -12.0]  # two labels clamped (1% of the rows: allowed)
    new = simulate(load_job(_job(tmp_path / "new", X, y)), _task([-10, 20]))[0]["result"]
    monkeypatch.setattr(LinRegJobTask, "check_bounds", lambda self, bounds: None)
    monkeypatch.setattr(LinRegJobTask, "declared_ranges", lambda self, n: {})
    old_bounds = [{"x0": [0, 100], "x1": [-5, 5]}, {"x2": [0, 10000], "x3": [-10, 20]}]
    old = simulate(load_job(_job(tmp_path / "old", X, y, bounds=old_bounds)), _task([-10, 20]))[0]["result"]
    assert [int(v) for v in new["raw"]] == [int(v) for v in old["raw"]]
    assert new["column_scales"] == old["column_scales"]


# ----- the clipped-share refusal -----------------------------------------------------------------------------


def test_a_label_outside_its_range_on_too_many_rows_is_refused_by_the_label_party(tmp_path, caplog):
    """Labels beyond [-1, 1] on most rows (the trap of a range left at the label bound): the label party refuses
    before the record alignment, naming the range and the share; its operator's message has the count."""
    from sqm.framework.runners import simulate
    from sqm.mpc.net.launch import MPCError

    X, y = _raw()
    spec = load_job(_job(tmp_path, X, y))
    share = np.mean((y < -1) | (y > 1))
    assert share > 0.5
    with caplog.at_level(logging.ERROR), pytest.raises(MPCError) as e:
        simulate(spec, _task([-1, 1]))
    assert ("client 2 refused: its label lies outside the declared label_range [-1, 1] on more than "
            "max_label_clipped 0.01 of its rows") in str(e.value)
    assert f"on {int(round(share * len(y))):,} of its 200 rows ({100 * share:.1f}%" in caplog.text
    assert "alignment" not in str(e.value)


@pytest.mark.parametrize("allowed, refused", [(0.02, False), (0.015, False), (0.01, True)])
def test_the_refusal_share_is_the_declared_parameter(tmp_path, allowed, refused):
    """3 of 200 rows (1.5%) outside the range: allowed at max_label_clipped 0.02 and 0.015 (only a larger share
    is refused), refused at 0.01 (the default)."""
    from sqm.framework.runners import simulate
    from sqm.mpc.net.launch import MPCError

    X, y = _raw()
    y = np.clip(y, -5, 5)
    y[[3, 50, 120]] = 12.0  # beyond the declared 10
    spec = load_job(_job(tmp_path, X, y))
    if refused:
        with pytest.raises(MPCError, match=f"max_label_clipped {allowed:g} of its rows"):
            simulate(spec, _task([-10, 10], allowed))
    else:
        recs = simulate(spec, _task([-10, 10], allowed))
        assert recs[2]["result"]["outside_declared_range"] == 3 and recs[2]["result"]["clipped"] == 0


def test_logistic_regression_labels_need_no_range_and_are_never_clipped(tmp_path):
    """Labels 3 and 7 (mapped to 0 and 1) and features well inside the row norm bound: the label party clips no
    row, so nothing clips its labels (the release bounds the 0/1 label and its score column exactly)."""
    from sqm.apps.logreg import LRJobTask
    from sqm.framework.runners import simulate

    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 4)) * 0.05
    y = np.where(X[:, 0] + X[:, 2] > 0, 7.0, 3.0)
    job = write_party_csvs(np.column_stack([X, y]), str(tmp_path), col_counts=[2, 3], min_intersection=1)
    recs = simulate(load_job(job), LRJobTask(1.0, label_column="x4", seed=1, insecure_reproducible=True))
    assert recs[2]["result"]["clipped"] == 0 and recs[1]["result"]["clipped"] == 0
    assert "3" in recs[2]["result"]["labels"] and "7" in recs[2]["result"]["labels"]


# ----- scoring without the label -----------------------------------------------------------------------------


def test_scoring_with_the_training_job_file_needs_no_label_column(tmp_path, capsys):
    """Train with a job file declaring the label's range in its task; score new customers with the same job file
    (its files now the new tables: the label party's has no target column); the scores are the released model's."""
    from sqm.apps.inference.model import load_model

    X, y = _raw()
    train = _job(tmp_path / "train", X, y, {"statistic": "linreg", "label_column": "x3", "label_range": [-10, 20]})
    model_file = tmp_path / "model.json"
    assert main(["linreg", "--job", train, "--backend", "plain", "--json", str(model_file), "-q"]) == 0
    new, _ = _raw(40, seed=9)
    folder = tmp_path / "new"
    os.makedirs(folder)
    with open(train) as f:
        doc = json.load(f)
    for j, cols in ((1, [0, 1]), (2, [2])):  # the same file names; the label party's table without the target
        with open(folder / f"party{j}.csv", "w") as f:
            f.write(",".join(["id", *[f"x{c}" for c in cols]]) + "\n")
            f.writelines(f"{i}," + ",".join(repr(float(new[i, c])) for c in cols) + "\n" for i in range(40))
    job = folder / "job.json"
    job.write_text(json.dumps(doc))
    scores = tmp_path / "scores.csv"
    assert main(["score", "--job", str(job), "--model", str(model_file), "--scores", str(scores), "--backend",
                 "plain", "-q"]) == 0
    got = np.loadtxt(scores, delimiter=",", skiprows=1)
    want = load_model(model_file).plain_scores(new[got[:, 0].astype(int)])[:, 0]
    assert len(got) == 40 and np.allclose(got[:, 1], want, atol=1e-5)


# ----- pre-flight: checks that need no data, before any party starts -----------------------------------------


def test_more_components_than_columns_is_refused_before_any_party_is_spawned(tmp_path, capsys, no_spawn):
    X, y = _raw()
    job = _job(tmp_path, X, y)
    assert main(["pca", "--job", job, "--components", "5"]) == 2
    assert (f"job file {job}: cannot find 5 components in data with 4 columns (need k <= columns) (refused before "
            f"any party started)") in _printed(capsys)
    assert main(["pca", "--job", job, "--components", "4", "--drop-columns", "x3"]) == 2  # 3 columns left
    assert "cannot find 4 components in data with 3 columns" in _printed(capsys)
    assert no_spawn == []


def test_a_label_column_no_client_file_has_is_refused_before_any_party_is_spawned(tmp_path, capsys, no_spawn):
    X, y = _raw()
    job = _job(tmp_path, X, y)
    assert main(["linreg", "--job", job, "--label-column", "target", "--label-range", "-10", "20"]) == 2
    assert ("client 2 (the label party) has no label column 'target' in its file; its columns are ['x2', 'x3']: "
            "name the label's column with --label-column") in _printed(capsys)
    assert main(["linreg", "--job", job, "--label-column", "x0", "--label-range", "0", "100"]) == 2
    assert "client 1's file has it, but the label party is client 2" in _printed(capsys)
    assert main(["logreg", "--job", job, "--label-column", "target"]) == 2
    assert "client 2 (the label party) has no label column 'target'" in _printed(capsys)
    assert no_spawn == []


def test_a_party_started_alone_checks_its_own_file_before_connecting(tmp_path, capsys, no_spawn, monkeypatch):
    """With --index, the label party checks its own header before it starts (nothing spawned, nothing connects)."""
    monkeypatch.setenv("SQM_DATA", str(tmp_path / "home"))
    X, y = _raw()
    job = _job(tmp_path, X, y, {"statistic": "linreg", "label_column": "target", "label_range": [-10, 20]})
    shared = write_shared_job(job, str(tmp_path / "shared.json"))
    code = main(["linreg", "--job", shared, "--index", "2", "--data-file", str(tmp_path / "party2.csv"),
                 "--no-ledger", "--ssl-dir", str(tmp_path)])
    assert code == 2
    assert "client 2 (the label party) has no label column 'target' in its file" in _printed(capsys)
    assert no_spawn == []


# ----- sqm score's options -----------------------------------------------------------------------------------


SCORE_OPTIONS = ["--model", "--requester", "--scores", "--allow-revealing-scores", "--score-bound", "--backend",
                 "--timeout", "--job", "--index", "--data-file", "--data-sql-env", "--data-sql-file", "--data-sql",
                 "--data-query", "--data-table", "--ssl-dir", "--connect-timeout", "--idle-timeout",
                 "--progress-timeout", "--insecure-plaintext", "--drop-columns", "--min-intersection",
                 "--max-set-ratio", "--ledger", "--ledger-dataset", "--max-alignments", "--no-ledger", "--json"]


def test_sqm_score_offers_only_options_that_do_something(capsys):
    """Its --help lists exactly the options a scoring job uses (no seed: it draws no noise; no budget to set: it
    charges nothing; no shard workers); one of those left off is an unknown option."""
    import re

    with pytest.raises(SystemExit):
        main(["score", "--help"])
    text = capsys.readouterr().out
    flags = re.findall(r"^\s{2}(?:-\w, )?(--[a-z-]+)", text, re.M)
    assert flags == ["--help", *SCORE_OPTIONS, "--verbose", "--quiet"], flags
    for gone in ("--seed", "--insecure-reproducible", "--budget", "--engine", "--worker-addresses"):
        assert gone not in flags
        with pytest.raises(SystemExit) as e:
            main(["score", "--job", "j.json", gone, "1"])
        assert e.value.code == 2
