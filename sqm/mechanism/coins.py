"""A client's rounding coins, keyed per block of records, apart from its noise.

A client rounds every value of its input with one uniform coin (:func:`sqm.mechanism.quantize.dependent_round`)
and draws its Skellam noise share once.  Both come from its own secret randomness, but not from one stream: the
coins of records ``[b B, (b + 1) B)`` (``B`` = :data:`COIN_BLOCK` records, a public constant) come from an
AES-128-CTR stream keyed by ``HMAC-SHA256(master, "sqm rounding coins" || b)``, one uint64 per value in row
order, and the master is 32 bytes drawn once from the client's generator, whose later draws make its noise.

Why: a shard worker of the client (:mod:`sqm.mpc.protocols.shards`) rounds only its own records.  It is handed the keys
of the blocks its records touch (:meth:`CoinKeys.restricted`), never the master and never the generator, so it
can compute neither the coins of another block nor the noise share (the generator's key stays in the client's
own process).  Where the keys live: the master and the generator in the client's party process only; each
block key in that process and in the one worker process (local, or on the client's own Dask cluster) whose
records the block touches, in that worker's pickled program, which the client writes into a private folder
(0700) or hands to its own scheduler, and which is deleted with the worker.  Coins alone reveal nothing of the
data they round.

Any split into parts, and any chunk size, gives the integers of the whole input: a block's stream jumps to the
coin of any record by counter arithmetic (``advance``).  HMAC-SHA256 is a pseudo-random function, so block keys
are independent uniform keys to anyone without the master.
"""
from __future__ import annotations

import hashlib
import hmac

import numpy as np
from randomgen import AESCounter

from sqm.errors import UsageError
from sqm.mpc.shares.randomness import is_secure

COIN_BLOCK = 1 << 16  # records per coin key (public): a shard worker holds the keys of the blocks its records touch
_LABEL = b"sqm rounding coins\x00"


class CoinKeys:
    """The coins of an input of ``n_cols`` columns: every block's key derivable from ``master`` (a whole input),
    or only the keys in ``blocks`` (block index -> key; a part).  ``insecure_pcg64``: BENCHMARK ONLY, numpy's
    PCG64 streams (``python -m bench bgw-cost --compare-rng``)."""

    def __init__(self, n_cols: int, master: bytes | None = None, blocks: dict[int, int] | None = None,
                 insecure_pcg64: bool = False):
        if (master is None) == (blocks is None):
            raise UsageError("coin keys come from a master key or from given block keys, exactly one of them")
        self.n_cols, self.insecure_pcg64 = int(n_cols), bool(insecure_pcg64)
        self._master, self._blocks = master, None if blocks is None else dict(blocks)
        self._at: tuple[int, int] | None = None  # (block, next record in it) of the stream held in _gen
        self._gen: np.random.Generator | None = None

    @classmethod
    def from_generator(cls, rng: np.random.Generator, n_cols: int) -> CoinKeys:
        """A fresh master from 32 bytes of ``rng`` (the client's own generator, whose later draws make its noise)."""
        return cls(n_cols, master=rng.bytes(32), insecure_pcg64=not is_secure(rng))

    @property
    def has_master(self) -> bool:
        return self._master is not None

    def block_key(self, b: int) -> int:
        if self._master is not None:
            digest = hmac.new(self._master, _LABEL + int(b).to_bytes(8, "little"), hashlib.sha256).digest()
            return int.from_bytes(digest[:16], "little")
        assert self._blocks is not None  # no master: the constructor took the block keys
        if b not in self._blocks:
            raise UsageError(f"these coin keys hold blocks {sorted(self._blocks)}, not block {b}: a part rounds only "
                             f"its own records")
        return self._blocks[b]

    def restricted(self, start: int, stop: int) -> CoinKeys:
        """The keys of the blocks that records ``[start, stop)`` touch, and nothing else (no master)."""
        first, last = int(start) // COIN_BLOCK, (max(int(stop), int(start) + 1) - 1) // COIN_BLOCK
        return CoinKeys(self.n_cols, blocks={b: self.block_key(b) for b in range(first, last + 1)},
                        insecure_pcg64=self.insecure_pcg64)

    def _stream(self, b: int, record: int) -> np.random.Generator:
        if self._at != (b, record):
            key = self.block_key(b)
            bg = np.random.PCG64(key) if self.insecure_pcg64 else AESCounter(key=key)
            offset = (record - b * COIN_BLOCK) * self.n_cols
            if offset:
                bg.advance(offset)
            self._gen = np.random.Generator(bg)
        assert self._gen is not None  # _at is set only with _gen
        return self._gen

    def random(self, start: int, rows: int) -> np.ndarray:
        """The coins of records ``[start, start + rows)``: a (rows, n_cols) float64 array, uniform in [0, 1)."""
        start, rows = int(start), int(rows)
        out = np.empty((rows, self.n_cols), dtype=np.float64)
        at = 0
        while at < rows:
            r = start + at
            b = r // COIN_BLOCK
            take = min(rows - at, (b + 1) * COIN_BLOCK - r)
            out[at:at + take] = self._stream(b, r).random((take, self.n_cols))
            at += take
            self._at = (b, r + take)
        return out
