"""PBM-VFL against NPQ, both tuned alike on validation data, at a stated feature-level epsilon, 5 runs with spread.

    python -m bench pbm-tuned                                   # digits and phishing, epsilon 200, 5 runs
    python -m bench pbm-tuned --datasets digits phishing breast_cancer --epsilons 50 200 --runs 5 --json t.json

The protocol, per dataset, epsilon and run (seed ``seed + run``):

1. a stratified train / validation / test split (60 / 20 / 20) of the dataset's records with that seed
   (:func:`bench.lr_tuned.split_indices`); the clients' column blocks as ``sqm pbm-vfl`` cuts them (digits: pixels
   / 16, the 4 image quadrants; phishing: its {-1, 0, 1} features as they are, 5 clients; breast_cancer, wine,
   iris: each client standardizes its own columns with the training split's statistics);
2. each method trains every point of its grid on train, in process (the simulation of the party programs, proved
   bit-for-bit equal to the real processes elsewhere), and scores it by accuracy on validation; the argmax (the first
   on ties) is its choice.  NPQ's epochs are read from one run of the most epochs (every stream and the batch order
   are functions of the epoch number and there is no schedule, so the model after epoch e of a longer run is the
   model of an e-epoch run; a test checks it);
3. the chosen point is refitted on train with a fresh seed and scored on test.

Grids (:data:`GRID`, the same for both methods): learning rate, hidden width and epochs, at ``sqm pbm-vfl``'s
mini-batch size.  A grid point may also name ``batch_size`` (and ``embedding_size``): the batch size leaves every
claim as it is (each record is released once per epoch whatever the batch).  PBM-VFL's privacy
claim is its feature-level epsilon (relation "embedding": one client's embedding of one record changed, not the record's
features, against the server; :func:`sqm.apps.pbm_vfl.privacy.method_privacy`) at delta 1e-5, which depends on
(b, beta, clients, P, epochs).  The claim is held fixed across the grid: b is fixed at ``sqm pbm-vfl``'s 16 and
beta is SOLVED from the epsilon for each grid point's epochs (:func:`beta_for_epsilon`: the largest beta <= 1/4
whose epsilon is at most the target), so no grid point spends more than the stated epsilon.  b is not tuned: at a
fixed epsilon the decoded noise's variance bound 1/(b beta^2) moves little with b (docs/how-to/pbm-vfl.md), while
a larger b costs more coins and bits per value.  NPQ has no privacy.  Tuning's privacy cost
is not counted, for either method alike: each epsilon is that of the final refit.
"""
from __future__ import annotations

import argparse
import functools
import math
import time

from bench.common import finish

DATASETS = ("digits", "phishing", "breast_cancer", "wine", "iris")
PARTIES = {"digits": 4, "phishing": 5, "breast_cancer": 3, "wine": 3, "iris": 2}  # clients (digits: quadrants)
STANDARDIZED = ("breast_cancer", "wine", "iris")  # each client's columns, with the training split's statistics
GRID = dict(lr=(0.003, 0.01, 0.03), hidden=(64, 256), epochs=(5, 10))
METHODS = ("pbm", "npq")
B = 16  # PBM's trials: sqm pbm-vfl's default, not tuned (see the module docstring)
EMBEDDING_SIZE = 16
DELTA = 1e-5
GAP_POINTS = 5.0  # the check: PBM-VFL's mean test accuracy within this many points of NPQ's
NOT_COUNTED = ("tuning's privacy cost is not counted, for either method alike: each epsilon is the final refit's; "
               "hyperparameters chosen by validation accuracy (train -> validation), refitted on train, scored on test")
RESULT_KEYS = ("accuracy", "auprc", "validation", "chosen", "b", "beta", "epsilon_spent")


def grid_points(grid: dict) -> list[dict]:
    from bench.lr_tuned import grid_points as points

    return points(grid)


