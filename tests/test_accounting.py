import math

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from sqm import accounting as acc


@pytest.mark.parametrize("mu", [1.0, 5.0, 25.0, 100.0, 1000.0])
def test_lemma2_upper_bounds_exact_divergence(mu):
    for alpha in (2, 3, 5, 10, 20):
        for shift in (1, 2, 5, 10, 30):
            exact = acc.exact_skellam_renyi(alpha, shift, mu)
            bound = acc.skellam_rdp(alpha, shift, shift, mu)
            assert exact <= bound * (1 + 1e-9), (alpha, shift, mu, exact, bound)


def test_two_dimensional_soundness():
    a, b, mu = 3, 4, 20.0
    for alpha in (2, 4, 8):
        exact = acc.exact_skellam_renyi(alpha, a, mu) + acc.exact_skellam_renyi(alpha, b, mu)
        assert exact <= acc.skellam_rdp(alpha, a + b, math.hypot(a, b), mu)


def test_exact_divergence_sanity():
    assert acc.exact_skellam_renyi(3, 0, 10.0) == 0.0
    # Gaussian limit alpha s^2 / (4 mu) (variance 2 mu) for large mu
    g = 4 * 5 ** 2 / (4 * 5000.0)
    assert abs(acc.exact_skellam_renyi(4, 5, 5000.0) / g - 1) < 0.03


def test_server_and_client_formulas_match_eqs_12_13():
    rng = np.random.default_rng(0)
    for _ in range(50):
        a, l2, mu, n = rng.integers(2, 50), rng.random() * 100 + 1, rng.random() * 1e4 + 1, rng.integers(2, 10)
        l1 = min(l2 ** 2, 7 * l2)
        eq12 = a * l2 ** 2 / (4 * mu) + min(((2 * a - 1) * l2 ** 2 + 6 * l1) / (16 * mu ** 2), 3 * l1 / (4 * mu))
        eq13 = a * n * l2 ** 2 / ((n - 1) * mu) + min(
            ((2 * a - 1) * n ** 2 * l2 ** 2 + 3 * n ** 2 * l1) / (4 * (n - 1) ** 2 * mu ** 2),
            3 * n * l1 / (2 * (n - 1) * mu))
        assert math.isclose(acc.server_rdp(a, l1, l2, mu), eq12, rel_tol=1e-12)
        assert math.isclose(acc.client_rdp(a, l1, l2, mu, n), eq13, rel_tol=1e-12)


def test_subsampled_rdp_properties():
    l1, l2, mu = 40.0, 10.0, 500.0
    for a in (2, 3, 8, 32):
        full = acc.skellam_rdp(a, l1, l2, mu)
        assert math.isclose(acc.subsampled_rdp(a, 1.0, 7, l1, l2, mu), 7 * full)
        vals = [acc.subsampled_rdp(a, q, 3, l1, l2, mu) for q in (0.001, 0.01, 0.1, 0.5)]
        assert all(x < y for x, y in zip(vals, vals[1:]))
        assert vals[-1] <= 3 * full
    # direct evaluation of Eq. 20 for small alpha
    a, q, R = 4, 0.05, 10
    direct = (1 - q) ** (a - 1) * (a * q - q + 1) + sum(
        math.comb(a, l) * (1 - q) ** (a - l) * q ** l * math.exp((l - 1) * acc.skellam_rdp(l, l1, l2, mu))
        for l in range(2, a + 1))
    assert math.isclose(acc.subsampled_rdp(a, q, R, l1, l2, mu), R / (a - 1) * math.log(direct), rel_tol=1e-10)


def test_epsilon_conversion_uses_dp_accounting():
    orders = np.array(acc.DEFAULT_ORDERS, float)
    rdp = acc.skellam_rdp(orders, 3.0, 2.0, 50.0)
    assert acc.epsilon(orders, rdp, 1e-5) == compute_epsilon(orders, rdp, 1e-5)[0]
    e1 = acc.server_epsilon(50.0, 1e-5, 3.0, 2.0)
    e2 = acc.server_epsilon(500.0, 1e-5, 3.0, 2.0)
    assert e2 < e1


@pytest.mark.parametrize("q, rounds", [(1.0, 1), (0.01, 500)])
def test_calibration_round_trip(q, rounds):
    l2 = 1000.0
    l1 = acc.l1_from_l2(l2, 100)
    cal = acc.calibrate_mu(1.0, 1e-5, l1, l2, q=q, rounds=rounds, n_parties=3)
    assert cal.epsilon_server <= 1.0
    assert acc.server_epsilon(0.99 * cal.mu, 1e-5, l1, l2, q, rounds) > 1.0
    assert cal.epsilon_client is not None and cal.epsilon_client > 0


@pytest.mark.parametrize("call, match", [
    (lambda: acc.calibrate_mu(0, 1e-5, 1, 1), "epsilon"),
    (lambda: acc.calibrate_mu(1, 0, 1, 1), "delta"),
    (lambda: acc.calibrate_mu(1, 1.5, 1, 1), "delta"),
    (lambda: acc.calibrate_mu(1, 1e-5, 1, 0), "L2"),
    (lambda: acc.calibrate_mu(1, 1e-5, 1, 1, q=0), "sampling rate"),
    (lambda: acc.calibrate_mu(1, 1e-5, 1, 1, q=1.5), "sampling rate"),
    (lambda: acc.calibrate_mu(1, 1e-5, 1, 1, rounds=0), "rounds"),
    (lambda: acc.skellam_rdp(2, 1, 1, 0), "mu"),
    (lambda: acc.skellam_rdp(1, 1, 1, 1), "orders"),
    (lambda: acc.subsampled_rdp(2.5, 0.1, 1, 1, 1, 1), "integer orders"),
    (lambda: acc.client_rdp(2, 1, 1, 1, 1), "n_parties"),
])
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("eps, delta", [(0.01, 1e-5), (1.0, 1e-5), (8.0, 0.01), (100.0, 1e-5)])
def test_analytic_gaussian_sigma_is_the_smallest_that_meets_the_target(eps, delta):
    from dp_accounting.gaussian_mechanism import get_epsilon_gaussian

    from sqm.accounting import analytic_gaussian_sigma

    s = analytic_gaussian_sigma(eps, delta, 3.0)
    assert get_epsilon_gaussian(s / 3.0, delta) <= eps * (1 + 1e-12)  # met (never a hair below the minimum)
    assert get_epsilon_gaussian(0.999 * s / 3.0, delta) > eps  # and minimal
    assert analytic_gaussian_sigma(1e12, 0.01) == pytest.approx(1 / math.sqrt(2e12), rel=1e-3)  # huge epsilon
