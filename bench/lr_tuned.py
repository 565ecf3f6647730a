"""SQM-LR against DPSGD with every method's hyperparameters chosen on validation data only.

    python -m bench lr-tuned                      # breast_cancer and phishing, epsilon 1, 3 runs
    python -m bench lr-tuned --datasets breast_cancer credit_default --epsilons 1 4 --runs 5 --json lr_tuned.json

The protocol, per dataset, epsilon and run (seed ``seed + run``):

1. a stratified train / validation / test split (60 / 20 / 20) of the dataset's records with that seed;
   breast_cancer and phishing are standardized with the training split's statistics, clipped to +-3 and divided
   by 3 sqrt(d) (every row in the unit ball); credit_default's encoding is public and in the unit ball already;
2. each private method fits every point of its grid on train and scores it by AUC on validation, the mean over
   :data:`SELECT_DRAWS` fits with fresh noise; the argmax is its choice; points tied at the top each get
   :data:`TIE_DRAWS` further fits, and the highest mean of those wins (the first on ties);
3. the chosen point is refitted on train (a fresh seed); its decision threshold is the one of highest accuracy on
   the validation split (:func:`validation_threshold`, every method alike: a model's intercept is one more
   hyperparameter); it is scored on test (accuracy at that threshold, AUC; the accuracy at threshold 0 too).

Grids: DPSGD (96 points; Opacus, PRV accountant, :func:`sqm.apps.logreg.baselines.dpsgd_fit`) over the
expected batch q n in {64, 256}, epochs {2, 5}, learning rate {0.5, 2, 8}, clip norm {0.5, sqrt 2} (||w|| <= 8 as
SQM's sgd schedule, an intercept through a constant column 1) and the rows' scale (:data:`ROW_SCALES`, every
method alike).  SQM-LR (320 points, :data:`SQM_GRIDS`, both its
solvers, in process, :func:`fit_sqm`): the moments solver's 288 (:data:`SQM_GRID`: the release's intercept
constant c, label weight kappa, gamma and score weight beta, :func:`sqm.apps.logreg.estimator.moments_release`,
the fit's ridge multiple, and the rows' scale before the clients clip them to the unit ball, SQM's clip bound as
DPSGD's clip norm; fitted with the estimator's own code, :func:`sqm.apps.logreg.moments.fit_release`) and the sgd
solver's 32 (:data:`SQM_SGD_GRID`: full-batch rounds, one or two epochs, the weights' bound, the rows' scale, the
intercept's constant c); the moments points are offered only where ``solver="auto"`` runs the moments release
(:func:`sqm_grids`, from the training rows, d and epsilon: public), elsewhere the sgd solver's 32 alone.
``sqm-default`` is SQM-LR with its defaults, untuned (chosen by ``python -m bench lr-constants`` on the validation
splits of breast_cancer, credit_default and adult).  Non-private: scikit-learn's logistic regression with its
fixed default regularization (C = 1), no tuning.

Tuning's privacy cost is not counted, for any method alike: each reported epsilon is that of the final refit only.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from functools import partial

from bench.common import finish, one_thread

DATASETS = ("breast_cancer", "phishing", "credit_default")
# the data sets on which SQM-LR's default constants (c, kappa, beta, the ridge, the variance floor) were chosen, on
# their training/validation splits (python -m bench lr-constants); phishing was never used to choose them
USED_FOR_DEFAULTS = {"breast_cancer": True, "credit_default": True, "adult": True, "phishing": False}
STANDARDIZED = ("breast_cancer", "phishing")  # scaled with the training split's statistics (else: public encoding)

# the rows' scale before each method clips (SQM's clients clip the rows to the unit ball, DPSGD clips each example's
# gradient): the same axis for every method.  Scaled rows clip to their direction, which at small n epsilon gives the
# noise a larger signal (on the tuning sets' small subsamples, both methods' failures to rank, AUC < 0.6, vanish
# at scale 4 to 8); without it DPSGD's gradient was mostly the intercept column's
ROW_SCALES = (1.0, 2.0, 4.0, 8.0)
DPSGD_GRID = dict(batch=(64, 256), epochs=(2, 5), learning_rate=(0.5, 2.0, 8.0), clip=(0.5, math.sqrt(2.0)),
                  row_scale=ROW_SCALES)
# SQM-LR's grid: the release's c, kappa, gamma, beta, the fit's ridge multiple and the rows' scale (SQM's clip
# bound, fit_sqm); the variance floor's share is left at its default: it only scales the fitted direction and moves
# the model's own threshold, so neither the AUC nor the accuracy at the validation threshold depends on it.  Each
# axis lists SQM-LR's default first, so the grid's first point is the defaults and ties that outlast the further
# fits (TIE_DRAWS; points that post-process one release can rank a small validation split alike) go to them
SQM_GRID = dict(constant=(0.5, 0.35, 1.0), label_weight=(0.5, 0.7, 1.0), gamma=(8192.0, 1024.0),
                score_weight=(1.5, 0.75), ridge_multiple=(4.0, 16.0), row_scale=ROW_SCALES)
# SQM-LR's sgd solver in the same grid search (32 points): full-batch rounds (q 1), one or two epochs, the weights'
# bound, the rows' scale and the intercept's constant c (its column's value; the default 1 first); one round is one
# noisy gradient at w = 0 (the budget on d numbers, fit_sqm_sgd).  The clients clip the scaled rows to the unit ball
# and the constant column joins them, so at c = 1 the intercept takes half the norm bound the round's noise is
# calibrated to (the row [x, c] has norm up to sqrt(1 + c^2)); a smaller c gives the direction more of it.  DPSGD
# sets the same share through its rows' scale (its constant column stays 1 while the rows grow inside its clip)
INTERCEPT_SCALINGS = (1.0, 0.25)
SQM_SGD_GRID = dict(solver=("sgd",), q=(1.0,), epochs=(1, 2), learning_rate=(1.0,), weight_bound=(0.1, 1.0),
                    row_scale=ROW_SCALES, intercept_scaling=INTERCEPT_SCALINGS)
SQM_GRIDS = (SQM_GRID, SQM_SGD_GRID)  # the moments points first: the grid's first point is the defaults


GRID_SOLVERS = ("moments", "sgd")  # the solvers of SQM_GRIDS, in its order


def solver_grids(solvers=GRID_SOLVERS) -> tuple:
    """The grids of :data:`SQM_GRIDS` of the solvers named (:data:`GRID_SOLVERS`), in its order."""
    return tuple(g for g in SQM_GRIDS if ("sgd" if "sgd" in g.get("solver", ()) else "moments") in solvers)


def sqm_grids(n_train: int, d: int, epsilon: float) -> tuple:
    """SQM-LR's grids at a cell of ``n_train`` training rows, ``d`` feature columns and ``epsilon`` (public
    quantities): the sgd solver's always, the moments solver's (:data:`SQM_GRID`) only where ``solver="auto"``
    would run the moments release (:func:`sqm.apps.logreg.estimator.auto_solver`).  Below auto's threshold one sgd
    round beat the moments fit on AUC and accuracy on the tuning sets' subsamples, so there the moments points
    only give the grid search noisier points to pick: on those subsamples (150 records, epsilon 0.5 and 1, 20 draws
    each) the sgd points alone raised the tuned SQM-LR's mean and worst AUC in every cell, its accuracy by -0.8 to
    +0.9 points (``python -m bench lr-select --study select --solvers sgd``; docs/changelog.md)."""
    from sqm.apps.logreg.estimator import auto_solver

    return solver_grids(GRID_SOLVERS if auto_solver(int(n_train), int(d), float(epsilon))[0] == "moments"
                        else ("sgd",))


DPSGD_WEIGHT_BOUND = 8.0
NONPRIVATE_C = 1.0
NOT_COUNTED = ("tuning's privacy cost is not counted, for any method alike: each epsilon is the final refit's; "
               "hyperparameters chosen by a validation score on train -> validation, refitted on train, scored on test")


def grid_points(grid) -> list[dict]:
    """Every combination of ``grid``'s values (name -> values), the first name varying slowest; a tuple of such
    grids: their points one grid after the other."""
    import itertools

    if isinstance(grid, (tuple, list)):
        return [p for g in grid for p in grid_points(g)]
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(grid[n] for n in names))]


def split_indices(y, seed: int, validation: float = 0.2, test: float = 0.2):
    """(train, validation, test) index arrays of a stratified split of labels ``y`` with ``seed``."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    rest, te = train_test_split(idx, test_size=test, random_state=seed, stratify=y)
    tr, va = train_test_split(rest, test_size=validation / (1 - test), random_state=seed + 1, stratify=y[rest])
    return np.sort(tr), np.sort(va), np.sort(te)


