"""Secure comparison on the runtime's Shamir shares: which records' squared norm is within a public limit.

A job with a row limit (:attr:`sqm.mpc.protocols.backend.Job.row_limit`) keeps only the records whose squared norm over
all the program's variables, sum_j x_ij^2, is at most the limit, without any party learning which: each record's
contribution is multiplied by a shared bit [v_i <= B], as membership hiding multiplies it by its membership.
No client holds a whole record (each holds its own columns), so no client could check this itself.

The protocol (semi-honest, t < M / 2, among the workers of the evaluation, at least 2t + 1 of them):

1. v_i = sum_j x_ij^2 on shares (degree 2t), one degree reduction;
2. [v <= B] = 1 - LSB(2 (B - v) mod p): for |B - v| < p / 2 (the field is sized so), 2 (B - v) mod p is even
   exactly when B - v >= 0 (Nishide and Ohta, PKC 2007, section 4);
3. LSB(x): the workers open c = x + r for a uniform r in F_p whose bits r_0..r_{k-1} are shared; then
   LSB(x) = c_0 xor r_0 xor [c < r] (p is odd; x = c - r, or c - r + p when the sum wrapped, i.e. c < r);
4. [c < r] for public c and shared bits: with d_i = 1 - (c_i xor r_i) (linear in r_i) and the suffix products
   Q_i = prod_{j >= i} d_j (Q_k = 1), [c < r] = sum_i (1 - c_i) (Q_{i+1} - Q_i): the term of the highest bit
   where c and r differ, counted when c has 0 there.  The suffix products take at most 2k products in
   2 log2(k) rounds (a Brent-Kung scan, :func:`suffix_products`);
5. the random bits: t + 1 workers share uniform bits from their cryptographic generators; the parties XOR them
   (a xor b = a + b - 2ab, ceil(log2 (t + 1)) rounds), so a bit is unknown to any t parties (they miss at least
   one contributor); r = sum_i 2^i r_i is made uniform in F_p by rejection: [r >= p] is computed from p's form
   2^k - m (:func:`at_least_p`: a product of the top bits and a comparison of the few low ones, about k + log2 m
   products) and opened to every party (it says only which draws are redrawn, a share m / 2^k of them).

What each party receives: shares (uniform, t of them independent of the secrets), c = x + r (uniform in F_p
whatever x is) and the rejection bits (independent of every input).  A worker that deviates (shares a value
other than a bit, sends a wrong share) is not detected by this module: the openings check that the shares
lie on one polynomial of degree t when there are t + 2 or more senders, nothing more.

Written by hand because MPyC's own comparison (``mpc.lt``) works on its secure types, whose input and output
unpickle what peers send (see :mod:`bench.stock`); this module uses the runtime's typed frames only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.net import wire
from sqm.mpc.protocols import sharing


async def mul(ctx, a, b, p: int, workers, shape) -> np.ndarray | None:
    """Shares of a * b (elementwise, degree t) from shares of a and b, among ``workers`` (one degree reduction;
    None at a party that is no worker, which takes part with ``shape`` only)."""
    y = modarith.mul_mod(a, b, p) if ctx.pid in workers else None
    return await sharing.reshare(ctx, y, p, workers, tuple(shape), receivers=workers)


async def random_bits(ctx, shape, p: int, workers) -> np.ndarray | None:
    """Shares of uniform random bits of ``shape``: the XOR of one bit from each of the first t + 1 workers, each
    drawn from that worker's cryptographic generator (``ctx.rng``); any t parties miss at least one of them."""
    shape = tuple(int(s) for s in shape)
    mine = ctx.pid in workers
    dealers = list(workers)[:ctx.t + 1]
    out = {}
    if ctx.pid in dealers:
        b = ctx.rng.integers(0, 2, size=shape, dtype=np.int64)
        sh = shamir.share(b, ctx.M, ctx.t, p, ctx.rng)
        out = {j: sh[j] for j in workers}
    got = await ctx.send_recv(out, dealers if mine else [], wire.shares(shape, p), "random bits")
    bits: list[Any] = list(got) if mine else [None] * len(dealers)  # shares at a worker, None elsewhere
    while len(bits) > 1:  # pairwise XOR, a tree of ceil(log2 (t + 1)) rounds
        half = len(bits) // 2
        a = np.stack(bits[0:2 * half:2]) if mine else None
        b = np.stack(bits[1:2 * half:2]) if mine else None
        ab = await mul(ctx, a, b, p, workers, (half,) + shape)
        rest = bits[2 * half:]
        if mine:  # a + b - 2ab
            x = modarith.sub_mod(modarith.add_mod(a, b, p), modarith.small_mul_mod(ab, 2, p), p)
            bits = list(x) + rest
        else:
            bits = [None] * half + rest
    return bits[0]


def public_bits(c, k: int) -> np.ndarray:
    """The k low bits of the non-negative integers ``c`` (shape (k, *c.shape), bit 0 first)."""
    c = np.asarray(c, dtype=np.int64)
    return np.stack([(c >> i) & 1 for i in range(k)])


