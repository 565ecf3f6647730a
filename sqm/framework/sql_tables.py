"""A party's table from a database: a SQL query (or a whole table) run by the party's own operator's connection.

:class:`SqlSource` is what a party's operator gives instead of a file (``--data-sql URL``, ``--data-sql-env VAR``
or ``--data-sql-file PATH`` with ``--data-query SQL`` or ``--data-table NAME``: :func:`from_options`).  The
connection string and its credentials come from that operator alone, never from a job file, which another
organisation may have written: :func:`refuse_in_job_file` refuses a job file naming one.  A source named by an
environment variable or a file is resolved where the query runs, so the password is on no command line and in
no program the launcher writes.

The query's result is read as pyarrow record batches: by DuckDB itself for a ``duckdb:///FILE`` source (its own
record batches, the file opened read-only), by the ADBC PostgreSQL driver for a PostgreSQL source when it is
installed (binary COPY), and otherwise through SQLAlchemy with a server-side cursor (``stream_results``,
``yield_per``) for any database.  :func:`read_sql_table` reads the whole result and checks it with
:func:`sqm.framework.tables.arrow_table`, so every check of a party file applies unchanged (an id column, numeric
columns, no NULL or NaN, no repeated id, the magnitude bound); :func:`sql_batches` is the batch reader
:class:`sqm.framework.table_stream.StreamedTable` uses, so a party reading a query sorted by id holds one batch
at a time.  Messages name the source by :attr:`SqlSource.label`: the query or table and the connection string
without its password.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Generator
from typing import Any
from dataclasses import dataclass, field

from sqm.framework.tables import PartyFileError, PartyTable, arrow_table

WHAT = "party table"  # how messages name a table read from a database
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")  # a table: NAME or SCHEMA.NAME
_PASSWORD = re.compile(r"(://[^:/@?#]*):[^@/?#]*@")
# schemes of a database connection string (the part before any "+driver"): what a job file may never hold
DB_SCHEMES = frozenset({"postgresql", "postgres", "sqlite", "duckdb", "mysql", "mariadb", "mssql", "oracle",
                        "redshift", "snowflake", "cockroachdb", "trino", "clickhouse", "bigquery", "adbc"})
_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9.\-]*)(\+[A-Za-z0-9_.\-]+)?://")
# keys a job file might use to name a database source or its credentials: refused with the reason
JOB_FILE_KEYS = frozenset({"sql", "data_sql", "database", "connection", "connection_string", "url", "dsn",
                           "query", "data_query", "data_table", "password", "credentials"})
# DuckDB's own memory for a party's query (its buffer pool; a larger sort spills to disk) and one thread: without
# them its caches grow with the rows read, and a party's memory would not stay bounded
DUCKDB_CONFIG = (("memory_limit", "64MB"), ("threads", 1))
ADBC_BATCH_BYTES = 4 << 20  # the ADBC PostgreSQL driver's batch size (bytes of decoded columns, about)
OPTIONS = "--data-sql-env VAR, --data-sql-file PATH or --data-sql URL, with --data-query SQL or --data-table NAME"


@dataclass(frozen=True)
class SqlSource:
    """A query (``query``) or a table (``table``: ``SELECT * ... ORDER BY`` the id column) on the database of a
    connection string given directly (``url``), by an environment variable (``url_env``) or by a file holding
    it (``url_file``), exactly one of the three.  ``str()`` is :attr:`label`, which names no password."""

    url: str | None = field(default=None, repr=False)
    url_env: str | None = None
    url_file: str | None = None
    query: str | None = None
    table: str | None = None

    def connection_string(self) -> str:
        """The connection string, read now (from the environment or the file where the query runs)."""
        if self.url is not None:
            return self.url
        if self.url_env is not None:
            url = os.environ.get(self.url_env, "").strip()
            if not url:
                raise PartyFileError(f"{WHAT}: the environment variable {self.url_env} (--data-sql-env) holds no "
                                     f"connection string here", "its database could not be reached")
            return url
        assert self.url_file is not None  # from_options gives exactly one
        try:
            with open(self.url_file) as f:
                url = f.read().strip()
        except OSError as e:
            raise PartyFileError(f"{WHAT}: the connection-string file {self.url_file} (--data-sql-file) could not "
                                 f"be read: {e}", "its database could not be reached") from None
        if not url:
            raise PartyFileError(f"{WHAT}: the connection-string file {self.url_file} is empty",
                                 "its database could not be reached")
        return url

    @property
    def where(self) -> str:
        """The database, without a password: the connection string given, or where it is read from."""
        if self.url is not None:
            return hide_password(self.url)
        return f"${self.url_env}" if self.url_env is not None else f"the connection string in {self.url_file}"

    @property
    def label(self) -> str:
        what = f"table {self.table}" if self.table is not None else f"query {_short(self.query or '')!r}"
        return f"{what} on {self.where}"

    def __str__(self) -> str:
        return self.label

    def statement(self, id_column: str) -> str:
        """The SQL run: the operator's query, or its table sorted by the id column (read in batches if sorted
        in the canonical order: integer ids by value)."""
        if self.query is not None:
            return self.query
        order = id_column if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", id_column) else '"' + \
            id_column.replace('"', '""') + '"'
        return f"SELECT * FROM {self.table} ORDER BY {order}"

    def digest(self) -> str:
        """SHA-256 (hex) of the database (its connection string without the password) and the statement: the
        identity a privacy-budget ledger binds a dataset name to, in place of a file's content digest (a
        database's rows change; its operator names the dataset with ``--ledger-dataset``)."""
        text = f"sql\0{hide_password(self.connection_string())}\0{self.query or ''}\0{self.table or ''}"
        return hashlib.sha256(text.encode()).hexdigest()


