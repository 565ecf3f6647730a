"""A party's table from a database (sqm.framework.sql_tables): the same release as its CSV, the same refusals as a
file's, the connection string from the party's own operator only, never from a job file; a real PostgreSQL server
for the slow test (started here in a temporary folder; skipped without PostgreSQL's server programs unless
SQM_REQUIRE_POSTGRES=1)."""
from __future__ import annotations

import csv
import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sqm.apps.pca import PCAJobTask
from sqm.errors import UsageError
from sqm.framework.extras import MissingExtra
from sqm.framework.party import load_own_file
from sqm.framework.runners import simulate
from sqm.framework.spec import load_job, write_party_csvs
from sqm.framework.sql_tables import SqlSource, from_options, read_sql_table
from sqm.framework.table_stream import StreamedTable, scan_table
from sqm.framework.tables import PartyFileError, read_table

pytest.importorskip("sqlalchemy")
pytest.importorskip("pyarrow")

JOB_TASK = dict(n_components=2, epsilon=1.0, delta=1e-5, gamma=1024.0, seed=5, insecure_reproducible=True)


def _rows(path) -> tuple[list[str], list[list]]:
    """A party CSV's header and its rows (id as int, features as float: the values the CSV reader makes)."""
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], [[int(r[0])] + [float(x) for x in r[1:]] for r in rows[1:]]


def _sqlite(db, header, rows, table="t", types=None) -> str:
    con = sqlite3.connect(db)
    cols = ", ".join(f"{h} {(types or {}).get(h, 'integer' if h == 'id' else 'real')}" for h in header)
    con.execute(f"create table {table} ({cols})")
    con.executemany(f"insert into {table} values ({','.join('?' * len(header))})", rows)
    con.commit()
    con.close()
    return f"sqlite:///{db}"


def _duckdb(db, header, rows, table="t") -> str:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(str(db))
    con.execute(f"create table {table} ({', '.join(h + (' bigint' if h == 'id' else ' double') for h in header)})")
    con.executemany(f"insert into {table} values ({','.join('?' * len(header))})", rows)
    con.close()
    return f"duckdb:///{db}"


# ----- the same release as the CSV ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_a_client_reading_a_query_releases_the_csv_runs_integers_bit_for_bit(tmp_path, engine):
    X = np.random.default_rng(3).normal(size=(40, 5))
    spec = load_job(write_party_csvs(X / np.linalg.norm(X, axis=1).max(), tmp_path / "job", 2, min_intersection=1))
    ref = simulate(spec, PCAJobTask(**JOB_TASK), timeout=120)[0]["result"]["raw"]
    header, rows = _rows(spec.parties[2].file)
    url = (_sqlite if engine == "sqlite" else _duckdb)(tmp_path / f"c2.{engine}", header, rows[::-1])
    by_table = SqlSource(url=url, table="t")  # read ORDER BY id: checked in one pass, then read in batches
    streamed = scan_table(by_table, "id")
    assert isinstance(streamed, StreamedTable) and streamed.n_rows == 40
    assert np.array_equal(streamed.block, read_table(spec.parties[2].file).block)
    unordered = SqlSource(url=url, query="SELECT x3, id, x4 FROM t")  # rows reversed: read whole, sorted
    assert scan_table(unordered, "id") is None
    for source in (by_table, unordered):
        got = simulate(spec.with_sql(2, source), PCAJobTask(**JOB_TASK), timeout=120)
        assert list(got[0]["result"]["raw"]) == list(ref)
        assert got[2]["result"]["file"] == str(source) and "t" in str(source)


# ----- the connection string from the operator only ---------------------------------------------------------------


