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

Grids (:data:`GRID`, the same for both methods): learning rate, hidden width, mini-batch size and epochs; PBM-VFL
also picks its trials b from :data:`PBM_B` (NPQ has none).  A grid point may also name ``embedding_size``.

The privacy level is fixed before any run (``--epsilon``, default :data:`EPSILON`) and holds for every grid point
and every record: it is PBM-VFL's feature-level epsilon (relation "embedding": one client's embedding of one record
changed, not the record's features, against the server; :func:`sqm.mechanism.pbm.privacy_report`) at delta 1e-5;
the sample-level epsilon (every client's embedding of one record changed) of the same releases is printed beside
it.  Two kinds of record, disjoint by the split, are released:

- a training record, once per epoch at the grid point's (b, beta): beta is SOLVED from the epsilon for the point's
  b and epochs (:func:`beta_for_epsilon`: the largest beta <= 1/4 within it), so no grid point spends more;
- a scored record (validation while tuning, test at the refit) ONCE, after training, through a prediction release
  (:func:`score_release`: the b of :data:`SCORE_B` with beta solved for one use whose variance bound
  C^2 M / (4 beta^2 b) is smallest).  Training evaluates no record along the way: ``sqm pbm-vfl`` releases its test
  records after every epoch at the training (b, beta), ``epochs`` releases of which only the last is scored; one
  release at the same per-record epsilon carries far less noise.

Each record's feature-level epsilon is the larger of the two kinds' (a record is of one kind only); both are
reported.  NPQ has no privacy.  Tuning's privacy cost is not counted, for either method alike: each epsilon is
that of the final refit and its scoring.
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
GRID = dict(lr=(0.003, 0.01, 0.03), hidden=(256,), batch_size=(25, 100), epochs=(5, 10))
METHODS = ("pbm", "npq")
PBM_B = (16, 64)  # PBM-VFL's trials b while training: a grid dimension of PBM-VFL's only
SCORE_B = (16, 32, 64)  # the trials b a scored record's one release may use (the smallest variance bound wins)
EPSILON = 200.0  # the feature-level epsilon fixed in advance (the default of --epsilons)
MAX_RECORDS = 3000  # bench utility's PBM-VFL cells: at most this many records per data set (phishing's subsample)
EMBEDDING_SIZE = 16
DELTA = 1e-5
GAP_POINTS = 5.0  # the check: PBM-VFL's mean test accuracy within this many points of NPQ's
NOT_COUNTED = ("tuning's privacy cost is not counted, for either method alike: each epsilon is the final refit's "
               "and its test records' one release; "
               "hyperparameters chosen by validation accuracy (train -> validation), refitted on train, scored on test")
RESULT_KEYS = ("accuracy", "auprc", "validation", "chosen", "b", "beta", "score_b", "score_beta", "epsilon_spent",
               "epsilon_sample")


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


@functools.cache
def score_release(epsilon: float, M: int, P: int, delta: float = DELTA) -> tuple[int, float]:
    """(b, beta) of a scored record's one release at feature-level ``epsilon``: over :data:`SCORE_B`, beta
    solved for one use (:func:`beta_for_epsilon`), the pair of smallest variance bound C^2 M / (4 beta^2 b) (the
    first on ties).  Public quantities only: no data is looked at."""
    from sqm.mechanism import pbm

    pairs = []
    for b in SCORE_B:
        try:
            pairs.append((b, beta_for_epsilon(float(epsilon), b, M, P, 1, delta)))
        except ValueError:
            continue
    if not pairs:
        raise ValueError(f"no scoring release (b in {SCORE_B}) meets feature-level epsilon {epsilon:g}")
    return min(pairs, key=lambda bb: pbm.variance_bound(bb[0], bb[1], M))


def predict_once(trainer, blocks, b: int, beta: float, seed: int):
    """Class probabilities of the records whose client blocks are ``blocks``, each released ONCE through PBM at
    (``b``, ``beta``) with the trained parties of ``trainer`` (a fitted :class:`sqm.apps.pbm_vfl.trainer.PBMVFL`),
    in process; the parties' noise from ``seed`` (never a training seed: :func:`fit_score` derives it)."""
    from sqm.apps.pbm_vfl.trainer import PBMVFL

    cfg = trainer.cfg
    pred = PBMVFL(trainer.clients, trainer.server, b=int(b), beta=float(beta), C=cfg.C, epochs=1,
                  batch_size=cfg.batch_size, delta=cfg.delta, method="pbm", backend="plain", seed=seed,
                  eval_chunk=cfg.eval_chunk)
    return pred.predict_proba(blocks)


def _score_seed(seed: int) -> int:
    """The prediction's seed of a fit with ``seed``: another stream than every training party's."""
    import numpy as np

    return int(np.random.SeedSequence([int(seed), 1]).generate_state(1, np.uint64)[0] >> 2)


def fit_score(name: str, X, y, n_classes: int, method: str, point: dict, fit_idx, eval_idx, epsilon: float,
              seed: int, delta: float = DELTA) -> dict:
    """Train ``method`` at grid ``point`` (lr, hidden, epochs; optionally batch_size, embedding_size and, for
    PBM-VFL, b; else ``sqm pbm-vfl``'s batch, :data:`EMBEDDING_SIZE` and ``PBM_B[0]``) on the records ``fit_idx``
    and score it on ``eval_idx``: {accuracy (a list: NPQ's per epoch on the clean sums; PBM-VFL's one entry, the
    records released once after training by :func:`predict_once` at :func:`score_release`), auprc (binary only),
    b, beta (training), score_b, score_beta (the scoring release), epsilon_spent and epsilon_sample (the larger
    of the training records' and the scored records' feature- and sample-level epsilons)}.  The one place a model
    is trained, so a test can check which records each call sees."""
    import numpy as np

    from sqm.apps.pbm_vfl import VFLConfig, train_vfl
    from sqm.mechanism import pbm

    btr, bev = client_blocks(name, X, fit_idx, eval_idx)
    M, P = len(btr), int(point.get("embedding_size", EMBEDDING_SIZE))
    epochs, b = int(point["epochs"]), int(point.get("b", PBM_B[0]))
    beta = beta_for_epsilon(float(epsilon), b, M, P, epochs, delta) if method == "pbm" else 0.25
    cfg = VFLConfig(method=method, b=b, beta=beta, epochs=epochs, lr=float(point["lr"]),
                    hidden=int(point["hidden"]), embedding_size=P, n_classes=n_classes, delta=delta,
                    batch_size=int(point.get("batch_size", VFLConfig.batch_size)))
    yfit, yev = y[fit_idx], y[eval_idx]
    if method != "pbm":
        r = train_vfl(btr, bev, yfit, yev, cfg, "plain", seed=seed)
        return dict(accuracy=[h["test_accuracy"] for h in r.history], auprc=r.auprc if n_classes == 2 else None,
                    b=None, beta=None, score_b=None, score_beta=None, epsilon_spent=math.inf,
                    epsilon_sample=math.inf)
    # no record to score while training: the scored records are released once, afterwards
    r = train_vfl(btr, [e[:0] for e in bev], yfit, yev[:0], cfg, "plain", seed=seed)
    sb, sbeta = score_release(float(epsilon), M, P, delta)
    probs = predict_once(r.trainer, bev, sb, sbeta, _score_seed(seed))
    auprc = None
    if n_classes == 2:
        from sklearn.metrics import average_precision_score

        auprc = float(average_precision_score(yev, probs[:, 1]))
    trained = pbm.privacy_report(b, beta, M, P, epochs, delta)
    scored = pbm.privacy_report(sb, sbeta, M, P, 1, delta)
    return dict(accuracy=[float(np.mean(probs.argmax(1) == yev))], auprc=auprc, b=b, beta=beta, score_b=sb,
                score_beta=sbeta, epsilon_spent=float(max(trained.epsilon_feature, scored.epsilon_feature)),
                epsilon_sample=float(max(trained.epsilon_sample, scored.epsilon_sample)))


def tune(name: str, X, y, n_classes: int, method: str, grid: dict, tr, va, epsilon: float, seed: int,
         delta: float = DELTA) -> tuple[dict, float]:
    """(the grid point of highest validation accuracy, its accuracy): every point trained on ``tr`` and scored on
    ``va`` only.  NPQ: one run per point at the most epochs, each epoch count read from its history."""
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
               max_records: int | None = None, delta: float = DELTA, loaded=None, pbm_b=PBM_B) -> dict:
    """One run of the protocol (module docstring) on dataset ``name`` at PBM-VFL feature-level ``epsilon``
    with ``seed`` (the split's and the training seeds'): method -> {accuracy (test), auprc (test, binary sets;
    else None), validation (the chosen point's validation accuracy), chosen (the grid point; PBM-VFL's with its b
    from ``pbm_b``), b, beta, score_b, score_beta (PBM; None for NPQ), epsilon_spent, epsilon_sample (the
    refit's and its scoring's, :func:`fit_score`; inf for NPQ)}, plus "split": the (train, validation, test)
    sizes.  ``loaded``: (X, y, n_classes) already loaded (else :func:`load`)."""
    import numpy as np

    from bench.lr_tuned import split_indices

    X, y, K = loaded if loaded is not None else load(name, data, max_records, seed)
    tr, va, te = split_indices(y, seed)
    rng = np.random.default_rng([seed, 47])
    out: dict = {"split": (len(tr), len(va), len(te))}
    for method in methods:
        tune_seed, refit_seed = (int(s) for s in rng.integers(0, 2 ** 62, size=2))
        g = dict(grid or GRID)
        if method == "pbm" and "b" not in g:
            g["b"] = tuple(pbm_b)
        chosen, val = tune(name, X, y, K, method, g, tr, va, epsilon, tune_seed, delta)
        r = fit_score(name, X, y, K, method, chosen, tr, te, epsilon, refit_seed, delta)
        out[method] = dict(accuracy=float(r["accuracy"][-1]), auprc=r["auprc"], validation=float(val),
                           chosen=chosen, **{k: r[k] for k in RESULT_KEYS[4:]})
    return out