def mean_of_fits(scores) -> float:
    """The mean of a point's validation scores over its fits, the failed ones (NaN) left out; NaN (never winning)
    when every fit failed."""
    import numpy as np

    a = np.asarray(scores, np.float64)
    a = a[~np.isnan(a)]
    return float(np.mean(a)) if a.size else math.nan


def top_tied(scores: Sequence[float]) -> list[int]:
    """The indices of every score equal to the highest (NaN never counts; empty when every score is NaN)."""
    real = [v for v in scores if not math.isnan(v)]
    return [i for i, v in enumerate(scores) if real and v == max(real)]


def grid_search(points: Sequence[dict], score: Callable[[dict], float],
                tie_score: Callable[[dict], float] | None = None, finalists: int = 1) -> tuple[dict, list[float]]:
    """(the point of highest ``score``, every point's score): NaN scores never win.  Where several points share
    the highest score, or ``finalists`` > 1, and ``tie_score`` is given, the highest ``tie_score`` among the tied
    points and the ``finalists`` best wins (:func:`best_index`)."""
    scores = [float(score(p)) for p in points]
    best = best_index(scores, None if tie_score is None else (lambda i: tie_score(points[i])), finalists)
    return dict(points[best]), scores


def finalists_of(scores: Sequence[float], finalists: int = 1) -> list[int]:
    """The indices, in order, of every score equal to the highest and of the ``finalists`` highest (NaN never
    counts; among equal scores the first)."""
    ranked = sorted((i for i, v in enumerate(scores) if not math.isnan(v)), key=lambda i: (-scores[i], i))
    return sorted(set(top_tied(scores)) | set(ranked[:max(0, int(finalists))]))


