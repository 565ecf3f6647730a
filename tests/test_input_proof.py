"""Verifiable inputs (``verify_inputs``): every client proves on shares that its values are within their ranges and
each record's squared group norms within their limits; a deviating client is named and nothing is released; an
honest job releases the same integers with and without the proofs."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench import faults
from sqm.mpc.protocols import flp
from sqm.mpc.protocols import input_proof as ip
from sqm.mpc.protocols import lookup
from sqm.mpc.protocols import proof_exchange as pe
from sqm.mpc.net.abort import InputRefused
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import from_signed, prime_below

P = prime_below(40)
CLAIM = ip.Claim(lo=(-5, -5, -7), hi=(5, 5, 7), groups=(((0, 1), 40),))


def _honest(rows=50, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=(rows, 3))
    x[:, 2] = rng.integers(-7, 8, size=rows)
    return x


def _verdict(W, claim=CLAIM, M=3, proof=None, seed=0):
    """The checks of :class:`sqm.mpc.protocols.proof_exchange.InputProofs` for client 1's witness ``W`` (whose digits
    define its values), each of the M parties on its shares, opened by the parties other than client 1: (slack
    relations, claim, identity ok)."""
    rng = np.random.default_rng(seed)
    t = (M - 1) // 2
    W = np.asarray(W, np.int64) % P
    co = ip.coins(bytes(32), 1, W.shape[0], claim, P)
    Y, _, beta, _ = ip.grid(ip.values(W, claim, P), W, claim, co, P)
    st = ip.statement(W.shape[0], claim, P)
    proof = flp.prove_statement(Y, st, beta, P, rng) if proof is None else proof(Y, st, beta, co)
    Ws, Ps = (shamir.share(a, M, t, P, rng) for a in (W, proof))
    r = flp.draw_point(rng, P, ip.BASE)
    opened = []
    for j in range(M):
        Yj, _, _, zj = ip.grid(ip.values(Ws[j], claim, P), Ws[j], claim, co, P)
        q = flp.query_statement(Yj, Ps[j], co["alpha"], r, P, st)
        q[0] = (int(q[0]) - zj) % P
        opened.append(np.concatenate([[ip.linear_check(Ws[j], claim, co, P)], q]))
    others = [j for j in range(M) if j != 1]
    o = shamir.reconstruct(np.stack([opened[j] for j in others]), [j + 1 for j in others], P)
    return int(o[0]), int(o[1]), flp.decide_statement(o[1:], st, beta, P)


def _verdict_lookup(x, claim, W=None, H=None, counts=None, seed=0):
    """As :func:`_verdict` for a claim with lookups: client 1's witness ``W`` (default: honest for ``x``), its
    multiplicities and inverses (default: honest), checked on shares of 3 parties, opened by the other two: (the
    linear checks' combination, the claim, the identities ok)."""
    rng = np.random.default_rng(seed)
    W = ip.witness(x, claim) if W is None else W
    consts = lookup.alphas(bytes(32), 1, max(claim.tables), P)
    invs = lookup.table_inverses(consts, claim, P)
    H = lookup.inverse_witness(W, claim, invs) if H is None else H
    counts = lookup.table_counts(W, claim) if counts is None else counts
    co = ip.coins(bytes(32), 1, W.shape[0], claim, P)
    Y, _, beta, _ = ip.grid(from_signed(x, P), W % P, claim, co, P, H=H % P)
    st = ip.statement(W.shape[0], claim, P)
    proof = flp.prove_statement(Y, st, beta, P, rng, consts)
    Ws, Hs, Ms, Ps = (shamir.share(np.asarray(a) % P, 3, 1, P, rng) for a in (W, H, counts, proof))
    r = flp.draw_point(rng, P, ip.BASE)
    opened = []
    for j in range(3):
        Yj, _, _, zj = ip.grid(ip.values(Ws[j], claim, P), Ws[j], claim, co, P, H=Hs[j])
        q = flp.query_statement(Yj, Ps[j], co["alpha"], r, P, st)
        q[0] = (int(q[0]) - zj) % P
        lin = (ip.linear_check(Ws[j], claim, co, P) + lookup.check(Hs[j], Ms[j], claim, co, invs, P)) % P
        opened.append(np.concatenate([[lin], q]))
    o = shamir.reconstruct(np.stack([opened[j] for j in (0, 2)]), [1, 3], P)
    return int(o[0]), int(o[1]), flp.decide_statement(o[1:], st, beta, P, consts)


def test_lookups_on_shares_pass_honest_and_each_check_tells_its_own_deviation():
    """On shares: an honest chunk passes; a value outside its table (inverses of what was shared, multiplicities
    of the values clipped into the table) fails the identities alone; an inverse off by one fails the products
    (and the identities); a multiplicity moved to the next entry fails the identities alone."""
    x = _looked_block(40, 5)
    assert _verdict_lookup(x, LOOKED) == (0, 0, True)
    W = ip.witness(x, LOOKED)
    W[3, 1] = 1405  # column 1's x - lo: 705, outside [0, 1400]; its values' shares are the bent ones
    bent = x.copy()
    bent[3, 1] = 705
    clipped = W.copy()
    clipped[3, 1] = 1400
    consts = lookup.alphas(bytes(32), 1, max(LOOKED.tables), P)
    H = lookup.inverse_witness(clipped, LOOKED, lookup.table_inverses(consts, LOOKED, P))
    H[3, 1], H[3, 3] = (pow(int(a - 1405) % P, -1, P) for a in consts)
    lin, claim, ok = _verdict_lookup(bent, LOOKED, W=W, H=H, counts=lookup.table_counts(clipped, LOOKED))
    assert lin != 0 and (claim, ok) == (0, True)
    H = lookup.inverse_witness(ip.witness(x, LOOKED), LOOKED, lookup.table_inverses(consts, LOOKED, P))
    H[2, 0] += 1
    lin, claim, ok = _verdict_lookup(x, LOOKED, H=H)
    assert lin != 0 and (claim != 0 or not ok)
    counts = lookup.table_counts(ip.witness(x, LOOKED), LOOKED)
    k = int(np.flatnonzero(counts)[0])
    counts[k] -= 1
    counts[k + 1] += 1
    lin, claim, ok = _verdict_lookup(x, LOOKED, counts=counts)
    assert lin != 0 and (claim, ok) == (0, True)


def test_a_claims_lookups_and_their_soundness():
    """Widths from 512 to 2^16 - 1 are looked up (one witness entry each), the rest digits; one table per width;
    the error bound adds the products' part and ((N + w + 1) / (p - w - 1))^2 per table."""
    claim = ip.Claim(lo=(0, -256, -1000, 0), hi=(511, 256, 1000, 1 << 16), groups=(((1, 2), 10 ** 6),))
    assert claim.lookups == (False, True, True, False) and claim.tables == (512, 2000)
    assert claim.widths[0] == (ip.digit_count(511), 1, 1, ip.digit_count(1 << 16))
    assert [(j, t) for j, _, t in claim.looked] == [(1, 0), (2, 1)]
    g = flp.ROWS
    extra = 2 * g / (P - ip.BASE * g - 1) + lookup.error(40, 512, P) + lookup.error(40, 2000, P)
    assert ip.soundness_error(P, 40, claim) == pytest.approx(ip.soundness_error(P) + extra, rel=1e-12)
    assert lookup.error(40, 512, P) == ((40 + 513) / (P - 513)) ** 2
    assert ip.soundness_error(P, 40, CLAIM) == ip.soundness_error(P)  # no lookups


@pytest.mark.parametrize("width", list(range(0, 70)) + [255, 256, 8192])
def test_digits_reach_exactly_the_range(width):
    """Every choice of each digit among its allowed values sums (with the weights) into [0, width], and every
    integer there is reached, by the encoding in particular."""
    w, roots = ip.range_weights(width), ip.digit_roots(width)
    assert roots.shape == (ip.digit_count(width), ip.BASE) and w.shape == (roots.shape[0],)
    if width <= 256:
        sums = {int(np.dot(c, w)) for c in itertools.product(*roots.tolist())}
        assert sums == set(range(width + 1))
    v = np.arange(width + 1)
    enc = ip.encode_range(v, width)
    assert np.array_equal(enc @ w, v)
    assert all(np.isin(enc[:, k], roots[k]).all() for k in range(roots.shape[0]))


@pytest.mark.parametrize("M", [3, 4, 5])
def test_an_honest_witness_passes_on_shares(M):
    x = _honest()
    assert _verdict(ip.witness(x, CLAIM), M=M) == (0, 0, True)


def test_an_honest_client_refuses_its_own_bad_block():
    x = _honest()
    x[3, 2] = 8
    with pytest.raises(InputRefused, match="outside its declared ranges"):
        ip.witness(x, CLAIM)
    x = _honest()
    x[0, :2] = 5  # 25 + 25 > 40
    with pytest.raises(InputRefused, match="squared norm is above its declared limit"):
        ip.witness(x, CLAIM)


def test_the_values_are_the_witness_digits_on_shares():
    """A client's input shares are its witness's: values() gives back its block exactly, and on shares a sharing
    of it (so no value can differ from what its digits say)."""
    x = _honest()
    W = ip.witness(x, CLAIM)
    assert np.array_equal(ip.values(W, CLAIM, P), from_signed(x, P))
    shares = shamir.share(W, 3, 1, P, np.random.default_rng(2))
    got = shamir.reconstruct(np.stack([ip.values(shares[j], CLAIM, P) for j in (0, 2)]), [1, 3], P)
    assert np.array_equal(got, from_signed(x, P))


@pytest.mark.parametrize("field_bits", [23, 61])
def test_the_values_of_wide_ranges_in_a_wide_field(field_bits):
    """values() in int64 where its sums fit, by the small-weight product where they could not (a 61-bit field)."""
    p, top = prime_below(field_bits), 1 << 20
    claim = ip.Claim(lo=(-top, 0), hi=(top, 3))
    x = np.random.default_rng(field_bits).integers(-top, top, size=(40, 2))
    x[:, 1] = x[:, 1] % 4
    x[0, 0], x[1, 0] = -top, top
    W = ip.witness(x, claim)
    assert np.array_equal(ip.values(W, claim, p), from_signed(x, p))
    shares = shamir.share(W, 3, 1, p, np.random.default_rng(1))
    got = shamir.reconstruct(np.stack([ip.values(shares[j], claim, p) for j in (0, 2)]), [1, 3], p)
    assert np.array_equal(got, from_signed(x, p))


def test_slack_digits_that_do_not_add_up_to_the_slack_fail_the_linear_check():
    """A record's lowest slack digit moved to another allowed value: every digit valid, the norm true, but
    L - s != sum w e."""
    x = _honest()
    W = ip.witness(x, CLAIM)
    col, _ = CLAIM.widths
    first = sum(col) + len(CLAIM.groups)  # the group's slack digits, weight 1 first
    rec = int(np.argmax(W[:, first] < 3))
    assert W[rec, first] < 3
    W[rec, first] += 1
    lin, claim, ok = _verdict(W)
    assert lin != 0 and claim == 0 and ok


def test_a_value_out_of_range_as_a_bad_digit_fails_the_quadratic_check():
    """x = 100 written with a lowest digit 93 above its value (so the linear relation holds) fails the proof of the
    digits."""
    x = _honest()
    x[3, 2] = 100
    W = ip.witness(np.clip(x, CLAIM.lo, CLAIM.hi), CLAIM)
    col, _ = CLAIM.widths
    first = col[0] + col[1]  # the digits of column 2, weight 1 first
    W[3, first] += 100 - 7
    assert ip.values(W, CLAIM, P)[3, 2] == 100  # the value the release would compute on
    lin, claim, ok = _verdict(W)
    assert lin == 0 and ok and claim != 0


def test_a_record_over_its_norm_limit_fails_the_quadratic_check():
    """Each value in range, the record's squared norm 50 above the limit 40, reported as 40 (slack 0)."""
    x = _honest()
    x[0, :2] = 5
    W = ip.witness(x, ip.Claim(CLAIM.lo, CLAIM.hi, ()))  # the true digits of every value
    s = np.einsum("ij,ij->i", x[:, :2], x[:, :2])
    s[0] = 40
    W = np.hstack([W, s[:, None], ip.encode_range(40 - s, 40)])
    lin, claim, ok = _verdict(W)
    assert lin == 0 and ok and claim != 0


def test_a_proof_that_is_not_the_product_polynomial_fails_the_identity():
    """A prover that shifts P(1) to make the sum match a false claim breaks P = sum_j U_j V_j at the query point."""
    x = _honest()
    x[0, :2] = 5
    W = ip.witness(x, ip.Claim(CLAIM.lo, CLAIM.hi, ()))
    s = np.einsum("ij,ij->i", x[:, :2], x[:, :2])
    s[0] = 40
    W = np.hstack([W, s[:, None], ip.encode_range(40 - s, 40)])

    def forged(Y, st, beta, co):
        pr = flp.prove_statement(Y, st, beta, P, np.random.default_rng(5))
        m, g = Y.shape[1], Y.shape[0]
        assert len(st.polys) == 2  # the low digits and the top digits of many values; the others and the squares
        z = ip.grid(from_signed(x, P), W % P, CLAIM, co, P)[3]
        second = m + flp.degree(st.polys[0]) * g + 1  # where the second part's P(0..) starts
        true = int(sum(np.sum(co["alpha"].astype(object) * pr[o + 1:o + 1 + g].astype(object))
                       for o in (m, second))) % P
        inv = pow(int(co["alpha"][0]), -1, P)
        pr[m + 1] = (int(pr[m + 1]) + (z - true) * inv) % P  # sum_k alpha_k P(k) now equals z
        return pr

    lin, claim, ok = _verdict(W, proof=forged)
    assert lin == 0 and claim == 0 and not ok


@pytest.mark.parametrize("lookups", [False, True])
def test_the_opened_values_of_an_honest_proof_are_uniform(lookups):
    """U(r) is masked by the blinds: over 400 proofs of one fixed witness, the lowest bit of each of the m opened
    values is fair (within 5 standard errors of 1/2); with lookups too, the looked-up entries' and the inverses'
    wires among them."""
    claim = LOOKED if lookups else CLAIM
    x = _looked_block(4, 3) if lookups else _honest(rows=4)
    W = ip.witness(x, claim)
    consts = lookup.alphas(bytes(32), 1, max(claim.tables), P) if lookups else []
    H = lookup.inverse_witness(W, claim, lookup.table_inverses(consts, claim, P)) if lookups else None
    co = ip.coins(bytes(32), 1, 4, claim, P)
    Y, _, beta, _ = ip.grid(from_signed(x, P), W, claim, co, P, H=H)
    st = ip.statement(4, claim, P)
    assert isinstance(st.polys[-1], flp.Products) == lookups
    rng = np.random.default_rng(7)
    bits = []
    for _ in range(400):
        pr = flp.prove_statement(Y, st, beta, P, rng, consts)
        q = flp.query_statement(Y, pr, co["alpha"], flp.draw_point(rng, P, ip.BASE), P, st)
        bits.append(q[1 + len(st.polys):] & 1)
    mean = np.mean(bits, axis=0)
    assert np.all(np.abs(mean - 0.5) < 5 * 0.5 / np.sqrt(400))


def test_a_field_below_the_tables_and_a_grid_without_its_inverses_are_refused():
    """A field too small for a claim's tables stops the parties before any chunk; a claim with lookups cannot lay
    out its grid without the inverses (or with inverses of another shape)."""
    from sqm.mpc.net.abort import ProtocolError
    from sqm.mpc.protocols.inprocess import InProcessTransport, _Hub

    ctx = InProcessTransport(_Hub(3), 0, np.random.default_rng(0), ideal=False)
    wide = ip.Claim(lo=(0,), hi=(65_520,))  # within the field (p = 65,521), but no alpha above its table
    with pytest.raises(ProtocolError, match="too small for the clients' tables"):
        pe.InputProofs(ctx, prime_below(16), [wide, wide])
    x = _looked_block(5, 1)
    W, co = ip.witness(x, LOOKED), ip.coins(bytes(32), 1, 5, LOOKED, P)
    for H in (None, np.zeros((5, 3), np.int64)):
        with pytest.raises(ProtocolError, match="needs its inverses"):
            ip.grid(from_signed(x, P), W, LOOKED, co, P, H=H)


def test_the_field_must_hold_the_claims():
    assert ip.needed_bound([CLAIM]) == 50  # 5^2 + 5^2 over the group
    d, g = ip.BASE, flp.ROWS
    assert flp.error_bound(P, d) == d * g / (P - d * g - 1)
    assert ip.soundness_error(P) == 3 / P + (d + 3) * g / (P - d * g - 1)
    st = ip.statement(40, CLAIM, P)  # the low digits and the slack's top digit (6 values); the values' tops, squares
    assert [flp.degree(q) for q in st.polys] == [d, 2] and flp.LOW_DEGREE == 3  # 2: squares, tops of 2 values
    assert flp.statement_error(P, st) == (d + 2) * g / (P - d * g - 1) < ip.soundness_error(P) - 3 / P


# ----- the pipeline, on the real protocol over in-memory mailboxes ----------------------------------------------

class _AtChunk(pe.InputProofs):
    """A party that deviates in chunk ``bad`` (its ``bad``-th push): :meth:`_is_bad` tells that chunk."""

    def __init__(self, ctx, p, claims, bad: int):
        super().__init__(ctx, p, claims)
        self.bad, self.pushed, self.target = bad, 0, None

    def _send_witness(self, ch):
        if self.pushed == self.bad:
            self.target = id(ch)
        self.pushed += 1
        return super()._send_witness(ch)

    def _is_bad(self, ch) -> bool:
        return id(ch) == self.target


class _Bends(_AtChunk):
    """A client that shares chunk ``bad`` with record 3's column 2 at 100 (above its range), its lowest digit 93
    above its honest value so that the digits still sum to it, and proves it as if it were honest."""

    def _send_witness(self, ch):
        if self.pushed == self.bad:
            col, _ = CLAIM.widths
            ch.x = ch.x.copy()
            ch.x[3, 2] = 100  # a field element: the integer 100
            ch.own = ch.own.copy()
            ch.own[3, col[0] + col[1]] += 100 - 7  # its lowest digit (7) now 100: the digits sum to 100
        return super()._send_witness(ch)


class _Equivocates(_AtChunk):
    """A party that, in chunk ``bad``, sends the server another commitment than the one it sends everyone else (a
    hash of seeds it could later choose between), its witness and proofs honest."""

    def _send_witness(self, ch):
        out, want = super()._send_witness(ch)
        if self._is_bad(ch):
            out[0] = [bytes(len(out[0][0]))] + list(out[0][1:])
        return out, want


LOOKED = ip.Claim(lo=(-300, -700, -3), hi=(300, 700, 3), groups=(((0, 2), 300 ** 2 + 9),))  # two tables, one
# column of digits; column 1 (looked up) outside every group, so that only its lookup can tell a bent value


def _looked_block(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(-300, 301, size=rows), rng.integers(-400, 401, size=rows),
                     rng.integers(-3, 4, size=rows)], axis=1)


