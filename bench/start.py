"""Start-up cost: ``sqm --help`` (wall time, modules imported) and a party process's start (spawn -> ready).

    python -m bench start --repeat 5 --json start.json
    python -m bench start --tree /path/to/another/checkout      # the same figures for another checkout (e.g. older)

``python -m sqm --help`` is run ``--repeat`` times in a fresh interpreter from the checkout ``--tree`` (default:
this one) and the fastest wall time is kept (the first run, which may write the .pyc files, is not counted;
``$PYTHONDONTWRITEBYTECODE`` is removed for these runs, as an installed package has its .pyc); ``-X importtime`` gives
the modules it imported, their total import time and which heavy packages (:data:`sqm.mpc.net.party.HEAVY_MODULES`,
numpy) were among them.  Then a small secure covariance (``--rows`` x ``--cols``, 2 clients, real party processes)
is run ``--repeat`` times and each party's start is broken down from its timeline (:func:`sqm.mpc.net.party.main`):
interpreter start-up, standard library, program unpickled (its modules imported), MPyC and the protocol imported
(ready to connect), connect; the fastest run (end to end) is kept.  Last, the launcher's own start: a fresh
interpreter runs the same secure covariance ``--repeat`` times (one job each), and its time from calling
:meth:`sqm.mechanism.release.SQM.run` to the first party spawned is split into planning (calibrating mu, the
report, the programs), the job's TLS keys and writing the programs; its imports before the call (numpy, the
mechanism) are counted apart.  Timings depend on the machine's load: the report records the load average.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from bench.common import finish

STEPS = (("interpreter", "spawned", "started"), ("stdlib", "started", "main"), ("program", "main", "unpickled"),
         ("runtime", "unpickled", "ready"), ("connect", "ready", "connected"))
WATCH = ("numpy", "torch", "sklearn", "scipy", "dp_accounting", "opacus", "matplotlib", "pandas", "mpyc")


def help_cost(tree: str, repeat: int = 5) -> dict:
    """Wall time of ``python -m sqm --help`` from checkout ``tree`` (best and median of ``repeat``), and what
    ``-X importtime`` says it imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([tree, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "sqm", "--help"]
    first = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)  # writes .pyc
    if first.returncode != 0:
        raise RuntimeError(f"python -m sqm --help failed in {tree}: {first.stderr[-500:]}")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=tree, env=env, capture_output=True, timeout=300, check=True)
        times.append(time.perf_counter() - t0)
    err = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], cwd=tree, env=env, capture_output=True,
                         text=True, timeout=300).stderr
    rows = re.findall(r"^import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)$", err, re.M)
    top = {name.split(".")[0] for _, _, _, name in rows}
    return dict(tree=os.path.abspath(tree), repeat=repeat, best_seconds=min(times),
                median_seconds=sorted(times)[len(times) // 2], all_seconds=times, modules=len(rows),
                import_seconds=sum(int(cum) for _, cum, indent, _ in rows if not indent) / 1e6,
                heavy=[m for m in WATCH if m in top])


def party_start(rows: int = 2000, cols: int = 20, repeat: int = 5, seed: int = 0) -> dict:
    """Each party's start in the fastest of ``repeat`` secure covariances (real processes), step by step."""
    from bench.bgw_cost import make_data
    from sqm.mpc.net.launch import record_jobs
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.vertical import VerticalData

    data = VerticalData.split(make_data(rows, cols, seed), 2)
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        with record_jobs() as jobs:  # the parties' records (SQM.run returns the release only)
            SQM(covariance(cols), 4096.0, epsilon=1.0, backend="mpyc").run(data)
        runs.append((time.perf_counter() - t0, jobs[-1]))
    seconds, records = min(runs, key=lambda r: r[0])
    parties = []
    for i, r in enumerate(records):
        tl = r["timeline"]
        parties.append({"party": "server" if i == 0 else f"client {i}",
                        **{name: tl[b] - tl[a] for name, a, b in STEPS},
                        "spawn -> ready": tl["ready"] - tl["spawned"], "total": tl["collected"] - tl["spawned"],
                        "heavy_modules": r.get("heavy_modules")})
    return dict(shape=[rows, cols], repeat=repeat, seconds=seconds, all_seconds=[s for s, _ in runs],
                parties=parties)


# The launcher's first job in a fresh interpreter: stamps (time.time()) of its steps, printed as JSON.  The TLS
# keys' step is found by wrapping sqm.mpc.net.certs.make_certificates (a timing wrapper, nothing else changes).
_LAUNCHER = """
import time
T, C = {"started": time.time()}, {"started": time.process_time()}
import json, os, sys
import numpy as np
from sqm.mechanism.polynomial import covariance
from sqm.mechanism.release import SQM
from sqm.mechanism.vertical import VerticalData
from sqm.mpc.net import certs
from sqm.mpc.net.launch import record_jobs
T["imported"], C["imported"] = time.time(), time.process_time()
rows, cols = int(sys.argv[1]), int(sys.argv[2])
X = np.random.default_rng(0).normal(size=(rows, cols))
X /= np.linalg.norm(X, axis=1).max()
data = VerticalData.split(X, 2)
make = certs.make_certificates
def timed(*a, **k):
    T.setdefault("keys", time.time()), C.setdefault("keys", time.process_time())
    out = make(*a, **k)
    T.setdefault("keys_made", time.time()), C.setdefault("keys_made", time.process_time())
    return out
certs.make_certificates = timed
HEAVY = ("scipy", "dp_accounting", "sklearn", "torch", "cryptography")
T["run"], C["run"] = time.time(), time.process_time()
with record_jobs() as jobs:
    res = SQM(covariance(cols), 4096.0, epsilon=1.0, backend="mpyc").run(data)
T["spawned"] = min(r["timeline"]["spawned"] for r in jobs[-1])
print(json.dumps({"stamps": T, "cpu": C, "mu": res.report.mu, "heavy": [m for m in HEAVY if m in sys.modules]}))
"""

LAUNCHER_STEPS = (("imports", "started", "imported"), ("plan", "run", "keys"), ("keys", "keys", "keys_made"),
                  ("programs", "keys_made", "spawned"), ("run -> first spawn", "run", "spawned"))
CPU_STEPS = LAUNCHER_STEPS[:3]  # the launcher's own CPU seconds (time.process_time()) where it has them


def launcher_start(rows: int = 2000, cols: int = 20, repeat: int = 5) -> dict:
    """The launcher's time before its first party process, in ``repeat`` fresh interpreters (one job each): the
    steps of :data:`LAUNCHER_STEPS` (seconds), best and median of each over the runs."""
    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([tree, env.get("PYTHONPATH", "")])
    runs = []
    for _ in range(repeat):
        p = subprocess.run([sys.executable, "-c", _LAUNCHER, str(rows), str(cols)], cwd=tree, env=env,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"the launcher's start failed: {p.stderr[-1000:]}")
        import json

        got = json.loads(p.stdout.strip().splitlines()[-1])
        st = got["stamps"]
        cpu = got["cpu"]
        runs.append({"steps": {name: st[b] - st[a] for name, a, b in LAUNCHER_STEPS},
                     "cpu_steps": {name: cpu[b] - cpu[a] for name, a, b in CPU_STEPS}, "mu": got["mu"],
                     "heavy": got["heavy"]})
    names = [name for name, _, _ in LAUNCHER_STEPS]
    per = {n: sorted(r["steps"][n] for r in runs) for n in names}
    cpu = {n: sorted(r["cpu_steps"][n] for r in runs) for n, _, _ in CPU_STEPS}
    return dict(shape=[rows, cols], repeat=repeat, best={n: v[0] for n, v in per.items()},
                median={n: v[len(v) // 2] for n, v in per.items()}, cpu_best={n: v[0] for n, v in cpu.items()},
                runs=runs,
                heavy_modules=sorted({m for r in runs for m in r["heavy"]}))


def run(tree: str | None = None, repeat: int = 5, rows: int = 2000, cols: int = 20, parties: bool = True) -> dict:
    tree = tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rep = dict(help=help_cost(tree, repeat), load_average=list(os.getloadavg()), cpus=os.cpu_count())
    if parties:
        rep["party_start"] = party_start(rows, cols, repeat)
        rep["launcher_start"] = launcher_start(rows, cols, repeat)
    rep["load_average_after"] = list(os.getloadavg())
    return rep


def print_table(rep: dict) -> None:
    from sqm.cli.tables import render_table

    h = rep["help"]
    print(f"python -m sqm --help from {h['tree']}: best {h['best_seconds']:.3f} s, median "
          f"{h['median_seconds']:.3f} s of {h['repeat']}; {h['modules']} modules imported in "
          f"{h['import_seconds']:.3f} s (-X importtime); heavy: {', '.join(h['heavy']) or 'none'}")
    load = ", ".join(f"{v:.2f}" for v in rep["load_average"])
    print(f"load average {load} on {rep['cpus']} cores (after: "
          f"{', '.join(f'{v:.2f}' for v in rep['load_average_after'])})")
    p = rep.get("party_start")
    if p:
        print(f"secure covariance {p['shape'][0]} x {p['shape'][1]}, 3 parties: fastest of {p['repeat']} "
              f"{p['seconds']:.2f} s end to end; each party's start (seconds):")
        cols = ["party"] + [(name, name, ".3f") for name, _, _ in STEPS] + [("spawn -> ready", "spawn->ready", ".3f"),
                                                                           ("total", "total", ".3f")]
        print(render_table(p["parties"], cols))
        for a in ("connect",):
            v = [q["spawn -> ready"] + q[a] for q in p["parties"]]
            print(f"start + connect (spawned -> every peer connected): {', '.join(f'{x:.3f}' for x in v)} s")
    ls = rep.get("launcher_start")
    if ls:
        print(f"the launcher's first job in a fresh interpreter ({ls['repeat']} runs; seconds, best / median): "
              + "; ".join(f"{n} {ls['best'][n]:.3f} / {ls['median'][n]:.3f}" for n, _, _ in LAUNCHER_STEPS)
              + "; its CPU seconds (best): " + ", ".join(f"{n} {v:.3f}" for n, v in ls["cpu_best"].items())
              + f"; heavy packages it imported: {', '.join(ls['heavy_modules']) or 'none'}")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tree", default=None, help="checkout whose `python -m sqm --help` is timed (default: this one)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each measurement; the fastest is kept (default 5)")
    ap.add_argument("--rows", type=int, default=2000, help="records of the secure covariance (default 2000)")
    ap.add_argument("--cols", type=int, default=20, help="columns of the secure covariance (default 20)")
    ap.add_argument("--no-parties", action="store_true", help="time sqm --help only")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    return finish(run(args.tree, args.repeat, args.rows, args.cols, not args.no_parties), args, print_table)
