"""Verified addends: each client's addend (the array it adds to the outputs) is drawn by a public law from a key
no party can grind, and a designated verifier among the other clients checks, on shares, that the client added
exactly that draw.  A client that adds anything else (nothing at all, a smaller draw) is named by every party and
nothing is released.

**Protocol** (:meth:`AddendCheck.run`, before the input phase; each client c has a verifier v(c), the next client in
client order, cyclically, :func:`verifier`):

1. every client draws a fresh 32-byte seed s_c; every party draws two 32-byte coin seeds; every party sends every
   party hash commitments to its coin seeds and, a client, to s_c (:func:`commit_seed`);
2. every party reveals its first coin seed to all (checked against its commitment); the joint coin r is the hash of
   all of them, unbiased if any one party is honest (each committed before seeing the others'); with it, each client
   sends s_c to v(c) alone (never to the server); the key of c's addend is k_c = H(r, c, s_c) (:func:`addend_key`)
   and its addend is ``law(k_c)``: the law's exact sampler on the AES-CTR stream keyed by k_c;
3. each client Shamir-shares (degree t) its addend Z_c with every party and, as verifier, the addend Z'_c' it
   recomputes for the client c' it verifies (zeros if c' revealed no seed matching its commitment), with a flag
   saying whether that reveal was good;
4. every party reveals its second coin seed: the weights rho_c (one per output, per client) of the check;
5. every party but c sends every party its share of d_c = sum_k rho_ck (Z_ck - Z'_ck) (:func:`difference`), a
   linear combination of degree-t sharings, so an opening reveals its value alone; every party reconstructs d_c
   from the parties other than c (checking that they are consistent where there are t + 2 or more) and names c if
   d_c != 0 or v(c) flagged its reveal.

The outputs then carry sum_c Z_c (the clients' own sharings, checked): :attr:`AddendCheck.total`, which the
evaluation adds in place of the clients' addend summands (it ignores what those carry, so no client can cancel its
addend there).

**Soundness** (one deviating client, the other parties following the protocol): its seed was fixed before r, so
its key is a hash of a fresh r it could not steer (random oracle); if the addend it shared differs from law(k_c) in
any entry, d_c is a non-zero linear form in rho_c, drawn after the sharings: it opens to 0 with probability 1/p.
Aborting after seeing r only stops the job.  **What each party learns:** the server: shares (uniform) and d_c = 0;
v(c): s_c, hence Z_c: the price of the check, which the caller accounts for (a coalition of the server and one
client knows two addends, its own and the one it verifies).  **Not covered:** a verifier that deviates (it can make
the job abort naming the client it verifies; nothing is released) or colludes with the client it verifies.
"""
from __future__ import annotations

import hashlib

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.net import wire
from sqm.mpc.net.abort import ProtocolError, party_label
from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import from_signed
from sqm.mpc.shares.randomness import field_stream, fresh_bytes, secure_generator

SEED_BYTES = 32


def verifier(client: int, clients) -> int:
    """The client that checks ``client``'s addend: the next one in client order, cyclically."""
    clients = list(clients)
    return clients[(clients.index(client) + 1) % len(clients)]


def commit_seed(seed: bytes) -> bytes:
    """A client's commitment to its addend seed (hiding: the seed is 32 fresh bytes)."""
    return hashlib.sha256(b"sqm addend seed" + seed).digest()


def addend_key(coin: bytes, client: int, seed: bytes) -> bytes:
    """The key of ``client``'s addend: a hash of the joint coin, the client and its committed seed."""
    return hashlib.sha256(b"sqm addend key" + coin + int(client).to_bytes(4, "little") + seed).digest()


def draw(law, key: bytes) -> np.ndarray:
    """``law``'s addend for ``key``: its sampler on the AES-CTR stream keyed by the key."""
    z = np.asarray(law(secure_generator(int.from_bytes(key, "little"))), dtype=np.int64)
    if z.shape != (int(law.size),):
        raise UsageError(f"an addend law of size {law.size} drew an array of shape {z.shape}")
    return z


