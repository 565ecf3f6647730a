"""SQM-LR's default solver "auto": the moments release or one full-batch sgd round chosen from public quantities
(n, d, epsilon) only, on both sides of the threshold; the flags that apply to the moments release force it; an
explicit solver is honoured; the fitted estimator, the job task and the CLI say which solver ran and why."""
from __future__ import annotations

import numpy as np
import pytest

from sqm.apps.logreg.estimator import (AUTO_MIN_COLUMNS, AUTO_ROUND, AUTO_THRESHOLD, SQMLogisticRegression,
                                      auto_solver)
from sqm.apps.logreg.params import LogRegJobParams, LogRegParams


def _data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True).max()
    y = (X @ np.arange(1.0, d + 1) + 0.1 * rng.normal(size=n) > 0).astype(np.int64)
    return X, y


def test_the_rule_on_both_sides_of_the_threshold():
    # n epsilon / d at the threshold: moments; one record fewer: sgd
    d, eps = 40, 0.5
    n = int(AUTO_THRESHOLD * d / eps)
    assert auto_solver(n, d, eps)[0] == "moments"
    assert auto_solver(n - 1, d, eps)[0] == "sgd"
    # epsilon and d move it alike: twice the columns need twice the records
    assert auto_solver(2 * n - 1, 2 * d, eps)[0] == "sgd" and auto_solver(2 * n, 2 * d, eps)[0] == "moments"
    assert auto_solver(n - 1, d, 2 * eps)[0] == "moments"
    solver, why = auto_solver(n - 1, d, eps)
    assert why.startswith(f"n epsilon / max(d, 30) = {n - 1} x 0.5 / 40 = ") and f"< {AUTO_THRESHOLD:g}" in why


def test_below_thirty_columns_the_crossover_stays_at_n_epsilon_150():
    """d is floored at AUTO_MIN_COLUMNS (30): on the tuning sets' feature subsets the moments fit did not catch up
    at a smaller n epsilon when d was small (iris' 4 columns, 90 training rows, epsilon 0.5: the round)."""
    assert AUTO_MIN_COLUMNS == 30 and AUTO_THRESHOLD * AUTO_MIN_COLUMNS == 150
    for d in (1, 4, 13, 29, 30):
        assert auto_solver(299, d, 0.5)[0] == "sgd" and auto_solver(300, d, 0.5)[0] == "moments"
    assert auto_solver(90, 4, 0.5) == ("sgd", "n epsilon / max(d, 30) = 90 x 0.5 / 30 = 1.5 < 5: one full-batch "
                                              "sgd round")
    assert auto_solver(90, 4, 2.0)[0] == "moments" and auto_solver(309, 31, 0.5)[0] == "sgd"


def test_robust_noise_and_verified_inputs_force_the_moments_release():
    assert auto_solver(10, 10, 0.5, robust_noise=1) == ("moments", "robust_noise applies to the moments release only")
    assert auto_solver(10, 10, 0.5, verify_inputs=True) == (
        "moments", "verify_inputs applies to the moments release only")
    X, y = _data(40, 4)
    m = SQMLogisticRegression(0.4, gamma=1024.0, backend="in-process", n_parties=2, seed=1, robust_noise=1)
    m.fit(X, y)
    assert m.solver_ == "moments" and m.schedule_ is None and "robust_noise" in m.solver_reason_


def test_auto_is_the_default_and_runs_the_chosen_solver_bit_for_bit():
    assert LogRegParams().solver == "auto" and LogRegJobParams().solver == "auto"
    X, y = _data(40, 4)  # n epsilon / max(d, 30) = 40 x 0.4 / 30 = 0.53: one sgd round
    kw = dict(epsilon=0.4, gamma=1024.0, backend="in-process", n_parties=2, seed=3)
    auto = SQMLogisticRegression(**kw).fit(X, y)
    assert auto.get_params()["solver"] == "auto" and auto.solver_ == "sgd"
    assert auto.solver_reason_ == auto_solver(40, 4, 0.4)[1]
    assert auto.schedule_ == AUTO_ROUND and auto.report_.rounds == 1 and auto.report_.sampling_rate == 1.0
    sgd = SQMLogisticRegression(**kw, solver="sgd", sampling_rate=AUTO_ROUND.q, epochs=AUTO_ROUND.epochs,
                                learning_rate=AUTO_ROUND.learning_rate, weight_bound=AUTO_ROUND.weight_bound).fit(X, y)
    assert np.array_equal(auto.coef_, sgd.coef_) and np.array_equal(auto.intercept_, sgd.intercept_)
    assert auto.report_ == sgd.report_ and sgd.solver_reason_ == "given"
    # 400 records: n epsilon / max(d, 30) = 5.33, the moments release, the same as asking for it
    X, y = _data(400, 4)
    auto = SQMLogisticRegression(**kw).fit(X, y)
    moments = SQMLogisticRegression(**kw, solver="moments").fit(X, y)
    assert auto.solver_ == "moments" and np.array_equal(auto.moments_, moments.moments_)
    assert np.array_equal(auto.coef_, moments.coef_) and auto.report_ == moments.report_


