"""Utility over many public real data sets: SQM's PCA, logistic and linear regression and PBM-VFL, each beside its
reference in the same run, over epsilons and runs.

    python -m bench utility                                    # every data set and method, epsilon 0.5..8
    python -m bench utility --methods pca linreg --runs 3 --epsilons 1 4 --json u.json --plot u.png
    sqm bench utility ...                                      # the same, from a source checkout

Data sets (offline: scikit-learn's bundled files and the data home, :func:`sqm.data.datasets.load_dataset`), each
with the tasks it serves (:data:`TASKS`): rows scaled to norm <= 1 (PCA, linear regression) or standardized on the
training split (logistic regression, :func:`bench.lr_tuned.run_split`); the larger sets drawn at ``--records``
records (a stratified or uniform subsample with seed 0, said in the output).

Per method and cell (data set x epsilon), ``--runs`` runs for logistic regression (its DPSGD grid is the cost;
:data:`SMALL_FACTOR` times as many on a set with fewer than :data:`SMALL_TEST` test records, :func:`lr_runs`),
``--pca-runs`` and ``--linreg-runs`` for the cheap cells, each run with its own split and seeds (run r: seed r):

- PCA: captured variance ||X V_k||_F^2 at k = min(5, d - 1) of SQM-PCA (its defaults, in-process simulation of the
  parties' programs) over central-DP PCA's (Analyze Gauss, :func:`sqm.apps.pca.central_dp_pca`, the tightest
  Gaussian calibration), means over the runs; nothing tuned (SQM's gamma is its default).
- logistic regression: :func:`bench.lr_tuned.run_split`: a stratified 60/20/20 split; DPSGD's grid (batch, epochs,
  learning rate, clip) chosen on the validation split's AUC, every method's decision threshold on the validation
  split's accuracy; SQM-LR tuned alike (:data:`bench.lr_tuned.SQM_GRID`: the check's SQM-LR) and with its defaults
  beside; scikit-learn's non-private model.  Labels: the data set's largest
  class against the rest.
- linear regression: a 75/25 split; SQM linear regression (defaults) beside AdaSSP (the central-DP
  sufficient-statistics baseline), OLS and the training mean, test R^2.  Targets: :data:`LINREG_TARGETS`.
- PBM-VFL: :mod:`bench.pbm_tuned`'s protocol (:func:`pbm_cell`): PBM-VFL and NPQ (no quantization, no noise)
  tuned alike on validation, test accuracy; PBM-VFL's feature-level epsilon fixed in advance, its sample-level one
  beside it, each printed with its relation.

The done-when checks of each cell: SQM-PCA >= 99% of central DP; SQM-LR within 2 points of tuned DPSGD in accuracy
and AUC; SQM linear regression within 0.05 R^2 of AdaSSP and not below the mean; PBM-VFL within 5 points of NPQ.
Data sets on which a default was chosen are marked (:data:`USED_FOR_DEFAULTS`); the others were never used to
choose anything.  Tuning's privacy cost is not counted, for any method alike.  Every fit runs in one thread
(:func:`bench.common.one_thread`).
"""
from __future__ import annotations

import argparse
import math
import time

from bench import linreg_utility, lr_tuned
from bench.common import finish, one_thread

DATASETS = ("breast_cancer", "digits", "wine", "iris", "diabetes", "phishing", "credit_default", "adult",
            "citeseer", "adult-imbalanced")
METHODS = ("pca", "lr", "linreg", "pbm")
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
# data set -> the methods run on it
TASKS = {"breast_cancer": ("pca", "lr", "linreg"), "digits": ("pca", "lr", "pbm"), "wine": ("pca", "lr", "linreg"),
         "iris": ("pca", "lr"), "diabetes": ("pca", "linreg"), "phishing": ("pca", "lr", "pbm"),
         "credit_default": ("pca", "lr", "linreg"), "adult": ("pca", "lr", "linreg"), "citeseer": ("pca",),
         "adult-imbalanced": ("lr",)}
# the hard case of logistic regression: imbalanced and wide, as Caravan (6% positives, 85 features, 2,000 records)
IMBALANCED = dict(source="adult", records=2000, positive_share=0.06)
# linear regression's target (None: the data set's own, else the named feature column, removed from X): those of
# bench/linreg_utility.SETS, one per data set
LINREG_TARGETS = {name: target for name, (target, _) in linreg_utility.SETS.items()
                  if name not in linreg_utility.SOURCES}
