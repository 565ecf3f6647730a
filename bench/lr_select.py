"""SQM-LR at small n on the tuning sets: its solvers' defaults, and how a grid point is selected.

    python -m bench lr-select --study solvers --datasets breast_cancer adult --records 150 3000 --epsilons 0.5
    python -m bench lr-select --study select --datasets breast_cancer --records 150 --epsilons 0.5 --fits 3
    python -m bench lr-select --study rowscale --datasets breast_cancer adult --records 150 400 --epsilons 0.5 1
    python -m bench lr-select --study imbalanced --datasets credit_default --records 2000 --epsilons 0.5 1
    python -m bench lr-select --study clipping --datasets adult --records 150 --epsilons 1 --draws 20 --row-scales 8

Tuning sets only (:data:`bench.lr_tuned.USED_FOR_DEFAULTS`: breast_cancer, credit_default, adult): the protocol
choices these studies inform (the sgd points in the LR bench's grid, its mean of several fits per point, the
estimator's ``solver="auto"`` rule) must never see a held-out set, so any other data set is refused.  Every
figure is scored on records OUTSIDE a random subsample of n records (never a bench test split).

Per data set, record count n and epsilon, ``--draws`` times (draw s):

``--study solvers``: n records drawn without replacement (generator seeded :data:`SOLVERS_SEED`), the first 60%
the training rows, scored on the first :data:`SOLVERS_SCORED` records outside the subsample (both standardized
with the training rows' statistics, :func:`sqm.apps.logreg.experiment.standardized_unit_rows`); each method fitted
with seed s: the estimator's moments solver with its defaults, one or two full-batch sgd rounds (q 1, learning rate
1, ||w|| <= 0.1) and DPSGD at a fixed schedule (:data:`SOLVER_METHODS`); the figures are the AUC's mean, spread and
minimum over the draws, and the mean accuracy at the model's own threshold (what ``predict`` does; the whole set's
majority-class rate beside it).  ``auto`` in the table: what ``solver="auto"`` chooses for the cell's
training rows (:func:`sqm.apps.logreg.estimator.auto_solver` of 60% of n, d and epsilon).  ``--features K``: each
draw keeps K of the set's columns, drawn at random (:func:`feature_subset`), the records drawn as without it: the
solvers at a small d (the evidence behind auto's floor on d, :data:`sqm.apps.logreg.texts.AUTO_MIN_COLUMNS`).

``--study select``: n records drawn (seeded :data:`SELECT_SEED`), 60% train, the next 20% validation, scored on
the first :data:`SELECT_SCORED` records outside the subsample; draw s's seeds are ``--fits`` + 1 integers of a
generator seeded s; every point of the LR bench's SQM grid (:data:`bench.lr_tuned.SQM_GRIDS`, or ``--max-points``
of them) is fitted on train with each of the first ``--fits`` seeds and scored by AUC on validation; each rule
(:data:`RULES`) picks the point of highest rule score (the first on ties), refitted with the last seed and scored
outside.  The rule ``dpsgd``: DPSGD's grid (:data:`bench.lr_tuned.DPSGD_GRID`) by one fit per point (the first
seed), for reference; ``--dpsgd-rules``: DPSGD's grid chosen by each rule too, over as many fits per point with the
same seeds (rows ``dpsgd RULE``): whether a rule helps every method alike.  ``--orient``: beside each rule, its
refits oriented on validation (a refit whose own validation AUC is below 1/2 has its scores negated, as a
threshold is chosen there; every rule alike, dpsgd included): whether choosing the orientation on validation would
help the LR bench.  ``tied``: the share of draws in which several points shared the rule's top score (mean3-ties
breaks such ties by :data:`bench.lr_tuned.TIE_DRAWS` further fits of the tied points, seeds from a generator seeded
(s, 1), the LR bench's rule; mean3-topK and mean3-poolK fit the K best points again too).  ``--solvers sgd``: the
SQM grid without its moments points (the same draws, fits and seeds: each rule's choice were the moments points not
offered; the evidence behind :func:`bench.lr_tuned.sqm_grids`).  ``acc validation``, ``acc widest``: the refits'
mean accuracy outside the subsample at the threshold the validation split gives by the LR bench's rule
(:func:`bench.lr_tuned.validation_threshold`: the most accurate, nearest 0 on ties) and at the middle of the widest
most accurate interval (:func:`bench.lr_tuned.widest_threshold`), every method alike.

``--study rowscale``: n records drawn (seeded :data:`ROWSCALE_SEED`), 60% train, scored on the first
:data:`ROWSCALE_SCORED` records outside the subsample; SQM-LR's one full-batch sgd round and DPSGD at a fixed
schedule (:data:`ROWSCALE_METHODS`) fitted with seed 1000 + s at each row scale (the rows multiplied before each
method clips, the LR bench's ``row_scale``); the figures are the AUC's mean, spread and minimum, and the share of
fits whose AUC is below :data:`FAILED_AUC` (the noise broke the direction).  The evidence that every method of the
LR bench is offered the same row scales, up to 8.

``--study imbalanced``: n records drawn (seeded :data:`IMBALANCED_SEED`) with ``--positive-share`` of them positive
(default :data:`POSITIVE_SHARE`: the rare class of an imbalanced set; each class drawn without replacement), 60%
train, scored on the first :data:`ROWSCALE_SCORED` records outside the subsample; SQM-LR's one full-batch sgd round
at each row scale, intercept constant c (:data:`bench.lr_tuned.INTERCEPT_SCALINGS`: the constant column's share of
the norm bound) and base rate p0 (:data:`BASE_RATES`: the Taylor expansion at sigma(b0) = p0; scaled rows clipped
to the unit ball are no longer centred, and at p0 = 1/2 the direction sum x (1/2 - y) carries (1/2 - share) sum x),
and DPSGD at the rowscale study's schedule at each row scale, fitted with seed 1000 + s.  The evidence behind the
LR bench's sgd axes: c is one (bench.lr_tuned.SQM_SGD_GRID), p0 is not.

``--study clipping``: n records drawn as ``--study rowscale`` draws them, at each row scale: SQM-LR's one
full-batch sgd round (:data:`CLIPPING_ROUND`) with the features split among 3 and among 2 clients, each clipping
its sub-row to its share of the norm bound (what vertically partitioned clients can do alone: none of them knows a
record's whole norm), the same round computed with whole rows clipped to the bound (as a curator holding whole rows
would clip them) and the 3-client round's own noise std per coordinate (:func:`whole_row_round`; not a protocol the
clients can run, the measure of what clipping sub-rows costs), and DPSGD's one full-batch step
(:data:`CLIPPING_DPSGD`), each with seed 1000 + s.

Tuning's privacy cost is not counted: each figure is one fit's epsilon.
"""
from __future__ import annotations

