"""bench lr-tuned's protocol: disjoint stratified splits, a choice made from train and validation only, the grid
search's argmax, and a tiny real run."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bench import lr_tuned
from bench.command import parse


def test_split_is_disjoint_stratified_and_covers_every_record():
    y = np.r_[np.zeros(70, int), np.ones(30, int)]
    tr, va, te = lr_tuned.split_indices(y, seed=3)
    assert not set(tr) & set(va) and not set(tr) & set(te) and not set(va) & set(te)
    assert sorted(np.r_[tr, va, te].tolist()) == list(range(100))
    assert (len(tr), len(va), len(te)) == (60, 20, 20)
    assert [int(y[s].sum()) for s in (tr, va, te)] == [18, 6, 6]  # 30% positives in each
    again = lr_tuned.split_indices(y, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((tr, va, te), again, strict=True))


def test_grid_search_picks_the_argmax_of_validation_scores_first_on_ties():
    points = lr_tuned.grid_points(dict(a=(1, 2, 3), b=(10, 20)))
    assert len(points) == 6 and points[0] == dict(a=1, b=10) and points[1] == dict(a=1, b=20)
    table = {(1, 10): 0.5, (1, 20): math.nan, (2, 10): 0.9, (2, 20): 0.7, (3, 10): 0.9, (3, 20): 0.1}
    best, scores = lr_tuned.grid_search(points, lambda p: table[p["a"], p["b"]])
    assert best == dict(a=2, b=10)  # 0.9 first reached there; the NaN never wins
    assert scores[0] == 0.5 and math.isnan(scores[1])


def test_grid_search_breaks_a_tie_at_the_top_by_the_tie_score_only():
    points = lr_tuned.grid_points(dict(a=(1, 2, 3, 4)))
    table = {1: 0.5, 2: 0.9, 3: 0.9, 4: 0.9}
    calls = []

    def again(p):
        calls.append(p["a"])
        return {2: 0.7, 3: 0.8, 4: 0.8}[p["a"]]

    best, _ = lr_tuned.grid_search(points, lambda p: table[p["a"]], again)
    assert best == dict(a=3) and calls == [2, 3, 4]  # only the tied points are scored again; 3 first among 0.8s
    assert lr_tuned.grid_search(points, lambda p: table[p["a"]])[0] == dict(a=2)  # no tie score: the first
    calls.clear()
    assert lr_tuned.grid_search(points, lambda p: p["a"] / 10, again)[0] == dict(a=4) and calls == []  # no tie
    assert lr_tuned.top_tied([0.2, math.nan, 0.3, 0.3]) == [2, 3] and lr_tuned.top_tied([math.nan]) == []


def test_a_points_score_is_the_mean_of_its_fits_that_did_not_fail():
    assert lr_tuned.mean_of_fits([0.5, math.nan, 0.7]) == pytest.approx(0.6)
    assert math.isnan(lr_tuned.mean_of_fits([math.nan, math.nan])) and math.isnan(lr_tuned.mean_of_fits([]))


def test_the_sqm_grids_by_solver():
    assert lr_tuned.solver_grids() == lr_tuned.SQM_GRIDS and lr_tuned.solver_grids(("sgd",)) == (lr_tuned.SQM_SGD_GRID,)
    assert lr_tuned.solver_grids(("moments",)) == (lr_tuned.SQM_GRID,)


def test_finalists_are_the_tied_and_the_best_points_scored_again():
    scores = [0.5, math.nan, 0.9, 0.7, 0.9, 0.8]
    assert lr_tuned.finalists_of(scores) == [2, 4] and lr_tuned.finalists_of(scores, 3) == [2, 4, 5]
    assert lr_tuned.finalists_of([0.3, 0.2, 0.1], 2) == [0, 1] and lr_tuned.finalists_of([0.3, 0.2], 1) == [0]
    assert lr_tuned.finalists_of([math.nan, math.nan], 4) == []
    asked = []

    def again(i):
        asked.append(i)
        return {2: 0.6, 4: 0.6, 5: 0.95, 3: 0.96}[i]

    assert lr_tuned.best_index(scores, again) == 2 and asked == [2, 4]  # 1 finalist: only the tie; 2 first
    asked.clear()
    assert lr_tuned.best_index(scores, again, 3) == 5 and asked == [2, 4, 5]  # the third best wins on its fits
    asked.clear()
    assert lr_tuned.best_index(scores, again, 4) == 3 and asked == [2, 3, 4, 5]
    # equal further scores: the higher first score, then the first
    assert lr_tuned.best_index([0.9, 0.8, 0.9], lambda i: 0.5, 3) == 0
    assert lr_tuned.best_index([0.8, 0.9], lambda i: 0.5, 2) == 1
    assert lr_tuned.best_index([0.1, 0.9], lambda i: math.nan, 2) == 1  # every further fit failed: the first score


def test_run_split_fits_tied_points_again_with_fresh_seeds():
    """Two stub points rank validation perfectly with the first draws' seeds; the tie goes to the one the further
    fits favour, and the result says how many points tied."""
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.5).astype(int)
    X = np.c_[y + rng.normal(0, 0.1, 200), rng.normal(size=200)]
    split = lr_tuned.split_indices(y, 0)
    seen = []

    def fit(Xtr, ytr, p, epsilon, delta, seed):
        seen.append((p["w"], seed))
        flip = p["w"] == 1.0 and len([s for w, s in seen if w == 1.0]) > lr_tuned.SELECT_DRAWS
        return (lambda X: (-1.0 if flip else 1.0) * (X[:, 0] - 0.5)), 1.0

    res = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 0, {"stub": (fit, dict(w=(1.0, 2.0)))},
                             standardize=False)["stub"]
    assert res["tied"] == 2 and res["chosen"] == dict(w=2.0)  # w = 1 broke on its further fits
    tie_seeds = {s for w, s in seen[2 * lr_tuned.SELECT_DRAWS:2 * lr_tuned.SELECT_DRAWS + lr_tuned.TIE_DRAWS]}
    assert len(tie_seeds) == lr_tuned.TIE_DRAWS and not tie_seeds & {s for _, s in seen[:lr_tuned.SELECT_DRAWS]}
    seen.clear()
    untied = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 0, {"stub": (fit, dict(w=(1.0, 2.0)))}, standardize=False,
                                tie_draws=0)["stub"]
    assert untied["tied"] == 2 and untied["chosen"] == dict(w=1.0)  # without further fits: the first


def _stub_fit(Xtr, ytr, p, epsilon, delta, seed):
    """A stub 'method': scores records by p["w"] times their first feature (fitting nothing)."""
    return (lambda X: p["w"] * (X[:, 0] - 0.5)), 1.0


def test_stub_method_gets_the_point_with_the_best_validation_auc():
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.5).astype(int)
    X = np.c_[y + rng.normal(0, 0.5, 200), rng.normal(size=200)]
    split = lr_tuned.split_indices(y, 0)
    res = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 0, {"stub": (_stub_fit, dict(w=(-1.0, 1.0)))},
                             standardize=False)["stub"]
    assert res["chosen"] == dict(w=1.0)  # feature 0 rises with the label: +1 ranks validation records right
    assert res["validation"] > 0.8 and res["auc"] > 0.8


def test_choice_does_not_change_when_test_labels_are_permuted():
    """The real methods (DPSGD and SQM-LR, tiny grids) choose the same points when the test split's labels are
    shuffled: the choice sees train and validation only."""
    pytest.importorskip("opacus")
    X, y = lr_tuned.load("breast_cancer")
    split = lr_tuned.split_indices(y, 1)
    methods = {"dpsgd": (lr_tuned.fit_dpsgd, dict(batch=(64,), epochs=(1,), learning_rate=(0.5, 8.0), clip=(1.0,))),
               "sqm-tuned": (lr_tuned.fit_sqm, dict(constant=(0.35, 1.0), label_weight=(0.5, 1.0),
                                                    gamma=(8192.0,)))}
    a = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 5, methods)
    y2 = y.copy()
    te = split[2]
    y2[te] = np.random.default_rng(9).permutation(y[te])
    assert not np.array_equal(y2, y)
    b = lr_tuned.run_split(X, y2, split, 1.0, 1e-5, 5, methods)
    for m in methods:
        assert a[m]["chosen"] == b[m]["chosen"] and a[m]["validation"] == b[m]["validation"]
    assert a["dpsgd"]["auc"] != b["dpsgd"]["auc"]  # the test score itself does see the permuted labels


@pytest.mark.slow
def test_tiny_real_run_prints_and_writes_json(tmp_path, capsys):
    pytest.importorskip("opacus")
    out = tmp_path / "t.json"
    args = parse(["lr-tuned", "--datasets", "breast_cancer", "--runs", "1", "-q", "--json", str(out)])
    assert args.func(args) == 0
    import json

    doc = json.loads(out.read_text())
    rows = doc["details"]["rows"]
    assert {r["method"] for r in rows} == set(lr_tuned.METHODS)
    assert "not counted" in doc["details"]["protocol"]
    dp = next(r for r in rows if r["method"] == "dpsgd")
    assert set(dp["chosen"][0]) == set(lr_tuned.DPSGD_GRID) and dp["epsilon_spent"] <= 1.0 + 1e-9
    assert "not counted" in capsys.readouterr().out


def test_tuned_sqm_at_the_default_constants_is_the_estimator_bit_for_bit():
    """The bench's SQM-LR fit (the release with c, kappa, gamma given) at the defaults is the estimator's own
    moments solver."""
    from sqm.apps.logreg.estimator import SQMLogisticRegression
    from sqm.apps.logreg.moments import CONSTANT, LABEL_WEIGHT

    X, y = lr_tuned.load("breast_cancer")
    tr, _, te = lr_tuned.split_indices(y, 2)
    from sqm.apps.logreg.experiment import standardized_unit_rows

    Xtr, Xte = standardized_unit_rows(X[tr], X[te])
    p = dict(constant=CONSTANT, label_weight=LABEL_WEIGHT, gamma=8192.0)
    ours, eps = lr_tuned.fit_sqm(Xtr, y[tr], p, 1.0, 1e-5, seed=11)
    m = SQMLogisticRegression(1.0, 1e-5, backend="in-process", seed=11, solver="moments").fit(Xtr, y[tr])
    assert np.array_equal(ours(Xte), m.decision_function(Xte)) and eps == m.report_.epsilon_server <= 1.0


def test_the_threshold_is_the_validation_accuracy_argmax_closest_to_zero():
    y = np.array([0, 0, 0, 1, 1])
    assert lr_tuned.validation_threshold(y, [-3.0, 1.0, 2.0, 5.0, 6.0]) == 3.5  # 2 < t < 5 separates them all
    assert lr_tuned.validation_threshold([0, 1], [-1.0, 1.0]) == 0.0  # every t in (-1, 1) ties: 0
    assert lr_tuned.validation_threshold([1, 1, 1], [-5.0, -4.0, -3.0]) == -6.0  # below every score
    assert lr_tuned.validation_threshold([0, 1], [2.0, 2.0]) == 0.0  # no threshold separates equal scores


def test_the_widest_threshold_is_the_middle_of_the_widest_most_accurate_interval():
    assert lr_tuned.widest_threshold([0, 0, 1, 1], [-3.0, 1.0, 2.0, 5.0]) == 1.5  # (1, 2) separates them all
    assert lr_tuned.validation_threshold([0, 1], [-1.0, 1.0]) == 0.0
    assert lr_tuned.widest_threshold([0, 1], [-1.0, 3.0]) == 1.0  # the middle of (-1, 3), not 0
    # two most accurate intervals, (0, 1) and (4, 10): the wider wins
    assert lr_tuned.widest_threshold([0, 1, 0, 1], [0.0, 1.0, 4.0, 10.0]) == 7.0
    assert lr_tuned.widest_threshold([1, 1, 1], [-5.0, -4.0, -3.0]) == -5.5  # below every score, 1 beyond
    assert lr_tuned.widest_threshold([0, 1], [math.nan, math.nan]) == 0.0


def test_the_reported_accuracy_uses_the_validation_threshold_only():
    """A stub whose scores are shifted by 10: at threshold 0 it predicts one class everywhere; the threshold chosen
    on validation recovers its accuracy, and permuting the test labels does not move the threshold."""
    rng = np.random.default_rng(1)
    y = (rng.random(300) < 0.4).astype(int)
    X = np.c_[y + rng.normal(0, 0.3, 300)]

    def shifted(Xtr, ytr, p, epsilon, delta, seed):
        return (lambda X: X[:, 0] - 0.5 + 10.0), 1.0

    split = lr_tuned.split_indices(y, 0)
    res = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 0, {"stub": (shifted, None)}, standardize=False)["stub"]
    assert res["accuracy_at_zero"] == pytest.approx(float(np.mean(y[split[2]] == 1)))
    assert res["accuracy"] > 0.9 and 9.0 < res["threshold"] < 11.0
    y2 = y.copy()
    y2[split[2]] = rng.permutation(y[split[2]])
    again = lr_tuned.run_split(X, y2, split, 1.0, 1e-5, 0, {"stub": (shifted, None)}, standardize=False)["stub"]
    assert again["threshold"] == res["threshold"]


def test_the_sqm_row_scale_is_applied_before_the_release_and_at_prediction():
    """SQM-LR's clip-norm counterpart: the fit at row scale 2 is the fit of the doubled rows at scale 1, bit for
    bit (same seed), and it predicts the doubled test rows; the clients clip the doubled rows that leave the bound."""
    X, y = lr_tuned.load("iris")
    tr, _, te = lr_tuned.split_indices(y, 0)
    from sqm.apps.logreg.experiment import standardized_unit_rows

    Xtr, Xte = standardized_unit_rows(X[tr], X[te])
    p = dict(constant=0.7, label_weight=0.7, gamma=8192.0)
    scaled, _ = lr_tuned.fit_sqm(Xtr, y[tr], dict(p, row_scale=2.0), 1.0, 1e-5, seed=3)
    doubled, _ = lr_tuned.fit_sqm(2.0 * Xtr, y[tr], p, 1.0, 1e-5, seed=3)
    plain, _ = lr_tuned.fit_sqm(Xtr, y[tr], p, 1.0, 1e-5, seed=3)
    assert np.array_equal(scaled(Xte), doubled(2.0 * Xte)) and not np.array_equal(scaled(Xte), plain(Xte))


def test_the_dpsgd_row_scale_is_the_same_axis_and_scales_the_rows_before_the_constant_column():
    """Every method is offered the same row scales; DPSGD at row scale 4 is DPSGD on the rows times 4 (the constant
    column still 1), bit for bit with the same seed, and differs from the unscaled fit."""
    import numpy as np

    assert lr_tuned.DPSGD_GRID["row_scale"] == lr_tuned.SQM_GRID["row_scale"] == lr_tuned.ROW_SCALES
    assert lr_tuned.SQM_SGD_GRID["row_scale"] == lr_tuned.ROW_SCALES
    X, y = lr_tuned.load("iris")
    tr, _, te = lr_tuned.split_indices(y, 0)
    from sqm.apps.logreg.experiment import standardized_unit_rows

    Xtr, Xte = standardized_unit_rows(X[tr], X[te])
    p = dict(batch=64, epochs=2, learning_rate=0.5, clip=0.5)
    scaled, _ = lr_tuned.fit_dpsgd(Xtr, y[tr], dict(p, row_scale=4.0), 1.0, 1e-5, seed=3)
    times4, _ = lr_tuned.fit_dpsgd(4.0 * Xtr, y[tr], p, 1.0, 1e-5, seed=3)
    plain, _ = lr_tuned.fit_dpsgd(Xtr, y[tr], p, 1.0, 1e-5, seed=3)
    assert np.array_equal(scaled(Xte), times4(4.0 * Xte)) and not np.array_equal(scaled(Xte), plain(Xte))


def test_the_sqm_grids_first_point_is_the_estimators_defaults():
    """grid_search keeps the first point on ties that outlast the further fits, so the tuned SQM-LR falls back on
    its defaults when a small validation split ranks several points alike: the grid's first point is the estimator's
    defaults (row scale 1: the rows as given), the moments release's where ``solver="auto"`` runs it and its one
    sgd round's where auto runs that (only the sgd grid is offered there)."""
    from sqm.apps.logreg import moments, texts
    from sqm.apps.logreg.estimator import auto_solver
    from sqm.apps.logreg.params import LogRegParams

    grids = lr_tuned.METHODS["sqm-tuned"][1]
    assert callable(grids) and auto_solver(341, 30, 0.5)[0] == "moments" and auto_solver(106, 13, 0.5)[0] == "sgd"
    first = lr_tuned.grid_points(grids(341, 30, 0.5))[0]
    assert first == dict(constant=moments.CONSTANT, label_weight=moments.LABEL_WEIGHT, gamma=LogRegParams().gamma,
                         score_weight=moments.SCORE_WEIGHT, ridge_multiple=moments.RIDGE_NOISE_MULTIPLE, row_scale=1.0)
    assert grids(341, 30, 0.5) == lr_tuned.SQM_GRIDS and grids(106, 13, 0.5) == (lr_tuned.SQM_SGD_GRID,)
    first = lr_tuned.grid_points(grids(106, 13, 0.5))[0]
    assert first == dict(solver="sgd", **texts.AUTO_ROUND, row_scale=1.0, intercept_scaling=1.0)
    assert len(lr_tuned.grid_points(lr_tuned.SQM_GRID)) == 288 and len(lr_tuned.grid_points(lr_tuned.SQM_GRIDS)) == 320


