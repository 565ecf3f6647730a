"""A fully linear proof (FLP, Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai 2019; the construction behind Prio3) of
sum_{k, j} alpha_k beta_j g_j(Y[k, j]) = z, with g_j(y) = y^2 - c_j y (c_j in {0, 1}), for a G x m grid Y that the
verifiers hold only as Shamir shares and public weights alpha (per row) and beta (per column).

With c_j = 1 every g_j(Y[k, j]) is zero exactly when Y[k, j] is a bit; with c_j = 0 it is the square, whose
weighted sum a claim z (linear in shares) must match.  The prover holds Y in the clear.  It defines, per column j,
the polynomial U_j of degree G with U_j(0) = a_j (a uniform blind) and U_j(k) = Y[k - 1, j] at the nodes k = 1..G.
Then P(x) = sum_j beta_j g_j(U_j(x)) has degree 2G and sum_k alpha_k P(k) is the statement's left side.  The
proof is (a, P(0), ..., P(2G)): m + 2G + 1 field elements.

The verifiers hold shares of Y and of the proof.  Everything they compute is linear in those shares
(:func:`query`): sum_k alpha_k P(k) (compared with z), and at a point r drawn after the proof was shared, U_j(r)
for every column and P(r).  They open these (linear combinations of degree-t sharings: an opening reveals its value
alone) and accept iff P(r) = sum_j beta_j g_j(U_j(r)) (:func:`decide`) and the sum is z.

Soundness: if the shared P is not sum_j beta_j g_j(U_j), the two polynomials of degree <= 2G differ and agree at a
random r (drawn from the p - 2G - 1 points outside the nodes) with probability <= 2G / (p - 2G - 1)
(:func:`error_bound`); if it is, the sum is exactly the statement's left side.  Zero knowledge: for r outside the
nodes, U_j(r) is uniform (the blind enters with a non-zero Lagrange coefficient) and P(r) is its function, so the
opened values are simulated from nothing.

Cost: the prover extends the columns to G more points (a (G x (G+1)) by ((G+1) x m) product) and squares 2G + 1
rows; each verifier makes one (1 x (G+1)) by ((G+1) x m) product; m + 3 values are opened.  ``G`` (:data:`ROWS`)
trades the prover's work against the opening.
"""
from __future__ import annotations

import functools

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.shares import modarith
from sqm.mpc.shares.shamir import lagrange_at

ROWS = 32  # G: the polynomials' degree (the nodes 1..G); see the module docstring for the trade-off
BLOCK = 32768  # columns the prover extends at once


def proof_length(m: int, g: int = ROWS) -> int:
    return int(m) + 2 * int(g) + 1


def error_bound(p: int, g: int = ROWS) -> float:
    """The probability that a false statement passes the identity check: 2G / (p - 2G - 1)."""
    return 2 * g / (p - 2 * g - 1)


@functools.lru_cache(maxsize=16)
def _extension(g: int, p: int) -> np.ndarray:
    """E (G x (G+1)): row i holds the Lagrange coefficients at G + 1 + i of the nodes 0..G."""
    return np.array([lagrange_at(range(g + 1), g + 1 + i, p) for i in range(g)], dtype=np.int64)


def _gadget(U: np.ndarray, c: np.ndarray, beta, p: int) -> np.ndarray:
    """sum_j beta_j (U[k, j]^2 - c_j U[k, j]) for each row k."""
    sq = modarith.sub_mod(modarith.mul_mod(U, U, p), U * c[None, :], p)
    return modarith.rowdot_mod(sq, np.broadcast_to(np.asarray(beta, dtype=np.int64), sq.shape), p)


def prove(Y, c, beta, p: int, rng: np.random.Generator) -> np.ndarray:
    """The proof (a, P(0..2G)) for the grid ``Y`` (G x m field elements), column kinds ``c`` (0/1) and weights
    ``beta``; ``rng`` draws the blinds."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    c = np.asarray(c, dtype=np.int64)
    U = np.empty((g + 1, m), dtype=np.int64)
    U[0] = rng.integers(0, p, size=m, dtype=np.int64)
    U[1:] = Y
    head = _gadget(U, c, beta, p)  # P(0..G)
    E = _extension(g, p)
    tail = np.zeros(g, dtype=np.int64)  # P(G+1..2G), over blocks of columns (the products stay in cache)
    for s in range(0, m, BLOCK):
        part = _gadget(modarith.matmul_mod(E, U[:, s:s + BLOCK], p), c[s:s + BLOCK], beta[s:s + BLOCK], p)
        tail = modarith.add_mod(tail, part, p)
    return np.concatenate([U[0], head, tail])


def draw_point(rng: np.random.Generator, p: int, g: int = ROWS) -> int:
    """A query point uniform outside the nodes 0..2G."""
    return int(rng.integers(2 * g + 1, p))


def query(Y, proof, alpha, r: int, p: int) -> np.ndarray:
    """A verifier's shares of (sum_k alpha_k P(k), P(r), U(r) (m values)) from its shares of the grid ``Y`` and
    of ``proof``: every step linear (public coefficients)."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    proof = np.asarray(proof, dtype=np.int64)
    if proof.shape != (proof_length(m, g),):
        raise UsageError(f"a proof for a {g} x {m} grid has {proof_length(m, g)} entries, got {proof.shape}")
    a, pv = proof[:m], proof[m:]
    lu = lagrange_at(range(g + 1), r, p)
    ur = modarith.add_mod(modarith.scalar_mul_mod(a, lu[0], p),
                          modarith.matmul_mod(np.array([lu[1:]], dtype=np.int64), Y, p)[0], p)
    lp = np.array(lagrange_at(range(2 * g + 1), r, p), dtype=np.int64)
    pr = modarith.sum_mod(modarith.mul_mod(lp, pv, p), 0, p)
    total = modarith.sum_mod(modarith.mul_mod(np.asarray(alpha, dtype=np.int64), pv[1:g + 1], p), 0, p)
    return np.concatenate([np.array([total, pr], dtype=np.int64), ur])


def decide(opened, c, beta, p: int) -> bool:
    """The opened (sum, P(r), U(r)) pass the identity check P(r) = sum_j beta_j g_j(U_j(r))."""
    opened = np.asarray(opened, dtype=np.int64)
    ur = opened[2:]
    return int(_gadget(ur[None, :], np.asarray(c, dtype=np.int64), beta, p)[0]) == int(opened[1]) % p
