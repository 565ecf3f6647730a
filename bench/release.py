"""The DP release alone, end to end: SQM-PCA of records that need no alignment, through real party processes.

    python -m bench release --json release.json                      # the KDDCUP shape, 2 and 3 clients
    python -m bench release --rows 195666 --cols 117 --clients 2 --repeat 3
    python -m bench release --clients 2 --baseline ../old-checkout       # before/after: the parties on older code

What runs.  The release a user runs with ``sqm pca --data FILE --parties N`` (:class:`sqm.apps.pca.estimator.SQMPCA`
at its defaults, ``backend="mpyc"``): the launcher plans the release (calibrating the noise, the report, the
programs), then a server and one process per client run over loopback TLS: each client clips, rounds
(dependent rounding), adds its Skellam noise share and Shamir-shares its columns chunk by chunk; the parties
compute the Gram on shares, reduce its degree and open the noisy result to the server, whose result the launcher
collects and turns into the components.  The records are ``--rows`` x ``--cols`` synthetic values
(:func:`bench.bgw_cost.make_data`, rows of norm at most 1), split among the clients as evenly as possible; there
is no record alignment (the clients' rows are the same records in the same order).

Before the runs the ``sqm`` package's bytecode is written (:func:`compile_package`), as an installed package has
it.  Per run: ``seconds``, from the first party process spawned to the last result collected by the launcher (the
release end to end: what :data:`TARGET_SECONDS` is about); ``call_seconds``, the whole call including the
launcher's planning before the first spawn and its work after the last result (the components); CPU seconds of
every process the run started (user + system of the reaped children) plus this launcher's during the run; the
1-minute load average before it; each party's phases (:func:`bench.bgw_cost.party_phases`: process start, connect,
the protocol's phases, the rest, output), its start step by step (:data:`bench.start.STEPS`) and its own CPU
seconds; a digest of the integers released (every run of a cell, on either side, must release the same: the seed
is fixed).  The table quotes each cell's fastest run.  ``--baseline TREE`` follows each run with the same run whose
parties import checkout TREE's ``sqm`` (:func:`parties_from`), interleaved.

Then the exchange path's cost per message of input shares (:func:`frame_costs`: one chunk of the client with the
most columns), for this checkout and the baseline's wire format code.

Target: the release at the KDDCUP shape (195,666 x 117) with 2 clients in under :data:`TARGET_SECONDS` s end to end
on an idle machine; the report says whether the run met it and the load it ran under (on a loaded machine the
CPU seconds are the figure to compare).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from bench.common import finish

KDDCUP = (195666, 117)
TARGET_SECONDS = 2.5  # the release at the KDDCUP shape with 2 clients, end to end, idle
TARGET_CLIENTS = 2
THIS, BASELINE = "this checkout", "baseline"


def compile_package(tree: str | None = None) -> bool:
    """Write the bytecode of the ``sqm`` package the parties import (this checkout's, or ``tree``'s), as an
    installed package has it, so that no party compiles modules from source at its start
    (``$PYTHONDONTWRITEBYTECODE`` would otherwise make every process of every run do it); True when every module
    compiled."""
    import compileall

    import sqm

    folder = os.path.join(tree, "sqm") if tree else os.path.dirname(sqm.__file__)
    return bool(compileall.compile_dir(folder, quiet=1))


@contextlib.contextmanager
def parties_from(tree: str | None):
    """Within this block the party processes import the ``sqm`` package of checkout ``tree`` (None: this one's):
    it comes first on their path and is their working folder (``python -m`` puts that first).  The launcher (its
    planning, the programs it pickles) stays this checkout's, so ``tree`` must unpickle them."""
    from sqm.mpc.net import launch

    if tree is None:
        yield
        return
    old = launch._ROOT, os.getcwd()
    launch._ROOT = os.path.abspath(tree)
    os.chdir(tree)
    try:
        yield
    finally:
        launch._ROOT = old[0]
        os.chdir(old[1])


def run_one(data, seed: int = 0) -> dict:
    """One SQM-PCA release of ``data`` (a :class:`sqm.mechanism.vertical.VerticalData`) through real party processes,
    measured (:func:`bench.psi_peer._measured`); its per-party phases and the digest of the integers released."""
    import hashlib

    import numpy as np

    from bench.bgw_cost import party_phases
    from bench.psi_peer import _measured
    from sqm.apps.pca.estimator import SQMPCA
    from sqm.mpc.net.launch import record_jobs

    with record_jobs() as jobs:
        w0 = time.time()
        model, m = _measured(lambda: SQMPCA(backend="mpyc", seed=seed, n_parties=len(data.blocks)).fit(data))
        w1 = time.time()
    records = jobs[-1]
    spawned = min(r["timeline"]["spawned"] for r in records)
    collected = max(r["timeline"]["collected"] for r in records)
    from bench.start import STEPS

    phases, starts = [], []
    for i, r in enumerate(records):
        who, tl = "server" if i == 0 else f"client {i}", r["timeline"]
        phases.append({"process": who, **party_phases(r), "cpu": float(r.get("cpu_seconds", 0.0))})
        starts.append({"process": who, **{name: tl[b] - tl[a] for name, a, b in STEPS if a in tl and b in tl}})
    raw = np.asarray(model.raw_, dtype=object).reshape(-1)
    return dict(seconds=collected - spawned, call_seconds=m["wall_seconds"], before_spawn_seconds=spawned - w0,
                after_collect_seconds=w1 - collected, cpu_seconds=m["cpu_seconds"],
                children_cpu_seconds=m["children_cpu_seconds"], launcher_cpu_seconds=m["launcher_cpu_seconds"],
                load_1min=m["load_1min"], processes=len(records), phases=phases, starts=starts,
                bytes_sent=[int(b) for b in model.bytes_sent_],
                released_sha256=hashlib.sha256(",".join(str(int(v)) for v in raw).encode()).hexdigest())


def frame_costs(rows: int, cols: int, baseline: str | None = None, repeat: int = 200) -> dict:
    """Milliseconds (median of ``repeat``) of one message of input shares (``rows`` x ``cols`` int64) on the
    exchange path, in this process: framed (:func:`sqm.mpc.net.wire.encode`), handed to the connection (the baseline:
    MPyC's head packed with a copy of the frame, as MPyC's send does; here the head alone,
    :func:`sqm.mpc.net.transport.send_frame`) and decoded.  With ``baseline``, that checkout's ``wire`` module
    timed in turn with this one's (interleaved, so that both see the same allocator and caches)."""
    import importlib.util
    import statistics
    import struct

    import numpy as np

    from sqm.mpc.net import wire

    msg = [np.random.default_rng(0).integers(0, 1 << 40, size=(rows, cols), dtype=np.int64)]
    mods = {THIS: (wire, False)}
    if baseline:
        spec = importlib.util.spec_from_file_location("baseline_wire", os.path.join(baseline, "sqm", "mpc", "net",
                                                                                     "wire.py"))
        old = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(old)  # type: ignore[union-attr]
        mods[BASELINE] = (old, True)
    times: dict = {side: {"encode_ms": [], "send_copy_ms": [], "decode_ms": []} for side in mods}
    for _ in range(repeat):
        for side, (mod, pack_frame) in mods.items():
            t0 = time.perf_counter()
            frame = mod.encode(msg)
            t1 = time.perf_counter()
            struct.pack(f"<qI{len(frame)}s", 1, len(frame), frame) if pack_frame else struct.pack("<qI", 1, len(frame))
            t2 = time.perf_counter()
            mod.decode(frame)
            t3 = time.perf_counter()
            for key, dt in (("encode_ms", t1 - t0), ("send_copy_ms", t2 - t1), ("decode_ms", t3 - t2)):
                times[side][key].append(1e3 * dt)
    size = len(wire.encode(msg)) / 2 ** 20
    return {side: {**{k: statistics.median(v) for k, v in t.items()}, "mib": size} for side, t in times.items()}


def run(rows_list, cols_list, clients_list, repeat: int = 1, seed: int = 0, progress: bool = True,
        baseline: str | None = None) -> dict:
    """Every cell (clients x rows x cols) ``repeat`` times, the cells interleaved round by round; with ``baseline``
    (another checkout) each run is followed by the same run with the parties on that checkout's code
    (:func:`parties_from`)."""
    from bench.bgw_cost import make_data
    from sqm.mechanism.vertical import VerticalData

    if int(repeat) != repeat or repeat < 1:
        raise ValueError(f"--repeat must be an integer >= 1, got {repeat!r}")
    compiled = compile_package() and (baseline is None or compile_package(baseline))
    sides = [THIS] + ([BASELINE] if baseline else [])
    cells = [(c, r, k) for c in clients_list for r in rows_list for k in cols_list]
    data = {}
    for clients, rows, cols in cells:
        data[clients, rows, cols] = VerticalData.split(make_data(rows, cols, seed), clients)
    runs = []
    for rnd in range(int(repeat)):
        for clients, rows, cols in cells:
            for side in sides:
                if progress:
                    print(f"release: {clients} clients x {rows:,} x {cols}, {side}, round {rnd + 1}", file=sys.stderr)
                with parties_from(baseline if side == BASELINE else None):
                    got = run_one(data[clients, rows, cols], seed)
                got.update(clients=clients, rows=rows, cols=cols, repeat=rnd, side=side)
                runs.append(got)
    from sqm.mpc.protocols.stream import chunk_rows

    k = max(cols_list)
    frames = frame_costs(chunk_rows(k), -(-k // min(clients_list)), baseline)
    return summarize(dict(repeat=int(repeat), seed=seed, frames=frames, cores=os.cpu_count(), runs=runs,
                          bytecode=compiled, baseline=os.path.abspath(baseline) if baseline else None,
                          load_average=list(os.getloadavg()), date=time.strftime("%Y-%m-%d %H:%M %Z")))


def summarize(rep: dict) -> dict:
    """The table's rows (one per cell: its fastest run, every run's seconds and CPU seconds), whether every run of a
    cell released the same integers, and whether the target cell met :data:`TARGET_SECONDS`."""
    rows = []
    keys: list[tuple] = []
    for r in rep["runs"]:
        if (k := (r["clients"], r["rows"], r["cols"], r.get("side", THIS))) not in keys:
            keys.append(k)
    for k in keys:
        mine = [r for r in rep["runs"] if (r["clients"], r["rows"], r["cols"], r.get("side", THIS)) == k]
        best = min(mine, key=lambda r: r["seconds"])
        rows.append(dict(clients=k[0], rows=k[1], cols=k[2], side=k[3], processes=best["processes"],
                         seconds=best["seconds"],
                         call_seconds=best["call_seconds"], before_spawn_seconds=best["before_spawn_seconds"],
                         after_collect_seconds=best["after_collect_seconds"], cpu_seconds=best["cpu_seconds"],
                         min_cpu_seconds=min(r["cpu_seconds"] for r in mine),
                         all_seconds=[r["seconds"] for r in mine], all_cpu_seconds=[r["cpu_seconds"] for r in mine],
                         load_1min=[r["load_1min"] for r in mine], phases=best["phases"], starts=best["starts"],
                         same_release=len({r["released_sha256"] for r in mine}) == 1))
    for r in rows:  # every side of a cell releases the same integers (the same seed)
        r["same_release"] = r["same_release"] and len({q["released_sha256"] for q in rep["runs"] if (
            q["clients"], q["rows"], q["cols"]) == (r["clients"], r["rows"], r["cols"])}) == 1
    target = [r for r in rows if (r["rows"], r["cols"], r["clients"], r["side"]) == (*KDDCUP, TARGET_CLIENTS, THIS)]
    rep.update(rows=rows, target_seconds=TARGET_SECONDS,
               target_met=(target[0]["seconds"] < TARGET_SECONDS) if target else None,
               target_load_1min=target[0]["load_1min"] if target else None)
    return rep


PHASE_COLUMNS = ("process start", "connect", "agree", "client checks", "share inputs (local)",
                 "exchange input shares", "local moments", "degree reduction", "open result",
                 "program (outside phases)", "output", "total")


def print_table(rep: dict) -> None:
    from bench.bgw_cost import PHASE_HEADERS
    from bench.start import STEPS
    from sqm.cli.tables import render_table

    print(f"the DP release alone (SQM-PCA at its defaults, no record alignment), server + one process per client over "
          f"loopback TLS, {rep['cores']} cores; fastest of {rep['repeat']} run(s) per cell")
    table = [dict(cell=f"{r['clients']} x {r['rows']:,} x {r['cols']}", side=r["side"], seconds=r["seconds"],
                  call=r["call_seconds"], cpu=r["cpu_seconds"], same="yes" if r["same_release"] else "NO",
                  load=", ".join(f"{x:.2f}" for x in r["load_1min"]),
                  runs=", ".join(f"{w:.2f}/{c:.1f}" for w, c in zip(r["all_seconds"], r["all_cpu_seconds"],
                                                                     strict=True)))
             for r in rep["rows"]]
    print(render_table(table, [("cell", "clients x rows x cols"), ("side", "parties' code"),
                               ("seconds", "spawn -> result s", ".2f"), ("call", "whole call s", ".2f"),
                               ("cpu", "CPU s (all)", ".2f"),
                               ("same", "same release"), ("load", "load 1 min"),
                               ("runs", "every run s/CPU s")]))
    print("spawn -> result: first party process spawned -> last result collected by the launcher; whole call: "
          "SQMPCA.fit, with the launcher's planning and the components: "
          + "; ".join(f"{r['clients']} clients, {r['side']}: {r['before_spawn_seconds']:.2f} s before the first "
                      f"spawn, {r['after_collect_seconds']:.2f} s after the last result" for r in rep["rows"]))
    for r in rep["rows"]:
        names = [n for n in PHASE_COLUMNS if any(n in p for p in r["phases"])]
        print(f"\nseconds per phase, {r['clients']} x {r['rows']:,} x {r['cols']}, {r['side']} (each party's own "
              "timings)")
        print(render_table(r["phases"], ["process"] + [(n, PHASE_HEADERS.get(n, n), ".3f") for n in names]
                           + [("cpu", "CPU s", ".2f")]))
        print("its start, step by step (python -m bench start's steps: interpreter, standard library, program file "
              "unpickled with its data and modules, MPyC imported, every peer connected)")
        print(render_table(r["starts"], ["process"] + [(n, n, ".3f") for n, _, _ in STEPS]))
    if rep["target_met"] is not None:
        print(f"\ntarget (KDDCUP shape, {TARGET_CLIENTS} clients, spawn -> result < {TARGET_SECONDS:g} s on an idle "
              f"machine): {'met' if rep['target_met'] else 'NOT met'} (1-minute load before the runs: "
              f"{', '.join(f'{x:.2f}' for x in rep['target_load_1min'])})")
    for side, f in rep.get("frames", {}).items():
        print(f"one message of input shares ({f['mib']:.1f} MiB), {side}: encode {f['encode_ms']:.2f} ms, copy into "
              f"MPyC's message {f['send_copy_ms']:.2f} ms, decode {f['decode_ms']:.2f} ms (median of 200, interleaved)")
    print(f"load average at the end {', '.join(f'{x:.2f}' for x in rep['load_average'])}")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", default="195666", help="records, a comma list (default 195666: the KDDCUP shape's)")
    ap.add_argument("--cols", default="117", help="feature columns in all, split among the clients, a comma list "
                                                  "(default 117)")
    ap.add_argument("--clients", default="2,3", help="client counts, a comma list (default 2,3)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell, the cells interleaved; the table quotes "
                                                          "each cell's fastest (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="the data's and the release's seed (default 0)")
    ap.add_argument("--baseline", metavar="TREE",
                    help="another checkout (e.g. an older commit's files): each run is repeated with the parties "
                         "on its code, interleaved, for a before/after in one run")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    from bench.job import _ints
    from sqm.errors import UsageError

    rows = _ints(args.rows, "--rows", 1)
    cols = _ints(args.cols, "--cols", 1)
    clients = _ints(args.clients, "--clients", 2)
    if args.repeat < 1:
        raise UsageError(f"--repeat takes an integer >= 1, got {args.repeat}")
    if min(cols) < max(clients):
        raise UsageError(f"--cols {min(cols)}: every one of {max(clients)} clients needs a column")
    return finish(run(rows, cols, clients, args.repeat, args.seed, progress=not getattr(args, "quiet", 0),
                      baseline=args.baseline), args,
                  print_table)
