"""The fully linear proof's prover and verifier against their definitions in exact Python integers: the proof is
(a, P(0..dG)) with P = sum_j beta_j g_j(U_j), U_j through the blind a_j at 0 and the grid's column at 1..G."""
from __future__ import annotations

import os

import numpy as np
import pytest

from sqm.errors import UsageError
from sqm.mpc.protocols import flp
from sqm.mpc.shares.field import prime_below
from sqm.mpc.shares.shamir import lagrange_at


def _reference(Y, polys, beta, a, p: int) -> list[int]:
    """The proof from its definition, one Python integer at a time."""
    g, m = Y.shape
    lin, roots = polys
    d = lin.shape[1]
    out = [int(v) for v in a]
    for x in range(d * g + 1):
        lu = lagrange_at(range(g + 1), x, p)
        total = 0
        for j in range(m):
            u = (lu[0] * int(a[j]) + sum(lu[k + 1] * int(Y[k, j]) for k in range(g))) % p
            val = 1
            for i in range(d):
                val = val * (int(lin[j, i]) * u - int(roots[j, i])) % p
            total += int(beta[j]) * val
        out.append(total % p)
    return out


def _instance(p: int, d: int, m_digits: int, m_square: int, spread: int, seed: int):
    """A grid whose first ``m_digits`` columns are digits in 0..d-1 (the digit polynomial), the next ones values
    up to ``spread`` in size (the square, padded with linear factors), the last one a top digit (roots of its
    own); weights and blinds uniform."""
    rng = np.random.default_rng(seed)
    g = flp.ROWS
    top = [0, 7, 11] + [11] * (d - 3)
    Y = np.hstack([rng.integers(0, d, size=(g, m_digits)), rng.integers(-spread, spread + 1, size=(g, m_square)),
                   rng.choice(top, size=(g, 1))]) % p
    lin = np.vstack([np.ones((m_digits, d), np.int64), np.tile([1, 1] + [0] * (d - 2), (m_square, 1)),
                     np.ones((1, d), np.int64)])
    roots = np.vstack([np.tile(np.arange(d), (m_digits, 1)), np.tile([0, 0] + [-1] * (d - 2), (m_square, 1)),
                       np.array([top])])
    polys = flp.column_polys(lin, roots, p)
    m = Y.shape[1]
    return Y, polys, rng.integers(0, p, size=m), rng.integers(0, p, size=m)


@pytest.mark.parametrize("bits,d,spread", [(39, 4, 3000), (42, 8, 5000), (45, 8, 3000), (46, 4, 1 << 20),
                                           (49, 16, 200), (61, 4, 3000), (31, 4, 100)])
@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_the_proof_is_its_definition(bits, d, spread, backend, monkeypatch):
    """Every path of both provers (numpy: float products with the blinds in limbs below 2^46, lazy reductions
    there, the degree-8 digit gadget's three products below 2^44, the field products above, small-integer nodes or
    not; compiled: doubles below 2^50, Montgomery products above) gives the definition's proof, bit for bit."""
    _backend(monkeypatch, backend)
    p = prime_below(bits)
    Y, polys, beta, a = _instance(p, d, 9, 4, spread, bits)
    got = flp.prove(Y, polys, beta, p, a)
    assert [int(v) for v in got] == _reference(Y, polys, beta, a, p)


def _no_kernel() -> None:
    """Skip a test of the compiled kernel where it was not built (fail instead under ``SQM_REQUIRE_FLP_KERNEL``,
    which CI sets)."""
    if os.environ.get("SQM_REQUIRE_FLP_KERNEL"):
        pytest.fail("SQM_REQUIRE_FLP_KERNEL is set but the compiled FLP kernel (setup.py) was not built or does "
                    "not load")
    pytest.skip("the compiled FLP kernel was not built here")


def _backend(monkeypatch, backend: str) -> None:
    """Run :func:`flp.prove` on the numpy prover, or on the compiled one (skipped where it was not built)."""
    if backend == "numpy":
        monkeypatch.setattr(flp, "_compiled", lambda: None)
    elif flp._kernels() is None:
        _no_kernel()
    else:
        monkeypatch.setattr(flp, "_compiled", flp._kernels)


