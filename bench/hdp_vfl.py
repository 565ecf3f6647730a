"""HDP-VFL privacy-accuracy trade-off: the paper's Figure 1 (three datasets) and Figure 2 (e and k on breast cancer).

    python -m bench hdp-vfl --json hdp.json --plot hdp.png      # reduced grid (about a minute)
    python -m bench hdp-vfl --full --json hdp.json --plot hdp.png     # the paper's 10 runs per point, denser epsilons

Figure 1: test accuracy against epsilon in [0.001, 10] on breast cancer (scikit-learn), credit default and adult
income (the data home) with the paper's settings (batch 3200 or the training size if smaller, lambda = 0.001,
e = 10, k = 1, delta = 0.01), beside single-party and centralized scikit-learn logistic regression and non-private
VFL (Algorithm 1 without noise).  Figure 2: breast cancer, e in {5, 10, 15} at k = 1 and k in {0.1, 0.5, 1} at
e = 10.  Each point is the mean (and standard deviation) over ``--repeats`` seeds on one fixed train/test split.
Noise: the tightest sound Gaussian for each party's composed sequence (:mod:`sqm.apps.hdp_vfl.privacy`), not the
paper's sqrt(2 ln(1.25/delta))/epsilon; ``paper_sigma_ratio`` in each row says how much more noise the paper's
formula adds at that epsilon (below 1 where the paper's formula is unsound).  The sweeps run the parties' programs
in one process (:func:`sqm.mpc.protocols.inprocess.run_in_process`, the labelled simulation, bit for bit the
two-process model for the same seeds); ``--verify-mpyc`` (on by default) re-runs one point as two processes and
records that the models are identical.

numpy, scikit-learn and the runtime are imported inside the functions that run the benchmark: ``python -m bench
--help`` imports this module to register ``python -m bench hdp-vfl`` (:mod:`bench.command`).
"""
from __future__ import annotations

import argparse
import math
import time

from bench.common import finish

from sqm.apps.hdp_vfl.experiment import DATASETS  # argparse-level imports only at its top
from sqm.apps.hdp_vfl.privacy import GUARANTEE  # the guarantee's text (math only)

REDUCED_EPS = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
FULL_EPS = [m * 10.0 ** p for p in range(-3, 1) for m in (1, 2, 5)] + [10.0]
PAPER = dict(batch_size=3200, l2=0.001, epochs=10, k=1.0, delta=0.01)


def sweep(Xtr, Xte, ytr, yte, active, epsilons, repeats, seed, bar, **kw) -> list[dict]:
    import numpy as np

    from sqm.apps.hdp_vfl.estimator import HDPLogisticRegression

    rows = []
    for eps in epsilons:
        accs = []
        for r in range(repeats):
            m = HDPLogisticRegression(epsilon=eps, seed=seed + r, active_features=active, **kw).fit(Xtr, ytr)
            accs.append(m.score(Xte, yte))
            bar.update(1)
        paper = m.privacy_[0].l2_sensitivity * math.sqrt(2 * math.log(1.25 / m.delta)) / eps
        rows.append(dict(epsilon=eps, accuracy_mean=float(np.mean(accs)), accuracy_std=float(np.std(accs)),
                         accuracies=[float(a) for a in accs], sigma_active=m.config_.sigma_active,
                         sigma_passive=m.config_.sigma_passive, paper_sigma_ratio=paper / m.config_.sigma_active))
    return rows


