"""Verifiable inputs: each client proves to the other parties, without revealing its values, that every integer it
shared lies in its declared range [lo_j, hi_j] and that each record's squared norm over each declared column group
is within the group's limit.  A client whose proof fails is named and nothing is opened.

**What the client shares (its witness, :func:`witness`), per chunk, instead of its block x:** for a column whose
width hi_j - lo_j is from 512 to below 2^16 (:func:`sqm.mpc.protocols.lookup.looked_up`), x_ij - lo_j itself,
checked by a lookup argument (below); for the others the base-8 digits of x_ij - lo_j (:func:`encode_range`: K_j
digits, K_j the fewest with 8^K_j > hi_j - lo_j; the top digit takes one of at most 8 values chosen so that the
sums are exactly the integers 0..hi_j - lo_j, :func:`digit_roots`); and per record and group g its squared norm
s_ig and the digits of L_g - s_ig in [0, L_g].  With lookups, beside the witness: the multiplicities of each table
[0, w] (how many of the chunk's looked-up entries of width w equal each t,
:func:`sqm.mpc.protocols.lookup.table_counts`), and, after joint alphas (two, uniform above every table), the
inverses h = 1 / (alpha - (x - lo)) of every looked-up entry (:func:`sqm.mpc.protocols.lookup.inverse_witness`).
Then, after joint randomness
no single party controls (each party commits to a seed with the witness, then reveals it:
:meth:`sqm.mpc.protocols.proof_exchange.InputProofs._opened_seed`), the parties check on shares:

- **values**: the client's input shares are its witness's, x_ij = lo_j + sum_k w_jk d_ijk on shares
  (:func:`values`), so the values computed on are the digits' by construction;
- **slack relations and lookup identities**, by one random combination opened (:func:`linear_check`,
  :func:`sqm.mpc.protocols.lookup.check`): sum lambda_ig (L_g - s_ig - sum_k w_gk e_igk) = 0 and, per table and alpha,
  sum h = sum_t m_t / (alpha - t) (:mod:`sqm.mpc.protocols.lookup`: with every h (alpha - y) = 1 it holds for both
  alphas only if every looked-up entry is in its table, but with probability ((N + w + 1) / (p - w - 1))^2);
- **digits and norms**, one statement with weights from the coins (alpha per node, beta per digit column, gamma per
  record and group): sum alpha beta prod_{v in D}(d - v) over every digit (D its allowed values, at most 8) plus
  sum alpha gamma (sum_{j in g} x_ij^2 - s_ig) over every record and group = 0, a bilinear form in the weights that
  is zero for every draw only if every digit is one of its allowed values and every s is its record's norm, plus
  sum alpha beta_h (h (alpha_i - y) - 1) over every looked-up entry and alpha (:func:`grid` lays the digits, values
  and lookups out), proved by the client with a fully linear proof
  (:mod:`sqm.mpc.protocols.flp`) shared after the coins and checked at a point drawn after the proof: one polynomial
  of degree 8 G for the digits of 8 allowed values, one of degree at most 3 G for the squares and the top digits of
  at most 3 (:func:`statement`: their extension costs the prover at most 2 G points per column instead of 7 G),
  and one of degree 2 G for the products h (alpha - y) (:class:`sqm.mpc.protocols.flp.Products`).  The
  proof's blinds (one per column of the grid) are drawn from seeds the client sends the t + 1 lowest other parties
  (:func:`blind_shares`): uniform and unknown to any t of them, and no shares to send.

Every opened value is a linear combination of degree-t sharings (an opening reveals its value alone), and each client's
values are opened by and to the parties other than that client, so the client cannot bend its own verdict.

**Soundness** (a deviating client, the other parties following the protocol): a false statement passes a chunk's
check with probability at most 1/p (the linear combination) + 2/p (the bilinear combination, Schwartz-Zippel) +
(8 + 3 + 2) G/(p - 8G - 1) (the polynomials' identities at one point, :func:`sqm.mpc.protocols.flp.statement_error`;
2 G only with lookups) + per table ((N + w + 1) / (p - w - 1))^2 (N its looked-up entries in the chunk;
:func:`soundness_error`).  The multiplicities are shared with the witness, before the alphas, and the inverses
before the coins: F(X) = sum 1 / (X - y) - sum m_t / (X - t) is fixed before alpha is drawn.  **No wrap-around:**
digits in their sets and x - lo = sum w d in F_p give an integer in [lo, hi] when hi - lo < p; then
sum_{j in g} x_ij^2 < p and L_g < p make L_g - s = sum w e an integer inequality (:func:`needed_bound`, what the
field must exceed).

**Pipelined across chunks** (:class:`sqm.mpc.protocols.proof_exchange.InputProofs`, in its own module).  A chunk
goes through five stages, one exchange each: the witness (each client's shares, and every party's commitments to
two fresh seeds), the reveal of the first seeds (the coins), the proof, the reveal of the second seeds (the query
point), the checks; with lookups seven: the reveal of a third seed (the alphas) and the inverses come between the
witness and the coins.  Each exchange
carries one stage of each of the up to five (seven) chunks in flight (the newest chunk's witness, the previous one's
coins, the one before's proof, ...): n chunks take n + 4 exchanges instead of 5 n (n + 6 instead of 7 n with
lookups).  Why the order keeps the soundness: per chunk the stages keep their order, each in a later exchange than
the one before, and every party sends an exchange's message only after it has received every message of the
previous one.  So a client's witness and multiplicities (and every party's commitments) are fixed before any honest
party reveals the seed of that chunk's alphas, its inverses before any reveals the seed of its coins, and its proof
before any honest party reveals the seed of that chunk's query point; no party can change its own seed after seeing the
others' (its commitment came with the witness).  With the first seeds every party also shows the commitments it
received, and every party compares them before it uses the coins: a party that sent different commitments to
different parties (so that verifiers could draw different coins) is named and the job aborts.  Each chunk's coins
and point hash fresh seeds of its own, so what a party learns of one chunk's (the exchange that reveals them also
carries later chunks' witness and proof, and a rushing party may read it first) says nothing of another's: each
chunk's check keeps the error above.  The values of a chunk whose checks are still due are computed on (its
moments, on shares; a caller whose per-chunk steps open masked values decides each chunk first), and every chunk is
decided (:meth:`sqm.mpc.protocols.proof_exchange.InputProofs.finish`) before any output is reduced or opened.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.net.abort import InputRefused, ProtocolError
from sqm.mpc.protocols import flp
from sqm.mpc.protocols import lookup
from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import from_signed
from sqm.mpc.shares.kernels import kernel_function, numpy_forced
from sqm.mpc.shares.randomness import field_stream, fresh_bytes, secure_generator


@dataclass(frozen=True)
class Claim:
    """What one client proves about each of its records: column j (its own, local index) within [lo[j], hi[j]];
    for each (columns, limit) of ``groups``, the squared norm over those columns at most limit."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]
    groups: tuple[tuple[tuple[int, ...], int], ...] = ()

    @functools.cached_property
    def lookups(self) -> tuple[bool, ...]:
        """Per column, whether its range is checked by the lookup argument (:func:`sqm.mpc.protocols.lookup.looked_up`:
        its witness holds x - lo itself) rather than by digits."""
        return tuple(lookup.looked_up(h - lo) for lo, h in zip(self.lo, self.hi, strict=True))

    @functools.cached_property
    def tables(self) -> tuple[int, ...]:
        """The looked-up columns' widths, each once, ascending: a table [0, w] (and its multiplicities) each."""
        return tuple(sorted({h - lo for lo, h, t in zip(self.lo, self.hi, self.lookups, strict=True) if t}))

    @functools.cached_property
    def widths(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Witness entries per column (its digits, or 1 where looked up) and digits per group (computed once: the
        claim is frozen)."""
        return (tuple(1 if t else digit_count(h - lo) for lo, h, t in zip(self.lo, self.hi, self.lookups, strict=True)),
                tuple(digit_count(lim) for _, lim in self.groups))

    @functools.cached_property
    def value_weights(self) -> np.ndarray:
        """The weights of each column's witness entries (:func:`range_weights`; 1 where looked up), concatenated."""
        out = [np.ones(1, np.int64) if t else range_weights(h - lo)
               for lo, h, t in zip(self.lo, self.hi, self.lookups, strict=True)]
        w = np.concatenate(out) if out else np.zeros(0, np.int64)
        w.flags.writeable = False
        return w

    @functools.cached_property
    def squared(self) -> tuple[tuple[int, int], ...]:
        """(column, group) of each grouped column that is not looked up, in the groups' order: their squares are
        columns of their own in the grid (a looked-up column's square is on its wire in the products part)."""
        return tuple((j, q) for q, (cols, _) in enumerate(self.groups) for j in cols if not self.lookups[j])

    @functools.cached_property
    def looked(self) -> tuple[tuple[int, int, int], ...]:
        """Per looked-up column, in order: (its column, its witness column, its table's index in :attr:`tables`)."""
        starts = np.cumsum([0] + list(self.widths[0]))
        return tuple((j, int(starts[j]), self.tables.index(h - lo))
                     for j, (lo, h, t) in enumerate(zip(self.lo, self.hi, self.lookups, strict=True)) if t)

    @functools.cached_property
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


BASE = 8  # the digits' base: the proof's polynomials have this degree (one factor per allowed digit value); 8
# against 4: 5 digits instead of 7 for a 13-bit range (the bytes), for 7 extension points of d/2 + 1 products per
# digit instead of 3 of 3 (the prover's time, :mod:`sqm.mpc.protocols.flp`)


def digit_count(width: int) -> int:
    """K: the fewest base-8 digits whose top one (:func:`digit_roots`) reaches ``width`` (0 for width 0)."""
    width = int(width)
    if width < 0:
        raise UsageError(f"a range has width >= 0, got {width}")
    k = 0
    while BASE ** k <= width:
        k += 1
    return k


def range_weights(width: int) -> np.ndarray:
    """Weights of the K digits: 1, 8, .., 8^(K-2) and 1 for the top digit (which holds its value, a multiple of
    nothing: one of :func:`digit_roots`'s last row)."""
    k = digit_count(width)
    return np.array([BASE ** i for i in range(k - 1)] + [1] * (k > 0), dtype=np.int64)


def digit_roots(width: int) -> np.ndarray:
    """The allowed values of each digit (K x 8): 0..7 for the low ones; for the top one
    min(i R, width - R + 1), i = 0..7, R = 8^(K-1), so that (low digits reach 0..R-1, consecutive top values differ
    by at most R) the sums are exactly the integers 0..width."""
    k = digit_count(width)
    if k == 0:
        return np.zeros((0, BASE), dtype=np.int64)
    r = BASE ** (k - 1)
    out = np.tile(np.arange(BASE, dtype=np.int64), (k, 1))
    out[-1] = [min(i * r, int(width) - r + 1) for i in range(BASE)]
    return out


def encode_range(v, width: int) -> np.ndarray:
    """Digits (n x K) of integers ``v`` in [0, width]: sum_k w_k digits[:, k] = v (:func:`range_weights`), each
    digit one of its allowed values (:func:`digit_roots`)."""
    v = np.asarray(v, dtype=np.int64).reshape(-1)
    k = digit_count(width)
    out = np.zeros((v.size, k), dtype=np.int64)
    if k == 0:
        return out
    r = BASE ** (k - 1)
    cap = int(width) - r + 1
    top = np.where(v >= cap, cap, (v // r) * r)
    out[:, k - 1] = top
    rest = v - top
    for i in range(k - 1):
        out[:, i] = (rest // BASE ** i) % BASE
    return out


def witness(block, claim: Claim) -> np.ndarray:
    """An honest client's witness for its integer ``block`` (records x its columns): the digits of each column's
    value above lo, each group's squared norm, the digits of each group's slack; refused (naming no value) if the
    block breaks its claim.  Compiled where the kernel is (:func:`_steps`), else :func:`_witness_numpy`: the same
    integers."""
    k = _steps()
    out = None if k is None else _witness_compiled(k.witness, block, claim)
    return _witness_numpy(block, claim) if out is None else out


def _witness_numpy(block, claim: Claim) -> np.ndarray:
    x = np.asarray(block, dtype=np.int64)
    lo, hi = np.array(claim.lo, dtype=np.int64), np.array(claim.hi, dtype=np.int64)
    if x.size and (np.any(x < lo) or np.any(x > hi)):
        raise InputRefused("its integer data is outside its declared ranges")
    parts = [x[:, j:j + 1] - lo[j] if claim.lookups[j] else encode_range(x[:, j] - lo[j], int(hi[j] - lo[j]))
             for j in range(x.shape[1])]
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


def _weighted(digits, widths, w, p: int, add=None) -> np.ndarray:
    """Per block of digits (widths[q] columns each), sum_k w_k digits[:, k] (rows x len(widths); ``w`` the blocks'
    weights, concatenated), plus ``add`` (field elements, one per block) where given: compiled where the kernel is
    (:func:`_steps`), else :func:`_weighted_numpy`."""
    k = _steps()
    out = None if k is None else _weighted_compiled(k.weighted, digits, widths, w, p, add)
    if out is not None:
        return out
    out = _weighted_numpy(digits, widths, w, p)
    return out if add is None else modarith.add_mod(out, np.broadcast_to(np.asarray(add, np.int64), out.shape), p)


def _weighted_numpy(digits, widths, w, p: int) -> np.ndarray:
    """:func:`_weighted` in numpy: in int64 when no block's sum can reach 2^63 (digits below p, small weights),
    else one product with the public matrix of the weights (:func:`sqm.mpc.shares.modarith.matmul_small_mod`)."""
    digits = np.asarray(digits, dtype=np.int64)
    rows, n = digits.shape[0], len(widths)
    if sum(widths) == 0:
        return np.zeros((rows, n), dtype=np.int64)
    w = np.asarray(w, dtype=np.int64)
    if (p - 1) * int(w.max()) * max(widths) < 1 << 63 and min(widths) > 0:
        starts = np.cumsum([0] + list(widths[:-1]))
        return np.add.reduceat(digits * w, starts, axis=1) % p
    B = np.zeros((sum(widths), n), dtype=np.int64)
    off = 0
    for q, k in enumerate(widths):
        B[off:off + k, q] = w[off:off + k]
        off += k
    return modarith.matmul_small_mod(digits, B, p)


def layout(rows: int, claim: Claim, g: int = flp.ROWS) -> tuple[int, int, int, int]:
    """(R', m_digits, m_x, m_look): the records padded to a multiple of G (at least G), and the grid's columns of
    digits, of the grouped values not looked up and of the lookups (:func:`grid`: each looked-up value, its square on
    its wire, and its inverses)."""
    col, grp = claim.widths
    padded = max(1, -(-int(rows) // g)) * g
    per = padded // g
    nl = len(claim.looked)
    return padded, per * (sum(col) - nl + sum(grp)), per * len(claim.squared), per * nl * (1 + lookup.ALPHAS)


def coins(seed: bytes, client: int, rows: int, claim: Claim, p: int, g: int = flp.ROWS) -> dict[str, np.ndarray]:
    """The public random coefficients of ``client``'s checks, from a joint seed: ``lin_s`` (the linear relations,
    one per record norm), ``alpha`` (per node), ``beta`` (per digit column of the grid), ``gamma`` (per record of
    a node and group) and, for a claim with lookups, ``lin_h`` (per table and alpha) and ``beta_h`` (per
    looked-up value of a node and alpha), in that order from the field stream
    (:func:`sqm.mpc.shares.randomness.field_stream`) of the hash of the seed and the client."""
    padded, m_bits, _, m_look = layout(rows, claim, g)
    ng = len(claim.groups)
    shapes = {"lin_s": (rows, ng), "alpha": (g,), "beta": (m_bits,), "gamma": (padded // g, ng)}
    if m_look:  # the lookups' identities (one per table and alpha) and products (one per value and alpha)
        shapes |= {"lin_h": (len(claim.tables) * lookup.ALPHAS,), "beta_h": (m_look // (1 + lookup.ALPHAS)
                                                                               * lookup.ALPHAS,)}
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes.values()]
    flat = field_stream(hashlib.sha256(seed + int(client).to_bytes(4, "little")).digest(), (sum(sizes),), p)
    ends = np.cumsum(sizes)
    return {k: flat[e - n:e].reshape(s) for (k, s), n, e in zip(shapes.items(), sizes, ends, strict=True)}


def linear_check(W, claim: Claim, co, p: int) -> int:
    """Shares (or values) of the random combination of the slack relations L_g - s_ig = sum_k w_k e_igk (0 for an
    honest client).  The values' relation x = lo + sum w d holds by construction (:func:`values`)."""
    _, s, digits_s, _, grp = _split(W, claim)
    if not claim.groups:
        return 0
    lim = np.array([lim for _, lim in claim.groups], dtype=np.int64) % p
    slack = modarith.sub_mod(modarith.sub_mod(np.broadcast_to(lim, s.shape), s, p),
                             _weighted(digits_s, grp, _slack_weights(claim), p), p)
    return int(modarith.sum_mod(modarith.mul_mod(co["lin_s"], slack, p).reshape(-1), 0, p))


def values(W, claim: Claim, p: int) -> np.ndarray:
    """Shares (or values) of the client's integers from its witness: x_ij = lo_j + sum_k w_jk d_ijk (mod p)."""
    digits, _, _, col, _ = _split(W, claim)
    lo = from_signed(np.array(claim.lo, dtype=object), p).astype(np.int64)
    return _weighted(digits, col, claim.value_weights, p, lo)


def _slack_weights(claim: Claim) -> np.ndarray:
    return np.concatenate([range_weights(lim) for _, lim in claim.groups]) if claim.groups else np.zeros(0, np.int64)


def _widths(claim: Claim) -> list[int]:
    return [h - lo for lo, h in zip(claim.lo, claim.hi, strict=True)]


def grid(X, W, claim: Claim, co, p: int, g: int = flp.ROWS, H=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(Y, polys, beta, z) for :mod:`sqm.mpc.protocols.flp`: the G x m grid of every digit (its polynomial zero at
    its allowed values: the low digits, then the top ones of many values, then those of few, :func:`_digit_order`)
    and of every grouped value not looked up (squared), then, for a claim with lookups, of every looked-up entry y
    (whose wire also carries the square of its value y + lo) and of its inverses ``H`` (records x ALPHAS n_l: the
    :class:`sqm.mpc.protocols.flp.Products` part); records padded to R' (with zeros, a looked-up entry with -lo:
    its value 0) and split among the G nodes in order; the columns' polynomials and weights (a digit column's from
    the coins, a value column's the gamma of its record and group, a looked-up entry's the gammas of its record and
    groups, an inverse's its beta_h: :func:`weights`); and the claim z = sum_k alpha_k (sum gamma s + sum beta_h)
    over the node's records (the weighted record norms, and h (alpha - y) = 1 for each real record's lookups).
    Shares in, shares out: every step is affine (a padded entry is a public constant, every party's share of it)."""
    rows = X.shape[0]
    padded, m_dig, m_x, m_look = layout(rows, claim, g)
    _, s, _, col, _ = _split(W, claim)
    kx, ng = sum(col), len(claim.groups)
    cols = [j for j, _ in claim.squared]
    low, top, few = _digit_order(claim)
    per = padded // g
    nl = len(claim.looked)
    wcol = [c if c < kx else c + ng for c in range(kx + sum(claim.widths[1]))]  # digit column -> witness column
    base = max(1, m_dig + m_x)  # a zero digit where there is nothing else (:func:`polys`)
    Y = np.zeros((g, base + m_look), dtype=np.int64)
    off = 0
    kern = _steps()
    parts = [(W, [wcol[c] for c in low]), (W, [wcol[c] for c in top]), (W, [wcol[c] for c in few]), (X, cols)]
    if m_look:
        if H is None or H.shape != (rows, lookup.ALPHAS * nl):
            raise ProtocolError(f"a claim with {nl} looked-up columns needs its inverses ({rows} x "
                                f"{lookup.ALPHAS * nl})")
        parts += [(W, [w for _, w, _ in claim.looked])] + [(H, list(range(i * nl, (i + 1) * nl)))
                                                          for i in range(lookup.ALPHAS)]
    for src, idx in parts:
        if idx and (kern is None or not _gather_compiled(kern.gather, src, rows, idx, g, per, Y, off)):
            view = Y[:, off:off + per * len(idx)].reshape(g, per, len(idx))  # node k: records k per .. (k+1) per - 1
            for k in range(g):
                n = max(0, min(per, rows - k * per))
                view[k, :n] = src[k * per:k * per + n][:, idx]
                view[k, n:] = 0
        off += per * len(idx)
        if off == m_dig + m_x:
            off = base
    real = np.clip(rows - per * np.arange(g), 0, per)  # the real records of each node
    if m_look and rows < padded:  # a padded record's looked-up entries: -lo, so that its values' squares are 0
        pad = np.array([(-claim.lo[j]) % p for j, _, _ in claim.looked], dtype=np.int64)
        view = Y[:, base:base + per * nl].reshape(g, per, nl)
        for k in range(g):
            view[k, real[k]:] = pad
    polys, beta = weights(rows, claim, co, p, g)
    z = 0
    if claim.groups:
        sp = np.zeros((padded, len(claim.groups)), dtype=np.int64)
        sp[:rows] = s
        per_node = modarith.matmul_mod(sp.reshape(g, -1), co["gamma"].reshape(-1), p)
        z = int(modarith.sum_mod(modarith.mul_mod(co["alpha"], per_node, p), 0, p))
    if m_look:  # sum over a node's real records of their beta_h, each h (alpha - y) being 1
        bh = co["beta_h"].reshape(lookup.ALPHAS, per, nl).sum(axis=(0, 2)) % p  # below 2^63: few alphas, columns
        run = np.concatenate([[0], np.cumsum(bh) % p]).astype(np.int64)  # per < 2^21: the cumsum stays below 2^63
        z = (z + int(modarith.sum_mod(modarith.mul_mod(co["alpha"], run[real], p), 0, p))) % p
    return Y, polys, beta, z


def weights(rows: int, claim: Claim, co, p: int, g: int = flp.ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The grid's public column polynomials (:func:`polys`) and weights (:func:`grid`): a digit column's from the
    coins, a value column's the gamma of its record and group, a looked-up entry's the sum of the gammas of its
    record and groups (its value's square, on its wire; 0 in no group), an inverse's its beta_h."""
    padded, m_dig, m_x, m_look = layout(rows, claim, g)
    out = [np.zeros(1, np.int64)] if m_dig + m_x == 0 else [
        co["beta"], co["gamma"][:, np.array([q for _, q in claim.squared], dtype=np.int64)].reshape(-1)]
    if m_look:  # a looked-up value's wire: the gammas of its record and groups (its square); its inverses': beta_h
        member = np.array([[int(j in cols) for j, _, _ in claim.looked] for cols, _ in claim.groups],
                          dtype=np.int64).reshape(len(claim.groups), len(claim.looked))
        out += [modarith.matmul_small_mod(co["gamma"], member, p).reshape(-1), co["beta_h"]]
    return polys(rows, claim, p, g), np.concatenate(out)


@functools.lru_cache(maxsize=8)
def polys(rows: int, claim: Claim, p: int, g: int = flp.ROWS) -> np.ndarray:
    """The grid's public column polynomials (:func:`sqm.mpc.protocols.flp.column_polys`): a digit's zero at its
    allowed values, a value's the square (the same for every chunk of ``rows`` records: cached, read-only)."""
    padded, m_dig, m_x, _ = layout(rows, claim, g)
    if m_dig + m_x == 0:
        out = flp.column_polys(np.ones((1, BASE), np.int64), np.arange(BASE)[None, :], p)
    else:
        per = padded // g
        low, top, few = _digit_order(claim)
        roots = dict(_top_roots(claim))
        one = np.array([0, -1])  # the factor 0 u - (-1) = 1: a top digit's repeated allowed values, the square's pad
        lins, allrs = [np.ones((per * len(low), BASE), np.int64)], [np.tile(np.arange(BASE, dtype=np.int64),
                                                                            (per * len(low), 1))]
        for part in ([list(roots[c]) for c in top], [list(roots[c]) for c in few]):
            top_lin = np.array([[1] * len(t) + [0] * (BASE - len(t)) for t in part], np.int64).reshape(-1, BASE)
            top_r = np.array([t + [one[1]] * (BASE - len(t)) for t in part], np.int64).reshape(-1, BASE)
            lins.append(np.tile(top_lin, (per, 1)))  # the grid's order (:func:`grid`): per part, record by record
            allrs.append(np.tile(top_r, (per, 1)))
        lins.append(np.tile(np.array([1, 1] + [one[0]] * (BASE - 2), np.int64), (m_x, 1)))  # the squares
        allrs.append(np.tile(np.array([0, 0] + [one[1]] * (BASE - 2), np.int64), (m_x, 1)))
        lin, allr = np.vstack(lins), np.vstack(allrs)
        out = flp.column_polys(lin, allr, p)
    out.flags.writeable = False
    return out


def _distinct(values) -> list[int]:
    """A top digit's allowed values, each once (its polynomial's zeros: the same set, fewer factors)."""
    return list(dict.fromkeys(int(v) for v in values))


@functools.lru_cache(maxsize=16)
def _digit_order(claim: Claim) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The witness's digit columns (values' then slacks') split into the low digits (allowed values 0..7), the top
    ones of more than :data:`sqm.mpc.protocols.flp.LOW_DEGREE` allowed values and the other top ones, each in
    order: the grid lays each part out on its own (the low digits first, one polynomial for all; the top digits of
    few values beside the squares, in the statement's part of low degree, :func:`statement`)."""
    col, grp = claim.widths
    low: list[int] = []
    off = 0
    for k in col + grp:
        low += list(range(off, off + k - 1))
        off += k
    tops = _top_roots(claim)
    return (tuple(low), tuple(c for c, r in tops if len(r) > flp.LOW_DEGREE),
            tuple(c for c, r in tops if len(r) <= flp.LOW_DEGREE))


@functools.lru_cache(maxsize=16)
def _top_roots(claim: Claim) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Each top digit's witness digit column and its allowed values, each once (:func:`_distinct`), in order: the
    values' then the slacks'."""
    col, grp = claim.widths
    out, off = [], 0
    for k, width, t in zip(col + grp, _widths(claim) + [lim for _, lim in claim.groups],
                           claim.lookups + (False,) * len(grp), strict=True):
        off += k
        if k and not t:  # a looked-up column has no digits
            out.append((off - 1, tuple(_distinct(digit_roots(width)[-1]))))
    return tuple(out)


@functools.lru_cache(maxsize=8)
def statement(rows: int, claim: Claim, p: int, g: int = flp.ROWS) -> flp.Statement:
    """The grid's statement (:func:`sqm.mpc.protocols.flp.split` of :func:`polys`): the low digits and the top
    digits of many values in a part of degree 8, the top digits of few values and the squares in a part of degree
    at most 3 where there are both; then, for a claim with lookups, the products h (alpha - y) of each looked-up
    value and alpha (a :class:`sqm.mpc.protocols.flp.Products` part; cached, as :func:`polys`)."""
    st = flp.split(polys(rows, claim, p, g), p)
    m_look = layout(rows, claim, g)[3]
    if not m_look:
        return st
    return flp.Statement(st.bounds + (st.bounds[-1] + m_look,),
                         st.polys + (flp.Products(m_look // (1 + lookup.ALPHAS), lookup.ALPHAS,
                                                  tuple(claim.lo[j] for j, _, _ in claim.looked)),))


def soundness_error(p: int, rows: int = 0, claim: Claim | None = None) -> float:
    """The probability that a client's false statement passes one chunk's check (the module docstring): 3/p and
    the identity checks' error for a statement of a part of degree 8, one of degree at most 3 and, for a claim
    with lookups (a chunk of ``rows`` records), one of degree 2 (the products) and each table's identities
    (:func:`sqm.mpc.protocols.lookup.error`): an upper bound for every claim without lookups
    (:func:`sqm.mpc.protocols.flp.statement_error`)."""
    g = flp.ROWS
    out = 3 / p + (BASE + flp.LOW_DEGREE) * g / (p - BASE * g - 1)
    if claim is not None and claim.tables:
        out += 2 * g / (p - BASE * g - 1)
        for t, w in enumerate(claim.tables):
            out += lookup.error(int(rows) * sum(1 for *_, q in claim.looked if q == t), w, p)
    return out


# ----- the compiled steps (``_flp_kernel.c``, :mod:`sqm.mpc.protocols.flp`'s optional extension) ----------------

_PTR, _I64 = ctypes.c_void_p, ctypes.c_int64


class _Steps(NamedTuple):
    """The compiled kernel's functions for the steps around the proof: the witness, the weighted digit sums, the
    grid's gather and the sharing's linear combinations."""

    witness: Any
    weighted: Any
    gather: Any
    lincomb: Any


def _step_functions() -> _Steps | None:
    """The compiled steps (unchecked), or None where the kernel was not built or does not load."""
    fns = (kernel_function(flp.KERNEL, "sqm_ip_witness", [_PTR, _I64, _I64, _PTR, _PTR, _PTR, _I64, _PTR, _PTR, _PTR,
                                                       _PTR, _I64, _PTR]),
           kernel_function(flp.KERNEL, "sqm_ip_weighted", [_PTR, _I64, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _I64, _PTR]),
           kernel_function(flp.KERNEL, "sqm_ip_gather", [_PTR, _I64, _I64, _PTR, _I64, _I64, _I64, _PTR, _I64, _I64]),
           kernel_function(flp.KERNEL, "sqm_ip_lincomb", [_PTR, _PTR, _I64, _I64, _I64, _PTR]))
    return None if any(f is None for f in fns) else _Steps(*fns)


@functools.lru_cache(maxsize=1)
def _steps() -> _Steps | None:
    """:func:`_step_functions` where they give the numpy functions' values on a fixed public sample
    (:func:`_step_sample`), else None (also where ``SQM_FLP_KERNEL=numpy`` asks for numpy)."""
    if numpy_forced(flp.FORCE_NUMPY):
        return None
    k = _step_functions()
    if k is None:
        return None
    try:
        for block, claim, p, vals, lag in _step_sample():
            W = _witness_compiled(k.witness, block, claim)
            if W is None or not np.array_equal(W, _witness_numpy(block, claim)):
                return None
            col = claim.widths[0]
            got = _weighted_compiled(k.weighted, W[:, :sum(col)], col, claim.value_weights, p, None)
            if got is None or not np.array_equal(got, _weighted_numpy(W[:, :sum(col)], col, claim.value_weights, p)):
                return None
            comb = _lincomb_compiled(k.lincomb, vals, lag, p)
            terms = [modarith.scalar_mul_mod(v % p, c, p) for v, c in zip(vals, lag, strict=True)]
            want = modarith.sum_mod(np.stack(terms), 0, p)
            if comb is None or not np.array_equal(comb, want):
                return None
            Y = np.full((3, 2 + 2 * 2), -1, dtype=np.int64)
            if not _gather_compiled(k.gather, W, W.shape[0], [1, 0], 3, 2, Y, 1) or \
                    not np.array_equal(Y[:, 1:5].reshape(3, 2, 2), _gather_numpy(W, [1, 0], 3, 2)) or \
                    (Y[:, 0] != -1).any() or (Y[:, 5] != -1).any():
                return None
    except Exception:  # a kernel that fails its first calls: the numpy code
        return None
    return k


def _gather_numpy(src, idx, g: int, per: int) -> np.ndarray:
    out = np.zeros((g, per, len(idx)), dtype=np.int64)
    for k in range(g):
        n = max(0, min(per, src.shape[0] - k * per))
        out[k, :n] = src[k * per:k * per + n][:, idx]
    return out


def _step_sample():
    """Fixed public blocks, claims and combinations (from a fixed seed: nothing secret): fields of 13 to 61 bits,
    ranges of one value to 2^40, groups of one and several columns."""
    from sqm.mpc.shares.field import prime_below

    rng = secure_generator(20262)  # a fixed public sample (its seed is here)
    out = []
    for bits, rows, lo, hi in ((13, 5, (-3, 0, 2), (3, 0, 9)), (42, 4, (-4096, -1, 0), (4096, 1, 1 << 20)),
                               (61, 3, (-(1 << 40), 5, -7), (1 << 40, 5, 8))):
        p = prime_below(bits)
        x = np.stack([rng.integers(a, b + 1, size=rows) for a, b in zip(lo, hi, strict=True)], axis=1)
        groups = (((0, 2), max(int(a) ** 2 + int(b) ** 2 for a, b in zip(x[:, 0], x[:, 2], strict=True)) + 3),
                  ((1,), max(lo[1] ** 2, hi[1] ** 2)))
        claim = Claim(lo, hi, groups if Claim(lo, hi, groups).needed_bound() < p else ())
        vals = [rng.integers(0, p, size=7, dtype=np.int64) for _ in range(3)]
        out.append((x, claim, p, vals, [int(v) for v in rng.integers(0, p, size=3)]))
    return out


def _c(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _witness_compiled(fn, block, claim: Claim) -> np.ndarray | None:
    """:func:`_witness_numpy`'s witness from the compiled kernel, or None where it cannot (a block outside its
    claim: the numpy function names the refusal)."""
    x = _c(block)
    if x.ndim != 2 or x.shape[1] != len(claim.lo) or len(claim.groups) > 4096:
        return None
    col, grp = claim.widths
    lo, hi = _c(claim.lo), _c(claim.hi)
    goff = _c(np.cumsum([0] + [len(c) for c, _ in claim.groups]))
    gcols = _c([j for c, _ in claim.groups for j in c] or [0])
    lim = _c([lim for _, lim in claim.groups] or [0])
    kc, kg = _c(col or [0]), _c(grp or [0])
    out = np.empty((x.shape[0], claim.witness_width), dtype=np.int64)
    rc = fn(x.ctypes.data, x.shape[0], x.shape[1], lo.ctypes.data, hi.ctypes.data, kc.ctypes.data,
            len(claim.groups), goff.ctypes.data, gcols.ctypes.data, lim.ctypes.data, kg.ctypes.data,
            claim.witness_width, out.ctypes.data)
    return out if rc == 0 else None


def _weighted_compiled(fn, digits, widths, w, p: int, add) -> np.ndarray | None:
    """:func:`_weighted` from the compiled kernel (``add``: None or one field element per block), or None where it
    cannot run."""
    digits = np.asarray(digits)
    n = len(widths)
    if p % 2 == 0 or p >= 1 << 62 or n > 65536 or digits.ndim != 2 or digits.dtype != np.int64 or \
            digits.shape[1] != sum(widths):
        return None
    rows = digits.shape[0]
    if rows == 0:
        return np.zeros((0, n), dtype=np.int64)
    if digits.shape[1] > 1 and digits.strides[1] != 8:
        digits = np.ascontiguousarray(digits)
    starts = _c(np.cumsum([0] + list(widths[:-1])) if n else [0])
    w = _c(w if sum(widths) else [0])
    a = _c(np.zeros(n) if add is None else add) if n else _c([0])
    out = np.empty((rows, n), dtype=np.int64)
    stride = digits.strides[0] // 8 if rows > 1 else digits.shape[1]
    rc = fn(digits.ctypes.data, rows, stride, n, starts.ctypes.data, _c(widths or [0]).ctypes.data, w.ctypes.data,
            a.ctypes.data, p, out.ctypes.data)
    return out if rc == 0 else None


def _gather_compiled(fn, src, rows: int, idx, g: int, per: int, Y: np.ndarray, off: int) -> bool:
    """One part of :func:`grid`'s Y (columns ``off`` on) from the compiled kernel; False where it cannot run."""
    src = np.asarray(src)
    if src.dtype != np.int64 or src.ndim != 2 or not Y.flags.c_contiguous or src.shape[0] < rows:
        return False
    if src.shape[1] > 1 and src.strides[1] != 8 or src.strides[0] % 8:
        src = np.ascontiguousarray(src)
    stride = src.strides[0] // 8 if src.shape[0] > 1 else src.shape[1]
    ix = _c(idx or [0])
    return fn(src.ctypes.data, rows, stride, ix.ctypes.data, len(idx), g, per, Y.ctypes.data, Y.shape[1], off) == 0


def _lincomb_compiled(fn, vals, coef, p: int) -> np.ndarray | None:
    """sum_k coef[k] vals[k] mod p (arrays of one shape, coefficients in [0, p)) from the compiled kernel, or None
    where it cannot run."""
    if p % 2 == 0 or p >= 1 << 62 or not 1 <= len(vals) <= 256:
        return None
    arrs = [_c(v) for v in vals]
    if any(a.shape != arrs[0].shape for a in arrs):
        return None
    ptrs = (ctypes.c_void_p * len(arrs))(*[a.ctypes.data for a in arrs])
    c = _c([int(v) % p for v in coef])
    out = np.empty(arrs[0].shape, dtype=np.int64)
    rc = fn(ctypes.addressof(ptrs), c.ctypes.data, len(arrs), arrs[0].size, p, out.ctypes.data)
    return out if rc == 0 else None


# ----- the protocol ----------------------------------------------------------------------------------------------

def seeded(client: int, M: int, t: int) -> list[int]:
    """The t parties (the lowest besides ``client``) whose shares of ``client``'s witness and proof are drawn from a
    seed the client sends them: a degree-t polynomial is free at t points besides the secret."""
    return [j for j in range(M) if j != client][:t]


def seeded_shares(secret, client: int, M: int, t: int, p: int) -> dict[int, object]:
    """``client``'s Shamir sharing (degree t) of ``secret`` for every party, itself included: a 32-byte seed to each
    party of :func:`seeded` (its share is the AES-CTR stream of the seed, :func:`expand`), the shares the polynomial
    through the secret and those points gives to the others (the client keeps its own)."""
    return _seeded_sharing(secret, client, M, t, p, own=True)[0]


def _seeded_sharing(secret, client: int, M: int, t: int, p: int, own: bool):
    """(:func:`seeded_shares`' dict, without the client's own share unless ``own``; the secret and the seeded
    shares; their points)."""
    secret = np.asarray(secret, dtype=np.int64)
    free = seeded(client, M, t)
    seeds = {j: fresh_bytes(32) for j in free}
    vals = [secret] + [expand(seeds[j], secret.shape, p) for j in free]
    points = [0] + [j + 1 for j in free]
    out: dict[int, object] = dict(seeds)
    for j in range(M):
        if j not in free and (own or j != client):
            out[j] = _through(vals, points, j + 1, p)
    return out, vals, points


def witness_shares(W, x, claim: Claim, client: int, M: int, t: int, p: int) -> tuple[dict[int, object], np.ndarray]:
    """``client``'s sharing of its witness ``W`` for every other party (:func:`seeded_shares`: seeds to the t lowest
    others, shares to the rest) and its own share of its values (:func:`values` of its own share of W), by
    linearity instead of through that share: with Lagrange coefficients l_0 (the secret) and l_j (the seeded
    shares E_j) at its own point (they sum to 1), values(l_0 W + sum l_j E_j) = l_0 x + sum l_j values(E_j), ``x``
    its integers as field elements.  The same field elements, without combining the whole witness once more."""
    out, vals, points = _seeded_sharing(W, client, M, t, p, own=False)
    mine = [np.asarray(x, dtype=np.int64)] + [values(e, claim, p) for e in vals[1:]]
    return out, _through(mine, points, client + 1, p)


def blind_shares(client: int, M: int, t: int, m: int, p: int) -> tuple[np.ndarray, dict[int, object]]:
    """``client``'s proof blinds (m uniform field elements) and their degree-t sharing for every other party: a
    32-byte seed to each of the t + 1 lowest others (their shares are its AES-CTR stream, :func:`expand`, and the
    blinds the polynomial through them at 0: uniform, unknown to any t of them), the shares that polynomial gives
    to the rest."""
    free = seeded(client, M, t + 1)
    seeds = {j: fresh_bytes(32) for j in free}
    vals = [expand(seeds[j], (m,), p) for j in free]
    xs = [j + 1 for j in free]
    out: dict[int, object] = dict(seeds)
    for j in range(M):
        if j != client and j not in free:
            out[j] = _through(vals, xs, j + 1, p)
    return _through(vals, xs, 0, p), out


def _through(vals, xs, at: int, p: int) -> np.ndarray:
    """The polynomial of degree len(xs) - 1 through (xs[i], vals[i]) (field elements) at ``at``: with small
    coefficients (few parties) one int64 pass over signed coefficients, else products reduced one at a time."""
    lag = [int(c) for c in shamir.lagrange_at(xs, at, p)]
    k = _steps()
    out = None if k is None else _lincomb_compiled(k.lincomb, vals, lag, p)
    if out is not None:
        return out
    signed = [c if c <= p // 2 else c - p for c in lag]
    if sum(abs(c) for c in signed) * p < 1 << 63:
        acc = vals[0] * np.int64(signed[0])
        for c, v in zip(signed[1:], vals[1:], strict=True):
            acc += v * np.int64(c)
        return acc % p
    acc = np.zeros_like(vals[0])
    for c, v in zip(lag, vals, strict=True):
        acc = modarith.add_mod(acc, modarith.scalar_mul_mod(v, c, p), p)
    return acc


def expand(seed: bytes, shape, p: int) -> np.ndarray:
    """A seeded party's share: uniform field elements from the seed's AES-CTR stream
    (:func:`sqm.mpc.shares.randomness.field_stream`)."""
    return field_stream(seed, shape, p)