def hide_password(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``."""
    return _PASSWORD.sub(r"\1:***@", url)


def _short(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= 80 else s[:77] + "..."


def from_options(url: str | None = None, url_env: str | None = None, url_file: str | None = None,
                 query: str | None = None, table: str | None = None) -> SqlSource | None:
    """The source a party's operator gave (``--data-sql``, ``--data-sql-env``, ``--data-sql-file`` and
    ``--data-query`` or ``--data-table``), None if none; a UsageError for an incomplete or ambiguous one, and a
    missing driver named with its extra, before any party starts."""
    from sqm.errors import UsageError

    given = [n for n, v in (("--data-sql", url), ("--data-sql-env", url_env), ("--data-sql-file", url_file)) if v]
    if not given and query is None and table is None:
        return None
    if len(given) != 1:
        raise UsageError(f"a party's table from a database needs exactly one connection string: "
                         f"{'give one of ' if not given else 'got ' + ', '.join(given) + '; keep one of '}"
                         f"--data-sql-env VAR, --data-sql-file PATH or --data-sql URL")
    if (query is None) == (table is None):
        raise UsageError("a party's table from a database needs --data-query SQL or --data-table NAME (one)")
    if table is not None and not _IDENTIFIER.fullmatch(table):
        raise UsageError(f"--data-table needs a table name (NAME or SCHEMA.NAME: letters, digits, _), got "
                         f"{table!r}; give any other selection with --data-query")
    if query is not None and not query.strip():
        raise UsageError("--data-query is empty")
    source = SqlSource(url or None, url_env or None, url_file or None, query, table)
    check_driver(source.connection_string())
    return source


def refuse_in_job_file(raw, where: str) -> None:
    """Refuse a job file naming a database connection string, a query or credentials (a key of
    :data:`JOB_FILE_KEYS` in the job or a party's entry, or a string holding a database URL anywhere): where a
    party's records come from, and with what password, is its own operator's choice alone.  Deeper keys (a
    declared range's column name) are not names of settings and are not checked."""
    from sqm.errors import UsageError

    def walk(v, at: str, top: bool = True):
        if isinstance(v, dict):
            for k, x in v.items():
                if top and isinstance(k, str) and k.lower() in JOB_FILE_KEYS:
                    yield f"{at}\"{k}\""
                yield from walk(x, at, False)
        elif isinstance(v, list):
            for x in v:
                yield from walk(x, at, False)
        elif isinstance(v, str):
            m = _SCHEME.match(v)
            if m and m.group(1).lower() in DB_SCHEMES:
                yield f"{at}a connection string ({m.group(1)}://...)"

    found = []
    for i, entry in enumerate(raw.get("parties", []) if isinstance(raw.get("parties"), list) else []):
        found += walk(entry, f"{'the server' if i == 0 else f'client {i}'}'s ")
    found += walk({k: v for k, v in raw.items() if k != "parties"}, "")
    if found:
        raise UsageError(f"{where} names {'; '.join(dict.fromkeys(found))}: refused.  A party's table from a "
                         f"database, its query and its credentials come from that party's own operator ({OPTIONS}), "
                         f"never from the shared job file")


# ----- reading ------------------------------------------------------------------------------------------------


def _engine(url: str):
    """A SQLAlchemy engine (no pool) for ``url``; a missing SQLAlchemy or driver raises MissingExtra naming
    the ``[sql]`` extra."""
    from sqm.framework.extras import MissingExtra, hint, require

    require("sql", "a party's table from a database", ("sqlalchemy",))
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    try:
        return sqlalchemy.create_engine(url, poolclass=NullPool)
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as e:
        raise MissingExtra(f"a party's table from {hide_password(url)} {hint('sql')} (its database driver: "
                           f"{e})") from None
    except sqlalchemy.exc.ArgumentError as e:
        raise PartyFileError(f"{WHAT}: {hide_password(url)} is not a connection string SQLAlchemy reads ({e})",
                             "its database could not be reached") from None


def check_driver(url: str) -> None:
    """MissingExtra (naming the ``[sql]`` extra) unless this machine holds what reads ``url`` (no connection)."""
    from sqm.framework.extras import require

    require("sql", "a party's table from a database", ("pyarrow",))
    if _duckdb_file(url) is not None:
        require("sql", "a party's table from a DuckDB file", ("duckdb",))
    else:
        _engine(url).dispose()


def _duckdb_file(url: str) -> str | None:
    """The database file of a ``duckdb:///FILE`` connection string (read by DuckDB itself), else None."""
    m = re.fullmatch(r"duckdb:///([^?]*)(\?.*)?", url.strip())
    return m.group(1) if m and m.group(1) and m.group(1) != ":memory:" else None


def sql_batches(source: SqlSource, id_column: str, rows: int) -> Generator[tuple[int, Any], None, None]:
    """(result row of its first record, pyarrow record batch of every result column) of the source's
    statement, at most ``rows`` records a batch, read as the database sends them; an empty result gives one empty
    batch (its columns named).  A failure to connect or to run the statement is a :class:`PartyFileError`
    naming the source and the database's own message."""
    url = source.connection_string()
    stmt = source.statement(id_column)
    try:
        if (path := _duckdb_file(url)) is not None:
            yield from _duckdb_batches(path, stmt, rows)
        elif (uri := _adbc_uri(url)) is not None:
            yield from _adbc_batches(uri, stmt)
        else:
            yield from _sqlalchemy_batches(url, stmt, rows)
    except PartyFileError:
        raise
    except Exception as e:  # noqa: BLE001  the database's own error, for the operator
        if type(e).__module__.split(".")[0] in ("sqm", "pyarrow"):
            raise
        detail = str(getattr(e, "orig", None) or e).strip().splitlines()
        raise PartyFileError(f"{WHAT} {source.label}: the database refused or failed: {type(e).__name__}: "
                             f"{detail[0] if detail else ''}",
                             "its table could not be read from its database") from None


def _adbc_uri(url: str) -> str | None:
    """The libpq URI of a PostgreSQL connection string when the ADBC PostgreSQL driver is installed (its binary
    COPY gives record batches directly, many times faster than rows through a cursor), else None."""
    import importlib.util

    m = re.fullmatch(r"\s*postgres(?:ql)?(?:\+[A-Za-z0-9_.]+)?://(.*)", url, re.S)
    if m is None or importlib.util.find_spec("adbc_driver_postgresql") is None:
        return None
    return "postgresql://" + m.group(1).strip()


def _adbc_batches(uri: str, stmt: str):
    """PostgreSQL's result through ADBC, in batches of about :data:`ADBC_BATCH_BYTES`; a ``numeric`` column (sent
    as its decimal text) becomes float64, as SQLAlchemy's Decimal values do."""
    import adbc_driver_postgresql.dbapi as adbc
    import pyarrow as pa

    with adbc.connect(uri) as con, con.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(ADBC_BATCH_BYTES)})
        cur.execute(stmt)
        reader = cur.fetch_record_batch()
        at, empty = 0, True
        for b in reader:
            if b.num_rows == 0:
                continue
            empty = False
            yield at, _plain_numeric(b, pa)
            at += b.num_rows
        if empty:
            yield 0, _plain_numeric(pa.RecordBatch.from_pylist([], schema=reader.schema), pa)


