"""Secret randomness for the parties: numpy generators on a cryptographic keystream.

Every generator a party uses for secret values (Shamir coefficients, stochastic rounding, noise, masks) is a
:class:`numpy.random.Generator` on randomgen's ``AESCounter``: AES-128 in counter mode (AES-NI where the
processor has it), a cryptographic pseudo-random generator.  Without a seed its key is 128 bits of OS
entropy from :mod:`secrets`, fresh for every generator, so its output cannot be predicted from anything
another party holds.  numpy's own bit generators (PCG64, Philox) are statistical generators: outputs of
PCG64 reveal its state, which is why they are not used for secrets.

With a seed (reproducible experiments only: whoever knows the seed knows every value drawn) the key is
derived from the seed by numpy's SeedSequence, deterministically.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

import numpy as np
from randomgen import AESCounter
from sqm.errors import UsageError

SeedLike = int | np.random.SeedSequence | np.random.Generator | None


def secure_generator(seed: SeedLike = None) -> np.random.Generator:
    """A Generator on AES-128-CTR: keyed from OS entropy when ``seed`` is None, else from the seed.

    A Generator passed in is returned as it is (the caller chose its stream)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.Generator(AESCounter(key=secrets.randbits(128)))
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return np.random.Generator(AESCounter(seed=ss))


def is_secure(rng: np.random.Generator) -> bool:
    """Whether ``rng`` draws from the cryptographic keystream."""
    return isinstance(rng.bit_generator, AESCounter)


def derive_seed(seed: int, label: str) -> int:
    """A 256-bit seed for one party, HMAC-SHA256(``seed``, ``label``): knowing one party's derived seed tells
    nothing about another's (HMAC is a pseudo-random function), so a server handed its own seed cannot
    regenerate a client's randomness.  Whoever holds ``seed`` itself can, which is why a seeded run is a
    labelled experiment, refused between parties that do not trust each other unless the operator opts in."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"a seed must be a non-negative integer, got {seed!r}")
    key = int(seed).to_bytes(max(1, (int(seed).bit_length() + 7) // 8), "big")
    return int.from_bytes(hmac.new(key, label.encode(), hashlib.sha256).digest(), "big")


def fresh_bytes(n: int = 32) -> bytes:
    """``n`` bytes of OS entropy (keys, contributions to shared randomness)."""
    return secrets.token_bytes(n)
