"""What one client does on its own machine: clip its sub-rows, quantize its columns, draw its noise share."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .quantize import stochastic_round
from .skellam import skellam
from .vertical import clip_rows


@dataclass
class QuantizingClient:
    """A picklable client program for :mod:`mpc` backends: returns (quantized block, Skellam noise share).

    ``seed`` (a SeedSequence or None for OS entropy) is this client's own; it is consumed in a fixed order
    (rounding, then noise), so the same seed gives the same integers in any backend.
    """

    block: np.ndarray
    gamma: float
    clip_bound: float
    noise_mu: float  # this client's share of the noise parameter, mu / n
    n_out: int
    seed: object = None

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        block, _ = clip_rows(np.asarray(self.block, np.float64), self.clip_bound)
        x_hat = stochastic_round(block, self.gamma, rng)
        z = skellam(self.noise_mu, self.n_out, rng)
        return x_hat, z
