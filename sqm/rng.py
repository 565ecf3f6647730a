"""Randomness: OS entropy unless the caller passes a seed or a generator."""
from __future__ import annotations

import numpy as np

SeedLike = int | np.random.SeedSequence | np.random.Generator | None


def make_rng(seed: SeedLike = None) -> np.random.Generator:
    """A ``numpy.random.Generator``: fresh OS entropy when ``seed`` is None, else deterministic."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def spawn_seeds(seed: int | np.random.SeedSequence | None, n: int) -> list[np.random.SeedSequence]:
    """``n`` independent child seed sequences (OS entropy when ``seed`` is None).

    Each party of a job gets its own child, so a party's randomness never depends on another's and a
    seeded job is reproducible bit for bit whether its parties run in one process or in many.
    """
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return root.spawn(n)
