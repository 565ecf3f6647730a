"""SQM-LR's moments constants (c, kappa, beta, the ridge, the variance floor) chosen on validation data only.

    python -m bench lr-constants                          # the tuning sets, epsilon 1 and 4, 3 splits, 2 seeds
    python -m bench lr-constants --splits 5 --json lr_constants.json

The constants of :mod:`sqm.apps.logreg.moments`: the release's intercept constant c (``CONSTANT``), label weight
kappa (``LABEL_WEIGHT``) and score column weight beta (``SCORE_WEIGHT``), and the fit's ridge multiple
(``RIDGE_NOISE_MULTIPLE``) and variance floor share (``VARIANCE_FLOOR_SHARE``); gamma is the estimator's default
(2^13).  The protocol:

1. the tuning sets only (:data:`TUNING_SETS`: breast_cancer, credit_default, adult, the larger two at ``--records``
   records, as ``python -m bench utility`` draws them); labels: the largest class against the rest;
2. per set and split s (seed s), :func:`bench.lr_tuned.split_indices`'s stratified 60/20/20 split, of which only
   the training and validation parts are read (:func:`tuning_parts`; the test part is never touched), the rows
   standardized with the training part's statistics (as the utility bench does);
3. every grid point is released and fitted on the training part (:func:`bench.lr_tuned.fit_sqm`: the estimator's
   own release and fit, in process) at each epsilon, with ``--seeds`` noise seeds per (set, epsilon, split) shared
   by all points (common random numbers: the points differ by their constants, not by their draw), and scored by
   AUC on the validation part;
4. c, kappa, beta and the ridge (:data:`GRID`): a point's score is its mean validation AUC over sets, epsilons,
   splits and seeds; the choice is the argmax (the first on ties, in the grid's order);
5. the variance floor's share only scales the fitted direction and moves the model's own threshold (the AUC does
   not change with it), so at the chosen point it is scored by the mean validation accuracy of the model's own
   decision (score > 0) over the same runs (:data:`FLOOR_SHARES`), argmax likewise.

The privacy cost of this tuning is not counted (as for every tuned method of the benchmarks): the tuning sets'
records are used to choose public constants, once.
"""
from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence

from bench.common import finish, one_thread

TUNING_SETS = ("breast_cancer", "credit_default", "adult")
GRID = dict(constant=(0.35, 0.5, 0.7, 1.0), label_weight=(0.5, 0.7, 1.0, 1.5), score_weight=(0.75, 1.5, 3.0),
            ridge_multiple=(1.0, 4.0, 16.0, 64.0))
FLOOR_SHARES = (0.1, 0.3, 0.5, 1.0)
SCORES = ("auc", "accuracy")  # the last axis of score_grid's array
GAMMA = 8192.0  # the estimator's default (sqm.apps.logreg.params)
EPSILONS = (1.0, 4.0)
NOT_COUNTED = ("chosen on the tuning sets' training/validation parts only (test parts never read); the tuning's "
               "privacy cost is not counted")


def current_defaults() -> dict:
    """The moments solver's constants as :mod:`sqm.apps.logreg.moments` declares them now."""
    from sqm.apps.logreg import moments

    return dict(constant=moments.CONSTANT, label_weight=moments.LABEL_WEIGHT, score_weight=moments.SCORE_WEIGHT,
                ridge_multiple=moments.RIDGE_NOISE_MULTIPLE, floor_share=moments.VARIANCE_FLOOR_SHARE)


def tuning_parts(X, y, seed: int):
    """(Xtr, ytr, Xva, yva) of split ``seed`` (:func:`bench.lr_tuned.split_indices`), standardized with the
    training part's statistics; the test part's rows are never read."""
    from bench import lr_tuned
    from sqm.apps.logreg.experiment import standardized_unit_rows

    tr, va, _test = lr_tuned.split_indices(y, seed)
    Xtr, Xva = standardized_unit_rows(X[tr], X[va])
    return Xtr, y[tr], Xva, y[va]


