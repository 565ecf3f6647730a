"""A client's records over the union of every client's ids, held on disk in buckets (membership-hiding alignment,
:func:`sqm.framework.alignment.hide_membership`), so that a streamed party file stays streamed.

The union's ids lie at random positions among S, the sum of the set sizes (the PSI's placement, drawn by the
server), so a file sorted by id lands at random positions.  :func:`place` makes one pass over the file's chunks and
appends each record, with its position, to one of about ``BUCKETS`` bucket files by position range;
:meth:`UnionTable.chunks` then reads the buckets in order and scatters each into a dense block of its range (zeros where
the client holds no record).  A client thus holds one bucket at a time (S / BUCKETS positions, at least
``MIN_BUCKET_ROWS``) and one chunk of the file, instead of the whole table over the S positions.

The buckets are raw float64 files, each record as [position, values...] (positions < 2^53 are exact), in a
folder of the client's own made by :func:`tempfile.mkdtemp` (mode 0700): the client's own data, never sent.  The
folder is removed by :meth:`UnionTable.close` (the job calls it when the task ends, however it ends) or, failing
that, when the last copy of the table in the placing process is collected or the process exits.  A shard
worker's copy (:meth:`part`, pickled) reads the same folder and never removes it.

Written here rather than taken from a library: it is a bucket sort of rows into position ranges with the same
interface as :class:`sqm.framework.table_stream.StreamedTable` (``chunks``, ``part``, ``with_transform``); numpy
writes and reads the buckets.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator

import numpy as np

from sqm.framework.table_stream import ChunkTransform
from sqm.errors import UsageError
from sqm.mpc.protocols.stream import rechunk

BUCKETS = 64  # position ranges the records are sorted into
MIN_BUCKET_ROWS = 1 << 14  # a bucket covers at least this many positions of the union
READ_ROWS = 1 << 13  # file records read per pass of the placement


class _Folder:
    """The bucket folder, removed once: by :meth:`remove`, or when the placing process's last reference goes."""

    def __init__(self, path: str):
        self.path = path
        self._finalizer = weakref.finalize(self, shutil.rmtree, path, True)

    def remove(self) -> None:
        self._finalizer()

    def __reduce__(self):  # a shard worker's copy: the same path, and no right to remove it
        return (_Borrowed, (self.path,))


class _Borrowed:
    def __init__(self, path: str):
        self.path = path

    def remove(self) -> None:
        pass


@dataclass
class UnionTable(ChunkTransform):
    """A client's table over the S positions of the union (its own records at their positions, zeros elsewhere),
    read chunk by chunk from its bucket files: the names of :class:`sqm.framework.table_stream.StreamedTable` where
    a streaming task uses them (``file``, ``columns``, ``n_rows``, ``n_cols``, ``chunks``, ``part``,
    ``with_transform``, ``counts``, ``parts_taken``)."""

    file: str
    columns: list[str]
    n_rows: int  # positions of the union this table covers (S, or a part's)
    edges: tuple  # bucket b covers positions [edges[b], edges[b + 1])
    folder: _Folder | _Borrowed = field(repr=False)
    first: int = 0  # a part: the union position it starts at
    transform: Callable | None = field(default=None, repr=False)
    transformed_count: int = 0
    ids_digest: bytes | None = field(default=None, repr=False)

    @property
    def n_cols(self) -> int:
        return len(self.columns)

    def close(self) -> None:
        """Remove the bucket files (the placing process; a shard worker's copy removes nothing)."""
        self.folder.remove()

    def part(self, start: int, stop: int) -> UnionTable:
        """Positions ``[start, stop)`` of this table (a shard worker's): :meth:`chunks` yields exactly those rows."""
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_rows:
            raise UsageError(f"records [{start}, {stop}) of a table of {self.n_rows}")
        return dataclasses.replace(self, first=self.first + start, n_rows=stop - start, transformed_count=0)

    def _bucket(self, b: int) -> np.ndarray:
        """Bucket ``b`` as a dense block of its positions' rows (zeros where the client holds no record)."""
        lo, hi = self.edges[b], self.edges[b + 1]
        raw = np.fromfile(os.path.join(self.folder.path, f"{b}.f64"), dtype=np.float64)
        recs = raw.reshape(-1, 1 + self.n_cols)
        dense = np.zeros((hi - lo, self.n_cols))
        dense[recs[:, 0].astype(np.int64) - lo] = recs[:, 1:]
        return dense

    def _blocks(self) -> Iterator[np.ndarray]:
        lo, hi = self.first, self.first + self.n_rows
        for b in range(len(self.edges) - 1):
            a, z = self.edges[b], self.edges[b + 1]
            if z <= lo or a >= hi:
                continue
            yield self._bucket(b)[max(lo, a) - a:min(hi, z) - a]

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The rows of positions ``first .. first + n_rows - 1`` in blocks of exactly ``rows`` (the last: the
        rest), each passed through ``transform``."""
        return self._transformed(rechunk(self._blocks(), rows))


def place(table, position: np.ndarray, size: int, buckets: int | None = None,
          min_bucket_rows: int | None = None) -> UnionTable:
    """``table`` (anything with ``chunks``, ``n_rows``, ``columns``, ``file``: a streamed party file) placed over the
    union's ``size`` positions, its r-th record (in the order it reads them) at ``position[r]``: one pass over
    its chunks into the bucket files (module docstring)."""
    position = np.asarray(position, dtype=np.int64)
    if position.shape != (int(table.n_rows),):
        raise UsageError(f"{position.size} union positions for a table of {table.n_rows} records")
    size = int(size)
    buckets = BUCKETS if buckets is None else int(buckets)
    min_bucket_rows = MIN_BUCKET_ROWS if min_bucket_rows is None else int(min_bucket_rows)
    width = max(min_bucket_rows, -(-size // max(1, buckets)))
    edges = tuple(range(0, size, width)) + (size,) if size else (0, 0)
    folder = _Folder(tempfile.mkdtemp(prefix="sqm-union-"))
    n_cols = len(table.columns)
    try:
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(open(os.path.join(folder.path, f"{b}.f64"), "wb"))
                     for b in range(len(edges) - 1)]
            _write_buckets(table, position, width, n_cols, files)
    except BaseException:
        folder.remove()
        raise
    return UnionTable(table.file, list(table.columns), size, edges, folder)


def _write_buckets(table, position: np.ndarray, width: int, n_cols: int, files) -> None:
    """One pass over ``table``'s chunks: each record, with its position, appended to the file of its bucket."""
    at = 0
    for chunk in table.chunks(READ_ROWS):
        k = chunk.shape[0]
        pos = position[at:at + k]
        if pos.shape[0] != k:
            raise UsageError(f"{table.file} gave more records than the {position.size} it held at the alignment")
        recs = np.empty((k, 1 + n_cols))
        recs[:, 0], recs[:, 1:] = pos, chunk
        which = pos // width
        order = np.argsort(which, kind="stable")
        cuts = np.searchsorted(which[order], np.arange(len(files) + 1))
        for b in range(len(files)):
            if cuts[b] < cuts[b + 1]:
                recs[order[cuts[b]:cuts[b + 1]]].tofile(files[b])
        at += k
    if at != position.size:
        raise UsageError(f"{table.file} gave {at} records, it held {position.size} at the alignment")
