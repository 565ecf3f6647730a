"""bench/pbm_tuned.py: the tuning never sees a test record, the choice is the validation argmax, a tiny
configuration runs end to end with the documented keys, PBM's beta holds the stated epsilon, a scored record is
released exactly once at the scoring release (which holds the same epsilon), and the 5-point check's pass/fail."""
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
        return dict(accuracy=acc, auprc=None, b=16, beta=0.1, score_b=32, score_beta=0.2, epsilon_spent=1.0,
                    epsilon_sample=9.0)

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
        # PBM-VFL's b is a grid dimension of its own; ties go to the first point (b 16)
        assert out[method]["chosen"] == {"lr": 0.03, "hidden": 8, "epochs": 1, **({"b": 16} if method == "pbm" else {})}
        assert out[method]["validation"] == 0.9
    # PBM trains every grid point (its beta depends on b and the epochs); NPQ one run per (lr, hidden) at the most
    # epochs
    pbm_calls = [c for c in calls if c[0] == "pbm"]
    assert len(pbm_calls) == 8 + 1 and {c[1]["b"] for c in pbm_calls} == set(pbm_tuned.PBM_B)
    assert [c[1]["epochs"] for c in calls if c[0] == "npq"] == [2, 2, 1]


@pytest.mark.slow  # the scoring release's accounting at b 64
def test_tiny_configuration_runs_and_returns_the_documented_keys():
    from sqm.mechanism import pbm as mech

    out = pbm_tuned.tuned_cell("iris", 50.0, 0, grid=dict(lr=(0.03,), hidden=(8,), epochs=(1, 2)), pbm_b=(16,))
    assert set(out) == {"split", *pbm_tuned.METHODS}
    for method in pbm_tuned.METHODS:
        assert set(out[method]) == set(pbm_tuned.RESULT_KEYS)
        assert 0.0 <= out[method]["accuracy"] <= 1.0
        assert out[method]["auprc"] is None  # iris has 3 classes
    pbm, npq = out["pbm"], out["npq"]
    assert pbm["b"] == 16 and 0 < pbm["beta"] <= 0.25 and pbm["epsilon_spent"] <= 50.0
    assert (pbm["score_b"], pbm["score_beta"]) == pbm_tuned.score_release(50.0, 2, pbm_tuned.EMBEDDING_SIZE)
    # the larger of the training records' and the scored records' epsilons, both levels
    train = mech.privacy_report(16, pbm["beta"], 2, 16, pbm["chosen"]["epochs"], 1e-5)
    scored = mech.privacy_report(pbm["score_b"], pbm["score_beta"], 2, 16, 1, 1e-5)
    assert pbm["epsilon_spent"] == max(train.epsilon_feature, scored.epsilon_feature)
    assert pbm["epsilon_sample"] == max(train.epsilon_sample, scored.epsilon_sample) > pbm["epsilon_spent"]
    assert npq["beta"] is None and npq["score_b"] is None and math.isinf(npq["epsilon_spent"])


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


@pytest.mark.slow  # the scoring release's accounting at b 64
def test_a_scored_record_is_released_once_at_the_scoring_release_and_never_while_training(monkeypatch):
    """PBM-VFL's fit_score: every message a client sends about a scored (eval) record comes from the one
    prediction, at score_release's (b, beta), and covers each scored record exactly once; training messages carry
    training records only, at the training (b, beta)."""
    from sqm.apps.pbm_vfl.party import ClientParty

    sent = []
    message = ClientParty.message

    def spy(self, split, idx, epoch, step, train=True):
        sent.append((split, np.array(idx), self.cfg.b, self.cfg.beta, train))
        return message(self, split, idx, epoch, step, train)

    monkeypatch.setattr(ClientParty, "message", spy)
    X, y, K = pbm_tuned.load("breast_cancer")
    tr, va, _ = split_indices(y, 1)
    r = pbm_tuned.fit_score("breast_cancer", X, y, K, "pbm", dict(lr=0.01, hidden=8, epochs=2, b=16), tr, va,
                            30.0, 7)
    M = pbm_tuned.PARTIES["breast_cancer"]
    sb, sbeta = pbm_tuned.score_release(30.0, M, pbm_tuned.EMBEDDING_SIZE)
    assert (r["score_b"], r["score_beta"]) == (sb, sbeta) and r["b"] == 16 and 0.0 <= r["accuracy"][0] <= 1.0
    assert r["auprc"] is not None  # a binary set
    scored = [s for s in sent if s[0] == "test"]
    trained = [s for s in sent if s[0] == "train"]
    assert all(not s[4] and (s[2], s[3]) == (sb, sbeta) for s in scored)
    assert all(s[4] and (s[2], s[3]) == (16, r["beta"]) for s in trained)
    # each client released each scored record once; each training record once per epoch
    assert sorted(np.concatenate([s[1] for s in scored])) == sorted(list(range(len(va))) * M)
    assert sorted(np.concatenate([s[1] for s in trained])) == sorted(list(range(len(tr))) * M * 2)


@pytest.mark.slow  # the scoring release's accounting at b 64
def test_score_release_holds_the_epsilon_with_the_smallest_variance_bound():
    from sqm.mechanism import pbm

    b, beta = pbm_tuned.score_release(50.0, 4, 16)
    assert b in pbm_tuned.SCORE_B
    assert pbm.privacy_report(b, beta, 4, 16, 1, 1e-5).epsilon_feature <= 50.0
    for other in pbm_tuned.SCORE_B:
        ob = pbm_tuned.beta_for_epsilon(50.0, other, 4, 16, 1)
        assert pbm.variance_bound(b, beta, 4) <= pbm.variance_bound(other, ob, 4)
    # one release at the same per-record epsilon is far less noisy than each of 5 training releases
    assert pbm.variance_bound(b, beta, 4) < 0.5 * pbm.variance_bound(16, pbm_tuned.beta_for_epsilon(50.0, 16, 4, 16, 5),
                                                                     4)


@pytest.mark.parametrize("pbm_acc, npq_acc, ok", [(0.90, 0.94, True), (0.89, 0.94, True), (0.95, 0.94, True),
                                                  (0.8899, 0.94, False), (0.80, 0.94, False)])
def test_gap_check(pbm_acc, npq_acc, ok):
    res = pbm_tuned.gap_check(pbm_acc, npq_acc)
    assert res["ok"] is ok
    assert res["gap_points"] == pytest.approx(100 * (npq_acc - pbm_acc), abs=1e-9)


def test_cell_rows_mean_std_min_and_the_check():
    cells = {"pbm": [dict(accuracy=a, epsilon_spent=e, epsilon_sample=9 * e, chosen={}, beta=0.1, score_b=32,
                          score_beta=0.2) for a, e in ((0.90, 10.0), (0.92, 12.0), (0.88, 11.0))],
             "npq": [dict(accuracy=a, epsilon_spent=math.inf, epsilon_sample=math.inf, chosen={}, beta=None,
                          score_b=None, score_beta=None) for a in (0.96, 0.97, 0.95)]}
    pbm, npq = pbm_tuned.cell_rows("digits", 100, 10, 50.0, cells)
    assert pbm["accuracy"] == pytest.approx(0.90) and pbm["accuracy_min"] == 0.88
    assert pbm["accuracy_std"] == pytest.approx(0.02) and npq["accuracy_std"] == pytest.approx(0.01)
    assert pbm["gap_points"] == pytest.approx(6.0) and pbm["ok"] is False and "ok" not in npq
    assert pbm["epsilon_spent"] == 12.0 and pbm["epsilon_sample"] == 108.0 and pbm["score"] == [(32, 0.2)] * 3