class _BendsLookup(_AtChunk):
    """A client that shares chunk ``bad`` with record 3's column 1 at 705 (above its range [-700, 700]), its
    witness entry (x - lo) 1405 outside its table [0, 1400], and proves it as if it were honest: multiplicities of
    the values clipped into the table (they sum to the number of lookups), inverses 1 / (alpha - y) of the values
    it shared (the bent one included): bench.faults' deviating client's."""

    _counts = faults.clipped_counts
    _inverses = faults.shared_inverses

    def _send_witness(self, ch):
        if self.pushed == self.bad:
            ch.x, ch.own = ch.x.copy(), ch.own.copy()
            ch.x[3, 1] = 705
            ch.own[3, 1] = 705 + 700
        return super()._send_witness(ch)


class _ForgesLookup(_AtChunk):
    """An honest witness whose lookups are forged in chunk ``bad``: one inverse off by one (``how`` "inverse"), or
    one multiplicity moved to the next table entry (``how`` "count")."""

    def __init__(self, ctx, p, claims, bad: int, how: str = "inverse"):
        super().__init__(ctx, p, claims, bad)
        self.how = how

    def _counts(self, ch):
        out = super()._counts(ch)
        if self.how == "count" and self._is_bad(ch):
            k = int(np.flatnonzero(out)[0])
            out[k] -= 1
            out[k + 1] += 1
        return out

    def _inverses(self, ch):
        out = super()._inverses(ch)
        if self.how == "inverse" and self._is_bad(ch):
            out[2, 0] = (out[2, 0] + 1) % self.p
        return out