# the data sets on which each method's defaults were chosen (bench/lr_tuned.USED_FOR_DEFAULTS,
# bench/linreg_utility.SETS, the PBM-VFL settings); every other cell is held out
USED_FOR_DEFAULTS = {"lr": tuple(n for n, used in lr_tuned.USED_FOR_DEFAULTS.items() if used),
                     "linreg": tuple(n for n, (_, used) in linreg_utility.SETS.items() if used),
                     "pbm": ("digits", "phishing"), "pca": ()}
PCA_K = 5
PCA_PARTIES = 2
TARGETS = {"pca": 0.99, "lr": 2.0, "linreg": 0.05, "pbm": 5.0}
# logistic regression on a set whose test split holds fewer than SMALL_TEST records runs SMALL_FACTOR times --runs:
# there one test record moves the accuracy by more than the target's 2 points, and at 10 runs the gap's standard
# error (about 1.3 points on wine) is the size of the target (wine and iris: 36 and 30 test records)
SMALL_TEST = 50
SMALL_FACTOR = 3
NOT_COUNTED = "tuning's privacy cost is not counted, for any method alike"


def met(method: str, row: dict) -> bool:
    """Whether a cell meets its done-when check (:data:`TARGETS`): PCA: SQM's mean over the reference's >= 0.99;
    LR: the tuned DPSGD's lead <= 2 points in accuracy and in AUC; linreg: AdaSSP's lead <= 0.05 R^2 and SQM's mean
    R^2 not below the mean's; PBM-VFL: NPQ's lead <= 5 points."""
    if method == "pca":
        return bool(row["sqm"]["mean"] >= TARGETS["pca"] * row["reference"]["mean"])
    if method == "lr":
        return bool(row["gap_accuracy_points"] <= TARGETS["lr"] and row["gap_auc_points"] <= TARGETS["lr"])
    if method == "linreg":
        return bool(row["reference"]["mean"] - row["sqm"]["mean"] <= TARGETS["linreg"]
                    and row["sqm"]["mean"] >= row["mean"]["mean"])
    if method == "pbm":
        return bool(100 * (row["reference"]["mean"] - row["sqm"]["mean"]) <= TARGETS["pbm"])
    raise ValueError(f"unknown method {method!r}")


def lr_runs(y, runs: int) -> int:
    """The logistic-regression runs of a cell on labels ``y`` at ``runs`` asked: :data:`SMALL_FACTOR` times as many
    when its test split (:func:`bench.lr_tuned.split_indices`) has fewer than :data:`SMALL_TEST` records."""
    import numpy as np

    test = len(lr_tuned.split_indices((np.asarray(y) == np.max(y)).astype(np.int64), 0)[2])
    return runs * SMALL_FACTOR if test < SMALL_TEST else runs


def load(name: str, records: int):
    """(X, y, feature names) of ``name``, at most ``records`` records (a stratified subsample for labelled
    classification sets, uniform otherwise; seed 0)."""
    import numpy as np

    from sqm.data.datasets import load_dataset

    if name == "adult-imbalanced":
        return imbalanced()
    ds = load_dataset(name)
    X, y = np.asarray(ds.X, np.float64), np.asarray(ds.y)
    if len(y) > records:
        from sklearn.model_selection import train_test_split

        strat = y if len(np.unique(y)) <= 50 else None
        keep, _ = train_test_split(np.arange(len(y)), train_size=records, random_state=0, stratify=strat)
        X, y = X[np.sort(keep)], y[np.sort(keep)]
    return X, y, list(ds.feature_names)


def imbalanced():
    """(X, y, feature names) of the hard case (:data:`IMBALANCED`): adult's records (its public encoding, 104
    columns), 120 positives (income > 50K) and 1,880 negatives drawn without replacement with seed 0."""
    import numpy as np

    from sqm.data.datasets import load_dataset

    ds = load_dataset(IMBALANCED["source"])
    X, y = np.asarray(ds.X, np.float64), np.asarray(ds.y)
    pos = int(round(IMBALANCED["records"] * IMBALANCED["positive_share"]))
    rng = np.random.default_rng(0)
    keep = np.sort(np.r_[rng.choice(np.flatnonzero(y == y.max()), pos, replace=False),
                         rng.choice(np.flatnonzero(y != y.max()), IMBALANCED["records"] - pos, replace=False)])
    return X[keep], y[keep], list(ds.feature_names)


