"""bench lr-select: the tuning sets only (a held-out set refused), the report's structure, the rules' scores, the
grid subset, and the same numbers twice for a seeded configuration."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench import lr_select, lr_tuned
from bench.command import build_parser, parse
from sqm.errors import UsageError


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    args = parse(["lr-select", "--datasets", "breast_cancer", "--records", "60", "600", "--epsilons", "1",
                  "--draws", "2", "-q", "--json", str(out), *extra])
    assert args.func(args) == 0
    return json.loads(out.read_text())


def test_held_out_sets_are_refused_and_the_help_says_so(tmp_path):
    assert lr_select.TUNING_SETS == ("breast_cancer", "credit_default", "adult")
    for study in ("solvers", "select", "rowscale"):
        args = parse(["lr-select", "--study", study, "--datasets", "breast_cancer", "phishing", "-q"])
        with pytest.raises(UsageError, match="tuning sets only .*: phishing is held out"):
            args.func(args)
    sub = build_parser()._subparsers._group_actions[0].choices["lr-select"]  # type: ignore[union-attr]
    assert "held-out sets are refused" in " ".join(sub.format_help().split())


def test_solvers_study_report(tmp_path, capsys):
    doc = _run(tmp_path, "s.json", "--study", "solvers", "--methods", "moments", "sgd1")
    rep = doc["details"]
    assert doc["command"] == "bench lr-select" and rep["study"] == "solvers"
    rows = rep["rows"]
    assert [r["method"] for r in rows] == ["moments", "sgd1"]
    from sqm.apps.logreg.estimator import auto_solver

    for r in rows:
        assert (r["dataset"], r["records"], r["d"], r["epsilon"], r["draws"]) == ("breast_cancer", 60, 30, 1.0, 2)
        assert len(r["values"]) == 2 and all(0.0 <= v <= 1.0 for v in r["values"])
        assert r["auc"] == pytest.approx(np.mean(r["values"])) and r["auc_min"] == min(r["values"])
        assert r["auto"] == auto_solver(36, 30, 1.0)[0]  # the training rows: 60% of the subsample
        assert len(r["accuracies"]) == 2 and r["accuracy"] == pytest.approx(np.mean(r["accuracies"]))
        assert r["majority"] == pytest.approx(1 - 212 / 569)  # breast_cancer: 357 of 569 in the larger class
    # 600 records: not below breast_cancer's 569, nothing left outside the subsample to score on
    assert rep["skipped"] == [dict(dataset="breast_cancer", records=600, epsilon=1.0, reason="569 records in all")]
    assert "skipped breast_cancer n 600" in capsys.readouterr().out


def test_solvers_study_on_a_feature_subset(tmp_path):
    """--features: each draw's columns drawn at random (the same for every method), d and auto from that many."""
    cols = [lr_select.feature_subset(30, 4, s) for s in (0, 1)]
    assert all(len(c) == 4 and list(c) == sorted(set(c)) and c.max() < 30 for c in cols)
    assert not np.array_equal(cols[0], cols[1]) and np.array_equal(cols[0], lr_select.feature_subset(30, 4, 0))
    assert list(lr_select.feature_subset(30, None, 0)) == list(range(30)) == list(lr_select.feature_subset(30, 40, 0))
    doc = _run(tmp_path, "f.json", "--study", "solvers", "--methods", "moments", "sgd1", "--features", "4")
    rep = doc["details"]
    from sqm.apps.logreg.estimator import auto_solver

    assert rep["features"] == 4 and [r["d"] for r in rep["rows"]] == [4, 4]
    assert all(r["auto"] == auto_solver(36, 4, 1.0)[0] for r in rep["rows"])
    whole = _run(tmp_path, "w.json", "--study", "solvers", "--methods", "moments", "sgd1")["details"]
    assert [r["values"] for r in rep["rows"]] != [r["values"] for r in whole["rows"]]


