"""Verifiable inputs: each client proves to the other parties, without revealing its values, that every integer it
shared lies in its declared range [lo_j, hi_j] and that each record's squared norm over each declared column group
is within the group's limit.  A client whose proof fails is named and nothing is opened.

**What the client shares (its witness, :func:`witness`), per chunk, besides its block x:** the bits of
x_ij - lo_j in the weights of :func:`range_weights` (K_j = bitlength(hi_j - lo_j) bits; the last weight makes every
sum of bits lie in [0, hi_j - lo_j] exactly), and per record and group g its squared norm s_ig and the bits of
L_g - s_ig in [0, L_g].  Then, after joint randomness no single party controls (:func:`joint_seed`: each party
commits to a seed, then reveals it), the parties check on shares:

- **linear relations**, by one random combination opened (alpha, beta from the coins):
  sum alpha_ij (x_ij - lo_j - sum_k w_jk b_ijk) + sum beta_ig (L_g - s_ig - sum_k w_gk c_igk) = 0;
- **bits and norms**, one quadratic relation with rho, sigma from the coins: sum rho b (b - 1) over every bit plus
  sum sigma_ig (sum_{j in g} x_ij^2 - s_ig) = 0, that is <u, v> = sum sigma s with u = (rho b, sigma x), v = (b - 1, x),
  proved by the client with a fully linear proof (:mod:`sqm.mpc.protocols.flp`) shared after the coins and
  checked at a point drawn after the proof.

Every opened value is a linear combination of degree-t sharings (an opening reveals its value alone), and each client's
values are opened by the parties other than that client, so the client cannot bend its own verdict.

**Soundness** (a deviating client, the other parties following the protocol): a false statement passes a chunk's
check with probability at most 1/p (linear) + 1/p (the combination of the quadratic relations) + 2G/(p - 2G - 1)
(:func:`sqm.mpc.protocols.flp.error_bound`).  **No wrap-around:** bits in {0, 1} and x - lo = sum w b in F_p give
an integer in [lo, hi] when hi - lo < p; then sum_{j in g} x_ij^2 < p and L_g < p make L_g - s = sum w c an integer
inequality (:func:`needed_bound`, what the field must exceed).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from sqm.mpc.net import wire
from sqm.mpc.net.abort import InputRefused, ProtocolError, party_label
from sqm.mpc.protocols import flp
from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import from_signed
from sqm.mpc.shares.randomness import fresh_bytes, secure_generator


@dataclass(frozen=True)
class Claim:
    """What one client proves about each of its records: column j (its own, local index) within [lo[j], hi[j]];
    for each (columns, limit) of ``groups``, the squared norm over those columns at most limit."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]
    groups: tuple[tuple[tuple[int, ...], int], ...] = ()

    @property
    def widths(self) -> tuple[list[int], list[int]]:
        """Bits per column and per group."""
        return ([len(range_weights(h - lo)) for lo, h in zip(self.lo, self.hi, strict=True)],
                [len(range_weights(lim)) for _, lim in self.groups])

    @property
    def witness_width(self) -> int:
        col, grp = self.widths
        return sum(col) + len(self.groups) + sum(grp)

    def needed_bound(self) -> int:
        """The field must exceed this (:func:`needed_bound`)."""
        top = [h - lo for lo, h in zip(self.lo, self.hi, strict=True)]
        for cols, lim in self.groups:
            top += [lim, sum(max(self.lo[j] ** 2, self.hi[j] ** 2) for j in cols)]
        return max(top, default=0)


def needed_bound(claims) -> int:
    """What p must exceed for the checks to be integer statements: every range width, group limit and largest
    squared group norm within the ranges."""
    return max((c.needed_bound() for c in claims), default=0)


def range_weights(width: int) -> np.ndarray:
    """Weights w_0..w_{K-1} (K = bitlength(width)): 1, 2, .., 2^(K-2) and width - 2^(K-1) + 1, so that the sums of
    subsets are exactly the integers 0..width."""
    width = int(width)
    if width < 0:
        raise ValueError(f"a range has width >= 0, got {width}")
    k = width.bit_length()
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    return np.array([1 << i for i in range(k - 1)] + [width - (1 << (k - 1)) + 1], dtype=np.int64)


