"""The Poisson Binomial Mechanism: unbiasedness, variance, the accountant against brute force, bad input."""
import itertools

import numpy as np
import pytest
from scipy.stats import binom

from sqm.mechanism import pbm


def _sum_pmf(ps, b):
    out = np.array([1.0])
    for p in ps:
        out = np.convolve(out, binom.pmf(np.arange(b + 1), b, p))
    return out


def _renyi(P, Q, a):
    return float(np.log(np.sum(P ** a * Q ** (1 - a))) / (a - 1))


def test_decode_is_unbiased_with_variance_within_theorem_2_3():
    rng = np.random.default_rng(123)
    b, beta, M, C = 8, 0.2, 3, 1.0
    x = np.array([[0.9, -0.4, 0.0, 1.0, -1.0], [0.3, 0.3, -0.7, 1.0, -1.0], [-0.5, 0.8, 0.2, 1.0, -1.0]])
    trials = 20000
    q = sum(pbm.encode(np.broadcast_to(x[m], (trials, 5)), b, beta, C, rng).q for m in range(M))
    est = pbm.decode(q, b, beta, M, C)
    true = x.sum(0)
    p = 0.5 + beta * x / C
    exact_var = (C / (beta * b)) ** 2 * np.sum(b * p * (1 - p), axis=0)
    bound = pbm.variance_bound(b, beta, M, C)
    assert bound == pytest.approx(C * C * M / (4 * beta * beta * b))
    assert np.all(exact_var <= bound + 1e-12)
    # mean within 4 standard errors (fixed seed)
    assert np.all(np.abs(est.mean(0) - true) < 4 * np.sqrt(exact_var / trials))
    # empirical variance within 5% of the exact variance, hence below the bound with the same tolerance
    assert np.allclose(est.var(0), exact_var, rtol=0.05)
    assert np.all(est.var(0) <= bound * 1.05)
    # at x = 0 the bound is attained
    assert exact_var[2] <= bound and np.isclose(np.max(exact_var), bound, rtol=0.2)