def _mixed(p: int, g: int, m: int, d: int, big_from: int | None, seed: int):
    """Random columns: the first half digits (the digit polynomial for an even d), then roots and factors of their
    own, a square and constant factors; entries small signed integers up to 2^13, with every column from
    ``big_from`` on holding arbitrary field elements (None: none)."""
    rng = np.random.default_rng(seed)
    k = m // 2 if d % 2 == 0 else 0
    lin = np.ones((m, d), dtype=np.int64)
    roots = np.tile(np.arange(d, dtype=np.int64), (m, 1))
    roots[k:] = rng.integers(0, p, size=(m - k, d))
    lin[k:] = rng.integers(0, 2, size=(m - k, d))
    if m - k >= 2 and d >= 2:  # a square, then constant factors (lin 0, root -1)
        lin[-2], roots[-2] = 0, p - 1
        lin[-2, :2], roots[-2, :2] = 1, 0
        lin[-1, 1:], roots[-1, 1:] = 0, p - 1
    Y = rng.integers(-(1 << 13), (1 << 13) + 1, size=(g, m))
    Y[:, :k] = rng.integers(0, d, size=(g, k))
    Y %= p
    if big_from is not None:
        Y[:, big_from:] = rng.integers(0, p, size=(g, m - big_from))
    Y[0, :min(m, 3)] = [p - 1, 0, 1][:min(m, 3)]
    return (Y.astype(np.int64), flp.column_polys(lin, roots, p), rng.integers(0, p, size=m, dtype=np.int64),
            rng.integers(0, p, size=m, dtype=np.int64))


@pytest.mark.parametrize("bits", [13, 23, 31, 41, 42, 44, 45, 46, 47, 49, 50, 51, 59, 61])
@pytest.mark.parametrize("g,m,d,big_from", [(16, 1, 8, None), (16, 63, 8, None), (16, 130, 8, 97),
                                            (16, 65, 8, 0), (1, 7, 2, None), (3, 64, 4, 40), (5, 20, 3, None),
                                            (2, 9, 16, 5), (70, 6, 4, None), (16, 40, 1, None)])
def test_the_compiled_prover_gives_the_numpy_provers_values(bits, g, m, d, big_from):
    """Bit for bit on random statements: fields from 13 to 61 bits (the doubles' path below 2^50, Montgomery's
    above), one column to more than two blocks of 64 with edge counts, blocks of small entries and of arbitrary
    field elements in one grid (both paths' sums), digit and other columns, odd and even degrees, one node and more
    nodes than the doubles' path takes."""
    fn = flp._library()
    if fn is None:
        _no_kernel()
    p = prime_below(bits)
    Y, polys, beta, a = _mixed(p, g, m, d, big_from, bits * 1000 + g * m + d)
    got = flp._prove_compiled(fn, Y, polys, beta, p, a)
    assert got is not None
    assert np.array_equal(got, flp._prove_numpy(Y, polys, beta, p, a))