def test_select_study_offers_the_grids_of_the_solvers_named():
    sizes = {s: len(lr_tuned.grid_points(lr_select.solver_grids(s))) for s in (("sgd",), ("moments",))}
    assert sizes == {("sgd",): 32, ("moments",): 288}
    assert lr_select.solver_grids() == lr_tuned.SQM_GRIDS
    assert lr_tuned.grid_points(lr_select.solver_grids(("sgd",))) == lr_tuned.grid_points(lr_tuned.SQM_GRIDS)[288:]


def test_select_study_report_and_the_same_numbers_twice(tmp_path):
    extra = ("--study", "select", "--fits", "2", "--rules", "one", "mean", "--max-points", "4")
    a, b = _run(tmp_path, "a.json", *extra), _run(tmp_path, "b.json", *extra)
    keep = lr_select.grid_subset(lr_tuned.grid_points(lr_tuned.SQM_GRIDS), 4)
    rows = a["details"]["rows"]
    assert [r["rule"] for r in rows] == ["one", "mean"]
    for r in rows:
        assert r["fits"] == 2 and len(r["values"]) == 2 and set(r["chosen"]) <= set(keep)
    # seeded: the same figures and choices, bit for bit
    assert [(r["values"], r["chosen"]) for r in rows] == [(r["values"], r["chosen"]) for r in b["details"]["rows"]]


def test_select_study_orients_each_refit_on_its_validation_auc(tmp_path):
    """--orient: each rule's row is followed by the same refits with the scores of those whose own validation AUC
    is below 1/2 negated (test AUC a -> 1 - a), counted in ``turned``; the rule's own row is unchanged."""
    extra = ("--study", "select", "--fits", "1", "--rules", "one", "--max-points", "4")
    plain = _run(tmp_path, "p.json", *extra)["details"]["rows"]
    rows = _run(tmp_path, "o.json", *extra, "--orient")["details"]["rows"]
    assert [r["rule"] for r in rows] == ["one", "one oriented"]
    base, turned = rows
    assert base["values"] == plain[0]["values"] and len(base["validation"]) == 2
    want = [1.0 - a if v < 0.5 else a for a, v in zip(base["values"], base["validation"], strict=True)]
    assert turned["values"] == want and turned["turned"] == sum(v < 0.5 for v in base["validation"])
    assert turned["auc"] == pytest.approx(np.mean(want))


def test_select_study_chooses_dpsgd_by_each_rule_too(tmp_path, monkeypatch):
    """--dpsgd-rules: a row "dpsgd RULE" per rule, DPSGD's grid scored by as many fits per point with SQM-LR's
    seeds and chosen by that rule.  A stand-in DPSGD whose second point scores the records along a direction and
    whose first against it (along it only for a seed divisible by 3), so every rule chooses the second."""
    calls = []

    def fake(Xtr, ytr, p, epsilon, delta, seed):
        calls.append((p["batch"], seed))
        w = np.linalg.lstsq(np.c_[Xtr, np.ones(len(Xtr))], 2.0 * ytr - 1.0, rcond=None)[0][:-1]
        sign = 1.0 if p["batch"] == 2 else (-1.0 if seed % 3 else 1.0)
        return (lambda X: sign * (X @ w)), epsilon

    monkeypatch.setattr(lr_tuned, "DPSGD_GRID", dict(batch=(1, 2), epochs=(1,), learning_rate=(1.0,), clip=(1.0,),
                                                     row_scale=(1.0,)))
    monkeypatch.setattr(lr_tuned, "fit_dpsgd", fake)
    extra = ("--study", "select", "--fits", "2", "--rules", "mean3", "min3", "--max-points", "2", "--dpsgd-rules")
    rows = _run(tmp_path, "d.json", *extra)["details"]["rows"]
    assert [r["rule"] for r in rows] == ["mean3", "min3", "dpsgd mean3", "dpsgd min3"]
    for r in rows[2:]:
        assert r["chosen"] == [1, 1] and len(r["values"]) == 2 and all(v > 0.5 for v in r["values"])
    # per draw: both points with the first 2 seeds, then one refit of the choice (shared by the rules)
    assert len(calls) == 2 * (2 * 2 + 1)
    assert [b for b, _ in calls[:4]] == [1, 1, 2, 2] and calls[0][1] != calls[1][1] and calls[4][0] == 2


