"""sqm.mechanism.calibration: the one Gaussian calibration policy, against the exact analytic condition (evaluated in
high precision with mpmath) and against dp-accounting's PLD calibration."""
import math

import dp_accounting
import mpmath
import pytest
from dp_accounting.pld import pld_privacy_accountant

from sqm.mechanism.calibration import gaussian_delta, gaussian_epsilon, gaussian_sigma

POINTS = [(0.01, 1e-5), (0.1, 1e-5), (1.0, 1e-5), (1.0, 1e-9), (4.0, 1e-6), (8.0, 1e-2), (20.0, 1e-5), (100.0, 1e-5)]


def exact_delta_mp(sigma, sens, eps):
    """Balle & Wang (2018) Thm. 8 at 50 digits."""
    with mpmath.workdps(50):
        z = mpmath.mpf(sigma) / mpmath.mpf(sens)
        a, b = 1 / (2 * z), mpmath.mpf(eps) * z
        return mpmath.ncdf(a - b) - mpmath.e ** mpmath.mpf(eps) * mpmath.ncdf(-a - b)


@pytest.mark.parametrize("eps, delta", POINTS)
def test_sigma_is_sound_and_minimal_by_the_exact_condition(eps, delta):
    s = gaussian_sigma(3.0, eps, delta)
    assert exact_delta_mp(s, 3.0, eps) <= delta  # sound
    assert exact_delta_mp(s * (1 - 1e-6), 3.0, eps) > delta  # and minimal to 1e-6
    assert gaussian_delta(s, 3.0, eps) == pytest.approx(float(exact_delta_mp(s, 3.0, eps)), rel=1e-6)


@pytest.mark.parametrize("eps, delta", [(0.1, 1e-5), (1.0, 1e-5), (4.0, 1e-6)])
def test_agrees_with_dp_accounting_pld_calibration(eps, delta):
    s = gaussian_sigma(1.0, eps, delta)
    pld = dp_accounting.calibrate_dp_mechanism(
        lambda: pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3),
        dp_accounting.GaussianDpEvent, eps, delta, dp_accounting.ExplicitBracketInterval(0.2, 50.0), tol=1e-7)
    assert pld == pytest.approx(s, rel=1e-6)  # the PLD accountant finds the same optimum (to its tolerance)


def test_scales_with_sensitivity_and_inverse():
    s1 = gaussian_sigma(1.0, 1.0, 1e-5)
    assert gaussian_sigma(7.5, 1.0, 1e-5) == pytest.approx(7.5 * s1, rel=1e-9)
    assert gaussian_epsilon(s1, 1.0, 1e-5) == pytest.approx(1.0, rel=1e-7)
    assert gaussian_delta(s1, 1.0, gaussian_epsilon(s1, 1.0, 1e-5)) <= 1e-5
    assert gaussian_sigma(1.0, math.inf, 1e-5) == 0.0 and gaussian_epsilon(0.0, 1.0, 1e-5) == math.inf
    assert gaussian_sigma(1.0, 1e12, 0.01) == pytest.approx(1 / math.sqrt(2e12), rel=1e-3)  # huge epsilon


def test_tighter_than_the_rdp_calibration_and_classic():
    from dp_accounting import GaussianDpEvent
    from dp_accounting.rdp import RdpAccountant

    s = gaussian_sigma(1.0, 1.0, 1e-5)
    acc = RdpAccountant()
    acc.compose(GaussianDpEvent(s))
    assert acc.get_epsilon(1e-5) > 1.0  # RDP cannot certify the optimum: it over-noises
    assert s < math.sqrt(2 * math.log(1.25 / 1e-5))  # classic Dwork-Roth multiplier at epsilon 1


@pytest.mark.parametrize("args, match", [((1.0, 0.0, 1e-5), "epsilon"), ((1.0, math.nan, 1e-5), "epsilon"),
                                         ((1.0, 1.0, 0.0), "delta"), ((1.0, 1.0, 1.0), "delta"),
                                         ((0.0, 1.0, 1e-5), "L2"), ((math.inf, 1.0, 1e-5), "L2")])
def test_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        gaussian_sigma(*args)


@pytest.mark.parametrize("seed", range(2))
def test_sigma_and_epsilon_err_on_the_safe_side_at_random_points_in_50_digits(seed):
    """(Issue 24, part 4.)  Over random sensitivities, epsilons and deltas, including tiny deltas where the two
    terms of delta nearly cancel in floats: the sigma returned meets the exact condition in 50-digit
    arithmetic, and so does the epsilon returned for a given sigma; both stay within 1e-7 of the optimum."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(30):
        sens = float(10 ** rng.uniform(-3, 6))
        eps = float(10 ** rng.uniform(-1.3, 1.7))
        delta = float(10 ** rng.uniform(-14, -1))
        s = gaussian_sigma(sens, eps, delta)
        assert exact_delta_mp(s, sens, eps) <= delta, (sens, eps, delta)
        assert exact_delta_mp(s * (1 - 1e-7), sens, eps) > delta  # still minimal
        e = gaussian_epsilon(s, sens, delta)
        assert exact_delta_mp(s, sens, e) <= delta and e <= eps * (1 + 1e-7) + 1e-12
