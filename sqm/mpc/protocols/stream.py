"""A client's input to a secure evaluation, delivered in row chunks so that no party holds all records at once.

:meth:`sqm.mpc.protocols.evaluation.Evaluation.evaluate` takes a client's input as a :class:`ChunkedInput`: its record
and column counts up front, then its integer rows chunk by chunk (:meth:`ChunkedInput.chunks`), then, once every
chunk has been taken, its addend (:meth:`ChunkedInput.addend`).  That order lets a client draw whatever it
draws for the addend (an SQM client: its noise share) after the draws for its rows, exactly as an
evaluation of the whole block would, so chunking never changes a client's integers.

:class:`ArrayInput` is the input of a block already in memory; :func:`rechunk` cuts any sequence of row
blocks (a file read in batches) into chunks of exactly the requested size.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
from sqm.errors import UsageError

# Elements (records x columns, all clients' columns together) per chunk: 2^19 int64 = 4 MiB per chunk array,
# so a party's peak memory stays a few hundred MiB whatever the record count.
CHUNK_ELEMENTS = 1 << 19


def chunk_rows(n_cols: int, elements: int = CHUNK_ELEMENTS) -> int:
    """Records per chunk for a job over ``n_cols`` columns in all (public: every party computes the same)."""
    return max(1024, int(elements) // max(1, int(n_cols)))


def chunk_count(n_rows: int, rows_per_chunk: int) -> int:
    """Chunks of ``rows_per_chunk`` records that ``n_rows`` records make (at least one: a job without records
    still makes one exchange)."""
    return max(1, -(-int(n_rows) // int(rows_per_chunk)))


class ChunkedInput:
    """A client's integer input: ``n_rows`` records of ``n_cols`` columns, an addend and, optionally, the keyed
    digest of its record ids (``ids_digest``).  Subclasses define :meth:`chunks` and :meth:`addend`."""

    n_rows: int
    n_cols: int
    ids_digest: bytes | None = None

    def chunks(self, rows: int) -> Iterator[np.ndarray]:  # pragma: no cover - interface
        """The records in order, as int64 blocks of exactly ``rows`` rows (the last one: what is left)."""
        raise NotImplementedError

    def addend(self) -> np.ndarray:  # pragma: no cover - interface
        """The addend (signed integers), called once after :meth:`chunks` is exhausted."""
        raise NotImplementedError

    # ----- shards (sqm.mpc.protocols.shards): the records split between workers of this party -----------------
    def part(self, start: int, stop: int) -> ChunkedInput:
        """The records ``[start, stop)`` as an input of their own, picklable, for one of this party's shard
        workers: it yields exactly the integers :meth:`chunks` yields for those records (whatever the chunk
        sizes), and has no addend.  An input that cannot be split says so."""
        raise UsageError(f"{type(self).__name__} cannot be split between shard workers")

    def counts(self) -> dict:
        """What a part counted while its chunks were taken (e.g. rows clipped), for :meth:`parts_taken`."""
        return {}

    def parts_taken(self, counts) -> None:
        """Every record was taken by :meth:`part` inputs (one per shard) whose :meth:`counts` are ``counts``:
        add them up and move past the records, so that :meth:`addend` draws what it would after
        :meth:`chunks`."""


class ArrayInput(ChunkedInput):
    """The input of a block in memory (the evaluation of a whole block is its single chunk); also rows in
    memory read chunk by chunk by a caller that makes the addend itself (``addend`` None)."""

    def __init__(self, block, addend=None, ids_digest: bytes | None = None):
        self.block = np.asarray(block)
        if self.block.ndim != 2:
            raise UsageError(f"a client's block must be 2-D, got shape {self.block.shape}")
        self._addend = np.asarray(addend)
        self.n_rows, self.n_cols = self.block.shape
        self.ids_digest = ids_digest

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        for s in range(0, self.n_rows, int(rows)):
            yield self.block[s:s + int(rows)]

    def addend(self) -> np.ndarray:
        return self._addend

    def part(self, start: int, stop: int) -> ArrayInput:
        return ArrayInput(self.block[int(start):int(stop)], None)


def as_input(my_input) -> ChunkedInput:
    """A :class:`ChunkedInput` as it is, or one made from ``(block, addend[, ids digest])``."""
    if isinstance(my_input, ChunkedInput):
        return my_input
    block, addend, *rest = my_input
    return ArrayInput(block, addend, bytes(rest[0]) if rest and rest[0] is not None else None)


def rechunk(blocks: Iterable[np.ndarray], rows: int) -> Iterator[np.ndarray]:
    """The rows of ``blocks`` (2-D arrays with the same columns, of any heights) regrouped into blocks of
    exactly ``rows`` rows, the last one holding what is left; at most one chunk is held beyond the input's."""
    rows = int(rows)
    if rows < 1:
        raise UsageError(f"a chunk holds at least one record, got {rows}")
    pending: list[np.ndarray] = []
    held = 0
    for b in blocks:
        b = np.asarray(b)
        while b.shape[0]:
            take = min(rows - held, b.shape[0])
            pending.append(b[:take])
            held += take
            b = b[take:]
            if held == rows:
                yield pending[0] if len(pending) == 1 else np.vstack(pending)
                pending, held = [], 0
    if held:
        yield pending[0] if len(pending) == 1 else np.vstack(pending)
