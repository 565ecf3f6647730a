"""The whole job: a PCA job (record alignment + DP release) through real party processes beside SecretFlow's PSI + SPU ABY3 Gram.

    python -m bench job --spu-python ~/spu-venv/bin/python --json job.json
    python -m bench job --rows 195666 --cols 117 --clients 2 --repeat 1      # the KDDCUP shape, 2 clients

What is compared.  For every cell (``--rows`` x ``--cols`` x ``--clients``) the party files are built once: each
client holds ``rows`` records (distinct 12-digit ids, sorted; :func:`bench.psi.write_parties`), ``--overlap`` of
them held by every client, and its share of the ``cols`` feature columns (split as evenly as possible; synthetic
values, rows of norm about 1/2).  Both sides read the same files.

- **ours**: the job ``sqm pca --job`` runs (:func:`sqm.framework.runners.run_job` with
  :class:`sqm.apps.pca.job.PCAJobTask` at its defaults): a server and one process per client over loopback TLS,
  each client reading its own Parquet file, the record alignment (ECDH PSI), then the SQM release (clipping,
  dependent rounding, Skellam noise, Shamir sharing, the Gram on shares, the noisy result opened to the server,
  which computes the components);
- **peer**: SecretFlow's PSI (:func:`bench.psi_peer.spu_psi_run`: ECDH over Curve25519 on 2 clients, ECDH_NPC on
  3 or more) on a CSV copy of every client's ids, then SPU ABY3's exact Gram (:func:`bench.peers.spu_run`, 3 nodes,
  FM64) of the clients' intersection rows rounded at the same gamma (:func:`bench.peers.quantized_blocks`' way,
  no noise).  Selecting and rounding those rows (this launcher, numpy) is timed as the peer's "prepare" step and
  left out of its total: the peer's total is its PSI and its Gram, as the comparison's target states it.

The sides run interleaved (ours, then the peer, ``--repeat`` rounds per cell).  Per run: wall seconds from the
first process started to the last result, CPU seconds of every process the run started (user + system of the
reaped children) plus this launcher's own during the run, the 1-minute load average before it, and each
process's phases from its own timings: ours, each party's timeline (spawned -> job agreed: process start,
imports, TLS connect) and its transport's phases (``agree``: reading its ids, the schemas, the record alignment
and the plan; ``share inputs (local)``: reading, clipping, rounding and noising each chunk and Shamir-sharing it;
``exchange input shares``; ``local moments``: the Gram on shares; ``degree reduction``; ``open result``); the
peer's PSI parties (start, connect, psi) and Gram nodes (start, connect, compile, share, gram, open, output).

The model (:mod:`bench.job_model`): every process's CPU of ours split into start, record alignment and release at
the parties' phase boundaries (sampled from ``/proc``); fixed + per-unit costs per role fitted on the smaller
cells of each client count, checked within 20% at the largest (CPU seconds of all processes; wall too), and the
alignment and release of 10^8 ids per client predicted on ``--predict-cores`` cores per party (as many local
workers) over a ``--link-gbps`` link.  One extra run of ours with ``--probe-workers`` local workers per party at
the smallest cell gives a worker's start cost.  The peer's Gram is skipped, with the reason printed and kept,
where its memory or CPU extrapolated from its smaller cells of the same run would not fit this machine or
``--peer-budget``; its PSI still runs.

Target: at the KDDCUP shape (195,666 x 117) with 2 clients, ours at most one eighth of the peer's CPU seconds
(:data:`TARGET_RATIO`); the report says whether the run met it.  Without ``spu`` (or with ``--no-peer``) it runs
ours alone, prints a note and exits 0.
"""  # noqa: E501 (the first line is ``python -m bench --help``'s one-line summary of this benchmark)
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from bench.common import finish

KDDCUP = (195666, 117)
TARGET_RATIO = 8.0  # the peer's CPU seconds over ours, at least, at the KDDCUP shape with 2 clients
TARGET_CLIENTS = 2
OURS, PEER, WORKERS = "ours", "peer", "ours, workers"
PEER_BUDGET_S = 1500.0  # CPU seconds the peer's Gram of a cell may take, extrapolated, before it is skipped
PROBE_WORKERS = 2  # local workers per party of the extra run at the smallest cell (a worker's start cost)
PREDICT_CORES = (16, 32)  # cores per party of the predictions
PREDICT_IDS = 10 ** 8
LINK_GBPS = 10.0
SPU_PROTOCOL, SPU_FIELD = "ABY3", "FM64"
PEER_PSI = {2: "ECDH"}  # SecretFlow's PSI protocol by client count; ECDH_NPC on 3 or more