@pytest.mark.parametrize("bits", [13, 31, 42, 50, 59, 61])
@pytest.mark.parametrize("g,m,d", [(16, 1, 8), (16, 130, 8), (3, 64, 4), (5, 20, 3), (2, 9, 16)])
def test_the_compiled_verifier_steps_give_the_numpy_values(bits, g, m, d):
    """The verifiers' U(r) (the combination of the blinds and the grid's rows) and sum_j beta_j g_j(u_j) at one
    point, bit for bit, for small and arbitrary entries."""
    k = flp._kernels()
    if k is None:
        _no_kernel()
    p = prime_below(bits)
    Y, polys, beta, a = _mixed(p, g, m, d, m // 3, bits + g + m + d)
    coef = flp._lagrange_nodes(g + 1, p - 5, p)
    assert np.array_equal(flp._combine_compiled(k.combine, a, Y, coef, p), flp._combine_numpy(a, Y, coef, p))
    for u in (Y[0], Y[-1], a):
        assert flp._gadget_compiled(k.gadget, u, polys, beta, p) == int(flp._gadget(u[None, :], polys, beta, p)[0])


@pytest.mark.parametrize("bits", [13, 30, 42, 44, 45, 47])
@pytest.mark.parametrize("spread", [8, 9, 1 << 13, None])
def test_the_compiled_provers_digit_gadget_gives_the_numpy_values_for_any_digit(bits, spread):
    """Degree-8 digit columns (three blocks of 64 and an edge one) holding digits 0..7 only (the nodes add nothing:
    skipped), one 8 among them, signed entries up to 2^13 in size (a cheating client's; two limbs of E) or
    arbitrary field elements (None), with every entry of one column extreme: the compiled prover's lazy reductions
    (below 2^44) and exact ones (above) give the numpy prover's values, in every vector variant."""
    fn, simd = flp._library(), flp._simd()
    if fn is None or simd is None:
        _no_kernel()
    p = prime_below(bits)
    rng = np.random.default_rng(bits + (spread or 0))
    g, m, d = flp.ROWS, 3 * 64 + 5, 8
    if spread is None:
        Y = rng.integers(0, p, size=(g, m), dtype=np.int64)
    elif spread <= d:
        Y = rng.integers(0, spread, size=(g, m)).astype(np.int64)
        Y[3, 70] = spread - 1
    else:
        Y = rng.integers(-spread, spread + 1, size=(g, m)) % p
        Y[:, 5] = p - spread
        Y[:, 6] = spread
    polys = flp.column_polys(np.ones((m, d), np.int64), np.tile(np.arange(d), (m, 1)), p)
    beta, a = rng.integers(0, p, size=m, dtype=np.int64), rng.integers(0, p, size=m, dtype=np.int64)
    a[:4] = [0, 1, p - 1, p - 2]
    beta[4:6] = [p - 1, 0]
    want = flp._prove_numpy(Y, polys, beta, p, a)
    best = simd(-1)
    try:
        for level in range(best + 1):
            simd(level)
            assert np.array_equal(flp._prove_compiled(fn, Y, polys, beta, p, a), want)
    finally:
        assert simd(-1) == best


def test_every_vector_variant_of_the_compiled_prover_gives_the_same_values():
    """The doubles' path without vector instructions (FMA from the C library), with AVX2 and with AVX-512, where
    this processor has them: the numpy prover's values each."""
    fn = flp._library()
    if fn is None:
        _no_kernel()
    simd = flp._simd()
    best = simd(-1)
    try:
        for level in range(best + 1):
            assert simd(level) == level
            for bits, (g, m, d, big) in ((42, (16, 130, 8, 97)), (31, (3, 64, 4, None)), (50, (16, 65, 16, 60))):
                p = prime_below(bits)
                Y, polys, beta, a = _mixed(p, g, m, d, big, bits + level)
                assert np.array_equal(flp._prove_compiled(fn, Y, polys, beta, p, a),
                                      flp._prove_numpy(Y, polys, beta, p, a))
    finally:
        assert simd(-1) == best


def test_the_compiled_prover_is_used_where_it_was_built_unless_numpy_is_asked(monkeypatch):
    if flp._library() is None:
        _no_kernel()
    monkeypatch.delenv("SQM_FLP_KERNEL", raising=False)
    flp._compiled.cache_clear()
    try:
        assert flp.prover_backend() == "compiled"
        flp._compiled.cache_clear()
        monkeypatch.setenv("SQM_FLP_KERNEL", "numpy")
        assert flp.prover_backend() == "numpy"
    finally:
        flp._compiled.cache_clear()


def test_the_blocks_of_columns_never_change_the_proof(monkeypatch):
    _backend(monkeypatch, "numpy")
    p = prime_below(40)
    Y, polys, beta, a = _instance(p, 4, 11, 3, 3000, 5)
    whole = flp.prove(Y, polys, beta, p, a)
    monkeypatch.setattr(flp, "BLOCK", 4)
    assert np.array_equal(flp.prove(Y, polys, beta, p, a), whole)


@pytest.mark.parametrize("bits", [39, 61])
@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_an_honest_proof_passes_and_a_changed_one_fails(bits, backend, monkeypatch):
    """query/decide on the values (a sharing's degree-0 case): the identity holds at a random point for the
    honest proof (of either prover) and fails once one of its values moves."""
    _backend(monkeypatch, backend)
    p = prime_below(bits)
    Y, polys, beta, a = _instance(p, 4, 6, 2, 3000, bits)
    proof = flp.prove(Y, polys, beta, p, a)
    alpha = np.arange(1, flp.ROWS + 1)
    r = flp.draw_point(np.random.default_rng(0), p, 4)
    assert flp.decide(flp.query(Y, proof, alpha, r, p, 4), polys, beta, p)
    bad = proof.copy()
    bad[Y.shape[1] + 5] = (bad[Y.shape[1] + 5] + 1) % p
    assert not flp.decide(flp.query(Y, bad, alpha, r, p, 4), polys, beta, p)


@pytest.mark.parametrize("n,x", [(17, 10 ** 9 + 7), (129, 123456789), (5, 5), (65, 2 ** 41)])
def test_the_lagrange_coefficients_at_consecutive_nodes(n, x):
    p = prime_below(42)
    assert flp._lagrange_nodes(n, x, p) == lagrange_at(range(n), x, p)


@pytest.mark.parametrize("bits", [39, 42, 45])
def test_the_lazy_extension_is_the_field_product_up_to_multiples_of_p(bits):
    p = prime_below(bits)
    rng = np.random.default_rng(bits)
    y = rng.integers(-3000, 3001, size=(flp.ROWS, 200)) % p
    a = rng.integers(0, p, size=200)
    E = flp._extension(flp.ROWS, 7 * flp.ROWS, p)
    from sqm.mpc.shares import modarith

    lazy = flp._extend(E, a, y, p, lazy=True)
    assert lazy.min() >= 0 and lazy.max() < 3 * p
    assert np.array_equal(lazy % p, modarith.matmul_mod(E, np.vstack([a, y]), p))


@pytest.mark.parametrize("bits", [39, 61])
def test_a_statement_in_parts_proves_what_the_whole_grid_does(bits):
    """split: the trailing squares and top digit of few values apart, at their degree; each part's values are
    :func:`flp.prove`'s for its own columns; the opened sum is the whole grid's (one part's) sum; the honest proof
    passes and moving any value of either part fails."""
    p = prime_below(bits)
    rng = np.random.default_rng(bits)
    d, g = 8, flp.ROWS
    lin = np.vstack([np.ones((5, d), np.int64), np.tile([1, 1] + [0] * (d - 2), (3, 1)),
                     np.array([[1, 1, 1] + [0] * (d - 3)])])
    roots = np.vstack([np.tile(np.arange(d), (5, 1)), np.tile([0, 0] + [-1] * (d - 2), (3, 1)),
                       np.array([[0, 7, 11] + [-1] * (d - 3)])])
    polys = flp.column_polys(lin, roots, p)
    Y = np.hstack([rng.integers(0, d, size=(g, 5)), rng.integers(-3000, 3001, size=(g, 3)),
                   rng.choice([0, 7, 11], size=(g, 1))]) % p
    Y[:, 2] = rng.integers(0, p, size=g)  # a column of arbitrary field elements: the Montgomery columns too
    beta, a = rng.integers(0, p, size=9), rng.integers(0, p, size=9)
    st = flp.split(polys, p)
    assert st.bounds == (0, 5, 9) and [flp.degree(q) for q in st.polys] == [8, 3]
    assert flp.split(polys[:, :5], p).bounds == (0, 5) and flp.split(polys[:, 5:], p).bounds == (0, 4)
    assert flp.split(polys[:, ::-1], p).bounds == (0, 9)  # the small columns first: no trailing run
    proof = flp.prove_statement(Y, st, beta, p, a)
    assert proof.shape == (flp.statement_length(st),) == (9 + 8 * g + 1 + 3 * g + 1,)
    assert np.array_equal(proof[:9], a)
    part = [np.ascontiguousarray(Y[:, :5]), np.ascontiguousarray(Y[:, 5:])]  # the kernel reads the slices in place
    assert np.array_equal(proof[9:9 + 8 * g + 1], flp.prove(part[0], st.polys[0], beta[:5], p, a[:5])[5:])
    assert np.array_equal(proof[9 + 8 * g + 1:], flp.prove(part[1], st.polys[1], beta[5:], p, a[5:])[4:])
    fn = flp._library()
    if fn is not None:
        for (s, e), q in zip(((0, 5), (5, 9)), st.polys, strict=True):
            got = flp._prove_compiled(fn, Y[:, s:e], q, beta[s:e], p, a[s:e])
            assert np.array_equal(got, flp._prove_numpy(np.ascontiguousarray(Y[:, s:e]), q, beta[s:e], p, a[s:e]))
    alpha = rng.integers(0, p, size=g)
    r = flp.draw_point(rng, p, d)
    q = flp.query_statement(Y, proof, alpha, r, p, st)
    whole = flp.query(Y, flp.prove(Y, polys, beta, p, a), alpha, r, p, d)
    assert q[0] == whole[0] and np.array_equal(q[3:], whole[2:])
    assert flp.decide_statement(q, st, beta, p)
    for at in (9 + 3, 9 + 8 * g + 1 + 2):
        bad = proof.copy()
        bad[at] = (bad[at] + 1) % p
        assert not flp.decide_statement(flp.query_statement(Y, bad, alpha, r, p, st), st, beta, p)
    assert flp.statement_error(p, st) == 11 * g / (p - 8 * g - 1)
    with pytest.raises(UsageError, match="entries"):
        flp.query_statement(Y, proof[:-1], alpha, r, p, st)


# ----- the products part (a lookup argument's h (alpha - y) = 1) -------------------------------------------------

def _products_reference(Y, q, beta, a, c, p: int) -> list[int]:
    """P(0..2G) of a products part from its definition, one Python integer at a time."""
    g = Y.shape[0]
    out = []
    for x in range(2 * g + 1):
        lu = lagrange_at(range(g + 1), x, p)
        U = [(lu[0] * int(a[j]) + sum(lu[k + 1] * int(Y[k, j]) for k in range(g))) % p for j in range(Y.shape[1])]
        off = [int(q.offsets[j % len(q.offsets)]) if q.offsets else 0 for j in range(q.n)]
        out.append((sum(int(beta[(1 + i) * q.n + j]) * U[(1 + i) * q.n + j] * (int(c[i]) - U[j])
                        for i in range(q.k) for j in range(q.n)) +
                    sum(int(beta[j]) * (U[j] + off[j]) ** 2 for j in range(q.n))) % p)
    return out


def _products(p: int, g: int, n: int, k: int, seed: int, honest: bool = True):
    """n values y (small) and k blocks of their inverses 1 / (c_i - y) (arbitrary field elements), or (not
    ``honest``) arbitrary entries; blinds, weights, constants and 3 offsets of the squares uniform, one B weight in
    three zero."""
    rng = np.random.default_rng(seed)
    c = [int(v) for v in rng.integers(6000, p, size=k)]
    y = rng.integers(0, 6000, size=(g, n))
    h = [np.array([[pow(ci - int(v), -1, p) for v in row] for row in y], dtype=np.int64) for ci in c]
    Y = np.hstack([y] + h).astype(np.int64) if honest else rng.integers(0, p, size=(g, (1 + k) * n))
    m = (1 + k) * n
    beta = rng.integers(0, p, size=m)
    beta[:n:3] = 0
    q = flp.Products(n, k, tuple(int(v) for v in rng.integers(0, p, size=3)))
    return Y.astype(np.int64), q, beta, rng.integers(0, p, size=m), c


@pytest.mark.parametrize("bits", [13, 31, 42, 45, 46, 61])
@pytest.mark.parametrize("g,n,k,honest", [(16, 5, 2, True), (3, 70, 1, False), (1, 2, 3, True),
                                          (16, 66, 2, False)])
@pytest.mark.parametrize("backend", ["numpy", "compiled"])
def test_the_products_proof_is_its_definition(bits, g, n, k, honest, backend, monkeypatch):
    """Both provers of a products part (numpy: full-size entries extended in two 21-bit limbs below 2^46, field
    products above; compiled: four limb sums in doubles below 2^46, the numpy prover above) give its definition's
    P(0..2G), the B wires' weighted squares with their offsets included, for honest inverses and for arbitrary
    entries, in blocks of columns."""
    if backend == "numpy":
        monkeypatch.setattr(flp, "_products_kernel", lambda: None)
        monkeypatch.setattr(flp, "BLOCK", 32)
    elif flp._products_kernel() is None:
        _no_kernel()
    p = prime_below(bits)
    Y, q, beta, a, c = _products(p, g, n, k, bits + g + n, honest)
    assert [int(v) for v in flp.prove_products(Y, q, beta, p, a, c)] == _products_reference(Y, q, beta, a, c, p)


def test_every_vector_variant_of_the_products_kernel_gives_the_numpy_values():
    fn, simd = flp._products_function(), flp._simd()
    if fn is None or simd is None:
        _no_kernel()
    p = prime_below(42)
    best = simd(-1)
    try:
        for level in range(best + 1):
            assert simd(level) == level
            for g, n, k in ((16, 130, 2), (5, 7, 1)):
                Y, q, beta, a, c = _products(p, g, n, k, level + n, honest=n > 100)
                c = np.array(c, dtype=np.int64)
                assert np.array_equal(flp._prove_products_compiled(fn, Y, q, beta, p, a, c),
                                      flp._prove_products_numpy(Y, q, beta, p, a, c))
    finally:
        assert simd(-1) == best


def test_a_statement_with_products_passes_honest_and_fails_a_wrong_inverse():
    """prove_statement, query_statement and decide_statement with a digits part and a products part: the honest
    proof passes at a random point; one inverse changed (the proof of the changed grid, honestly computed) makes
    the nodes' sum miss the claim; a proof value changed fails the identity."""
    p = prime_below(42)
    Yd, polys, beta_d, _ = _instance(p, 8, 5, 0, 0, 3)
    Yp, q, beta_p, _, c = _products(p, flp.ROWS, 6, 2, 4)
    beta_p[:6] = 0  # no squares: the nodes' sum is the count of the products' weights
    st = flp.Statement((0, Yd.shape[1], Yd.shape[1] + Yp.shape[1]), (polys, q))
    Y, beta = np.hstack([Yd, Yp]), np.concatenate([beta_d, beta_p])
    rng = np.random.default_rng(0)
    alpha = rng.integers(0, p, size=flp.ROWS)
    r = flp.draw_point(rng, p, 8)
    claim = int((alpha.astype(object) * sum(int(v) for v in beta_p[6:])).sum() % p)  # h (c - y) = 1 everywhere

    def verdict(Y, proof):
        opened = flp.query_statement(Y, proof, alpha, r, p, st)
        return (int(opened[0]) - claim) % p, flp.decide_statement(opened, st, beta, p, c)

    proof = flp.prove_statement(Y, st, beta, p, rng, c)
    assert len(proof) == flp.statement_length(st) and verdict(Y, proof) == (0, True)
    bad = Y.copy()
    bad[3, Yd.shape[1] + 6 + 2] += 1  # an inverse of the first constant
    assert verdict(bad, flp.prove_statement(bad, st, beta, p, rng, c))[0] != 0
    forged = proof.copy()
    forged[-3] = (forged[-3] + 1) % p
    assert not verdict(Y, forged)[1]
    assert flp.statement_error(p, st) == (8 + 2) * flp.ROWS / (p - 8 * flp.ROWS - 1)


def test_a_products_part_refuses_the_wrong_shape():
    p = prime_below(31)
    with pytest.raises(UsageError, match="products part"):
        flp.prove_products(np.zeros((4, 7), np.int64), flp.Products(2, 2), np.zeros(7), p, np.zeros(7), [1, 2])
    with pytest.raises(UsageError, match="products part"):
        flp.prove_products(np.zeros((4, 6), np.int64), flp.Products(2, 2), np.zeros(6), p, np.zeros(6), [1])


def test_a_products_check_weighs_the_squares_of_its_b_wires():
    """decide_products on the opened U(r) and the proof's P(r): the definition's value passes (the B wires' squares
    with their offsets included), one more fails, and a changed offset fails."""
    p = prime_below(42)
    Y, q, beta, a, c = _products(p, flp.ROWS, 9, 2, 7)
    proof = flp.prove_products(Y, q, beta, p, a, c)
    r = flp.draw_point(np.random.default_rng(1), p, 2)
    lu = flp._lagrange_nodes(flp.ROWS + 1, r, p)
    ur = np.array([(lu[0] * int(a[j]) + sum(lu[k + 1] * int(Y[k, j]) for k in range(flp.ROWS))) % p
                   for j in range(Y.shape[1])], dtype=np.int64)
    pr = sum(lv * int(v) for lv, v in zip(flp._lagrange_nodes(2 * flp.ROWS + 1, r, p), proof, strict=True)) % p
    assert flp.decide_products(pr, ur, q, beta, p, c)
    assert not flp.decide_products(pr + 1, ur, q, beta, p, c)
    assert not flp.decide_products(pr, ur, q._replace(offsets=q.offsets[:1] + (1,) + q.offsets[2:]), beta, p, c)