def weights(coin: bytes, client: int, size: int, p: int) -> np.ndarray:
    """The check's public weights rho for ``client``'s addend, from the second joint coin."""
    h = hashlib.sha256(b"sqm addend weights" + coin + int(client).to_bytes(4, "little")).digest()
    return field_stream(h, (size,), p)


def difference(own, recomputed, rho, p: int) -> int:
    """Shares (or values) of sum_k rho_k (own_k - recomputed_k): 0 for an honest client."""
    d = modarith.sub_mod(np.asarray(own, dtype=np.int64), np.asarray(recomputed, dtype=np.int64), p)
    return int(modarith.sum_mod(modarith.mul_mod(np.asarray(rho, dtype=np.int64), d, p), 0, p))


class AddendCheck:
    """The parties' check of every client's addend (:meth:`run`), for ``law``: a public callable drawing one addend
    (an int64 array of ``law.size`` entries) from a generator.  After it, :attr:`total` is this party's share of
    the clients' addends summed."""

    def __init__(self, ctx, p: int, law):
        self.ctx, self.p, self.law = ctx, p, law
        self.size = int(law.size)
        if len(ctx.clients) < 2:
            raise ProtocolError(f"party {ctx.pid}: checking the clients' addends needs at least 2 clients (each "
                                f"client's verifier is another client); refused before any share was sent")
        self.total: np.ndarray | None = None

    # the client's steps, one method each (a test's deviating client replaces one)
    def own_addend(self, key: bytes) -> np.ndarray:
        """This client's addend: the law's draw for its key."""
        return draw(self.law, key)

    def seed_for_verifier(self, seed: bytes) -> bytes:
        """What this client reveals to its verifier: its seed."""
        return seed

    async def _exchange(self, mine: dict, expect: dict, step: str) -> dict:
        ctx = self.ctx
        got = await ctx.send_recv(mine, list(range(ctx.M)), expect, step)
        return dict(zip(range(ctx.M), got, strict=True))

    async def run(self) -> np.ndarray | None:
        """Run the check; return this client's addend (None at the server).  Raises ProtocolError naming every
        client whose addend is not its key's draw, or whose seed its verifier did not receive as committed."""
        ctx, p, n = self.ctx, self.p, self.size
        me_client = not ctx.is_server
        coins = (fresh_bytes(SEED_BYTES), fresh_bytes(SEED_BYTES))
        seed = fresh_bytes(SEED_BYTES) if me_client else b""
        commit = (hashlib.sha256(coins[0]).digest() + hashlib.sha256(coins[1]).digest()
                  + (commit_seed(seed) if me_client else b""))
        # 1. commitments
        expect = {j: wire.digest(64 if j == 0 else 96) for j in range(ctx.M)}
        commits = await self._exchange({j: commit for j in range(ctx.M)}, expect, "addend check: commitments")
        # 2. the first coins to all; each client's seed to its verifier alone
        mine = {}
        for j in range(ctx.M):
            reveal = self.seed_for_verifier(seed) if me_client and j == verifier(ctx.pid, ctx.clients) else b""
            mine[j] = [coins[0], reveal]
        seed_wire = wire.value(bytes, "an addend seed", lambda b: len(b) <= 2 * SEED_BYTES)
        got = await self._exchange(mine, {j: wire.list_of([wire.digest(SEED_BYTES), seed_wire], "addend coin")
                                          for j in range(ctx.M)}, "addend check: coins")
        coin = self._joint({j: g[0] for j, g in got.items()}, commits, 0)
        ctx.phase("addend check: coins")
        own = None
        out_vals: list = []
        flag = 0
        if me_client:
            own = np.asarray(self.own_addend(addend_key(coin, ctx.pid, seed)), dtype=np.int64)
            mine_c = [c for c in ctx.clients if verifier(c, ctx.clients) == ctx.pid][0]  # the client I verify
            s = got[mine_c][1]
            if len(s) == SEED_BYTES and commit_seed(s) == commits[mine_c][64:96]:
                recomputed = draw(self.law, addend_key(coin, mine_c, s))
            else:
                recomputed, flag = np.zeros(n, dtype=np.int64), 1
            out_vals = [from_signed(own, p), from_signed(recomputed, p), np.array([flag], dtype=np.int64)]
        # 3. the sharings: each client's own addend and the one it recomputed, with its verdict on the reveal
        out: dict[int, object] = {j: None for j in range(ctx.M)}
        if me_client:
            sh = [shamir.share(v, ctx.M, ctx.t, p, ctx.rng) for v in out_vals[:2]]
            out = {j: [sh[0][j], sh[1][j], out_vals[2]] for j in range(ctx.M)}
        expect = {0: wire.nothing}
        for c in ctx.clients:
            expect[c] = wire.list_of([wire.shares((n,), p), wire.shares((n,), p),
                                      wire.array(np.int64, (1,), 0, 1, "a verdict")], "addend shares")
        shares = await self._exchange(out, expect, "addend check: shares")
        ctx.phase("addend check: shares")
        # 4. the second coins: the check's weights
        coin2 = await self._reveal_second(coins[1], commits)
        # 5. open d_c among the parties other than c
        d = []
        for c in ctx.clients:
            rho = weights(coin2, c, n, p)
            v = verifier(c, ctx.clients)
            d.append(0 if c == ctx.pid else difference(shares[c][0], shares[v][1], rho, p))
        msg = np.array(d, dtype=np.int64)
        opened = await self._exchange({j: msg for j in range(ctx.M)},
                                      {j: wire.shares((len(ctx.clients),), p) for j in range(ctx.M)},
                                      "addend check: open")
        ctx.phase("addend check: open")
        bad = []
        for k, c in enumerate(ctx.clients):
            others = [j for j in range(ctx.M) if j != c]
            vals = np.array([[int(opened[j][k])] for j in others], dtype=np.int64)
            xs = [j + 1 for j in others]
            refused = int(shares[verifier(c, ctx.clients)][2][0]) != 0
            if refused or (len(xs) >= ctx.t + 2 and not shamir.consistent(vals, xs, ctx.t, p)) \
                    or int(shamir.reconstruct(vals, xs, p)[0]) != 0:
                bad.append(c)
        if bad:
            who = ", ".join(f"{party_label(c)} (checked by {party_label(verifier(c, ctx.clients))})" for c in bad)
            raise ProtocolError(f"party {ctx.pid}: the addend check of {who} failed (its addend is not the one "
                                f"drawn from its committed seed, or it did not reveal that seed to its verifier): a "
                                f"deviating client; job aborted, nothing released")
        total = np.zeros(n, dtype=np.int64)
        for c in ctx.clients:
            total = modarith.add_mod(total, shares[c][0], p)
        self.total = total
        return own

    def _joint(self, revealed: dict, commits: dict, which: int) -> bytes:
        for j, s in revealed.items():
            if hashlib.sha256(s).digest() != commits[j][32 * which:32 * (which + 1)]:
                raise ProtocolError(f"party {self.ctx.pid}: {party_label(j)} revealed a coin seed that is not the "
                                    f"one it committed to; job aborted, nothing released")
        return hashlib.sha256(b"".join(revealed[j] for j in range(self.ctx.M))).digest()

    async def _reveal_second(self, coin: bytes, commits: dict) -> bytes:
        ctx = self.ctx
        got = await self._exchange({j: coin for j in range(ctx.M)},
                                   {j: wire.digest(SEED_BYTES) for j in range(ctx.M)}, "addend check: weights")
        return self._joint(got, commits, 1)
