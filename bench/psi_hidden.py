"""Membership-hiding alignment against the revealing PSI (``python -m bench psi --hide-membership``): a whole PCA job
(alignment and the secure covariance) in each mode, interleaved, for intersections of 10%, 50% and 90% of the
union; with ``--task logreg`` an SQM-LR job (sgd solver: ``--epochs`` epochs at sampling rate ``--q`` of the
intersection; the last client's file also holds a 0/1 label) instead.

    python -m bench psi --hide-membership --union 20000 --cols 12 --fractions 0.1,0.5,0.9 --json hidden.json
    python -m bench psi --hide-membership --task logreg --union 20000 --json hidden-lr.json

An SQM-LR job hiding membership samples its Poisson batches over the S positions its union is placed over (S the
sum of the set sizes; rate q, cap from Binomial(S, q)) and multiplies each batch row by its membership inside the
secure gradient (the clients reshare the server's one dealing of the indicator): per round about S / m times the
batch rows, and one more exchange when M <= 3t.

For each fraction f: 3 clients (``--clients``) and a union of U ids (``--union``), f U of them at every client and
the rest split evenly among the clients (each held by one client only); Parquet files, ids sorted, ``--cols``
feature columns split among the clients.  The same files go through ``sqm pca --job`` 's task
(:class:`sqm.apps.pca.job.PCAJobTask`) through real party processes on loopback, revealing membership (the
covariance over the m records in common) and hiding it (``"hide_membership"``: over the S positions the U ids of
the union are placed at, S the sum of the set sizes, each multiplied inside the protocol by its secret membership:
:mod:`sqm.framework.alignment`), alternately.
Reported per run: end-to-end seconds, bytes sent per party, peak resident memory per party, and the released
record count (m in both modes).  Hiding costs, per client: the S positions instead of the intersection's m
records in the input sharing, one more exchange and degree reduction per chunk for the membership, and the server's
indicator shares; the PSI itself is the same ring with positions in the answer instead of membership bits.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time


def write_parties(directory: str, union: int, fraction: float, clients: int, cols: int, seed: int = 0,
                  label: bool = False) -> tuple:
    """Parquet files for one cell (``label``: the last client's also holds the 0/1 label ``y`` of a linear rule);
    returns (revealing job file, hiding job file, m)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sqm.framework.spec import write_job
    from sqm.mpc.net.launch import free_ports

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.unique(rng.integers(10 ** 11, 10 ** 12, size=2 * union))[:union])
    m = int(round(fraction * union))
    common, rest = ids[:m], np.array_split(ids[m:], clients)
    counts = [len(c) for c in np.array_split(np.arange(cols), clients)]
    files, start = [], 0
    for j, k in enumerate(counts, start=1):
        own = np.sort(np.concatenate([common, rest[j - 1]]))
        table = {"id": pa.array(own.astype(np.int64))}
        X = rng.normal(size=(own.size, k)) / (2 * np.sqrt(cols))
        table.update({f"x{start + t}": pa.array(X[:, t]) for t in range(k)})
        if label and j == clients:  # a rule of the ids (so every holder's rows agree), noisy
            u = (own % 1000).astype(np.float64) / 1000.0
            table["y"] = pa.array((u + 0.2 * rng.normal(size=own.size) > 0.5).astype(np.int64))
        path = os.path.join(directory, f"party{j}.parquet")
        pq.write_table(pa.table(table), path, row_group_size=1 << 14)
        files.append(path)
        start += k
    jobs = []
    for hide in (False, True):
        addresses = [f"127.0.0.1:{p}" for p in free_ports(clients + 1)]
        jobs.append(write_job(os.path.join(directory, f"job-{'hide' if hide else 'reveal'}.json"), addresses, files,
                              min_intersection=1, hide_membership=hide))
    return jobs[0], jobs[1], m


def make_task(task: str, epsilon: float, gamma: float, q: float = 0.01, epochs: int = 2):
    if task == "logreg":
        from sqm.apps.logreg.job import LRJobTask

        return LRJobTask(epsilon, gamma=gamma, label_column="y", solver="sgd", q=q, epochs=epochs)
    from sqm.apps.pca.job import PCAJobTask

    return PCAJobTask(2, epsilon, gamma=gamma)