@functools.cache
def beta_for_epsilon(epsilon: float, b: int, M: int, P: int, epochs: int, delta: float = DELTA) -> float:
    """The largest beta in (0, 1/4] (to 0.1% by bisection on log beta) whose PBM-VFL feature-level epsilon
    (:func:`sqm.mechanism.pbm.privacy_report`, each record released once per epoch) is at most ``epsilon``;
    1/4 when even that is below it.  ValueError when no beta >= 1e-4 meets it."""
    from sqm.mechanism import pbm

    def eps(beta):
        return pbm.privacy_report(b, beta, M, P, epochs, delta).epsilon_feature

    if eps(0.25) <= epsilon:
        return 0.25
    lo, hi = 1e-4, 0.25
    if eps(lo) > epsilon:
        raise ValueError(f"no PBM beta >= 1e-4 meets feature-level epsilon {epsilon:g} (b {b}, {M} clients, P {P}, "
                         f"{epochs} epochs)")
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps(mid) <= epsilon else (lo, mid)
    return lo


def load(name: str, data=None, max_records: int | None = None, seed: int = 0):
    """(X, y, n_classes) of dataset ``name``: labels as classes 0..K-1; at most ``max_records`` records (a
    stratified subsample with ``seed``) when given."""
    import numpy as np

    from sqm.data.datasets import load_dataset

    ds = load_dataset(name, data)
    assert ds.y is not None  # every offered set is labelled
    X = np.asarray(ds.X, np.float64)
    _, y = np.unique(np.asarray(ds.y), return_inverse=True)
    if max_records is not None and len(y) > max_records:
        from sklearn.model_selection import train_test_split

        keep, _ = train_test_split(np.arange(len(y)), train_size=max_records, random_state=seed, stratify=y)
        X, y = X[np.sort(keep)], y[np.sort(keep)]
    return X, y.astype(np.int64), int(y.max()) + 1


def client_blocks(name: str, X, fit_idx, eval_idx) -> tuple[list, list]:
    """The clients' column blocks of the records ``fit_idx`` (training) and ``eval_idx`` (scoring), prepared as
    the module docstring says (statistics from ``fit_idx`` only)."""
    import numpy as np

    from sqm.apps.pbm_vfl.data import digits_quadrants

    A, E = X[fit_idx], X[eval_idx]
    if name == "digits":
        return digits_quadrants(A / 16.0), digits_quadrants(E / 16.0)
    if name in STANDARDIZED:
        mu, sd = A.mean(0), A.std(0)
        sd[sd == 0] = 1
        A, E = (A - mu) / sd, (E - mu) / sd
    cols = np.array_split(np.arange(X.shape[1]), PARTIES[name])
    return [A[:, c] for c in cols], [E[:, c] for c in cols]


def fit_score(name: str, X, y, n_classes: int, method: str, point: dict, fit_idx, eval_idx, epsilon: float,
              seed: int, delta: float = DELTA) -> dict:
    """Train ``method`` at grid ``point`` (lr, hidden, epochs; optionally embedding_size and batch_size, else
    :data:`EMBEDDING_SIZE` and ``sqm pbm-vfl``'s batch) on the records ``fit_idx`` and score every epoch on
    ``eval_idx``: {accuracy (per epoch), auprc (last epoch, binary only), b, beta, epsilon_spent}.  The one place a
    model is trained, so a test can check which records each call sees."""
    from sqm.apps.pbm_vfl import VFLConfig, train_vfl
    from sqm.apps.pbm_vfl.privacy import method_privacy

    btr, bev = client_blocks(name, X, fit_idx, eval_idx)
    M, P = len(btr), int(point.get("embedding_size", EMBEDDING_SIZE))
    beta = beta_for_epsilon(float(epsilon), B, M, P, int(point["epochs"]), delta) if method == "pbm" else 0.25
    cfg = VFLConfig(method=method, b=B, beta=beta, epochs=int(point["epochs"]), lr=float(point["lr"]),
                    hidden=int(point["hidden"]), embedding_size=P, n_classes=n_classes, delta=delta,
                    batch_size=int(point.get("batch_size", VFLConfig.batch_size)))
    r = train_vfl(btr, bev, y[fit_idx], y[eval_idx], cfg, "plain", seed=seed)
    return dict(accuracy=[h["test_accuracy"] for h in r.history], auprc=r.auprc if n_classes == 2 else None,
                b=B if method == "pbm" else None, beta=beta if method == "pbm" else None,
                epsilon_spent=float(method_privacy(cfg, M).epsilon_server))


