"""PBM-VFL's test metrics over seeds, on ``sqm pbm-vfl``'s documented settings: the spread a single run hides.

    python -m bench pbm-vfl-seeds [--seeds 0-9] [--datasets digits,phishing] [--json seeds.json]

digits: 4 clients (image quadrants), b 16, beta 0.15, 10 epochs; phishing: 5 clients, b 16, beta 0.25, 6
epochs; the CLI's MLPs and Adam otherwise.  Seed k trains PBM-VFL in process (the simulation, bit-identical
to the party processes) exactly as ``sqm pbm-vfl --backend plain --seed k`` does (the same per-method seed,
:func:`sqm.apps.pbm_vfl.experiment.method_seed`), and NPQ once (with the first seed) as the reference.  Prints, per
setting, the mean and standard deviation of the final test accuracy (and AUPRC for phishing) over the seeds.  To compare
two versions of the code, run it in both trees on the same machine.
"""
from __future__ import annotations

import time
from dataclasses import replace

from bench.common import finish

SETTINGS = {"digits": dict(parties=4, b=16, beta=0.15, epochs=10),
            "phishing": dict(parties=5, b=16, beta=0.25, epochs=6)}


def _seeds(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run(seeds=tuple(range(10)), datasets=("digits", "phishing"), data=None) -> dict:
    import numpy as np

    from sqm.apps.pbm_vfl import VFLConfig, load_split, train_vfl
    from sqm.apps.pbm_vfl.experiment import method_seed

    t0 = time.perf_counter()
    rows = []
    for name in datasets:
        s = SETTINGS[name]
        btr, bte, ytr, yte, nc = load_split(name, s["parties"], data)
        cfg = VFLConfig(b=s["b"], beta=s["beta"], epochs=s["epochs"], n_classes=nc)
        npq = train_vfl(btr, bte, ytr, yte, replace(cfg, method="npq"), "plain", seed=method_seed(seeds[0], "npq"))
        runs = [train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=method_seed(k, "pbm")) for k in seeds]
        acc = np.array([r.accuracy for r in runs])
        row = dict(dataset=name, clients=s["parties"], b=s["b"], beta=s["beta"], epochs=s["epochs"],
                   seeds=list(map(int, seeds)), accuracy=acc.tolist(), accuracy_mean=float(acc.mean()),
                   accuracy_sd=float(acc.std(ddof=1)) if len(acc) > 1 else None, npq_accuracy=npq.accuracy)
        if nc == 2:
            auprc = np.array([r.auprc for r in runs])
            row.update(auprc=auprc.tolist(), auprc_mean=float(auprc.mean()),
                       auprc_sd=float(auprc.std(ddof=1)) if len(auprc) > 1 else None, npq_auprc=npq.auprc)
        rows.append(row)
    return {"rows": rows, "seconds": time.perf_counter() - t0}


def print_report(out: dict) -> None:
    for r in out["rows"]:
        line = (f"{r['dataset']} ({r['clients']} clients, b {r['b']}, beta {r['beta']}, {r['epochs']} epochs), "
                f"{len(r['seeds'])} seeds: PBM-VFL test accuracy {r['accuracy_mean']:.4f}")
        line += f" (sd {r['accuracy_sd']:.4f})" if r["accuracy_sd"] is not None else ""
        if "auprc_mean" in r:
            line += f", AUPRC {r['auprc_mean']:.4f}" + (f" (sd {r['auprc_sd']:.4f})" if r["auprc_sd"] else "")
        line += f"; NPQ {r['npq_accuracy']:.4f}" + (f" / AUPRC {r['npq_auprc']:.4f}" if "npq_auprc" in r else "")
        print(line)
    print(f"({out['seconds']:.0f} s)")


def add_arguments(p) -> None:
    p.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 or 0,3,7 (default: 0-9)")
    p.add_argument("--datasets", default="digits,phishing", help="comma-separated settings (default: both)")
    p.add_argument("--data", default=None, help="phishing CSV/ARFF or its folder (default: the data home's)")
    p.add_argument("--json", default=None, help="write the figures as JSON to FILE")


def cli(args) -> int:
    out = run(seeds=_seeds(args.seeds), datasets=tuple(d.strip() for d in args.datasets.split(",") if d.strip()),
              data=args.data)
    return finish(out, args, print_report)