class _SwapsSeed(_AtChunk):
    """A party that, in chunk ``bad``, reveals another seed than the one it committed to for its ``which``-th reveal
    (0: the alphas' with lookups, else the coins'; 1: the coins'; 2: the query point's)."""

    def __init__(self, ctx, p, claims, bad: int, which: int = 1):
        super().__init__(ctx, p, claims, bad)
        self.which = which

    def _send_seed(self, ch, which):
        out, want = super()._send_seed(ch, which)
        if self._is_bad(ch) and which == self.which:
            out = {j: [bytes(32)] + v[1:] if isinstance(v, list) else bytes(32) for j, v in out.items()}
        return out, want


def _pipeline(chunks: int, M: int = 3, bad: int | None = None, rows: int = 9, liar=_Bends, claim=CLAIM,
              **how):
    """M parties run :class:`InputProofs` over in-memory mailboxes (the real protocol): each client pushes
    ``chunks`` chunks of ``rows`` records, client M - 1 bending chunk ``bad`` (:class:`_Bends`), then finishes.
    Returns per party (values' shares per chunk, exchanges made, the exception it stopped with or None)."""
    import asyncio

    from sqm.mpc.protocols.inprocess import InProcessTransport, _Hub

    hub = _Hub(M)
    make = _honest if claim is CLAIM else _looked_block
    blocks = {c: [make(rows, seed=100 * c + k) for k in range(chunks)] for c in range(1, M)}
    for c in blocks:
        for b in blocks[c]:
            b[3, 2] = 7 if claim is CLAIM else b[3, 2]  # the value the bent chunk moves to 100

    async def party(pid: int):
        ctx = InProcessTransport(hub, pid, np.random.default_rng(pid), ideal=False)
        claims = [claim] * (M - 1)
        proofs = liar(ctx, P, claims, bad, **how) if pid == M - 1 and bad is not None else \
            pe.InputProofs(ctx, P, claims)
        got = []
        try:
            for k in range(chunks):
                got.append(await proofs.push(None if pid == 0 else blocks[pid][k], rows))
            await proofs.finish()
            err = None
        except Exception as e:  # noqa: BLE001 - what the party stopped with
            err = e
            hub.abort(str(e))
        hub.done(pid)
        return got, ctx.exchanges, err

    async def main():
        return await asyncio.gather(*(party(j) for j in range(M)))

    return asyncio.run(main()), blocks


