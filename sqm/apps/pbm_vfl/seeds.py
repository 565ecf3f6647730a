"""Each PBM-VFL party's seeds, from its OWN seed only: its model initialisation, its secret draws per epoch, its
torch sampling per step; and the PUBLIC seed of the mini-batch order."""
from __future__ import annotations


import numpy as np

from sqm.mechanism.rng import derive_seed, fresh_bytes, make_rng, spawn_seeds


def _seed_int(ss: np.random.SeedSequence) -> int:
    return int(ss.generate_state(1, dtype=np.uint64)[0] & ((1 << 63) - 1))


def _child(seed, *key) -> np.random.SeedSequence:
    """The child of a party's seed at ``key`` (as nested ``spawn`` calls would give it, without advancing the seed
    object: the same seed always gives the same streams)."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, *key), pool_size=ss.pool_size)


def party_seeds(seed, n: int) -> list:
    """Each party's own seed, entry 0 the server's and j client j's: :func:`sqm.mechanism.rng.spawn_seeds` of ``seed``
    (an int, a sequence of ints or a SeedSequence); for ``seed`` None, None for every party: each draws fresh OS
    entropy itself."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (list, tuple)):
        seed = np.random.SeedSequence([int(x) for x in seed])
    return spawn_seeds(seed, n)


def model_seed(seed) -> int:
    """The torch seed of a party's default model initialisation, from the party's OWN seed only (from
    :func:`sqm.mechanism.rng.spawn_seeds`); fresh OS entropy when ``seed`` is None."""
    if seed is None:
        return int.from_bytes(fresh_bytes(8), "little") >> 1
    return _seed_int(_child(seed, 0))


def party_stream(seed, epoch: int) -> np.random.Generator:
    """A party's cryptographic generator (AES-CTR) for its secret draws in ``epoch`` (epoch 0: a prediction
    run): a function of the party's own seed and the epoch only, so a resumed run draws what an uninterrupted one
    would; fresh OS entropy when ``seed`` is None."""
    return make_rng(None if seed is None else _child(seed, 1, int(epoch)))


def torch_step_seed(seed, epoch: int, step: int, train: bool = True) -> int:
    """The torch seed of a party's forward pass at (epoch, step) of training (or of the evaluation) (dropout and
    any other torch sampling in a party model; not secret noise); fresh when ``seed`` is None."""
    if seed is None:
        return int.from_bytes(fresh_bytes(8), "little") >> 1
    return _seed_int(_child(seed, 2 if train else 3, int(epoch), int(step)))


BATCH_ORDER_LABEL = "sqm-vfl PBM-VFL public mini-batch order"


def public_batch_seed(seed=None) -> int:
    """The PUBLIC seed of the mini-batch order (every party derives the same order from it).

    Fresh OS entropy when ``seed`` is None; for a seeded experiment, a one-way function of the seed (HMAC-SHA256
    under a label of its own, :func:`sqm.mpc.shares.randomness.derive_seed`): it is a separate value, public, from which
    no party's seed can be recovered (parties' seeds are other HMAC outputs of the root)."""
    if seed is None:
        return int.from_bytes(fresh_bytes(8), "little") >> 1
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    root = int.from_bytes(ss.generate_state(8, np.uint32).astype("<u4").tobytes(), "little")
    return derive_seed(root, BATCH_ORDER_LABEL) >> 193  # 63 bits
