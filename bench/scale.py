"""Secure covariance at scale: job mode from Parquet party files, time and peak memory per party vs records.

    python -m bench scale --rows 10000,100000,200000,500000,1000000,2000000 --json scale.json --plot scale.png

Each record count is one PCA job (``sqm pca --job``'s task, :class:`sqm.apps.pca.job.PCAJobTask`) through real
MPyC party processes on loopback: every client reads its own Parquet file (written here in row groups,
ids sorted) in chunks (:mod:`sqm.framework.table_stream`), and every party evaluates the secure covariance chunk
by chunk (:mod:`sqm.mpc.protocols.stream`), so its peak memory should not grow with the record count.  Reported per
record count: end-to-end seconds (processes started to result), each party's time inside the protocol and
peak resident memory (``ru_maxrss``), bytes sent.  Targets (issue 15): peak memory per party within 20%
from 2 x 10^5 to 2 x 10^6 records and under 1 GiB; time linear in the records; 2,000,000 x 117 under 60 s
on 2 cores.  ``--check-rows`` also runs one smaller job twice with the same (insecure, benchmark-only)
seed, in the default chunks and in one chunk, and reports whether the released integers are identical.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from bench.common import finish
from bench.scale_files import write_parties

MEMORY_TARGET_BYTES = 1 << 30
FLAT_TOLERANCE = 0.20
TIME_TARGET_S = 60.0
TIME_TARGET_ROWS = 2_000_000


def run_one(job_file: str, gamma: float, epsilon: float, chunk_rows=None, seed=None, timeout: float = 3600.0):
    """One PCA job through real party processes: (records of every party, end-to-end seconds)."""
    from sqm.framework.spec import load_job
    from sqm.framework.runners import run_job
    from sqm.apps.pca.job import PCAJobTask

    task = PCAJobTask(2, epsilon, gamma=gamma, seed=seed, insecure_reproducible=seed is not None,
                      chunk_rows=chunk_rows)
    t0 = time.perf_counter()
    records = run_job(load_job(job_file), task, backend="mpyc", timeout=timeout)
    return records, time.perf_counter() - t0


def run(rows_list, cols: int = 117, clients: int = 3, gamma: float = 4096.0, epsilon: float = 1.0,
        check_rows: int | None = 20000, workdir: str | None = None, keep: bool = False, progress: bool = True) -> dict:
    from tqdm import tqdm

    from sqm.mpc.protocols.stream import chunk_rows

    base = workdir or tempfile.mkdtemp(prefix="sqm-bench-scale-")
    out_rows = []
    try:
        for rows in tqdm(rows_list, desc="scale", disable=not progress):
            folder = os.path.join(base, f"{rows}x{cols}")
            t0 = time.perf_counter()
            job = write_parties(folder, rows, cols, clients)
            write_s = time.perf_counter() - t0
            records, seconds = run_one(job, gamma, epsilon)
            out_rows.append(dict(
                rows=int(rows), seconds=seconds, write_seconds=write_s,
                file_bytes=int(sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
                                   if f.endswith(".parquet"))),
                party_seconds=[float(r["seconds"]) for r in records],
                max_rss_bytes=[int(r["max_rss_bytes"]) for r in records],
                bytes_sent=[int(r.get("bytes_sent", 0)) for r in records],
                phases=[dict(r.get("phases", {})) for r in records],
                exchanges=[int(r.get("exchanges", 0)) for r in records]))
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
        check = None
        if check_rows:
            folder = os.path.join(base, f"check-{check_rows}x{cols}")
            job = write_parties(folder, check_rows, cols, clients, seed=1)
            small = max(1024, check_rows // 7)
            chunked, _ = run_one(job, gamma, epsilon, chunk_rows=small, seed=11)
            whole, _ = run_one(job, gamma, epsilon, chunk_rows=check_rows, seed=11)
            a, b = chunked[0]["result"]["raw"], whole[0]["result"]["raw"]
            check = dict(rows=int(check_rows), chunk_rows=small, chunks=-(-check_rows // small),
                         identical=bool(len(a) == len(b) and all(int(x) == int(y) for x, y in zip(a, b, strict=False))))
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if workdir is None and not keep:
            shutil.rmtree(base, ignore_errors=True)
    return summarize(dict(shape_cols=cols, clients=clients, parties=clients + 1, gamma=gamma, epsilon=epsilon,
                          chunk_rows=chunk_rows(cols), rows=out_rows, unchunked_check=check))


def summarize(rep: dict) -> dict:
    import numpy as np

    rows = rep["rows"]
    peak = {r["rows"]: max(r["max_rss_bytes"]) for r in rows}
    band = [v for k, v in peak.items() if 200_000 <= k <= 2_000_000]
    rep["peak_rss_max_bytes"] = max(peak.values()) if peak else None
    rep["memory_under_target"] = bool(peak) and max(peak.values()) < MEMORY_TARGET_BYTES
    rep["memory_flat_ratio"] = (max(band) / min(band)) if len(band) >= 2 else None
    rep["memory_flat"] = None if rep["memory_flat_ratio"] is None else rep["memory_flat_ratio"] <= 1 + FLAT_TOLERANCE
    if len(rows) >= 2:  # least-squares line seconds = a + b rows, and how far each point lies from it
        x = np.array([r["rows"] for r in rows], float)
        y = np.array([r["seconds"] for r in rows], float)
        b, a = np.polyfit(x, y, 1)
        rep["seconds_per_million_records"] = float(b * 1e6)
        rep["fixed_seconds"] = float(a)
        rep["linear_fit_max_rel_residual"] = float(np.max(np.abs(a + b * x - y) / y))
    big = [r for r in rows if r["rows"] == TIME_TARGET_ROWS]
    rep["time_target_met"] = (big[0]["seconds"] < TIME_TARGET_S) if big and rep["shape_cols"] == 117 else None
    return rep


def print_table(rep: dict) -> None:
    print(f"secure covariance in job mode from Parquet files: {rep['shape_cols']} columns, {rep['clients']} clients "
          f"({rep['parties']} MPyC processes), gamma {rep['gamma']:g}, chunks of {rep['chunk_rows']:,} records")
    print(f"{'records':>10} {'end to end s':>13} {'protocol s (max)':>17} {'peak RSS/party MiB':>34} "
          f"{'MiB sent (max)':>15}")
    for r in rep["rows"]:
        rss = " ".join(f"{b / 2 ** 20:5.0f}" for b in r["max_rss_bytes"])
        print(f"{r['rows']:>10,} {r['seconds']:>13.2f} {max(r['party_seconds']):>17.2f} {rss:>34} "
              f"{max(r['bytes_sent']) / 2 ** 20:>15.0f}")
    if rep.get("memory_flat_ratio") is not None:
        print(f"peak memory 2e5..2e6 records: max/min {rep['memory_flat_ratio']:.3f} (target <= "
              f"{1 + FLAT_TOLERANCE:.2f}): {'met' if rep['memory_flat'] else 'NOT met'}")
    if rep.get("peak_rss_max_bytes"):
        print(f"largest peak: {rep['peak_rss_max_bytes'] / 2 ** 20:.0f} MiB (target < 1024 MiB): "
              f"{'met' if rep['memory_under_target'] else 'NOT met'}")
    if "seconds_per_million_records" in rep:
        print(f"time = {rep['fixed_seconds']:.2f} s + {rep['seconds_per_million_records']:.2f} s per million records "
              f"(largest relative residual {rep['linear_fit_max_rel_residual']:.1%})")
    if rep.get("time_target_met") is not None:
        print(f"2,000,000 x 117 under {TIME_TARGET_S:.0f} s: {'met' if rep['time_target_met'] else 'NOT met'}")
    c = rep.get("unchunked_check")
    if c:
        print(f"{c['rows']:,} records in {c['chunks']} chunks of {c['chunk_rows']:,} vs one chunk, same seeds: "
              f"released integers {'identical' if c['identical'] else 'DIFFERENT'}")


def plot(rep: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["rows"] for r in rep["rows"]]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(x, [r["seconds"] for r in rep["rows"]], "o-")
    ax[0].set(xlabel="records", ylabel="seconds", title="end to end")
    for i in range(rep["parties"]):
        ax[1].plot(x, [r["max_rss_bytes"][i] / 2 ** 20 for r in rep["rows"]], "o-",
                   label="server" if i == 0 else f"client {i}")
    ax[1].axhline(1024, ls="--", c="gray")
    ax[1].set(xlabel="records", ylabel="MiB", title="peak resident memory per party")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", default=None,
                    help="comma list of record counts (default 10^4 ... 2 x 10^6; with --workers 10^5,10^6,10^7)")
    ap.add_argument("--workers", type=int, default=1,
                    help="shard workers per party (sqm.mpc.protocols.shards): each record count runs with one process "
                         "per party and with W workers per party, interleaved, and a cost model is fitted "
                         "(bench/scale_workers.py; default 1: the job-mode table above)")
    ap.add_argument("--link-gbps", type=float, default=10.0,
                    help="with --workers: the network link per party that the 10^8-record prediction assumes "
                         "(default 10 Gbit/s)")
    ap.add_argument("--cols", type=int, default=117, help="columns in all (default 117, KDDCUP's)")
    ap.add_argument("--parties", type=int, default=3, help="clients; MPyC parties = clients + 1 (default 3)")
    ap.add_argument("--gamma", type=float, default=4096.0, help="quantization scale (default 4096)")
    ap.add_argument("--epsilon", type=float, default=1.0, help="server-observed epsilon (default 1)")
    ap.add_argument("--check-rows", type=int, default=20000,
                    help="records of the chunked-vs-one-chunk identity check (0: skip; default 20000)")
    ap.add_argument("--workdir", help="folder for the party files (default: a temporary folder, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the party files")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot to this file")


def cli(args) -> int:
    if args.workers > 1:
        from bench import scale_workers

        rows = [int(float(r)) for r in (args.rows or "1e5,1e6,1e7").split(",") if r.strip()]
        rep = scale_workers.run(rows, args.workers, args.cols, args.parties, args.gamma, args.epsilon,
                                args.workdir, args.keep, args.link_gbps, progress=not getattr(args, "quiet", 0))
        return finish(rep, args, scale_workers.print_table, None)
    if args.workers < 1:
        from sqm.errors import UsageError

        raise UsageError(f"--workers must be 1 or more, got {args.workers}")
    rows = [int(float(r)) for r in (args.rows or "10000,100000,200000,500000,1000000,2000000").split(",")
            if r.strip()]
    rep = run(rows, args.cols, args.parties, args.gamma, args.epsilon, args.check_rows or None, args.workdir,
              args.keep, progress=not getattr(args, "quiet", 0))
    return finish(rep, args, print_table, plot)
