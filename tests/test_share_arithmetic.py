"""The int64 share arithmetic equals exact Python-integer arithmetic modulo p; Shamir sharing round-trips."""
import numpy as np
import pytest

from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import FieldTooSmall, from_signed, prime_below, prime_for_bound, to_signed

# mul_mod's paths: int64 below 2^31, a float64 quotient up to 50 bits, split in 31-bit halves above (edges in)
PRIMES = [prime_below(k) for k in (8, 31, 32, 40, 50, 51, 53, 61, 62)]


def _edge_values(p, rng, shape):
    """Random field elements with a third of them next to p (p-1, p-2, ...) and some 0, 1."""
    a = rng.integers(0, p, size=shape, dtype=np.int64)
    mask = rng.random(shape)
    a[mask < 0.3] = p - 1 - rng.integers(0, 3, size=int((mask < 0.3).sum()))
    a[(mask >= 0.3) & (mask < 0.35)] = 0
    a[(mask >= 0.35) & (mask < 0.4)] = 1
    return a


def _exact(a):
    return np.array(a, dtype=object)


@pytest.mark.parametrize("p", PRIMES)
def test_elementwise_ops_match_python_integers(p):
    rng = np.random.default_rng(p % 1000)
    a, b = _edge_values(p, rng, 4000), _edge_values(p, rng, 4000)
    A, B = _exact(a), _exact(b)
    assert list(modarith.mul_mod(a, b, p)) == list((A * B) % p)
    assert list(modarith.add_mod(a, b, p)) == list((A + B) % p)
    assert list(modarith.sub_mod(a, b, p)) == list((A - B) % p)
    assert list(modarith.neg_mod(a, p)) == list((-A) % p)
    s = int(rng.integers(0, 2**62)) * 7919 + 3  # a scalar far above p
    assert list(modarith.scalar_mul_mod(a, s, p)) == list((A * s) % p)
    assert int(modarith.sum_mod(a, 0, p)) == int(A.sum() % p)


@pytest.mark.parametrize("p", PRIMES)
def test_scalar_products_at_every_path(p):
    """scalar_mul_mod by scalars on each of its paths (int64 where s p < 2^63, the float64 quotient below 2^49,
    the general product above; s or -s mod p, whichever is smaller) and small_mul_mod, against Python integers."""
    a = _edge_values(p, np.random.default_rng(p % 997), 20_000)
    scalars = [0, 1, 2, 3, 8, 252, 1 << 31, (1 << 49) - 1, 1 << 49, p - 1, p - 8, p - (1 << 48), p // 3,
               7 * p + 5, -3, (1 << 70) + 11]
    for s in scalars:
        want = (_exact(a) * (s % p)) % p
        assert list(modarith.scalar_mul_mod(a, s, p)) == list(want), s
        if s >= 0:
            assert list(modarith.small_mul_mod(a, s, p)) == list(want), s


@pytest.mark.parametrize("bits", [32, 45, 50, 51, 56, 61, 62])
def test_float64_quotient_products_are_exact_where_a_b_over_p_is_near_an_integer(bits):
    """mul_mod's float64 quotients (one below 2^50, three on 31-bit halves above) in their hardest cases:
    a b = r (mod p) for r within 1000 of 0 or of p (b = r a^-1 mod p), so a b / p lies within 1000 / p of an
    integer and the estimate's floor can be off by one either way; 100,000 such products and 100,000 uniform
    ones, against Python integers."""
    p = prime_below(bits)
    rng = np.random.default_rng(bits)
    a = rng.integers(1, p, size=100_000, dtype=np.int64)
    r = rng.integers(0, 1000, size=100_000)
    r = np.where(rng.random(100_000) < 0.5, r, p - 1 - r)
    b = np.array([int(ri) * pow(int(ai), -1, p) % p for ai, ri in zip(a, r, strict=False)], dtype=np.int64)
    assert list(modarith.mul_mod(a, b, p)) == [int(v) for v in r]
    a, b = rng.integers(0, p, size=(2, 100_000), dtype=np.int64)
    assert list(modarith.mul_mod(a, b, p)) == list(_exact(a) * _exact(b) % p)


