"""The seed policy of PBM-VFL experiments (``sqm pbm-vfl --seed`` and its benchmarks)."""
from __future__ import annotations



def method_seed(seed: int, method: str):
    """The seed of ``method``'s run in ``sqm pbm-vfl --seed SEED``: child k of SeedSequence(SEED), k the method's
    place in :data:`.config.METHODS` (so each method's parties draw their own seeds from it)."""
    import numpy as np

    from sqm.apps.pbm_vfl.config import METHODS

    return np.random.SeedSequence(seed).spawn(len(METHODS))[METHODS.index(method)]
