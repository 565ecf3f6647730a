"""Synthetic party files for the scale benchmarks (``python -m bench scale``, with and without ``--workers``): Parquet
files of Gaussian records written one row group at a time, and their job file."""
from __future__ import annotations

import os


def write_parties(directory: str, rows: int, cols: int, clients: int, seed: int = 0, group: int = 1 << 14) -> str:
    """Parquet party files of ``rows`` synthetic records (ids 0..rows-1, sorted), written one row group at a
    time so this process never holds the whole table, and a job file; returns the job file's path.  Rows are
    Gaussian scaled by 1 / (2 sqrt(cols)), so most have norm below 1 (the rest are clipped by SQM)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sqm.framework.spec import write_job
    from sqm.mpc.net.launch import free_ports

    os.makedirs(directory, exist_ok=True)
    counts = [len(c) for c in np.array_split(np.arange(cols), clients)]
    files, start = [], 0
    for j, k in enumerate(counts, start=1):
        names = [f"x{start + t}" for t in range(k)]
        path = os.path.join(directory, f"party{j}.parquet")
        schema = pa.schema([("id", pa.int64())] + [(n, pa.float64()) for n in names])
        with pq.ParquetWriter(path, schema) as w:
            for g, s0 in enumerate(range(0, rows, group)):
                n = min(group, rows - s0)
                block = np.random.default_rng([seed, j, g]).normal(size=(n, k)) / (2 * np.sqrt(cols))
                arrays = [pa.array(np.arange(s0, s0 + n, dtype=np.int64))]
                arrays += [pa.array(np.ascontiguousarray(block[:, t])) for t in range(k)]
                w.write_table(pa.Table.from_arrays(arrays, schema=schema))
        files.append(path)
        start += k
    addresses = [f"127.0.0.1:{p}" for p in free_ports(clients + 1)]
    return write_job(os.path.join(directory, "job.json"), addresses, files)