def gap_check(pbm_accuracy: float, npq_accuracy: float, points: float = GAP_POINTS) -> dict:
    """{gap_points: NPQ's mean accuracy minus PBM-VFL's in points (x 100), ok: the gap is at most ``points``}."""
    gap = 100.0 * (float(npq_accuracy) - float(pbm_accuracy))
    return dict(gap_points=gap, ok=bool(gap <= points + 1e-9))  # 1e-9: a gap of exactly ``points`` passes


def relations() -> dict:
    """The words of the two printed epsilons' relations, against the server."""
    from sqm.mechanism.report import relation_phrase

    return dict(relation=relation_phrase("embedding", "the server"),
                relation_sample=relation_phrase("sample", "the server"))


def run(datasets=("digits", "phishing"), epsilons=(EPSILON,), runs=5, seed=0, data=None, max_records=None,
        grid: dict | None = None, delta: float = DELTA, progress=True, pbm_b=PBM_B) -> dict:
    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    rows, per_run = [], []
    for name in datasets:
        loaded = load(name, data, max_records, seed)
        for e in epsilons:
            cells: dict[str, list] = {m: [] for m in METHODS}
            for r in tqdm(range(runs), desc=f"pbm-tuned {name} eps {e:g}", disable=not progress, leave=False):
                res = tuned_cell(name, e, seed + r, grid=grid, delta=delta, loaded=loaded, pbm_b=pbm_b)
                for m in METHODS:
                    cells[m].append(res[m])
                    per_run.append(dict(dataset=name, epsilon=e, run=r, method=m, **res[m]))
            rows += cell_rows(name, int(len(loaded[1])), loaded[2], e, cells)
    return dict(protocol=NOT_COUNTED, **relations(), delta=delta, pbm_b=list(pbm_b), score_b=list(SCORE_B),
                embedding_size=EMBEDDING_SIZE, grid=grid or GRID, runs=runs, seed=seed,
                split="stratified 60/20/20 per run", gap_points_allowed=GAP_POINTS, rows=rows, per_run=per_run,
                seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0)