def tune(name: str, X, y, n_classes: int, method: str, grid: dict, tr, va, epsilon: float, seed: int,
         delta: float = DELTA) -> tuple[dict, float]:
    """(the grid point of highest validation accuracy, its accuracy): every point trained on ``tr`` and scored on
    ``va`` only.  NPQ: one run per (lr, hidden) at the most epochs, each epoch count read from its history."""
    score: dict[tuple, float] = {}
    epochs = sorted(grid["epochs"])
    for p in grid_points({k: v for k, v in grid.items() if k != "epochs"}):
        if method == "npq":
            acc = fit_score(name, X, y, n_classes, method, {**p, "epochs": epochs[-1]}, tr, va, epsilon, seed,
                            delta)["accuracy"]
            score.update({_key({**p, "epochs": e}): acc[e - 1] for e in epochs})
        else:
            score.update({_key({**p, "epochs": e}): fit_score(name, X, y, n_classes, method, {**p, "epochs": e}, tr,
                                                             va, epsilon, seed, delta)["accuracy"][-1]
                          for e in epochs})
    points = grid_points(grid)  # ties go to the first point in the grid's own order
    vals = [score[_key(p)] for p in points]
    best = max(range(len(points)), key=lambda i: (-math.inf if math.isnan(vals[i]) else vals[i], -i))
    return points[best], vals[best]


def _key(point: dict) -> tuple:
    return tuple(sorted(point.items()))


def tuned_cell(name: str, epsilon: float, seed: int, *, grid: dict | None = None, methods=METHODS, data=None,
               max_records: int | None = None, delta: float = DELTA, loaded=None) -> dict:
    """One run of the protocol (module docstring) on dataset ``name`` at PBM-VFL feature-level ``epsilon``
    with ``seed`` (the split's and the training seeds'): method -> {accuracy (test), auprc (test, binary sets;
    else None), validation (the chosen point's validation accuracy), chosen (lr, hidden, epochs), b, beta (PBM;
    None for NPQ), epsilon_spent (the refit's feature-level epsilon; inf for NPQ)}, plus "split": the
    (train, validation, test) sizes.  ``loaded``: (X, y, n_classes) already loaded (else :func:`load`)."""
    import numpy as np

    from bench.lr_tuned import split_indices

    X, y, K = loaded if loaded is not None else load(name, data, max_records, seed)
    tr, va, te = split_indices(y, seed)
    rng = np.random.default_rng([seed, 47])
    out: dict = {"split": (len(tr), len(va), len(te))}
    for method in methods:
        tune_seed, refit_seed = (int(s) for s in rng.integers(0, 2 ** 62, size=2))
        chosen, val = tune(name, X, y, K, method, grid or GRID, tr, va, epsilon, tune_seed, delta)
        r = fit_score(name, X, y, K, method, chosen, tr, te, epsilon, refit_seed, delta)
        out[method] = dict(accuracy=float(r["accuracy"][-1]), auprc=r["auprc"], validation=float(val),
                           chosen=chosen, b=r["b"], beta=r["beta"], epsilon_spent=r["epsilon_spent"])
    return out


def gap_check(pbm_accuracy: float, npq_accuracy: float, points: float = GAP_POINTS) -> dict:
    """{gap_points: NPQ's mean accuracy minus PBM-VFL's in points (x 100), ok: the gap is at most ``points``}."""
    gap = 100.0 * (float(npq_accuracy) - float(pbm_accuracy))
    return dict(gap_points=gap, ok=bool(gap <= points + 1e-9))  # 1e-9: a gap of exactly ``points`` passes


def run(datasets=("digits", "phishing"), epsilons=(200.0,), runs=5, seed=0, data=None, max_records=None,
        grid: dict | None = None, delta: float = DELTA, progress=True) -> dict:
    import torch
    from tqdm import tqdm

    from sqm.mechanism.report import relation_phrase

    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    rows, per_run = [], []
    for name in datasets:
        loaded = load(name, data, max_records, seed)
        for e in epsilons:
            cells: dict[str, list] = {m: [] for m in METHODS}
            for r in tqdm(range(runs), desc=f"pbm-tuned {name} eps {e:g}", disable=not progress, leave=False):
                res = tuned_cell(name, e, seed + r, grid=grid, delta=delta, loaded=loaded)
                for m in METHODS:
                    cells[m].append(res[m])
                    per_run.append(dict(dataset=name, epsilon=e, run=r, method=m, **res[m]))
            rows += cell_rows(name, int(len(loaded[1])), loaded[2], e, cells)
    return dict(protocol=NOT_COUNTED, relation=relation_phrase("embedding", "the server"), delta=delta, b=B,
                embedding_size=EMBEDDING_SIZE, grid=grid or GRID, runs=runs, seed=seed,
                split="stratified 60/20/20 per run", gap_points_allowed=GAP_POINTS, rows=rows, per_run=per_run,
                seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0)


