"""``python -m bench utility``'s logistic regression cell: SQM-LR tuned on validation as DPSGD is, the check made
with the tuned SQM-LR, its defaults reported beside."""
from __future__ import annotations

import numpy as np

from bench import lr_tuned, utility


def _data(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    return np.c_[y + rng.normal(0, 0.6, n), rng.normal(size=(n, 3))], y


def _on_feature(Xtr, ytr, p, epsilon, delta, seed):
    """A stub method scoring records by p["w"] times their first feature."""
    return (lambda X: p["w"] * X[:, 0]), epsilon


def _random(Xtr, ytr, p, epsilon, delta, seed):
    """A stub method whose scores ignore the records."""
    return (lambda X: np.random.default_rng(seed).normal(size=len(X))), epsilon


def test_the_check_compares_the_tuned_sqm_with_dpsgd_and_reports_the_default_beside():
    """The tuned SQM stub finds the informative sign on validation and meets the check; the untuned stub
    ('sqm-default', random scores) trails by far and is reported, not checked."""
    X, y = _data()
    methods = {"dpsgd": (_on_feature, dict(w=(1.0,))), "sqm-tuned": (_on_feature, dict(w=(-1.0, 1.0))),
               "sqm-default": (_random, None),
               "nonprivate": (lambda *a: _on_feature(*a[:2], dict(w=1.0), *a[3:]), None)}
    row = utility.lr_cell(X, y, [], 1.0, 1e-5, 2, methods)
    assert row["sqm_chosen"] == [dict(w=1.0), dict(w=1.0)]  # chosen on each run's validation split
    assert row["sqm_auc"]["mean"] == row["reference_auc"]["mean"] > 0.8  # the same scores as the DPSGD stub
    assert row["gap_auc_points"] == 0.0 and row["gap_accuracy_points"] == 0.0 and utility.met("lr", row)
    assert row["default_gap_auc_points"] > 20 and row["sqm_default_auc"]["mean"] < 0.7
    assert row["sqm_name"] == "SQM-LR tuned on validation" and row["epsilon_spent"] == 1.0
    for m, summary in (("sqm-tuned", "sqm_auc"), ("dpsgd", "reference_auc")):  # each run's figures, as summarized
        assert len(row["per_run"][m]["auc"]) == 2 and np.mean(row["per_run"][m]["auc"]) == row[summary]["mean"]
    assert np.mean(row["per_run"]["sqm-tuned"]["accuracy"]) == row["sqm"]["mean"]
    assert row["per_run"]["sqm-tuned"]["tied"] == [1, 1] and row["per_run"]["dpsgd"]["tied"] == [1, 1]  # no tie


def test_the_real_cell_tunes_sqm_on_a_tiny_grid():
    """The cell with the real methods (tiny grids, breast_cancer, one run): the tuned SQM's choice is a point of
    its grid, its epsilon is at most the target (calibrated to it), and the printed table shows the default beside."""
    import pytest

    pytest.importorskip("opacus")
    X, y, names = utility.load("breast_cancer", 600)
    methods = {"dpsgd": (lr_tuned.fit_dpsgd, dict(batch=(64,), epochs=(1,), learning_rate=(2.0,), clip=(1.0,))),
               "sqm-tuned": (lr_tuned.fit_sqm, dict(constant=(0.7,), label_weight=(0.7,), gamma=(8192.0,),
                                                    ridge_multiple=(1.0, 16.0), row_scale=(1.0, 3.0))),
               "sqm-default": lr_tuned.METHODS["sqm-default"], "nonprivate": lr_tuned.METHODS["nonprivate"]}
    row = utility.lr_cell(X, y, names, 4.0, 1e-5, 1, methods)
    grid = lr_tuned.grid_points(methods["sqm-tuned"][1])
    assert row["sqm_chosen"][0] in grid and 3.99 <= row["epsilon_spent"] <= 4.0  # calibrated at or below 4
    assert 0.5 < row["sqm_auc"]["mean"] <= 1.0 and 0.5 < row["sqm_default_auc"]["mean"] <= 1.0
    rep = {"rows": [dict(dataset="breast_cancer", method="lr", records=len(y), d=X.shape[1], epsilon=4.0,
                         used_for_defaults=True, met=utility.met("lr", row), **row)],
           "delta": 1e-5, "records": 600, "protocol": utility.NOT_COUNTED, "relation": "zero-out",
           "pbm_relation": "", "all_met": True, "seconds": 1.0, "cpu_seconds": 1.0}
    text = utility.printed(rep)
    assert "SQM-LR and DPSGD tuned on validation; SQM-LR's defaults beside" in text and "default acc/AUC" in text


def test_a_set_with_few_test_records_runs_three_times_as_many_runs(monkeypatch):
    """Under 50 test records (one record moves the accuracy by more than the 2-point target) a cell runs 3x --runs:
    wine (36 test records) and iris (30), not breast_cancer (114); the cell reports the runs it made."""
    for name, want in (("wine", 30), ("iris", 30), ("breast_cancer", 10)):
        _, y, _ = utility.load(name, 5000)
        assert utility.lr_runs(y, 10) == want, name
    seen = []
    monkeypatch.setattr(utility, "lr_cell", lambda X, y, names, e, delta, runs: seen.append(runs) or {})
    monkeypatch.setattr(utility, "met", lambda method, row: True)
    utility.run(datasets=("iris", "breast_cancer"), methods=("lr",), epsilons=(1.0,), runs=2, progress=False)
    assert seen == [6, 2]
