import numpy as np
import pytest

from sqm.quantize import stochastic_round
from sqm.skellam import skellam, skellam_share, skellam_tail_bound


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