async def suffix_products(ctx, D, p: int, workers, shape) -> np.ndarray | None:
    """Shares of Q_i = prod_{j >= i} D_j for i = 0..k-1 (``D``: shares, (k, *rest)), by the Brent-Kung scan on the
    reversed sequence: at most 2k products in 2 log2(k) rounds (each round one batch of products, one degree
    reduction)."""
    k, rest = int(shape[0]), tuple(int(s) for s in shape[1:])
    mine = ctx.pid in workers
    a = None if D is None else D[::-1].copy()  # prefix products of a are the suffix products of D, reversed

    async def step(targets, s):
        prod = await mul(ctx, None if a is None else a[targets - s], None if a is None else a[targets], p, workers,
                         (len(targets),) + rest)
        if mine:
            assert a is not None  # a worker holds D
            a[targets] = prod

    s = 1
    while s < k:  # up-sweep: a[i] = product of the block of 2s ending at i
        targets = np.arange(2 * s - 1, k, 2 * s)
        if targets.size:
            await step(targets, s)
        s *= 2
    s //= 2
    while s >= 1:  # down-sweep: the prefixes in between
        targets = np.arange(3 * s - 1, k, 2 * s)
        if targets.size:
            await step(targets, s)
        s //= 2
    return None if a is None else a[::-1]


async def public_less_than(ctx, c_bits, r_bits, p: int, workers, shape) -> np.ndarray | None:
    """Shares of [c < r] for public c (its bits ``c_bits``, (k, *shape), known to the workers) and shared bits
    ``r_bits`` (k, *shape) of r (step 4 of the module's protocol)."""
    k = int(np.shape(c_bits)[0]) if c_bits is not None else int(shape[0])
    shape = tuple(int(s) for s in shape)
    rest = shape[1:]
    mine = ctx.pid in workers
    D = None
    if mine:  # d_i = 1 - (c_i xor r_i): r_i where c_i = 1, 1 - r_i where c_i = 0
        one_minus = modarith.sub_mod(np.ones_like(r_bits), r_bits, p)
        D = np.where(np.asarray(c_bits) == 1, r_bits, one_minus)
    Q = await suffix_products(ctx, D, p, workers, (k,) + rest)
    if not mine:
        return None
    assert Q is not None  # a worker gets its shares
    nxt = np.concatenate([Q[1:], np.ones((1,) + rest, dtype=np.int64)])
    diff = modarith.sub_mod(nxt, Q, p)  # Q_{i+1} - Q_i
    diff = np.where(np.asarray(c_bits) == 0, diff, 0)
    return modarith.sum_mod(diff, 0, p)


async def product(ctx, F, p: int, workers, shape) -> np.ndarray | None:
    """Shares of prod_i F_i (``F``: shares, (f, *rest), f >= 1) by a tree: f - 1 products in ceil(log2 f)
    rounds."""
    f, rest = int(shape[0]), tuple(int(s) for s in shape[1:])
    mine = ctx.pid in workers
    a = F
    while f > 1:
        half = f // 2
        prod = await mul(ctx, a[0:2 * half:2] if mine else None, a[1:2 * half:2] if mine else None, p, workers,
                         (half,) + rest)
        a = np.concatenate([prod, a[2 * half:]]) if mine else None
        f = half + f % 2
    return a[0] if mine else None


def prime_form(p: int) -> tuple[int, int, int]:
    """(k, ell, L) with p = 2^k - m, ell the bit length of m - 1 (2^ell >= m) and L = 2^ell - m, so that
    p = (2^(k-ell) - 1) 2^ell + L: the rejection step's split of r's bits (:func:`at_least_p`)."""
    k = p.bit_length()
    m = (1 << k) - p
    ell = (m - 1).bit_length()
    return k, ell, (1 << ell) - m


async def at_least_p(ctx, bits, p: int, workers, n: int) -> np.ndarray | None:
    """Shares of [r >= p] for the n values r = sum_i 2^i r_i whose k = bit length of p bits ``bits`` (k, n) are
    shared.  With p = 2^k - m (1 <= m < 2^(k-1), p odd), ell the bit length of m - 1 (so 2^ell >= m) and
    L = 2^ell - m: p = (2^(k-ell) - 1) 2^ell + L, so r >= p exactly when its top k - ell bits are all 1 and its
    low ell bits, read as a number, are at least L.  That is the product of the top bits and, when L > 0, of
    [L - 1 < low] (:func:`public_less_than` on ell bits): k - ell products, plus at most 2 ell + 1, in place of
    the 2k of a comparison with p - 1 over every bit (p below 2^k is the largest prime there: m is small)."""
    k, ell, low_bound = prime_form(p)
    mine = ctx.pid in workers
    factors = bits[ell:] if mine else None
    if low_bound > 0:
        c = public_bits(np.full(n, low_bound - 1), ell) if mine else None
        low = await public_less_than(ctx, c, bits[:ell] if mine else None, p, workers, (ell, n))
        if mine:
            assert low is not None  # a worker gets its shares
            factors = np.concatenate([factors, low[None]])
        else:
            factors = None
    return await product(ctx, factors, p, workers, (k - ell + (low_bound > 0), n))


