"""The pipelined exchanges of the clients' input proofs (:class:`InputProofs`): each chunk's witness, seeds, proof
and checks through one exchange per stage, up to seven chunks in flight, every party's view of each.  What a client
proves and how a chunk's statement is checked, with the soundness and the reason the pipelined order keeps it:
:mod:`sqm.mpc.protocols.input_proof`."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from sqm.mpc.net import wire
from sqm.mpc.net.abort import InputRefused, ProtocolError, party_label
from sqm.mpc.protocols import flp
from sqm.mpc.protocols import lookup
from sqm.mpc.protocols.input_proof import (BASE, Claim, _seeded_sharing, blind_shares, coins, expand, grid,
                                           linear_check, needed_bound, seeded, statement, values, weights, witness,
                                           witness_shares)
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import from_signed
from sqm.mpc.shares.randomness import fresh_bytes, secure_generator


def _received(got, client: int, ctx, shape, p: int, seeded_parties: int | None = None) -> np.ndarray:
    """This party's share of ``client``'s array: expanded from its seed (the ``seeded_parties`` lowest others get
    one, t unless given), or as sent."""
    free = seeded(client, ctx.M, ctx.t if seeded_parties is None else seeded_parties)
    return expand(got, shape, p) if ctx.pid in free else got


def _expected(client: int, ctx, shape, p: int):
    return wire.digest(32) if ctx.pid in seeded(client, ctx.M, ctx.t) else wire.packed_bits(shape, p)


def _packed(out: dict, p: int) -> dict:
    """A sharing for sending: the seeds as they are, the shares packed (:func:`sqm.mpc.net.wire.pack_bits`)."""
    return {j: v if isinstance(v, bytes) else wire.pack_bits(v, p) for j, v in out.items()}


@dataclass
class _Chunk:
    """One chunk's proof while it is in flight (:class:`InputProofs`): what this party keeps of it between exchanges.
    ``age``: the exchanges it has been through (its next stage, :attr:`InputProofs.names`)."""

    rows: int
    seeds: tuple[bytes, ...]  # this party's seeds (the alphas', with lookups; the coins'; the query point's)
    x: np.ndarray | None = None  # a client's own integers as field elements, until it has proved them
    own: np.ndarray | None = None  # a client's own witness, until it has proved it
    own_h: np.ndarray | None = None  # and its inverses (a claim with lookups), until it has proved them
    commits: dict | None = None  # every party's commitments to its seeds
    W: dict | None = None  # this party's shares of every other client's witness
    X: dict | None = None  # and of every client's values (:func:`values`)
    M: dict | None = None  # and of every other client's multiplicities (a claim with lookups)
    H: dict | None = None  # and of its inverses
    x_own: np.ndarray | None = None  # a client's share of its own values, until the witness exchange
    consts: dict | None = None  # every client's alphas (with lookups), once the first seeds are revealed
    invs: dict | None = None  # and their tables' inverses (:func:`sqm.mpc.protocols.lookup.table_inverses`)
    co: dict | None = None  # every client's coins, once their seeds are revealed
    proofs: dict | None = None  # this party's shares of every other client's proof
    point_seed: bytes | None = None  # the joint seed of the query points, once the last seeds are revealed
    age: int = 0


STAGES = ("witness", "coins", "proof", "query point", "check")  # a chunk's exchanges, in order (InputProofs)
LOOKUP_STAGES = ("witness", "alphas", "inverses", "coins", "proof", "query point", "check")  # with lookups


class InputProofs:
    """The parties' check of every client's claims (:class:`Claim`, one per client, client order), chunk by chunk,
    pipelined: :meth:`push` shares a chunk and returns this party's shares of its values at once, :meth:`finish`
    returns when every chunk's checks have passed (else raises naming the failing clients).  Every party holds a
    share of every client's block (every party is a worker).

    A chunk goes through five stages, one exchange each (:data:`STAGES`), seven where a claim has lookups
    (:data:`LOOKUP_STAGES`: the alphas, then the inverses, before the coins), and each exchange carries one stage of
    each chunk in flight (the module docstring, **Pipelined**): a job of n chunks takes n + 4 exchanges (n + 6).
    """

    def __init__(self, ctx, p: int, claims):
        self.ctx, self.p = ctx, p
        self.claims = list(claims)
        if len(self.claims) != len(ctx.clients):
            raise ProtocolError(f"party {ctx.pid}: {len(self.claims)} input claims for {len(ctx.clients)} clients")
        if needed_bound(self.claims) >= p:
            raise ProtocolError(f"party {ctx.pid}: the field (p = {p}) is too small to check the clients' input "
                                f"claims (needs more than {needed_bound(self.claims)})")
        self.lookups = any(c.tables for c in self.claims)
        if self.lookups and max(max(c.tables, default=0) for c in self.claims) >= p - 2:
            raise ProtocolError(f"party {ctx.pid}: the field (p = {p}) is too small for the clients' tables")
        self.flight: list[_Chunk] = []  # the chunks whose checks are not decided yet, oldest first
        self.names = LOOKUP_STAGES if self.lookups else STAGES
        handlers = {"witness": (self._send_witness, self._take_witness),
                    "alphas": (self._send_alphas, self._take_alphas),
                    "inverses": (self._send_inverses, self._take_inverses),
                    "coins": (self._send_coins, self._take_coins), "proof": (self._send_proof, self._take_proof),
                    "query point": (self._send_query_point, self._take_query_point),
                    "check": (self._send_check, self._take_check)}
        # per stage: what this party sends (to each party) and expects (from each), what it takes in
        self.stages = [handlers[n] for n in self.names]
        self.seed_of = {n: i for i, n in enumerate(k for k in self.names if k in ("alphas", "coins", "query point"))}

    def _claim(self, c: int) -> Claim:
        return self.claims[self.ctx.clients.index(c)]

    async def push(self, block, rows: int) -> np.ndarray:
        """Share the next chunk of ``rows`` records (``block``: a client's own signed integers; None at the server)
        in one exchange that also carries the later stages of the chunks before it.  Returns this party's shares of
        every client's values side by side (client order): its witness's (x = lo + sum w d, :func:`values`), not
        yet checked.  Raises ProtocolError naming every client whose proof of an earlier chunk failed."""
        seeds = tuple(fresh_bytes(32) for _ in self.seed_of)
        ch = _Chunk(rows, seeds)
        if not self.ctx.is_server:
            block = np.asarray(block, dtype=np.int64)
            ch.own = witness(block, self._claim(self.ctx.pid))
            ch.x = from_signed(block, self.p)
        await self._round(ch)
        assert ch.X is not None  # the witness exchange filled it
        X = ch.X
        return np.hstack([X[c] for c in self.ctx.clients]) if X else np.zeros((rows, 0), dtype=np.int64)

    async def finish(self) -> None:
        """The exchanges left after the last chunk: returns once every chunk's checks have passed; raises
        ProtocolError naming every failing client (other than this party: a client's checks are opened to the
        parties that verify it, not to itself)."""
        while self.flight:
            await self._round(None)

    async def _round(self, new: _Chunk | None) -> None:
        """One exchange: each chunk in flight (``new`` with its witness) sends its next stage; then each takes in
        what it received."""
        ctx = self.ctx
        chunks = ([new] if new is not None else []) + self.flight[::-1]  # newest first: stages in order
        out: dict[int, list] = {j: [] for j in range(ctx.M)}
        expect: dict[int, list] = {j: [] for j in range(ctx.M)}
        for ch in chunks:
            mine, want = self.stages[ch.age][0](ch)
            for j in range(ctx.M):
                out[j].append(mine.get(j))
                expect[j].append(want[j])
            ctx.phase("input proof: " + self.names[ch.age])
        names = ", ".join(self.names[ch.age] for ch in chunks)
        got = await ctx.send_recv(out, list(range(ctx.M)), {j: wire.list_of(v, f"input proof ({names})")
                                                           for j, v in expect.items()}, f"input proof: {names}")
        ctx.phase("input proof: exchange")
        for k, ch in enumerate(chunks):
            self.stages[ch.age][1](ch, {j: got[j][k] for j in range(ctx.M)})
            ctx.phase("input proof: " + self.names[ch.age])
            ch.age += 1
        if new is not None:
            self.flight.append(new)
        self.flight = [ch for ch in self.flight if ch.age < len(self.names)]

    # ----- the stages (self.stages) ------------------------------------------------------------------------------

    def _send_witness(self, ch: _Chunk):
        ctx, p = self.ctx, self.p
        commit = b"".join(hashlib.sha256(s).digest() for s in ch.seeds)
        out: dict[int, list] = {j: [commit] for j in range(ctx.M)}
        if ch.own is not None:
            assert ch.x is not None  # a client's chunk: its integers and their witness
            claim = self._claim(ctx.pid)
            sh, ch.x_own = witness_shares(ch.own, ch.x, claim, ctx.pid, ctx.M, ctx.t, p)
            for j, v in _packed(sh, p).items():
                out[j] = [commit, v]
            if claim.tables:  # the multiplicities, shared with the witness (before any alpha)
                for j, v in self._to_others(self._counts(ch)).items():
                    out[j].append(v)
        want = {0: wire.list_of([wire.digest(32 * len(ch.seeds))], "coin commitment")}
        for c in ctx.clients:
            claim = self._claim(c)
            shapes = [(ch.rows, claim.witness_width)] + ([(lookup.table_size(claim),)] if claim.tables else [])
            want[c] = wire.list_of([wire.digest(32 * len(ch.seeds))] + (
                [_expected(c, ctx, s, self.p) for s in shapes] if c != ctx.pid else []), "input witness")
        return out, want

    def _take_witness(self, ch: _Chunk, got: dict) -> None:
        ctx, p = self.ctx, self.p
        ch.commits = {j: g[0] for j, g in got.items()}
        others = [c for c in ctx.clients if c != ctx.pid]
        W = {c: _received(got[c][1], c, ctx, (ch.rows, self._claim(c).witness_width), p) for c in others}
        ch.M = {c: _received(got[c][2], c, ctx, (lookup.table_size(self._claim(c)),), p) for c in others
                if self._claim(c).tables}
        ch.X = {c: ch.x_own if c == ctx.pid else values(W[c], self._claim(c), p) for c in ctx.clients}
        ch.x_own = None
        ch.W = W  # a client needs no share of its own witness: its values are all it computes on

    def _counts(self, ch: _Chunk) -> np.ndarray:
        """This client's multiplicities for its chunk (:func:`sqm.mpc.protocols.lookup.table_counts`)."""
        return lookup.table_counts(ch.own, self._claim(self.ctx.pid))

    def _inverses(self, ch: _Chunk) -> np.ndarray:
        """This client's inverses for its chunk, once the alphas are known
        (:func:`sqm.mpc.protocols.lookup.inverse_witness`)."""
        assert ch.invs is not None
        return lookup.inverse_witness(ch.own, self._claim(self.ctx.pid), ch.invs[self.ctx.pid])

    def _send_alphas(self, ch: _Chunk):
        return self._send_seed(ch, self.seed_of["alphas"])

    def _take_alphas(self, ch: _Chunk, got: dict) -> None:
        seed = self._opened_seed(ch, got, self.seed_of["alphas"])
        with_tables = [c for c in self.ctx.clients if self._claim(c).tables]
        ch.consts = {c: lookup.alphas(seed, c, max(self._claim(c).tables), self.p) for c in with_tables}
        ch.invs = {c: lookup.table_inverses(ch.consts[c], self._claim(c), self.p) for c in with_tables}

    def _send_inverses(self, ch: _Chunk):
        """A client with lookups shares its inverses 1 / (alpha - y), now that the alphas are known."""
        ctx, p = self.ctx, self.p
        out: dict[int, object] = {}
        if ch.own is not None and self._claim(ctx.pid).tables:
            assert ch.invs is not None  # the alphas came before
            ch.own_h = self._inverses(ch)
            out = {j: [v] for j, v in self._to_others(ch.own_h).items()}
        want: dict[int, object] = {0: wire.nothing}
        for c in ctx.clients:
            want[c] = wire.nothing if c == ctx.pid or not self._claim(c).tables else wire.list_of(
                [_expected(c, ctx, self._inverses_shape(c, ch.rows), p)], "input inverses")
        return out, want

    def _take_inverses(self, ch: _Chunk, got: dict) -> None:
        ctx = self.ctx
        ch.H = {c: _received(got[c][0], c, ctx, self._inverses_shape(c, ch.rows), self.p)
                for c in ctx.clients if c != ctx.pid and self._claim(c).tables}

    def _inverses_shape(self, c: int, rows: int) -> tuple[int, int]:
        """Client ``c``'s inverses for a chunk of ``rows`` records: one per looked-up entry and alpha."""
        return rows, lookup.ALPHAS * len(self._claim(c).looked)

    def _to_others(self, secret) -> dict:
        """This client's sharing of ``secret`` for every other party, ready to send (seeds to the t lowest,
        packed shares to the rest: :func:`_seeded_sharing`, :func:`_packed`)."""
        ctx = self.ctx
        return _packed(_seeded_sharing(secret, ctx.pid, ctx.M, ctx.t, self.p, own=False)[0], self.p)

    def _send_coins(self, ch: _Chunk):
        return self._send_seed(ch, self.seed_of["coins"])

    def _take_coins(self, ch: _Chunk, got: dict) -> None:
        seed = self._opened_seed(ch, got, self.seed_of["coins"])
        ch.co = {c: coins(seed, c, ch.rows, self._claim(c), self.p) for c in self.ctx.clients}

    def _cols(self, c: int, rows: int) -> int:
        """The columns of client ``c``'s grid (:func:`grid`) for a chunk of ``rows`` records."""
        return statement(rows, self._claim(c), self.p).bounds[-1]

    def _consts(self, ch: _Chunk, c: int) -> list[int]:
        return ch.consts[c] if ch.consts is not None and c in ch.consts else []

    def _send_proof(self, ch: _Chunk):
        ctx, p = self.ctx, self.p
        out: dict[int, object] = {}
        if ch.own is not None:
            assert ch.co is not None and ch.x is not None  # the coins came before the proof
            cols = self._cols(ctx.pid, ch.rows)
            claim = self._claim(ctx.pid)
            Y, _, beta, _ = grid(ch.x, ch.own, claim, ch.co[ctx.pid], p, H=ch.own_h)
            blinds, bl = blind_shares(ctx.pid, ctx.M, ctx.t, cols, p)
            proof = flp.prove_statement(Y, statement(ch.rows, claim, p), beta, p, blinds, self._consts(ch, ctx.pid))
            sh, bl = self._to_others(proof[cols:]), _packed(bl, p)  # its own share of its proof: not needed
            out = {j: [sh[j], bl[j]] for j in sh}
            ch.x = ch.own = ch.own_h = None  # proved: no longer needed
        want: dict[int, object] = {0: wire.nothing}
        for c in ctx.clients:
            want[c] = wire.nothing if c == ctx.pid else wire.list_of(
                [_expected(c, ctx, (self._tail(c, ch.rows),), p),
                 wire.digest(32) if ctx.pid in seeded(c, ctx.M, ctx.t + 1) else
                 wire.packed_bits((self._cols(c, ch.rows),), p)], "input proof")
        return out, want

    def _tail(self, c: int, rows: int) -> int:
        """The length of client ``c``'s proof after its blinds: each part's P_i(0..d_i G) (:func:`statement`)."""
        return flp.statement_length(statement(rows, self._claim(c), self.p)) - self._cols(c, rows)

    def _take_proof(self, ch: _Chunk, got: dict) -> None:
        ctx, p = self.ctx, self.p
        ch.proofs = {c: np.concatenate([_received(got[c][1], c, ctx, (self._cols(c, ch.rows),), p, ctx.t + 1),
                                        _received(got[c][0], c, ctx, (self._tail(c, ch.rows),), p)])
                     for c in ctx.clients if c != ctx.pid}

    def _send_query_point(self, ch: _Chunk):
        return self._send_seed(ch, self.seed_of["query point"])

    def _take_query_point(self, ch: _Chunk, got: dict) -> None:
        ch.point_seed = self._opened_seed(ch, got, self.seed_of["query point"])

    def _sizes(self, rows: int) -> dict[int, int]:
        """The length of each client's opened checks: the linear relations' combination, then the proof's query
        (the sum, each part's P_i(r), U(r))."""
        return {c: 2 + len(statement(rows, self._claim(c), self.p).polys) + self._cols(c, rows)
                for c in self.ctx.clients}

    def _send_check(self, ch: _Chunk):
        """This party's shares of each other client's checks: they go to the parties that verify that client (not
        to itself): party i hears from j those of the clients other than i and j."""
        ctx, p = self.ctx, self.p
        assert ch.W is not None and ch.X is not None and ch.co is not None and ch.proofs is not None
        assert ch.point_seed is not None
        mine_q = {}
        for c in ctx.clients:
            if c == ctx.pid:
                continue
            claim = self._claim(c)
            H = ch.H.get(c) if ch.H is not None else None
            Y, _, _, z = grid(ch.X[c], ch.W[c], claim, ch.co[c], p, H=H)
            r = flp.draw_point(secure_generator(int.from_bytes(hashlib.sha256(
                ch.point_seed + int(c).to_bytes(4, "little")).digest(), "little")), p, BASE)
            q = flp.query_statement(Y, ch.proofs[c], ch.co[c]["alpha"], r, p, statement(ch.rows, claim, p))
            q[0] = (int(q[0]) - z) % p  # the claim: sum alpha_k P(k) - z, zero for an honest client
            lin = linear_check(ch.W[c], claim, ch.co[c], p)
            if claim.tables:
                assert ch.M is not None and ch.invs is not None and H is not None
                lin = (lin + lookup.check(H, ch.M[c], claim, ch.co[c], ch.invs[c], p)) % p
            mine_q[c] = np.concatenate([np.array([lin], dtype=np.int64), q])
        ch.W = ch.X = ch.proofs = ch.H = ch.M = None  # checked: only the openings are left
        empty = np.zeros(0, dtype=np.int64)
        out = {i: [wire.pack_bits(empty if c == i else mine_q.get(c, empty), p) for c in ctx.clients]
               for i in range(ctx.M)}
        sizes = self._sizes(ch.rows)
        want = {j: wire.list_of([wire.packed_bits((0 if c in (j, ctx.pid) else sizes[c],), p)
                                 for c in ctx.clients], "input proof checks") for j in range(ctx.M)}
        return out, want

    def _take_check(self, ch: _Chunk, got: dict) -> None:
        ctx, p = self.ctx, self.p
        assert ch.co is not None
        bad = []
        for k, c in enumerate(ctx.clients):
            if c == ctx.pid:
                continue
            others = [j for j in range(ctx.M) if j != c]
            vals = [got[j][k] for j in others]
            xs = [j + 1 for j in others]
            if len(xs) >= ctx.t + 2 and not shamir.consistent(vals, xs, ctx.t, p):
                bad.append(c)
                continue
            opened = shamir.reconstruct(np.stack(vals), xs, p)
            _, beta = weights(ch.rows, self._claim(c), ch.co[c], p)
            st = statement(ch.rows, self._claim(c), p)
            if int(opened[0]) != 0 or int(opened[1]) != 0 or \
                    not flp.decide_statement(opened[1:], st, beta, p, self._consts(ch, c)):
                bad.append(c)
        self._refuse(bad)

    def _received_commitments(self, ch: _Chunk) -> bytes:
        """Every party's commitments as this party received them, in party order (32 bytes per seed each)."""
        assert ch.commits is not None
        return b"".join(ch.commits[j] for j in range(self.ctx.M))

    def _send_seed(self, ch: _Chunk, which: int):
        """Every party reveals its seed ``which`` (in :attr:`seed_of`'s order) to every party; with the first, the
        commitments it received (:meth:`_opened_seed` compares them: a party that sent different commitments to
        different parties could otherwise give them different coins)."""
        M = self.ctx.M
        if which == 0:
            echo = self._received_commitments(ch)
            return ({j: [ch.seeds[0], echo] for j in range(M)},
                    {j: wire.list_of([wire.digest(32), wire.digest(32 * len(ch.seeds) * M)],
                                     "coin seed and commitments received") for j in range(M)})
        return {j: ch.seeds[which] for j in range(M)}, {j: wire.digest(32) for j in range(M)}

    def _opened_seed(self, ch: _Chunk, got: dict, which: int) -> bytes:
        """Each revealed seed checked against its commitment (and, with the first seeds, the commitments every
        party received against those this party did: all verifiers hold the same commitments, so the same coins;
        a party whose commitment differs between receivers is named); the joint seed is their hash."""
        assert ch.commits is not None
        if which == 0:
            M, size = self.ctx.M, 32 * len(ch.seeds)
            seen = [self._received_commitments(ch)] + [echo for _, echo in got.values()]
            liars = [k for k in range(M) if len({e[size * k:size * (k + 1)] for e in seen}) > 1]
            if liars:
                who = ", ".join(party_label(k) for k in liars)
                raise ProtocolError(f"party {self.ctx.pid}: {who} sent different seed commitments to different "
                                    f"parties; job aborted, nothing released")
            got = {j: seed for j, (seed, _) in got.items()}
        for j, s in got.items():
            if hashlib.sha256(s).digest() != ch.commits[j][32 * which:32 * (which + 1)]:
                raise ProtocolError(f"party {self.ctx.pid}: {party_label(j)} revealed a seed that is not the one it "
                                    f"committed to; job aborted, nothing released")
        return hashlib.sha256(b"".join(got[j] for j in range(self.ctx.M))).digest()

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