def peer_psi_protocol(clients: int) -> str:
    """SecretFlow's PSI for ``clients`` id holders: its 2-party ECDH on 2, its n-party ECDH otherwise."""
    return PEER_PSI.get(clients, "ECDH_NPC")


# ------------------------------------------------------------------------------------------------- the data
def write_job_files(directory: str, rows: int, cols: int, clients: int, overlap: float, seed: int = 0) -> str:
    """The cell's party files: :func:`bench.psi.write_parties`' id sets (``rows`` per client, ``overlap`` of them
    common, job file beside them), each client's file rewritten with its share of ``cols`` feature columns
    ``x0``, ``x1``, ... (values N(0, 1) / (2 sqrt(cols)), float64).  Returns the job file's path."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.psi import write_parties

    if cols < clients:
        raise ValueError(f"--cols {cols}: every one of the {clients} clients needs a column")
    job = write_parties(directory, rows, clients, overlap, seed)
    rng = np.random.default_rng(seed + 1)
    start = 0
    for j, k in enumerate(len(c) for c in np.array_split(np.arange(cols), clients)):
        path = os.path.join(directory, f"party{j + 1}.parquet")
        ids = pq.read_table(path, columns=["id"]).column("id")
        X = rng.normal(size=(len(ids), k)) / (2 * np.sqrt(cols))
        table = pa.table({"id": ids, **{f"x{start + t}": pa.array(X[:, t]) for t in range(k)}})
        pq.write_table(table, path, row_group_size=1 << 16)
        start += k
    return job


def peer_blocks(job_file: str, gamma: float) -> tuple[list, int]:
    """The peer's Gram input: every client's rows of the ids all clients hold (sorted by id), stochastically
    rounded at ``gamma`` (:func:`sqm.mechanism.quantize.stochastic_round`, seeded by the client); and the count."""
    import numpy as np
    import pyarrow.parquet as pq

    from sqm.mechanism.quantize import stochastic_round

    folder = os.path.dirname(job_file)
    tables = []
    j = 1
    while os.path.exists(os.path.join(folder, f"party{j}.parquet")):
        tables.append(pq.read_table(os.path.join(folder, f"party{j}.parquet")))
        j += 1
    ids = [np.asarray(t.column("id")) for t in tables]
    common = ids[0]
    for other in ids[1:]:
        common = np.intersect1d(common, other, assume_unique=True)
    blocks = []
    for j, (t, own) in enumerate(zip(tables, ids, strict=True)):
        X = np.column_stack([np.asarray(t.column(c)) for c in t.column_names if c != "id"])[np.isin(own, common)]
        blocks.append(np.asarray(stochastic_round(X, gamma, seed=j), dtype=np.int64))
    return blocks, int(common.size)


# ------------------------------------------------------------------------------------------------ the sides
def _phases_ours(records: list[dict]) -> list[dict]:
    """Per party (server first): start (spawned -> job agreed), its transport's phases, exit (finished ->
    exited), its own CPU seconds."""
    out = []
    for i, r in enumerate(records):
        tl = r.get("timeline", {})
        row = {"process": "server" if i == 0 else f"client {i}"}
        if "spawned" in tl and "agreed" in tl:
            row["start"] = tl["agreed"] - tl["spawned"]
        row.update({k: float(v) for k, v in r.get("phases", {}).items()})
        if tl.get("exited") is not None and "finished" in tl:
            row["exit"] = tl["exited"] - tl["finished"]
        row["cpu"] = float(r.get("cpu_seconds", 0.0))
        out.append(row)
    return out


def run_ours(job_file: str, timeout: float = 3600.0) -> dict:
    """The PCA job of ``job_file`` as ``sqm pca --job`` runs it (every party a process on this machine), at the
    task's defaults; measured (:func:`bench.psi_peer._measured`)."""
    from bench.psi_peer import _measured
    from sqm.apps.pca.job import PCAJobTask
    from sqm.apps.pca.params import PCAParams
    from sqm.framework.runners import run_job
    from sqm.framework.spec import load_job

    from bench.job_model import TreeSampler, split

    spec, task = load_job(job_file), PCAJobTask(params=PCAParams())
    with TreeSampler() as sampler:
        records, m = _measured(lambda: run_job(spec, task, backend="mpyc", timeout=timeout))
    m["cpu_seconds"] -= sampler.cpu_seconds  # the sampler's own work is not the job's
    res = records[0]["result"]
    return dict(m, processes=len(records), intersection=int(res["n_records"]),
                components=len(res["components"]), phases=_phases_ours(records),
                bytes_sent=[int(r.get("bytes_sent", 0)) for r in records],
                split=split(sampler, records, m["cpu_seconds"]),
                sampler_cpu_seconds=sampler.cpu_seconds)