def run(datasets=DATASETS, epsilons=None, repeats=5, seed=0, split_seed=0, learning_rate=0.5, intercept=0.5,
        fig2=True, verify_mpyc=True, data_paths=None, progress=True) -> dict:
    import numpy as np
    from tqdm import tqdm

    from sqm.apps.hdp_vfl.experiment import load_split, reference_accuracies
    from sqm.apps.hdp_vfl.estimator import HDPLogisticRegression

    epsilons = list(epsilons or REDUCED_EPS)
    data_paths = data_paths or {}
    base = dict(delta=PAPER["delta"], batch_size=PAPER["batch_size"], l2=PAPER["l2"], learning_rate=learning_rate,
                intercept=intercept)
    splits = {name: load_split(name, data_paths.get(name), 0.2, split_seed) for name in datasets}
    # (e = 10, k = 1 is also Figure 1's breast-cancer curve; the same seeds give the same figures)
    fig2_cfgs = ([dict(epochs=e, k=1.0) for e in (5, 10, 15)] + [dict(epochs=10, k=k) for k in (0.1, 0.5)]
                 if fig2 else [])
    total = len(epsilons) * repeats * (len(datasets) + len(fig2_cfgs))
    bar = tqdm(total=total, desc="hdp-vfl fits", disable=not progress)
    t0 = time.perf_counter()
    fig1 = {}
    for name, (Xtr, Xte, ytr, yte, a) in splits.items():
        t1 = time.perf_counter()
        refs = reference_accuracies(Xtr, Xte, ytr, yte, a, PAPER["l2"], PAPER["epochs"], PAPER["batch_size"],
                                    PAPER["k"], learning_rate, seed, intercept)
        rows = sweep(Xtr, Xte, ytr, yte, a, epsilons, repeats, seed, bar, epochs=PAPER["epochs"], k=PAPER["k"],
                     **base)
        fig1[name] = dict(train_records=int(Xtr.shape[0]), test_records=int(Xte.shape[0]), active_features=a,
                          passive_features=int(Xtr.shape[1] - a), references=refs, rows=rows,
                          seconds=time.perf_counter() - t1)
    fig2_out = []
    if fig2:
        Xtr, Xte, ytr, yte, a = splits.get("breast_cancer") or load_split("breast_cancer", None, 0.2, split_seed)
        for cfg in fig2_cfgs:
            fig2_out.append(dict(**cfg, rows=sweep(Xtr, Xte, ytr, yte, a, epsilons, repeats, seed, bar, **cfg,
                                                   **base)))
    bar.close()
    report = dict(settings=dict(PAPER, learning_rate=learning_rate, intercept=intercept,
                                calibration="sqm.mechanism.calibration.gaussian_sigma (tightest sound)",
                                repeats=repeats, seed=seed, split_seed=split_seed, test_size=0.2,
                                backend="plain (in-process simulation of the two parties)"),
                  epsilons=epsilons, figure1=fig1, figure2=fig2_out, seconds=time.perf_counter() - t0,
                  guarantee_note=GUARANTEE)
    if "breast_cancer" in splits and 1.0 in epsilons:  # the paper reports about 0.9 at epsilon = 1
        row = next(r for r in fig1["breast_cancer"]["rows"] if r["epsilon"] == 1.0)
        report["target_breast_cancer_eps1"] = dict(paper=0.9, mean=row["accuracy_mean"], std=row["accuracy_std"])
    if verify_mpyc:
        Xtr, Xte, ytr, yte, a = next(iter(splits.values()))
        kw = dict(epsilon=1.0, seed=seed, active_features=a, epochs=PAPER["epochs"], k=PAPER["k"], **base)
        t1 = time.perf_counter()
        two = HDPLogisticRegression(backend="mpyc", **kw).fit(Xtr, ytr)
        secs = time.perf_counter() - t1
        one = HDPLogisticRegression(backend="plain", **kw).fit(Xtr, ytr)
        report["mpyc_check"] = dict(dataset=next(iter(splits)), identical=bool(np.array_equal(one.coef_, two.coef_)
                                                                              and one.intercept_ == two.intercept_),
                                    seconds_two_processes=secs, seconds_in_process=one.seconds_,
                                    bytes_sent=two.bytes_sent_, accuracy=two.score(Xte, yte))
    return report


def print_table(rep: dict) -> None:
    from bench.common import relation_note, relation_words
    from sqm.cli.tables import render_table

    s = rep["settings"]
    eps = [f"{e:g}" for e in rep["epsilons"]]
    print(f"HDP-VFL (Figure 1): b={s['batch_size']} (or n), lambda={s['l2']}, e={s['epochs']}, k={s['k']}, "
          f"delta={s['delta']}, lr={s['learning_rate']}, u={s['intercept']}, noise {s['calibration']}; "
          f"mean test accuracy of {s['repeats']} seeds at each epsilon ({relation_words()})")
    refs = {"single_party": "single", "centralized": "central", "nonprivate_vfl": "np-VFL", "majority_class": "major."}
    rows = [{"method": name, **{e: r["accuracy_mean"] for e, r in zip(eps, f["rows"], strict=False)},
             **{short: f["references"][key] for key, short in refs.items()}} for name, f in rep["figure1"].items()]
    print(render_table(rows, eps + list(refs.values())))
    print(relation_note())
    if rep["figure2"]:
        print("Figure 2 (breast cancer):")
        print(render_table([{"method": f"e={c['epochs']} k={c['k']:g}",
                             **{e: r["accuracy_mean"] for e, r in zip(eps, c["rows"], strict=False)}}
                            for c in rep["figure2"]], eps))
        print(relation_note())
    first = next(iter(rep["figure1"].values()), None)
    if first:
        print("paper's sigma / ours:",
              ", ".join(f"{e}: {r['paper_sigma_ratio']:.3f}" for e, r in zip(eps, first["rows"], strict=False)))
    t = rep.get("target_breast_cancer_eps1")
    if t:
        print(f"breast cancer at epsilon=1 ({relation_words()}; paper: about 0.9): {t['mean']:.3f} +- "
              f"{t['std']:.3f}")
    m = rep.get("mpyc_check")
    if m:
        print(f"two-process check ({m['dataset']}, epsilon=1, {relation_words()}): identical to in-process: "
              f"{m['identical']}; {m['seconds_two_processes']:.2f} s, bytes sent {m['bytes_sent']}")
    print(f"total {rep['seconds']:.1f} s.  Note: {rep['guarantee_note']}")