def best_index(scores: Sequence[float], tie_score: Callable[[int], float] | None = None,
               finalists: int = 1) -> int:
    """The index of the highest of ``scores`` (NaN never wins; the first on ties).  Where ``tie_score`` (index ->
    score) is given and more than one point is a finalist (:func:`finalists_of`: those sharing the highest score
    and the ``finalists`` highest), the finalist of highest ``tie_score`` wins; after that, of highest score, the
    first on ties.  ``finalists`` 1: only a tie at the top is scored again."""
    best = max(range(len(scores)), key=lambda i: (-math.inf if math.isnan(scores[i]) else scores[i], -i))
    final = finalists_of(scores, finalists)
    if tie_score is not None and len(final) > 1:
        again = {i: float(tie_score(i)) for i in final}
        best = max(final, key=lambda i: (-math.inf if math.isnan(again[i]) else again[i], scores[i], -i))
    return best


# ----- the methods: fit(Xtr, ytr, params, epsilon, delta, seed) -> a scoring function of X --------------------
def fit_dpsgd(Xtr, ytr, p: dict, epsilon: float, delta: float, seed: int):
    from sqm.apps.logreg.baselines import dpsgd_fit, with_intercept_column

    import numpy as np

    scale = float(p.get("row_scale", 1.0))  # the rows multiplied by it before the constant column (as fit_sqm)
    q = min(1.0, p["batch"] / len(ytr))
    w, rep = dpsgd_fit(with_intercept_column(scale * np.asarray(Xtr, np.float64), 1.0), ytr, epsilon, delta, q,
                       int(p["epochs"]), p["learning_rate"], DPSGD_WEIGHT_BOUND, max_grad_norm=p["clip"], seed=seed)
    return (lambda X: with_intercept_column(scale * np.asarray(X, np.float64), 1.0) @ w), rep.epsilon_server


# fit_sqm's releases by everything they depend on (the data, the release's parameters, the seed): the grid's points
# that differ only in the fit's knobs (the ridge multiple) post-process one release, exactly as a fresh release with
# the same seed would give; the few latest are kept (the grid varies the fit's knob and the row scale fastest)
_RELEASES: dict = {}
RELEASES_KEPT = 16
_DIGEST: list = [None, None, ""]  # the latest training arrays (held, so their ids stay theirs) and their digest


def _data_digest(X, y) -> str:
    """The SHA-256 of the training data (X, y) as float64, hashed once for the same two arrays, which a grid search
    passes unchanged at every point and draw (about 3 ms a call at 3,000 x 104)."""
    import numpy as np

    if _DIGEST[0] is not X or _DIGEST[1] is not y:
        data = np.ascontiguousarray(X, np.float64).tobytes() + np.ascontiguousarray(y, np.float64).tobytes()
        _DIGEST[:] = [X, y, hashlib.sha256(data).hexdigest()]
    return _DIGEST[2]