def with_workers(job_file: str, workers: int) -> str:
    """A copy of ``job_file`` beside it whose parties run ``workers`` local workers each (the PSI's CPU work and
    the release's shards)."""
    import json

    with open(job_file) as f:
        raw = json.load(f)
    for p in raw["parties"]:
        p["workers"] = workers
    path = os.path.join(os.path.dirname(job_file), f"job-w{workers}.json")
    with open(path, "w") as f:
        json.dump(raw, f, indent=2)
    return path


def run_peer(python: str, job_file: str, clients: int, gamma: float, timeout: float = 1800.0,
             skip_gram: str | None = None) -> dict:
    """SecretFlow's PSI on the job's ids, then SPU ABY3's Gram of the rounded intersection rows; each measured
    (:func:`bench.psi_peer._measured`), the peer's CPU and wall their sums (the data's preparation reported
    apart).  With ``skip_gram`` (the reason) the PSI alone, its Gram's figures None and the reason kept."""
    from bench.peers import SPU_PHASES, _max_abs_error, exact_gram, spu_run
    from bench.psi_peer import _measured, spu_psi_run, write_csvs

    if clients > 3:
        raise ValueError(f"SPU ABY3 runs 3 nodes: the peer's Gram takes 2 or 3 clients' blocks, not {clients}")
    protocol = peer_psi_protocol(clients)
    csvs, prep = _measured(lambda: write_csvs(job_file))
    psi, m_psi = _measured(lambda: spu_psi_run(python, csvs, protocol, timeout))
    if skip_gram:
        return _peer_psi_only(psi, m_psi, prep, protocol, skip_gram)
    (blocks, common), m_prep = _measured(lambda: peer_blocks(job_file, gamma))
    owners = [1, 2] if clients == 2 else [0, 1, 2]  # node 0 receives the Gram (as our server does) on 2
    gram, m_gram = _measured(lambda: spu_run(python, blocks, owners, SPU_PROTOCOL, SPU_FIELD, timeout))
    exact = _max_abs_error(gram["result"], exact_gram(blocks)) == 0  # checked outside the measured call
    counts = sorted({int(r["intersection"]) for r in psi["records"]})
    phases = _psi_phases(psi)
    for i, n in enumerate(gram["nodes"]):
        phases.append(dict(process=f"Gram node {i}", **{p: n["phases"][p] for p in SPU_PHASES},
                           cpu=float(n["cpu_seconds"])))
    return dict(wall_seconds=m_psi["wall_seconds"] + m_gram["wall_seconds"],
                cpu_seconds=m_psi["cpu_seconds"] + m_gram["cpu_seconds"], load_1min=m_psi["load_1min"],
                psi_protocol=protocol, psi_wall_seconds=m_psi["wall_seconds"], psi_cpu_seconds=m_psi["cpu_seconds"],
                gram_wall_seconds=m_gram["wall_seconds"], gram_cpu_seconds=m_gram["cpu_seconds"],
                gram_max_rss_bytes=[int(n["max_rss_bytes"]) for n in gram["nodes"]], gram_skipped=None,
                prepare_cpu_seconds=m_prep["cpu_seconds"] + prep["cpu_seconds"],
                prepare_wall_seconds=m_prep["wall_seconds"] + prep["wall_seconds"],
                processes=len(psi["records"]) + len(gram["nodes"]),
                intersection=counts[0] if len(counts) == 1 and counts[0] == common else None, gram_exact=exact,
                phases=phases)


def _psi_phases(psi: dict) -> list[dict]:
    phases = []
    for r in psi["records"]:
        tl = r["timeline"]
        phases.append(dict(process=f"PSI party {r['rank']}", start=tl["ready"] - tl["started"],
                           connect=tl["connected"] - tl["ready"], psi=tl["done"] - tl["connected"],
                           cpu=float(r["cpu_seconds"])))
    return phases


def _peer_psi_only(psi: dict, m_psi: dict, prep: dict, protocol: str, reason: str) -> dict:
    counts = sorted({int(r["intersection"]) for r in psi["records"]})
    return dict(wall_seconds=m_psi["wall_seconds"], cpu_seconds=m_psi["cpu_seconds"], load_1min=m_psi["load_1min"],
                psi_protocol=protocol, psi_wall_seconds=m_psi["wall_seconds"], psi_cpu_seconds=m_psi["cpu_seconds"],
                gram_wall_seconds=None, gram_cpu_seconds=None, gram_max_rss_bytes=None, gram_skipped=reason,
                prepare_cpu_seconds=prep["cpu_seconds"], prepare_wall_seconds=prep["wall_seconds"],
                processes=len(psi["records"]), intersection=counts[0] if len(counts) == 1 else None,
                gram_exact=True, phases=_psi_phases(psi))


