"""Logistic regression on a user's own (unscaled, imbalanced) data in job mode with every default, against
DPSGD and the majority class (issue 14's acceptance run; ``tests/test_owndata.py`` runs it and checks it).

    python -m bench lr-defaults               # 6,000 + 2,000 records, epsilon 1, seeds 0 and 1, simulation
    python -m bench lr-defaults --backend mpyc      # the same job through real MPyC party processes

Data (:func:`sqm.data.example_files.imbalanced_records`): 9 features in raw units (stretched x 0.5-20, offset
+-5) over 3 clients, labels coded 1/2 at the last client, 25% positives.  Public ranges are proposed from the
training records (:func:`sqm.framework.tables.propose_ranges`, as ``sqm pca --propose-bounds`` prints them) and
declared in the job file; SQM-LR runs the job with every default (intercept, schedule from the record count);
the released model is scored on the held-out records scaled by the same public ranges.  DPSGD (Opacus) trains
on the same scaled rows with the same epsilon, delta and schedule.  Target: SQM's mean accuracy beats the
majority rate and lies within 2 points of DPSGD's.
"""
from __future__ import annotations

import argparse
import tempfile
import time
import warnings

from bench.common import finish


def run(train: int = 6000, test: int = 2000, epsilon: float = 1.0, delta: float = 1e-5, seeds=(0, 1),
        backend: str = "plain") -> dict:
    import numpy as np

    from sqm.data.example_files import imbalanced_records
    from sqm.framework.spec import load_job, write_party_csvs
    from sqm.framework.runners import run_local, simulate
    from sqm.apps.logreg.experiment import compare
    from sqm.apps.logreg.job import LRJobTask
    from sqm.framework.tables import PartyTable, propose_ranges

    t0 = time.perf_counter()
    X, y = imbalanced_records(train + test)
    Xtr, ytr, Xte, yte = X[:train], y[:train], X[train:], y[train:]
    d = X.shape[1]
    names = [f"x{j}" for j in range(d)]
    ranges = propose_ranges(PartyTable("train", names, Xtr, []))
    lo, hi = (np.array([ranges[c][i] for c in names]) for i in (0, 1))
    scale = lambda A: np.clip(A, lo, hi) / np.maximum(abs(lo), abs(hi)) / np.sqrt(d)  # noqa: E731  c_j = sqrt(3/9)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        bounds = [{c: ranges[c] for c in names[k:k + 3]} for k in (0, 3, 6)]
        spec = load_job(write_party_csvs(np.hstack([Xtr, 1 + ytr[:, None]]), folder, col_counts=[3, 3, 4],
                                         bounds=bounds))
        for seed in seeds:
            task = LRJobTask(epsilon, delta, label_column=f"x{d}", seed=seed, insecure_reproducible=True)
            recs = (simulate(spec, task) if backend == "plain" else run_local(spec, task))
            res = recs[0]["result"]
            score = scale(Xte) @ res["coef"] + res["intercept"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = compare(scale(Xtr), ytr, scale(Xte), yte, epsilon=epsilon, delta=delta, gamma=8192.0,
                              parties=3, backend="in-process", seed=seed, methods=("dpsgd",))["dpsgd"]
            rows.append({"seed": seed, "sqm": float(np.mean((score > 0) == (yte == 1))), "dpsgd": ref["accuracy"],
                         "sqm_epsilon": res["report"].epsilon_server, "dpsgd_epsilon": ref["report"].epsilon_server,
                         "solver": res.get("solver", "sgd"), "q": (res["schedule"] or {}).get("q"),
                         "rounds": (res["schedule"] or {}).get("rounds", 1),
                         "fit_intercept": res["fit_intercept"], "labels": recs[3]["result"]["labels"],
                         "outside_declared_range": [recs[j]["result"]["outside_declared_range"] for j in (1, 2, 3)],
                         "clipped": [recs[j]["result"]["clipped"] for j in (1, 2, 3)]})
    sqm, dpsgd = np.mean([r["sqm"] for r in rows]), np.mean([r["dpsgd"] for r in rows])
    majority = float(max(yte.mean(), 1 - yte.mean()))
    return {"train": train, "test": test, "epsilon": epsilon, "delta": delta, "backend": backend, "rows": rows,
            "majority": majority, "sqm_mean": float(sqm), "dpsgd_mean": float(dpsgd),
            "target_met": bool(sqm > majority and sqm >= dpsgd - 0.02), "seconds": time.perf_counter() - t0}


def print_table(rep: dict) -> None:
    from bench.common import relation_note, relation_words
    from sqm.cli.tables import render_table

    print(f"SQM-LR job with defaults on {rep['train']} generated imbalanced records (backend {rep['backend']}), "
          f"scored on {rep['test']}; epsilon {rep['epsilon']:g} ({relation_words()}), delta {rep['delta']:g}")
    print(render_table(rep["rows"], ["seed", "sqm", "dpsgd", "sqm_epsilon", "dpsgd_epsilon", "q", "rounds"]))
    print(relation_note())
    print(f"  majority {rep['majority']:.4f}; mean SQM {rep['sqm_mean']:.4f}, DPSGD {rep['dpsgd_mean']:.4f} "
          f"(target: SQM > majority and >= DPSGD - 0.02: {'met' if rep['target_met'] else 'MISSED'}); "
          f"{rep['seconds']:.1f} s")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--train", type=int, default=6000, help="training records (default 6000)")
    ap.add_argument("--test", type=int, default=2000, help="held-out records (default 2000)")
    ap.add_argument("--epsilon", type=float, default=1.0, help="server-observed epsilon (default 1)")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5)")
    ap.add_argument("--seeds", default="0,1", help="comma list of seeds, one run each (default 0,1)")
    ap.add_argument("--backend", default="plain", choices=["plain", "mpyc"],
                    help="plain (default): the job's party programs in one process, a simulation; mpyc: real "
                         "party processes over loopback")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    return finish(run(args.train, args.test, args.epsilon, args.delta, seeds, args.backend), args, print_table)