def test_encode_range_clipping_and_bad_input():
    e = pbm.encode(np.array([2.0, -3.0, 0.5, 1.0]), 16, 0.25, 1.0, rng=0)
    assert e.clipped == 2
    assert e.q.dtype == np.int64 and np.all((e.q >= 0) & (e.q <= 16))
    # a clipped value is encoded exactly as the bound itself (same seed, same draws)
    a = pbm.encode(np.array([5.0, -5.0]), 16, 0.25, 1.0, rng=7).q
    c = pbm.encode(np.array([1.0, -1.0]), 16, 0.25, 1.0, rng=7).q
    assert np.array_equal(a, c)
    for beta in (0.0, -0.1, 0.26, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            pbm.encode(np.zeros(3), 4, beta)
    for b in (0, -2, 1.5):
        with pytest.raises(ValueError, match="b >= 1"):
            pbm.encode(np.zeros(3), b, 0.1)
    with pytest.raises(ValueError, match="NaN"):
        pbm.encode(np.array([0.0, np.nan]), 4, 0.1)
    with pytest.raises(ValueError, match="outside"):
        pbm.decode(np.array([0, 100]), 4, 0.1, 3)
    with pytest.raises(ValueError, match="orders"):
        pbm.feature_rdp(1.0, 4, 0.1, 2)


@pytest.mark.parametrize("b,M,beta", [(2, 2, 0.25), (1, 3, 0.25), (3, 2, 0.1), (2, 3, 0.2), (4, 2, 0.15)])
def test_feature_rdp_upper_bounds_brute_force(b, M, beta):
    """One party's value changes anywhere in [-C, C]; the others sit anywhere: exact worst case on a grid."""
    grid = np.linspace(0.5 - beta, 0.5 + beta, 7)
    orders = [1.5, 2.0, 3.0, 6.5, 16.0]
    bound = pbm.feature_rdp(np.array(orders), b, beta, M)
    pmfs = {ps: _sum_pmf([grid[i] for i in ps], b) for ps in itertools.product(range(len(grid)), repeat=M)}
    for a, bd in zip(orders, bound, strict=False):
        worst = 0.0
        for i, j in itertools.product(range(len(grid)), repeat=2):
            for others in itertools.product(range(len(grid)), repeat=M - 1):
                worst = max(worst, _renyi(pmfs[(i,) + others], pmfs[(j,) + others], a))
        assert bd >= worst - 1e-12, (a, bd, worst)
        assert bd <= 1.25 * worst + 1e-9, (a, bd, worst)  # and not vacuous
        assert bd <= b * pbm.bernoulli_rdp(a, beta) + 1e-12


def test_feature_rdp_is_below_local_bound_and_grows_with_b_and_beta():
    a = np.array([2.0, 8.0, 32.0])
    f = pbm.feature_rdp(a, 16, 0.15, 4)
    assert np.all(f < 16 * pbm.bernoulli_rdp(a, 0.15))  # the other parties' coins hide the change
    assert np.all(pbm.feature_rdp(a, 16, 0.15, 8) <= f + 1e-12)  # more parties, more cover
    assert np.all(pbm.feature_rdp(a, 32, 0.15, 4) > f)
    assert np.all(pbm.feature_rdp(a, 16, 0.25, 4) > f)


@pytest.mark.parametrize("b,M,beta", [(2, 2, 0.25), (1, 3, 0.1), (3, 2, 0.2)])
def test_sample_rdp_is_the_exact_worst_case(b, M, beta):
    """A changed record moves every party's value: M b r_a, attained at +C -> -C, never exceeded on a grid."""
    grid = np.linspace(0.5 - beta, 0.5 + beta, 5)
    pmfs = [_sum_pmf(ps, b) for ps in itertools.product(grid, repeat=M)]
    for a in (1.5, 2.0, 5.0):
        s = pbm.sample_rdp(a, b, beta, M)
        corner = _renyi(_sum_pmf([0.5 + beta] * M, b), _sum_pmf([0.5 - beta] * M, b), a)
        assert s == pytest.approx(corner, rel=1e-9)
        worst = max(_renyi(P, Q, a) for P in pmfs for Q in pmfs)
        assert s >= worst - 1e-12


def test_privacy_report_composes_over_uses():
    r1 = pbm.privacy_report(16, 0.15, 4, 16, uses=1, delta=1e-5)
    r10 = pbm.privacy_report(16, 0.15, 4, 16, uses=10, delta=1e-5)
    assert r1.epsilon_feature == pytest.approx(r1.epsilon_feature_per_release)
    assert r1.epsilon_feature < r10.epsilon_feature < 10 * r1.epsilon_feature
    assert r10.epsilon_feature < r10.epsilon_sample
    assert pbm.privacy_report(8, 0.1, 4, 16, 10, 1e-5).epsilon_feature < r10.epsilon_feature
    with pytest.raises(ValueError, match="uses"):
        pbm.privacy_report(16, 0.15, 4, 16, uses=0, delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        pbm.privacy_report(16, 0.15, 4, 16, uses=1, delta=0.0)


def test_theorem62_route_is_never_below_the_exact_sample_worst_case():
    """The paper's induction (weak triangle inequality) fed with our feature bound vs the exact worst case."""
    a = np.array([1.5, 2.0, 4.0, 16.0])
    for b, M, beta in ((2, 2, 0.25), (3, 3, 0.1), (8, 2, 0.2)):
        assert np.all(pbm.theorem62_sample_rdp(a, b, beta, M) >= pbm.sample_rdp(a, b, beta, M) - 1e-12)


def test_pbm_rdp_composes_coordinates_and_uses_and_refuses_bad_levels():
    """pbm_rdp(orders, b, beta, M, embedding_size, uses, level): the accounting event's RDP."""
    a = np.array([2.0, 8.0, 32.0])
    f = pbm.pbm_rdp(a, 16, 0.15, 4, embedding_size=16, uses=10)
    assert np.allclose(f, 160 * pbm.feature_rdp(a, 16, 0.15, 4), rtol=1e-12)
    s = pbm.pbm_rdp(a, 16, 0.15, 4, 16, 10, level="sample")
    assert np.allclose(s, 160 * 4 * 16 * pbm.bernoulli_rdp(a, 0.15), rtol=1e-12) and np.all(s > f)
    assert isinstance(pbm.pbm_rdp(2.0, 4, 0.1, 2), float)
    rep = pbm.privacy_report(16, 0.15, 4, 16, uses=10, delta=1e-5)
    from sqm.mechanism.accounting import epsilon
    assert rep.epsilon_feature == pytest.approx(
        epsilon(pbm.PBM_ORDERS, pbm.pbm_rdp(pbm.PBM_ORDERS, 16, 0.15, 4, 16, 10), 1e-5))
    with pytest.raises(ValueError, match="level"):
        pbm.pbm_rdp(a, 16, 0.15, 4, level="record")
    with pytest.raises(ValueError, match="uses"):
        pbm.pbm_rdp(a, 16, 0.15, 4, uses=0)


def test_encode_draws_binomial_b_p_for_arrays_and_tensors():
    """The coin sampler's counts against the exact Binom(b, p) pmf: chi-square over 100,000 draws per value
    (fixed seed; every p-value above 1e-3), numpy arrays and torch tensors alike (the same integers for the same
    stream), b above one coin block included."""
    from scipy.stats import chisquare

    x = np.array([-1.0, -0.3, 0.0, 0.55, 1.0])
    for b, beta in ((16, 0.15), (5, 0.25), (3, 0.1)):
        q = pbm.encode(np.broadcast_to(x, (100000, 5)), b, beta, 1.0, rng=b).q
        for j, v in enumerate(x):
            counts = np.bincount(q[:, j], minlength=b + 1)
            expected = binom.pmf(np.arange(b + 1), b, 0.5 + beta * v) * len(q)
            keep = expected > 5  # chi-square's usual validity condition; the rest pooled
            obs = np.append(counts[keep], counts[~keep].sum())
            exp = np.append(expected[keep], expected[~keep].sum())
            if exp[-1] == 0:
                obs, exp = obs[:-1], exp[:-1]
            assert chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3, (b, beta, v)
    torch = pytest.importorskip("torch")
    small = np.broadcast_to(x, (64, 5))
    t = pbm.encode(torch.tensor(small), 16, 0.15, 1.0, rng=9).q
    assert isinstance(t, torch.Tensor) and np.array_equal(t.numpy(), pbm.encode(small, 16, 0.15, 1.0, rng=9).q)
    old = pbm.COIN_BLOCK_ELEMENTS
    try:  # coins drawn in blocks of 2 per value give the same integers as in one block
        pbm.COIN_BLOCK_ELEMENTS = 2 * small.size
        blocked = pbm.encode(small, 16, 0.15, 1.0, rng=9).q
    finally:
        pbm.COIN_BLOCK_ELEMENTS = old
    assert np.array_equal(blocked, t.numpy())