# -------------------------------------------------------------------------------------------------- the run
def run(rows_list, cols_list, clients_list, overlap: float = 0.8, repeat: int = 1, spu_python: str | None = None,
        seed: int = 0, workdir: str | None = None, timeout: float = 3600.0, progress: bool = True,
        peer: bool = True, peer_budget: float = PEER_BUDGET_S, probe_workers: int = PROBE_WORKERS,
        cores: tuple = PREDICT_CORES, link_gbps: float = LINK_GBPS, predict_ids: int = PREDICT_IDS) -> dict:
    """Every cell (the rows in increasing order), the sides interleaved ``repeat`` rounds; ours alone with a
    ``note`` when no interpreter imports ``spu`` or ``peer`` is False.  The peer's Gram is skipped, with the
    reason, where :func:`bench.job_model.peer_feasible` extrapolates it beyond this machine or ``peer_budget``.
    With ``probe_workers`` > 1 ours also runs at the smallest cell of each client count with that many local
    workers per party (a worker's start cost, for the model).  The model is fitted and checked, and its
    predictions made (:func:`model_report`)."""
    from bench.job_model import mem_available, peer_feasible

    from bench.peers import INSTALL_NOTE, spu_probe
    from sqm.apps.pca.params import PCAParams

    if int(repeat) != repeat or repeat < 1:
        raise ValueError(f"--repeat must be an integer >= 1, got {repeat!r}")
    python, version = spu_probe(spu_python) if peer else (None, "")
    note = (None if python is not None else f"SecretFlow absent: {version}; {INSTALL_NOTE}" if peer
            else "the peer not run (--no-peer): ours alone")
    if note and progress:
        print(note, file=sys.stderr)
    gamma = PCAParams().gamma
    base = workdir or tempfile.mkdtemp(prefix="sqm-bench-job-")
    runs = []
    try:
        for clients in clients_list:
            for rows in sorted(rows_list):
                for cols in cols_list:
                    folder = os.path.join(base, f"{clients}x{rows}x{cols}")
                    job = write_job_files(folder, rows, cols, clients, overlap, seed)
                    expected = int(round(overlap * rows))
                    sides = [OURS] + ([PEER] if python and clients <= 3 else [])  # SPU ABY3: 3 nodes
                    if probe_workers > 1 and rows == min(rows_list):
                        sides.append(WORKERS)
                    skip = None
                    if PEER in sides:
                        done = [q for q in runs if q["side"] == PEER and q["cols"] == cols]
                        fits, why = peer_feasible(done, rows, clients, peer_budget, mem_available())
                        skip = None if fits else why
                    for r in range(int(repeat)):
                        for side in sides:
                            if progress:
                                print(f"job: {clients} clients x {rows:,} x {cols}, {side}, round {r + 1}"
                                      + (f" (PSI only: {skip})" if side == PEER and skip else ""), file=sys.stderr)
                            if side == PEER:
                                got = run_peer(python, job, clients, gamma, timeout, skip)  # type: ignore[arg-type]
                            else:
                                got = run_ours(job if side == OURS else with_workers(job, probe_workers), timeout)
                                got["workers"] = probe_workers if side == WORKERS else 1
                            got.update(side=side, clients=clients, rows=rows, cols=cols, repeat=r,
                                       expected_intersection=expected,
                                       correct=got["intersection"] == expected and got.get("gram_exact", True))
                            runs.append(got)
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    from sqm.mpc.protocols.x25519 import backend

    rep = summarize(dict(overlap=overlap, repeat=int(repeat), gamma=gamma, cores=os.cpu_count(),
                         spu_python=python, secretflow=version if python else None, note=note,
                         x25519_backend=backend(), runs=runs, load_average=list(os.getloadavg()),
                         date=time.strftime("%Y-%m-%d %H:%M %Z"), peer_budget_cpu_seconds=peer_budget))
    try:
        rep["model"] = model_report(runs, overlap, cores, link_gbps, predict_ids)
    except Exception as e:  # keep the measured runs whatever the model makes of them
        rep["model"], rep["model_error"] = None, f"{type(e).__name__}: {e}"
    return rep