def _plain_numeric(batch, pa):
    """``batch`` with every PostgreSQL ``numeric`` column (an opaque extension over text) cast to float64."""
    cols = []
    for col in batch.columns:
        typ = col.type
        if getattr(typ, "extension_name", "") == "arrow.opaque" and getattr(typ, "type_name", "") == "numeric":
            col = col.storage.cast(pa.float64())
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


def _duckdb_batches(path: str, stmt: str, rows: int):
    import duckdb
    import pyarrow as pa

    if not os.path.isfile(path):
        raise PartyFileError(f"{WHAT}: the DuckDB database file {path} does not exist",
                             "its database could not be reached")
    con = duckdb.connect(path, read_only=True, config=dict(DUCKDB_CONFIG))
    try:
        rel = con.sql(stmt)
        if rel is None:
            raise PartyFileError(f"{WHAT}: the statement {_short(stmt)!r} returns no rows (is it a SELECT?)",
                                 "its table could not be read from its database")
        reader = rel.to_arrow_reader(int(rows))  # streamed: DuckDB's own record batches
        at, empty = 0, True
        for b in reader:
            if b.num_rows == 0:
                continue
            empty = False
            yield at, b
            at += b.num_rows
        if empty:
            yield 0, pa.RecordBatch.from_pylist([], schema=reader.schema)
    finally:
        con.close()