def _summary(values) -> dict:
    import numpy as np

    v = np.asarray(values, np.float64)
    return {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()), "runs": int(v.size)}


# ----- one cell per method: (X, y, names, epsilon, delta, runs) -> row ----------------------------------------
def pca_cell(X, y, names, epsilon: float, delta: float, runs: int) -> dict:
    import numpy as np

    from bench.pca_utility import prefix_utilities
    from sqm.apps.pca import SQMPCA, central_dp_pca
    from sqm.data.datasets import scale_rows
    from sqm.mechanism.rng import spawn_seeds
    from sqm.mechanism.vertical import VerticalData

    X = scale_rows(X, 1.0)
    k = max(1, min(PCA_K, X.shape[1] - 1))
    data = VerticalData.split(X, PCA_PARTIES)
    sqm, central, eps = [], [], math.nan
    for s in spawn_seeds(0, runs):
        s_c, s_s = s.spawn(2)
        central.append(prefix_utilities(X, central_dp_pca(X, k, epsilon, delta, seed=s_c).components, [k])[0])
        m = SQMPCA(k, epsilon, delta, backend="plain", seed=s_s).fit(data)
        sqm.append(prefix_utilities(X, m.components_.T, [k])[0])
        eps = m.report_.epsilon_server
    ratio = float(np.mean(sqm) / np.mean(central))
    return {"metric": f"captured variance, k = {k}", "sqm": _summary(sqm), "reference": _summary(central),
            "reference_name": "central DP", "ratio": ratio, "epsilon_spent": eps}


def ratio_se(row: dict) -> float:
    """The standard error of a PCA cell's ratio of means from its runs' spread
    (:func:`bench.pca_utility.ratio_se`, the delta method): how far the ratio can sit from its expectation by
    sampling alone."""
    from bench.pca_utility import ratio_se as per_k

    s, c = row["sqm"], row["reference"]
    return per_k([s["mean"]], [s["std"]], [c["mean"]], [c["std"]], s["runs"])[0]


LR_METHODS = ("dpsgd", "sqm-tuned", "sqm-default", "nonprivate")  # lr_cell's, from bench/lr_tuned.METHODS


def lr_cell(X, y, names, epsilon: float, delta: float, runs: int, methods: dict | None = None) -> dict:
    """Logistic regression's cell: per run, :func:`bench.lr_tuned.run_split` with DPSGD and SQM-LR each tuned on
    the validation split (``sqm-tuned``: :data:`bench.lr_tuned.SQM_GRID`), SQM-LR with its defaults
    (``sqm-default``) and the non-private model; the check compares the tuned SQM-LR with the tuned DPSGD
    (``methods``: :data:`LR_METHODS` from :data:`bench.lr_tuned.METHODS` unless given, for tests).  ``per_run``: the
    tuned SQM-LR's and DPSGD's test accuracy and AUC in each run, and how many grid points tied at the top of its
    validation scores (1: none; :data:`bench.lr_tuned.TIE_DRAWS`), beside ``sqm_chosen`` and ``reference_chosen``."""
    import numpy as np

    y = (y == np.max(y)).astype(np.int64)
    methods = methods or {m: lr_tuned.METHODS[m] for m in LR_METHODS}
    per: dict[str, dict[str, list]] = {m: {"accuracy": [], "auc": [], "chosen": [], "tied": []} for m in methods}
    eps = math.nan
    for r in range(runs):
        split = lr_tuned.split_indices(y, r)
        res = lr_tuned.run_split(X, y, split, epsilon, delta, r, methods, standardize=True)
        for m, v in res.items():
            per[m]["accuracy"].append(v["accuracy"])
            per[m]["auc"].append(v["auc"])
            per[m]["chosen"].append(v["chosen"])
            per[m]["tied"].append(v["tied"])
        eps = res["sqm-tuned"]["epsilon_spent"]
    sq, sd, dp = per["sqm-tuned"], per["sqm-default"], per["dpsgd"]
    gap_acc = 100 * (np.mean(dp["accuracy"]) - np.mean(sq["accuracy"]))
    gap_auc = 100 * (np.mean(dp["auc"]) - np.mean(sq["auc"]))
    return {"metric": "test accuracy / AUC", "sqm": _summary(sq["accuracy"]), "sqm_auc": _summary(sq["auc"]),
            "sqm_name": "SQM-LR tuned on validation", "sqm_chosen": sq["chosen"],
            "sqm_default": _summary(sd["accuracy"]), "sqm_default_auc": _summary(sd["auc"]),
            "reference": _summary(dp["accuracy"]), "reference_auc": _summary(dp["auc"]), "reference_name": "DPSGD",
            "reference_chosen": dp["chosen"],
            "nonprivate": _summary(per["nonprivate"]["accuracy"]),
            "nonprivate_auc": _summary(per["nonprivate"]["auc"]), "positive_share": float(np.mean(y)),
            "gap_accuracy_points": float(gap_acc), "gap_auc_points": float(gap_auc),
            "default_gap_accuracy_points": float(100 * (np.mean(dp["accuracy"]) - np.mean(sd["accuracy"]))),
            "default_gap_auc_points": float(100 * (np.mean(dp["auc"]) - np.mean(sd["auc"]))), "epsilon_spent": eps,
            "per_run": {m: {"accuracy": [float(v) for v in per[m]["accuracy"]],
                            "auc": [float(v) for v in per[m]["auc"]],
                            "tied": [int(v) for v in per[m]["tied"]]} for m in ("sqm-tuned", "dpsgd")}}


def linreg_cell(X, y, names, epsilon: float, delta: float, runs: int, name: str = "") -> dict:
    import warnings

    import numpy as np
    from sklearn.model_selection import train_test_split

    from sqm.apps.linreg import SQMLinearRegression
    from sqm.apps.linreg.baselines import adassp, nonprivate_linreg
    from sqm.apps.linreg.experiment import scores
    from sqm.mechanism.calibration import gaussian_sigma
    from sqm.mechanism.rng import spawn_seeds

    target = LINREG_TARGETS[name]
    X, y = linreg_utility.regression_task(X, y, names, target)
    warnings.filterwarnings("ignore", message="the fitted model did not beat the mean")
    sqm, ada, ols, mean, dp_mean, eps = [], [], [], [], [], math.nan
    # the mean released alone by the Gaussian mechanism with the whole budget (zero-out: 1'y moves by |y| <= 1, the
    # record count public), the tightest calibration: what releasing the mean alone costs
    mean_sigma = gaussian_sigma(1.0, epsilon, delta)
    for r, s in enumerate(spawn_seeds(0, runs)):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=r)
        s_s, s_a, s_m = s.spawn(3)
        m = SQMLinearRegression(epsilon=epsilon, delta=delta, backend="plain", n_parties=2, seed=s_s).fit(Xtr, ytr)
        sqm.append(scores(m.coef_, m.intercept_, Xte, yte)["r2"])
        eps = m.report_.epsilon_server
        a = adassp(Xtr, ytr, epsilon, delta, seed=s_a)
        ada.append(scores(a["coef"], a["intercept"], Xte, yte)["r2"])
        o = nonprivate_linreg(Xtr, ytr)
        ols.append(scores(o["coef"], o["intercept"], Xte, yte)["r2"])
        mean.append(scores(np.zeros(X.shape[1]), float(np.mean(ytr)), Xte, yte)["r2"])
        noisy = float(np.mean(ytr)) + float(np.random.default_rng(s_m).normal(0.0, mean_sigma)) / len(ytr)
        dp_mean.append(scores(np.zeros(X.shape[1]), noisy, Xte, yte)["r2"])
    gap = float(np.mean(ada) - np.mean(sqm))
    return {"metric": "test R^2", "target": target or "its own", "sqm": _summary(sqm), "reference": _summary(ada),
            "reference_name": "AdaSSP", "nonprivate": _summary(ols), "mean": _summary(mean),
            "dp_mean": _summary(dp_mean), "gap_r2": gap,
            "epsilon_spent": eps}


