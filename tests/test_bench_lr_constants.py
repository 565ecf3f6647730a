"""bench lr-constants: the moments constants are chosen from the tuning sets' training and validation parts only,
by the argmax of the mean validation AUC; a tiny real run prints and writes its choice."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bench import lr_constants, lr_tuned
from bench.command import parse


def _marked_set(n: int = 60, d: int = 3, seed: int = 0):
    """Records whose first column is their index; labels alternate (both classes in every part)."""
    rng = np.random.default_rng(seed)
    X = np.c_[np.arange(n, dtype=np.float64), rng.normal(size=(n, d - 1))]
    y = (np.arange(n) % 2).astype(np.int64)
    return X, y


def test_only_training_and_validation_rows_reach_the_fit_and_the_score(monkeypatch):
    """The split is monkeypatched to known parts; the test part's rows are NaN and its labels 7: the fit sees
    exactly the training part's labels, the scorer exactly the validation part's rows, and nothing is NaN."""
    X, y = _marked_set()
    tr, va, te = np.arange(0, 36), np.arange(36, 48), np.arange(48, 60)
    X[te] = np.nan
    y = y.copy()
    y[te] = 7
    monkeypatch.setattr(lr_tuned, "split_indices", lambda labels, seed: (tr, va, te))
    seen: dict[str, list] = {"train_labels": [], "train_rows": [], "scored_rows": []}

    def fit(Xtr, ytr, p, epsilon, delta, seed):
        seen["train_labels"].append(np.asarray(ytr).copy())
        seen["train_rows"].append(np.asarray(Xtr).copy())

        def predict(Xs):
            seen["scored_rows"].append(np.asarray(Xs).copy())
            return p["constant"] * np.asarray(Xs)[:, 1]
        return predict, 1.0

    points = lr_tuned.grid_points(dict(constant=(-1.0, 1.0), label_weight=(0.7,), score_weight=(1.5,),
                                       floor_share=(0.5,)))
    scores = lr_constants.score_grid({"set": (X, y)}, points, (1.0,), splits=2, seeds=2, fit=fit)
    assert scores.shape == (2, 1, 1, 2, 2, 2) and np.all(np.isfinite(scores))
    assert len(seen["train_labels"]) == 2 * 2 * 2  # points x splits x seeds
    for labels, rows in zip(seen["train_labels"], seen["train_rows"], strict=True):
        assert np.array_equal(labels, y[tr]) and rows.shape == (36, 3) and np.all(np.isfinite(rows))
    for rows in seen["scored_rows"]:
        assert rows.shape == (12, 3) and np.all(np.isfinite(rows))
    # the rows are standardized with the training part's statistics only: the training rows' first column (their
    # index) has mean 0, and the validation rows (indices 36..47) all lie above the training rows' maximum
    assert abs(float(seen["train_rows"][0][:, 0].mean())) < 1e-12
    assert seen["scored_rows"][0][:, 0].min() > seen["train_rows"][0][:, 0].max()


def test_the_choice_is_the_argmax_of_the_mean_validation_auc():
    """A stub fit whose direction is the point's sign on a feature that rises with the label: the positive point
    wins, and its mean AUC is the mean over sets, epsilons, splits and seeds."""
    rng = np.random.default_rng(1)
    y = (rng.random(300) < 0.4).astype(np.int64)
    X = np.c_[y + rng.normal(0, 0.7, 300), rng.normal(size=300)]

    def fit(Xtr, ytr, p, epsilon, delta, seed):
        return (lambda Xs: p["constant"] * Xs[:, 0]), 1.0

    points = lr_tuned.grid_points(dict(constant=(-1.0, 0.5, 1.0), label_weight=(0.7,), score_weight=(1.5,),
                                       floor_share=(0.5,)))
    scores = lr_constants.score_grid({"a": (X, y), "b": (X[::-1], y[::-1])}, points, (1.0, 4.0), 2, 1, fit=fit)
    best, means = lr_constants.choose(points, scores)
    assert best == points[1]  # 0.5 and 1 rank alike (the same AUC): the first in the grid's order wins
    assert means[0] < 0.3 < 0.7 < means[1] == means[2]
    assert means[1] == float(np.mean(scores[1, ..., 0]))  # the AUC's mean (the accuracy is the last axis' 1)


def test_a_set_outside_the_tuning_sets_is_refused():
    from sqm.errors import UsageError

    with pytest.raises(UsageError, match="phishing: not a tuning set .* held out from every choice"):
        lr_constants.run(datasets=("breast_cancer", "phishing"))


def test_tiny_real_run_prints_the_choice_and_writes_json(tmp_path, capsys):
    out = tmp_path / "c.json"
    args = parse(["lr-constants", "--datasets", "breast_cancer", "--epsilons", "4", "--splits", "1", "--seeds", "1",
                  "--json", str(out), "-q"])
    small = dict(constant=(0.7, 1.0), label_weight=(0.7,), score_weight=(1.5,), ridge_multiple=(1.0,))
    rep = lr_constants.run(("breast_cancer",), (4.0,), 1, 1, grid=small, floor_shares=(0.5, 1.0), progress=False)
    assert len(rep["rows"]) == 2 and len(rep["floor_rows"]) == 2
    assert {k: v for k, v in rep["chosen"].items() if k != "floor_share"} in lr_tuned.grid_points(small)
    assert rep["chosen"]["floor_share"] in (0.5, 1.0)
    assert rep["defaults"] == lr_constants.current_defaults()
    assert rep["rows"][0]["validation_auc"] >= rep["rows"][1]["validation_auc"]
    lr_constants.print_table(rep)
    text = capsys.readouterr().out
    assert "chosen: constant" in text and "test parts never read" in text
    from bench.common import finish

    finish(rep, args)
    doc = json.loads(out.read_text())
    assert doc["details"]["chosen"] == rep["chosen"] and doc["details"]["datasets"] == ["breast_cancer"]


def test_choose_reads_the_named_score_only():
    """choose(by="accuracy") ranks by the last axis' accuracy, choose(by="auc") by its AUC."""
    points = [dict(floor_share=0.1), dict(floor_share=1.0)]
    scores = np.zeros((2, 1, 1, 1, 1, 2))
    scores[0, ..., 0], scores[1, ..., 0] = 0.9, 0.8  # AUC
    scores[0, ..., 1], scores[1, ..., 1] = 0.6, 0.7  # accuracy of the model's own decision
    assert lr_constants.choose(points, scores)[0] == points[0]
    assert lr_constants.choose(points, scores, "accuracy") == (points[1], [0.6, 0.7])