def cell_rows(name: str, n: int, classes: int, epsilon: float, cells: dict) -> list[dict]:
    """The table's rows of one (dataset, epsilon): per method the mean, sample standard deviation and minimum of
    the runs' test accuracies (``cells``: method -> the runs' :func:`tuned_cell` entries), PBM-VFL's with
    :func:`gap_check` against NPQ."""
    import numpy as np

    acc = {m: np.array([v["accuracy"] for v in cells[m]]) for m in METHODS}
    runs = len(acc["pbm"])
    return [dict(dataset=name, clients=PARTIES[name], classes=classes, n=n, epsilon=epsilon, method=m,
                 accuracy=float(acc[m].mean()), accuracy_std=float(acc[m].std(ddof=1)) if runs > 1 else 0.0,
                 accuracy_min=float(acc[m].min()), runs=runs,
                 epsilon_spent=float(max(v["epsilon_spent"] for v in cells[m])),
                 chosen=[v["chosen"] for v in cells[m]], beta=[v["beta"] for v in cells[m]] if m == "pbm" else None,
                 **(gap_check(acc["pbm"].mean(), acc["npq"].mean()) if m == "pbm" else {})) for m in METHODS]


def _chosen(c: dict) -> str:
    return f"lr {c['lr']:g}, h {c['hidden']}" + (f", B {c['batch_size']}" if "batch_size" in c else "") \
        + f", ep {c['epochs']}"


def print_table(rep: dict) -> None:
    print(f"PBM-VFL (b {rep['b']}, beta solved from epsilon per epochs, P {rep['embedding_size']}) and NPQ, tuned "
          f"on validation accuracy, {rep['runs']} runs ({rep['split']}); in process (the simulation)")
    print(f"epsilon: PBM-VFL's feature-level epsilon at delta {rep['delta']:g}, relation {rep['relation']}; "
          f"NPQ: no privacy")
    print(rep["protocol"])
    print(f"{'dataset':14s} {'eps':>5s} {'method':7s} {'accuracy mean +- std':>21s} {'min':>7s} {'gap':>6s} "
          f"{'check':6s} chosen (per run)")
    for r in rep["rows"]:
        gap = f"{r['gap_points']:6.2f}" if "gap_points" in r else " " * 6
        ok = ("pass" if r["ok"] else "FAIL") if "ok" in r else ""
        label = "PBM-VFL" if r["method"] == "pbm" else "NPQ"
        beta = "" if not r.get("beta") else " beta " + ",".join(f"{b:.3g}" for b in r["beta"])
        print(f"{r['dataset']:14s} {r['epsilon']:5g} {label:7s} {r['accuracy']:.4f} +- {r['accuracy_std']:.4f}    "
              f"{r['accuracy_min']:.4f} {gap} {ok:6s} {'; '.join(_chosen(c) for c in r['chosen'])}{beta}")
    print(f"check: PBM-VFL's mean test accuracy within {rep['gap_points_allowed']:g} points of NPQ's; "
          f"{rep['seconds']:.0f} s wall, {rep['cpu_seconds']:.0f} CPU s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", default=["digits", "phishing"], choices=DATASETS,
                   help="data sets (default digits phishing)")
    p.add_argument("--epsilons", nargs="+", type=float, default=[200.0],
                   help="PBM-VFL feature-level epsilons (relation 'embedding'; default 200)")
    p.add_argument("--runs", type=int, default=5, help="runs (splits and seeds) per cell (default 5)")
    p.add_argument("--seed", type=int, default=0, help="first run's seed (default 0)")
    p.add_argument("--max-records", type=int, default=None,
                   help="a stratified subsample of at most this many records per data set (default all)")
    p.add_argument("--data", default=None, help="the data home's folder for file-based sets (default: SQM_DATA's)")
    p.add_argument("--json", help="write the report here")


def cli(args) -> int:
    rep = run(tuple(args.datasets), tuple(args.epsilons), args.runs, args.seed, args.data, args.max_records,
              progress=not getattr(args, "quiet", False))
    return finish(rep, args, print_table)