def pbm_cell(name: str, runs: int) -> dict:
    """PBM-VFL against NPQ by :mod:`bench.pbm_tuned`'s protocol, ``runs`` runs (run r: seed r): both tuned alike on
    validation over its grid (PBM-VFL also over its trials b, beta solved from the epsilon), at PBM-VFL's
    feature-level epsilon fixed in advance (:data:`bench.pbm_tuned.EPSILON`; every record's, the scored records'
    one release included), at most :data:`bench.pbm_tuned.MAX_RECORDS` records (a stratified subsample)."""
    import numpy as np
    import torch

    from bench import pbm_tuned

    torch.set_num_threads(1)  # as the party processes run
    loaded = pbm_tuned.load(name, None, pbm_tuned.MAX_RECORDS, 0)
    cells: dict[str, list] = {m: [] for m in pbm_tuned.METHODS}
    for r in range(runs):
        res = pbm_tuned.tuned_cell(name, pbm_tuned.EPSILON, r, loaded=loaded)
        for m in cells:
            cells[m].append(res[m])
    pbm, npq = ([c["accuracy"] for c in cells[m]] for m in ("pbm", "npq"))
    gap = 100 * float(np.mean(npq) - np.mean(pbm))
    return {"metric": "test accuracy", "records": int(len(loaded[1])),
            "setting": dict(epsilon=pbm_tuned.EPSILON, grid=pbm_tuned.GRID, pbm_b=pbm_tuned.PBM_B,
                            score_b=pbm_tuned.SCORE_B, tuned="on validation, both methods alike"),
            "chosen": {m: [c["chosen"] for c in cells[m]] for m in cells},
            "releases": [dict(b=c["b"], beta=c["beta"], score_b=c["score_b"], score_beta=c["score_beta"])
                         for c in cells["pbm"]],
            "sqm": _summary(pbm), "reference": _summary(npq), "reference_name": "NPQ (tuned alike)",
            "gap_points": gap, "epsilon_spent": max(c["epsilon_spent"] for c in cells["pbm"]),
            "epsilon_sample": max(c["epsilon_sample"] for c in cells["pbm"])}


def run(datasets=DATASETS, methods=METHODS, epsilons=EPSILONS, runs: int = 10, pbm_runs: int = 5,
        records: int = 5000, delta: float = 1e-5, progress: bool = True, pca_runs: int = 100,
        linreg_runs: int = 100) -> dict:
    with one_thread():
        return _run(datasets, methods, epsilons, runs, pbm_runs, records, delta, progress, pca_runs, linreg_runs)