@pytest.mark.parametrize("M", [3, 4])
@pytest.mark.parametrize("chunks", [1, 2, 7])
def test_the_pipeline_takes_n_plus_4_exchanges_and_shares_each_chunks_values(M, chunks):
    """An honest job of n chunks: n + 4 exchanges at every party (each carries one stage of each chunk in flight),
    every chunk's checks pass, and each chunk's value shares (returned at its push, before its checks) open to the
    clients' blocks."""
    out, blocks = _pipeline(chunks, M)
    assert [(e, err) for _, e, err in out] == [(chunks + 4, None)] * M
    for k in range(chunks):
        opened = shamir.reconstruct(np.stack([out[j][0][k] for j in range(M)]), [j + 1 for j in range(M)], P)
        assert np.array_equal(opened, from_signed(np.hstack([blocks[c][k] for c in range(1, M)]), P))


@pytest.mark.parametrize("chunks, bad", [(1, 0), (7, 0), (7, 3), (7, 6), (3, 2)])
def test_a_bent_chunk_is_named_at_its_checks_wherever_it_is_in_the_pipeline(chunks, bad):
    """Client 2 bends chunk ``bad`` of ``chunks``: the parties that verify it (the server and client 1) both name it
    in the exchange that carries that chunk's checks (its fifth: exchange bad + 5, during a later push or in
    finish), never client 1, and neither gets past it (nothing could be opened after)."""
    from sqm.mpc.net.abort import ProtocolError

    out, _ = _pipeline(chunks, 3, bad)
    for got, exchanges, err in out[:2]:
        assert isinstance(err, ProtocolError) and "the input proof of client 2 failed" in str(err), err
        assert "client 1 failed" not in str(err)
        assert exchanges == bad + 5
        assert len(got) == min(chunks, bad + 4)  # the pushes that returned before it


