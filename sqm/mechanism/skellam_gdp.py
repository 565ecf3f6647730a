"""Gaussian DP of Skellam releases: a proven constant c(V) with which Skellam noise of variance V on every
coordinate is (c Delta2 / sqrt V)-GDP for integer shifts of L2 norm Delta2, and the exact GDP conversion.

Why this module.  SQM's Rényi bound (Lemma 2), converted to (epsilon, delta), carries 7-10% more noise than a
Gaussian of the same epsilon.  Gaussian DP (Dong, Roth and Su 2019) converts exactly, and its composition theorem
reduces a vector release with independent noise on each coordinate to one dimension; what it needs is, per
coordinate, that the Skellam shift pair is no easier to tell apart than a Gaussian one.  No library states this
for the Skellam (dp-accounting's PLD needs the pmf of the worst-case vector shift, which for Skellam noise the
norms do not determine), so it is proven here; the proof is in docs/explanation/accounting.md ("Gaussian DP of
Skellam releases") and each of its lemmas is checked against the exact pmf in tests/test_skellam_gdp.py.

The statement.  Let Z ~ Sk(V/2) (variance V; p(k) = e^-V I_k(V)), F its CDF, g = Phi^-1 o F.  If
g(w) - g(w - 1) <= c / sqrt V for every integer w, then (Z + s, Z) is G_{c|s|/sqrt V}-DP for every integer s (the
pmf is log-concave, so threshold tests are optimal, and the steps add up), and a release with independent
Skellam noise of variance V on each coordinate is G_{c Delta2 / sqrt V}-DP for every integer shift vector of L2
norm <= Delta2 (f-DP composition: G_a (x) G_b = G_sqrt(a^2 + b^2)).  :func:`gdp_constant` returns such a c for
the given V: the maximum of four bounds (the centre step, a central region, a grid over the moderate tail with
monotone factors, and the far tail), each an elementary function of V.  It uses only the Bessel-ratio bounds
e^-asinh((j+1)/V) <= I_{j+1}(V) / I_j(V) <= e^-asinh((j+1/2)/V) (Amos 1974, eq. 16; Segura 2011, Thm. 1) and
two facts about the Gaussian hazard lambda = phi / (1 - Phi): 0 < lambda' < 1, and
t / (1 - 1/t^2 + 3/t^4) <= lambda(t) for t > 0.  The floats are elementary (exp, expm1, asinh, sqrt) with a few
ulps of error; the returned constant is raised by a relative 1e-9 to cover them.

Where it helps.  c(1e15) <= 1 + 2.1e-6 and c(1e12) <= 1 + 3e-5; at small V the bound is loose (c(1e4) <= 1.22,
while the true c is 1 + 1/(6V)) and the Rényi bound wins; :mod:`sqm.mechanism.accounting` takes the smaller
epsilon of the two (both are sound).  Numpy and the standard library only: calibrating mu stays free of SciPy.
"""
from __future__ import annotations

import functools
import math

import numpy as np

PHI_06 = math.exp(-0.18) / math.sqrt(2 * math.pi)  # phi(0.6): a lower bound of lambda on [-0.6, inf)
LAMBDA_0 = math.sqrt(2 / math.pi)  # lambda(0)
FLOAT_MARGIN = 1e-9  # relative raise of the computed constant, for the floats' rounding
GRID_RATIO = 1.001  # cell ratio of the moderate-tail grid (its cells lose about 4 (ratio - 1) / z^2)
MIN_VARIANCE = 1e3  # below it the conditions of the proof fail or the bound is useless: inf (RDP applies)


def _moderate_tail(x: float, eta: float, u_start: float, u_top: float = 10.0) -> float:
    """The largest bound on sqrt(V) g-step over the w with beta_w = asinh((w + 1) / V) >= ``u_start``
    (z = sqrt(V) beta_w >= Z0 >= 10): on each cell [u_a, u_b] of a geometric grid, F1(u_a) F2(t_b) F3(u_a), then
    the far tail u >= u_top, F1(u_top) F3(u_top) (F2 <= 1 there).  F1 = 1 / (1 - eta / z) and F3 = 1 / (1 - theta)
    decrease with u, F2 = 1 - 1/t^2 + 3/t^4 (t = z - eta > sqrt 6) increases: each cell's bound holds on the cell."""
    sx = math.sqrt(x)
    n = max(1, math.ceil(math.log(u_top / u_start) / math.log(GRID_RATIO)))
    u = u_start * GRID_RATIO ** np.arange(n + 1)
    ua, ub = u[:-1], u[1:]
    f1 = 1.0 / (1.0 - eta / (sx * ua))
    tb = sx * ub - eta
    f2 = 1.0 - 1.0 / tb ** 2 + 3.0 / tb ** 4
    q = np.exp(-ua)
    theta = (1.0 + q) / (2.0 * x * np.expm1(-ua) ** 2)
    if np.any(theta >= 1):
        return math.inf
    cells = f1 * f2 / (1.0 - theta)
    ut = float(u[-1])
    theta_t = (1.0 + math.exp(-ut)) / (2.0 * x * math.expm1(-ut) ** 2)
    tail = 1.0 / (1.0 - eta / (sx * ut)) / (1.0 - theta_t)
    return max(float(cells.max()), tail)


