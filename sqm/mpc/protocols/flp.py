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

Cost: the prover extends the columns to (d - 1) G more points (a ((d-1)G x (G+1)) by ((G+1) x m) product, in
float64 where it is exact: :func:`_extend`) and evaluates the gadget there, d/2 + 1 products per digit column and
point (:func:`_gadget`): about (d - 1)(d/2 + 1) products per grid entry, whatever G; each verifier makes G + 1
scalar products of m values; m + 3 values are opened.  ``G`` (:data:`ROWS`) trades the extension's float work and
the error against the blinds and the opening.  The prover, the verifiers' U(r) and their side of the identity also
run compiled (``_flp_kernel.c`` beside this module, an optional extension, :func:`prover_backend`): every value is
an exact field element, so both give the same proof and the same verdict.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any, NamedTuple

import numpy as np

from sqm.errors import UsageError

from sqm.mpc.shares import modarith
from sqm.mpc.shares.kernels import kernel_function, numpy_forced
from sqm.mpc.shares.shamir import lagrange_at

ROWS = 16  # G: the polynomials U_j's degree (the nodes 1..G); see the module docstring for the trade-off
BLOCK = 1024  # columns the prover extends at once (its arrays stay in cache)


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
    if lin.shape != roots.shape or lin.ndim != 2 or not ((lin == 0) | (lin == 1)).all():
        raise UsageError(f"column polynomials need two equal (m, d) arrays with lin in {{0, 1}}, got {lin.shape} "
                         f"and {roots.shape}")
    return np.stack([lin, roots])


def degree(polys) -> int:
    """A part's degree: its column polynomials' (d), 2 for a :class:`Products` part."""
    return 2 if isinstance(polys, Products) else int(polys.shape[2])


@functools.lru_cache(maxsize=16)
def _extension(g: int, points: int, p: int) -> np.ndarray:
    """E (points x (G+1)): row i holds the Lagrange coefficients at G + 1 + i of the nodes 0..G."""
    return np.array([lagrange_at(range(g + 1), g + 1 + i, p) for i in range(points)], dtype=np.int64)