@pytest.mark.parametrize("M", [3, 4, 5])  # t = 1, 1, 2
@pytest.mark.parametrize("chunks", [1, 2, 9])
def test_with_lookups_the_pipeline_takes_n_plus_6_exchanges_and_shares_each_chunks_values(M, chunks):
    """A claim with two tables (widths 600 and 1400) and a column of digits: n + 6 exchanges (the alphas and the
    inverses before the coins), every chunk's checks pass, the values' shares open to the blocks."""
    assert LOOKED.tables == (600, 1400) and LOOKED.lookups == (True, True, False)
    out, blocks = _pipeline(chunks, M, claim=LOOKED)
    assert [(e, err) for _, e, err in out] == [(chunks + 6, None)] * M
    for k in range(chunks):
        opened = shamir.reconstruct(np.stack([out[j][0][k] for j in range(M)]), [j + 1 for j in range(M)], P)
        assert np.array_equal(opened, from_signed(np.hstack([blocks[c][k] for c in range(1, M)]), P))


@pytest.mark.parametrize("liar, how", [(_BendsLookup, {}), (_ForgesLookup, {"how": "inverse"}),
                                       (_ForgesLookup, {"how": "count"})])
@pytest.mark.parametrize("chunks, bad", [(1, 0), (9, 4)])
def test_a_value_outside_its_table_or_a_forged_lookup_is_named(liar, how, chunks, bad):
    """Client 2 puts one value outside its table (with inverses of what it shared and multiplicities that add up),
    or forges one inverse, or moves one multiplicity: the server and client 1 name it at that chunk's checks (its
    seventh exchange), never client 1."""
    from sqm.mpc.net.abort import ProtocolError

    out, _ = _pipeline(chunks, 3, bad, liar=liar, claim=LOOKED, **how)
    for got, exchanges, err in out[:2]:
        assert isinstance(err, ProtocolError) and "the input proof of client 2 failed" in str(err), err
        assert "client 1 failed" not in str(err)
        assert exchanges == bad + 7
        assert len(got) == min(chunks, bad + 6)  # the pushes that returned before it


