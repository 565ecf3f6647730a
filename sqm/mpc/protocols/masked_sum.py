"""The pairwise-masked secure sum (Bonawitz et al., CCS 2017, without dropouts) on a party context.

Each pair of clients agrees on a key by X25519 among themselves (fresh key pairs from OS entropy for every job,
never from a seed; HKDF-SHA256 binds the key to both party indices and both public keys).  For a sum of
non-negative integer vectors bounded by ``bound``, with 2^k > bound, client m sends
y_m = q_m + sum_{m'>m} u_{m,m'} - sum_{m'<m} u_{m',m} mod 2^k, where the masks u are SHAKE-256 streams of the
pair's key and a round counter; the masks cancel in the server's sum, which is the exact sum of the q_m.
Each value travels in ceil(k / 8) bytes.  The server learns the sum only; the clients learn nothing.
Refused with fewer than two clients (one client's "masked" value would be its data in the clear).
"""
from __future__ import annotations

import hashlib

import numpy as np

from sqm.mpc.net import wire
from sqm.mpc.net.abort import ProtocolError
from sqm.errors import UsageError

MASK_KEY_INFO = b"sqm-vfl pairwise mask key v2"


def mask_bits(bound: int) -> int:
    """k with 2^k > bound: the modulus of a masked sum whose exact value lies in [0, bound]."""
    return int(bound).bit_length()


def mask_dtype(k: int):
    return np.uint8 if k <= 8 else np.uint16 if k <= 16 else np.uint32 if k <= 32 else np.uint64


def prg(key: bytes, counter: int, size: int, k: int) -> np.ndarray:
    """``size`` pseudo-random k-bit integers from SHAKE-256(key || counter) (a cryptographic XOF): uniform
    modulo 2^k, as 2^k divides the 2^(8 bytes) values of each drawn word."""
    dt = np.dtype(mask_dtype(k))
    raw = hashlib.shake_256(key + int(counter).to_bytes(8, "little")).digest(size * dt.itemsize)
    return (np.frombuffer(raw, dtype=dt).astype(np.int64)) & ((1 << k) - 1)


def mask_keypair():
    """A fresh X25519 key pair for one job (private key from OS entropy, never from a seed) and its 32-byte
    raw public key."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    sk = X25519PrivateKey.generate()
    return sk, sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def mask_key(private_key, me: int, my_public: bytes, other: int, their_public: bytes) -> bytes:
    """The 32-byte mask key of clients ``me`` and ``other``: HKDF-SHA256 over their X25519 shared secret, with
    an info string binding both party indices and both public keys (lower index first), so both ends derive
    the same key and it is bound to this pair."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(bytes(their_public)))
    except ValueError:
        raise ProtocolError(f"client {me}: client {other}'s X25519 public key is invalid (a low-order point); "
                            f"refused before any masked value was sent") from None
    (lo, pk_lo), (hi, pk_hi) = sorted([(int(me), bytes(my_public)), (int(other), bytes(their_public))])
    info = MASK_KEY_INFO + f" clients {lo},{hi} ".encode() + pk_lo + pk_hi
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


class MaskedSum:
    """One party's side of masked sums of non-negative integer vectors in [0, bound] (sum of all clients)."""

    def __init__(self, ctx, bound: int):
        if len(ctx.clients) < 2:
            raise ProtocolError(f"party {ctx.pid}: a masked sum needs at least two clients, got "
                                f"{len(ctx.clients)}: one client's masked value is its data in the clear; refused")
        self.ctx, self.k, self.counter = ctx, mask_bits(bound), 0
        self.keys: dict[int, bytes] = {}

    async def setup(self) -> None:
        """Pairwise key agreement among the clients only: each sends its 32-byte X25519 public key to the other
        clients.  The server sends and receives nothing, but takes part in the exchange (every party makes the
        same sequence of exchanges)."""
        ctx = self.ctx
        if ctx.is_server:
            await ctx.send_recv({}, [], None, "mask public keys")
            return
        others = [j for j in ctx.clients if j != ctx.pid]
        sk, pk = mask_keypair()
        got = await ctx.send_recv({j: pk for j in others}, others, wire.digest(32), "mask public keys")
        self.keys = {j: mask_key(sk, ctx.pid, pk, j, pk_j) for j, pk_j in zip(others, got, strict=False)}

    async def sum(self, values, size: int):
        """Clients pass their vector of ``size`` integers, the server None; the server gets the exact sum (int64),
        the clients None."""
        self.counter += 1
        ctx, mod, dtype = self.ctx, 1 << self.k, mask_dtype(self.k)
        if ctx.is_server:
            got = await ctx.send_recv({}, ctx.clients, wire.array(dtype, (size,), 0, mod - 1, what="masked values"),
                                      "masked sum")
            tot = np.zeros(size, dtype=np.int64)
            for g in got:
                tot += g.astype(np.int64)
            return tot % mod
        v = np.asarray(values, np.int64).reshape(-1)
        if v.size != size:
            raise UsageError(f"client {ctx.pid} holds {v.size} values, the sum needs {size}")
        if v.size and (v.min() < 0 or v.max() >= mod):
            raise UsageError(f"client {ctx.pid}: masked-sum values must lie in [0, {mod - 1}]")
        y = v.copy()
        for j, key in self.keys.items():
            u = prg(key, self.counter, size, self.k)
            y += u if j > ctx.pid else -u
        ctx.output_shares_next()  # with every other client's masked value, the server has the sum
        await ctx.send_recv({0: (y % mod).astype(dtype)}, [], None, "masked sum")
        return None


__all__ = ["MaskedSum", "mask_bits", "mask_key", "mask_keypair", "prg"]