import argparse
import functools
import math
import time

from bench.common import finish, one_thread
from bench.lr_tuned import GRID_SOLVERS, USED_FOR_DEFAULTS, solver_grids  # noqa: F401 (solver_grids: tests)

TUNING_SETS = tuple(name for name, used in USED_FOR_DEFAULTS.items() if used)
STUDIES = ("solvers", "select", "rowscale", "imbalanced", "clipping")
DELTA = 1e-5
TRAIN_SHARE, VALIDATION_SHARE = 0.6, 0.2

SOLVERS_SEED, SOLVERS_SCORED = 1, 2000
# method -> the estimator's parameters (None: DPSGD at DPSGD_SCHEDULE)
SGD_ROUND = dict(solver="sgd", sampling_rate=1.0, epochs=1, learning_rate=1.0, weight_bound=0.1)
SOLVER_METHODS = {"moments": dict(solver="moments"), "sgd1": SGD_ROUND, "sgd2": dict(SGD_ROUND, epochs=2),
                  "dpsgd": None}
DPSGD_SCHEDULE = dict(batch=64, epochs=2, learning_rate=0.5, clip=0.5)

SELECT_SEED, SELECT_SCORED = 7, 3000
FEATURES_SEED = 11  # --features: each draw's columns (feature_subset)
FINALIST_RULES = ("mean3-top4", "mean3-top16", "mean3-pool4", "mean3-pool16")
RULES = ("one", "mean3", "mean3-ties", *FINALIST_RULES, "mean3-std", "min3", "mean", "mean-std", "dpsgd")
RULE_HELP = ("one: the first fit's validation AUC; mean3, mean3-std, min3: the mean, mean minus standard "
             "deviation, minimum of the first 3 fits'; mean3-ties: mean3, the points tied at the top each fitted "
             "bench.lr_tuned.TIE_DRAWS more times and the highest mean of those winning (the LR bench's rule); "
             "mean3-topK: mean3-ties with the K highest points fitted again beside the tied ones "
             "(bench.lr_tuned.best_index's finalists); mean3-poolK: as mean3-topK, the finalists ranked by the mean "
             "of all their fits (the first 3 and the further ones); mean, "
             "mean-std: of all --fits fits'; dpsgd: DPSGD's grid by one fit per point (reference)")
DEFAULT_RULES = ("one", "mean3", "mean3-std", "min3", "mean", "mean-std")
NOT_COUNTED = ("tuning sets only, scored on records outside each subsample; tuning's privacy cost is not counted: "
               "each figure is one fit's epsilon")


ROWSCALE_SEED, ROWSCALE_SCORED = 3, 2000
# method -> its fixed point, fitted at each row scale (--study rowscale): SQM-LR's one full-batch sgd round (the LR
# bench's grid point) and DPSGD at a schedule of the bench's grid
ROWSCALE_METHODS = {"sqm-sgd1": dict(solver="sgd", q=1.0, epochs=1, learning_rate=1.0, weight_bound=0.1),
                    "dpsgd": dict(batch=256, epochs=2, learning_rate=0.5, clip=0.5)}
# --study clipping: the sgd round (the LR bench's best small-n round: c = 0.25) and DPSGD's one full-batch step
CLIPPING_ROUND = dict(solver="sgd", q=1.0, epochs=1, learning_rate=1.0, weight_bound=0.1, intercept_scaling=0.25)
CLIPPING_DPSGD = dict(batch=10 ** 9, epochs=1, learning_rate=0.5, clip=0.5)
FAILED_AUC = 0.6  # --study rowscale counts the fits that rank worse than this: the noise broke the direction
IMBALANCED_SEED, POSITIVE_SHARE = 5, 0.06  # --study imbalanced: the subsamples' generator, their positive share
BASE_RATES = (0.5, 0.25, 0.1)  # --study imbalanced: the sgd round's base rates p0 (1/2: Eq. 19)