@pytest.mark.parametrize("claim", ["digits", "lookups"])
@pytest.mark.parametrize("chunks, bad", [(1, 0), (4, 2)])
def test_a_party_that_sends_different_commitments_is_named_before_any_coin_is_used(chunks, bad, claim):
    """Client 2 commits to one seed towards the server and to another towards client 1 in chunk ``bad``: with the
    first seeds (the coins', or the alphas' with lookups) every party shows the commitments it received, so every
    party (the liar included) names client 2 in that chunk's second exchange (bad + 2), before anything drawn from
    them checks anything."""
    from sqm.mpc.net.abort import ProtocolError

    out, _ = _pipeline(chunks, 3, bad, liar=_Equivocates, claim=CLAIM if claim == "digits" else LOOKED)
    for _, exchanges, err in out:
        assert isinstance(err, ProtocolError) and "client 2 sent different seed commitments" in str(err), err
        assert "client 1" not in str(err) and "server" not in str(err)
        assert exchanges == bad + 2


@pytest.mark.parametrize("claim, which", [("digits", 0), ("digits", 1), ("lookups", 0), ("lookups", 1),
                                          ("lookups", 2)])
def test_a_party_that_reveals_another_seed_than_it_committed_to_is_named(claim, which):
    """Client 2 reveals a seed other than its committed one (the alphas', the coins' or the query point's) in chunk
    1 of 3: every other party names it in the exchange of that reveal, before using what it would draw."""
    from sqm.mpc.net.abort import ProtocolError

    # the chunk's exchange (from 1) that reveals seed ``which``: witness, coins, proof, query point (digits);
    # witness, alphas, inverses, coins, proof, query point (lookups)
    stage = {"digits": (2, 4), "lookups": (2, 4, 6)}[claim][which]
    out, _ = _pipeline(3, 3, 1, liar=_SwapsSeed, claim=CLAIM if claim == "digits" else LOOKED, which=which)
    for _, exchanges, err in out[:2]:
        assert isinstance(err, ProtocolError) and "client 2 revealed a seed that is not the one it committed to" \
            in str(err), err
        assert exchanges == 1 + stage


# ----- through real party processes -----------------------------------------------------------------------------

def _data():
    rng = np.random.default_rng(4)
    return (rng.normal(size=(30, 2)) * 0.2, rng.normal(size=(30, 3)) * 0.2)


def _mech(verify: bool, cols: int = 5, chunk_rows: int | None = None):
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM

    return SQM(covariance(cols), 1024.0, epsilon=4.0, backend="mpyc", seed=3, verify_inputs=verify,
               chunk_rows=chunk_rows)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["value", "norm"])
def test_a_deviating_client_is_named_and_nothing_is_released(mode):
    """Client 2 bends record 0 (one value 3x its bound; or every column at its bound, the record's squared norm 3x
    its group's limit) and proves the clipped block: without the proofs the job releases; with them it is named."""
    from bench.faults import DeviateRecord
    from sqm.mechanism.vertical import VerticalData
    from sqm.mpc.net.launch import MPCError, run_parties

    data = VerticalData(list(_data()))
    programs, _ = _mech(False).programs(data)
    programs[2] = DeviateRecord(programs[2], mode)
    released = run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    assert released[0]["result"].raw is not None  # the deviation passes the checks without the proofs
    programs, _ = _mech(True).programs(data)
    programs[2] = DeviateRecord(programs[2], mode)
    with pytest.raises(MPCError) as err:
        run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    msg = str(err.value)
    assert "the input proof of client 2 failed" in msg, msg
    assert "the input proof of client 1" not in msg


@pytest.mark.slow
def test_a_deviation_in_the_last_of_many_chunks_is_named():
    """Chunks of 4 records (8 chunks, more than the pipeline's 5 in flight): client 2 bends the last record alone,
    whose checks come in the exchanges after the last chunk (InputProofs.finish); it is named, nothing released."""
    from bench.faults import DeviateRecord
    from sqm.mechanism.vertical import VerticalData
    from sqm.mpc.net.launch import MPCError, run_parties

    data = VerticalData(list(_data()))
    programs, _ = _mech(False, chunk_rows=4).programs(data)
    programs[2] = DeviateRecord(programs[2], "value", record=29)
    assert run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)[0]["result"].raw is not None
    programs, _ = _mech(True, chunk_rows=4).programs(data)
    programs[2] = DeviateRecord(programs[2], "value", record=29)
    with pytest.raises(MPCError) as err:
        run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    msg = str(err.value)
    assert "the input proof of client 2 failed" in msg and "the input proof of client 1" not in msg, msg


def _less_noise(mech, data, tmp_path) -> tuple[list[int], int]:
    """(the released integers less the clients' noise shares as each recorded it, the bytes sent): with
    ``verify_inputs`` the noise is drawn from committed keys (tests/test_addend_check.py), the rest is the same."""
    from bench.faults import RecordNoise
    from sqm.mpc.net.launch import run_parties

    programs, _ = mech.programs(data)
    paths = [str(tmp_path / f"noise-{mech.verify_inputs}-{c}.npy") for c in range(1, len(programs))]
    programs[1:] = [RecordNoise(p, path) for p, path in zip(programs[1:], paths, strict=True)]
    recs = run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    raw = np.array([int(v) for v in np.asarray(recs[0]["result"].raw).reshape(-1)], dtype=object)
    return list(raw - sum(np.load(path).astype(object) for path in paths)), sum(r["bytes_sent"] for r in recs)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_rows", [None, 6])  # one chunk; 7 chunks, more than the pipeline's depth
