"""PBM-VFL's time per training iteration on each torch device, CPU the reference in the same run.

    python -m bench pbm-vfl-device [--devices cpu,cuda] [--epochs 1] [--backend mpyc] [--json dev.json]

Two settings: digits (4 clients, one image quadrant each, ``sqm pbm-vfl``'s defaults: b 16, beta 0.15, MLP width
64, Adam) and phishing (5 clients, b 16, beta 0.25, width 256, SGD: ``python -m bench pbm-vfl``'s).  Every party runs
on the device: its model, its data, the PBM encoding and the server's decoding.  Only the secure sum's integers
and the gradient go through the runtime on the host.  With ``--backend mpyc`` (the default) every party is a
real MPyC process, all of them sharing the one GPU.  A device torch cannot use is reported as NOT MEASURED
(``measured: false``): no figure is estimated.  The time per iteration counts the clients' forward pass and
encoding, the secure sum, the server's step and the clients' backward pass; it does not count process start or
the evaluations.
"""
from __future__ import annotations

import time

from bench.common import finish

SETTINGS = {
    "digits": dict(parties=4, b=16, beta=0.15, hidden=64, optimizer="adam", lr=0.01),
    "phishing": dict(parties=5, b=16, beta=0.25, hidden=256, optimizer="sgd", lr=0.01),
}


def run(devices=("cpu", "cuda"), epochs: int = 1, backend: str = "mpyc", datasets=("digits", "phishing"),
        data=None, seed: int = 0) -> dict:
    import torch

    from sqm.apps.pbm_vfl import VFLConfig, load_split, train_vfl

    t0 = time.perf_counter()
    rows = []
    for name in datasets:
        s = SETTINGS[name]
        btr, bte, ytr, yte, nc = load_split(name, s["parties"], data)
        ref = None
        for dev in devices:
            row = dict(dataset=name, device=dev, backend=backend, clients=s["parties"], b=s["b"], beta=s["beta"],
                       epochs=epochs, records=len(ytr))
            if dev.startswith("cuda") and not torch.cuda.is_available():
                rows.append({**row, "measured": False, "note": "not measured: torch sees no CUDA GPU"})
                continue
            cfg = VFLConfig(method="pbm", b=s["b"], beta=s["beta"], epochs=epochs, batch_size=100, lr=s["lr"],
                            embedding_size=16, hidden=s["hidden"], optimizer=s["optimizer"], n_classes=nc, device=dev)
            r = train_vfl(btr, bte, ytr, yte, cfg, backend, seed=[seed, 7])
            ms = 1e3 * r.iter_seconds / r.iterations
            ref = ms if dev == "cpu" else ref
            rows.append({**row, "measured": True, "iterations": r.iterations, "ms_per_iteration": ms,
                         "secure_sum_share": r.sum_seconds / r.iter_seconds, "seconds_total": r.seconds,
                         "test_accuracy": r.accuracy, "test_auprc": r.auprc,
                         "gpu": torch.cuda.get_device_name(0) if dev.startswith("cuda") else None,
                         "vs_cpu": None if ref is None else ms / ref})
    return {"rows": rows, "seconds": time.perf_counter() - t0,
            "note": "vs_cpu: this device's ms per iteration over the CPU's, same setting, same run"}


def print_report(out: dict) -> None:
    from sqm.cli.tables import render_table

    table = [{"dataset": r["dataset"], "device": r["device"], "backend": r["backend"],
              "ms / iteration": round(r["ms_per_iteration"], 2) if r["measured"] else "not measured",
              "in secure sum": f"{100 * r['secure_sum_share']:.0f}%" if r["measured"] else "-",
              "vs cpu": round(r["vs_cpu"], 3) if r.get("vs_cpu") is not None else "-",
              "test accuracy": round(r["test_accuracy"], 4) if r["measured"] else "-"} for r in out["rows"]]
    print(render_table(table, list(table[0])))
    for r in out["rows"]:
        if not r["measured"]:
            print(f"{r['dataset']} on {r['device']}: {r['note']}")


def add_arguments(p) -> None:
    p.add_argument("--devices", default="cpu,cuda", help="comma-separated torch devices (default: cpu,cuda)")
    p.add_argument("--datasets", default="digits,phishing", help="comma-separated settings (default: digits,phishing)")
    p.add_argument("--epochs", type=int, default=1, help="epochs per run (default: 1)")
    p.add_argument("--backend", default="mpyc", choices=["mpyc", "plain"],
                   help="'mpyc' real party processes (default) or 'plain' the in-process simulation")
    p.add_argument("--data", default=None, help="phishing CSV/ARFF or its folder (default: the data home's)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--json", default=None, help="write the figures as JSON to FILE")


def cli(args) -> int:
    out = run(devices=tuple(d.strip() for d in args.devices.split(",") if d.strip()), epochs=args.epochs,
              backend=args.backend, datasets=tuple(d.strip() for d in args.datasets.split(",") if d.strip()),
              data=args.data, seed=args.seed)
    return finish(out, args, print_report)
