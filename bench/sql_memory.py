"""A party's peak memory reading its table from a database in batches, at growing row counts.

    python -m bench sql-memory --rows 100000,1000000 --engine duckdb,postgres,postgres-psycopg --json sql-memory.json

For each engine and row count, a table of ``--cols`` float columns and an integer id (sorted) is made in a fresh
database (a DuckDB file, or a throwaway PostgreSQL server: bench/pg_server.py), and a child process reads it as a
job's client does (:func:`sqm.framework.table_stream.scan_table`: one checking pass, then every chunk and every id,
:mod:`sqm.framework.sql_tables`), its connection string in an environment variable.  Reported per case: the
child's peak resident memory (``VmHWM``) and its resident memory after its imports (the baseline), so the
memory the reading took is their difference; ``--whole`` adds the same read done whole
(:func:`sqm.framework.sql_tables.read_sql_table`) for contrast.  The streamed figure should not grow with the rows.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ENGINES = ("duckdb", "postgres", "postgres-psycopg")
ENV = "SQM_BENCH_SQL_URL"  # the child's connection string: in its environment, as an operator gives it


def _status_mib(key: str) -> float:
    """This process's ``VmHWM`` (peak) or ``VmRSS`` (now) in MiB, from /proc/self/status: of this program alone
    (``ru_maxrss`` of a child would start at its parent's resident memory when it forked)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def child(mode: str, cols: int, adbc: bool = True) -> None:
    """Read the table ``t`` of ``$SQM_BENCH_SQL_URL`` (``mode`` "streamed" or "whole"; ``adbc`` False: PostgreSQL
    through SQLAlchemy and psycopg even where the ADBC driver is installed); print JSON figures."""
    import duckdb  # noqa: F401  every driver imported before the baseline
    import numpy as np
    import psycopg  # noqa: F401
    import pyarrow  # noqa: F401
    import sqlalchemy  # noqa: F401

    from sqm.framework import sql_tables
    from sqm.framework.sql_tables import SqlSource, read_sql_table
    from sqm.framework.table_stream import scan_table

    if not adbc:
        sql_tables._adbc_uri = lambda url: None  # type: ignore[assignment]  # this benchmark's comparison only

    base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    source = SqlSource(url_env=ENV, table="t")
    if mode == "streamed":
        table = scan_table(source, "id")
        assert table is not None, "the table was not read in batches"
        total, n = np.zeros(cols), 0
        for chunk in table.chunks(4096):
            total += chunk.sum(axis=0)
            n += len(chunk)
        ids = sum(1 for _ in table.iter_ids())
    else:
        whole = read_sql_table(source, "id")
        total, n, ids = whole.block.sum(axis=0), whole.n_rows, len(whole.ids)
    print(json.dumps({"records": n, "ids": ids, "seconds": time.perf_counter() - t0, "checksum": float(total.sum()),
                      "baseline_mib": base, "peak_mib": _status_mib("VmHWM")}))


def _fill(engine: str, url: str, rows: int, cols: int) -> None:
    features = ", ".join(f"random() AS x{j}" for j in range(cols))
    if engine == "duckdb":
        import duckdb

        con = duckdb.connect(url[len("duckdb:///"):])
        con.execute(f"CREATE OR REPLACE TABLE t AS SELECT range AS id, {features} FROM range({rows})")
        con.close()
        return
    import sqlalchemy

    e = sqlalchemy.create_engine(url)
    with e.begin() as con:
        con.exec_driver_sql("DROP TABLE IF EXISTS t")
        con.exec_driver_sql(f"CREATE TABLE t AS SELECT i::bigint AS id, {features} FROM generate_series(1, {rows}) i")
    e.dispose()


def _read(url: str, mode: str, cols: int, adbc: bool) -> dict:
    code = f"from bench.sql_memory import child; child({mode!r}, {cols}, {adbc})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600,
                         env={**os.environ, ENV: url})
    if out.returncode:
        raise RuntimeError(f"the reading child failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(rows: list[int], engines: list[str], cols: int, whole: bool = False, progress: bool = True) -> dict:
    from contextlib import ExitStack

    cases, pg_url = [], None
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        for engine in engines:
            if engine.startswith("postgres"):
                from bench.pg_server import throwaway_postgres

                if pg_url is None:
                    pg_url = stack.enter_context(throwaway_postgres())
                url = pg_url
            else:
                url = f"duckdb:///{os.path.join(tmp, 'bench.duckdb')}"
            for n in rows:
                _fill(engine, url, n, cols)
                for mode in ("streamed", "whole") if whole else ("streamed",):
                    got = _read(url, mode, cols, adbc=engine != "postgres-psycopg")
                    assert got["records"] == got["ids"] == n, got
                    case = {"engine": engine, "mode": mode, "rows": n, "cols": cols,
                            "peak_mib": round(got["peak_mib"], 1), "baseline_mib": round(got["baseline_mib"], 1),
                            "read_mib": round(got["peak_mib"] - got["baseline_mib"], 1),
                            "seconds": round(got["seconds"], 2)}
                    cases.append(case)
                    if progress:
                        print(f"  {engine} {mode} {n:,} rows: peak {case['peak_mib']} MiB (+{case['read_mib']} "
                              f"MiB over the imports), {case['seconds']} s", file=sys.stderr)
    return {"cases": cases, "load": os.getloadavg()[0], "cpus": os.cpu_count()}


def print_table(rep: dict) -> None:
    from sqm.cli.tables import render_table

    print(render_table(rep["cases"], ["engine", "mode", "rows", "cols", "peak_mib", "baseline_mib", "read_mib",
                                      "seconds"]))
    print(f"(load average {rep['load']:.2f} on {rep['cpus']} CPUs)")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", default="100000,1000000", help="comma list of row counts (default 10^5, 10^6)")
    ap.add_argument("--cols", type=int, default=4, help="float columns besides the id (default 4)")
    ap.add_argument("--engine", default="duckdb,postgres,postgres-psycopg",
                    help="comma list of databases: duckdb (a file), postgres (a throwaway server: needs "
                         "PostgreSQL's server programs; read through ADBC where installed), postgres-psycopg (the "
                         "same through SQLAlchemy and psycopg) (default all three)")
    ap.add_argument("--whole", action="store_true", help="also read each table whole, for contrast")
    ap.add_argument("--json", help="write the figures to this JSON file")


def cli(args) -> int:
    from bench.common import finish
    from sqm.errors import UsageError

    rows = [int(float(x)) for x in args.rows.split(",") if x.strip()]
    engines = [e.strip() for e in args.engine.split(",") if e.strip()]
    if not rows or min(rows) < 1 or args.cols < 1 or not engines or not set(engines) <= set(ENGINES):
        raise UsageError("--rows needs counts >= 1, --cols >= 1, --engine duckdb, postgres, postgres-psycopg")
    rep = run(rows, engines, args.cols, whole=args.whole, progress=not getattr(args, "quiet", 0))
    return finish(rep, args, print_table)