def test_an_honest_job_releases_the_same_integers_with_the_proofs(tmp_path, chunk_rows):
    """The same integers less each client's noise share (which verified noise draws from a committed key)."""
    from sqm.mechanism.vertical import VerticalData

    rng = np.random.default_rng(4)
    data = VerticalData([rng.normal(size=(40, 2)) * 0.2, rng.normal(size=(40, 3)) * 0.2, rng.normal(size=(40, 1))])
    plain, plain_bytes = _less_noise(_mech(False, 6), data, tmp_path)
    checked, checked_bytes = _less_noise(_mech(True, 6, chunk_rows), data, tmp_path)
    assert checked == plain
    assert checked_bytes > plain_bytes  # the proofs ran


@pytest.mark.parametrize("M", [3, 4, 5, 6])
@pytest.mark.parametrize("p", [P, prime_below(62)])  # int64 coefficients; field products
def test_seeded_shares_lie_on_one_polynomial_through_the_secret(M, p):
    """A client's seeded sharing: the t seeded parties expand their seeds, the others (the client too) get shares;
    the M points lie on one polynomial of degree t through the secret."""
    t = (M - 1) // 2
    secret = np.arange(12, dtype=np.int64).reshape(3, 4) * 1000003 % p
    for client in range(1, M):
        out = ip.seeded_shares(secret, client, M, t, p)
        assert sorted(out) == list(range(M))  # the client keeps its own share
        assert all(isinstance(out[j], bytes) and len(out[j]) == 32 for j in ip.seeded(client, M, t))
        shares = [ip.expand(out[j], secret.shape, p) if isinstance(out[j], bytes) else out[j] for j in sorted(out)]
        xs = [j + 1 for j in sorted(out)]
        assert shamir.consistent(shares, xs, t, p) if len(xs) >= t + 2 else True
        assert np.array_equal(shamir.reconstruct(np.stack(shares), xs, p), secret)


@pytest.mark.parametrize("M", [3, 4, 5, 6])
@pytest.mark.parametrize("p", [P, prime_below(62)])
def test_a_clients_own_values_come_by_linearity_from_its_witness_sharing(M, p, monkeypatch):
    """witness_shares: the others' shares are seeded_shares' (the same seeds), and the client's own values are
    values() of its own share of the witness, though that share is never formed."""
    t = (M - 1) // 2
    x = _honest(rows=23)
    W = ip.witness(x, CLAIM)
    draws: list = []
    monkeypatch.setattr(ip, "fresh_bytes", lambda n: next(draws[-1]))
    for client in range(1, M):
        seeds = [bytes([client, i]) * 16 for i in range(t)]
        draws.append(iter(seeds))
        out, mine = ip.witness_shares(W, from_signed(x, p), CLAIM, client, M, t, p)
        draws.append(iter(seeds))
        ref = ip.seeded_shares(W, client, M, t, p)
        assert sorted(out) == [j for j in range(M) if j != client]
        assert all(out[j] == ref[j] if isinstance(ref[j], bytes) else np.array_equal(out[j], ref[j]) for j in out)
        assert np.array_equal(mine, ip.values(ref[client], CLAIM, p))


@pytest.mark.parametrize("M", [3, 4, 5, 6])
@pytest.mark.parametrize("p", [P, prime_below(62)])
def test_the_blinds_are_seeded_at_t_plus_one_parties_and_shared_on_one_polynomial(M, p):
    """A client's proof blinds: the t + 1 lowest other parties expand their seeds, the rest get shares; the M - 1
    points lie on one polynomial of degree t through the blinds, and fresh seeds give fresh blinds."""
    t = (M - 1) // 2
    for client in range(1, M):
        blinds, out = ip.blind_shares(client, M, t, 7, p)
        assert sorted(out) == [j for j in range(M) if j != client]
        assert [j for j in sorted(out) if isinstance(out[j], bytes)] == ip.seeded(client, M, t + 1)
        shares = [ip.expand(out[j], (7,), p) if isinstance(out[j], bytes) else out[j] for j in sorted(out)]
        xs = [j + 1 for j in sorted(out)]
        assert shamir.consistent(shares, xs, t, p) if len(xs) >= t + 2 else True
        assert np.array_equal(shamir.reconstruct(np.stack(shares), xs, p), blinds)
        assert blinds.min() >= 0 and blinds.max() < p
        assert not np.array_equal(ip.blind_shares(client, M, t, 7, p)[0], blinds)


