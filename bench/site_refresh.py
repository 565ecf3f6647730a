"""``python -m bench site --refresh``: re-run the quick benchmarks and store their figures under docs/benchmarks/data.

Each run is a subprocess of this interpreter (``python -m bench NAME`` or ``python -m sqm APP``) writing its JSON
document; the stored record keeps the figures (``report``), the command lines, the machine and its 1-minute load
average before and after, so that a page can say whether the machine was idle.  The slow benchmarks (the scale
runs, the record alignment at 10^6 ids, SecretFlow SPU, the 10-run logistic regression across data sets) are
not re-run: their stored records say ``"how": "transcribed"``.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)  # the SQM paper's grid (Figures 1 and 2)
PBM_ARGS = ["--parties", "5", "--b", "16,64", "--beta", "0.1,0.25", "--epochs", "6", "--mpyc-epochs", "1"]
BGW_ARGS = ["--rows", "20000", "--cols", "60", "--stock-rows", "0"]


def machine() -> str:
    """The CPU model and its core count, as the pages state it."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def _run(argv: list[str]) -> dict:
    """Run ``python ARGV --json FILE`` from the checkout's root; its JSON document."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, *argv, "--json", str(out), "-q"]
        subprocess.run(cmd, cwd=root, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def _record(command: str, report, loads: list[float], note: str = "") -> dict:
    return {"how": "measured", "command": command, "machine": machine(), "when": time.strftime("%Y-%m-%d"),
            "load_average": [round(min(loads), 2), round(max(loads), 2)], "note": note, "report": report}


def _bench(name: str, args: list[str]) -> tuple[str, dict, list[float]]:
    before = os.getloadavg()[0]
    doc = _run(["-m", "bench", name, *args])
    return f"python -m bench {name} {' '.join(args)}".strip(), doc["details"], [before, os.getloadavg()[0]]


def _pbm() -> tuple[str, dict, list[float]]:
    """The PBM-VFL grid, with the delta its epsilons are at (the configuration's default, which the bench uses)."""
    from sqm.apps.pbm_vfl.config import VFLConfig

    command, report, loads = _bench("pbm-vfl", PBM_ARGS)
    return command, {**report, "delta": VFLConfig().delta}, loads


def _sqm_sweep(app: str, plain: list[str], real: list[str], keep) -> tuple[str, dict, list[float]]:
    """Per epsilon: the in-process comparison (``plain``, several seeded runs) and one release through real party
    processes (``real``); ``keep(plain_doc, real_doc)`` picks the figures."""
    loads, rows, setting = [os.getloadavg()[0]], [], {}
    for eps in EPSILONS:
        e = ["--epsilon", f"{eps:g}"]
        p = _run(["-m", "sqm", app, *plain, *e, "--backend", "plain"])
        r = _run(["-m", "sqm", app, *real, *e])
        rows.append({"epsilon": eps, "delta": p["parameters"]["delta"], **keep(p, r)})
        setting = _setting(p)
        loads.append(os.getloadavg()[0])
    command = (f"sqm {app} {' '.join(plain)} --backend plain --epsilon E; sqm {app} {' '.join(real)} --epsilon E "
               f"(real processes), E in {', '.join(f'{e:g}' for e in EPSILONS)}")
    return command, {"setting": setting, "rows": rows}, loads


def _setting(doc: dict) -> dict:
    """The run's data set, clients and knobs (and its shape where the app reports one)."""
    p, details = doc["parameters"], doc.get("details") or {}
    out = {k: p[k] for k in ("dataset", "parties", "gamma", "alpha") if p.get(k) is not None}
    return {**out, **{k: details[k] for k in ("shape", "train", "test") if k in details}}


def _by_method(doc: dict) -> dict:
    return {r["method"]: r for r in doc["results"]}


def _pca(p: dict, r: dict) -> dict:
    real = next(v for k, v in _by_method(r).items() if k.startswith("SQM"))
    return {"seconds": real["seconds"], "bytes": real["bytes"], "utility_ratio_real": real["utility_ratio"]}


def _linreg(p: dict, r: dict) -> dict:
    m, real = _by_method(p), next(v for k, v in _by_method(r).items() if k.startswith("SQM"))
    sqm = next(v for k, v in m.items() if k.startswith("SQM"))
    central = next(v for k, v in m.items() if k.startswith("central"))
    nonpriv = next(v for k, v in m.items() if k.startswith("non-private"))
    return {"runs": p["details"]["runs"], "sqm_r2": sqm["r2"], "sqm_rmse": sqm["rmse"], "central_r2": central["r2"],
            "nonprivate_r2": nonpriv["r2"], "seconds": real["seconds"], "bytes": real["bytes"]}


def _logreg(p: dict, r: dict) -> dict:
    m, real = _by_method(p), _by_method(r)["SQM"]
    return {"runs": m["SQM"]["runs"], "sqm_accuracy": m["SQM"]["accuracy"], "sqm_auc": m["SQM"]["auc"],
            "sqm_accuracy_std": m["SQM"]["accuracy_std"], "dpsgd_accuracy": m["DPSGD"]["accuracy"],
            "dpsgd_auc": m["DPSGD"]["auc"], "dpsgd_epsilon": m["DPSGD"]["epsilon_server"],
            "local_accuracy": m["local DP"]["accuracy"], "nonprivate_accuracy": m["non-private"]["accuracy"],
            "nonprivate_auc": m["non-private"]["auc"], "seconds": real["seconds"], "bytes": real["bytes_sent"]}


def refresh_all(data: Path) -> None:
    """Re-run every quick benchmark and write its record to ``data/NAME.json``."""
    data.mkdir(parents=True, exist_ok=True)
    jobs = {
        "lr-gamma": lambda: _bench("lr-gamma", []),
        "bgw-cost": lambda: _bench("bgw-cost", BGW_ARGS),
        "pca-utility": lambda: _bench("pca-utility", []),
        "pbm-vfl": _pbm,
        "pca-time": lambda: _sqm_sweep("pca", ["--dataset", "digits", "--parties", "3"],
                                       ["--dataset", "digits", "--parties", "3"], _pca),
        "linreg": lambda: _sqm_sweep("linreg", ["--dataset", "diabetes", "--runs", "10", "--seed", "0"],
                                     ["--dataset", "diabetes"], _linreg),
        "logreg": lambda: _sqm_sweep("logreg", ["--dataset", "breast_cancer", "--runs", "10", "--seed", "0"],
                                     ["--dataset", "breast_cancer", "--no-baselines"], _logreg),
    }
    for name, job in jobs.items():
        print(f"running {name} ...", flush=True)
        command, report, loads = job()
        (data / f"{name}.json").write_text(json.dumps(_record(command, report, loads), indent=1) + "\n")
