"""A fully linear proof (FLP, Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai 2019; the construction behind Prio3) of
sum_{k, j} alpha_k beta_j g_j(Y[k, j]) = z, with a polynomial g_j of degree at most d per column, for a G x m grid
Y that the verifiers hold only as Shamir shares and public weights alpha (per row) and beta (per column).

Each g_j is a product of d factors (``lin`` u - ``root``) with ``lin`` in {0, 1} (:func:`column_polys`): with
every ``lin`` 1, g_j(y) = prod (y - root) is zero exactly when y is one of the roots (a digit's range check); with
``lin`` (1, 1, 0, .., 0) and roots (0, 0, -1, .., -1) it is the square y^2, whose weighted sum a claim z (linear in
shares) must match.  The prover holds Y in the clear.  It defines, per column j, the polynomial U_j of degree G
with U_j(0) = a_j (a uniform blind) and U_j(k) = Y[k - 1, j] at the nodes k = 1..G.  Then
P(x) = sum_j beta_j g_j(U_j(x)) has degree dG and sum_k alpha_k P(k) is the statement's left side.  The proof is
(a, P(0), ..., P(dG)): m + dG + 1 field elements.

The verifiers hold shares of Y and of the proof.  Everything they compute is linear in those shares
(:func:`query`): sum_k alpha_k P(k) (compared with z), and at a point r drawn after the proof was shared, U_j(r)
for every column and P(r).  They open these (linear combinations of degree-t sharings: an opening reveals its value
alone) and accept iff P(r) = sum_j beta_j g_j(U_j(r)) (:func:`decide`) and the sum is z.

Soundness: if the shared P is not sum_j beta_j g_j(U_j), the two polynomials of degree <= dG differ and agree at a
random r (drawn from the p - dG - 1 points outside the nodes) with probability <= dG / (p - dG - 1)
(:func:`error_bound`); if it is, the sum is exactly the statement's left side.  Zero knowledge: for r outside the
nodes, U_j(r) is uniform (the blind enters with a non-zero Lagrange coefficient) and P(r) is its function, so the
opened values are simulated from nothing.

Cost: the prover extends the columns to (d - 1) G more points (a ((d-1)G x (G+1)) by ((G+1) x m) product) and
evaluates the factors at dG + 1 rows; each verifier makes one (1 x (G+1)) by ((G+1) x m) product; m + 3 values are
opened.  ``G`` (:data:`ROWS`) trades the prover's work and the error against the blinds and the opening.
"""
from __future__ import annotations

import functools

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.shares import modarith
from sqm.mpc.shares.shamir import lagrange_at

ROWS = 16  # G: the polynomials U_j's degree (the nodes 1..G); see the module docstring for the trade-off
BLOCK = 4096  # columns the prover extends at once (its arrays stay in cache)


def proof_length(m: int, d: int, g: int = ROWS) -> int:
    return int(m) + int(d) * int(g) + 1


def error_bound(p: int, d: int, g: int = ROWS) -> float:
    """The probability that a false statement passes the identity check: dG / (p - dG - 1)."""
    return d * g / (p - d * g - 1)


def column_polys(lin, roots, p: int) -> np.ndarray:
    """The columns' polynomials g_j(u) = prod_i (lin[j, i] u - roots[j, i]) as one (2, m, d) int64 array (``lin``
    in {0, 1}, roots reduced mod p)."""
    lin = np.asarray(lin, dtype=np.int64)
    roots = np.asarray(roots, dtype=np.int64) % p
    if lin.shape != roots.shape or lin.ndim != 2 or not np.isin(lin, (0, 1)).all():
        raise UsageError(f"column polynomials need two equal (m, d) arrays with lin in {{0, 1}}, got {lin.shape} "
                         f"and {roots.shape}")
    return np.stack([lin, roots])


def degree(polys: np.ndarray) -> int:
    return int(polys.shape[2])


@functools.lru_cache(maxsize=16)
def _extension(g: int, points: int, p: int) -> np.ndarray:
    """E (points x (G+1)): row i holds the Lagrange coefficients at G + 1 + i of the nodes 0..G."""
    return np.array([lagrange_at(range(g + 1), g + 1 + i, p) for i in range(points)], dtype=np.int64)