def cell_rows(name: str, n: int, classes: int, epsilon: float, cells: dict) -> list[dict]:
    """The table's rows of one (dataset, epsilon): per method the mean, sample standard deviation and minimum of
    the runs' test accuracies (``cells``: method -> the runs' :func:`tuned_cell` entries), the largest epsilons
    spent, PBM-VFL's with its releases' (b, beta) per run and :func:`gap_check` against NPQ."""
    import numpy as np

    acc = {m: np.array([v["accuracy"] for v in cells[m]]) for m in METHODS}
    runs = len(acc["pbm"])

    def per_run(m, k):
        return [v[k] for v in cells[m]] if m == "pbm" else None

    return [dict(dataset=name, clients=PARTIES[name], classes=classes, n=n, epsilon=epsilon, method=m,
                 accuracy=float(acc[m].mean()), accuracy_std=float(acc[m].std(ddof=1)) if runs > 1 else 0.0,
                 accuracy_min=float(acc[m].min()), runs=runs,
                 epsilon_spent=float(max(v["epsilon_spent"] for v in cells[m])),
                 epsilon_sample=float(max(v.get("epsilon_sample", math.inf) for v in cells[m])),
                 chosen=[v["chosen"] for v in cells[m]], beta=per_run(m, "beta"),
                 score=[(v["score_b"], v["score_beta"]) for v in cells[m]] if m == "pbm" else None,
                 **(gap_check(acc["pbm"].mean(), acc["npq"].mean()) if m == "pbm" else {})) for m in METHODS]


