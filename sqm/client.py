"""What one client does on its own machine: clip its sub-rows, quantize its columns, draw its noise share."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .quantize import stochastic_round
from .rng import make_rng
from .skellam import skellam
from .vertical import clip_rows


@dataclass
class QuantizingClient:
    """A picklable client program for :mod:`mpc` backends: returns (quantized block, Skellam noise share).

    ``seed`` (a SeedSequence or None for OS entropy) is this client's own; it keys an AES-128-CTR stream
    (:func:`sqm.rng.make_rng`) consumed in a fixed order (rounding, then noise), so the same seed gives the
    same integers in any backend.

    ``insecure_pcg64``: BENCHMARK ONLY (``sqm bench bgw-cost --compare-rng``): draw from numpy's PCG64, a
    statistical generator whose outputs reveal its state, to measure what the cryptographic stream costs.
    Never set it for a job whose noise must stay secret.
    """

    block: np.ndarray
    gamma: float
    clip_bound: float
    noise_mu: float  # this client's share of the noise parameter, mu / n
    n_out: int
    seed: object = None
    insecure_pcg64: bool = False  # benchmark only: the old statistical generator

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed) if self.insecure_pcg64 else make_rng(self.seed)
        block, _ = clip_rows(np.asarray(self.block, np.float64), self.clip_bound)
        x_hat = stochastic_round(block, self.gamma, rng)
        z = skellam(self.noise_mu, self.n_out, rng)
        return x_hat, z