def check_tuning_sets(datasets) -> None:
    """Refuse any data set that is not a tuning set: a held-out set must never inform these choices."""
    from sqm.errors import UsageError

    bad = [d for d in datasets if d not in TUNING_SETS]
    if bad:
        raise UsageError(f"lr-select runs on the tuning sets only ({', '.join(TUNING_SETS)}): {', '.join(bad)} "
                         f"is held out (never used to choose a protocol or a default)")


def _auc(y, s) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def _load(name: str):
    import numpy as np

    from bench import lr_tuned

    X, y = lr_tuned.load(name)[:2]
    return X, np.asarray(y)


def _fit_method(method: str, Xtr, ytr, epsilon: float, seed: int):
    """The scoring function of ``method`` (:data:`SOLVER_METHODS`) fitted on (Xtr, ytr) with ``seed``."""
    from bench import lr_tuned
    from sqm.apps.logreg.estimator import SQMLogisticRegression

    params = SOLVER_METHODS[method]
    if params is None:
        return lr_tuned.fit_dpsgd(Xtr, ytr, DPSGD_SCHEDULE, epsilon, DELTA, seed)[0]
    return SQMLogisticRegression(epsilon, DELTA, backend="plain", seed=seed, **params).fit(Xtr, ytr).decision_function


def feature_subset(d: int, features: int | None, draw: int):
    """The columns draw ``draw`` keeps of ``d``: ``features`` of them drawn without replacement by a generator seeded
    (:data:`FEATURES_SEED`, draw), in column order (None, or not below d: every column)."""
    import numpy as np

    if features is None or features >= d:
        return np.arange(d)
    return np.sort(np.random.default_rng([FEATURES_SEED, draw]).choice(d, int(features), replace=False))


def solvers_cell(X, y, n: int, epsilon: float, draws: int, methods=tuple(SOLVER_METHODS),
                 features: int | None = None) -> dict:
    """method -> {auc, accuracy: of its ``draws`` fits; the accuracy at the model's own threshold, as ``predict``}
    (``--study solvers``'s protocol, module docstring); ``features``: each draw keeps that many columns
    (:func:`feature_subset`), the records drawn as without it."""
    import numpy as np

    from sqm.apps.logreg.experiment import standardized_unit_rows

    rng = np.random.default_rng(SOLVERS_SEED)
    out: dict[str, dict[str, list[float]]] = {m: {"auc": [], "accuracy": []} for m in methods}
    for s in range(draws):
        idx = rng.choice(len(y), n, replace=False)
        tr, sc = idx[: int(TRAIN_SHARE * n)], np.setdiff1d(np.arange(len(y)), idx)[:SOLVERS_SCORED]
        cols = feature_subset(X.shape[1], features, s)
        Xtr, Xsc = standardized_unit_rows(X[tr][:, cols], X[sc][:, cols])
        for m in methods:
            scores = _fit_method(m, Xtr, y[tr], epsilon, s)(Xsc)
            out[m]["auc"].append(_auc(y[sc], scores))
            out[m]["accuracy"].append(float(np.mean((scores > 0) == (y[sc] == 1))))
    return out


def rowscale_cell(X, y, n: int, epsilon: float, draws: int, row_scales) -> dict:
    """(method, row scale) -> the AUCs of its ``draws`` fits outside the subsample (``--study rowscale``'s
    protocol, module docstring)."""
    import warnings

    import numpy as np

    from bench import lr_tuned
    from sqm.apps.logreg.experiment import standardized_unit_rows

    fits = {"sqm-sgd1": lr_tuned.fit_sqm, "dpsgd": lr_tuned.fit_dpsgd}
    rng = np.random.default_rng(ROWSCALE_SEED)
    out: dict[tuple[str, float], list[float]] = {(m, float(r)): [] for m in ROWSCALE_METHODS for r in row_scales}
    for s in range(draws):
        idx = rng.choice(len(y), n, replace=False)
        tr, sc = idx[: int(TRAIN_SHARE * n)], np.setdiff1d(np.arange(len(y)), idx)[:ROWSCALE_SCORED]
        Xtr, Xsc = standardized_unit_rows(X[tr], X[sc])
        for (m, r), vals in out.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f, _ = fits[m](Xtr, y[tr], dict(ROWSCALE_METHODS[m], row_scale=r), epsilon, DELTA, 1000 + s)
            vals.append(_auc(y[sc], f(Xsc)))
    return out


def whole_row_round(Xtr, ytr, row_scale: float, constant: float, noise_std: float, seed: int):
    """The weights' direction of one full-batch round on whole rows: sum_i (1/2 - y_i) [x_i, c] over the rows
    multiplied by ``row_scale`` and clipped to the unit ball as whole rows, plus Gaussian noise of ``noise_std`` per
    coordinate (the SQM round's own, :func:`clipping_cell`); the features' part, negated (the round's step)."""
    import numpy as np

    R = row_scale * np.asarray(Xtr, np.float64)
    R = R / np.maximum(1.0, np.linalg.norm(R, axis=1, keepdims=True))
    g = (0.5 - np.asarray(ytr, np.float64)) @ np.c_[R, np.full(len(R), constant)]
    g = g + np.random.default_rng(seed).normal(0.0, noise_std, g.shape)
    return -g[:-1]