def score_grid(data: dict, points: Sequence[dict], epsilons: Sequence[float], splits: int, seeds: int,
               delta: float = 1e-5, fit: Callable | None = None, progress: bool = False):
    """Validation scores, shape (points, sets, epsilons, splits, seeds, 2): the AUC and the accuracy of the
    model's own decision (score > 0) (:data:`SCORES`), of every point of ``points`` (constants by name) on
    ``data`` (name -> (X, y 0/1)); ``fit`` (default :func:`bench.lr_tuned.fit_sqm`) has
    :data:`bench.lr_tuned.METHODS`' signature and gets the point with gamma :data:`GAMMA`."""
    import numpy as np
    from tqdm import tqdm

    from bench import lr_tuned

    fit = fit or lr_tuned.fit_sqm
    out = np.full((len(points), len(data), len(epsilons), splits, seeds, len(SCORES)), np.nan)
    bar = tqdm(total=len(data) * len(epsilons) * splits, desc="lr-constants", disable=not progress)
    for a, (X, y) in enumerate(data.values()):
        for s in range(splits):
            Xtr, ytr, Xva, yva = tuning_parts(X, y, s)
            for b, eps in enumerate(epsilons):
                noise = [int(np.random.SeedSequence([a, s, b, k]).generate_state(1)[0]) for k in range(seeds)]
                for i, p in enumerate(points):
                    for k, seed in enumerate(noise):
                        predict, _ = fit(Xtr, ytr, dict(p, gamma=GAMMA), eps, delta, seed)
                        out[i, a, b, s, k] = lr_tuned.scores_of(yva, predict(Xva))[::-1]
                bar.update()
    bar.close()
    return out


def choose(points: Sequence[dict], scores, by: str = "auc") -> tuple[dict, list[float]]:
    """(the point of highest mean score ``by`` (one of :data:`SCORES`), each point's mean):
    :func:`bench.lr_tuned.grid_search` over the means of ``scores`` (:func:`score_grid`'s array)."""
    import numpy as np

    from bench import lr_tuned

    means = [float(np.mean(s[..., SCORES.index(by)])) for s in scores]
    best, _ = lr_tuned.grid_search(points, lambda p: means[points.index(p)])
    return best, means


def load_sets(names: Sequence[str], records: int) -> dict:
    """name -> (X, y as 0/1: the largest class against the rest), drawn as ``python -m bench utility`` does."""
    import numpy as np

    from bench.utility import load

    out = {}
    for name in names:
        X, y, _ = load(name, records)
        out[name] = (np.asarray(X, np.float64), (np.asarray(y) == np.max(y)).astype(np.int64))
    return out