def test_grid_subset_spreads_over_the_grid_both_solvers_included():
    points = lr_tuned.grid_points(lr_tuned.SQM_GRIDS)
    keep = lr_select.grid_subset(points, 4)
    assert keep[0] == 0 and keep[-1] == len(points) - 1 and len(keep) == 4
    assert {points[i].get("solver", "moments") for i in keep} == {"moments", "sgd"}
    assert lr_select.grid_subset(points, None) == lr_select.grid_subset(points, 10 ** 6) == list(range(len(points)))
    with pytest.raises(UsageError, match="--max-points must be >= 1"):
        lr_select.grid_subset(points, 0)


def test_rule_scores():
    v = np.array([[0.9, 0.1, 0.2, 0.5], [0.6, 0.6, 0.6, math.nan], [math.nan, 0.7, 0.8, 0.9]])
    assert lr_select.rule_scores("one", v).tolist()[:2] == [0.9, 0.6]
    assert np.allclose(lr_select.rule_scores("mean3", v), [0.4, 0.6, 0.75])
    assert np.allclose(lr_select.rule_scores("min3", v), [0.1, 0.6, 0.7])
    assert np.allclose(lr_select.rule_scores("mean3-std", v), [0.4 - np.std([0.9, 0.1, 0.2]), 0.6, 0.7])
    assert np.allclose(lr_select.rule_scores("mean", v), [0.425, 0.6, 0.8])
    assert np.allclose(lr_select.rule_scores("mean-std", v),
                       [0.425 - np.std([0.9, 0.1, 0.2, 0.5]), 0.6, 0.8 - np.std([0.7, 0.8, 0.9])])


def test_mean3_ties_fits_only_the_tied_points_again():
    """mean3-ties keeps mean3's choice without a tie; with one, the tied points' further fits decide (the first on
    ties), and every rule's row says how many points tied."""
    v = np.array([[0.9, 0.9, 0.9], [0.5, 0.5, 0.5], [0.9, 0.9, 0.9], [0.8, 0.8, 0.8]])
    asked: list[int] = []

    def more(i):
        asked.append(i)
        return {0: [0.2, 0.4], 2: [0.6, 0.6]}[i]

    out: dict = {}
    lr_select._by_rules(("mean3", "mean3-ties"), v, lambda i: (float(i), 0.5), out, more=more)
    assert out["mean3"]["chosen"] == [0] and out["mean3-ties"]["chosen"] == [2] and asked == [0, 2]
    assert out["mean3"]["tied"] == out["mean3-ties"]["tied"] == [2] and out["mean3-ties"]["auc"] == [2.0]
    asked.clear()
    lr_select._by_rules(("mean3-ties",), v[1:], lambda i: (float(i), 0.5), out, more=more)
    assert out["mean3-ties"]["chosen"][-1] == 1 and out["mean3-ties"]["tied"][-1] == 1 and asked == []


def test_finalist_rules_fit_the_best_points_again():
    """mean3-topK: the K best by mean3 each fitted again, the highest mean of the further fits wins; mean3-poolK:
    the highest mean of all a finalist's fits."""
    v = np.array([[0.9] * 3, [0.5] * 3, [0.8] * 3, [0.85] * 3, [0.7] * 3])
    asked: list[int] = []

    def more(i):
        asked.append(i)
        return {0: [0.6], 3: [0.65], 2: [0.3], 4: [0.1]}[i]

    out: dict = {}
    lr_select._by_rules(("mean3", "mean3-ties", "mean3-top4", "mean3-pool4"), v, lambda i: (float(i), 0.5), out,
                        more=more)
    assert out["mean3"]["chosen"] == out["mean3-ties"]["chosen"] == [0]  # no tie: no further fit
    assert out["mean3-top4"]["chosen"] == [3]  # 0.65 against 0.6, 0.3, 0.1
    assert out["mean3-pool4"]["chosen"] == [0]  # (2.7 + 0.6) / 4 against (2.55 + 0.65) / 4
    assert set(asked) == {0, 2, 3, 4}  # the finalists only (the study caches each point's further fits)