def clipping_cell(X, y, n: int, epsilon: float, draws: int, row_scales) -> dict:
    """(method, row scale) -> the AUCs of its ``draws`` fits outside the subsample (``--study clipping``'s
    protocol, module docstring)."""
    import warnings

    import numpy as np

    from bench import lr_tuned
    from sqm.apps.logreg.experiment import standardized_unit_rows

    names = ("sqm-sgd1 3 clients", "sqm-sgd1 2 clients", "whole rows", "dpsgd 1 step")
    rng = np.random.default_rng(ROWSCALE_SEED)
    out: dict[tuple[str, float], list[float]] = {(m, float(r)): [] for m in names for r in row_scales}
    p = CLIPPING_ROUND
    for s in range(draws):
        idx = rng.choice(len(y), n, replace=False)
        tr, sc = idx[: int(TRAIN_SHARE * n)], np.setdiff1d(np.arange(len(y)), idx)[:ROWSCALE_SCORED]
        Xtr, Xsc = standardized_unit_rows(X[tr], X[sc])
        for r in row_scales:
            std = math.nan
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for clients in (3, 2):
                    m = lr_tuned.sgd_estimator(p, epsilon, DELTA, 1000 + s, clients).fit(r * Xtr, y[tr])
                    out[(f"sqm-sgd1 {clients} clients", float(r))].append(_auc(y[sc], m.decision_function(r * Xsc)))
                    if clients == 3:
                        std = math.sqrt(2.0 * m.report_.mu) / m.report_.scale
                f, _ = lr_tuned.fit_dpsgd(Xtr, y[tr], dict(CLIPPING_DPSGD, row_scale=r), epsilon, DELTA, 1000 + s)
            out[("dpsgd 1 step", float(r))].append(_auc(y[sc], f(Xsc)))
            w = whole_row_round(Xtr, y[tr], r, p["intercept_scaling"], std, 1000 + s)
            out[("whole rows", float(r))].append(_auc(y[sc], Xsc @ w))
    return out


def imbalanced_subsample(y, n: int, share: float, rng):
    """n record indices, round(share n) of them positive (label 1) and the rest negative, each class drawn without
    replacement in random order; a UsageError where a class has too few records."""
    import numpy as np

    from sqm.errors import UsageError

    k = int(round(share * n))
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y != 1)
    if k > len(pos) or n - k > len(neg):
        raise UsageError(f"{n} records with {k} positive: the set has {len(pos)} positive, {len(neg)} negative")
    return rng.permutation(np.concatenate([rng.choice(pos, k, replace=False), rng.choice(neg, n - k, replace=False)]))


def imbalanced_cell(X, y, n: int, epsilon: float, draws: int, row_scales, share: float = POSITIVE_SHARE) -> dict:
    """(method, row scale, intercept constant, base rate; None for DPSGD) -> the AUCs of its ``draws`` fits outside
    the subsample (``--study imbalanced``'s protocol, module docstring)."""
    import warnings

    import numpy as np

    from bench import lr_tuned
    from sqm.apps.logreg.experiment import standardized_unit_rows

    rng = np.random.default_rng(IMBALANCED_SEED)
    keys: list[tuple] = [("sqm-sgd1", float(r), c, p0) for r in row_scales for c in lr_tuned.INTERCEPT_SCALINGS
                         for p0 in BASE_RATES]
    keys += [("dpsgd", float(r), None, None) for r in row_scales]
    out: dict[tuple, list[float]] = {k: [] for k in keys}
    for s in range(draws):
        idx = imbalanced_subsample(y, n, share, rng)
        tr, sc = idx[: int(TRAIN_SHARE * n)], np.setdiff1d(np.arange(len(y)), idx)[:ROWSCALE_SCORED]
        Xtr, Xsc = standardized_unit_rows(X[tr], X[sc])
        for (m, r, c, p0), vals in out.items():
            point = dict(ROWSCALE_METHODS[m], row_scale=r,
                         **({"intercept_scaling": c, "base_rate": p0} if p0 is not None else {}))
            fit = lr_tuned.fit_sqm if m == "sqm-sgd1" else lr_tuned.fit_dpsgd
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f, _ = fit(Xtr, y[tr], point, epsilon, DELTA, 1000 + s)
            vals.append(_auc(y[sc], f(Xsc)))
    return out


def grid_subset(points: list, max_points: int | None) -> list[int]:
    """Indices of ``max_points`` points spread evenly over ``points`` (the first and the last among them; all of
    them when None or at least their number)."""
    import numpy as np

    if max_points is None or max_points >= len(points):
        return list(range(len(points)))
    if max_points < 1:
        from sqm.errors import UsageError

        raise UsageError(f"--max-points must be >= 1, got {max_points}")
    return sorted({int(i) for i in np.round(np.linspace(0, len(points) - 1, max_points))})


def rule_scores(rule: str, v):
    """Each grid point's score under ``rule`` from ``v`` (points x fits validation AUCs, NaN: a failed fit)."""
    import numpy as np

    with np.errstate(all="ignore"):
        if rule == "one":
            return v[:, 0]
        w = v[:, :3] if rule in ("mean3", "mean3-std", "min3") else v
        if rule == "min3":
            return np.nanmin(w, 1)
        mean = np.nanmean(w, 1)
        return mean - np.nanstd(w, 1) if rule.endswith("-std") else mean