def encode_range(v, width: int) -> np.ndarray:
    """Bits (n x K) of integers ``v`` in [0, width] in :func:`range_weights`: sum_k w_k bits[:, k] = v."""
    v = np.asarray(v, dtype=np.int64).reshape(-1)
    w = range_weights(width)
    k = w.size
    out = np.zeros((v.size, k), dtype=np.int64)
    if k == 0:
        return out
    top = v >= (1 << (k - 1))
    out[:, k - 1] = top
    rest = v - top * w[-1]
    for i in range(k - 1):
        out[:, i] = (rest >> i) & 1
    return out


def witness(block, claim: Claim) -> np.ndarray:
    """An honest client's witness for its integer ``block`` (records x its columns): the bits of each column's
    value above lo, each group's squared norm, the bits of each group's slack; refused (naming no value) if the
    block breaks its claim."""
    x = np.asarray(block, dtype=np.int64)
    lo, hi = np.array(claim.lo, dtype=np.int64), np.array(claim.hi, dtype=np.int64)
    if x.size and (np.any(x < lo) or np.any(x > hi)):
        raise InputRefused("its integer data is outside its declared ranges")
    parts = [encode_range(x[:, j] - lo[j], int(hi[j] - lo[j])) for j in range(x.shape[1])]
    norms = [_norm_sq(x, cols) for cols, _ in claim.groups]
    for (_, lim), s in zip(claim.groups, norms, strict=True):
        if s.size and int(s.max()) > lim:
            raise InputRefused("a record's squared norm is above its declared limit")
    parts += [s[:, None] for s in norms]
    parts += [encode_range(lim - s, lim) for (_, lim), s in zip(claim.groups, norms, strict=True)]
    return np.hstack(parts) if parts else np.zeros((x.shape[0], 0), dtype=np.int64)


def _norm_sq(x: np.ndarray, cols) -> np.ndarray:
    sub = x[:, list(cols)]
    return np.einsum("ij,ij->i", sub, sub)


# ----- the relations, on shares (every step affine with public coefficients) --------------------------------------

def _split(W, claim: Claim):
    col, grp = claim.widths
    kx, ng = sum(col), len(claim.groups)
    return W[:, :kx], W[:, kx:kx + ng], W[:, kx + ng:], col, grp


def _weighted(bits, widths, ranges, p: int) -> np.ndarray:
    """Per block of bits (widths[q] columns each), sum_k w_k bits[:, k] (rows x len(widths))."""
    out = np.zeros((bits.shape[0], len(widths)), dtype=np.int64)
    off = 0
    for q, (k, width) in enumerate(zip(widths, ranges, strict=True)):
        for i, w in enumerate(range_weights(width).tolist()):
            out[:, q] = modarith.add_mod(out[:, q], modarith.scalar_mul_mod(bits[:, off + i], w, p), p)
        off += k
    return out


def coins(seed: bytes, client: int, rows: int, claim: Claim, p: int) -> dict[str, np.ndarray]:
    """The public random coefficients of ``client``'s checks, from a joint seed."""
    rng = secure_generator(int.from_bytes(hashlib.sha256(seed + int(client).to_bytes(4, "little")).digest(),
                                          "little"))
    col, grp = claim.widths
    ng = len(claim.groups)
    return {"alpha": rng.integers(0, p, size=(rows, len(col)), dtype=np.int64),
            "beta": rng.integers(0, p, size=(rows, ng), dtype=np.int64),
            "rho": rng.integers(0, p, size=(rows, sum(col) + sum(grp)), dtype=np.int64),
            "sigma": rng.integers(0, p, size=(rows, ng), dtype=np.int64)}