def test_an_explicit_solver_is_honoured_and_the_schedule_needs_sgd():
    X, y = _data(40, 4)  # auto would run sgd here (n epsilon / max(d, 30) = 0.53)
    assert auto_solver(40, 4, 0.4)[0] == "sgd"
    m = SQMLogisticRegression(0.4, gamma=1024.0, backend="in-process", n_parties=2, seed=1, solver="moments")
    assert m.fit(X, y).solver_ == "moments" and m.schedule_ is None
    with pytest.raises(ValueError, match="epochs: the schedule of solver='sgd'; solver 'auto' runs the moments"):
        SQMLogisticRegression(epochs=3, backend="in-process").fit(X, y)
    with pytest.raises(ValueError, match="noise=False is available with solver='sgd' only"):
        SQMLogisticRegression(noise=False, backend="in-process").fit(X, y)


def test_the_job_task_resolves_auto_from_public_counts():
    from sqm.framework.party import JobMeta
    from sqm.apps.logreg.job import LRJobTask

    task = LRJobTask(0.4, 1e-5, 1024.0, label_column="x6")
    small, large = JobMeta((2, 2, 3), 60), JobMeta((2, 2, 3), 600)  # 6 features besides the label
    assert task.solver_of(small) == auto_solver(60, 6, 0.4) and task.solver_of(small)[0] == "sgd"
    assert task.solver_of(large)[0] == "moments"
    assert task.release(small).rounds == 1 and task.release(small).sampling_rate == 1.0
    assert task.release(large).notes.count("one release of the second moments") == 1
    pinned = LRJobTask(0.4, 1e-5, 1024.0, label_column="x6", solver="moments")
    assert pinned.solver_of(small) == ("moments", "given")
    assert LRJobTask(0.4, label_column="x6", verify_inputs=True).solver_of(small)[0] == "moments"


def test_the_job_file_and_the_cli_accept_auto(tmp_path, capsys):
    import argparse

    from sqm.cli.command import main

    p = argparse.ArgumentParser()
    LogRegJobParams.add_options(p, only=("solver",))
    assert p.parse_args([]).solver == "auto" and p.parse_args(["--solver", "auto"]).solver == "auto"
    assert LogRegJobParams(1.0, solver="auto").public() == LogRegJobParams(1.0).public()
    assert main(["logreg", "--backend", "plain", "--no-baselines", "--seed", "0", "--epsilon", "0.3",
                 "--solver", "auto", "-q"]) == 0
    out = capsys.readouterr().out
    assert "SQM solver sgd (auto: n epsilon / max(d, 30) = 426 x 0.3 / 30 = 4.26 < 5: one full-batch sgd round)" in out
    assert main(["logreg", "--backend", "plain", "--no-baselines", "--seed", "0", "--epsilon", "1", "-q"]) == 0
    out = capsys.readouterr().out
    assert "SQM solver moments (auto: n epsilon / max(d, 30) = 426 x 1 / 30 = 14.2 >= 5): one release" in out


@pytest.mark.parametrize("solver, ran", [("auto", "solver sgd, auto: n epsilon / max(d, 30) = 40 x 0.4 / 30 = "
                                                  "0.5333 < 5"),
                                         ("moments", "one release of the second moments (solver moments)")])
def test_a_job_files_task_block_takes_auto(tmp_path, capsys, solver, ran):
    from sqm.cli.command import main
    from sqm.framework.spec import write_party_csvs

    X, y = _data(40, 4, seed=3)
    task = {"statistic": "logreg", "epsilon": 0.4, "gamma": 1024, "label_column": "x4", "solver": solver}
    job = write_party_csvs(np.hstack([X, y[:, None]]), str(tmp_path), col_counts=[2, 3], min_intersection=1,
                           task=task)
    assert main(["logreg", "--job", job, "--backend", "plain"]) == 0
    assert ran in capsys.readouterr().out