def _with_row_scales(grid, row_scales, intercept_scalings=None):
    """``grid`` (or a tuple of grids) with its row-scale axis restricted to ``row_scales`` and, in a grid that has
    one, its intercept-constant axis to ``intercept_scalings`` (None: as it is)."""
    if row_scales is None and intercept_scalings is None:
        return grid
    if isinstance(grid, (tuple, list)):
        return tuple(_with_row_scales(g, row_scales, intercept_scalings) for g in grid)
    out = dict(grid)
    if row_scales is not None:
        out["row_scale"] = tuple(float(r) for r in row_scales)
    if intercept_scalings is not None and "intercept_scaling" in grid:
        out["intercept_scaling"] = tuple(float(c) for c in intercept_scalings)
    return out


def select_cell(X, y, n: int, epsilon: float, draws: int, fits: int, rules=DEFAULT_RULES,
                max_points: int | None = None, row_scales=None, intercept_scalings=None,
                dpsgd_rules: bool = False, solvers=GRID_SOLVERS) -> dict:
    """rule -> {auc: the refitted choices' AUCs outside the subsample, chosen: their grid indices} over ``draws``
    draws (``--study select``'s protocol, module docstring); ``dpsgd_rules``: also "dpsgd RULE" for each rule but
    ``dpsgd``, DPSGD's grid chosen by that rule over as many fits per point (its seeds SQM-LR's)."""
    import warnings

    import numpy as np

    from bench import lr_tuned
    from sqm.apps.logreg.experiment import standardized_unit_rows

    all_points = lr_tuned.grid_points(_with_row_scales(solver_grids(solvers), row_scales, intercept_scalings))
    keep = grid_subset(all_points, max_points)
    points = [all_points[i] for i in keep]
    rng = np.random.default_rng(SELECT_SEED)
    out: dict[str, dict[str, list]] = {r: {"auc": [], "chosen": [], "validation": []} for r in rules}
    for s in range(draws):
        idx = rng.choice(len(y), n, replace=False)
        cut1, cut2 = int(TRAIN_SHARE * n), int((TRAIN_SHARE + VALIDATION_SHARE) * n)
        tr, va = idx[:cut1], idx[cut1:cut2]
        ev = np.setdiff1d(np.arange(len(y)), idx)[:SELECT_SCORED]
        Xtr, Xva = standardized_unit_rows(X[tr], X[va])
        _, Xev = standardized_unit_rows(X[tr], X[ev])
        seeds = [int(v) for v in np.random.default_rng(s).integers(0, 2 ** 62, size=fits + 1)]
        # mean3-ties' further fits of the tied points (lazily, each point's once): the same seeds for every method
        tie_seeds = [int(v) for v in np.random.default_rng([s, 1]).integers(0, 2 ** 62, size=lr_tuned.TIE_DRAWS)]

        def val(p, sd, Xtr=Xtr, ytr=y[tr], Xva=Xva, yva=y[va]):
            try:
                return _auc(yva, lr_tuned.fit_sqm(Xtr, ytr, p, epsilon, DELTA, sd)[0](Xva))
            except Exception:  # a fit the noise breaks scores NaN, as in the grid search
                return math.nan

        sqm_rules = [r for r in rules if r != "dpsgd"]
        if dpsgd_rules and sqm_rules:
            dpts = lr_tuned.grid_points(_with_row_scales(lr_tuned.DPSGD_GRID, row_scales))
            def dval(p, sd, Xtr=Xtr, ytr=y[tr], Xva=Xva, yva=y[va]):
                return _auc(yva, lr_tuned.fit_dpsgd(Xtr, ytr, p, epsilon, DELTA, sd)[0](Xva))

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dvs = np.array([[dval(p, sd) for sd in seeds[:fits]] for p in dpts])

                def dpsgd_refit(i, Xtr=Xtr, ytr=y[tr], Xev=Xev, yev=y[ev], Xva=Xva, yva=y[va], dpts=dpts,
                                seed=seeds[fits]):
                    f = lr_tuned.fit_dpsgd(Xtr, ytr, dpts[i], epsilon, DELTA, seed)[0]
                    return _refit_scores(f, Xva, yva, Xev, yev)

                @functools.cache
                def dpsgd_more(i, dpts=dpts, tie_seeds=tie_seeds, dval=dval):
                    return [dval(dpts[i], sd) for sd in tie_seeds]

                _by_rules(sqm_rules, dvs, dpsgd_refit, out, "dpsgd ", more=dpsgd_more)
        if sqm_rules:
            v = np.array([[val(p, sd) for sd in seeds[:fits]] for p in points])

            def sqm_refit(i, Xtr=Xtr, ytr=y[tr], Xev=Xev, yev=y[ev], Xva=Xva, yva=y[va], seed=seeds[fits]):
                f = lr_tuned.fit_sqm(Xtr, ytr, points[i], epsilon, DELTA, seed)[0]
                return _refit_scores(f, Xva, yva, Xev, yev)

            @functools.cache
            def sqm_more(i, tie_seeds=tie_seeds):
                return [val(points[i], sd) for sd in tie_seeds]

            _by_rules(sqm_rules, v, sqm_refit, out, "", keep, more=sqm_more)
        if "dpsgd" in rules:
            dpts = lr_tuned.grid_points(_with_row_scales(lr_tuned.DPSGD_GRID, row_scales))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dv = [_auc(y[va], lr_tuned.fit_dpsgd(Xtr, y[tr], p, epsilon, DELTA, seeds[0])[0](Xva)) for p in dpts]
                best = int(np.argmax(dv))
                f, _ = lr_tuned.fit_dpsgd(Xtr, y[tr], dpts[best], epsilon, DELTA, seeds[fits])
            out["dpsgd"]["auc"].append(_auc(y[ev], f(Xev)))
            out["dpsgd"]["validation"].append(_auc(y[va], f(Xva)))
            out["dpsgd"]["chosen"].append(best)
    return out