def _run(datasets, methods, epsilons, runs: int, pbm_runs: int, records: int, delta: float, progress: bool,
         pca_runs: int, linreg_runs: int) -> dict:
    from tqdm import tqdm

    t0, c0 = time.perf_counter(), time.process_time()
    cells = [(d, m) for d in datasets for m in methods if m in TASKS[d]]
    total = sum(1 if m == "pbm" else len(epsilons) for _, m in cells)
    bar = tqdm(total=total, desc="utility", disable=not progress)
    rows, loaded = [], {}
    for name, method in cells:
        if name not in loaded:
            loaded = {name: load(name, records)}
        X, y, names = loaded[name]
        base = dict(dataset=name, method=method, records=int(len(y)), d=int(X.shape[1]),
                    used_for_defaults=name in USED_FOR_DEFAULTS[method])
        if method == "pbm":
            bar.set_postfix_str(f"{name} pbm")
            row = pbm_cell(name, pbm_runs)
            rows.append(dict(base, epsilon=None, met=met(method, row), **row))
            bar.update()
            continue
        for e in epsilons:
            bar.set_postfix_str(f"{name} {method} eps {e:g}")
            if method == "pca":
                row = pca_cell(X, y, names, e, delta, pca_runs)
            elif method == "lr":
                row = lr_cell(X, y, names, e, delta, lr_runs(y, runs))
            else:
                row = linreg_cell(X, y, names, e, delta, linreg_runs, name)
            rows.append(dict(base, epsilon=e, met=met(method, row), **row))
            bar.update()
    bar.close()
    from sqm.mechanism.report import ZERO_OUT, relation_phrase

    return {"rows": rows, "delta": delta, "runs": runs, "pbm_runs": pbm_runs, "pca_runs": pca_runs,
            "linreg_runs": linreg_runs, "records": records,
            "targets": TARGETS, "protocol": NOT_COUNTED, "relation": relation_phrase(ZERO_OUT, "the server"),
            "pbm_relation": (f"eps spent: {relation_phrase('embedding', 'the server')}; sample eps: "
                             f"{relation_phrase('sample', 'the server')}"),
            "all_met": all(r["met"] for r in rows), "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0}


def _pm(s: dict, spec: str = ".3f") -> str:
    return f"{s['mean']:{spec}} +- {s['std']:{spec}}"


def print_table(rep: dict) -> None:
    from sqm.cli.tables import render_table

    print(f"utility over real data sets: mean +- std over each cell's runs, delta {rep['delta']:g}, at most "
          f"{rep['records']:,} records per set (n: those used); {rep['protocol']}; * a set on which the method's "
          "defaults were chosen")
    labels = {"pca": "PCA: SQM / central DP", "lr": "LR: accuracy, AUC (SQM, DPSGD tuned)",
              "linreg": "linreg: test R^2 (SQM, AdaSSP, mean)", "pbm": "PBM-VFL: accuracy (PBM, NPQ)"}
    for method in METHODS:
        rows = [r for r in rep["rows"] if r["method"] == method]
        if not rows:
            continue
        table = []
        for r in rows:
            t = {"set": r["dataset"] + ("*" if r["used_for_defaults"] else ""), "n": r["records"], "d": r["d"],
                 "runs": r["sqm"]["runs"], "epsilon": "-" if r["epsilon"] is None else f"{r['epsilon']:g}",
                 "eps spent": r["epsilon_spent"], "SQM": _pm(r["sqm"]), "reference": _pm(r["reference"]),
                 "worst SQM": r["sqm"]["min"], "met": "yes" if r["met"] else "NO"}
            if method == "pca":
                t["ratio +- se"] = f"{r['ratio']:.4f} +- {ratio_se(r):.4f}"
            elif method == "lr":
                t["SQM AUC"], t["ref AUC"] = _pm(r["sqm_auc"]), _pm(r["reference_auc"])
                t["gap acc/AUC"] = f"{r['gap_accuracy_points']:+.1f}/{r['gap_auc_points']:+.1f}"
                if "sqm_default" in r:  # SQM-LR with its defaults, beside (not checked)
                    t["default acc/AUC"] = f"{r['sqm_default']['mean']:.3f}/{r['sqm_default_auc']['mean']:.3f}"
            elif method == "linreg":
                t["mean"], t["OLS"] = r["mean"]["mean"], r["nonprivate"]["mean"]
                if "dp_mean" in r:
                    t["DP mean"] = r["dp_mean"]["mean"]
            else:
                t["gap"] = f"{r['gap_points']:+.1f}"
                t["sample eps"] = r["epsilon_sample"]
            table.append(t)
        if method == "lr" and any("sqm_default" in r for r in rows):
            labels["lr"] = "LR: accuracy, AUC (SQM-LR and DPSGD tuned on validation; SQM-LR's defaults beside)"
        print(f"\n{labels[method]}")
        print(render_table(table, [(k, k, ".4g") if k in ("eps spent", "worst SQM", "mean", "OLS", "DP mean",
                                                        "sample eps") else k for k in table[0]]))
        if method == "linreg" and any("dp_mean" in r for r in rows):
            print("  DP mean: the training mean released alone by the Gaussian mechanism with the whole budget "
                  "(tightest calibration, the record count public): what releasing the mean alone costs")
        relation = rep["pbm_relation"] if method == "pbm" else rep["relation"]
        print(f"  every epsilon above: {relation}")
    print(f"\nall checks met: {rep['all_met']}  ({rep['seconds']:.0f} s wall, {rep['cpu_seconds']:.0f} CPU s)")


def plot(rep: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in ("pca", "lr", "linreg") if any(r["method"] == m for r in rep["rows"])]
    if not methods:
        return
    fig, axes = plt.subplots(1, len(methods), figsize=(5 * len(methods), 4), squeeze=False)
    for ax, method in zip(axes[0], methods, strict=True):
        rows = [r for r in rep["rows"] if r["method"] == method]
        for k, name in enumerate(dict.fromkeys(r["dataset"] for r in rows)):
            rs = [r for r in rows if r["dataset"] == name]
            e = [r["epsilon"] for r in rs]
            color = f"C{k}"
            if method == "pca":
                ax.plot(e, [r["ratio"] for r in rs], "-o", color=color, label=name)
            else:
                ax.plot(e, [r["sqm"]["mean"] for r in rs], "-o", color=color, label=name)
                ax.plot(e, [r["reference"]["mean"] for r in rs], "--", color=color)
        ax.set_xscale("log", base=2)
        ax.set(xlabel="epsilon (zero-out)", title={"pca": "PCA: SQM / central DP", "lr": "LR accuracy: SQM (solid), "
                                                   "DPSGD (dashed)", "linreg": "R^2: SQM (solid), AdaSSP (dashed)"}
               [method])
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


BLOCK = ("<!-- generated:utility (python -m bench utility ... --page FILE) -->", "<!-- end:utility -->")


def printed(rep: dict) -> str:
    """What :func:`print_table` prints for ``rep``."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_table(rep)
    return buf.getvalue()


def write_page(path: str, rep: dict) -> None:
    """Replace the text between the :data:`BLOCK` markers of the page ``path`` by the printed tables of ``rep``
    (a fenced block): the page shows exactly what the command printed."""
    from pathlib import Path

    page = Path(path)
    text = page.read_text(encoding="utf-8")
    start, end = text.index(BLOCK[0]) + len(BLOCK[0]), text.index(BLOCK[1])
    page.write_text(text[:start] + "\n\n```text\n" + printed(rep).strip("\n") + "\n```\n\n" + text[end:],
                    encoding="utf-8")


def merge(paths) -> dict:
    """One report from the JSON documents of several runs (``--json`` of each): their rows in the bench's order
    (method, then data set as :data:`DATASETS`, then epsilon; a cell in two runs kept from the last), the checks
    over all of them; runs and records as each row says; the wall and CPU seconds of the runs that still hold a
    shown cell (a run whose every cell a later one replaced is listed, ``shown`` false, and not timed)."""
    import json
    from pathlib import Path

    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    reps = [d["details"] for d in docs]
    first = reps[0]
    cells = {(r["method"], r["dataset"], r["epsilon"]): (i, r) for i, rep in enumerate(reps) for r in rep["rows"]}
    shown = sorted({i for i, _ in cells.values()})  # the runs that still hold a shown cell: their time is the rows'

    def order(key):
        method, dataset, epsilon = key
        return (METHODS.index(method), DATASETS.index(dataset), -1.0 if epsilon is None else epsilon)

    rows = [cells[k][1] for k in sorted(cells, key=order)]
    return dict(first, rows=rows, records=max(rep["records"] for rep in reps), all_met=all(r["met"] for r in rows),
                seconds=sum(reps[i]["seconds"] for i in shown), cpu_seconds=sum(reps[i]["cpu_seconds"] for i in shown),
                merged=[{"file": Path(p).name, "parameters": d["parameters"], "shown": i in shown}
                        for i, (p, d) in enumerate(zip(paths, docs, strict=True))])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS),
                   help="data sets (default: all " + str(len(DATASETS)) + ")")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="methods (default: all)")
    p.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS),
                   help="epsilons (default 0.5 1 2 4 8)")
    p.add_argument("--runs", type=int, default=10,
                   help=f"runs per logistic-regression cell (default 10; {SMALL_FACTOR} times as many on a set with "
                        f"fewer than {SMALL_TEST} test records: wine, iris)")
    p.add_argument("--pca-runs", type=int, default=100,
                   help="runs per PCA cell (default 100: a cell takes seconds on the small sets, and at 10 runs the "
                        "ratio's standard error, about 0.02 at epsilon 0.5, is twice the target's 1%% margin)")
    p.add_argument("--linreg-runs", type=int, default=100,
                   help="runs per linear-regression cell (default 100: cheap, and the small sets' R^2 varies by "
                        "0.1 between splits)")
    p.add_argument("--pbm-runs", type=int, default=5, help="PBM-VFL seeds per setting (default 5)")
    p.add_argument("--records", type=int, default=5000,
                   help="at most this many records per data set (a subsample with seed 0; default 5000)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--plot", help="write a PNG (one panel per method) here")
    p.add_argument("--page", metavar="FILE", help="also write the printed tables into this markdown page, between "
                                                  "its generated:utility markers")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="run nothing: print (and write, plot) one report "
                                                              "from these runs' --json files")


def cli(args) -> int:
    rep = merge(args.merge) if args.merge else None
    if rep is None:
        rep = run(tuple(args.datasets), tuple(args.methods), tuple(args.epsilons), args.runs, args.pbm_runs,
                  args.records, args.delta, progress=not args.quiet, pca_runs=args.pca_runs,
                  linreg_runs=args.linreg_runs)
    if args.page:
        write_page(args.page, rep)
    return finish(rep, args, print_table, plot)
