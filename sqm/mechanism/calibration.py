"""The one calibration policy for every Gaussian baseline: the tightest sound single-release Gaussian.

For ONE release of a function with L2 sensitivity Delta, N(0, sigma^2) noise is (epsilon, delta)-DP iff
(Balle & Wang 2018, Thm. 8; z = sigma / Delta)

    delta(epsilon; z) = Phi(1/(2z) - epsilon z) - e^epsilon Phi(-1/(2z) - epsilon z) <= delta.

The condition is necessary and sufficient, so the smallest z meeting it is the optimum: no accountant can
certify less noise.  :func:`gaussian_sigma` solves it with scipy (``brentq`` on log z, then the root is moved up
until the exact condition holds, so the answer is never a hair below the minimum; the second term is taken in
log space, so any epsilon works).

Why not dp-accounting's ``calibrate_dp_mechanism`` with the PLD accountant, as a first choice: it computes the
same optimum (within 1e-9 relative when tested, see ``tests/test_calibration.py``, which checks the two against
each other) but takes from a tenth of a second to most of a minute per calibration depending on its discretization and
bracket (docs/benchmarks.md, "Figures behind design choices"), and it can return a value a hair below the
minimum.  Its
``get_sigma_gaussian`` solves the same condition but may also land a hair below.  So the exact solve is the
policy, and dp-accounting's PLD is the independent check.
"""
from __future__ import annotations

import math
from fractions import Fraction

from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from .sensitivity import float_up
from .validation import check_delta, check_param
from sqm.errors import UsageError


def _check(epsilon, delta, l2_sensitivity):
    check_param("epsilon or inf", float(epsilon) if hasattr(epsilon, "__float__") else epsilon, "epsilon")
    check_delta(delta)
    if not (math.isfinite(l2_sensitivity) and l2_sensitivity > 0):
        raise UsageError(f"the L2 sensitivity must be a finite number > 0, got {l2_sensitivity!r}")


def gaussian_delta(sigma: float, l2_sensitivity: float, epsilon: float) -> float:
    """The exact delta(epsilon) of one Gaussian release with noise std ``sigma`` (Balle & Wang 2018, Thm. 8)."""
    z = float(sigma) / float(l2_sensitivity)
    if z <= 0:
        return 1.0
    a, b = 1 / (2 * z), float(epsilon) * z
    return max(float(ndtr(a - b) - math.exp(min(float(epsilon) + log_ndtr(-a - b), 0.0))), 0.0)


FLOAT_GUARD = 2.0 ** -40  # relative allowance for float rounding in the two terms of delta (see _delta_upper)


def _delta_upper(z: float, epsilon: float) -> float:
    """An upper bound on delta(epsilon; z) as floats compute it: the difference of the two terms plus
    FLOAT_GUARD (1 + epsilon + a + b) times their sum.  Each term is within a few ulps of its value at the
    float arguments, and the arguments a - b, -a - b and epsilon + log Phi carry rounding errors that the
    terms magnify by at most their size times (1 + epsilon + a + b); 2^-40 leaves a factor of 2^13 over double
    precision's 2^-53 for all of them.  The subtraction is exact up to an ulp of the larger term."""
    a, b = 1 / (2 * z), float(epsilon) * z
    t1 = float(ndtr(a - b))
    t2 = math.exp(min(float(epsilon) + float(log_ndtr(-a - b)), 0.0))
    return max(t1 - t2 + FLOAT_GUARD * (1 + float(epsilon) + a + b) * (t1 + t2), 0.0)


def _ratio_down(sigma: float, l2_sensitivity: float) -> float:
    """The float at or below sigma / Delta (a smaller z only raises delta: the safe side)."""
    from fractions import Fraction

    z = float(sigma) / float(l2_sensitivity)
    return z if Fraction(z) <= Fraction(float(sigma)) / Fraction(float(l2_sensitivity)) else math.nextafter(z, 0.0)


def gaussian_sigma(l2_sensitivity: float, epsilon: float, delta: float, rtol: float = 1e-9) -> float:
    """The smallest noise std (to relative precision ``rtol``, never below the minimum) for which ONE Gaussian
    release with L2 sensitivity ``l2_sensitivity`` is (epsilon, delta)-DP, by the exact condition above.
    ``epsilon=math.inf`` (no privacy) gives 0.0."""
    _check(epsilon, delta, l2_sensitivity)
    epsilon = float(epsilon)
    if math.isinf(epsilon):
        return 0.0

    def gap(logz):
        return gaussian_delta(math.exp(logz), 1.0, epsilon) - delta

    lo = hi = 0.0  # bracket log z: gap decreasing in z
    while gap(hi) > 0:
        hi += 2.0
    while gap(lo) <= 0:
        lo -= 2.0
        if lo < -700:
            return math.exp(hi) * float(l2_sensitivity)
    root = brentq(gap, lo, hi, xtol=1e-15, rtol=max(rtol / 4, 4.5e-16))
    z = math.exp(root)
    while _delta_upper(z, epsilon) > delta:  # brentq's root may sit a hair below the minimum; floats round
        z *= 1 + rtol / 4
    return float_up(Fraction(z) * Fraction(float(l2_sensitivity)))  # sigma / Delta >= z exactly


def gaussian_epsilon(sigma: float, l2_sensitivity: float, delta: float) -> float:
    """The smallest epsilon at ``delta`` of one Gaussian release with noise std ``sigma`` (exact; inverse of
    :func:`gaussian_sigma`; ``inf`` for sigma 0)."""
    _check(1.0, delta, l2_sensitivity)
    if sigma <= 0:
        return math.inf
    if _delta_upper(_ratio_down(sigma, l2_sensitivity), 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(sigma, l2_sensitivity, hi) > delta:
        hi *= 2
    eps = brentq(lambda e: gaussian_delta(sigma, l2_sensitivity, e) - delta, 0.0, hi, xtol=1e-14, rtol=1e-13)
    z = _ratio_down(sigma, l2_sensitivity)
    while _delta_upper(z, eps) > delta:  # the safe side of the float evaluation and of sigma / Delta
        eps = eps * (1 + 1e-12) + 1e-15
    return float(eps)