THRESHOLDS = ("validation", "widest")  # --study select: the refit's accuracy outside at each threshold rule


def _refit_scores(f, Xva, yva, Xev, yev) -> tuple[float, float, dict[str, float]]:
    """A refit's (AUC outside the subsample, validation AUC, accuracy outside the subsample at the threshold each
    rule (:data:`THRESHOLDS`) takes from the validation split) for its scoring function ``f``, each split scored
    once: :func:`bench.lr_tuned.validation_threshold` (the LR bench's: the most accurate, the one nearest 0 on ties)
    and :func:`bench.lr_tuned.widest_threshold` (the middle of the widest most accurate interval)."""
    import numpy as np

    from bench import lr_tuned

    s_va, s_ev = f(Xva), np.asarray(f(Xev), np.float64)
    cuts = {"validation": lr_tuned.validation_threshold(yva, s_va), "widest": lr_tuned.widest_threshold(yva, s_va)}
    accs = {k: float(np.mean((s_ev > t) == (np.asarray(yev) == 1))) for k, t in cuts.items()}
    return _auc(yev, s_ev), _auc(yva, s_va), accs


def _by_rules(rules, v, refit, out: dict, prefix: str = "", index=None, more=None) -> None:
    """Each rule's choice among ``v``'s points (points x fits validation AUCs, :func:`rule_scores`; mean3-ties:
    mean3's top tied points by the mean of ``more``'s further validation AUCs, point -> array, the first on ties;
    mean3-topK and mean3-poolK: the K best beside them, :func:`bench.lr_tuned.best_index`), refitted once per
    distinct choice (``refit``: point -> :func:`_refit_scores`' tuple, or its first two), appended to ``out``'s
    entry ``prefix`` + rule (and its ``tied``: how many points shared the top), the chosen point as ``index`` maps
    it (None: as it is)."""
    import numpy as np

    from bench.lr_tuned import best_index, mean_of_fits, top_tied

    def tie_mean(i):  # the mean of a finalist's further fits
        return mean_of_fits(more(i))

    done: dict[int, tuple[float, float]] = {}
    for r in rules:
        further = r == "mean3-ties" or r in FINALIST_RULES
        scores = [float(x) for x in rule_scores("mean3" if further else r, v)]
        best = int(np.nanargmax(scores))
        if r == "mean3-ties":
            best = best_index(scores, tie_mean)  # the LR bench's rule (bench.lr_tuned.grid_search)
        elif r.startswith("mean3-top"):
            best = best_index(scores, tie_mean, int(r.removeprefix("mean3-top")))
        elif r.startswith("mean3-pool"):
            def pooled(i):  # the mean of the first 3 fits' and the further fits' scores
                return mean_of_fits(np.concatenate([v[i, :3], np.asarray(more(i), np.float64)]))
            best = best_index(scores, pooled, int(r.removeprefix("mean3-pool")))
        if best not in done:
            done[best] = refit(best)
        got = out.setdefault(prefix + r, {"auc": [], "chosen": [], "validation": []})
        got.setdefault("tied", []).append(len(top_tied(scores)))
        got["auc"].append(done[best][0])
        got["validation"].append(done[best][1])
        for rule, acc in (done[best][2] if len(done[best]) > 2 else {}).items():
            got.setdefault(f"accuracy {rule}", []).append(acc)
        got["chosen"].append(best if index is None else index[best])


def _summary(values) -> dict:
    import numpy as np

    return dict(auc=float(np.mean(values)), auc_std=float(np.std(values)), auc_min=float(np.min(values)))


