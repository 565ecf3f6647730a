"""What one client does on its own machine: clip its column groups, quantize its columns (dependent rounding
within each group), draw its noise share."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.protocols.stream import ArrayInput, ChunkedInput

from .coins import CoinKeys
from .quantize import dependent_round
from .rng import SeedLike, party_rng
from .skellam import skellam
from .vertical import OwnGroups, clip_rows


def client_input(block: np.ndarray, clip, gamma: float, noise_mu: float, n_out: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """(quantized block, Skellam noise share Sk(noise_mu) of ``n_out`` outputs, rows clipped): the whole
    block as one chunk of :class:`QuantizedRows`.

    ``clip``: this party's bound on its sub-row (a number: its columns are one group), or its column groups
    (:class:`sqm.mechanism.vertical.OwnGroups`: each group clipped to its bound and rounded on its own by
    :func:`sqm.mechanism.quantize.dependent_round`).  ``rng`` is consumed in a fixed order, the coins' master key
    then the noise (:mod:`sqm.mechanism.coins`), so the same generator gives the same integers in any runner."""
    q = QuantizedRows(ArrayInput(np.asarray(block, np.float64)), clip, gamma, noise_mu, n_out, rng)
    x_hat = q.whole()
    return x_hat, q.addend(), q.clipped


class QuantizedRows(ChunkedInput):
    """A client's SQM input made chunk by chunk (:class:`sqm.mpc.protocols.stream.ChunkedInput`): each chunk of its real
    rows (``source``: anything with ``n_rows``, ``n_cols`` and ``chunks(rows)`` yielding float blocks, e.g. a
    party file read in batches) is clipped (``clip`` as in :func:`client_input`) and rounded at scale gamma
    (:func:`sqm.mechanism.quantize.dependent_round`, per column group); once the last chunk is taken, the noise
    share Sk(noise_mu) is drawn.  Randomness (:mod:`sqm.mechanism.coins`): 32 bytes of ``rng`` key the coins,
    per block of records, then ``rng`` draws the noise; so any chunk size, and any split into parts, gives the
    same integers.  ``clipped``: rows clipped so far.

    A part (:meth:`part`, a shard worker's records) carries the coin keys of its own blocks only: no master key,
    no generator, no noise (``coins``/``first_row``: set by :meth:`part`)."""

    def __init__(self, source, clip, gamma: float, noise_mu: float, n_out: int, rng: np.random.Generator | None,
                 ids_digest: bytes | None = None, coins: CoinKeys | None = None, first_row: int = 0):
        self.source, self.clip, self.gamma, self.noise_mu, self.n_out, self.rng = (source, clip, gamma, noise_mu,
                                                                                   n_out, rng)
        if not isinstance(clip, (OwnGroups, int, float, np.floating, np.integer)):
            raise UsageError(f"clip must be a bound on the sub-row (a number) or the client's column groups "
                             f"(OwnGroups), got {type(clip).__name__}")
        self._groups = clip.groups if isinstance(clip, OwnGroups) else None  # None: one group, the whole sub-row
        self.n_rows, self.n_cols = int(source.n_rows), int(source.n_cols)
        self.ids_digest = ids_digest
        self.clipped = 0
        if coins is None:
            if rng is None:
                raise UsageError("a client's input needs its generator (or, for a part, its coin keys)")
            coins = CoinKeys.from_generator(rng, self.n_cols)
        self.coins = coins
        self._row = int(first_row)  # the next record's index in the whole input (its coins' place)

    def part(self, start: int, stop: int) -> QuantizedRows:
        """Records ``[start, stop)``, rounded with the same coins as in the whole input: the part holds the keys of
        the coin blocks those records touch (:meth:`sqm.mechanism.coins.CoinKeys.restricted`) and nothing else of
        this client's randomness: no master key, no generator, so no noise (the addend stays with this input)."""
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_rows:
            raise UsageError(f"records [{start}, {stop}) of an input of {self.n_rows}")
        return QuantizedRows(self.source.part(start, stop), self.clip, self.gamma, 0.0, self.n_out, None,
                             coins=self.coins.restricted(start, stop), first_row=start)

    def counts(self) -> dict:
        out = {"clipped": int(self.clipped)}
        source = getattr(self.source, "counts", None)
        if source is not None:
            out["source"] = source()
        return out

    def parts_taken(self, counts) -> None:
        for c in counts:
            self.clipped += int(c.get("clipped", 0))
        adopt = getattr(self.source, "parts_taken", None)
        if adopt is not None:
            adopt([c.get("source", {}) for c in counts])
        self._row = self.n_rows

    def chunks(self, rows: int):
        for b in self.source.chunks(rows):
            b = np.asarray(b, np.float64)
            b, c = self.clip.clip(b) if self._groups is not None else clip_rows(b, float(self.clip))
            self.clipped += int(c)
            coins = self.coins.random(self._row, b.shape[0])
            self._row += b.shape[0]
            yield dependent_round(b, self.gamma, self._groups, coins=coins)

    def addend(self) -> np.ndarray:
        if self.rng is None:
            raise UsageError("a part of a client's input has no addend: the noise share stays with the client")
        return skellam(self.noise_mu, self.n_out, self.rng)

    def whole(self) -> np.ndarray:
        """Every record quantized, as one block (for a kernel that takes the block whole)."""
        return next(self.chunks(max(1, self.n_rows)), np.zeros((0, self.n_cols), np.int64))


@dataclass
class QuantizingClient:
    """A picklable client program for :mod:`sqm.mpc` backends: returns (quantized block, Skellam noise share).

    ``clip_bound``: the bound on this client's sub-row norm (party programs with column groups call
    :func:`client_input` from :func:`sqm.mechanism.release.sqm_round`).
    ``seed`` (a SeedSequence or None for OS entropy) is this client's own; it keys an AES-128-CTR stream
    (:func:`sqm.mechanism.rng.make_rng`) consumed in a fixed order (rounding, then noise: :func:`client_input`), so the
    same seed gives the same integers in any backend.

    ``insecure_pcg64``: BENCHMARK ONLY (``python -m bench bgw-cost --compare-rng``): draw from numpy's PCG64, a
    statistical generator whose outputs reveal its state, to measure what the cryptographic stream costs.
    Never set it for a job whose noise must stay secret.
    """

    block: np.ndarray
    gamma: float
    clip_bound: float
    noise_mu: float  # this client's share of the noise parameter, mu / n
    n_out: int
    seed: SeedLike = None
    insecure_pcg64: bool = False  # benchmark only: the old statistical generator

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        rng = party_rng(self.seed, self.insecure_pcg64)
        x_hat, z, _ = client_input(self.block, self.clip_bound, self.gamma, self.noise_mu, self.n_out, rng)
        return x_hat, z