def test_run_split_offers_a_grid_of_the_cells_public_quantities():
    """A method's grid given as a function gets the training rows, the feature columns and epsilon."""
    rng = np.random.default_rng(0)
    y = (rng.random(100) < 0.5).astype(int)
    X = np.c_[y + rng.normal(0, 0.5, 100), rng.normal(size=100), rng.normal(size=100)]
    asked = []

    def grid(n, d, epsilon):
        asked.append((n, d, epsilon))
        return dict(w=(-1.0, 1.0))

    res = lr_tuned.run_split(X, y, lr_tuned.split_indices(y, 0), 0.7, 1e-5, 0, {"stub": (_stub_fit, grid)},
                             standardize=False)["stub"]
    assert asked == [(60, 3, 0.7)] and res["chosen"] == dict(w=1.0)


def test_an_sgd_grid_point_is_the_estimators_sgd_solver_on_scaled_rows():
    """The grid's sgd points run SQMLogisticRegression's sgd solver itself (same seed: the same scores) on the rows
    times the row scale; one full-batch round spends the whole epsilon."""
    from sqm.apps.logreg import SQMLogisticRegression

    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 5)) * 0.15
    y = (X @ np.arange(1, 6) + 0.3 * rng.normal(size=120) > 0).astype(int)
    p = dict(solver="sgd", q=1.0, epochs=1, learning_rate=1.0, weight_bound=0.1, row_scale=2.0)
    f, eps = lr_tuned.fit_sqm(X, y, p, 1.0, 1e-5, seed=9)
    m = SQMLogisticRegression(1.0, 1e-5, sampling_rate=1.0, epochs=1, learning_rate=1.0, weight_bound=0.1,
                              backend="plain", n_parties=3, seed=9, solver="sgd").fit(2.0 * X, y)
    assert np.array_equal(f(X), m.decision_function(2.0 * X)) and 0.99 < eps <= 1.0
    assert lr_tuned.grid_points((dict(a=(1, 2)), dict(b=(3,)))) == [dict(a=1), dict(a=2), dict(b=3)]