def fit_sqm_sgd(Xtr, ytr, p: dict, epsilon: float, delta: float, seed: int, parties: int = 3):
    """SQM-LR's sgd solver (the per-batch protocol, in process) with ``p``'s sampling rate ``q``, ``epochs``,
    ``learning_rate``, ``weight_bound``, ``base_rate`` (default 1/2) and ``intercept_scaling`` (the intercept's
    constant c, default 1), on the rows multiplied by ``row_scale`` (as
    :func:`fit_sqm`); one full-batch round (q 1, one epoch) releases one noisy gradient at the intercept-only model,
    the direction sum x (p0 - y): the whole budget on d numbers instead of the moments' (d + 3)^2 / 2."""
    import numpy as np

    scale = float(p.get("row_scale", 1.0))
    m = sgd_estimator(p, epsilon, delta, seed, parties).fit(scale * np.asarray(Xtr, np.float64), ytr)
    return (lambda X: m.decision_function(scale * np.asarray(X, np.float64))), m.report_.epsilon_server


def sgd_estimator(p: dict, epsilon: float, delta: float, seed: int, parties: int = 3):
    """The (unfitted, in-process) SQM-LR sgd estimator of :func:`fit_sqm_sgd`'s point ``p`` (its row scale aside)."""
    from sqm.apps.logreg.estimator import SQMLogisticRegression

    return SQMLogisticRegression(epsilon, delta, sampling_rate=p["q"], epochs=int(p["epochs"]),
                                 learning_rate=p["learning_rate"], weight_bound=p["weight_bound"], backend="plain",
                                 n_parties=parties, seed=seed, solver="sgd", base_rate=p.get("base_rate"),
                                 intercept_scaling=p.get("intercept_scaling", 1.0))


def fit_sqm(Xtr, ytr, p: dict, epsilon: float, delta: float, seed: int, parties: int = 3):
    """SQM-LR's moments solver (``p``'s ``solver`` "sgd": its sgd solver, :func:`fit_sqm_sgd`), in process, with
    the release's c, kappa, gamma and (when ``p`` names them) beta
    ``score_weight``, the fit's ``floor_share`` and ``ridge_multiple`` (else the defaults), as the estimator
    runs it (same release, same fit).  ``row_scale`` (default 1): the rows are multiplied by it before the release,
    whose clients clip them to the unit ball as ever: SQM's clip bound is 1 / row_scale in the rows' units (as
    DPSGD's clip norm, a choice between clipping's bias and the noise's share of the signal); the scores of the
    returned function are those of the scaled rows."""
    import numpy as np

    from sqm.apps.logreg.estimator import moments_release
    from sqm.apps.logreg.moments import RIDGE_NOISE_MULTIPLE, SCORE_WEIGHT, VARIANCE_FLOOR_SHARE, fit_release
    from sqm.mechanism.vertical import VerticalData

    if p.get("solver") == "sgd":
        return fit_sqm_sgd(Xtr, ytr, p, epsilon, delta, seed, parties)
    scale = float(p.get("row_scale", 1.0))
    digest = _data_digest(Xtr, ytr)
    Xtr, ytr = np.ascontiguousarray(Xtr, np.float64), np.ascontiguousarray(ytr, np.float64)
    key = (digest, Xtr.shape, scale, p["gamma"], epsilon, delta,
           p["constant"], p["label_weight"], p.get("score_weight", SCORE_WEIGHT), seed, parties)
    if key not in _RELEASES:
        blocks = np.array_split(scale * Xtr, parties, axis=1)
        label = parties - 1
        mech, layout = moments_release([b.shape[1] for b in blocks], label, p["gamma"], epsilon, delta,
                                       constant=p["constant"], label_weight=p["label_weight"], backend="plain",
                                       seed=seed, score_weight=p.get("score_weight", SCORE_WEIGHT))
        blocks[label] = layout.block(blocks[label], ytr)
        res = mech.run(VerticalData(blocks))
        _RELEASES[key] = (np.array(res.estimate, copy=True), layout, res.report.mu, res.report.epsilon_server)
    estimate, layout, mu, spent = _RELEASES[key]
    while len(_RELEASES) > RELEASES_KEPT:
        _RELEASES.pop(next(iter(_RELEASES)))
    _, w, b = fit_release(estimate.copy(), layout, len(ytr), mu, p["gamma"], True,
                          floor_share=p.get("floor_share", VARIANCE_FLOOR_SHARE),
                          ridge_multiple=p.get("ridge_multiple", RIDGE_NOISE_MULTIPLE))
    return (lambda X: scale * np.asarray(X, np.float64) @ w + b), spent


