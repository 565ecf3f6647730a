import functools
import math

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from sqm.mechanism import accounting as acc


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
        # the paper's Eq. 13 is for replace-one neighbours; under zero-out (the one relation here) a record moves
        # the sum by at most (l1, l2), half of replace-one's (2 l1, 2 l2): Eq. 13 at (l1 / 2, l2 / 2)
        h1, h2 = l1 / 2, l2 / 2
        eq13_zero_out = a * n * h2 ** 2 / ((n - 1) * mu) + min(
            ((2 * a - 1) * n ** 2 * h2 ** 2 + 3 * n ** 2 * h1) / (4 * (n - 1) ** 2 * mu ** 2),
            3 * n * h1 / (2 * (n - 1) * mu))
        assert math.isclose(acc.client_rdp(a, l1, l2, mu, n), eq13_zero_out, rel_tol=1e-12)
        assert eq13 > eq13_zero_out


def test_subsampled_rdp_properties():
    l1, l2, mu = 40.0, 10.0, 500.0
    for a in (2, 3, 8, 32):
        full = acc.skellam_rdp(a, l1, l2, mu)
        assert math.isclose(acc.subsampled_rdp(a, 1.0, 7, l1, l2, mu), 7 * full)
        vals = [acc.subsampled_rdp(a, q, 3, l1, l2, mu) for q in (0.001, 0.01, 0.1, 0.5)]
        assert all(x < y for x, y in zip(vals, vals[1:], strict=False))
        assert vals[-1] <= 3 * full
    # direct evaluation of Eq. 20 for small alpha
    a, q, R = 4, 0.05, 10
    direct = (1 - q) ** (a - 1) * (a * q - q + 1) + sum(
        math.comb(a, j) * (1 - q) ** (a - j) * q ** j * math.exp((j - 1) * acc.skellam_rdp(j, l1, l2, mu))
        for j in range(2, a + 1))
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
    from sqm.mechanism.sensitivity import l1_from_l2

    l1 = l1_from_l2(l2, 100)
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

    from sqm.mechanism.accounting import analytic_gaussian_sigma

    s = analytic_gaussian_sigma(eps, delta, 3.0)
    assert get_epsilon_gaussian(s / 3.0, delta) <= eps * (1 + 1e-12)  # met (never a hair below the minimum)
    assert get_epsilon_gaussian(0.999 * s / 3.0, delta) > eps  # and minimal
    assert analytic_gaussian_sigma(1e12, 0.01) == pytest.approx(1 / math.sqrt(2e12), rel=1e-3)  # huge epsilon


# ----- the exact divergence (the oracle above) against a 40-digit reference --------------------------------
def _window(alpha, shift, mu):
    """The reference's own summation range: from below 0 to beyond alpha * shift, 20 std of Sk(mu) wider."""
    margin = abs(shift) + int(20 * math.sqrt(2 * mu)) + 100
    return int(min(0, alpha * shift)) - margin, int(max(0, alpha * shift)) + margin


@functools.cache
def _skellam_pmf_mp(mu, K):
    """P(0..K) of Sk(mu) = e^-2mu I_k(2mu) in mpmath: Miller's backward recurrence I_(k-1) = I_(k+1) + (2k / x)
    I_k from far beyond K, normalized by sum_k P(k) = 1 (mpmath's exponents do not underflow)."""
    import mpmath

    x = mpmath.mpf(2 * mu)
    top = K + int(10 * math.sqrt(2 * mu)) + 200
    J = [mpmath.mpf(0)] * (top + 2)
    J[top] = mpmath.mpf(1)
    for k in range(top, 0, -1):
        J[k - 1] = J[k + 1] + (2 * k / x) * J[k]
    total = J[0] + 2 * mpmath.fsum(J[1:])
    return [v / total for v in J[:K + 1]]


@pytest.mark.parametrize("alpha, shift, mu, expected", [
    (32, 100, 1000.0, 60.8), (64, 1000, 1e4, 930.9),  # the two points of issue 13 (the old window: 55.6, 229.7)
    (2, 1, 1.0, None), (20, 30, 1.0, None), (8, 50, 200.0, None), (3.5, 7, 10.0, None), (16, -40, 300.0, None)])
def test_exact_divergence_matches_high_precision_sum(alpha, shift, mu, expected):
    import mpmath

    lo, hi = _window(alpha, shift, mu)
    with mpmath.workdps(40):
        P = _skellam_pmf_mp(mu, max(-lo, hi) + abs(shift))
        terms = [P[abs(k - shift)] ** alpha * P[abs(k)] ** (1 - alpha) for k in range(lo, hi + 1)]
        total = mpmath.fsum(terms)
        assert max(terms[0], terms[-1]) < total * mpmath.mpf(10) ** -30  # the reference's window holds the mass
        ref = float(mpmath.log(total) / (alpha - 1))
    got = acc.exact_skellam_renyi(alpha, shift, mu)
    assert got == pytest.approx(ref, rel=1e-10)
    if expected is not None:
        assert round(got, 1) == expected
    assert got <= acc.skellam_rdp(alpha, abs(shift), abs(shift), mu)  # Lemma 2 holds there too


def test_log_skellam_pmf_beyond_float_range():
    import mpmath

    ks = np.array([0, 3, 100, 2000, 40000, 64000])
    got = acc.log_skellam_pmf(ks, 1e4)
    with mpmath.workdps(40):
        P = _skellam_pmf_mp(1e4, _window(64, 1000, 1e4)[1] + 1000)  # the same as the divergence test's
    for k, g in zip(ks, got, strict=False):
        assert g == pytest.approx(float(mpmath.log(P[k])), rel=1e-11, abs=1e-11)


def test_failure_probability_enters_delta_with_one_plus_e_epsilon():
    assert acc.delta_with_failure(1e-6, 2.0, 1e-8) == pytest.approx(1e-6 + (1 + math.e ** 2) * 1e-8, rel=1e-12)
    assert acc.delta_before_failure(1e-5, 1.0, 1e-7) == pytest.approx(1e-5 - (1 + math.e) * 1e-7, rel=1e-12)
    d = acc.delta_before_failure(1e-5, 3.0, 2e-8)
    assert acc.delta_with_failure(d, 3.0, 2e-8) == pytest.approx(1e-5, rel=1e-12)
    with pytest.raises(ValueError, match="uses up delta"):
        acc.delta_before_failure(1e-5, 8.0, 1e-8)  # (1 + e^8) 1e-8 = 3e-5 > 1e-5
    with pytest.raises(ValueError, match="eta"):
        acc.delta_with_failure(1e-5, 1.0, -1e-9)


def test_no_failure_leaves_delta_at_any_epsilon_and_a_huge_one_uses_it_up():
    """eta = 0 adds nothing even where e^epsilon overflows a float (epsilon 1000: an SQM-LR fit there had raised
    OverflowError); eta > 0 there makes (1 + e^epsilon) eta infinite: delta_with_failure is vacuous and
    delta_before_failure refuses with its message."""
    assert acc.delta_with_failure(1e-5, 1000.0, 0.0) == acc.delta_before_failure(1e-5, 1000.0, 0.0) == 1e-5
    assert acc.delta_with_failure(1e-5, 1000.0, 1e-12) == math.inf
    with pytest.raises(ValueError, match=r"uses up delta .*= inf"):
        acc.delta_before_failure(1e-5, 1000.0, 1e-12)
