"""Randomness: a cryptographic keystream (AES-128-CTR, :mod:`sqm.mpc.shares.randomness`) keyed from OS entropy unless
the caller passes a seed or a generator; per-party seeds derived so that none reveals another."""
from __future__ import annotations

import numpy as np

from sqm.mpc.shares.randomness import derive_seed, fresh_bytes, secure_generator
from sqm.errors import UsageError

SeedLike = int | np.random.SeedSequence | np.random.Generator | None


def make_rng(seed: SeedLike = None) -> np.random.Generator:
    """A ``numpy.random.Generator`` on AES-128-CTR (:func:`sqm.mpc.shares.randomness.secure_generator`): keyed from
    fresh OS entropy when ``seed`` is None, else deterministically from the seed; a Generator is returned as it is."""
    return secure_generator(seed)


def party_rng(seed: SeedLike = None, insecure_pcg64: bool = False) -> np.random.Generator:
    """A party's own generator: :func:`make_rng`, or BENCHMARK ONLY (``python -m bench bgw-cost --compare-rng``,
    ``insecure_pcg64``) numpy's PCG64, a statistical generator whose outputs reveal its state, to measure what
    the cryptographic stream costs.  Never the insecure one for a job whose noise must stay secret."""
    return np.random.default_rng(seed) if insecure_pcg64 else make_rng(seed)


def _root_int(seed: int | np.random.SeedSequence) -> int:
    """The integer root a party seed is derived from: the int itself, or for a SeedSequence its entropy when it
    is a bare int with no spawn key (so ``SeedSequence(s)`` and ``s`` derive the same seeds), else 256 bits
    drawn from it (a function of its entropy and spawn key, deterministic)."""
    if isinstance(seed, np.random.SeedSequence):
        if not seed.spawn_key and isinstance(seed.entropy, (int, np.integer)):
            return int(seed.entropy)
        return int.from_bytes(seed.generate_state(8, np.uint32).astype("<u4").tobytes(), "little")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise UsageError(f"a seed must be a non-negative integer, a SeedSequence or None, got {seed!r}")
    return int(seed)


def spawn_seeds(seed: int | np.random.SeedSequence | None, n: int) -> list[np.random.SeedSequence]:
    """``n`` per-party seeds, entry ``i`` for party ``i`` (in a job: 0 the server, j client j).

    With a ``seed`` (reproducible experiments: whoever holds it can regenerate everything) entry ``i`` is
    ``SeedSequence(derive_seed(root, f"party {i}"))``: HMAC-SHA256 of the label under the root, so its
    ``.entropy`` is neither the root nor any other party's seed, and nothing a party is handed (its own
    SeedSequence, what it spawns from it) lets it rebuild the root or another party's randomness.  (numpy's
    ``SeedSequence.spawn`` children would not do: every child carries the root itself as ``.entropy``.)
    A SeedSequence root is reduced to an integer deterministically (see :func:`_root_int`).

    With ``seed=None`` every entry is a SeedSequence of 256 fresh bits of OS entropy, drawn independently per
    party, so each party draws its own secret randomness.  The entries stay SeedSequences so callers may
    ``.spawn`` sub-streams; the same seed gives the same entries in one process or in many.
    """
    if int(n) != n or n < 0:
        raise UsageError(f"the number of seeds must be an integer >= 0, got {n!r}")
    if seed is None:
        return [np.random.SeedSequence(int.from_bytes(fresh_bytes(32), "big")) for _ in range(int(n))]
    root = _root_int(seed)
    return [np.random.SeedSequence(derive_seed(root, f"party {i}")) for i in range(int(n))]


def party_key_bytes(seed, pid: int, label: str, n: int = 32) -> bytes:
    """``n`` bytes of party ``pid``'s own secret randomness (e.g. its contribution to a key the clients agree):
    fresh OS entropy when ``seed`` is None; in a seeded (insecure, reproducible) experiment, bytes of the
    party's own AES-CTR stream, keyed from its own seed (:func:`spawn_seeds`) under ``label``."""
    if seed is None:
        return fresh_bytes(n)
    mine = spawn_seeds(seed, pid + 1)[pid]
    root = int.from_bytes(mine.generate_state(8, np.uint32).astype("<u4").tobytes(), "little")
    return secure_generator(derive_seed(root, label)).bytes(n)