def run(study: str = "solvers", datasets=("breast_cancer",), records=(150,), epsilons=(0.5,), draws: int = 10,
        fits: int = 5, rules=DEFAULT_RULES, max_points: int | None = None, methods=tuple(SOLVER_METHODS),
        progress: bool = True, row_scales=None, positive_share: float = POSITIVE_SHARE,
        intercept_scalings=None, orient: bool = False, dpsgd_rules: bool = False,
        solvers=GRID_SOLVERS, features: int | None = None) -> dict:
    """The study's report: one row per (data set, n, epsilon, method or rule); cells whose n is not below the
    data set's record count (nothing left to score on) are listed under ``skipped``.  ``orient`` (select): each
    rule's row is followed by its refits oriented on validation (a refit whose validation AUC is below 1/2 has
    its scores negated)."""
    import warnings

    import numpy as np
    from tqdm import tqdm

    from sqm.apps.logreg.estimator import auto_solver

    check_tuning_sets(datasets)
    if study not in STUDIES:
        from sqm.errors import UsageError

        raise UsageError(f"--study must be one of {STUDIES}, got {study!r}")
    t0, c0 = time.perf_counter(), time.process_time()
    rows: list[dict] = []
    skipped: list[dict] = []
    cells = [(d, n, e) for d in datasets for n in records for e in epsilons]
    for name, n, eps in tqdm(cells, desc=f"lr-select {study}", disable=not progress, leave=False):
        X, y = _load(name)
        if n >= len(y):
            skipped.append(dict(dataset=name, records=n, epsilon=eps, reason=f"{len(y)} records in all"))
            continue
        d = int(X.shape[1]) if features is None or study != "solvers" else min(int(features), int(X.shape[1]))
        base = dict(dataset=name, records=n, d=d, epsilon=eps, draws=draws)
        majority = float(max(np.mean(y), 1 - np.mean(y)))  # the whole set's majority-class rate, for reference
        if study == "solvers":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = solvers_cell(X, y, n, eps, draws, methods, features)
            auto = auto_solver(int(TRAIN_SHARE * n), d, eps)[0]
            for m, vals in got.items():
                rows.append(dict(base, method=m, auto=auto, **_summary(vals["auc"]), values=vals["auc"],
                                 accuracy=float(np.mean(vals["accuracy"])), accuracies=vals["accuracy"],
                                 majority=majority))
        elif study == "imbalanced":
            from bench.lr_tuned import ROW_SCALES

            got_im = imbalanced_cell(X, y, n, eps, draws, row_scales or ROW_SCALES, positive_share)
            for (m, r, c, p0), vals in got_im.items():
                label = f"{m} x{r:g}" + ("" if p0 is None else f" c {c:g} p0 {p0:g}")
                rows.append(dict(base, method=label, row_scale=r, intercept_scaling=c, base_rate=p0,
                                 positive_share=positive_share, **_summary(vals), values=vals))
        elif study == "clipping":
            from bench.lr_tuned import ROW_SCALES

            got_cl = clipping_cell(X, y, n, eps, draws, row_scales or ROW_SCALES)
            for (m, r), vals in got_cl.items():
                rows.append(dict(base, method=f"{m} x{r:g}", row_scale=r, **_summary(vals), values=vals))
        elif study == "rowscale":
            from bench.lr_tuned import ROW_SCALES

            got_rs = rowscale_cell(X, y, n, eps, draws, row_scales or ROW_SCALES)
            for (m, r), vals in got_rs.items():
                rows.append(dict(base, method=f"{m} x{r:g}", row_scale=r, **_summary(vals), values=vals,
                                 failed=float(np.mean(np.asarray(vals) < FAILED_AUC))))
        else:
            sel = select_cell(X, y, n, eps, draws, fits, rules, max_points, row_scales, intercept_scalings,
                              dpsgd_rules, solvers)
            for r, res in sel.items():
                tied = res.get("tied", [])
                accs = {f"accuracy_{k}": float(np.mean(res[f"accuracy {k}"])) for k in THRESHOLDS
                        if res.get(f"accuracy {k}")}
                rows.append(dict(base, rule=r, fits=fits, **_summary(res["auc"]), values=res["auc"], **accs,
                                 chosen=res["chosen"], validation=res["validation"], tied=tied,
                                 tie_share=float(np.mean(np.asarray(tied) > 1)) if tied else math.nan))
                if orient:  # the refit's scores negated where its own validation AUC is below 1/2
                    turned = [1.0 - a if v < 0.5 else a for a, v in zip(res["auc"], res["validation"], strict=True)]
                    rows.append(dict(base, rule=f"{r} oriented", fits=fits, **_summary(turned), values=turned,
                                     chosen=res["chosen"], turned=sum(v < 0.5 for v in res["validation"])))
    return dict(study=study, protocol=NOT_COUNTED, delta=DELTA, draws=draws, row_scales=row_scales,
                fits=fits if study == "select" else None, max_points=max_points,
                solvers=list(solvers) if study == "select" else None,
                features=features if study == "solvers" else None, rows=rows, skipped=skipped,
                seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0)