def run(datasets: Sequence[str] = TUNING_SETS, epsilons: Sequence[float] = EPSILONS, splits: int = 3,
        seeds: int = 2, records: int = 3000, delta: float = 1e-5, grid: dict | None = None,
        floor_shares: Sequence[float] | None = None, progress: bool = True) -> dict:
    import numpy as np

    from bench import lr_tuned

    unknown = [d for d in datasets if d not in TUNING_SETS]
    if unknown:
        from sqm.errors import UsageError

        raise UsageError(f"{', '.join(unknown)}: not a tuning set ({', '.join(TUNING_SETS)}); the other sets are "
                         f"held out from every choice of constants")
    t0, c0 = time.perf_counter(), time.process_time()
    grid = grid or GRID
    floor_shares = tuple(floor_shares or FLOOR_SHARES)
    defaults = current_defaults()
    points = [dict(p, floor_share=defaults["floor_share"]) for p in lr_tuned.grid_points(grid)]
    data = load_sets(datasets, records)
    scores = score_grid(data, points, epsilons, splits, seeds, delta, progress=progress)
    best, means = choose(points, scores)
    floors = [dict(best, floor_share=f) for f in floor_shares]
    floor_scores = score_grid(data, floors, epsilons, splits, seeds, delta, progress=progress)
    best, floor_means = choose(floors, floor_scores, "accuracy")

    def row(p, s):
        return dict(p, validation_auc=float(np.mean(s[..., 0])), validation_accuracy=float(np.mean(s[..., 1])),
                    **{f"auc_{name}": float(np.mean(s[a, ..., 0])) for a, name in enumerate(data)})

    rows = sorted((row(p, s) for p, s in zip(points, scores, strict=True)), key=lambda r: -r["validation_auc"])
    floor_rows = [row(p, s) for p, s in zip(floors, floor_scores, strict=True)]
    at_default = next((r for r in rows if all(k in r and math.isclose(r[k], v) for k, v in defaults.items())), None)
    return dict(protocol=NOT_COUNTED, datasets=list(datasets), records=records, epsilons=list(epsilons),
                splits=splits, seeds=seeds, delta=delta, gamma=GAMMA, grid=grid, floor_shares=list(floor_shares),
                chosen=best, defaults=defaults,
                chosen_is_default=all(k in best and math.isclose(best[k], defaults[k]) for k in defaults),
                default_row=at_default, rows=rows, floor_rows=floor_rows, seconds=time.perf_counter() - t0,
                cpu_seconds=time.process_time() - c0)


def print_table(rep: dict, top: int = 12) -> None:
    from sqm.cli.tables import render_table

    print(f"SQM-LR's moments constants by mean validation AUC over {', '.join(rep['datasets'])} (at most "
          f"{rep['records']:,} records), epsilon {', '.join(f'{e:g}' for e in rep['epsilons'])}, {rep['splits']} "
          f"splits x {rep['seeds']} noise seeds, gamma {rep['gamma']:g}; {rep['protocol']}")
    names = list(rep["grid"])
    shown = rep["rows"][:top]
    if rep["default_row"] is not None and rep["default_row"] not in shown:
        shown = shown + [rep["default_row"]]
    cols = names + ["validation_auc"] + [f"auc_{d}" for d in rep["datasets"]]
    print(f"c, kappa, beta, ridge by validation AUC (the best {top}, and today's defaults; floor share "
          f"{rep['defaults']['floor_share']:g}):")
    print(render_table([{k: r[k] for k in cols} for r in shown], [(k, k, ".4g") for k in cols]))
    print("the floor share at the chosen point, by validation accuracy of the model's own decision:")
    cols = ["floor_share", "validation_accuracy", "validation_auc"]
    print(render_table([{k: r[k] for k in cols} for r in rep["floor_rows"]], [(k, k, ".4g") for k in cols]))
    chosen = ", ".join(f"{k} {v:g}" for k, v in rep["chosen"].items())
    defaults = ", ".join(f"{k} {v:g}" for k, v in rep["defaults"].items())
    print(f"chosen: {chosen}  (the defaults now: {defaults}; "
          f"{'the same' if rep['chosen_is_default'] else 'they differ'})")
    print(f"{rep['seconds']:.0f} s wall, {rep['cpu_seconds']:.0f} CPU s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", choices=TUNING_SETS, default=list(TUNING_SETS),
                   help="tuning sets (default all: " + ", ".join(TUNING_SETS) + "; no other set may be used)")
    p.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS), help="epsilons (default 1 4)")
    p.add_argument("--splits", type=int, default=3, help="train/validation splits per set (default 3)")
    p.add_argument("--seeds", type=int, default=2, help="noise seeds per split and epsilon (default 2)")
    p.add_argument("--records", type=int, default=3000,
                   help="at most this many records per set (a stratified subsample with seed 0; default 3000)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    p.add_argument("--json", help="write the report here")


def cli(args) -> int:
    with one_thread():
        rep = run(tuple(args.datasets), tuple(args.epsilons), args.splits, args.seeds, args.records, args.delta,
                  progress=not args.quiet)
    return finish(rep, args, print_table)