def test_rowscale_study_report(tmp_path, capsys):
    """Each method at each row scale asked for, its AUCs outside the subsample and the share below FAILED_AUC."""
    doc = _run(tmp_path, "r.json", "--study", "rowscale", "--row-scales", "1", "8")
    rows = doc["details"]["rows"]
    assert [(r["method"], r["row_scale"]) for r in rows] == [("sqm-sgd1 x1", 1.0), ("sqm-sgd1 x8", 8.0),
                                                              ("dpsgd x1", 1.0), ("dpsgd x8", 8.0)]
    for r in rows:
        assert len(r["values"]) == 2 and all(0.0 <= v <= 1.0 for v in r["values"])
        assert r["failed"] == np.mean(np.asarray(r["values"]) < lr_select.FAILED_AUC)
    assert "failed" in capsys.readouterr().out


def test_the_row_scales_option_restricts_the_grids():
    """--row-scales 1 2 4 with --intercept-scalings 1 gives the grids before scale 8 and the intercept constant
    joined: SQM-LR's 228 points, DPSGD's 24, in their order (the sgd points keep their c key, at its default 1)."""
    sqm = lr_tuned.grid_points(lr_select._with_row_scales(lr_tuned.SQM_GRIDS, (1, 2, 4), (1.0,)))
    dp = lr_tuned.grid_points(lr_select._with_row_scales(lr_tuned.DPSGD_GRID, (1,), (1.0,)))
    assert len(sqm) == 228 and len(dp) == 24
    full = lr_tuned.grid_points(lr_tuned.SQM_GRIDS)
    assert sqm == [p for p in full if p["row_scale"] != 8.0 and p.get("intercept_scaling", 1.0) == 1.0]
    assert len(lr_tuned.grid_points(lr_select._with_row_scales(lr_tuned.SQM_GRIDS, (1, 2, 4)))) == 240
    assert lr_select._with_row_scales(lr_tuned.SQM_GRIDS, None) is lr_tuned.SQM_GRIDS


def test_clipping_study_report_and_the_whole_row_round(tmp_path):
    """--study clipping: per row scale, the round with 3 and with 2 clients clipping their sub-rows, the round on
    whole rows at the 3-client round's noise, DPSGD's one step; seeded (the same figures twice).  The whole-row
    round without noise is the negated sum of (1/2 - y) times each scaled row clipped to the unit ball as a whole."""
    extra = ("--study", "clipping", "--row-scales", "8")
    a, b = _run(tmp_path, "a.json", *extra), _run(tmp_path, "b.json", *extra)
    rows = a["details"]["rows"]
    assert [r["method"] for r in rows] == ["sqm-sgd1 3 clients x8", "sqm-sgd1 2 clients x8", "whole rows x8",
                                           "dpsgd 1 step x8"]
    for r in rows:
        assert len(r["values"]) == 2 and all(0.0 <= v <= 1.0 for v in r["values"])
    assert [r["values"] for r in rows] == [r["values"] for r in b["details"]["rows"]]
    X = np.array([[0.3, 0.4], [0.01, 0.0], [-0.2, 0.1]])
    y = np.array([1, 0, 0])
    rows8 = [np.array([0.6, 0.8]), np.array([0.08, 0.0]), np.array([-0.8944272, 0.4472136])]
    want = -sum((0.5 - t) * r for t, r in zip(y, rows8, strict=True))
    assert np.allclose(lr_select.whole_row_round(X, y, 8.0, 0.25, 0.0, 0), want)
    noisy = lr_select.whole_row_round(X, y, 8.0, 0.25, 1.0, 0)
    assert noisy.shape == (2,) and not np.allclose(noisy, want)