@functools.lru_cache(maxsize=4096)
def gdp_constant(variance: float) -> float:
    """A proven c >= 1 with sqrt(V) (g(w) - g(w - 1)) <= c for every integer w, for Skellam noise of variance
    ``variance`` = V (see the module docstring); ``math.inf`` below :data:`MIN_VARIANCE`."""
    x = float(variance)
    if not (math.isfinite(x) and x >= MIN_VARIANCE):
        return math.inf
    sx = math.sqrt(x)
    delta = 1.0 / sx
    s2pix = math.sqrt(2.0 * math.pi * x)
    p0 = 1.0 / (s2pix - 3.0)  # >= p(0) = e^-V I_0(V)
    log_k = 1.0 / (2.0 * x) + math.log(s2pix * p0)  # Q(w - 1) <= K Phibar(z_{w-1} - 1/sqrt V)
    d = log_k / PHI_06  # so tau_w >= z_{w-1} - 1/sqrt V - d
    eta = 3.0 / sx + d  # tau_w >= z - eta, z = sqrt V asinh((w + 1) / V)
    if not (delta + d <= 0.6 and eta < LAMBDA_0 / 2):
        return math.inf
    a = p0 / (2.0 / math.sqrt(2.0 * math.pi))  # centre: Phi^-1(1/2 + p0/2) <= a / (1 - t1^2 / 2), t <= 0.11
    if a > 0.1:
        return math.inf
    t1 = a / (1.0 - 0.11 ** 2 / 2.0)
    centre = 2.0 * sx * a / (1.0 - t1 ** 2 / 2.0)
    # split between the central region (z <= Z0) and the moderate tail: Z0^5 ~ 3 sqrt V balances their losses
    z_star = max(10.0, (3.0 * sx) ** 0.2)
    best = math.inf
    for z0 in sorted({max(10.0, z_star * f) for f in (0.7, 1.0, 1.4)}):
        central = math.exp(z0 / sx + 1.0 / (2.0 * x)) * (1.0 + (delta + eta) / (LAMBDA_0 - eta))
        best = min(best, max(centre, central, _moderate_tail(x, eta, z0 / sx)))
    return best * (1.0 + FLOAT_MARGIN)


def skellam_gdp_mu(l2_sensitivity: float, variance: float) -> float:
    """The GDP parameter of one release with Skellam noise of variance ``variance`` on every coordinate and an
    integer statistic of L2 sensitivity ``l2_sensitivity``: c(V) Delta2 / sqrt(V) (inf where no c is proven)."""
    c = gdp_constant(variance)
    return c * float(l2_sensitivity) / math.sqrt(float(variance)) if math.isfinite(c) else math.inf


GDP_FLOAT_GUARD = 2.0 ** -40  # as sqm.mechanism.calibration.FLOAT_GUARD: float rounding in delta's two terms


def _ncdf(t: float) -> float:
    return 0.5 * math.erfc(-t / math.sqrt(2.0))


def gdp_delta(mu_g: float, epsilon: float) -> float:
    """An upper bound on the exact delta(epsilon) of mu_g-GDP, Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    (Dong, Roth and Su 2019, Cor. 2.13), as floats compute it (plus a guard of 2^-40 (1 + eps + a + b) times the
    terms).  The second term is dropped where it underflows (a larger delta: the safe side)."""
    if mu_g <= 0:
        return 0.0
    if not math.isfinite(mu_g):
        return 1.0
    a, b = mu_g / 2.0, float(epsilon) / mu_g
    t1 = _ncdf(a - b)
    tail = _ncdf(-a - b)
    t2 = math.exp(min(float(epsilon) + math.log(tail), 0.0)) if tail > 0 else 0.0
    return min(max(t1 - t2 + GDP_FLOAT_GUARD * (1.0 + float(epsilon) + a + b) * (t1 + t2), 0.0), 1.0)


def gdp_epsilon(mu_g: float, delta: float, rtol: float = 1e-12) -> float:
    """The smallest epsilon (to relative precision ``rtol``, never below it) at which ``mu_g``-GDP is
    (epsilon, delta)-DP by :func:`gdp_delta`; inf for mu_g = inf."""
    if not math.isfinite(mu_g):
        return math.inf
    if gdp_delta(mu_g, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(mu_g, hi) > delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            return math.inf
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if gdp_delta(mu_g, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi
