"""A party file read in batches, so that a job's client never holds its whole table (CSV, Parquet or a database
query: :mod:`sqm.framework.sql_tables`).

:func:`scan_table` makes one pass over a file with pyarrow's batch readers (Parquet ``iter_batches``, CSV
``open_csv``) and checks what :func:`sqm.framework.tables.read_table` checks, batch by batch: an id column and numeric
feature columns, nothing missing, nothing infinite or above :data:`sqm.framework.tables.MAX_ABS_VALUE`, no blank
and no repeated id.  Repeats are found without holding the ids because a streamed file must already be in
:func:`sqm.framework.party.canonical_order` (:func:`sqm.framework.tables.id_order_key`: integer ids by value, then text
ids by text): a repeat is then two equal neighbours.  A file that passes gives a :class:`StreamedTable`, which
reads the file again for each use (the ids for the record alignment, the rows chunk by chunk) and re-checks
every batch, so a file changed in between is
refused, never half used.

A file that does not pass is not refused here: :func:`scan_table` returns None and the caller reads it
whole with :func:`sqm.framework.tables.read_table`, which either gives the exact error (file, row, column) or, for
a valid file whose ids are not in canonical order (or a CSV that pyarrow parses differently, e.g. padded
cells), the table sorted in memory.  Bounded memory is for files sorted by id; everything else still works.

Written here rather than taken from a library: pyarrow reads the batches; what no reader does is this
project's own checks and its canonical id order across batches.
"""
from __future__ import annotations

import csv
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from collections.abc import Callable, Iterator

import numpy as np

from sqm.mpc.net.party import InputRefused
from sqm.mpc.protocols.stream import rechunk

from sqm.framework.sql_tables import SqlSource, sql_batches
from sqm.framework.tables import (MAX_ABS_VALUE, MISSING, PARQUET_EXTENSIONS, PartyFileError, _sniff_separator,
                                  canonical_id, id_order_key)
from sqm.errors import UsageError

log = logging.getLogger(__name__)

BATCH_ROWS = 1 << 13  # records per batch read (chunks are regrouped from them: sqm.mpc.protocols.stream.rechunk)
_CSV_BLOCK_BYTES = 1 << 20  # pyarrow's CSV block size: a batch holds about this many bytes of text
_PARQUET_BUFFER_BYTES = 1 << 20  # column chunks are streamed through buffers of this size, not read whole


class FileChanged(InputRefused):
    """The file no longer holds what the checking pass found (it changed during the job): this client's own
    bad input (its peers are told only that reason; the detail stays with its operator)."""

    def __init__(self, detail: str):
        super().__init__("its party file changed during the job", detail)


class ChunkTransform:
    """What a table read in chunks does with its ``transform`` field (per chunk: block -> (block, count); the
    counts summed in its ``transformed_count`` field): :class:`StreamedTable`'s and
    :class:`sqm.framework.union_table.UnionTable`'s.  A shard worker's part counts its own chunks
    (:meth:`counts`), which its party adds (:meth:`parts_taken`)."""

    # the dataclass fields this mixin reads and sets (every class using it is a dataclass declaring them)
    transform: Callable | None
    transformed_count: int
    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def with_transform(self, fn: Callable):
        return dataclasses.replace(self, transform=fn, transformed_count=0)

    def counts(self) -> dict:
        return {"transformed": int(self.transformed_count)}

    def parts_taken(self, counts) -> None:
        self.transformed_count += sum(int(c.get("transformed", 0)) for c in counts)

    def _transformed(self, blocks) -> Iterator[np.ndarray]:
        for block in blocks:
            if self.transform is not None:
                block, count = self.transform(block)
                self.transformed_count += int(count)
            yield block


@dataclass
class StreamedTable(ChunkTransform):
    """A checked party file read in batches (see the module docstring): the same names as
    :class:`sqm.framework.tables.PartyTable` where a job uses them (``file``, ``columns``, ``n_rows``, ``n_cols``,
    ``ids``, ``ids_digest``, ``block``, :meth:`restricted`) plus :meth:`chunks`, which is how a streaming task
    reads it.  ``transform`` (per chunk: block -> (block, count)) is applied to every chunk, its counts summed
    in ``transformed_count`` (a client's declared ranges: values outside them).  ``keep`` (a boolean mask over
    the file's ``file_rows`` records, or None: all): the records the job uses (the record alignment's
    intersection); ``n_rows`` counts them, and every read skips the others."""

    file: str | SqlSource  # a file's path, or a database query (read again for each use, as a file is)
    columns: list[str]
    n_rows: int
    id_column: str
    sep: str = ","
    ids_digest: bytes | None = field(default=None, repr=False)
    transform: Callable | None = field(default=None, repr=False)
    transformed_count: int = 0
    keep: np.ndarray | None = field(default=None, repr=False)
    file_rows: int | None = None  # records in the file (None: n_rows, nothing left out)
    first: int | None = None  # a part (:meth:`part`): the kept record it starts at; None: the whole table

    @property
    def n_cols(self) -> int:
        return len(self.columns)

    def select(self, keep) -> StreamedTable:
        """The same file with only the feature columns at indices ``keep``."""
        return dataclasses.replace(self, columns=[self.columns[j] for j in keep])

    def restricted(self, keep) -> StreamedTable:
        """The same file with only the records where ``keep`` (a boolean mask over its records) is true: one
        bit per record held, the rows themselves still read chunk by chunk."""
        keep = np.asarray(keep, dtype=bool)
        if self.keep is not None or keep.shape != (self.n_rows,):
            raise UsageError(f"a mask of {keep.shape} for the file's {self.n_rows} records (restricted once)")
        return dataclasses.replace(self, keep=keep, n_rows=int(keep.sum()), file_rows=self.n_rows)

    def part(self, start: int, stop: int) -> StreamedTable:
        """Kept records ``[start, stop)`` (a shard worker's, :mod:`sqm.mpc.protocols.shards`): :meth:`chunks` yields
        exactly those rows of the whole table's.  A Parquet file is read from the row group holding the
        first of them and no further than the last; a CSV file is parsed from its start (rows before the part
        skipped unconverted).  The file was checked whole before it was split; every batch read is checked
        again."""
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_rows:
            raise UsageError(f"records [{start}, {stop}) of a table of {self.n_rows}")
        return dataclasses.replace(self, first=(self.first or 0) + start, n_rows=stop - start,
                                   file_rows=self._file_rows, transformed_count=0)

    def _part_blocks(self, rows: int):
        """The part's rows (see :meth:`part`), float64 blocks of at most ``rows`` records, in file order."""
        assert self.first is not None  # chunks reads this way only a part
        keep, end = self.keep, self.first + self.n_rows
        if self.n_rows == 0:
            return
        first_row = self.first if keep is None else int(np.flatnonzero(keep)[self.first])
        batches = _batches(self.file, self.columns, rows, self.sep, self.id_column, from_row=first_row)
        pos = None
        for at, b in batches:
            if pos is None:  # kept records before the first row read
                pos = at if keep is None else int(np.count_nonzero(keep[:at]))
            k = b.num_rows
            if keep is not None:
                mask = keep[at:at + k]
                if len(mask) != k:
                    raise FileChanged(f"party file {self.file} now holds more than {self._file_rows} records")
                if not mask.all():
                    import pyarrow as pa

                    b = b.filter(pa.array(mask))
            lo, hi = max(self.first - pos, 0), min(end - pos, b.num_rows)
            if lo < hi:
                yield _floats(b.slice(lo, hi - lo), self.columns, self.file)
            pos += b.num_rows
            if pos >= end:
                return
        raise FileChanged(f"party file {self.file} now holds fewer than {self._file_rows} records")

    @property
    def _file_rows(self) -> int:
        return self.n_rows if self.file_rows is None else self.file_rows

    def _kept(self, blocks):
        """``blocks`` (arrays or lists, in file order) with only the kept records."""
        at = 0
        for b in blocks:
            k = len(b)
            if self.keep is None:
                yield b
            else:
                mask = self.keep[at:at + k]
                if len(mask) != k:  # more records than the checking pass found: refused by _check_count
                    raise FileChanged(f"party file {self.file} now holds more than {self._file_rows} records")
                yield b[mask] if isinstance(b, np.ndarray) else [x for x, m in zip(b, mask, strict=False) if m]
            at += k
        self._seen = at

    # ----- reading --------------------------------------------------------------------------------------
    def _batches(self, names, rows: int):
        return (b for _, b in _batches(self.file, names, rows, self.sep, self.id_column))

    def iter_ids(self) -> Iterator[str]:
        """The kept records' ids in file order, canonical (as :func:`sqm.framework.tables.read_table` reads them)."""
        batches = (_ids(b.column(self.id_column)) for b in self._batches([self.id_column], BATCH_ROWS))
        for ids in self._kept(batches):
            yield from ids
        self._check_count(self._seen)

    @property
    def ids(self) -> list[str]:
        """All kept ids (held in memory)."""
        return list(self.iter_ids())

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The kept feature rows in file order, float64 blocks of exactly ``rows`` records (the last: the
        rest), each checked again and passed through ``transform``."""
        if self.first is not None:
            source = self._part_blocks(min(int(rows), BATCH_ROWS))
        else:
            batches = self._batches(self.columns, min(int(rows), BATCH_ROWS))
            source = self._kept(_floats(b, self.columns, self.file) for b in batches)
        yield from self._transformed(rechunk(source, rows))
        if self.first is None:
            self._check_count(self._seen)

    def _check_count(self, seen: int) -> None:
        if seen != self._file_rows:
            raise FileChanged(f"party file {self.file} now holds {seen} records, it held {self._file_rows}")

    @property
    def block(self) -> np.ndarray:
        """The whole feature block in memory (for a task that needs every record at once)."""
        chunks = list(self.chunks(BATCH_ROWS))
        return np.vstack(chunks) if chunks else np.zeros((0, self.n_cols))


def _batches(path: str | SqlSource, names, rows: int, sep: str, id_column: str, from_row: int = 0):
    """(file row of its first record, pyarrow record batch) of the columns ``names`` (in that order) of a Parquet
    or CSV file (a CSV's id column read as text, its other columns as float64), or of a database query (every
    column of its result: the readers take theirs by name).  ``from_row``: a Parquet file is read from the row
    group holding that record (earlier batches may still come: the caller skips them)."""
    if isinstance(path, SqlSource):
        try:
            yield from sql_batches(path, id_column, rows)
        except PartyFileError as e:  # the database was checked once: now it fails or refuses
            raise FileChanged(str(e)) from None
        return
    if path.lower().endswith(PARQUET_EXTENSIONS):
        import pyarrow.parquet as pq

        # buffered, not pre-buffered: a reader then holds about one row group's decoded pages, not the file's
        with pq.ParquetFile(path, buffer_size=_PARQUET_BUFFER_BYTES, pre_buffer=False) as f:
            groups, at = list(range(f.metadata.num_row_groups)), 0
            while groups and at + f.metadata.row_group(groups[0]).num_rows <= from_row:
                at += f.metadata.row_group(groups.pop(0)).num_rows
            if not groups:
                return
            for b in f.iter_batches(batch_size=int(rows), columns=list(names), use_threads=False,
                                    row_groups=groups):
                yield at, b
                at += b.num_rows
        return
    import pyarrow as pa
    from pyarrow import csv as pacsv

    nulls = sorted({v for m in MISSING for v in (m, m.upper(), m.title())})
    types = {n: pa.string() if n == id_column else pa.float64() for n in names}
    reader = pacsv.open_csv(
        path, read_options=pacsv.ReadOptions(block_size=_CSV_BLOCK_BYTES, use_threads=False),
        parse_options=pacsv.ParseOptions(delimiter=sep),
        convert_options=pacsv.ConvertOptions(include_columns=list(names), column_types=types, null_values=nulls,
                                             strings_can_be_null=True, quoted_strings_can_be_null=True))
    at = 0
    for b in reader:
        yield at, b
        at += b.num_rows


def _ids(col) -> list[str]:
    """Canonical ids, exactly as :func:`sqm.framework.tables.read_table` makes them (a missing one: "")."""
    return [canonical_id(v) if v is not None else "" for v in col.to_pylist()]


def _floats(batch, names, path: str | SqlSource) -> np.ndarray:
    """A batch's feature columns as a float64 block; FileChanged unless every value is a finite number within
    MAX_ABS_VALUE (the checking pass found them so)."""
    out = np.empty((batch.num_rows, len(names)), dtype=np.float64)
    for t in range(len(names)):
        col = batch.column(names[t])  # by name: a reader may return columns in the file's order
        if col.null_count:
            raise FileChanged(f"party file {path}: column '{names[t]}' now has missing values")
        out[:, t] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    if out.size and not (np.isfinite(out).all() and np.abs(out).max() <= MAX_ABS_VALUE):
        raise FileChanged(f"party file {path} now holds infinite or too large values")
    return out


def _header(path: str) -> tuple[list[str], str] | None:
    """A CSV file's header cells (stripped) and separator, as :func:`sqm.framework.tables.read_table` finds them."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        first = ""
        for line in fh:
            if line.strip():
                first = line.rstrip("\r\n")
                break
    if not first:
        return None
    sep = _sniff_separator(first)
    return [c.strip() for c in next(csv.reader([first], delimiter=sep))], sep


def _numeric(typ) -> bool:
    import pyarrow as pa

    return (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)
            or pa.types.is_decimal(typ))


class _Order:
    """Whether the ids seen so far are strictly increasing in the canonical order
    (:func:`sqm.framework.tables.id_order_key`), across batches."""

    def __init__(self):
        self.canonical, self.prev = True, None

    def add(self, ids: list[str]) -> None:
        prev = self.prev
        for i in ids:
            key = id_order_key(i)
            if prev is not None and not prev < key:
                self.canonical = False
                return
            prev = key
        self.prev = prev


def scan_table(path, id_column: str) -> StreamedTable | None:
    """One checking pass over a party file in batches: a :class:`StreamedTable` if it is valid and its ids
    are in canonical order (strictly increasing: no repeats), else None (read it whole; see the module
    docstring).  Needs pyarrow; without it, None."""
    if isinstance(path, SqlSource):
        return _scan_sql(path, id_column)
    path = str(path)
    try:
        import pyarrow
    except ImportError:
        return None
    if not os.path.isfile(path):
        return None
    try:
        if path.lower().endswith(PARQUET_EXTENSIONS):
            import pyarrow.parquet as pq

            with pq.ParquetFile(path) as f:
                schema = f.schema_arrow
            header, sep = list(schema.names), ","
            if id_column in header and not all(_numeric(schema.field(n).type) for n in header if n != id_column):
                return None
            if id_column in header and _numeric(schema.field(id_column).type) and not pyarrow.types.is_integer(
                    schema.field(id_column).type):
                return None  # floating-point (or boolean) ids: read_table refuses them or names the repeat
        else:
            found = _header(path)
            if found is None:
                return None
            header, sep = found
        columns = [h for h in header if h != id_column]
        if len(set(header)) != len(header) or id_column not in header or not columns:
            return None
        order, n_rows = _Order(), 0
        for _, batch in _batches(path, [id_column] + columns, BATCH_ROWS, sep, id_column):
            if not _checked_batch(batch, id_column, columns, order, path,
                                  f"party file {path}: its ids are not sorted (integers by value, then text), so it "
                                  f"is read whole and sorted in memory; a file sorted by id is read in bounded memory"):
                return None
            n_rows += batch.num_rows
        if n_rows == 0 or not order.canonical:
            return None
    except FileChanged:
        return None  # a missing, infinite or too large value: read_table names it
    except Exception as e:  # noqa: BLE001  pyarrow could not parse it as this project reads it: read_table decides
        log.debug(f"party file {path}: not read in batches ({type(e).__name__}: {e}); reading it whole")
        return None
    return StreamedTable(path, columns, n_rows, id_column, sep)


def _checked_batch(batch, id_column: str, columns: list[str], order: _Order, where, unsorted_note: str) -> bool:
    """One batch of a table scanned for streaming (a file's or a query's): its ids present and, with those before
    them, in canonical order (``order``), its values finite floats (:func:`_floats` raises :class:`FileChanged`
    otherwise).  False where the table must be read whole instead (``unsorted_note`` logged when the order breaks)."""
    ids = _ids(batch.column(id_column))
    if any(i.lower() in MISSING for i in ids):
        return False
    order.add(ids)
    if not order.canonical:
        log.info(unsorted_note)
        return False
    _floats(batch, columns, where)
    return True


def _scan_sql(source: SqlSource, id_column: str) -> StreamedTable | None:
    """:func:`scan_table` of a database query: its result checked batch by batch as a file's is (None: read it
    whole, which names the problem, or sorts records whose ids the query did not give in canonical order).  A
    database that cannot be reached, or refuses the query, raises :class:`PartyFileError` naming it."""
    import pyarrow as pa

    order, n_rows, columns = _Order(), 0, None
    try:
        for _, batch in sql_batches(source, id_column, BATCH_ROWS):
            header = list(batch.schema.names)
            if columns is None:
                columns = [h for h in header if h != id_column]
                if len(set(header)) != len(header) or id_column not in header or not columns:
                    return None
            if not all(_numeric(batch.schema.field(n).type) for n in columns):
                return None
            typ = batch.schema.field(id_column).type
            if _numeric(typ) and not pa.types.is_integer(typ):
                return None
            if not _checked_batch(batch, id_column, columns, order, source,
                                  f"{source.label}: its ids do not come in canonical order (integers by value, then "
                                  f"text), so it is read whole and sorted in memory; a query ordered by id is read in "
                                  f"bounded memory"):
                return None
            n_rows += batch.num_rows
    except FileChanged:
        return None  # a NULL, NaN, infinite or too large value: read_sql_table names it
    if n_rows == 0 or columns is None:
        return None
    return StreamedTable(source, columns, n_rows, id_column)