def _chosen(c: dict) -> str:
    return f"lr {c['lr']:g}, h {c['hidden']}" + (f", B {c['batch_size']}" if "batch_size" in c else "") \
        + f", ep {c['epochs']}" + (f", b {c['b']}" if "b" in c else "")


def print_table(rep: dict) -> None:
    print(f"PBM-VFL (trials b in {rep['pbm_b']} tuned, beta solved from epsilon per b and epochs; each scored record "
          f"released once, b in {rep['score_b']} with beta solved for one use, the smallest variance bound; P "
          f"{rep['embedding_size']}) and NPQ, tuned on validation accuracy, {rep['runs']} runs ({rep['split']}); in "
          "process (the simulation)")
    print(f"eps: PBM-VFL's feature-level epsilon at delta {rep['delta']:g} ({rep['relation']}), fixed in advance; "
          f"spent: the largest over runs of the training records' and the scored records' (disjoint records); "
          f"sample eps: the same releases' sample-level epsilon ({rep['relation_sample']}); NPQ: no privacy")
    print(rep["protocol"])
    print(f"{'dataset':14s} {'eps':>5s} {'method':7s} {'accuracy mean +- std':>21s} {'min':>7s} {'gap':>6s} "
          f"{'check':6s} {'spent':>6s} {'sample':>7s} chosen (per run)")
    for r in rep["rows"]:
        gap = f"{r['gap_points']:6.2f}" if "gap_points" in r else " " * 6
        ok = ("pass" if r["ok"] else "FAIL") if "ok" in r else ""
        label = "PBM-VFL" if r["method"] == "pbm" else "NPQ"
        beta = "" if not r.get("beta") else " beta " + ",".join(f"{b:.3g}" for b in r["beta"])
        score = "" if not r.get("score") else "; scored once at " + ",".join(
            f"b {b} beta {x:.3g}" for b, x in dict.fromkeys(tuple(s) for s in r["score"]))
        print(f"{r['dataset']:14s} {r['epsilon']:5g} {label:7s} {r['accuracy']:.4f} +- {r['accuracy_std']:.4f}    "
              f"{r['accuracy_min']:.4f} {gap} {ok:6s} {r['epsilon_spent']:6.4g} "
              f"{r.get('epsilon_sample', math.inf):7.4g} "
              f"{'; '.join(_chosen(c) for c in r['chosen'])}{beta}{score}")
    print(f"check: PBM-VFL's mean test accuracy within {rep['gap_points_allowed']:g} points of NPQ's; "
          f"{rep['seconds']:.0f} s wall, {rep['cpu_seconds']:.0f} CPU s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", default=["digits", "phishing"], choices=DATASETS,
                   help="data sets (default digits phishing)")
    p.add_argument("--epsilons", nargs="+", type=float, default=[EPSILON],
                   help=f"PBM-VFL feature-level epsilons, fixed in advance (relation 'embedding'; default {EPSILON:g})")
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
