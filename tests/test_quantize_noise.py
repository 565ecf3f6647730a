import numpy as np
import pytest

from sqm.mechanism.quantize import stochastic_round
from sqm.mechanism.skellam import skellam, skellam_share, skellam_tail_bound


def test_stochastic_round_unbiased_and_bounded():
    x = np.array([0.3, -1.7, 2.25, -0.01, 5.0])
    gamma = 7.0
    draws = np.stack([stochastic_round(x, gamma, seed=s) for s in range(4000)])
    assert draws.dtype == np.int64
    assert np.all(np.abs(draws - gamma * x) < 1)  # always one of the two nearest integers
    # unbiased: standard error <= 0.5 / sqrt(4000) = 0.0079; 5 sigma tolerance
    assert np.allclose(draws.mean(axis=0), gamma * x, atol=0.04)
    assert np.all(draws[:, 4] == 35)  # integers are kept exactly


def test_stochastic_round_seed_reproducible_and_entropy_differs():
    x = np.random.default_rng(0).random((20, 5))
    assert np.array_equal(stochastic_round(x, 100, seed=3), stochastic_round(x, 100, seed=3))
    a, b = stochastic_round(x, 100), stochastic_round(x, 100)  # OS entropy
    assert not np.array_equal(a, b)  # 100 fair-ish coins agree with probability ~2^-100


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_stochastic_round_rejects_nonfinite(bad):
    with pytest.raises(ValueError, match="NaN or infinite"):
        stochastic_round(np.array([1.0, bad]), 10)


@pytest.mark.parametrize("gamma", [0.5, 0, -3, np.nan])
def test_stochastic_round_rejects_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        stochastic_round(np.array([1.0]), gamma)


def test_skellam_moments_and_shares():
    mu = 12.5
    z = skellam(mu, 200_000, seed=1)
    assert z.dtype == np.int64
    # mean 0 (se = sqrt(25/2e5) = 0.011) and variance 2 mu (se ~ 0.08)
    assert abs(z.mean()) < 0.05
    assert abs(z.var() - 2 * mu) < 0.5
    shares = sum(skellam_share(mu, 5, 200_000, seed=10 + j) for j in range(5))
    assert abs(shares.var() - 2 * mu) < 0.5
    assert abs(shares.mean()) < 0.05


def test_skellam_tail_bound_is_a_bound():
    mu, d = 50.0, 1000
    k = skellam_tail_bound(mu, d)
    z = skellam(mu, (200, d), seed=2)
    assert np.abs(z).max() <= k
    assert k < 60 * np.sqrt(2 * mu)  # and not absurdly loose
    assert skellam_tail_bound(0, 5) == 0
    assert skellam_tail_bound(4 * mu, d) > k


@pytest.mark.parametrize("lam", [12.5, 57.3])
def test_poisson_offset_matches_the_poisson_pmf(lam):
    # the large-mean sampler, run where the exact pmf is easy to tabulate: chi-square at a fixed seed
    from scipy import stats

    from sqm.mechanism.skellam import poisson_offset

    x = poisson_offset(lam, 200_000, np.random.default_rng(1)) + int(np.floor(lam))
    ks = np.arange(0, int(lam + 8 * np.sqrt(lam)))
    obs = np.array([(x == k).sum() for k in ks])
    exp = stats.poisson.pmf(ks, lam) * x.size
    keep = exp > 5
    assert stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue > 1e-3


def test_skellam_with_huge_mu_is_exact_in_the_low_bits():
    # numpy's Poisson at lam = 1e19 returns multiples of 2^10; ours keeps every residue and the right law
    from scipy import stats

    mu = 1e19
    z = skellam(mu, 200_000, np.random.default_rng(2))
    assert z.dtype == np.int64
    sd = np.sqrt(2 * mu)
    assert abs(z.mean()) < 5 * sd / np.sqrt(z.size)
    assert abs(z.astype(float).var() / (2 * mu) - 1) < 0.02  # sd of the estimate ~ 0.0032
    assert stats.kstest(z / sd, "norm").pvalue > 1e-3  # Sk(mu) is Gaussian to within 1e-9 here
    assert np.unique(z % 1024).size == 1024