def print_table(rep: dict) -> None:
    from bench.common import relation_note
    from sqm.cli.tables import render_table

    what = {"solvers": "solvers with their defaults",
            "imbalanced": "one sgd round at each row scale, intercept constant c and base rate p0, DPSGD beside, on "
                          "imbalanced subsamples",
            "rowscale": f"fixed points at each row scale (failed: AUC below {FAILED_AUC:g})",
            "clipping": "one round with sub-rows clipped by their clients, whole rows clipped (the same noise), "
                        "DPSGD's one step"}.get(
        rep["study"], f"selection rules over the SQM grid ({rep['fits']} fits per point)")
    print(f"SQM-LR at small n, {what}; AUC over {rep['draws']} draws (delta {rep['delta']:g}); {rep['protocol']}")
    key = "rule" if rep["study"] == "select" else "method"
    table = [{"dataset": r["dataset"], "n": r["records"], "eps": r["epsilon"], key: r[key],
              "AUC": f"{r['auc']:.3f} +- {r['auc_std']:.3f}", "min": f"{r['auc_min']:.3f}",
              **({"accuracy": f"{r['accuracy']:.3f}", "majority": f"{r['majority']:.3f}", "auto": r["auto"]}
                 if rep["study"] == "solvers" else {}),
              **({"failed": f"{r['failed']:.3f}"} if rep["study"] == "rowscale" else {}),
              **({"tied": "-" if math.isnan(r.get("tie_share", math.nan)) else f"{r['tie_share']:.2f}",
                  **{f"acc {k}": f"{r[f'accuracy_{k}']:.3f}" if f"accuracy_{k}" in r else "-" for k in THRESHOLDS}}
                 if rep["study"] == "select" else {})} for r in rep["rows"]]
    cols = ["dataset", "n", ("eps", "eps", "g"), key, "AUC", "min"] + (
        ["accuracy", "majority", "auto"] if rep["study"] == "solvers" else []) + (
        ["failed"] if rep["study"] == "rowscale" else []) + (
        ["tied"] + [f"acc {k}" for k in THRESHOLDS] if rep["study"] == "select" else [])
    print(render_table(table, cols))
    for s in rep["skipped"]:
        print(f"  skipped {s['dataset']} n {s['records']}: {s['reason']}")
    print(relation_note())
    print(f"{rep['seconds']:.0f} s wall, {rep['cpu_seconds']:.0f} CPU s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", choices=STUDIES, default="solvers",
                   help="solvers: the estimator's defaults per solver and DPSGD; select: selection rules over the "
                        "LR bench's SQM grid; rowscale: SQM-LR's full-batch round and DPSGD at each row scale; "
                        "imbalanced: the full-batch round at each row scale, intercept constant and base rate on "
                        "imbalanced subsamples; clipping: one round with each client clipping its sub-row against "
                        "whole rows clipped at the same noise, and DPSGD's one step "
                        "(default solvers)")
    p.add_argument("--datasets", nargs="+", default=["breast_cancer"],
                   help=f"tuning sets only ({', '.join(TUNING_SETS)}; default breast_cancer): held-out sets are "
                        f"refused, they must never inform a protocol choice or a default")
    p.add_argument("--records", nargs="+", type=int, default=[150],
                   help="subsample sizes n (default 150); a cell with n not below the set's size is skipped")
    p.add_argument("--epsilons", nargs="+", type=float, default=[0.5], help="epsilons (default 0.5)")
    p.add_argument("--draws", type=int, default=10, help="subsamples (draws) per cell (default 10)")
    p.add_argument("--fits", type=int, default=5,
                   help="select: fits with fresh noise per grid point (default 5; the refit uses one more seed)")
    p.add_argument("--rules", nargs="+", choices=RULES, default=list(DEFAULT_RULES),
                   help=f"select: the rules compared (default {' '.join(DEFAULT_RULES)}); {RULE_HELP}")
    p.add_argument("--max-points", type=int, default=None,
                   help="select: this many grid points, spread evenly over the grid (default all)")
    p.add_argument("--methods", nargs="+", choices=list(SOLVER_METHODS), default=list(SOLVER_METHODS),
                   help="solvers: the methods compared (default all: " + ", ".join(SOLVER_METHODS) + ")")
    p.add_argument("--row-scales", nargs="+", type=float, default=None,
                   help="select: restrict the grids' row scales to these (default the LR bench's, "
                        "bench.lr_tuned.ROW_SCALES; 1 2 4 gives the grid before scale 8 joined); rowscale, clipping: "
                        "the scales compared (default the LR bench's)")
    p.add_argument("--intercept-scalings", nargs="+", type=float, default=None,
                   help="select: restrict the sgd points' intercept constants to these (default the LR bench's, "
                        "bench.lr_tuned.INTERCEPT_SCALINGS; 1 with --row-scales 1 2 4 gives the 228-point grid of "
                        "the earlier select figures)")
    p.add_argument("--orient", action="store_true",
                   help="select: beside each rule, its refits oriented on validation (the scores of a refit whose "
                        "validation AUC is below 1/2 negated; every method alike, DPSGD included)")
    p.add_argument("--dpsgd-rules", action="store_true",
                   help="select: DPSGD's grid chosen by each rule too (rows 'dpsgd RULE'; as many fits per point as "
                        "SQM-LR's, with its seeds): whether a rule helps every method alike")
    p.add_argument("--solvers", nargs="+", choices=GRID_SOLVERS, default=list(GRID_SOLVERS),
                   help="select: the SQM grids offered, by solver (default both; the sgd grid alone gives the choice "
                        "each rule would make were the moments points not offered: the same draws, fits and seeds)")
    p.add_argument("--features", type=int, default=None,
                   help="solvers: each draw keeps this many of the set's columns, drawn at random (seeded by the "
                        "draw; default all): the solvers at a small d on the tuning sets")
    p.add_argument("--positive-share", type=float, default=POSITIVE_SHARE,
                   help=f"imbalanced: the positive share of each subsample (default {POSITIVE_SHARE:g})")
    p.add_argument("--json", help="write the report here")


def cli(args) -> int:
    with one_thread():
        rep = run(args.study, tuple(args.datasets), tuple(args.records), tuple(args.epsilons), args.draws, args.fits,
                  tuple(args.rules), args.max_points, tuple(args.methods), progress=not args.quiet,
                  row_scales=tuple(args.row_scales) if args.row_scales else None, positive_share=args.positive_share,
                  intercept_scalings=tuple(args.intercept_scalings) if args.intercept_scalings else None,
                  orient=args.orient, dpsgd_rules=args.dpsgd_rules, solvers=tuple(args.solvers),
                  features=args.features)
    return finish(rep, args, print_table)