def _gadget(U: np.ndarray, polys: np.ndarray, beta, p: int) -> np.ndarray:
    """sum_j beta_j g_j(U[k, j]) for each row k.  A leading run of columns whose g_j is the digit polynomial
    prod_{v < d} (u - v) (d even) takes d/2 products: (u - v)(u - (d-1-v)) = w + v (d-1-v) with w = u (u - d + 1)."""
    lin, roots = polys
    d = lin.shape[1]
    std = _digit_prefix(polys)
    vals = np.empty(U.shape, dtype=np.int64)
    if std:
        u = U[:, :std]
        w = modarith.mul_mod(u, modarith.sub_mod(u, np.int64((d - 1) % p), p), p)
        acc = w
        for v in range(1, d // 2):
            acc = modarith.mul_mod(acc, modarith.add_mod(w, np.int64(v * (d - 1 - v) % p), p), p)
        vals[:, :std] = acc
    if std < U.shape[1]:
        u = U[:, std:]
        prod = np.ones(u.shape, dtype=np.int64)
        for i in range(d):
            f = modarith.sub_mod(u * lin[None, std:, i], np.broadcast_to(roots[None, std:, i], u.shape), p)
            prod = f if i == 0 else modarith.mul_mod(prod, f, p)
        vals[:, std:] = prod
    return modarith.matmul_mod(vals, np.asarray(beta, dtype=np.int64), p)


def _digit_prefix(polys: np.ndarray) -> int:
    """How many leading columns hold the digit polynomial prod_{v < d} (u - v) (0 for an odd d)."""
    lin, roots = polys
    m, d = lin.shape
    if d % 2 or d < 2:
        return 0
    ok = (lin == 1).all(axis=1) & (roots == np.arange(d)).all(axis=1)
    return m if ok.all() else int(np.argmin(ok))


def prove(Y, polys, beta, p: int, rng: np.random.Generator) -> np.ndarray:
    """The proof (a, P(0..dG)) for the grid ``Y`` (G x m field elements), the columns' polynomials ``polys``
    (:func:`column_polys`) and weights ``beta``; ``rng`` draws the blinds."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    d = degree(polys)
    U = np.empty((g + 1, m), dtype=np.int64)
    U[0] = rng.integers(0, p, size=m, dtype=np.int64)
    U[1:] = Y
    beta = np.asarray(beta, dtype=np.int64)
    E = _extension(g, (d - 1) * g, p)
    head = np.zeros(g + 1, dtype=np.int64)  # P(0..G)
    tail = np.zeros((d - 1) * g, dtype=np.int64)  # P(G+1..dG), over blocks of columns (the products stay in cache)
    for s in range(0, m, BLOCK):
        cols = slice(s, s + BLOCK)
        part = polys[:, cols]
        at_nodes = _gadget_small(Y[:, cols], part, beta[cols], p)  # P(1..G), from small integers when they are
        if at_nodes is None:
            head = modarith.add_mod(head, _gadget(U[:, cols], part, beta[cols], p), p)
        else:
            head = modarith.add_mod(head, np.concatenate([_gadget(U[:1, cols], part, beta[cols], p), at_nodes]), p)
        if E.size:
            ext = _extend(E, U[:, cols], Y[:, cols], p)
            tail = modarith.add_mod(tail, _gadget(ext, part, beta[cols], p), p)
    return np.concatenate([U[0], head, tail])


def _gadget_small(y: np.ndarray, polys: np.ndarray, beta, p: int) -> np.ndarray | None:
    """:func:`_gadget` at the nodes, where the grid holds small signed integers (digits, quantized values): each
    g_j(y) in exact int64 arithmetic (None when the factors' product could reach 2^62), reduced mod p once."""
    lin, roots = polys
    signed = np.where(y > p // 2, y - p, y)
    rs = np.where(roots > p // 2, roots - p, roots)
    big = (int(np.abs(signed).max()) if signed.size else 0) + (int(np.abs(rs).max()) if rs.size else 0)
    if big ** lin.shape[1] >= 1 << 62:
        return None
    prod = np.ones(signed.shape, dtype=np.int64)
    for i in range(lin.shape[1]):
        prod *= signed * lin[None, :, i] - rs[None, :, i]
    return modarith.matmul_mod(prod % p, np.asarray(beta, dtype=np.int64), p)


SPLIT = 23  # below 2^46, E's entries are cut at this bit for the extension's exact float products


def _extend(E: np.ndarray, U: np.ndarray, y: np.ndarray, p: int) -> np.ndarray:
    """E @ U mod p for U = (blinds; y): the blinds' row times E's first column, plus E's other columns times the
    grid y read as signed integers (digits and quantized values are small).

    With E = H 2^23 + L (:data:`SPLIT`, p < 2^46) and |y| G 2^23 < 2^53, H @ y and L @ y are exact float64
    integers; q = floor((H @ y) 2^23 / p + (L @ y) / p) in float64 is off by at most one (V / p is far below
    2^50), so r = (H @ y) 2^23 + L @ y - q p in wrapping int64 is the exact residue, in [-p, 2p), corrected once
    each way.  Otherwise :func:`sqm.mpc.shares.modarith.matmul_small_mod` (limbs of E, Horner's rule mod p)."""
    signed = np.where(y > p // 2, y - p, y)
    big = int(np.abs(signed).max()) if signed.size else 0
    if p >= 1 << (2 * SPLIT) or max(big, 1) * y.shape[0] >= 1 << (53 - SPLIT):
        rest = modarith.matmul_small_mod(E[:, 1:], signed, p)
    else:
        En = E[:, 1:]
        yf = signed.astype(np.float64)
        hi = (En >> SPLIT).astype(np.float64) @ yf
        lo = (En & ((1 << SPLIT) - 1)).astype(np.float64) @ yf
        q = np.floor(hi * ((1 << SPLIT) / p) + lo * (1.0 / p)).astype(np.int64)
        with np.errstate(over="ignore"):
            rest = (hi.astype(np.int64) << SPLIT) + lo.astype(np.int64) - q * np.int64(p)
        rest += p * (rest < 0)
        rest -= p * (rest >= p)
    return modarith.add_mod(rest, modarith.mul_mod(E[:, :1], U[:1], p), p)


def draw_point(rng: np.random.Generator, p: int, d: int, g: int = ROWS) -> int:
    """A query point uniform outside the nodes 0..dG."""
    return int(rng.integers(d * g + 1, p))


def query(Y, proof, alpha, r: int, p: int, d: int) -> np.ndarray:
    """A verifier's shares of (sum_k alpha_k P(k), P(r), U(r) (m values)) from its shares of the grid ``Y`` and
    of ``proof`` (for polynomials of degree ``d``): every step linear (public coefficients)."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    proof = np.asarray(proof, dtype=np.int64)
    if proof.shape != (proof_length(m, d, g),):
        raise UsageError(f"a proof for a {g} x {m} grid has {proof_length(m, d, g)} entries, got {proof.shape}")
    a, pv = proof[:m], proof[m:]
    lu = lagrange_at(range(g + 1), r, p)
    ur = modarith.add_mod(modarith.scalar_mul_mod(a, lu[0], p),
                          modarith.matmul_mod(np.array([lu[1:]], dtype=np.int64), Y, p)[0], p)
    lp = np.array(lagrange_at(range(d * g + 1), r, p), dtype=np.int64)
    pr = modarith.sum_mod(modarith.mul_mod(lp, pv, p), 0, p)
    total = modarith.sum_mod(modarith.mul_mod(np.asarray(alpha, dtype=np.int64), pv[1:g + 1], p), 0, p)
    return np.concatenate([np.array([total, pr], dtype=np.int64), ur])


def decide(opened, polys, beta, p: int) -> bool:
    """The opened (sum, P(r), U(r)) pass the identity check P(r) = sum_j beta_j g_j(U_j(r))."""
    opened = np.asarray(opened, dtype=np.int64)
    ur = opened[2:]
    return int(_gadget(ur[None, :], polys, beta, p)[0]) == int(opened[1]) % p