@pytest.mark.parametrize("rows", [1, 15, 16, 40])
def test_the_grid_lays_each_record_at_its_node(rows):
    """Node k holds records k per .. (k + 1) per - 1 (records padded with zeros to G per): first every low digit of
    each, then every top digit of many values, then those of few, then the grouped values, each record's columns side
    by side."""
    g = flp.ROWS
    width = CLAIM.witness_width
    W = (np.arange(rows)[:, None] * 1000 + np.arange(width)[None, :]) + 1
    X = -(np.arange(rows)[:, None] * 1000 + np.arange(3)[None, :]) - 1
    co = ip.coins(bytes(32), 1, rows, CLAIM, P)
    Y, _, _, _ = ip.grid(X, W, CLAIM, co, P)
    per = max(1, -(-rows // g))
    low, top, few = ip._digit_order(CLAIM)
    assert len(top) == 1 and len(few) == 3  # the slack's top digit has 6 values, the values' 2
    col, grp = CLAIM.widths
    wcol = [c if c < sum(col) else c + len(grp) for c in range(sum(col) + sum(grp))]
    parts = [(W, [wcol[c] for c in low]), (W, [wcol[c] for c in top]), (W, [wcol[c] for c in few]), (X, [0, 1])]
    assert Y.shape == (g, per * sum(len(i) for _, i in parts))
    off = 0
    for src, idx in parts:
        for k in range(g):
            for r in range(per):
                rec = k * per + r
                want = src[rec, idx] if rec < rows else np.zeros(len(idx))
                assert np.array_equal(Y[k, off + r * len(idx):off + (r + 1) * len(idx)], want)
        off += per * len(idx)


@pytest.mark.parametrize("bits", [8, 32, 33, 36, 39, 42, 45, 49, 61])
def test_witness_shares_travel_in_their_bits_and_only_shares_are_read_back(bits):
    """:func:`sqm.mpc.net.wire.pack_bits` (the witness, proof and checks' frames): 4 bytes and the high bits k to a
    group per element, read back exactly; a frame of the wrong length or holding a value >= p is refused."""
    from sqm.mpc.net import wire

    p = prime_below(bits)
    for n in (0, 1, 7, 8, 9, 301):
        a = np.random.default_rng(bits + n).integers(0, p, size=(n, 1), dtype=np.int64)
        if n:
            a[0, 0], a[-1, 0] = p - 1, 0
        frame = wire.pack_bits(a, p)
        h = max(1, bits - 32)
        k = 8 if h <= 8 else 4 if h <= 16 else 2
        size = n * wire.share_bytes(p) if bits <= 32 else 4 * n + -(-n // k) * -(-k * h // 8)
        assert frame.dtype == np.uint8 and frame.shape == (size,)
        assert np.array_equal(wire.packed_bits((n, 1), p)(wire.decode(wire.encode(frame))), a)
    with pytest.raises(wire.WireError, match="shape"):
        wire.packed_bits((302, 1), p)(frame)
    over = np.full_like(frame, 255)  # every bit set: above p - 1
    with pytest.raises(wire.WireError, match="outside"):
        wire.packed_bits((301, 1), p)(over)


def test_the_ideal_functionality_names_a_client_whose_block_breaks_its_claim():
    """The simulation's receivers check every claim in the clear (:meth:`InputProofs.check_clear`)."""
    from types import SimpleNamespace

    from sqm.mpc.net.abort import ProtocolError

    ctx = SimpleNamespace(pid=0, M=3, clients=[1, 2])
    proofs = pe.InputProofs(ctx, P, [CLAIM, CLAIM])
    bad = _honest()
    bad[0, :2] = 5
    proofs.check_clear([_honest(), _honest()])
    with pytest.raises(ProtocolError, match="the input proof of client 2 failed"):
        proofs.check_clear([_honest(), bad])


@pytest.mark.slow
def test_an_honest_job_with_the_row_norm_check_releases_the_same_integers(tmp_path):
    """With the row norm check (whose comparisons open values masked for inputs within bounds, so the evaluation
    decides each chunk's proofs before them) an honest job of 3 chunks releases the same integers less the noise."""
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.mechanism.vertical import VerticalData

    data = VerticalData(list(_data()))
    plain, checked = (_less_noise(SQM(covariance(5), 256.0, epsilon=4.0, backend="mpyc", seed=2, row_norm_check=True,
                                      chunk_rows=12, verify_inputs=v), data, tmp_path)[0] for v in (False, True))
    assert checked == plain


@pytest.mark.slow
def test_three_clients_with_the_sharing_check_release_the_same_integers(tmp_path):
    """M = 4 (t = 1: one seeded party per client, two with shares), with ``verify_sharing`` too (the integers less
    each client's noise share, as above)."""
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.mechanism.vertical import VerticalData

    rng = np.random.default_rng(5)
    data = VerticalData([rng.normal(size=(25, 2)) * 0.2, rng.normal(size=(25, 2)) * 0.2, rng.normal(size=(25, 1))])
    plain, checked = (_less_noise(SQM(covariance(5), 256.0, epsilon=4.0, backend="mpyc", seed=2, verify_sharing=True,
                                      verify_inputs=v), data, tmp_path)[0] for v in (False, True))
    assert checked == plain


def test_the_provers_blocks_of_columns_never_change_the_proof(monkeypatch):
    monkeypatch.setattr(flp, "_compiled", lambda: None)  # the numpy prover's blocks
    x = _honest(rows=40)
    W = ip.witness(x, CLAIM)
    co = ip.coins(bytes(32), 1, 40, CLAIM, P)
    Y, polys, beta, _ = ip.grid(from_signed(x, P), W, CLAIM, co, P)
    whole = flp.prove(Y, polys, beta, P, np.random.default_rng(3))
    monkeypatch.setattr(flp, "BLOCK", 3)
    assert Y.shape[1] > 3
    assert np.array_equal(flp.prove(Y, polys, beta, P, np.random.default_rng(3)), whole)


@pytest.mark.parametrize("bits", [40, 45, 46, 61])
def test_the_provers_extension_is_the_field_product(bits):
    """The grid's extension (exact float products below 2^46, limbs above) equals E @ U in the field."""
    p = prime_below(bits)
    rng = np.random.default_rng(bits)
    y = rng.integers(-(1 << 13), 1 << 13, size=(flp.ROWS, 300)) % p
    y[0, :4] = [0, p - 1, (1 << 13) % p, p - (1 << 13)]
    U = np.vstack([rng.integers(0, p, size=(1, 300)), y])
    E = flp._extension(flp.ROWS, 3 * flp.ROWS, p)
    from sqm.mpc.shares import modarith

    assert np.array_equal(flp._extend(E, U[0], y, p), modarith.matmul_mod(E, U, p))