@pytest.mark.parametrize("p", PRIMES)
def test_matrix_products_match_python_integers(p):
    rng = np.random.default_rng(p % 997)
    A = _edge_values(p, rng, (37, 23))
    B = _edge_values(p, rng, (23, 11))
    exact = (_exact(A).dot(_exact(B))) % p
    assert (modarith.matmul_mod(A, B, p).astype(object) == exact).all()
    assert (modarith.matmul_mod(A, B[:, 0], p).astype(object) == exact[:, 0]).all()
    S = _edge_values(p, rng, (301, 9))
    G = (_exact(S).T.dot(_exact(S))) % p
    assert (modarith.gram_mod(S, p).astype(object) == G).all()


def test_gram_over_many_row_chunks_is_exact():
    # enough rows that the limb plan splits the inner dimension into several exact chunks
    p = prime_below(61)
    w, L, chunk = modarith._limb_plan(p.bit_length(), 10**6)
    rows = 3 * chunk + 5
    S = np.full((rows, 2), p - 1, dtype=np.int64)
    S[::7, 1] = p - 2
    exact = (_exact(S).T.dot(_exact(S))) % p
    assert (modarith.gram_mod(S, p).astype(object) == exact).all()
    A = np.full((3, rows), p - 1, dtype=np.int64)  # the same for a matrix product over many inner chunks
    A[1, ::5] = p - 3
    assert (modarith.matmul_mod(A, S, p).astype(object) == (_exact(A).dot(_exact(S))) % p).all()


def test_small_public_matrix_product_is_exact():
    rng = np.random.default_rng(7)
    for bits in (31, 45, 61):
        p = prime_below(bits)
        S = _edge_values(p, rng, (50, 9))
        B = rng.integers(-300, 300, size=(9, 4))
        ref = (_exact(S).dot(_exact(B))) % p
        assert (modarith.matmul_small_mod(S, B, p).astype(object) == ref).all()
    with pytest.raises(ValueError, match="out of range"):  # the fallback keeps the field's range check
        modarith.matmul_small_mod(np.ones((2, 2), np.int64), np.array([[2 ** 40, 0], [0, 1]]), prime_below(31))


def test_small_matmul_mod_exact():
    rng = np.random.default_rng(10)
    for bits in (20, 40, 51, 58):
        p = int(next(q for q in range(2 ** bits - 1, 2 ** bits - 2000, -2) if all(q % f for f in range(3, 1500, 2))))
        S = rng.integers(0, p, size=(17, 23))
        B = rng.integers(-5000, 5000, size=(23, 9))
        ref = (S.astype(object) @ B.astype(object)) % p
        assert modarith.matmul_small_mod(S, B, p).astype(object).tolist() == ref.tolist()


def test_modulus_out_of_range_is_refused():
    with pytest.raises(ValueError, match="modulus"):
        modarith.mul_mod(np.array([1]), np.array([1]), 2**62 + 1)


@pytest.mark.parametrize("M", [3, 4, 5, 7])
def test_shares_are_the_polynomial_at_1_to_M(M):
    """share(secret) is f(1..M) for f(x) = secret + sum_j c_j x^j with the t coefficients the generator draws
    first (Python integers as the reference): the walk by additions (t = 1 directly), for an array and a 0-d
    secret."""
    p, t = prime_below(61), shamir.default_threshold(M)
    for secret in (_edge_values(p, np.random.default_rng(M), (3, 4)), np.int64(p - 2)):
        got = shamir.share(secret, M, t, p, np.random.default_rng(9))
        draw = np.random.default_rng(9)
        coefs = [draw.integers(0, p, size=np.shape(secret), dtype=np.int64).astype(object) for _ in range(t)]
        for i in range(1, M + 1):
            want = (np.asarray(secret).astype(object) + sum(c * i ** (j + 1) for j, c in enumerate(coefs))) % p
            assert np.asarray(got[i - 1]).tolist() == np.asarray(want).tolist()