def test_a_kept_release_fits_exactly_as_a_fresh_one():
    """Grid points that differ only in the fit's ridge multiple post-process one kept release: every score equals
    the fresh release's (same seed), and a point with another row scale or gamma is released anew."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 6)) * 0.2
    y = (X @ np.arange(1, 7) + rng.normal(size=300) > 0).astype(int)
    base = dict(constant=0.5, label_weight=0.5, gamma=1024.0, score_weight=1.5, row_scale=2.0)
    points = [dict(base, ridge_multiple=m) for m in (4.0, 16.0)] + [dict(base, ridge_multiple=4.0, row_scale=1.0)]

    def scores(kept):
        lr_tuned._RELEASES.clear()
        old, lr_tuned.RELEASES_KEPT = lr_tuned.RELEASES_KEPT, kept
        try:
            out = []
            for p in points:
                f, spent = lr_tuned.fit_sqm(X, y, p, 1.0, 1e-5, seed=7)
                out.append((f(X).tolist(), spent))
            return out, len(lr_tuned._RELEASES)
        finally:
            lr_tuned.RELEASES_KEPT = old
            lr_tuned._RELEASES.clear()

    fresh, none_kept = scores(0)
    kept, releases = scores(8)
    assert fresh == kept and none_kept == 0 and releases == 2  # two releases for three points
    assert fresh[0][0] != fresh[1][0] and fresh[0][0] != fresh[2][0]  # the knobs do change the fit


def test_each_point_is_scored_by_its_mean_over_draws():
    """A point that ranks validation perfectly on its first draw and inverted on the others (a lucky draw) wins a
    one-draw choice and loses to a steady point over three draws; the steady point's score is its mean."""
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.5).astype(int)
    X = np.c_[y + rng.normal(0, 0.5, 200), rng.normal(size=200)]
    split = lr_tuned.split_indices(y, 0)
    first: dict = {}

    def fit(Xtr, ytr, p, epsilon, delta, seed):
        if p["kind"] == "lucky":
            sign = 1.0 if first.setdefault("seed", seed) == seed else -1.0
            return (lambda X: sign * (X[:, 0] - 0.5)), 1.0
        return (lambda X: (X[:, 0] - 0.5) + X[:, 1]), 1.0  # a noisier direction, the same every draw

    methods = {"stub": (fit, dict(kind=("lucky", "steady")))}
    one = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 0, methods, standardize=False, draws=1)["stub"]
    first.clear()
    three = lr_tuned.run_split(X, y, split, 1.0, 1e-5, 0, methods, standardize=False, draws=3)["stub"]
    assert one["chosen"] == dict(kind="lucky") and three["chosen"] == dict(kind="steady")
    assert 0.5 < three["validation"] < one["validation"]