def fit_sqm_default(Xtr, ytr, p: dict, epsilon: float, delta: float, seed: int):
    from sqm.apps.logreg.estimator import SQMLogisticRegression

    m = SQMLogisticRegression(epsilon, delta, backend="in-process", seed=seed).fit(Xtr, ytr)
    return m.decision_function, m.report_.epsilon_server


def fit_nonprivate(Xtr, ytr, p: dict, epsilon: float, delta: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    m = LogisticRegression(C=NONPRIVATE_C, max_iter=5000).fit(Xtr, ytr)
    return m.decision_function, math.inf


# a method's grid: the points (a grid, or a tuple of grids), or a function of the cell's public quantities (training
# rows, feature columns, epsilon) giving them
METHODS = {"dpsgd": (fit_dpsgd, DPSGD_GRID), "sqm-tuned": (fit_sqm, sqm_grids), "sqm-default": (fit_sqm_default, None),
           "nonprivate": (fit_nonprivate, None)}


def scores_of(y, s) -> tuple[float, float]:
    """(accuracy of the sign of ``s``, AUC of ``s``) against labels ``y``."""
    import numpy as np

    from sqm.apps.logreg.baselines import roc_auc

    s = np.asarray(s, np.float64)
    return float(np.mean((s > 0) == (np.asarray(y) == 1))), roc_auc(y, s)


def validation_threshold(y, s) -> float:
    """The decision threshold of highest accuracy on validation labels ``y`` with scores ``s``: among 0 and the
    midpoints between consecutive distinct scores, the one closest to 0 on ties (the refitted model's threshold,
    chosen like any hyperparameter, on validation data only)."""
    import numpy as np

    s = np.asarray(s, np.float64)
    y = np.asarray(y) == 1
    u = np.unique(s[np.isfinite(s)])
    cands = np.concatenate([[0.0], (u[1:] + u[:-1]) / 2, u[:1] - 1.0, u[-1:] + 1.0]) if u.size else np.zeros(1)
    acc = np.array([np.mean((s > t) == y) for t in cands])
    best = np.flatnonzero(acc == acc.max())
    return float(cands[best[np.argmin(np.abs(cands[best]))]])


def widest_threshold(y, s) -> float:
    """The middle of the widest interval of thresholds of highest accuracy on validation labels ``y`` with scores
    ``s`` (the intervals run between consecutive distinct scores; below the lowest and above the highest, 1 beyond
    it): the largest margin on both sides.  Studied beside :func:`validation_threshold` (``python -m bench lr-select
    --study select``), not the LR bench's rule."""
    import numpy as np

    s = np.asarray(s, np.float64)
    y = np.asarray(y) == 1
    u = np.unique(s[np.isfinite(s)])
    if not u.size:
        return 0.0
    edges = np.concatenate([u[:1] - 1.0, u, u[-1:] + 1.0])  # a threshold in (edges[k], edges[k + 1]) classifies alike
    acc = np.array([np.mean((s > t) == y) for t in (edges[1:] + edges[:-1]) / 2])
    best, pick, width, k = acc == acc.max(), 0.0, -1.0, 0
    while k < len(acc):
        if best[k]:
            a = k
            while k + 1 < len(acc) and best[k + 1]:
                k += 1
            if edges[k + 1] - edges[a] > width:
                pick, width = float(edges[a] + edges[k + 1]) / 2, float(edges[k + 1] - edges[a])
        k += 1
    return pick


SELECT = {"auc": 1, "accuracy": 0}  # the validation score a grid search maximizes: index into scores_of
# each grid point's validation score is its mean over this many fits with fresh noise (every method alike): with one
# draw per point, a small validation split choosing among many noisy points picks the luckiest draw, whose refit
# (fresh noise) need not be lucky; on the tuning sets' small subsamples, one draw chose settings whose refit was
# inverted by the noise in some runs, the mean of 3 did not
SELECT_DRAWS = 3
# the points tied at the top after SELECT_DRAWS fits each get this many further fits (fresh noise, the same seeds for
# every tied point), and the highest mean of those wins (the first on ties), every method alike.  A validation split
# of 30 records scores AUC in steps of 1/(positives x negatives), so its mean of 3 fits often ties many points at the
# top (at 1 on an easy set); grid order alone then chose among them, which favoured whichever grid came first
TIE_DRAWS = 6


def run_split(X, y, split, epsilon: float, delta: float, seed: int, methods: dict | None = None,
              standardize: bool = True, select: str = "auc", draws: int = SELECT_DRAWS,
              tie_draws: int = TIE_DRAWS) -> dict:
    """One run of the protocol on records (X, y) with ``split`` = (train, validation, test) indices: method ->
    {chosen, validation (the chosen point's ``select`` score, its mean over ``draws`` fits with fresh noise), tied
    (how many points shared that score: where more than one, each got ``tie_draws`` further fits, :data:`TIE_DRAWS`),
    accuracy (at the validation threshold), auc, accuracy_at_zero, threshold, epsilon_spent}.  Nothing but train
    and validation enters the choice."""
    import numpy as np

    from sqm.apps.logreg.experiment import standardized_unit_rows

    tr, va, te = split
    Xtr, Xva, Xte = X[tr], X[va], X[te]
    if standardize:
        Xtr, Xva = standardized_unit_rows(X[tr], X[va])
        _, Xte = standardized_unit_rows(X[tr], X[te])
    ytr, yva, yte = y[tr], y[va], y[te]
    rng = np.random.default_rng(seed)
    out = {}
    for name, (fit, grid) in (methods or METHODS).items():
        tune_seed, refit_seed = (int(s) for s in rng.integers(0, 2 ** 62, size=2))
        chosen: dict = {}
        val, tied = None, 0
        if callable(grid):
            grid = grid(len(tr), X.shape[1], epsilon)
        if grid:
            points = grid_points(grid)

            tune_seeds = [tune_seed] + [int(s) for s in np.random.default_rng(tune_seed).integers(0, 2 ** 62,
                                                                                                size=draws - 1)]

            tie_seeds = [int(s) for s in np.random.default_rng([tune_seed, 1]).integers(0, 2 ** 62, size=tie_draws)]

            def validation_score(p, fit=fit, seeds=tune_seeds):
                return mean_of_fits([scores_of(yva, fit(Xtr, ytr, p, epsilon, delta, s)[0](Xva))[SELECT[select]]
                                     for s in seeds])

            tie_score = partial(validation_score, seeds=tie_seeds) if tie_draws else None
            chosen, vals = grid_search(points, validation_score, tie_score)
            val = max(v for v in vals if not math.isnan(v)) if any(not math.isnan(v) for v in vals) else math.nan
            tied = len(top_tied(vals))
        predict, eps = fit(Xtr, ytr, chosen, epsilon, delta, refit_seed)
        threshold = validation_threshold(yva, predict(Xva))
        s_te = np.asarray(predict(Xte), np.float64)
        acc_zero, auc = scores_of(yte, s_te)
        acc = float(np.mean((s_te > threshold) == (yte == 1)))
        out[name] = dict(chosen=chosen, validation=val, tied=tied, accuracy=acc, auc=auc, accuracy_at_zero=acc_zero,
                         threshold=threshold, epsilon_spent=float(eps))
    return out


def load(name: str, data_dir=None, max_records: int | None = None, seed: int = 0):
    """(X, y) of dataset ``name`` (all its records; adult is not offered), at most ``max_records`` of them (a
    stratified subsample with ``seed``) when given."""
    import numpy as np

    from sqm.data.datasets import load_dataset

    ds = load_dataset(name, data_dir)
    assert ds.y is not None  # every offered set is labelled
    X, y = np.asarray(ds.X, np.float64), (np.asarray(ds.y) == np.max(ds.y)).astype(np.int64)
    if max_records is not None and len(y) > max_records:
        from sklearn.model_selection import train_test_split

        keep, _ = train_test_split(np.arange(len(y)), train_size=max_records, random_state=seed, stratify=y)
        X, y = X[np.sort(keep)], y[np.sort(keep)]
    return X, y


def run(datasets=("breast_cancer", "phishing"), epsilons=(1.0,), runs=3, delta=1e-5, seed=0, max_records=None,
        methods: Sequence[str] | None = None, progress=True, select: str = "auc") -> dict:
    import numpy as np
    from tqdm import tqdm

    chosen_methods = {m: METHODS[m] for m in (methods or METHODS)}
    t0, c0 = time.perf_counter(), time.process_time()
    rows, per_run = [], []
    for name in datasets:
        X, y = load(name, max_records=max_records, seed=seed)
        for e in epsilons:
            cells: dict[str, list] = {}
            for r in tqdm(range(runs), desc=f"lr-tuned {name} eps {e:g}", disable=not progress, leave=False):
                split = split_indices(y, seed + r)
                res = run_split(X, y, split, e, delta, seed + r, chosen_methods, standardize=name in STANDARDIZED,
                                select=select)
                for m, v in res.items():
                    cells.setdefault(m, []).append(v)
                    per_run.append(dict(dataset=name, epsilon=e, run=r, method=m, **v))
            for m, vals in cells.items():
                acc, auc = [v["accuracy"] for v in vals], [v["auc"] for v in vals]
                rows.append(dict(dataset=name, used_for_defaults=USED_FOR_DEFAULTS[name], n=int(len(y)),
                                 d=int(X.shape[1]), epsilon=e, method=m, accuracy=float(np.mean(acc)),
                                 accuracy_std=float(np.std(acc)), auc=float(np.mean(auc)),
                                 auc_std=float(np.std(auc)), runs=len(vals),
                                 epsilon_spent=float(max(v["epsilon_spent"] for v in vals)),
                                 chosen=[v["chosen"] for v in vals]))
    return dict(protocol=NOT_COUNTED, select=select, delta=delta, runs=runs, seed=seed,
                split="stratified 60/20/20 per run",
                grids={"dpsgd": DPSGD_GRID, "sqm-tuned": list(SQM_GRIDS)}, dpsgd_weight_bound=DPSGD_WEIGHT_BOUND,
                nonprivate_C=NONPRIVATE_C, rows=rows, per_run=per_run, seconds=time.perf_counter() - t0,
                cpu_seconds=time.process_time() - c0)


def _chosen_text(chosen: list[dict]) -> str:
    if not chosen or not chosen[0]:
        return "-"
    return "; ".join(",".join(f"{k}={v:.3g}" for k, v in c.items()) for c in chosen)


def print_table(rep: dict) -> None:
    from bench.common import relation_note
    from sqm.cli.tables import render_table

    print(f"SQM-LR and DPSGD tuned on validation {rep['select']} (delta {rep['delta']:g}, {rep['runs']} runs, "
          f"{rep['split']}); {rep['protocol']}")
    print("* dataset used to choose SQM-LR's default constants (its training/validation splits: bench lr-constants)")
    table = [{"dataset": r["dataset"] + ("*" if r["used_for_defaults"] else ""), "eps": r["epsilon"],
              "method": r["method"], "accuracy": f"{r['accuracy']:.4f} +- {r['accuracy_std']:.4f}",
              "AUC": f"{r['auc']:.4f} +- {r['auc_std']:.4f}", "chosen (per run)": _chosen_text(r["chosen"])}
             for r in rep["rows"]]
    print(render_table(table, ["dataset", ("eps", "eps", "g"), "method", "accuracy", "AUC", "chosen (per run)"]))
    print(relation_note())
    print(f"{rep['seconds']:.0f} s wall, {rep['cpu_seconds']:.0f} CPU s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", default=["breast_cancer", "phishing"], choices=DATASETS,
                   help="data sets (default breast_cancer phishing)")
    p.add_argument("--epsilons", nargs="+", type=float, default=[1.0], help="epsilons (default 1)")
    p.add_argument("--runs", type=int, default=3, help="runs (splits and seeds) per cell (default 3)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    p.add_argument("--seed", type=int, default=0, help="first run's seed (default 0)")
    p.add_argument("--max-records", type=int, default=None,
                   help="a stratified subsample of at most this many records per data set (default all)")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=None,
                   help="methods (default all: " + ", ".join(METHODS) + ")")
    p.add_argument("--select", choices=list(SELECT), default="auc",
                   help="the validation score each grid search maximizes (default auc)")
    p.add_argument("--json", help="write the report here")


def cli(args) -> int:
    with one_thread():
        rep = run(tuple(args.datasets), tuple(args.epsilons), args.runs, args.delta, args.seed, args.max_records,
                  args.methods, progress=not args.quiet, select=args.select)
    return finish(rep, args, print_table)
