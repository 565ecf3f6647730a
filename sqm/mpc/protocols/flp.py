"""A fully linear proof (FLP, Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai 2019; the construction behind Prio3)
that <u, v> = z for vectors u, v that the verifiers hold only as Shamir shares.

The prover holds u and v in the clear (length n).  It lays them out as G rows of m columns (zero-padded) and
defines, per column j, the polynomials U_j and V_j of degree G with U_j(0) = a_j, V_j(0) = a'_j (uniform blinds)
and U_j(k) = u[k - 1, j], V_j(k) = v[k - 1, j] at the nodes k = 1..G.  Then P(x) = sum_j U_j(x) V_j(x) has degree
2G and sum_{k=1..G} P(k) = <u, v>.  The proof is (a, a', P(0), ..., P(2G)): 2m + 2G + 1 field elements.

The verifiers hold shares of u, v and of the proof.  Everything they compute is linear in those shares
(:func:`query`): sum_{k=1..G} P(k) (compared with the claim z), and at a point r drawn after the proof was shared,
U_j(r), V_j(r) for every column and P(r).  They open these (linear combinations of degree-t sharings: an opening
reveals the value alone) and accept iff P(r) = sum_j U_j(r) V_j(r) (:func:`decide`) and the sum is z.

Soundness: if the shared P is not sum_j U_j V_j, the two polynomials of degree <= 2G differ and agree at a random
r (drawn from the p - 2G - 1 points outside the nodes) with probability <= 2G / (p - 2G - 1); if it is, the sum
is exactly <u, v>.  Zero knowledge: for r outside the nodes, U_j(r) and V_j(r) are uniform (the blinds enter with
non-zero Lagrange coefficients) and P(r) is their function, so the opened values are simulated from nothing.

Cost: the prover extends the columns to G more points (a (G x (G+1)) by ((G+1) x m) product, n G multiplications);
each verifier makes O(n) multiplications; 2m + 3 values are opened.  ``G`` trades the prover's work against the
opening (:func:`layout`).
"""
from __future__ import annotations

import functools

import numpy as np

from sqm.mpc.shares import modarith
from sqm.mpc.shares.shamir import lagrange_at

ROWS = 32  # G: the polynomials' degree (the nodes 1..G); see the module docstring for the trade-off


def layout(n: int, rows: int = ROWS) -> tuple[int, int]:
    """(G, m): G rows (the nodes) of m columns holding n values (m >= 1)."""
    g = max(1, min(int(rows), int(n)))
    return g, max(1, -(-int(n) // g))


def proof_length(n: int, rows: int = ROWS) -> int:
    g, m = layout(n, rows)
    return 2 * m + 2 * g + 1


def error_bound(n: int, p: int, rows: int = ROWS) -> float:
    """The probability that a false claim passes one check: 2G / (p - 2G - 1)."""
    g, _ = layout(n, rows)
    return 2 * g / (p - 2 * g - 1)


@functools.lru_cache(maxsize=16)
def _extension(g: int, p: int) -> np.ndarray:
    """E (G x (G+1)): row i holds the Lagrange coefficients at G + 1 + i of the nodes 0..G."""
    return np.array([lagrange_at(range(g + 1), g + 1 + i, p) for i in range(g)], dtype=np.int64)


def _grid(blind, x, g: int, m: int) -> np.ndarray:
    """(G+1) x m: the blinds, then x zero-padded to G m values, row-major."""
    out = np.zeros((g + 1, m), dtype=np.int64)
    out[0] = blind
    flat = out[1:].reshape(-1)
    flat[:x.size] = x.reshape(-1)
    return out


def prove(u, v, p: int, rng: np.random.Generator, rows: int = ROWS) -> np.ndarray:
    """The proof (a, a', P(0..2G)) for field vectors ``u``, ``v`` of one length; ``rng`` draws the blinds."""
    u = np.asarray(u, dtype=np.int64).reshape(-1)
    v = np.asarray(v, dtype=np.int64).reshape(-1)
    g, m = layout(u.size, rows)
    U = _grid(rng.integers(0, p, size=m, dtype=np.int64), u, g, m)
    V = _grid(rng.integers(0, p, size=m, dtype=np.int64), v, g, m)
    E = _extension(g, p)
    head = modarith.rowdot_mod(U, V, p)  # P(0..G)
    tail = modarith.rowdot_mod(modarith.matmul_mod(E, U, p), modarith.matmul_mod(E, V, p), p)  # P(G+1..2G)
    return np.concatenate([U[0], V[0], head, tail])


def draw_point(rng: np.random.Generator, n: int, p: int, rows: int = ROWS) -> int:
    """A query point uniform outside the nodes 0..2G."""
    g, _ = layout(n, rows)
    return int(rng.integers(2 * g + 1, p))


def query(u, v, proof, r: int, p: int, rows: int = ROWS) -> np.ndarray:
    """A verifier's shares of (sum_{k=1..G} P(k), P(r), U(r) (m values), V(r) (m values)), from its shares of
    ``u``, ``v`` and ``proof``: every step linear (public coefficients)."""
    u = np.asarray(u, dtype=np.int64).reshape(-1)
    v = np.asarray(v, dtype=np.int64).reshape(-1)
    g, m = layout(u.size, rows)
    proof = np.asarray(proof, dtype=np.int64)
    if proof.shape != (2 * m + 2 * g + 1,):
        raise ValueError(f"a proof for {u.size} values has {2 * m + 2 * g + 1} entries, got {proof.shape}")
    a, b, pv = proof[:m], proof[m:2 * m], proof[2 * m:]
    lu = np.array([lagrange_at(range(g + 1), r, p)], dtype=np.int64)
    ur = modarith.matmul_mod(lu, _grid(a, u, g, m), p)[0]
    vr = modarith.matmul_mod(lu, _grid(b, v, g, m), p)[0]
    lp = np.array(lagrange_at(range(2 * g + 1), r, p), dtype=np.int64)
    pr = modarith.sum_mod(modarith.mul_mod(lp, pv, p), 0, p)
    total = modarith.sum_mod(pv[1:g + 1], 0, p)
    return np.concatenate([np.array([total, pr], dtype=np.int64), ur, vr])


def decide(opened, p: int) -> bool:
    """The opened (sum, P(r), U(r), V(r)) pass the identity check P(r) = sum_j U_j(r) V_j(r)."""
    opened = np.asarray(opened, dtype=np.int64)
    m = (opened.size - 2) // 2
    ur, vr = opened[2:2 + m], opened[2 + m:]
    return int(modarith.rowdot_mod(ur[None, :], vr[None, :], p)[0]) == int(opened[1]) % p