def model_report(runs: list[dict], overlap: float, cores=PREDICT_CORES, link_gbps: float = LINK_GBPS,
                 predict_ids: int = PREDICT_IDS) -> dict:
    """Ours' runs (one process per party) reduced to the model's figures (:func:`bench.job_model.cell_figures`,
    the least-CPU run per cell); per client count the model fitted on every cell but the largest and checked at
    the largest, then fitted on all of them for the predictions at ``predict_ids`` per client on each of
    ``cores`` per party; a worker's start (CPU seconds per worker) from the ``workers`` runs against ours at the
    same cell."""
    from bench import job_model as jm

    best: dict = {}
    for r in runs:
        k = (r["clients"], r["rows"], r["cols"], r["side"])
        if r["side"] in (OURS, WORKERS) and (k not in best or r["cpu_seconds"] < best[k]["cpu_seconds"]):
            best[k] = r
    cells = [c for k, r in best.items() if k[3] == OURS for c in [jm.cell_figures(r)] if c is not None]
    starts = []
    for (n, rows, cols, side), r in best.items():
        one = best.get((n, rows, cols, OURS))
        if side == WORKERS and one is not None:
            extra = (r["workers"] - 1) * (n + 1)  # more processes than one per party
            starts.append(max(r["cpu_seconds"] - one["cpu_seconds"], 0.0) / extra)
    worker_start = float(sum(starts) / len(starts)) if starts else 0.0
    checks, fitted_on = [], {}
    for n in sorted({c["clients"] for c in cells}):
        mine = [c for c in cells if c["clients"] == n]
        sizes = sorted({c["rows"] for c in mine})
        if len(sizes) < 3:  # a fixed cost and a per-unit cost need two sizes, the check a third
            continue
        small = [c for c in mine if c["rows"] < sizes[-1]]
        fitted_on[n] = sorted({c["rows"] for c in small})
        checks += jm.check(jm.fit(small), [c for c in mine if c["rows"] == sizes[-1]])
    model = jm.fit(cells) if cells else {}
    preds = [jm.predict(model, n, predict_ids, overlap, c, link_gbps, worker_start)
             for n in sorted(model) for c in cores]
    cpu_checks = [c for c in checks if c["check"].endswith("CPU")]
    return dict(cells=cells, fitted_on=fitted_on, checks=checks, tolerance=jm.TOLERANCE,
                cpu_checks_within=all(c["within"] for c in cpu_checks) if cpu_checks else None,
                model={str(k): v for k, v in model.items()}, worker_start_cpu_seconds=worker_start,
                predictions=preds, assumptions=jm.ASSUMPTIONS, link_gbps=link_gbps)