def linear_check(X, W, claim: Claim, co, p: int) -> int:
    """Shares (or values) of the random combination of the linear relations (0 for an honest client)."""
    bits_x, s, bits_s, col, grp = _split(W, claim)
    lo = from_signed(np.array(claim.lo, dtype=object), p)
    res = modarith.sub_mod(modarith.sub_mod(X, lo[None, :], p), _weighted(bits_x, col, _widths(claim), p), p)
    total = modarith.sum_mod(modarith.mul_mod(co["alpha"], res, p).reshape(-1), 0, p)
    if claim.groups:
        lim = np.array([lim for _, lim in claim.groups], dtype=np.int64) % p
        slack = modarith.sub_mod(modarith.sub_mod(np.broadcast_to(lim, s.shape), s, p),
                                 _weighted(bits_s, grp, [lim for _, lim in claim.groups], p), p)
        total = modarith.add_mod(total, modarith.sum_mod(modarith.mul_mod(co["beta"], slack, p).reshape(-1), 0, p), p)
    return int(total)


def _widths(claim: Claim) -> list[int]:
    return [h - lo for lo, h in zip(claim.lo, claim.hi, strict=True)]


def quadratic_vectors(X, W, claim: Claim, co, p: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(u, v, z) with <u, v> = z exactly when every bit is 0 or 1 and every s is its group's squared norm (up to the
    random combination): u = (rho b, sigma x), v = (b - 1, x), z = sum sigma s.  Shares in, shares out."""
    bits_x, s, bits_s, _, _ = _split(W, claim)
    bits = np.hstack([bits_x, bits_s])
    u = [modarith.mul_mod(co["rho"], bits, p).reshape(-1)]
    v = [modarith.sub_mod(bits, np.ones(1, dtype=np.int64), p).reshape(-1)]
    for g, (cols, _) in enumerate(claim.groups):
        sub = X[:, list(cols)]
        u.append(modarith.mul_mod(np.broadcast_to(co["sigma"][:, g:g + 1], sub.shape), sub, p).reshape(-1))
        v.append(np.ascontiguousarray(sub).reshape(-1))
    z = modarith.sum_mod(modarith.mul_mod(co["sigma"], s, p).reshape(-1), 0, p) if claim.groups else 0
    return np.concatenate(u), np.concatenate(v), int(z)


# ----- the protocol ----------------------------------------------------------------------------------------------

def seeded(client: int, M: int, t: int) -> list[int]:
    """The t parties (the lowest besides ``client``) whose shares of ``client``'s witness and proof are drawn from a
    seed the client sends them: a degree-t polynomial is free at t points besides the secret."""
    return [j for j in range(M) if j != client][:t]


def seeded_shares(secret, client: int, M: int, t: int, p: int) -> dict[int, object]:
    """``client``'s Shamir sharing (degree t) of ``secret`` for every party but itself: a 32-byte seed to each party
    of :func:`seeded` (its share is the AES-CTR stream of the seed, :func:`expand`), the shares the polynomial
    through the secret and those points gives to the others."""
    secret = np.asarray(secret, dtype=np.int64)
    free = seeded(client, M, t)
    seeds = {j: fresh_bytes(32) for j in free}
    vals = {j: expand(seeds[j], secret.shape, p) for j in free}
    points = [0] + [j + 1 for j in free]
    out: dict[int, object] = dict(seeds)
    for j in range(M):
        if j == client or j in free:
            continue
        lag = shamir.lagrange_at(points, j + 1, p)
        acc = modarith.scalar_mul_mod(secret, lag[0], p)
        for c, k in zip(lag[1:], free, strict=True):
            acc = modarith.add_mod(acc, modarith.scalar_mul_mod(vals[k], c, p), p)
        out[j] = acc
    return out


def expand(seed: bytes, shape, p: int) -> np.ndarray:
    """A seeded party's share: uniform field elements from the seed's AES-CTR stream."""
    return secure_generator(int.from_bytes(seed, "little")).integers(0, p, size=shape, dtype=np.int64)


def _received(got, client: int, ctx, shape, p: int) -> np.ndarray:
    """This party's share of ``client``'s array: expanded from its seed, or as sent."""
    return expand(got, shape, p) if ctx.pid in seeded(client, ctx.M, ctx.t) else got


def _expected(client: int, ctx, shape, p: int):
    return wire.digest(32) if ctx.pid in seeded(client, ctx.M, ctx.t) else wire.shares(shape, p)


class InputProofs:
    """The parties' check of every client's claims (:class:`Claim`, one per client, client order), chunk by chunk
    (:meth:`check_chunk`).  Every party holds a share of every client's block (every party is a worker)."""

    def __init__(self, ctx, p: int, claims):
        self.ctx, self.p = ctx, p
        self.claims = list(claims)
        if len(self.claims) != len(ctx.clients):
            raise ProtocolError(f"party {ctx.pid}: {len(self.claims)} input claims for {len(ctx.clients)} clients")
        if needed_bound(self.claims) >= p:
            raise ProtocolError(f"party {ctx.pid}: the field (p = {p}) is too small to check the clients' input "
                                f"claims (needs more than {needed_bound(self.claims)})")

    def _claim(self, c: int) -> Claim:
        return self.claims[self.ctx.clients.index(c)]

    async def _exchange(self, mine: dict, expect: dict, step: str) -> dict:
        """Every party sends ``mine[j]`` to j and hears from every party (itself included)."""
        ctx = self.ctx
        got = await ctx.send_recv(mine, list(range(ctx.M)), expect, step)
        return dict(zip(range(ctx.M), got, strict=True))

    async def check_chunk(self, S, block, widths) -> None:
        """Check the chunk whose shares this party holds (``S``: every client's columns side by side, ``widths`` per
        client) and, at a client, its own signed ``block``.  Raises ProtocolError naming every failing client."""
        ctx, p = self.ctx, self.p
        rows = S.shape[0]
        starts = np.cumsum([0] + list(widths))
        X = {c: S[:, starts[k]:starts[k + 1]] for k, c in enumerate(ctx.clients)}
        seeds = (fresh_bytes(32), fresh_bytes(32))
        commit = hashlib.sha256(seeds[0]).digest() + hashlib.sha256(seeds[1]).digest()
        # 1. the witness (clients) and commitments to the coins (everyone)
        mine_w = None
        out: dict[int, object] = {}
        if not ctx.is_server:
            mine_w = witness(block, self._claim(ctx.pid))
            sh = seeded_shares(mine_w, ctx.pid, ctx.M, ctx.t, p)
            out = {j: [commit] + ([sh[j]] if j in sh else []) for j in range(ctx.M)}
        else:
            out = {j: [commit] for j in range(ctx.M)}
        expect = {0: wire.list_of([wire.digest(64)], "coin commitment")}
        for c in ctx.clients:
            shape = (rows, self._claim(c).witness_width)
            expect[c] = wire.list_of([wire.digest(64)] + ([_expected(c, ctx, shape, p)] if c != ctx.pid else []),
                                     "input witness")
        got = await self._exchange(out, expect, "input proof: witness")
        commits = {j: g[0] for j, g in got.items()}
        W = {c: _received(got[c][1], c, ctx, (rows, self._claim(c).witness_width), p)
             for c in ctx.clients if c != ctx.pid}
        ctx.phase("input proof: witness")
        # 2. reveal the first seeds: the coins of the combinations
        seed1 = await self._reveal(seeds[0], commits, 0, "input proof: coins")
        co = {c: coins(seed1, c, rows, self._claim(c), p) for c in ctx.clients}
        # 3. each client's proof of its quadratic relation
        proofs_out: dict[int, object] = {j: None for j in range(ctx.M)}
        if not ctx.is_server:
            claim = self._claim(ctx.pid)
            x = from_signed(np.asarray(block, dtype=np.int64), p)
            u, v, _ = quadratic_vectors(x, mine_w, claim, co[ctx.pid], p)
            proof = flp.prove(u, v, p, ctx.rng)
            proofs_out.update(seeded_shares(proof, ctx.pid, ctx.M, ctx.t, p))
        expect = {0: wire.nothing}
        lengths = {c: self._quad_length(rows, self._claim(c)) for c in ctx.clients}
        for c in ctx.clients:
            expect[c] = wire.nothing if c == ctx.pid else _expected(c, ctx, (flp.proof_length(lengths[c]),), p)
        got = await self._exchange(proofs_out, expect, "input proof: proof")
        got = {c: _received(got[c], c, ctx, (flp.proof_length(lengths[c]),), p) for c in ctx.clients
               if c != ctx.pid}
        ctx.phase("input proof: proof")
        # 4. reveal the second seeds: the query point; 5. open each client's checks among the others
        seed2 = await self._reveal(seeds[1], commits, 1, "input proof: query point")
        mine_q = {}
        for c in ctx.clients:
            if c == ctx.pid:
                continue
            claim = self._claim(c)
            u, v, z = quadratic_vectors(X[c], W[c], claim, co[c], p)
            r = flp.draw_point(secure_generator(int.from_bytes(hashlib.sha256(
                seed2 + int(c).to_bytes(4, "little")).digest(), "little")), u.size, p)
            q = flp.query(u, v, got[c], r, p)
            q[0] = (int(q[0]) - z) % p  # the claim: sum P(k) - z, zero for an honest client
            mine_q[c] = np.concatenate([np.array([linear_check(X[c], W[c], claim, co[c], p)], dtype=np.int64), q])
        sizes = {c: 1 + 2 + 2 * flp.layout(lengths[c])[1] for c in ctx.clients}
        msg = [mine_q.get(c, np.zeros(0, dtype=np.int64)) for c in ctx.clients]
        expect = {j: wire.list_of([wire.shares((0 if c == j else sizes[c],), p) for c in ctx.clients],
                                  "input proof checks") for j in range(ctx.M)}
        got = await self._exchange({j: msg for j in range(ctx.M)}, expect, "input proof: check")
        ctx.phase("input proof: check")
        bad = []
        for k, c in enumerate(ctx.clients):
            others = [j for j in range(ctx.M) if j != c]
            vals = [got[j][k] for j in others]
            xs = [j + 1 for j in others]
            if len(xs) >= ctx.t + 2 and not shamir.consistent(vals, xs, ctx.t, p):
                bad.append(c)
                continue
            opened = shamir.reconstruct(np.stack(vals), xs, p)
            if int(opened[0]) != 0 or int(opened[1]) != 0 or not flp.decide(opened[1:], p):
                bad.append(c)
        self._refuse(bad)

    def _refuse(self, bad) -> None:
        if bad:
            who = ", ".join(party_label(c) for c in bad)
            raise ProtocolError(f"party {self.ctx.pid}: the input proof of {who} failed (a value outside its declared "
                                f"range or a record's squared norm above its limit): a deviating client; job "
                                f"aborted, nothing released")

    def check_clear(self, blocks) -> None:
        """The ideal functionality (a simulation's receiver, holding every client's block in the clear): names
        every client whose block breaks its claim."""
        bad = []
        for c, block, claim in zip(self.ctx.clients, blocks, self.claims, strict=True):
            try:
                witness(block, claim)
            except InputRefused:
                bad.append(c)
        self._refuse(bad)

    @staticmethod
    def _quad_length(rows: int, claim: Claim) -> int:
        col, grp = claim.widths
        return rows * (sum(col) + sum(grp) + sum(len(cols) for cols, _ in claim.groups))

    async def _reveal(self, seed: bytes, commits: dict, which: int, step: str) -> bytes:
        """Every party reveals its seed; each is checked against its commitment; the joint seed is their hash."""
        ctx = self.ctx
        got = await self._exchange({j: seed for j in range(ctx.M)}, {j: wire.digest(32) for j in range(ctx.M)},
                                   step)
        for j, s in got.items():
            if hashlib.sha256(s).digest() != commits[j][32 * which:32 * (which + 1)]:
                raise ProtocolError(f"party {ctx.pid}: {party_label(j)} revealed a seed that is not the one it "
                                    f"committed to; job aborted, nothing released")
        return hashlib.sha256(b"".join(got[j] for j in range(ctx.M))).digest()