async def uniform_with_bits(ctx, n: int, p: int, workers) -> np.ndarray | None:
    """Shares of the k = bit length of p bits (k, n) of n values r uniform in F_p (step 5: bits XORed over the
    workers, draws r >= p redrawn; which draws are redrawn is opened to every party)."""
    k = p.bit_length()
    mine = ctx.pid in workers
    bits = await random_bits(ctx, (k, n), p, workers)
    todo = np.arange(n)
    while todo.size:
        over = await at_least_p(ctx, None if bits is None else bits[:, todo], p, workers, todo.size)
        opened = await sharing.open_to(ctx, over, p, range(ctx.M), workers, (todo.size,), degree=ctx.t)
        todo = todo[np.asarray(opened) == 1]  # every party learns which draws were at least p, nothing else
        if todo.size:
            fresh = await random_bits(ctx, (k, todo.size), p, workers)
            if mine:
                assert bits is not None  # a worker gets its shares
                bits[:, todo] = fresh
    return bits


async def lsb(ctx, x, p: int, workers, n: int) -> np.ndarray | None:
    """Shares of the least significant bit of the field elements x (shares, length n) taken in [0, p)."""
    mine = ctx.pid in workers
    k = p.bit_length()
    rb = await uniform_with_bits(ctx, n, p, workers)
    masked = None
    if mine:
        weights = np.array([pow(2, i, p) for i in range(k)], dtype=np.int64)[:, None]
        r = modarith.sum_mod(modarith.mul_mod(rb, weights, p), 0, p)
        masked = modarith.add_mod(x, r, p)
    c = await sharing.open_to(ctx, masked, p, workers, workers, (n,), degree=ctx.t)  # uniform in F_p: r is
    cb = None if c is None else public_bits(c, k)
    w = await public_less_than(ctx, cb, rb, p, workers, (k, n))
    r0 = None if rb is None else rb[0]
    prod = await mul(ctx, r0, w, p, workers, (n,))
    if not mine:
        return None
    assert cb is not None  # opened to every worker
    s = modarith.sub_mod(modarith.add_mod(r0, w, p), modarith.small_mul_mod(prod, 2, p), p)  # r_0 xor w
    return np.where(cb[0] == 1, modarith.sub_mod(np.ones_like(s), s, p), s)


async def at_most(ctx, v, limit: int, p: int, workers, n: int) -> np.ndarray | None:
    """Shares of the bits [v_i <= limit] for shared v (length n), given |limit - v_i| < p / 2 for every i."""
    x = None
    if ctx.pid in workers:
        d = modarith.sub_mod(np.full(n, int(limit) % p, dtype=np.int64), v, p)
        x = modarith.small_mul_mod(d, 2, p)
    low = await lsb(ctx, x, p, workers, n)
    return None if low is None else modarith.sub_mod(np.ones(n, dtype=np.int64), low, p)


def scan_rounds(k: int) -> int:
    """The exchanges of :func:`suffix_products` on k elements: its up- and down-sweep steps that have targets."""
    rounds, s = 0, 1
    while s < k:
        rounds += int(2 * s - 1 < k)
        s *= 2
    s //= 2
    while s >= 1:
        rounds += int(3 * s - 1 < k)
        s //= 2
    return rounds


def row_check_rounds(p: int, t: int) -> int:
    """The exchanges the row norm check adds to a chunk's evaluation, one after the other (the one-way delays it
    adds to the critical path when no draw is redrawn, which happens to a share m / 2^k of them): the norm's
    degree reduction, the random bits (the dealers' shares, then ceil(log2 (t + 1)) XOR rounds), the rejection
    (:func:`at_least_p`: the low bits' scan, the product tree, the opening), the opening of c, the comparison's
    scan, the product for the LSB and the masking of the rows."""
    k, ell, low = prime_form(p)
    factors = k - ell + (low > 0)
    rejection = (scan_rounds(ell) if low > 0 else 0) + (factors - 1).bit_length() + 1
    return 1 + 1 + int(t).bit_length() + rejection + 1 + scan_rounds(k) + 1 + 1  # ceil(log2 (t + 1)) = bit length of t


async def row_norm_within(ctx, S, limit: int, p: int, workers, n: int) -> np.ndarray | None:
    """Shares of [sum_j S_ij^2 <= limit] for each of the n records of ``S`` (this worker's degree-t shares of
    the records, n x variables; None at a party that is no worker)."""
    v2 = modarith.rowdot_mod(S, S, p) if ctx.pid in workers else None
    v = await sharing.reshare(ctx, v2, p, workers, (n,), receivers=workers)
    return await at_most(ctx, v, limit, p, workers, n)