def summarize(rep: dict) -> dict:
    """The table's rows (one per cell and side: its least-CPU run, every run's CPU and wall seconds), the ratio of
    the peer's CPU seconds to ours per cell, and whether the target cell met :data:`TARGET_RATIO`."""
    rows, keys = [], []
    for r in rep["runs"]:
        k = (r["clients"], r["rows"], r["cols"], r["side"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        mine = [r for r in rep["runs"] if (r["clients"], r["rows"], r["cols"], r["side"]) == k]
        best = min(mine, key=lambda r: r["cpu_seconds"])
        row = dict(clients=k[0], rows=k[1], cols=k[2], side=k[3], processes=best["processes"],
                   cpu_seconds=best["cpu_seconds"], wall_seconds=best["wall_seconds"],
                   intersection=best["intersection"], correct=all(r["correct"] for r in mine),
                   all_cpu_seconds=[r["cpu_seconds"] for r in mine],
                   all_wall_seconds=[r["wall_seconds"] for r in mine], load_1min=[r["load_1min"] for r in mine],
                   phases=best["phases"])
        for extra in ("psi_protocol", "psi_cpu_seconds", "gram_cpu_seconds", "prepare_cpu_seconds", "gram_skipped",
                      "gram_max_rss_bytes", "workers"):
            if extra in best:
                row[extra] = best[extra]
        if best.get("split"):
            row["phase_cpu_seconds"] = best["split"]["cpu"]
            row["phase_wall_seconds"] = best["split"]["wall"]
        rows.append(row)
    ratios = []
    for r in rows:
        if r["side"] != OURS:
            continue
        peer = next((p for p in rows if p["side"] == PEER and (p["clients"], p["rows"], p["cols"])
                     == (r["clients"], r["rows"], r["cols"])), None)
        if peer is not None:
            align = r.get("phase_cpu_seconds", {}).get("alignment")
            ratios.append(dict(clients=r["clients"], rows=r["rows"], cols=r["cols"],
                               ratio=None if peer.get("gram_skipped") else peer["cpu_seconds"] / r["cpu_seconds"],
                               ours=r["cpu_seconds"], peer=None if peer.get("gram_skipped") else peer["cpu_seconds"],
                               ours_alignment=align, peer_psi=peer.get("psi_cpu_seconds"),
                               psi_ratio=peer["psi_cpu_seconds"] / align if align and "psi_cpu_seconds" in peer
                               else None, gram_skipped=peer.get("gram_skipped")))
    target = [q for q in ratios if (q["rows"], q["cols"], q["clients"]) == (*KDDCUP, TARGET_CLIENTS)]
    rep.update(rows=rows, ratios=ratios, correct=all(r["correct"] for r in rows), target_ratio=TARGET_RATIO,
               target_met=(target[0]["ratio"] >= TARGET_RATIO) if target and target[0]["ratio"] is not None else None)
    return rep


def _label(row: dict) -> str:
    if row["side"] == OURS:
        return "ours: sqm pca --job (PSI + DP release)"
    if row["side"] == WORKERS:
        return f"ours, {row.get('workers', PROBE_WORKERS)} local workers per party"
    if row.get("gram_skipped"):
        return f"SecretFlow {row.get('psi_protocol', 'PSI')} (Gram skipped)"
    return f"SecretFlow {row.get('psi_protocol', 'PSI')} + SPU {SPU_PROTOCOL} Gram"


def _phase_names(phases: list[dict]) -> list[str]:
    """Every process's phase names in one order that keeps each process's own (a name new to the list goes right
    after the name before it in its process); ``exit`` last."""
    names: list[str] = []
    for p in phases:
        at = -1
        for k in p:
            if k in ("process", "cpu", "exit"):
                continue
            if k in names:
                at = names.index(k)
            else:
                at += 1
                names.insert(at, k)
    return names + (["exit"] if any("exit" in p for p in phases) else [])


def print_table(rep: dict) -> None:
    from sqm.cli.tables import render_table

    if rep.get("note"):
        print(rep["note"])
    print(f"the whole job on the same party files ({rep['overlap']:.0%} of each client's ids in every client's set), "
          f"{rep['cores']} cores; ours: server + one process per client over loopback TLS, X25519 through "
          f"{rep['x25519_backend']}; peer ({rep['secretflow'] or 'not run'}): PSI, then the Gram on 3 SPU nodes")
    table = [dict(cell=f"{r['clients']} x {r['rows']:,} x {r['cols']}", side=_label(r), procs=r["processes"],
                  cpu=r["cpu_seconds"], wall=r["wall_seconds"],
                  split=_split_text(r),
                  common=r["intersection"], ok="yes" if r["correct"] else "NO",
                  load=", ".join(f"{x:.2f}" for x in r["load_1min"]),
                  runs=", ".join(f"{c:.1f}/{w:.1f}" for c, w in zip(r["all_cpu_seconds"], r["all_wall_seconds"],
                                                                     strict=True)))
             for r in rep["rows"]]
    print(render_table(table, [("cell", "clients x rows x cols"), ("side", "side"), ("procs", "processes"),
                               ("cpu", "CPU s (all)", ".2f"), ("wall", "wall s", ".2f"),
                               ("split", "CPU s by phase"), ("common", "intersection"), ("ok", "correct"),
                               ("load", "load 1 min"), ("runs", "every run CPU/wall s")]))
    print(f"least CPU of {rep['repeat']} interleaved round(s) per side: every process the run started plus the "
          "launcher; the peer's data preparation (CSV copies, selecting and rounding the intersection's rows) "
          "is not in its total")
    for r in rep["rows"]:
        names = _phase_names(r["phases"])
        print(f"\nseconds per phase, {_label(r)}, {r['clients']} x {r['rows']:,} x {r['cols']} (its own timings)")
        print(render_table(r["phases"], ["process"] + [(n, n, ".3f") for n in names] + [("cpu", "CPU s", ".2f")]))
    if rep["rows"] and rep["rows"][0]["side"] == OURS:
        print("ours: start = spawned -> job agreed (imports, TLS connect); agree = reading ids, schemas, record "
              "alignment, plan; share inputs (local) = reading, clipping, rounding, noise, Shamir sharing; "
              "local moments = the Gram on shares")
    for q in rep["ratios"]:
        cell = f"{q['clients']} x {q['rows']:,} x {q['cols']}"
        if q["ratio"] is not None:
            print(f"{cell}: the peer's CPU over ours = {q['ratio']:.2f}x ({q['peer']:.1f} s / {q['ours']:.1f} s)")
        else:
            print(f"{cell}: the peer's Gram not run: {q['gram_skipped']}")
        if q.get("psi_ratio") is not None:
            print(f"{cell}: the peer's PSI CPU over our alignment's = {q['psi_ratio']:.2f}x "
                  f"({q['peer_psi']:.1f} s / {q['ours_alignment']:.1f} s)")
    if rep["target_met"] is not None:
        print(f"target (KDDCUP shape, {TARGET_CLIENTS} clients, ours <= 1/{TARGET_RATIO:g} of the peer's CPU; "
              f"{rep['overlap']:.0%} of the ids in common): "
              f"{'met' if rep['target_met'] else 'NOT met'}")
    print(f"correct (intersections equal to the sets' built-in one; the peer's Gram equal to numpy's exact one): "
          f"{'yes' if rep['correct'] else 'NO'}; load average at "
          f"the end {', '.join(f'{x:.2f}' for x in rep['load_average'])}")


def _split_text(r: dict) -> str:
    if "phase_cpu_seconds" in r:
        c = r["phase_cpu_seconds"]
        return f"start {c['start']:.1f} + align {c['alignment']:.1f} + release {c['release']:.1f}"
    if "psi_cpu_seconds" not in r:
        return "-"
    if r.get("gram_skipped"):
        return f"PSI {r['psi_cpu_seconds']:.1f} + Gram skipped"
    return f"PSI {r['psi_cpu_seconds']:.1f} + Gram {r['gram_cpu_seconds']:.1f} (prepare {r['prepare_cpu_seconds']:.1f})"


def print_model(rep: dict) -> None:
    """The model's checks (fitted on the smaller cells, predicted at the largest) and its predictions."""
    from sqm.cli.tables import render_table

    m = rep.get("model")
    if not m or not m["cells"]:
        return
    print("\nours, CPU seconds of all processes by phase (sampled from /proc at each party's phase boundaries)")
    print(render_table(m["cells"], [("clients", "clients"), ("rows", "ids per client", ","),
                                    ("records", "records in common", ","), ("start_cpu", "start CPU s", ".2f"),
                                    ("alignment_cpu", "alignment CPU s", ".2f"),
                                    ("release_cpu", "release CPU s", ".2f"), ("job_cpu", "job CPU s", ".2f"),
                                    ("alignment_wall", "alignment wall s", ".2f"),
                                    ("release_wall", "release wall s", ".2f"), ("job_wall", "job wall s", ".2f"),
                                    ("load_1min", "load 1 min", ".2f")]))
    if m["checks"]:
        print(f"\nthe model's checks: fitted on the smaller cells of each client count "
              f"({'; '.join(f'{n} clients: ' + ', '.join(f'{x:,}' for x in v) for n, v in m['fitted_on'].items())}"
              f"), predicted at the largest (within {m['tolerance']:.0%}?)")
        table = [dict(c, cell=f"{c['clients']} x {c['rows']:,} x {c['cols']}", ok="yes" if c["within"] else "NO",
                      why=c.get("wrong_term", "")) for c in m["checks"]]
        print(render_table(table, [("cell", "cell"), ("check", "check"), ("predicted", "predicted s", ".2f"),
                                   ("measured", "measured s", ".2f"), ("rel_error", "error", "+.1%"),
                                   ("ok", "within"), ("load_1min", "load", ".2f"), ("why", "the term off")]))
        print("CPU checks within the tolerance: " + ("yes" if m["cpu_checks_within"] else "NO") +
              " (wall checks are read where the load was low)")
    print(f"\nper-unit costs (fitted on every cell; a worker's start {m['worker_start_cpu_seconds']:.2f} CPU-s)")
    units = []
    for n, f in m["model"].items():
        units.append(dict(clients=n, a_srv=f["alignment_cpu_server"]["per_unit"] * 1e6,
                          a_cl=f["alignment_cpu_client"]["per_unit"] * 1e6,
                          r_srv=f["release_cpu_server"]["per_unit"] * 1e6,
                          r_cl=f["release_cpu_client"]["per_unit"] * 1e6, start=f["start_cpu"],
                          b=f["job_bytes_per_row"]))
    print(render_table(units, [("clients", "clients"), ("a_srv", "align us/id server", ".2f"),
                               ("a_cl", "align us/id client", ".2f"), ("r_srv", "release us/record server", ".2f"),
                               ("r_cl", "release us/record client", ".2f"), ("start", "start CPU s (all)", ".2f"),
                               ("b", "bytes/id sent (busiest party, whole job)", ".0f")]))
    print(f"\npredicted: {PREDICT_IDS:.0e} ids per client, {rep['overlap']:.0%} in common, "
          f"{m['link_gbps']:g} Gbit/s per party")
    table = [dict(clients=p["clients"], cores=p["cores"], a=p["alignment"]["seconds"],
                  ac=p["alignment"]["compute_s"], acpu=p["alignment"]["cpu_s_per_party"] / 3600,
                  r=p["release"]["seconds"], rcpu=p["release"]["cpu_s_per_party"] / 3600, t=p["transfer_s"],
                  total=p["seconds"]) for p in m["predictions"]]
    print(render_table(table, [("clients", "clients"), ("cores", "cores = workers per party"),
                               ("a", "alignment s", ".0f"), ("ac", "of it compute", ".0f"),
                               ("acpu", "alignment core-h (busiest party)", ".2f"), ("r", "release s", ".0f"),
                               ("rcpu", "release core-h (busiest party)", ".2f"), ("t", "transfer s", ".0f"),
                               ("total", "job s", ".0f")]))
    print("assumptions: " + m["assumptions"])


def _ints(text: str, option: str, least: int) -> list[int]:
    from sqm.errors import UsageError

    try:
        got = [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{option} takes a comma list of integers, got {text!r}") from None
    if not got or min(got) < least:
        raise UsageError(f"{option} takes a comma list of integers >= {least}, got {text!r}")
    return got


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", default="195666,1000000",
                    help="records per client, a comma list (default 195666,1000000: the KDDCUP shape's and 10^6)")
    ap.add_argument("--cols", default="117", help="feature columns in all, split among the clients, a comma list "
                                                  "(default 117)")
    ap.add_argument("--clients", default="2,3", help="client counts, a comma list (default 2,3)")
    ap.add_argument("--overlap", type=float, default=0.8,
                    help="fraction of each client's ids held by every client (default 0.8)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds per side and cell; the table quotes "
                                                          "each side's least CPU (default 1)")
    ap.add_argument("--spu-python", default=None,
                    help="a Python interpreter that can import spu (default $SQM_SPU_PYTHON, else this one if it "
                         "can); without one, ours alone with a note")
    ap.add_argument("--no-peer", action="store_true",
                    help="run ours alone (e.g. at sizes where SPU's memory would exceed this machine's)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run of a side (default 3600)")
    ap.add_argument("--seed", type=int, default=0, help="the data's seed (default 0)")
    ap.add_argument("--workdir", help="folder for the party files (default: a temporary folder, removed)")
    ap.add_argument("--peer-budget", type=float, default=PEER_BUDGET_S,
                    help="CPU seconds the peer's Gram of a cell may take, extrapolated from its smaller cell in the "
                         f"same run, before it is skipped with the reason (default {PEER_BUDGET_S:g})")
    ap.add_argument("--probe-workers", type=int, default=PROBE_WORKERS,
                    help="local workers per party of one extra run of ours at the smallest cell, for the model's "
                         f"cost of a worker's start (1: none; default {PROBE_WORKERS})")
    ap.add_argument("--predict-cores", default=",".join(map(str, PREDICT_CORES)),
                    help="cores per party of the model's predictions, a comma list (default 16,32)")
    ap.add_argument("--link-gbps", type=float, default=LINK_GBPS,
                    help=f"network link per party the predictions assume, Gbit/s (default {LINK_GBPS:g})")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    from sqm.errors import UsageError

    rows = _ints(args.rows, "--rows", 1)
    cols = _ints(args.cols, "--cols", 1)
    clients = _ints(args.clients, "--clients", 2)
    if not 0 < args.overlap <= 1:
        raise UsageError(f"--overlap takes a fraction in (0, 1], got {args.overlap:g}")
    if args.repeat < 1:
        raise UsageError(f"--repeat takes an integer >= 1, got {args.repeat}")
    if min(cols) < max(clients):
        raise UsageError(f"--cols {min(cols)}: every one of {max(clients)} clients needs a column")
    if args.probe_workers < 1:
        raise UsageError(f"--probe-workers takes an integer >= 1, got {args.probe_workers}")
    rep = run(rows, cols, clients, args.overlap, args.repeat, args.spu_python, args.seed, args.workdir,
              args.timeout, progress=not getattr(args, "quiet", 0), peer=not args.no_peer,
              peer_budget=args.peer_budget, probe_workers=args.probe_workers,
              cores=tuple(_ints(args.predict_cores, "--predict-cores", 1)), link_gbps=args.link_gbps)
    return finish(rep, args, _print_all)


def _print_all(rep: dict) -> None:
    print_table(rep)
    print_model(rep)
