"""Shard workers (``python -m bench scale --workers W``): the secure covariance with W workers per party against one
process per party, time and peak memory per worker, and a cost model fitted to the measurements.

    python -m bench scale --workers 2 --rows 100000,1000000,3000000 --json scale-workers.json

For each record count the same Parquet party files (:func:`bench.scale_files.write_parties`: 3 clients, 117 columns,
ids 0..N-1 sorted) go through the PCA job's task (:class:`sqm.apps.pca.job.PCAJobTask`, one SQM covariance
release) through real party processes on loopback, twice, interleaved: one process per party, then W shard
workers per party (:mod:`sqm.mpc.protocols.shards`, local processes).  The files hold the same ids, so the record
alignment is left out here (it is the PSI's cost, measured by ``python -m bench psi``): the parties read their files
as aligned (a bench-only program, :class:`DirectParty`).  The sharded release must equal the unsharded one bit
for bit (benchmark-only seeds; reported as ``identical``).

The model.  One secure covariance of N records with W workers per party costs

    T(N, W) = F + S(W) + N x c / P(W) + R

- c: CPU seconds per record of all processes of the job together (the workers' and the parties' own), fitted by
  least squares to the measured CPU times (``cpu_seconds`` of every process);
- P(W): the cores the work runs on at once: min(cores of this machine, processes computing) here; W per party
  on a party's own hosts;
- F: the launcher and the parties before the evaluation (start, connect, plan), measured per run;
- S(W): a shard session's start (a worker's spawn to connected), measured;
- R: after the shards (the summands' exchange, the degree reduction, the opening), measured.

Here, with every process on 2 cores, T is checked against the measured end-to-end time of each run (within 20%:
``model_check``).  For a deployment it predicts N = 10^8 records x 117 columns with 8 and 32 workers per party,
each worker a core of its own: the clients' per-record CPU (c_client: a client's share of c, its workers doing
its part) split over W workers, plus the transfer of a client's input shares (b bytes per record, measured) over
its network link (``--link-gbps``, default 10 Gbit/s, shared by the party's workers), plus F, S and R as
measured.  The prediction is a model, not a measurement: what it leaves out is stated with it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

from sqm.mpc.net.party import PartyProgram

LINK_GBPS = 10.0
CHECK_TOLERANCE = 0.20


class DirectParty(PartyProgram):
    """BENCHMARK ONLY: one party of a PCA job on files whose records are already aligned (the same ids in the
    same order), without the record alignment; ``shards``: (count, every party's worker addresses, None)."""

    def __init__(self, task, file, columns, n_rows: int, col_counts, shards=None):
        self.task, self.file, self.columns, self.n_rows = task, file, list(columns), int(n_rows)
        self.col_counts, self.shards = tuple(col_counts), shards

    async def run(self, ctx):
        from sqm.framework.party import JobMeta
        from sqm.framework.table_stream import StreamedTable
        from sqm.mpc.protocols.context import PartyContext
        from sqm.mpc.protocols.shards import ShardRunner

        runner = None if self.shards is None else ShardRunner(*self.shards)
        table = None if self.file is None else StreamedTable(self.file, self.columns, self.n_rows, "id")
        return await self.task.run(PartyContext(ctx, shards=runner), table, JobMeta(self.col_counts, self.n_rows))


def _programs(job_file: str, rows: int, task, workers: int):
    import pyarrow.parquet as pq

    from sqm.framework.spec import load_job
    from sqm.mpc.net.launch import free_ports
    from sqm.mpc.protocols.shards import shard_ranges  # noqa: F401  (the ranges the workers take)

    spec = load_job(job_file)
    cols = []
    for p in spec.parties[1:]:
        names = pq.ParquetFile(p.file).schema_arrow.names
        cols.append([n for n in names if n != "id"])
    counts = [len(c) for c in cols]
    M = len(spec.parties)
    ports = free_ports(M * (workers + 1))
    addrs = [f"127.0.0.1:{p}" for p in ports[:M]]
    shards = None
    if workers > 1:
        waddr = [[f"127.0.0.1:{p}" for p in ports[M + i * workers:M + (i + 1) * workers]] for i in range(M)]
        shards = (workers, waddr, None)
    progs = [DirectParty(task, None, [], rows, counts, shards)]
    progs += [DirectParty(task, p.file, c, rows, counts, shards) for p, c in zip(spec.parties[1:], cols, strict=False)]
    return progs, addrs


def run_once(job_file: str, rows: int, workers: int, gamma: float, epsilon: float, seed: int = 11) -> dict:
    from sqm.apps.pca.job import PCAJobTask
    from sqm.mpc.net.launch import run_parties

    task = PCAJobTask(2, epsilon, gamma=gamma, seed=seed, insecure_reproducible=True)
    progs, addrs = _programs(job_file, rows, task, workers)
    t0 = time.perf_counter()
    recs = run_parties(progs, addresses=addrs, timeout=7200, min_clients=2)
    seconds = time.perf_counter() - t0
    out = {"rows": rows, "workers": workers, "seconds": seconds, "raw_digest": _digest(recs[0]["result"]["raw"]),
           "parties": []}
    for _i, r in enumerate(recs):
        tl = r.get("timeline", {})
        ws = r.get("shard_workers") or []
        out["parties"].append({
            "seconds": r["seconds"], "cpu_seconds": r.get("cpu_seconds"), "max_rss_bytes": r["max_rss_bytes"],
            "bytes_sent": r["bytes_sent"], "phases": r.get("phases", {}),
            "start_seconds": (tl.get("agreed", 0) - tl.get("spawned", 0)) if tl.get("spawned") else None,
            "workers": [{"seconds": w["seconds"], "cpu_seconds": w.get("cpu_seconds"),
                         "max_rss_bytes": w["max_rss_bytes"], "bytes_sent": w["bytes_sent"],
                         "start_seconds": _start(w.get("timeline") or {})} for w in ws]})
    return out


def _start(tl: dict):
    return (tl["connected"] - tl["started"]) if "connected" in tl and "started" in tl else None


def _digest(raw) -> str:
    import hashlib

    return hashlib.sha256(",".join(str(int(v)) for v in raw).encode()).hexdigest()


def cpu_total(run: dict) -> float:
    return sum((p["cpu_seconds"] or 0) + sum(w["cpu_seconds"] or 0 for w in p["workers"]) for p in run["parties"])


def client_cpu(run: dict) -> float:
    """The busiest client's CPU seconds (its own process and its workers)."""
    return max((p["cpu_seconds"] or 0) + sum(w["cpu_seconds"] or 0 for w in p["workers"]) for p in run["parties"][1:])


def fit(runs: list[dict], cores: int) -> dict:
    """The model's parameters from the runs (see the module docstring), and its check at every run."""
    import numpy as np

    model = {"cores": cores, "per_workers": {}}
    for W in sorted({r["workers"] for r in runs}):
        rs = [r for r in runs if r["workers"] == W]
        x = np.array([r["rows"] for r in rs], float)
        cpu = np.array([cpu_total(r) for r in rs])
        ccl = np.array([client_cpu(r) for r in rs])
        if len(rs) >= 2:
            c, c0 = np.polyfit(x, cpu, 1)
            cc, cc0 = np.polyfit(x, ccl, 1)
        else:
            c, c0, cc, cc0 = cpu[0] / x[0], 0.0, ccl[0] / x[0], 0.0
        # the fixed part: what the wall time shows beyond the per-record CPU spread over the cores
        procs = 4 * max(W, 1)
        P = min(cores, procs)
        fixed = [r["seconds"] - c * r["rows"] / P for r in rs]
        model["per_workers"][W] = {"cpu_per_record": float(c), "cpu_fixed": float(c0),
                                   "client_cpu_per_record": float(cc), "client_cpu_fixed": float(cc0),
                                   "fixed_seconds": float(np.median(fixed)), "cores_used": P,
                                   "shard_start_seconds": _median([w["start_seconds"] for r in rs
                                                                   for p in r["parties"] for w in p["workers"]]),
                                   "client_bytes_per_record": float(np.median(
                                       [max(p["bytes_sent"] + sum(w["bytes_sent"] for w in p["workers"])
                                            for p in r["parties"][1:]) / r["rows"] for r in rs]))}
    checks = []
    for r in runs:
        m = model["per_workers"][r["workers"]]
        # the fixed part is fitted at the smallest record count only and checked at the others
        small = min((q for q in runs if q["workers"] == r["workers"]), key=lambda q: q["rows"])
        F = small["seconds"] - m["cpu_per_record"] * small["rows"] / m["cores_used"]
        pred = F + m["cpu_per_record"] * r["rows"] / m["cores_used"]
        checks.append({"rows": r["rows"], "workers": r["workers"], "measured": r["seconds"], "model": pred,
                       "rel_error": abs(pred - r["seconds"]) / r["seconds"], "fitted_here": r is small})
    model["checks"] = checks
    checked = [c for c in checks if not c["fitted_here"]]
    model["check_max_rel_error"] = max((c["rel_error"] for c in checked), default=None)
    model["check_passed"] = None if not checked else model["check_max_rel_error"] <= CHECK_TOLERANCE
    return model


def _median(v):
    import numpy as np

    v = [x for x in v if x is not None]
    return float(np.median(v)) if v else None


def predict(model: dict, rows: int, workers: int, link_gbps: float) -> dict:
    """A deployment's time for ``rows`` records with ``workers`` per party (each on a core of its own)."""
    base = model["per_workers"][max(model["per_workers"])]  # the sharded runs' per-record figures
    one = model["per_workers"].get(1, base)
    compute = base["client_cpu_per_record"] * rows / workers
    transfer = base["client_bytes_per_record"] * rows / (link_gbps * 1e9 / 8)
    start = (base["shard_start_seconds"] or 0.0)
    fixed = one["fixed_seconds"]
    return {"rows": rows, "workers": workers, "link_gbps": link_gbps, "compute_s": compute, "transfer_s": transfer,
            "start_s": start, "fixed_s": fixed, "seconds": fixed + start + max(compute, transfer),
            "seconds_no_overlap": fixed + start + compute + transfer}


def run(rows_list, workers: int, cols: int = 117, clients: int = 3, gamma: float = 4096.0, epsilon: float = 1.0,
        workdir: str | None = None, keep: bool = False, link_gbps: float = LINK_GBPS, progress: bool = True) -> dict:
    from tqdm import tqdm

    from bench.scale_files import write_parties

    base = workdir or tempfile.mkdtemp(prefix="sqm-bench-workers-")
    runs = []
    try:
        for rows in tqdm(rows_list, desc="scale --workers", disable=not progress):
            folder = os.path.join(base, f"{rows}x{cols}")
            job = write_parties(folder, rows, cols, clients)
            one = run_once(job, rows, 1, gamma, epsilon)
            many = run_once(job, rows, workers, gamma, epsilon)
            many["identical"] = many["raw_digest"] == one["raw_digest"]
            runs += [one, many]
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if workdir is None and not keep:
            shutil.rmtree(base, ignore_errors=True)
    cores = os.cpu_count() or 1
    model = fit(runs, cores)
    preds = [predict(model, 10 ** 8, w, link_gbps) for w in (8, 32)]
    return {"shape_cols": cols, "clients": clients, "workers": workers, "gamma": gamma, "epsilon": epsilon,
            "cores": cores, "load_average": list(os.getloadavg()), "runs": runs, "model": model,
            "predictions": preds, "all_identical": all(r.get("identical", True) for r in runs)}


def print_table(rep: dict) -> None:
    W = rep["workers"]
    print(f"secure covariance, {rep['shape_cols']} columns, {rep['clients']} clients, one process per party vs "
          f"{W} shard workers per party (local processes), {rep['cores']} cores; load average "
          f"{rep['load_average'][0]:.2f}")
    print(f"{'records':>10} {'workers':>7} {'end to end s':>13} {'model s':>8} {'CPU s (all)':>12} "
          f"{'peak MiB/worker (max)':>22} {'MiB sent/client':>16} {'identical':>9}")
    checks = {(c["rows"], c["workers"]): c for c in rep["model"]["checks"]}
    for r in rep["runs"]:
        peaks = [w["max_rss_bytes"] for p in r["parties"] for w in p["workers"]] or \
            [p["max_rss_bytes"] for p in r["parties"]]
        sent = max(p["bytes_sent"] + sum(w["bytes_sent"] for w in p["workers"]) for p in r["parties"][1:])
        c = checks[(r["rows"], r["workers"])]
        print(f"{r['rows']:>10,} {r['workers']:>7} {r['seconds']:>13.2f} {c['model']:>8.2f}"
              f"{'*' if c['fitted_here'] else ' '} {cpu_total(r):>11.1f} {max(peaks) / 2 ** 20:>22.0f} "
              f"{sent / 2 ** 20:>16.0f} {str(r.get('identical', '-')):>9}")
    m = rep["model"]
    print("model: T = F + N c / P (F fitted at the smallest N, marked *; c from the processes' CPU times);")
    for W, p in sorted(m["per_workers"].items()):
        print(f"  W={W}: c = {p['cpu_per_record'] * 1e6:.1f} CPU us per record (all processes), a client "
              f"{p['client_cpu_per_record'] * 1e6:.1f} us, {p['client_bytes_per_record']:.0f} bytes per record "
              f"sent per client, P = {p['cores_used']}, shard session start "
              f"{p['shard_start_seconds'] if p['shard_start_seconds'] is not None else float('nan'):.2f} s")
    if m["check_passed"] is not None:
        print(f"model vs measured at the other points: largest error {m['check_max_rel_error']:.1%} (within "
              f"{CHECK_TOLERANCE:.0%}: {'yes' if m['check_passed'] else 'NO'})")
    for p in rep["predictions"]:
        print(f"predicted 10^8 x {rep['shape_cols']}, {p['workers']} workers per party (a core each), "
              f"{p['link_gbps']:g} Gbit/s link: {p['seconds']:.0f} s (compute {p['compute_s']:.0f} s, transfer "
              f"{p['transfer_s']:.0f} s, overlapped; {p['seconds_no_overlap']:.0f} s if not)")
    print(f"sharded releases identical to one process per party: {rep['all_identical']}")