def plot(rep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rep["figure1"])
    ncols = len(names) + (2 if rep["figure2"] else 0)
    fig, ax = plt.subplots(1, ncols, figsize=(4.2 * ncols, 3.6), squeeze=False)
    ax = ax[0]
    for i, name in enumerate(names):
        f = rep["figure1"][name]
        e = [r["epsilon"] for r in f["rows"]]
        ax[i].errorbar(e, [r["accuracy_mean"] for r in f["rows"]], yerr=[r["accuracy_std"] for r in f["rows"]],
                       fmt="o-", label="HDP-VFL", capsize=2)
        for key, style, c in (("single_party", ":", "gray"), ("centralized", "--", "gray"),
                              ("nonprivate_vfl", "-.", "gray"), ("majority_class", ":", "red")):
            ax[i].axhline(f["references"][key], ls=style, c=c, label=key.replace("_", " "))
        ax[i].set(xscale="log", xlabel="epsilon", ylabel="test accuracy", title=name, ylim=(0.3, 1.0))
    ax[0].legend(fontsize=7)
    if rep["figure2"]:
        for j, (key, title) in enumerate((("epochs", "breast cancer, k=1: e"), ("k", "breast cancer, e=10: k"))):
            a = ax[len(names) + j]
            for c in rep["figure2"]:
                if (key == "epochs" and c["k"] == 1.0) or (key == "k" and c["epochs"] == 10):
                    a.plot([r["epsilon"] for r in c["rows"]], [r["accuracy_mean"] for r in c["rows"]], "o-",
                           label=f"{key}={c[key]:g}")
            a.set(xscale="log", xlabel="epsilon", ylabel="test accuracy", title=title, ylim=(0.3, 1.0))
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--datasets", default=",".join(DATASETS),
                    help=f"comma list among {', '.join(DATASETS)} (default: all three)")
    ap.add_argument("--epsilons", default=None,
                    help="comma list of epsilons (default: 9 points 0.001..10; with --full: 13 points)")
    ap.add_argument("--repeats", type=int, default=None, help="seeds per point (default: 5; with --full: 10)")
    ap.add_argument("--full", action="store_true", help="the paper's 10 runs per point and a denser epsilon grid")
    ap.add_argument("--no-fig2", action="store_true", help="skip Figure 2 (e and k on breast cancer)")
    ap.add_argument("--no-verify-mpyc", action="store_true", help="skip the two-process identity check")
    ap.add_argument("--learning-rate", type=float, default=0.5, help="learning rate eta (default: 0.5)")
    ap.add_argument("--intercept", type=float, default=0.5,
                    help="the active party's constant column value u (default: 0.5; 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="first model seed (default 0)")
    ap.add_argument("--split-seed", type=int, default=0, help="train/test split seed (default 0)")
    ap.add_argument("--credit-data", default=None, help="path of UCI_Credit_Card.csv (default: the data home's)")
    ap.add_argument("--adult-data", default=None, help="folder of adult.data/adult.test (default: the data home's)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot (Figures 1 and 2) to this file")
    # -q/--quiet (no progress bar): sqm's, on every command (sqm.cli.options.add_verbosity)


def cli(args) -> int:
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    bad = [n for n in names if n not in DATASETS]
    if bad or not names:
        raise ValueError(f"unknown dataset(s) {bad}; choose among {DATASETS}")
    eps = ([float(e) for e in args.epsilons.split(",") if e.strip()] if args.epsilons
           else FULL_EPS if args.full else REDUCED_EPS)
    if not eps or any(not (e > 0) or math.isnan(e) for e in eps):
        raise ValueError(f"epsilons must be positive numbers, got {args.epsilons!r}")
    repeats = args.repeats or (10 if args.full else 5)
    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    rep = run(names, eps, repeats, args.seed, args.split_seed, args.learning_rate, args.intercept,
              not args.no_fig2, not args.no_verify_mpyc,
              {"credit_default": args.credit_data, "adult": args.adult_data}, not args.quiet)
    return finish(rep, args, print_table, plot)
