"""bench/pbm_tuned.py: the tuning never sees a test record, the choice is the validation argmax, a tiny
configuration runs end to end with the documented keys, PBM's beta holds the stated epsilon, and the 5-point
check's pass/fail."""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")

from bench import pbm_tuned  # noqa: E402
from bench.lr_tuned import split_indices  # noqa: E402

TINY = dict(lr=(0.01, 0.03), hidden=(8,), epochs=(1, 2))


def test_tuning_sees_no_test_index_and_takes_the_validation_argmax(monkeypatch):
    X, y, K = pbm_tuned.load("iris")
    tr, va, te = split_indices(y, 3)
    calls = []

    def fake(name, X_, y_, n_classes, method, point, fit_idx, eval_idx, epsilon, seed, delta=pbm_tuned.DELTA):
        calls.append((method, dict(point), np.array(fit_idx), np.array(eval_idx)))
        # validation accuracy by epoch: highest at lr 0.03 after 1 epoch
        acc = [0.9 if point["lr"] == 0.03 else 0.5, 0.6][:point["epochs"]]
        return dict(accuracy=acc, auprc=None, b=16, beta=0.1, epsilon_spent=1.0)

    monkeypatch.setattr(pbm_tuned, "fit_score", fake)
    out = pbm_tuned.tuned_cell("iris", 50.0, 3, grid=TINY, loaded=(X, y, K))
    assert out["split"] == (len(tr), len(va), len(te))
    for method in pbm_tuned.METHODS:
        mine = [c for c in calls if c[0] == method]
        *tuning, refit = mine
        assert tuning
        for _, _, fit_idx, eval_idx in tuning:
            assert np.array_equal(fit_idx, tr) and np.array_equal(eval_idx, va)
            assert not set(fit_idx) & set(te) and not set(eval_idx) & set(te)
        assert np.array_equal(refit[2], tr) and np.array_equal(refit[3], te)
        assert out[method]["chosen"] == {"lr": 0.03, "hidden": 8, "epochs": 1}
        assert out[method]["validation"] == 0.9
    # PBM trains every grid point (its beta depends on the epochs); NPQ one run per (lr, hidden) at the most epochs
    assert len([c for c in calls if c[0] == "pbm"]) == 4 + 1
    assert [c[1]["epochs"] for c in calls if c[0] == "npq"] == [2, 2, 1]


def test_tiny_configuration_runs_and_returns_the_documented_keys():
    out = pbm_tuned.tuned_cell("iris", 50.0, 0, grid=dict(lr=(0.03,), hidden=(8,), epochs=(1, 2)))
    assert set(out) == {"split", *pbm_tuned.METHODS}
    for method in pbm_tuned.METHODS:
        assert set(out[method]) == set(pbm_tuned.RESULT_KEYS)
        assert 0.0 <= out[method]["accuracy"] <= 1.0
        assert out[method]["auprc"] is None  # iris has 3 classes
    pbm, npq = out["pbm"], out["npq"]
    assert pbm["b"] == 16 and 0 < pbm["beta"] <= 0.25 and pbm["epsilon_spent"] <= 50.0
    assert npq["beta"] is None and math.isinf(npq["epsilon_spent"])


def test_npq_epochs_read_from_a_longer_run_equal_a_shorter_run():
    """The premise of reading NPQ's epochs from one run: the model after epoch 1 of a 2-epoch run is the 1-epoch
    run's (same seed), so its validation accuracy is too."""
    X, y, K = pbm_tuned.load("iris")
    tr, va, _ = split_indices(y, 0)
    p = dict(lr=0.03, hidden=8)
    two = pbm_tuned.fit_score("iris", X, y, K, "npq", {**p, "epochs": 2}, tr, va, 50.0, 5)["accuracy"]
    one = pbm_tuned.fit_score("iris", X, y, K, "npq", {**p, "epochs": 1}, tr, va, 50.0, 5)["accuracy"]
    assert len(two) == 2 and one == two[:1]


def test_beta_for_epsilon_is_the_largest_beta_within_the_target():
    from sqm.mechanism import pbm

    beta = pbm_tuned.beta_for_epsilon(50.0, 16, 4, 16, 5)
    assert pbm.privacy_report(16, beta, 4, 16, 5, 1e-5).epsilon_feature <= 50.0
    assert pbm.privacy_report(16, beta * 1.002, 4, 16, 5, 1e-5).epsilon_feature > 50.0
    assert pbm_tuned.beta_for_epsilon(1e4, 16, 4, 16, 5) == 0.25


@pytest.mark.parametrize("pbm_acc, npq_acc, ok", [(0.90, 0.94, True), (0.89, 0.94, True), (0.95, 0.94, True),
                                                  (0.8899, 0.94, False), (0.80, 0.94, False)])
def test_gap_check(pbm_acc, npq_acc, ok):
    res = pbm_tuned.gap_check(pbm_acc, npq_acc)
    assert res["ok"] is ok
    assert res["gap_points"] == pytest.approx(100 * (npq_acc - pbm_acc), abs=1e-9)


def test_cell_rows_mean_std_min_and_the_check():
    cells = {"pbm": [dict(accuracy=a, epsilon_spent=10.0, chosen={}, beta=0.1) for a in (0.90, 0.92, 0.88)],
             "npq": [dict(accuracy=a, epsilon_spent=math.inf, chosen={}, beta=None) for a in (0.96, 0.97, 0.95)]}
    pbm, npq = pbm_tuned.cell_rows("digits", 100, 10, 50.0, cells)
    assert pbm["accuracy"] == pytest.approx(0.90) and pbm["accuracy_min"] == 0.88
    assert pbm["accuracy_std"] == pytest.approx(0.02) and npq["accuracy_std"] == pytest.approx(0.01)
    assert pbm["gap_points"] == pytest.approx(6.0) and pbm["ok"] is False and "ok" not in npq