def run_once(job_file: str, epsilon: float, gamma: float, task: str = "pca", q: float = 0.01,
             epochs: int = 2) -> dict:
    from sqm.framework.runners import run_job
    from sqm.framework.spec import load_job

    t0 = time.perf_counter()
    recs = run_job(load_job(job_file), make_task(task, epsilon, gamma, q, epochs), backend="mpyc")
    seconds = time.perf_counter() - t0
    res = recs[0]["result"]
    extra = {}
    if task == "logreg":  # the training loop alone (at the server) and its batch cap
        extra = {"train_seconds": float(res["seconds"]), "rounds": int(res["schedule"]["rounds"]),
                 "b_max": int(res["b_max"])}
    return {**extra, "seconds": seconds, "bytes_sent": [int(r.get("bytes_sent", 0)) for r in recs],
            "max_rss_bytes": [int(r["max_rss_bytes"]) for r in recs], "records": int(res["n_records"]),
            "union": res["alignment"].get("union"), "positions": res["alignment"].get("positions"),
            "phases": [dict(r.get("phases", {})) for r in recs]}


def run(fractions, union: int = 20000, clients: int = 3, cols: int = 12, epsilon: float = 1.0,
        gamma: float = 4096.0, repeat: int = 1, workdir: str | None = None, progress: bool = True,
        task: str = "pca", q: float = 0.01, epochs: int = 2) -> dict:
    from tqdm import tqdm

    base = workdir or tempfile.mkdtemp(prefix="sqm-bench-hidden-")
    rows = []
    try:
        for f in tqdm(fractions, desc="psi --hide-membership", disable=not progress):
            folder = os.path.join(base, f"f{f:g}")
            reveal, hide, m = write_parties(folder, union, f, clients, cols, label=task == "logreg")
            for _ in range(repeat):
                for mode, job in (("reveal", reveal), ("hide", hide)):
                    r = run_once(job, epsilon, gamma, task, q, epochs)
                    rows.append({"fraction": f, "mode": mode, "intersection": m, **r})
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return {"task": task, **({"q": q, "epochs": epochs} if task == "logreg" else {}),
            "union": union, "clients": clients, "cols": cols, "epsilon": epsilon, "gamma": gamma,
            "load_average": list(os.getloadavg()), "cores": os.cpu_count(), "rows": rows,
            "ratios": _ratios(rows)}


def _ratios(rows) -> list[dict]:
    """Per fraction: hiding over revealing, best of the repeats (time, max bytes of a client, max peak memory)."""
    out = []
    for f in sorted({r["fraction"] for r in rows}):
        best = {}
        for mode in ("reveal", "hide"):
            rs = [r for r in rows if r["fraction"] == f and r["mode"] == mode]
            best[mode] = {"seconds": min(r["seconds"] for r in rs),
                          **({"train_seconds": min(r["train_seconds"] for r in rs)} if "train_seconds" in rs[0]
                             else {}),
                          "client_bytes": min(max(r["bytes_sent"][1:]) for r in rs),
                          "rss": min(max(r["max_rss_bytes"]) for r in rs)}
        out.append({"fraction": f, **{f"{k}_ratio": best["hide"][k] / best["reveal"][k] for k in best["hide"]}})
    return out


def print_table(rep: dict) -> None:
    lr = rep.get("task") == "logreg"
    what = (f"an SQM-LR job (sgd, q {rep['q']:g} of the intersection, {rep['epochs']} epochs)" if lr else
            "a PCA job")
    print(f"{what} revealing or hiding membership: union {rep['union']:,} ids, {rep['clients']} clients, "
          f"{rep['cols']} columns; load average {rep['load_average'][0]:.2f} on {rep['cores']} cores")
    print(f"{'in common':>10} {'mode':>7} {'records':>8} {'end to end s':>13} "
          + (f"{'training s':>11} {'rounds':>7} {'b_max':>6} " if lr else "")
          + f"{'MiB sent (max client)':>22} {'MiB sent (server)':>18} {'peak MiB (max)':>15}")
    for r in rep["rows"]:
        print(f"{r['fraction']:>10.0%} {r['mode']:>7} {r['records']:>8,} {r['seconds']:>13.2f} "
              + (f"{r['train_seconds']:>11.2f} {r['rounds']:>7} {r['b_max']:>6} " if lr else "")
              + f"{max(r['bytes_sent'][1:]) / 2 ** 20:>22.2f} {r['bytes_sent'][0] / 2 ** 20:>18.2f} "
              f"{max(r['max_rss_bytes']) / 2 ** 20:>15.0f}")
    for q in rep["ratios"]:
        print(f"{q['fraction']:.0%} in common: hiding / revealing = {q['seconds_ratio']:.2f}x time"
              + (f" ({q['train_seconds_ratio']:.2f}x training)" if lr else "")
              + f", {q['client_bytes_ratio']:.2f}x bytes per client, {q['rss_ratio']:.2f}x peak memory")