def _gadget(U: np.ndarray, polys: np.ndarray, beta, p: int, std: int | None = None) -> np.ndarray:
    """sum_j beta_j g_j(U[k, j]) for each row k (U's entries in [0, 3p) below 2^46, else in [0, p)).  A leading run
    of ``std`` columns (:func:`_digit_prefix`) whose g_j is the digit polynomial prod_{v < d} (u - v) (d even) takes
    d/2 products: (u - v)(u - (d-1-v)) = w + v (d-1-v) with w = u (u - d + 1) (for d = 8, 3 in all: with z = w + 6,
    g = (z^2 + 4z)(z^2 - 36)); below 2^46 the factors enter the products unreduced (:func:`_lazy_mul`)."""
    lin, roots = polys
    d = lin.shape[1]
    std = _digit_prefix(polys) if std is None else std
    beta = np.asarray(beta, dtype=np.int64)
    out = np.zeros(U.shape[0], dtype=np.int64)
    if std and p < 1 << LAZY_BITS:
        u = U[:, :std]
        w = _lazy_mul(u, u + np.int64(p - (d - 1)), p)
        if d == 8 and p < 1 << (LAZY_BITS - 2):  # g = w (w+6)(w+10)(w+12) = (z^2 + 4z)(z^2 - 36), z = w + 6
            w += 6
            t = _lazy_mul(w, w, p)
            w *= 4
            w += t
            t += np.int64(p - 36)
            acc = _lazy_mul(w, t, p)  # below 15p + 24 and 4p: a b / p < 2^50 for p < 2^44
        else:
            acc = w
            for v in range(1, d // 2):
                acc = _lazy_mul(acc, w + np.int64(v * (d - 1 - v)), p)
        acc = _lazy_mul(acc, np.broadcast_to(beta[:std], acc.shape), p)
        run = max(1, (1 << 62) // (3 * p))  # columns summed in int64 before a reduction
        for s in range(0, std, run):
            out = (out + acc[:, s:s + run].sum(axis=1)) % p
    elif std:
        u = U[:, :std]
        w = _float_mul(u, u + np.int64(p - (d - 1) % p), p)
        acc = w
        for v in range(1, d // 2):
            acc = _float_mul(acc, w + np.int64(v * (d - 1 - v) % p), p)
        out = _weighted_sum(acc, beta[:std], p)
    if std < U.shape[1] and p < 1 << LAZY_BITS:
        u = U[:, std:]
        part: np.ndarray | None = None
        for i in _factors(polys, std, p):
            f = u * lin[None, std:, i] + ((p - roots[None, std:, i]) % p)  # lin u - root, in [0, 2p)
            part = f if part is None else _lazy_mul(part, f, p)
        acc = np.broadcast_to(beta[std:], u.shape) if part is None else _lazy_mul(
            part, np.broadcast_to(beta[std:], u.shape), p)
        run = max(1, (1 << 62) // (3 * p))
        for s in range(0, acc.shape[1], run):
            out = (out + acc[:, s:s + run].sum(axis=1)) % p
    elif std < U.shape[1]:
        u = U[:, std:]
        prod = None
        for i in _factors(polys, std, p):
            f = modarith.sub_mod(u * lin[None, std:, i], np.broadcast_to(roots[None, std:, i], u.shape), p)
            prod = f if prod is None else modarith.mul_mod(prod, f, p)
        if prod is None:
            prod = np.ones(u.shape, dtype=np.int64)
        out = modarith.add_mod(out, _weighted_sum(prod, beta[std:], p), p)
    return out


LAZY_BITS = 46  # below 2^46 the digit gadget's products stay unreduced in [0, 3p) (:func:`_lazy_mul`)


def _lazy_mul(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """a b mod p, up to a multiple of p: a value in [0, 3p), for non-negative a, b below 2^53 with a b / p < 2^50.
    q = trunc(float(a) b (1/p)) (three roundings of relative error 2^-53: off from a b / p by less than 1/2, so
    by at most one from its floor), r = a b - q p in wrapping int64 (exact: the true value lies in [-p, 2p)),
    returned plus p.  Three and nine times p keep the products of the digit gadget below 2^50 p for p < 2^46."""
    q = a.astype(np.float64)
    np.multiply(q, b, out=q)
    q *= 1.0 / p
    qi = q.astype(np.int64)
    qi *= np.int64(p)
    with np.errstate(over="ignore"):
        r = np.multiply(a, b)
        r -= qi
    r += np.int64(p)
    return r


def _float_mul(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """a b mod p for a, b in [0, 2p) (:func:`sqm.mpc.shares.modarith.mul_mod`'s float64 quotient where it is
    exact, a b / p < 2^50; else reduced first)."""
    if int(p).bit_length() <= modarith.FLOAT_QUOTIENT_BITS - 1:
        return modarith._float_product(a, b, p)
    return modarith.mul_mod(a % p, b % p, p)


def _weighted_sum(vals: np.ndarray, beta: np.ndarray, p: int) -> np.ndarray:
    """sum_j beta_j vals[k, j] mod p per row k: the products reduced, summed in int64 in runs short enough not to
    overflow (each below p < 2^62 / run), then reduced."""
    if vals.shape[1] == 0:
        return np.zeros(vals.shape[0], dtype=np.int64)
    if int(p).bit_length() > modarith.FLOAT_QUOTIENT_BITS:
        return modarith.matmul_mod(vals, beta, p)
    prod = modarith._float_product(vals, beta[None, :], p)
    run = max(1, ((1 << 62) // p))
    if prod.shape[1] <= run:
        return prod.sum(axis=1) % p
    return modarith.sum_mod(prod, 1, p)


_PREFIXES: dict[int, tuple[np.ndarray, int]] = {}  # id -> (a read-only statement, held; its digit prefix)


def _digit_prefix(polys: np.ndarray) -> int:
    """How many leading columns hold the digit polynomial prod_{v < d} (u - v) (0 for an odd d); remembered for a
    read-only array that owns its data (a cached statement: it cannot change, and while held its id is its own)."""
    hit = _PREFIXES.get(id(polys))
    if hit is not None and hit[0] is polys:
        return hit[1]
    std = _find_digit_prefix(polys)
    if polys.base is None and not polys.flags.writeable:
        if len(_PREFIXES) >= 8:
            _PREFIXES.pop(next(iter(_PREFIXES)))
        _PREFIXES[id(polys)] = (polys, std)
    return std


def _find_digit_prefix(polys: np.ndarray) -> int:
    lin, roots = polys
    m, d = lin.shape
    if d % 2 or d < 2:
        return 0
    ok = (lin == 1).all(axis=1) & (roots == np.arange(d)).all(axis=1)
    return m if ok.all() else int(np.argmin(ok))


def prove(Y, polys, beta, p: int, blinds) -> np.ndarray:
    """The proof (a, P(0..dG)) for the grid ``Y`` (G x m field elements), the columns' polynomials ``polys``
    (:func:`column_polys`) and weights ``beta``; ``blinds``: the m blinds a (uniform field elements), or a
    generator that draws them.  Two provers give the same proof: a compiled one (``_flp_kernel.c`` beside this
    module, an optional extension, :func:`prover_backend`) and :func:`_prove_numpy`."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    if isinstance(blinds, np.random.Generator):
        blinds = blinds.integers(0, p, size=m, dtype=np.int64)
    a = np.asarray(blinds, dtype=np.int64)
    if a.shape != (m,):
        raise UsageError(f"a {g} x {m} grid takes {m} blinds, got {a.shape}")
    beta = np.asarray(beta, dtype=np.int64)
    k = _compiled()
    values = None if k is None else _prove_compiled(k.prove, Y, polys, beta, p, a)
    return np.concatenate([a, _prove_numpy(Y, polys, beta, p, a) if values is None else values])


def prover_backend() -> str:
    """Which prover :func:`prove` runs here: "compiled" (``_flp_kernel.c``, where it was built and gives the numpy
    prover's proofs on a sample) or "numpy".  Both give the same field elements."""
    return "numpy" if _compiled() is None else "compiled"


KERNEL = "sqm.mpc.protocols._flp_kernel"  # the compiled kernel's extension module (setup.py; lookup, input_proof)
FORCE_NUMPY = "SQM_FLP_KERNEL"  # set to "numpy": every user of the kernel runs its numpy code
_PTR, _I64 = ctypes.c_void_p, ctypes.c_int64


def kernel(name: str, argtypes):
    """The kernel's C function ``name`` (unchecked), or None where it was not built, does not load, or
    ``SQM_FLP_KERNEL=numpy`` asks for numpy."""
    return None if numpy_forced(FORCE_NUMPY) else kernel_function(KERNEL, name, argtypes)


def _simd():
    """The compiled kernel's switch of its vector variant (``sqm_flp_simd``: for tests, which compare them), or
    None."""
    return kernel_function(KERNEL, "sqm_flp_simd", [ctypes.c_int])


def _library():
    """The compiled prover's C function, or None where the extension was not built or does not load."""
    return kernel_function(KERNEL, "sqm_flp_prove", [_PTR, _I64, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _I64, _I64,
                                                      _PTR, _I64, _PTR])


class _Kernels(NamedTuple):
    """The compiled kernel's functions: the prover, the gadget at one point, the verifiers' U(r)."""

    prove: Any
    gadget: Any
    combine: Any


def _kernels() -> _Kernels | None:
    """The compiled kernel's three functions (unchecked), or None where it was not built or does not load."""
    prove_fn = _library()
    gadget_fn = kernel_function(KERNEL, "sqm_flp_gadget", [_PTR, _I64, _PTR, _PTR, _I64, _I64, _PTR, _I64, _PTR])
    combine_fn = kernel_function(KERNEL, "sqm_flp_combine", [_PTR, _PTR, _I64, _I64, _PTR, _I64, _PTR])
    if prove_fn is None or gadget_fn is None or combine_fn is None:
        return None
    return _Kernels(prove_fn, gadget_fn, combine_fn)


@functools.lru_cache(maxsize=1)
def _compiled() -> _Kernels | None:
    """:func:`_kernels` where they give the numpy code's values on a fixed sample (:func:`_prove_numpy`,
    :func:`_gadget`, :func:`_combine_numpy`), else None (also where ``SQM_FLP_KERNEL=numpy`` asks for numpy)."""
    if numpy_forced(FORCE_NUMPY):
        return None
    k = _kernels()
    if k is None:
        return None
    for Y, polys, beta, p, a in _sample():
        try:
            got = _prove_compiled(k.prove, Y, polys, beta, p, a)
            coef = [int(v) for v in a[:1]] + [int(v) for v in beta[:Y.shape[0]]] * Y.shape[0]
            coef = coef[:Y.shape[0] + 1]
            point = _gadget_compiled(k.gadget, Y[-1], polys, beta, p)
            comb = _combine_compiled(k.combine, a, Y, coef, p)
        except Exception:  # a kernel that fails its first calls: the numpy code
            return None
        if got is None or not np.array_equal(got, _prove_numpy(Y, polys, beta, p, a)):
            return None
        if point is None or point != int(_gadget(Y[-1][None, :], polys, beta, p)[0]):
            return None
        if comb is None or not np.array_equal(comb, _combine_numpy(a, Y, coef, p)):
            return None
    return k


def _gadget_compiled(fn, u: np.ndarray, polys: np.ndarray, beta: np.ndarray, p: int) -> int | None:
    """sum_j beta_j g_j(u_j) from the compiled kernel, or None where it cannot run."""
    d = degree(polys)
    if p % 2 == 0 or p >= 1 << 62 or d < 1 or d > 64:
        return None
    u = np.ascontiguousarray(u, dtype=np.int64)
    lin, roots = (np.ascontiguousarray(x, dtype=np.int64) for x in polys)
    beta = np.ascontiguousarray(beta, dtype=np.int64)
    out = np.zeros(1, dtype=np.int64)
    rc = fn(u.ctypes.data, u.size, lin.ctypes.data, roots.ctypes.data, d, _digit_prefix(polys), beta.ctypes.data,
            p, out.ctypes.data)
    return int(out[0]) if rc == 0 else None


def _combine_compiled(fn, a: np.ndarray, Y: np.ndarray, coef, p: int) -> np.ndarray | None:
    """:func:`_combine` from the compiled kernel, or None where it cannot run."""
    g, m = Y.shape
    if p % 2 == 0 or p >= 1 << 62 or g > 1024:
        return None
    a, Y = np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(Y, dtype=np.int64)
    c = np.array([int(v) % p for v in coef], dtype=np.int64)
    out = np.empty(m, dtype=np.int64)
    rc = fn(a.ctypes.data, Y.ctypes.data, g, m, c.ctypes.data, p, out.ctypes.data)
    return out if rc == 0 else None


def _sample():
    """Fixed public statements (from a fixed seed: nothing secret) on which the compiled prover must give the numpy
    prover's values: fields of 13 to 61 bits; digit columns, other ranges' digits, squares and columns of
    constant factors; grids of small signed integers and of arbitrary field elements; one column, one node, odd
    degrees."""
    from sqm.mpc.shares.field import prime_below

    rng = np.random.default_rng(20261)
    out = []
    for bits, g, m, d in ((13, 4, 9, 8), (41, ROWS, 70, 8), (47, 3, 5, 8), (61, 5, 11, 8), (31, 1, 1, 2),
                          (37, 2, 6, 3), (59, 6, 4, 4)):
        p = prime_below(bits)
        lin = np.ones((m, d), dtype=np.int64)
        roots = np.tile(np.arange(d, dtype=np.int64), (m, 1))
        k = m // 2
        roots[k:] = rng.integers(0, p, size=(m - k, d))
        lin[k + 1:, :] = rng.integers(0, 2, size=(m - k - 1, d))
        if d >= 3 and m - k >= 2:  # a square: lin (1, 1, 0, ..), roots (0, 0, -1, ..)
            lin[-1], roots[-1] = 0, p - 1
            lin[-1, :2], roots[-1, :2] = 1, 0
        small = rng.integers(-4100, 4100, size=(g, m)) % p
        for Y in (small, rng.integers(0, p, size=(g, m), dtype=np.int64)):
            out.append((Y.astype(np.int64), column_polys(lin, roots, p), rng.integers(0, p, size=m, dtype=np.int64),
                        p, rng.integers(0, p, size=m, dtype=np.int64)))
    return out


def _rows_in_place(Y) -> tuple[np.ndarray, int]:
    """(Y, ld) for a kernel that reads row k at Y + k ld: rows of consecutive int64 entries as they are (a column
    slice without a copy), anything else copied."""
    Y = np.asarray(Y)
    g, m = Y.shape
    if Y.dtype != np.int64 or (m > 1 and Y.strides[1] != 8) or (g > 1 and (Y.strides[0] % 8 or Y.strides[0] < 8 * m)):
        Y = np.ascontiguousarray(Y, dtype=np.int64)
    return Y, Y.strides[0] // 8 if g > 1 else m


def _prove_compiled(fn, Y: np.ndarray, polys: np.ndarray, beta: np.ndarray, p: int, a: np.ndarray):
    """P(0..dG) from the compiled prover, or None where it cannot run (an even or too large p, an odd degree with a
    digit prefix, a buffer)."""
    g, m = Y.shape
    d = degree(polys)
    if p % 2 == 0 or p >= 1 << 62 or d < 1:
        return None
    Y, ld = _rows_in_place(Y)
    lin, roots = (np.ascontiguousarray(x, dtype=np.int64) for x in polys)
    E = np.ascontiguousarray(_extension(g, (d - 1) * g, p))
    a, beta = np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(beta, dtype=np.int64)
    out = np.empty(d * g + 1, dtype=np.int64)
    rc = fn(Y.ctypes.data, g, m, ld, a.ctypes.data, E.ctypes.data, lin.ctypes.data, roots.ctypes.data, d,
            _digit_prefix(polys), beta.ctypes.data, p, out.ctypes.data)
    return out if rc == 0 else None


def _prove_numpy(Y: np.ndarray, polys: np.ndarray, beta: np.ndarray, p: int, a: np.ndarray) -> np.ndarray:
    """P(0..dG) in numpy: blocks of columns extended (:func:`_extend`) and put through the gadget
    (:func:`_gadget`)."""
    g, m = Y.shape
    d = degree(polys)
    std = _digit_prefix(polys)
    E = _extension(g, (d - 1) * g, p)
    head = np.zeros(1, dtype=np.int64)  # P(0), from the blinds
    nodes = np.zeros(g, dtype=np.int64)  # P(1..G), from small integers when they are
    tail = np.zeros((d - 1) * g, dtype=np.int64)  # P(G+1..dG)
    for s in range(0, m, BLOCK):  # blocks of columns: the products stay in cache
        cols = slice(s, s + BLOCK)
        part, b, k = polys[:, cols], beta[cols], max(0, min(std - s, BLOCK))
        y = np.ascontiguousarray(Y[:, cols])
        signed = _signed(y, p)
        head = modarith.add_mod(head, _gadget(a[None, cols], part, b, p, k), p)
        at_nodes = _gadget_small(signed, part, b, p, k)
        nodes = modarith.add_mod(nodes, _gadget(y, part, b, p, k) if at_nodes is None else at_nodes, p)
        if E.size:
            tail = modarith.add_mod(tail, _gadget(_extend(E, a[cols], y, p, signed, lazy=True), part, b, p, k), p)
    return np.concatenate([head, nodes, tail])


def _signed(y: np.ndarray, p: int) -> np.ndarray:
    """The signed representatives (in (-p/2, p/2]) of field elements."""
    return np.where(y > p // 2, y - p, y)


def _gadget_small(signed: np.ndarray, polys: np.ndarray, beta, p: int, std: int | None = None) -> np.ndarray | None:
    """:func:`_gadget` at the nodes, where the grid holds small signed integers (``signed``: digits, quantized
    values, as signed representatives): the digit polynomial's pairs in exact int64 (below (d/2 + |u|)^d), every
    other factor multiplied in and reduced one at a time (|acc| < p, |factor| < 2^63 / p); None where a bound
    fails."""
    lin, roots = polys
    rs = np.where(roots > p // 2, roots - p, roots)
    std = _digit_prefix(polys) if std is None else std
    d = lin.shape[1]
    prod = np.empty(signed.shape, dtype=np.int64)
    if std:
        u = signed[:, :std]
        big = int(np.abs(u).max()) if u.size else 0
        if (big + d) ** d >= 1 << 62:
            return None
        w = u * (u - (d - 1))
        acc = w
        for v in range(1, d // 2):
            acc = acc * (w + v * (d - 1 - v))
        prod[:, :std] = acc % p
    if std < signed.shape[1]:
        u = signed[:, std:]
        big = (int(np.abs(u).max()) if u.size else 0) + (int(np.abs(rs[std:]).max()) if rs[std:].size else 0)
        if big * p >= 1 << 62:
            return None
        acc = np.ones(u.shape, dtype=np.int64)
        for i in _factors(polys, std, p):
            acc = acc * (u * lin[None, std:, i] - rs[None, std:, i]) % p
        prod[:, std:] = acc
    return _weighted_sum(prod, np.asarray(beta, dtype=np.int64), p)


def _factors(polys: np.ndarray, start: int, p: int) -> list[int]:
    """The factors i (lin u - root) of the columns from ``start`` on that are not the constant 1 (lin 0, root
    -1) in every one of them."""
    lin, roots = polys
    return [i for i in range(lin.shape[1]) if lin[start:, i].any() or (roots[start:, i] != p - 1).any()]


SPLIT = 23  # below 2^46, E's entries are cut at this bit for the extension's exact float products
BLIND_LIMB = 16  # the blinds enter the float products as limbs of this many bits


@functools.lru_cache(maxsize=16)
def _extension_split(g: int, points: int, p: int) -> tuple[np.ndarray, np.ndarray, int]:
    """E's float halves for :func:`_extend`, with the blinds' column repeated per limb (times 2^(16 i) mod p):
    (H, L, limbs) with E' = H 2^23 + L."""
    E = _extension(g, points, p)
    limbs = -(-int(p - 1).bit_length() // BLIND_LIMB)
    cols = [E[:, :1] * 1 if i == 0 else modarith.scalar_mul_mod(E[:, :1], (1 << (BLIND_LIMB * i)) % p, p)
            for i in range(limbs)]
    Ep = np.hstack(cols + [E[:, 1:]])
    H = (Ep >> SPLIT).astype(np.float64)
    L = (Ep & ((1 << SPLIT) - 1)).astype(np.float64)
    H.flags.writeable = L.flags.writeable = False
    return H, L, limbs


def _extend(E: np.ndarray, a: np.ndarray, y: np.ndarray, p: int, signed: np.ndarray | None = None,
            lazy: bool = False) -> np.ndarray:
    """E @ U mod p for U = (a; y), the blinds ``a`` over the grid ``y`` (G x m): in two exact float64 products
    when p < 2^46 and the grid holds small signed integers (``signed``: its signed representatives).

    The blinds enter as limbs of 16 bits (rows a_i, E's first column times 2^(16 i) mod p).  With E' = H 2^23 + L
    (:data:`SPLIT`) and every entry of U' below 2^16 with G + 3 rows, H @ U' and L @ U' are exact float64 integers
    (below 2^23 2^16 2^6 < 2^53); q = floor((H @ U') 2^23 / p + (L @ U') / p) in float64 is off by at most one
    (V / p is far below 2^50), so r = (H @ U') 2^23 + L @ U' - q p in wrapping int64 is the exact residue, in
    [-p, 2p), corrected once each way (or, ``lazy``, moved to [0, 3p)). Otherwise the field product
    (:func:`sqm.mpc.shares.modarith.matmul_mod` for the blinds, :func:`sqm.mpc.shares.modarith.matmul_small_mod` for the
    grid)."""
    g = y.shape[0]
    signed = _signed(y, p) if signed is None else signed
    big = int(np.abs(signed).max()) if signed.size else 0
    H, L, limbs = _extension_split(g, E.shape[0], p)
    if p >= 1 << (2 * SPLIT) or max(big, (1 << BLIND_LIMB) - 1) * (g + limbs) >= 1 << (53 - SPLIT):
        rest = modarith.matmul_small_mod(E[:, 1:], signed, p)
        return modarith.add_mod(rest, modarith.mul_mod(E[:, :1], a[None, :], p), p)
    Uf = np.empty((limbs + g, y.shape[1]), dtype=np.float64)
    for i in range(limbs):
        Uf[i] = (a >> (BLIND_LIMB * i)) & ((1 << BLIND_LIMB) - 1)
    Uf[limbs:] = signed
    hi = H @ Uf
    lo = L @ Uf
    q = np.floor(hi * ((1 << SPLIT) / p) + lo * (1.0 / p)).astype(np.int64)
    with np.errstate(over="ignore"):
        rest = hi.astype(np.int64) * np.int64(1 << SPLIT) + lo.astype(np.int64) - q * np.int64(p)
    if lazy:  # for the gadget (:func:`_gadget`): in [0, 3p), not corrected
        rest += np.int64(p)
        return rest
    rest += p * (rest < 0)
    rest -= p * (rest >= p)
    return rest


def _lagrange_nodes(n: int, x: int, p: int) -> list[int]:
    """:func:`sqm.mpc.shares.shamir.lagrange_at` for the nodes 0..n-1 at x (not a node), in O(n):
    l_i = prod_{j != i} (x - j) / (i! (n-1-i)! (-1)^(n-1-i)), from prefix and suffix products."""
    x %= p
    pre, suf = [1] * (n + 1), [1] * (n + 1)
    for i in range(n):
        pre[i + 1] = pre[i] * (x - i) % p
        suf[n - 1 - i] = suf[n - i] * (x - (n - 1 - i)) % p
    fact = [1] * n
    for i in range(1, n):
        fact[i] = fact[i - 1] * i % p
    out = []
    for i in range(n):
        den = fact[i] * fact[n - 1 - i] % p
        if (n - 1 - i) % 2:
            den = p - den
        out.append(pre[i] * suf[i + 1] % p * pow(den, -1, p) % p)
    return out


LOW_DEGREE = 3  # a trailing run of columns whose polynomials have at most this many factors (squares, top digits of
# few values) is proved apart, at its own degree (:func:`split`)


class Products(NamedTuple):
    """A part of degree 2 over (1 + k) n columns: n columns B_j, then k blocks of n columns A_ij, with the polynomial
    P(x) = sum_{i, j} beta_ij U_{A_ij}(x) (c_i - U_{B_j}(x)) + sum_j beta_j (U_{B_j}(x) + o_j)^2 for k public
    constants c_i given with the proof and the check, and offsets o_j = ``offsets``[j mod len(offsets)] (0 where
    none).  Its gadget multiplies two wires, which the column polynomials (one wire each) cannot: a lookup argument's
    h_ij (alpha_i - y_j) = 1 (:mod:`sqm.mpc.protocols.lookup`), with y's wire shared by the k inverses and by the
    square of its value y + lo (the B weights: zero for a value in no group)."""

    n: int
    k: int
    offsets: tuple[int, ...] = ()

    def offset_array(self, p: int) -> np.ndarray:
        """o_j for every B column, as field elements."""
        if not self.offsets:
            return np.zeros(self.n, dtype=np.int64)
        o = np.array([int(v) % p for v in self.offsets], dtype=np.int64)
        return np.resize(o, self.n)


class Statement(NamedTuple):
    """A grid's columns in consecutive parts, each proved by its own polynomial P_i(x) = sum_{j in part i} beta_j
    g_j(U_j(x)) of degree d_i G, d_i the part's degree (:func:`split`).  A part of low degree costs its prover
    (d_i - 1) G extension points per column instead of (d - 1) G; the verifiers open P_i(r) for each part and the
    sum of alpha_k P_i(k) over all of them."""

    bounds: tuple[int, ...]  # each part's first column, then m
    polys: tuple  # each part's (2, m_i, d_i) column polynomials (read-only), or a Products part


def _owned(a: np.ndarray) -> np.ndarray:
    """A read-only copy that owns its data (so that :func:`_digit_prefix` remembers it)."""
    out = np.array(a, dtype=np.int64, copy=True, order="C")
    out.flags.writeable = False
    return out


def _column_degrees(polys: np.ndarray, p: int) -> np.ndarray:
    """Per column, 1 + the index of its last factor that is not the constant 1 (lin 0, root -1); 0 for none."""
    lin, roots = polys
    real = (lin != 0) | (roots % p != p - 1)
    d = lin.shape[1]
    return np.where(real.any(axis=1), d - np.argmax(real[:, ::-1], axis=1), 0)


def split(polys: np.ndarray, p: int, low: int = LOW_DEGREE) -> Statement:
    """The statement of ``polys`` (:func:`column_polys`): the trailing run of columns whose factors beyond the first
    ``low`` are all the constant 1 as a part of its own, at the degree of its largest (at least 1), where some
    column before it needs more; else one part."""
    m, d = polys.shape[1], degree(polys)
    big = np.flatnonzero(_column_degrees(polys, p) > low)
    s = int(big[-1]) + 1 if big.size else 0
    if d <= low or s in (0, m):
        return Statement((0, m), (polys if polys.base is None and not polys.flags.writeable else _owned(polys),))
    dl = max(1, int(_column_degrees(polys[:, s:], p).max()))
    return Statement((0, s, m), (_owned(polys[:, :s]), _owned(polys[:, s:, :dl])))


def statement_length(st: Statement, g: int = ROWS) -> int:
    """The proof's entries: a blind per column, then each part's P_i(0..d_i G)."""
    return st.bounds[-1] + sum(degree(q) * int(g) + 1 for q in st.polys)


def statement_error(p: int, st: Statement, g: int = ROWS) -> float:
    """The probability that a false statement passes the parts' identity checks at one point drawn outside the
    nodes of the largest degree: sum_i d_i G / (p - d_max G - 1) (a union bound over the parts)."""
    top = max(degree(q) for q in st.polys) * g
    return sum(degree(q) * g for q in st.polys) / (p - top - 1)


def prove_statement(Y, st: Statement, beta, p: int, blinds, consts=()) -> np.ndarray:
    """The proof (a, P_1(0..d_1 G), P_2(..), ..) of the statement ``st`` for the grid ``Y``: each part proved as
    :func:`prove` proves a grid (a :class:`Products` part as :func:`prove_products` does, with the constants
    ``consts``), with its own columns' blinds."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    if m != st.bounds[-1]:
        raise UsageError(f"a statement of {st.bounds[-1]} columns, a grid of {m}")
    if isinstance(blinds, np.random.Generator):
        blinds = blinds.integers(0, p, size=m, dtype=np.int64)
    a = np.asarray(blinds, dtype=np.int64)
    beta = np.asarray(beta, dtype=np.int64)
    out = [a]
    for s, e, q in zip(st.bounds[:-1], st.bounds[1:], st.polys, strict=True):
        if isinstance(q, Products):
            out.append(prove_products(Y[:, s:e], q, beta[s:e], p, a[s:e], consts))
        else:
            out.append(prove(Y[:, s:e], q, beta[s:e], p, a[s:e])[e - s:])  # a slice: the kernel reads it in place
    return np.concatenate(out)


def query_statement(Y, proof, alpha, r: int, p: int, st: Statement) -> np.ndarray:
    """A verifier's shares of (sum_i sum_k alpha_k P_i(k), P_1(r), .., P_n(r), U(r) (m values)): :func:`query`
    for every part at once, every step linear."""
    Y = np.asarray(Y, dtype=np.int64)
    g, m = Y.shape
    proof = np.asarray(proof, dtype=np.int64)
    if m != st.bounds[-1] or proof.shape != (statement_length(st, g),):
        raise UsageError(f"a proof of this statement for a {g} x {m} grid has {statement_length(st, g)} entries, "
                         f"got {proof.shape}")
    ur = _combine(proof[:m], Y, _lagrange_nodes(g + 1, r, p), p)
    alpha = np.asarray(alpha, dtype=np.int64)
    total, prs, off = 0, [], m
    for q in st.polys:
        n = degree(q) * g + 1
        pv = proof[off:off + n]
        off += n
        lp = np.array(_lagrange_nodes(n, r, p), dtype=np.int64)
        prs.append(int(modarith.sum_mod(modarith.mul_mod(lp, pv, p), 0, p)))
        total = (total + int(modarith.sum_mod(modarith.mul_mod(alpha, pv[1:g + 1], p), 0, p))) % p
    return np.concatenate([np.array([total] + prs, dtype=np.int64), ur])


def decide_statement(opened, st: Statement, beta, p: int, consts=()) -> bool:
    """The opened (sum, P_1(r), .., P_n(r), U(r)) pass every part's identity check (:func:`decide`,
    :func:`decide_products` with the constants ``consts``)."""
    opened = np.asarray(opened, dtype=np.int64)
    k = len(st.polys)
    ur = opened[1 + k:]
    beta = np.asarray(beta, dtype=np.int64)
    return all(decide_products(int(opened[1 + i]), ur[s:e], q, beta[s:e], p, consts) if isinstance(q, Products)
               else decide(np.concatenate([[0, opened[1 + i]], ur[s:e]]), q, beta[s:e], p)
               for i, (s, e, q) in enumerate(zip(st.bounds[:-1], st.bounds[1:], st.polys, strict=True)))


def _products_args(m: int, q: Products, consts, p: int) -> np.ndarray:
    if q.n < 0 or q.k < 1 or m != (1 + q.k) * q.n or len(consts) != q.k:
        raise UsageError(f"a products part of {q.n} x (1 + {q.k}) columns with {q.k} constants, got {m} columns "
                         f"and {len(consts)} constants")
    return np.array([int(c) % p for c in consts], dtype=np.int64)


def prove_products(Y, q: Products, beta, p: int, blinds, consts) -> np.ndarray:
    """P(0..2G) of a :class:`Products` part for its grid ``Y`` (G x (1 + k) n), weights ``beta`` and blinds (one
    per column): per block of columns each wire at the nodes and extended to G + 1..2G (:func:`_extend_any`), then
    the products."""
    Y = np.asarray(Y, dtype=np.int64)
    c = _products_args(Y.shape[1], q, consts, p)
    a, beta = np.asarray(blinds, dtype=np.int64), np.asarray(beta, dtype=np.int64)
    fn = _products_kernel()
    out = None if fn is None else _prove_products_compiled(fn, Y, q, beta, p, a, c)
    return _prove_products_numpy(Y, q, beta, p, a, c) if out is None else out


def _products_function():
    return kernel_function(KERNEL, "sqm_flp_prove_products", [_PTR, _I64, _I64, _I64, _I64, _PTR, _PTR, _PTR, _PTR,
                                                               _PTR, _I64, _PTR])


@functools.lru_cache(maxsize=1)
def _products_kernel():
    """The compiled products prover where it gives :func:`_prove_products_numpy`'s values on a fixed public sample
    (fields of 13 to 45 bits, small and full-size entries), else None (also where ``SQM_FLP_KERNEL=numpy``)."""
    if numpy_forced(FORCE_NUMPY):
        return None
    fn = _products_function()
    if fn is None:
        return None
    from sqm.mpc.shares.field import prime_below
    from sqm.mpc.shares.randomness import secure_generator

    rng = secure_generator(20263)  # a fixed public sample (its seed is here)
    for bits, g, n, k in ((13, 4, 3, 1), (42, ROWS, 70, 2), (45, 5, 130, 3), (31, 1, 1, 2)):
        p = prime_below(bits)
        Y = rng.integers(0, p, size=(g, (1 + k) * n), dtype=np.int64)
        Y[:, :n] %= 6000
        a, beta = (rng.integers(0, p, size=(1 + k) * n, dtype=np.int64) for _ in range(2))
        c = rng.integers(0, p, size=k, dtype=np.int64)
        q = Products(n, k, tuple(int(v) for v in rng.integers(0, p, size=3)))
        try:
            got = _prove_products_compiled(fn, Y, q, beta, p, a, c)
        except Exception:  # a kernel that fails its first calls: the numpy code
            return None
        if got is None or not np.array_equal(got, _prove_products_numpy(Y, q, beta, p, a, c)):
            return None
    return fn


def _prove_products_compiled(fn, Y: np.ndarray, q: Products, beta, p: int, a, c) -> np.ndarray | None:
    """P(0..2G) from the compiled kernel, or None where it cannot run (p from 2^46 on, G above 64)."""
    g = Y.shape[0]
    if p >= 1 << 46 or g > 64 or q.k > 64:
        return None
    Y, ld = _rows_in_place(Y)
    E = np.ascontiguousarray(_extension(g, g, p))
    a, beta, c = (np.ascontiguousarray(v, dtype=np.int64) for v in (a, beta, c))
    off = np.ascontiguousarray(q.offset_array(p))
    out = np.empty(2 * g + 1, dtype=np.int64)
    rc = fn(Y.ctypes.data, g, ld, q.n, q.k, a.ctypes.data, E.ctypes.data, c.ctypes.data, beta.ctypes.data,
            off.ctypes.data, p, out.ctypes.data)
    return out if rc == 0 else None


def _prove_products_numpy(Y, q: Products, beta, p: int, a, c) -> np.ndarray:
    g = Y.shape[0]
    n, k = q.n, q.k
    E = _extension(g, g, p)
    off = q.offset_array(p)
    out = np.zeros(2 * g + 1, dtype=np.int64)
    for s in range(0, n, BLOCK):
        e = min(n, s + BLOCK)
        ub = _all_points(E, a[s:e], Y[:, s:e], p)
        blocks = [slice((1 + i) * n + s, (1 + i) * n + e) for i in range(k)]
        uas = (_all_points(E, a[b], Y[:, b], p) for b in blocks)  # one block of A's wires at a time
        out = modarith.add_mod(out, _products_gadget(ub, uas, beta[s:e], [beta[b] for b in blocks], off[s:e], c, p),
                               p)
    return out


def _products_gadget(ub, uas, beta_b, beta_as, off, c, p: int) -> np.ndarray:
    """Per row (a point) of the wires U_B and, for each constant c_i, U_Ai (rows x n each, in [0, p)):
    sum_j beta_bj (U_Bj + o_j)^2 + sum_{i, j} beta_aij U_Aij (c_i - U_Bj) (the prover's at every point, the
    verifiers' at r)."""
    v = modarith.add_mod(ub, np.broadcast_to(off, ub.shape), p)
    out = _weighted_sum(modarith.mul_mod(v, v, p), beta_b, p)
    for ua, b, ci in zip(uas, beta_as, c, strict=True):
        f = modarith.mul_mod(ua, modarith.sub_mod(np.full(ub.shape, ci, dtype=np.int64), ub, p), p)
        out = modarith.add_mod(out, _weighted_sum(f, b, p), p)
    return out


def _all_points(E: np.ndarray, a: np.ndarray, y: np.ndarray, p: int) -> np.ndarray:
    """Each column's wire at 0 (its blind), the nodes 1..G and the points G + 1..G + rows(E), in [0, p)."""
    return np.vstack([a[None, :] % p, y % p, _extend_any(E, a, y, p)])


LIMB = 21  # full-size grid entries enter the float extension as two limbs of at most this many bits


def _extend_any(E: np.ndarray, a: np.ndarray, y: np.ndarray, p: int) -> np.ndarray:
    """:func:`_extend` for any field elements: small signed integers as they are; below 2^46 (the float path's
    bound for 25-bit entries) each entry cut into limbs y = y_1 2^21 + y_0, each extended in floats and the two
    combined, E U = E U_0 + 2^21 E U_1 (the blinds with U_0); else the field products."""
    y = np.ascontiguousarray(y, dtype=np.int64)
    signed = _signed(y, p)
    big = int(np.abs(signed).max()) if signed.size else 0
    if big < 1 << LIMB or p >= 1 << (2 * SPLIT):
        return _extend(E, a, y, p, signed)
    low = y & ((1 << LIMB) - 1)
    high = y >> LIMB
    u0 = _extend(E, a, low, p, low)
    u1 = _extend(E, np.zeros_like(a), high, p, high)
    return modarith.add_mod(u0, modarith.scalar_mul_mod(u1, (1 << LIMB) % p, p), p)


def decide_products(pr: int, ur, q: Products, beta, p: int, consts) -> bool:
    """The opened P(r) of a :class:`Products` part equals its gadget at the opened U(r): sum_{i, j} beta_ij
    U_{A_ij}(r) (c_i - U_{B_j}(r)) + sum_j beta_j (U_{B_j}(r) + o_j)^2."""
    ur = np.asarray(ur, dtype=np.int64)
    c = _products_args(ur.size, q, consts, p)
    beta = np.asarray(beta, dtype=np.int64)
    n = q.n
    blocks = [slice((1 + i) * n, (2 + i) * n) for i in range(q.k)]
    total = _products_gadget(ur[None, :n], [ur[None, b] for b in blocks], beta[:n], [beta[b] for b in blocks],
                             q.offset_array(p), c, p)
    return int(total[0]) == int(pr) % p


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
    lu = _lagrange_nodes(g + 1, r, p)
    ur = _combine(a, Y, lu, p)
    lp = np.array(_lagrange_nodes(d * g + 1, r, p), dtype=np.int64)
    pr = modarith.sum_mod(modarith.mul_mod(lp, pv, p), 0, p)
    total = modarith.sum_mod(modarith.mul_mod(np.asarray(alpha, dtype=np.int64), pv[1:g + 1], p), 0, p)
    return np.concatenate([np.array([total, pr], dtype=np.int64), ur])


def _combine(a: np.ndarray, Y: np.ndarray, coef, p: int) -> np.ndarray:
    """(coef_0 a + sum_k coef_{k+1} Y[k]) mod p: compiled (:func:`_compiled`) or :func:`_combine_numpy`."""
    k = _compiled()
    out = None if k is None else _combine_compiled(k.combine, a, Y, coef, p)
    return _combine_numpy(a, Y, coef, p) if out is None else out


def _combine_numpy(a: np.ndarray, Y: np.ndarray, coef, p: int) -> np.ndarray:
    """(coef_0 a + sum_k coef_{k+1} Y[k]) mod p: each term reduced (below p), G + 1 of them summed in int64
    (below 2^63 for p < 2^58), reduced once."""
    if (Y.shape[0] + 1) * p >= 1 << 63:
        return modarith.add_mod(modarith.scalar_mul_mod(a, coef[0], p),
                                modarith.matmul_mod(np.array([coef[1:]], dtype=np.int64), Y, p)[0], p)
    acc = modarith.scalar_mul_mod(a, coef[0], p)
    for k in range(Y.shape[0]):
        acc += modarith.scalar_mul_mod(Y[k], coef[k + 1], p)
    return acc % p


def decide(opened, polys, beta, p: int) -> bool:
    """The opened (sum, P(r), U(r)) pass the identity check P(r) = sum_j beta_j g_j(U_j(r))."""
    opened = np.asarray(opened, dtype=np.int64)
    ur = opened[2:]
    k = _compiled()
    value = None if k is None else _gadget_compiled(k.gadget, ur, polys, np.asarray(beta, dtype=np.int64), p)
    if value is None:
        value = int(_gadget(ur[None, :], polys, beta, p)[0])
    return value == int(opened[1]) % p