def _job_json(tmp_path, **changes) -> str:
    spec_path = write_party_csvs(np.ones((4, 4)) * 0.1, tmp_path / "j", 2, min_intersection=1)
    raw = json.loads(Path(spec_path).read_text())
    for where, (key, value) in changes.items():
        (raw if where == "job" else raw["parties"][int(where[1:])])[key] = value
    path = tmp_path / "j" / "bad.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize("change", [
    {"p1": ("file", "postgresql://alice:secret@db.example/clinic")},
    {"p2": ("data_sql", "sqlite:///x.db")},
    {"p2": ("password", "secret")},
    {"job": ("query", "SELECT * FROM patients")},
    {"p0": ("engine", "duckdb:///x.duckdb")},
])
def test_a_job_file_naming_a_connection_string_query_or_credentials_is_refused(tmp_path, change):
    with pytest.raises(UsageError) as e:
        load_job(_job_json(tmp_path, **change))
    msg = str(e.value)
    assert "refused" in msg and "--data-sql-env VAR" in msg and "never from the shared job file" in msg
    assert "secret" not in msg  # the refusal echoes no credential


def test_a_column_named_like_a_setting_is_no_setting(tmp_path):
    spec = load_job(_job_json(tmp_path, p1=("bounds", {"url": [0, 1], "query": [0, 2]})))
    assert spec.bounds[0] == (("url", 0.0, 1.0), ("query", 0.0, 2.0))


def pca(argv) -> int:
    """``sqm pca ARGV`` through the command's own parser (its errors raise)."""
    from sqm.cli.command import parse

    args = parse(["pca", "-q", *argv])
    return args.func(args)


def test_the_operators_options_and_a_missing_driver(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="exactly one connection string"):
        from_options(url="sqlite:///a.db", url_env="X", table="t")
    with pytest.raises(UsageError, match="--data-query SQL or --data-table NAME"):
        from_options(url="sqlite:///a.db")
    with pytest.raises(UsageError, match="--data-table needs a table name"):
        from_options(url="sqlite:///a.db", table="t; DROP TABLE t")
    with pytest.raises(MissingExtra, match=r"needs the \[sql\] extra: pip install 'sqm-vfl\[sql\]'"):
        from_options(url="mysql+no_such_driver_sqm://u@h/db", table="t")
    monkeypatch.setenv("SQM_TEST_DB", "postgresql+psycopg://alice:secret@127.0.0.1:1/db")
    source = from_options(url_env="SQM_TEST_DB", table="patients")
    assert str(source) == "table patients on $SQM_TEST_DB" and "secret" not in repr(source)
    assert "secret" not in str(SqlSource(url="postgresql://alice:secret@h/db", table="t"))
    with pytest.raises(PartyFileError) as e:  # nobody listens: the database's refusal, no password
        read_sql_table(source)
    assert "party table table patients on $SQM_TEST_DB: the database refused or failed" in str(e.value)
    assert "secret" not in str(e.value)
    job = write_party_csvs(np.ones((4, 4)) * 0.1, tmp_path / "j", 2, min_intersection=1)
    with pytest.raises(UsageError, match="--data-sql gives one party's own table"):  # every party here: no --index
        pca(["--job", job, "--data-sql-env", "SQM_TEST_DB", "--data-table", "patients"])
    with pytest.raises(UsageError, match="--data-table does not apply without --job"):
        pca(["--data-table", "patients"])


# ----- the same refusals as a file's --------------------------------------------------------------------------------