@pytest.mark.parametrize("M", [3, 4, 5, 7])
def test_shamir_round_trip_and_threshold(M):
    p = prime_below(61)
    t = shamir.default_threshold(M)
    rng = np.random.default_rng(M)
    secret = _edge_values(p, rng, (4, 5))
    sh = shamir.share(secret, M, t, p, rng)
    pts = list(range(1, M + 1))
    assert (shamir.reconstruct(sh, pts, p) == secret).all()
    sub = rng.choice(M, size=t + 1, replace=False)  # any t + 1 parties reconstruct
    assert (shamir.reconstruct(sh[sub], [pts[i] for i in sub], p) == secret).all()
    # t shares alone are uniformly random: a fresh sharing of another secret has the same marginal law;
    # check that t shares of a fixed secret take many values (no leak of the secret in a single share)
    many = np.stack([shamir.share(np.zeros(1, np.int64), M, t, p, rng)[0, 0] for _ in range(50)])
    assert np.unique(many).size == 50


@pytest.mark.parametrize("M", [3, 5])
def test_product_of_shares_and_degree_reduction(M):
    p = prime_below(53)
    t = shamir.default_threshold(M)
    rng = np.random.default_rng(10 + M)
    x, y = _edge_values(p, rng, 8), _edge_values(p, rng, 8)
    sx, sy = shamir.share(x, M, t, p, rng), shamir.share(y, M, t, p, rng)
    prod = np.stack([modarith.mul_mod(sx[i], sy[i], p) for i in range(M)])  # degree 2t
    pts = list(range(1, M + 1))
    assert list(shamir.reconstruct(prod, pts, p)) == list((_exact(x) * _exact(y)) % p)
    # BGW resharing: every party shares its degree-2t share, each combines its sub-shares
    subs = np.stack([shamir.share(prod[i], M, t, p, rng) for i in range(M)])  # sender, receiver, ...
    reduced = np.stack([shamir.combine_subshares(subs[:, j], pts, p) for j in range(M)])
    assert list(shamir.reconstruct(reduced[: t + 1], pts[: t + 1], p)) == list((_exact(x) * _exact(y)) % p)


def test_field_choice_and_signed_encoding():
    p = prime_for_bound(10**12, 5)
    assert p > 2 * 10**12 + 1
    vals = np.array([-(10**12), -1, 0, 1, 10**12], dtype=object)
    assert list(to_signed(from_signed(vals, p), p)) == list(vals)
    with pytest.raises(FieldTooSmall, match="62-bit limit"):
        prime_for_bound(2**61, 3)
    with pytest.raises(ValueError, match="out of range"):
        from_signed(np.array([p], dtype=object), p)


@pytest.mark.parametrize("bits", [20, 42, 53, 61])
def test_gram_with_balanced_limbs_is_exact_at_the_worst_magnitudes(bits):
    """gram_mod's balanced limbs at their worst case: every entry +-(p - 1) / 2 (the largest signed
    representatives), over enough rows that the plan takes several exact chunks, and mixed with 0, 1, p - 1."""
    p = prime_below(bits)
    w, L, chunk = modarith._signed_limb_plan(p.bit_length(), 10**6)
    assert L * chunk * (1 << (2 * w - 2)) < 1 << 53 and w * L >= p.bit_length()
    rows = 2 * chunk + 3
    S = np.full((rows, 4), (p - 1) // 2, dtype=np.int64)
    S[:, 1] = (p + 1) // 2  # -(p - 1) / 2
    S[::5, 2] = p - 1
    S[1::3, 3] = 1
    exact = (_exact(S).T.dot(_exact(S))) % p
    assert (modarith.gram_mod(S, p).astype(object) == exact).all()
