"""Where SQM-LR's decision threshold goes wrong (issue 24): accuracy of the moments solver's fit with the
within-class variance along w scaled by a factor, on the same releases.

    python -m bench lr-threshold                            # breast_cancer at epsilon 1, generated-imbalanced at 4
    python -m bench lr-threshold --cases breast_cancer:1 --scales 0.5,1,2 --runs 10 --json thr.json

Each run is one release of the defaults (``SQMLogisticRegression``, in process, gamma 8192, 3 clients, seed = run);
the server's fit (:func:`sqm.apps.logreg.moments.fit_from_moments`) is then redone from the same noisy moments with
v x scale, which moves only the threshold's prior term (v / D log(n_0 / n_1)) and the posterior's scale.  Scale 1
is the shipped fit.  A scale that helps one data set and hurts another shows that no single variance rule fixes both.
"""
from __future__ import annotations

import argparse
import sys
import time


def run(cases=(("breast_cancer", 1.0), ("generated-imbalanced", 4.0)), scales=(0.5, 1.0, 2.0), runs: int = 10,
        progress: bool = True) -> dict:
    import math

    import numpy as np

    from sqm.apps.logreg import SQMLogisticRegression
    from sqm.apps.logreg.experiment import unit_ball_split
    from sqm.apps.logreg.moments import fit_from_moments
    from bench.lr_utility import GENERATED, generated

    t0, rows = time.perf_counter(), []
    for name, eps in cases:
        Xtr, ytr, Xte, yte = generated(name) if name in GENERATED else unit_ball_split(name)[:4]
        acc = {s: [] for s in scales}
        for r in range(runs):
            est = SQMLogisticRegression(eps, 1e-5, 8192.0, None, None, None, "in-process", 3, seed=r,
                                        intercept_scaling=1.0).fit(Xtr, ytr)
            noise_sd = math.sqrt(2.0 * est.report_.mu) / 8192.0 ** 2
            for s in scales:
                w, b = fit_from_moments(est.moments_, est.layout_, Xtr.shape[0], noise_sd, True, s)
                est.coef_, est.intercept_ = w.reshape(1, -1), np.array([b])
                acc[s].append(float(np.mean((est.decision_function(Xte) > 0) == (yte == 1))))
            if progress:
                print(f"lr-threshold: {name} eps {eps:g} run {r + 1}/{runs}", file=sys.stderr, flush=True)
        majority = float(max(np.mean(yte), 1 - np.mean(yte)))
        for s in scales:
            rows.append(dict(dataset=name, epsilon=eps, scale=s, accuracy=float(np.mean(acc[s])),
                             accuracy_std=float(np.std(acc[s])), runs=runs, majority=majority))
    return {"rows": rows, "seconds": round(time.perf_counter() - t0, 1)}


def print_table(rep: dict) -> None:
    from bench.common import relation_note
    from sqm.cli.tables import render_table

    print("SQM-LR moments fit, within-class variance along w scaled (1 = shipped); accuracy over the runs")
    print(render_table(rep["rows"], ["dataset", ("epsilon", "eps", "g"), ("scale", "scale", "g"),
                                     ("accuracy", "accuracy", ".4f"), ("accuracy_std", "sd", ".3f"),
                                     ("majority", "majority", ".3f")]))
    print(relation_note())


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cases", default="breast_cancer:1,generated-imbalanced:4",
                    help="comma list of DATASET:EPSILON (default breast_cancer:1,generated-imbalanced:4)")
    ap.add_argument("--scales", default="0.5,1,2", help="comma list of variance scales (default 0.5,1,2)")
    ap.add_argument("--runs", type=int, default=10, help="runs (seeds) per case (default 10)")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    from bench.common import finish

    cases = [(c.rsplit(":", 1)[0], float(c.rsplit(":", 1)[1])) for c in args.cases.split(",") if c.strip()]
    rep = run(cases, [float(s) for s in args.scales.split(",")], args.runs, progress=not getattr(args, "quiet", 0))
    return finish(rep, args, print_table)