BAD = {  # name: (CSV text, SQLite rows, SQLite column types, query, what the detail says)
    "no id column": ("key,a\n1,2\n2,3\n", [(1, 2.0), (2, 3.0)], {"key": "integer"}, "SELECT key, a FROM t",
                     "has no id column 'id'"),
    "text column": ("id,a,city\n1,0.5,2\n2,0.5,3\n3,1,Paris\n", [(1, 0.5, 2), (2, 0.5, 3), (3, 1.0, "Paris")],
                    {"city": ""}, "SELECT * FROM t ORDER BY id", "column 'city' holds text ('Paris' at row 3)"),
    "missing cells": ("id,a,b\n1,0.5,\n2,,1\n3,1,2\n", [(1, 0.5, None), (2, None, 1.0), (3, 1.0, 2.0)], {},
                      "SELECT * FROM t ORDER BY id", "2 missing value(s) (blank, NA, NaN or null) in 2 column(s)"),
    "repeated id": ("id,a\n1,2\n2,3\n1,4\n", [(1, 2.0), (2, 3.0), (1, 4.0)], {}, "SELECT * FROM t",
                    "repeats an id in column 'id' (row 1 and row 3 hold the same id"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_query_is_refused_as_the_same_file_is_naming_the_party_and_the_query(tmp_path, caplog, case):
    text, rows, types, query, says = BAD[case]
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(PartyFileError) as from_file:
        read_table(f)
    header = text.splitlines()[0].split(",")
    source = SqlSource(url=_sqlite(tmp_path / "t.db", header, rows, types=types), query=query)
    with pytest.raises(PartyFileError) as from_db:
        read_sql_table(source)
    assert from_db.value.public == from_file.value.public
    assert str(from_db.value).startswith(f"party table {source.label}") and says in str(from_db.value)
    with caplog.at_level(logging.ERROR):  # the party's own path, streamed first: refused, the party named
        table, schema = load_own_file(source, "id", 1, stream=True)
    assert table is None and schema == {"error": from_file.value.public}
    assert f"client 1: party table {source.label}" in caplog.text


def test_nan_in_a_database_column_is_missing_as_in_a_file(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    db = tmp_path / "n.duckdb"
    con = duckdb.connect(str(db))
    con.execute("create table t as select * from (values (1, 0.5), (2, 'NaN'::double), (3, 1.0)) v(id, a)")
    con.close()
    with pytest.raises(PartyFileError) as e:
        read_sql_table(SqlSource(url=f"duckdb:///{db}", table="t"))
    assert "1 missing value(s)" in str(e.value) and "row 2, column 'a'" in str(e.value)
    assert e.value.public == "its file has missing values"


# ----- a real PostgreSQL server, real party processes -----------------------------------------------------------


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL server (bench/pg_server.py); skipped when its programs are missing, unless
    SQM_REQUIRE_POSTGRES=1."""
    pytest.importorskip("psycopg")
    from bench.pg_server import postgres_bindir, throwaway_postgres

    if postgres_bindir() is None:
        if os.environ.get("SQM_REQUIRE_POSTGRES"):
            pytest.fail("SQM_REQUIRE_POSTGRES is set but PostgreSQL's server programs (initdb, pg_ctl) are missing")
        pytest.skip("no PostgreSQL server programs: apt-get install postgresql")
    with throwaway_postgres() as url:
        yield url


def _parties(tmp_path, job, own: dict, env: dict, out: str) -> dict:
    """Every party of ``job`` started alone (``sqm pca --job J --index I``), real processes over loopback TLS."""
    from conftest import one_by_one
    from sqm.mpc.net.certs import DEFAULT_JOB, make_certificates

    keys = str(tmp_path / "keys")
    if not os.path.isdir(keys):
        make_certificates(keys, 3, days=1, job=load_job(job).name or DEFAULT_JOB)
    shared, files = one_by_one(job)
    procs = {i: subprocess.Popen([sys.executable, "-m", "sqm", "pca", "--job", shared, "--index", str(i), "--ssl-dir",
                                  keys, "--timeout", "240", "--seed", "7", "--insecure-reproducible", "--no-ledger"
                                  if i else "-q", *(own.get(i) or files[i]), *(["--json", out] if i == 0 else [])],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
             for i in range(3)}
    got = {}
    for i, p in procs.items():
        o, e = p.communicate(timeout=400)
        got[i] = (p.returncode, e + o)
    return got


@pytest.mark.slow
def test_a_pca_job_whose_clients_read_postgresql_releases_the_csv_runs_integers(tmp_path, postgres):
    import sqlalchemy

    X = np.random.default_rng(11).normal(size=(60, 5)) * 0.2
    job = write_party_csvs(X, str(tmp_path / "job"), col_counts=[2, 3], min_intersection=1,
                           task={"statistic": "pca", "components": 2, "epsilon": 1, "gamma": 1024})
    spec = load_job(job)
    engine = sqlalchemy.create_engine(postgres)
    with engine.begin() as con:
        for j in (1, 2):
            header, rows = _rows(spec.parties[j].file)
            types = ", ".join(h + (" bigint" if h == "id" else " float8") for h in header)
            con.exec_driver_sql(f"create table client{j} ({types})")
            con.execute(sqlalchemy.text(f"insert into client{j} values ({', '.join(':' + h for h in header)})"),
                        [dict(zip(header, r, strict=True)) for r in rows])
    engine.dispose()
    csv_out, sql_out = str(tmp_path / "csv.json"), str(tmp_path / "sql.json")
    by_csv = _parties(tmp_path, job, {}, {}, csv_out)
    assert {i: c for i, (c, _) in by_csv.items()} == {0: 0, 1: 0, 2: 0}, by_csv
    own = {1: ["--data-sql-env", "SQM_CLIENT_DB", "--data-table", "client1"],
           2: ["--data-sql-env", "SQM_CLIENT_DB", "--data-query", "SELECT id, x2, x3, x4 FROM client2 ORDER BY id"]}
    by_sql = _parties(tmp_path, job, own, {"SQM_CLIENT_DB": postgres}, sql_out)
    assert {i: c for i, (c, _) in by_sql.items()} == {0: 0, 1: 0, 2: 0}, by_sql
    assert "sqm-throwaway-password" not in "".join(t for _, t in by_sql.values())
    released = [json.loads(Path(p).read_text())["released"] for p in (csv_out, sql_out)]
    assert len(released[0]["components"]) == 2  # the release (from the same seeded integers): exactly equal
    assert released[0] == released[1]


def test_postgresql_through_adbc_and_through_psycopg_gives_the_same_table_and_refusals(postgres, monkeypatch):
    import sqlalchemy

    from sqm.framework import sql_tables

    engine = sqlalchemy.create_engine(postgres)
    with engine.begin() as con:
        con.exec_driver_sql("CREATE TABLE pg AS SELECT i::bigint AS id, (i * 0.1)::float8 AS a, "
                            "(i / 7.0)::numeric(12, 6) AS b, mod(i, 3)::int AS c FROM generate_series(1, 20000) i")
        con.exec_driver_sql("CREATE TABLE pg_nan AS SELECT * FROM (VALUES (1, 0.5::float8), (2, 'NaN'::float8), "
                            "(3, NULL)) v(id, a)")
    engine.dispose()
    good, nan = SqlSource(url=postgres, table="pg"), SqlSource(url=postgres, table="pg_nan")
    read = {}
    for path in ("adbc", "psycopg"):
        if path == "psycopg":
            monkeypatch.setattr(sql_tables, "_adbc_uri", lambda url: None)
        elif sql_tables._adbc_uri(postgres) is None:
            pytest.skip("the ADBC PostgreSQL driver is not installed")
        whole, streamed = read_sql_table(good), scan_table(good, "id")
        assert isinstance(streamed, StreamedTable) and streamed.ids == whole.ids
        assert np.array_equal(streamed.block, whole.block)
        with pytest.raises(PartyFileError) as e:
            read_sql_table(nan)
        read[path] = (whole, str(e.value))
    assert read["adbc"][0].columns == read["psycopg"][0].columns == ["a", "b", "c"]
    assert np.array_equal(read["adbc"][0].block, read["psycopg"][0].block)
    assert read["adbc"][0].block[6].tolist() == [0.7, 1.0, 1.0]  # 7 * 0.1 (numeric, then float8); 7 / 7.0; 7 mod 3
    assert read["adbc"][1] == read["psycopg"][1]
    assert "2 missing value(s)" in read["adbc"][1] and "the first at row 2, column 'a'" in read["adbc"][1]