def _sqlalchemy_batches(url: str, stmt: str, rows: int):
    import sqlalchemy

    engine = _engine(url)
    try:
        with engine.connect() as conn:
            # text() with every colon escaped: no bind parameters, and a "%" reaches the database as written
            result = conn.execution_options(stream_results=True, yield_per=int(rows)).execute(
                sqlalchemy.text(stmt.replace(":", "\\:")))
            names = [str(k) for k in result.keys()]  # noqa: SIM118  (a Result, not a dict)
            at, empty = 0, True
            for part in result.partitions(int(rows)):
                empty = False
                yield at, _record_batch(names, part)
                at += len(part)
            if empty:
                yield 0, _record_batch(names, [])
    finally:
        engine.dispose()


def _record_batch(names: list[str], part):
    """Rows (tuples) as a pyarrow record batch, column by column; a column pyarrow cannot type as one (text
    among numbers) becomes a text column of its text cells alone (its numbers as nulls), so the checks name its
    first text cell and that cell's row."""
    from decimal import Decimal

    import pyarrow as pa

    cols = list(zip(*part, strict=True)) if part else [() for _ in names]
    arrays = []
    for vals in cols:
        try:
            arr = pa.array(vals, from_pandas=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arr = pa.array([None if v is None or isinstance(v, (int, float, Decimal)) else str(v) for v in vals],
                           type=pa.string())
        if pa.types.is_null(arr.type):  # every cell NULL (or none): missing numbers
            arr = pa.array(vals, type=pa.float64())
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def read_sql_table(source: SqlSource, id_column: str = "id") -> PartyTable:
    """The whole result of the source's statement, checked as a party file is
    (:func:`sqm.framework.tables.arrow_table`); errors name the source (:attr:`SqlSource.label`) and the row."""
    from sqm.framework.extras import require

    require("parquet", "a party's table from a database", ("pyarrow",))
    import pyarrow as pa

    batches: list = [b for _, b in sql_batches(source, id_column, 1 << 16)]
    header = list(batches[0].schema.names)
    if all(b.schema == batches[0].schema for b in batches):
        table = pa.Table.from_batches(batches)
        cols = {n: table.column(n) for n in header}
    else:  # batches typed apart (a column NULL in one batch, text in another): typed once over every row
        whole = _record_batch(header, [r for b in batches for r in zip(*(c.to_pylist() for c in b.columns),
                                                                          strict=True)])
        cols = {n: whole.column(n) for n in header}
    return arrow_table(source.label, header, cols, sum(b.num_rows for b in batches), id_column, True, WHAT)
