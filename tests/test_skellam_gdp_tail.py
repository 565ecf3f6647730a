"""sqm.mechanism.skellam_gdp at the variances the releases use (V = 1e12 and 4e17, where the pmf cannot be
enumerated): the exact Gaussian-score steps of the Skellam, computed in 50-digit mpmath, lie below the proven
bounds, in the moderate tail and overall.

The quantity.  Z is Skellam of variance V (p(k) = e^-V I_k(V)), Q(w) = P(Z > w) and g(w) = Phibar^-1(Q(w)) =
Phi^-1(F(w)).  The shift pair (Z + s, Z) is G_{c s / sqrt V}-DP exactly when g(w) - g(w - s) <= c s / sqrt V for
every integer w (threshold tests are optimal: the test "reject when Z > w" has errors (Q(w), 1 - Q(w - s)), and
G_m(Q) = 1 - Phibar(Phibar^-1(Q) - m)); the module bounds the one-step form, and the bound this file checks is

    step_s(w) = sqrt(V) (g(w) - g(w - s)) / s  <=  gdp_constant(V)                       for every w,
    step_s(w)  <=  _moderate_tail(V, eta, beta_{w-s+1})      where z_{w-s+1} >= 10,

with beta_w = asinh((w + 1) / V), z_w = sqrt(V) beta_w, eta as in gdp_constant: the moderate tail's grid starting
at beta_u bounds every one-step increment g(w') - g(w' - 1) with beta_{w'} >= beta_u, so their mean over the s
steps w - s + 1 .. w too.  The points are w with z_w just above z for z in 1 .. 40 and s in 1, 7, 1000.

The exact tail.  Q(w) = P(Z >= w + 1) is Marcum's Q function (1 - Q_{w+1}(sqrt V, sqrt V)), evaluated here by its
contour integral: with the generating function G(s) = E s^Z = exp(V (s + 1/s) / 2 - V),
P(Z >= k) = (1 / 2 pi i) oint G(s) s^(-k-1) / (1 - 1/s) ds on any circle |s| = r > 1.  On the saddle-point circle
r = e^b, V sinh b = k (s = e^(b + it)), the integrand is e^C e^(-2 V cosh b sin^2(t/2)) e^(i k (sin t - t)) /
(1 - e^(-b - it)) with C = V (cosh b - 1) - k b: a Gaussian of width 1 / sqrt(V cosh b) in t, with no cancellation.

Its error, stated and accounted for.  (1) Truncation to |t| <= T (where 2 V cosh b sin^2(T/2) = 230): the rest is
below e^(C - 230) / (1 - e^-b) in absolute value, bounded exactly and added.  (2) Quadrature: 50-digit tanh-sinh
and Gauss-Legendre over the same cells; the error taken is the larger of 10x tanh-sinh's own estimate and 10x the
two rules' difference (both near 1e-50 relative).  (3) Phibar^-1 by Newton on log Phibar to 1e-45.  A relative
error e in each Q moves g by at most e / lambda(g) <= e / lambda(0) (the hazard lambda is increasing and g > 0
here), so step_s is known to within sqrt(V) (e_w + e_{w-s} + 2e-45) / (lambda(0) s); that error (below 1e-35) is
added to the exact step before it is compared with the bound.  The method itself is checked against the pmf
enumerated in double precision at V = 1e4.

Power.  The bounds are not loose: the moderate tail's lies within a relative 0.04 / z^2 of the exact step (its
slack is F2 F3's residual, about 3 / z^4, plus the grid cell's 4 (ratio - 1) / z^2), gdp_constant(V) within 1e-4.
The exact steps are 1 + (1/6 - z^2/8) / V (a measured expansion, held to 1e-3 / V): below 1 in the whole moderate
tail, so there any bound >= 1 holds and the module's (which is >= 1: its far-tail term is) passes with room; the
proof's pointwise lemma F1 F2 F3 is checked too, and without its factor F3 it would fall below the exact step.
Near the centre the step exceeds 1 (by 1 / (24 V) at z = 1), so the Gaussian's own constant, c = 1, is refused.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from sqm.mechanism import skellam_gdp as sg

mpmath = pytest.importorskip("mpmath")

DPS = 50  # digits: steps are 1 / sqrt(V) ~ 1.6e-9 apart on a score near 40, and must be known to ~1e-20
CUT = 230  # the truncated integrand is below e^-CUT of its peak (relative 1e-100)
NEWTON_TOL = 1e-45
LAMBDA_0 = math.sqrt(2.0 / math.pi)  # the Gaussian hazard at 0, its least value on t >= 0
VARIANCES = [1e12, 4e17]
ZS = [1, 2, 5, 10, 15, 20, 30, 40]
SHIFTS = [1, 7, 1000]


@functools.cache
def _tail(V: float, k: int) -> tuple:
    """(P(Z >= k), an absolute error bound) for Z Skellam of variance V, k >= 1, by the saddle-point contour
    integral (module docstring)."""
    mp = mpmath
    with mp.workdps(DPS):
        x, kk = mp.mpf(V), mp.mpf(k)
        b = mp.asinh(kk / x)
        vch = x * mp.cosh(b)
        sc = mp.sqrt(vch)
        log_c = 2 * x * mp.sinh(b / 2) ** 2 - kk * b  # V (cosh b - 1) - k b, without cancellation
        t_cut = 2 * mp.asin(mp.sqrt(CUT / (2 * vch)))  # 2 V cosh b sin^2(T/2) = CUT
        assert t_cut < mp.pi / 2  # the window is a small arc

        def f(u):  # the integrand in u = t sqrt(V cosh b), real part (it is conjugate-symmetric in t)
            t = u / sc
            e = mp.exp(-2 * vch * mp.sin(t / 2) ** 2 + 1j * kk * (mp.sin(t) - t))
            return mp.re(e / (1 - mp.exp(-b - 1j * t)))

        cells = mp.linspace(0, t_cut * sc, 6)
        ts, ts_err = mp.quad(f, cells, error=True)
        gl = mp.quad(f, cells, method="gauss-legendre")
        scale = mp.exp(log_c) / (mp.pi * sc)  # (1 / 2 pi) * 2 (both halves) * dt / du
        quad_err = 10 * max(ts_err, abs(ts - gl))
        trunc = mp.exp(-CUT) / (1 - mp.exp(-b)) * (mp.pi - t_cut) * sc  # |rest| <= e^-CUT max|1 / (1 - e^(-b-it))|
        return ts * scale, (quad_err + trunc) * scale


def _score(log_q, t0: float):
    """Phibar^-1(e^log_q) by Newton on log Phibar (slope -lambda), to NEWTON_TOL."""
    mp = mpmath
    with mp.workdps(DPS):
        t = mp.mpf(t0)
        for _ in range(100):
            log_bar = mp.log(mp.erfc(t / mp.sqrt(2)) / 2)
            hazard = mp.exp(-t * t / 2 - log_bar) / mp.sqrt(2 * mp.pi)
            dt = (log_bar - log_q) / hazard
            t += dt
            if abs(dt) < NEWTON_TOL / 10:
                return t
    raise AssertionError("Newton did not converge")


@functools.cache
def _step(V: float, w: int, s: int) -> tuple:
    """(step_s(w) = sqrt(V) (g(w) - g(w - s)) / s, its error bound, g(w)) exactly, from the tails at w + 1 and
    w - s + 1."""
    mp = mpmath
    with mp.workdps(DPS):
        q_w, e_w = _tail(V, w + 1)  # Q(w)
        q_ws, e_ws = _tail(V, w - s + 1)  # Q(w - s)
        z = math.sqrt(V) * math.asinh((w + 1) / V)
        g_w, g_ws = _score(mp.log(q_w), z), _score(mp.log(q_ws), z)
        assert g_ws > 0
        root_v = mp.sqrt(mp.mpf(V))
        step = root_v * (g_w - g_ws) / s
        err = root_v * (e_w / q_w + e_ws / q_ws + 2 * mp.mpf(NEWTON_TOL)) / (LAMBDA_0 * s)
        return step, err, g_w


def _point(V: float, z: float) -> int:
    """The least integer w with z_w = sqrt(V) asinh((w + 1) / V) >= z."""
    return math.ceil(V * math.sinh(z / math.sqrt(V))) - 1


def _eta(x: float) -> float:
    """gdp_constant's eta: the score tau_w = g(w - 1) >= z_w - eta."""
    s2pix = math.sqrt(2.0 * math.pi * x)
    p0 = 1.0 / (s2pix - 3.0)
    log_k = 1.0 / (2.0 * x) + math.log(s2pix * p0)
    return 3.0 / math.sqrt(x) + log_k / sg.PHI_06


def test_the_contour_integral_is_the_enumerated_tail():
    """At V = 1e4, where the pmf can be enumerated in double precision (SciPy's ive, tail sums in log space), the
    contour integral gives the same Q(w) (to 1e-11) and the same steps (to 1e-9), w from 1 to 35 sd."""
    from scipy.special import ive, ndtri_exp

    V = 1e4
    top = int(60 * math.sqrt(V))
    with np.errstate(divide="ignore"):
        logp = np.log(ive(np.arange(top + 1), V))
    log_geq = np.logaddexp.accumulate(logp[::-1])[::-1]  # log P(Z >= k)
    for w in (1, 99, 1001, 2500, 3500):  # ive underflows near 37 sd
        q, err = _tail(V, w + 1)
        assert float(err / q) < 1e-20  # near 1e-50, but 2e-31 at w = 1, where the pole 1/(1 - 1/s) is close
        assert float(mpmath.log(q)) == pytest.approx(log_geq[w + 1], abs=1e-11)
        for s in (s for s in (1, 7) if s <= w):
            step, _, _ = _step(V, w, s)
            enumerated = math.sqrt(V) * (ndtri_exp(log_geq[w - s + 1]) - ndtri_exp(log_geq[w + 1])) / s
            assert float(step) == pytest.approx(enumerated, rel=1e-9)


@pytest.mark.parametrize("V", VARIANCES)
@pytest.mark.parametrize("z", ZS)
def test_the_exact_steps_lie_below_the_proven_bounds(V, z):
    """step_s(w) + its error <= gdp_constant(V) at every point, and <= the moderate tail's bound from beta_{w-s+1}
    where z_{w-s+1} >= 10; and the bounds are tight: the moderate tail's within a relative 0.04 / z^2, the
    constant within 1e-4."""
    c = sg.gdp_constant(V)
    eta = _eta(V)
    w = _point(V, z)
    for s in SHIFTS:
        step, err, _ = _step(V, w, s)
        u = math.asinh((w - s + 2) / V)  # beta of the lowest step, w - s + 1
        bound = sg._moderate_tail(V, eta, u) if math.sqrt(V) * u >= 10.0 else None
        with mpmath.workdps(DPS):  # compared at full precision: the steps differ from 1 by ~1e-19 at 4e17
            assert err < mpmath.mpf(1e-30)
            assert step + err <= c
            assert c <= step * (1 + 1e-4)
            if bound is not None:
                assert step + err <= bound
                assert bound <= step * (1 + mpmath.mpf(0.04) / z ** 2)


@pytest.mark.parametrize("V", VARIANCES)
@pytest.mark.parametrize("z", ZS)
def test_each_step_is_below_its_lemma_at_its_own_point(V, z):
    """The proof's two region lemmas (docs/explanation/accounting.md), pointwise at beta = beta_w, without the
    grid: the central region's e^(beta + 1/2V) (1 + (1/sqrt V + eta) / (lambda(0) - eta)) for every w, and the
    tails' F1 F2 F3 where z_w >= 10 (there within a relative 0.04 / z^2 of the exact step).  Dropping a factor
    would break the latter: F1 F2 alone is 1 - 1/z^2 + ..., below the exact step."""
    sx, eta, w = math.sqrt(V), _eta(V), _point(V, z)
    step, err, _ = _step(V, w, 1)
    beta = math.asinh((w + 1) / V)
    zw = sx * beta
    central = math.exp(beta + 1.0 / (2.0 * V)) * (1.0 + (1.0 / sx + eta) / (sg.LAMBDA_0 - eta))
    with mpmath.workdps(DPS):
        assert step + err <= central
        if zw >= 10.0:
            t = zw - eta
            theta = (1.0 + math.exp(-beta)) / (2.0 * V * math.expm1(-beta) ** 2)
            f1, f2, f3 = 1.0 / (1.0 - eta / zw), 1.0 - 1.0 / t ** 2 + 3.0 / t ** 4, 1.0 / (1.0 - theta)
            assert step + err <= f1 * f2 * f3
            assert f1 * f2 * f3 <= step * (1 + mpmath.mpf(0.04) / z ** 2)
            assert f1 * f2 < step


@pytest.mark.parametrize("V", VARIANCES)
def test_the_exact_steps_follow_their_expansion(V):
    """A consistency check of the exact computation to ~1e-3 / V (1e-15 at V = 1e12, 2.5e-21 at 4e17): the steps
    are 1 + (1/6 - z^2 / 8) / V, z = sqrt(V) asinh(m / V) at the middle m = w + 1/2 - (s - 1)/2 of the s steps (a
    measured expansion; 1 + 1/(6V) is also the measured c(V) at the centre, bench/skellam_gdp.py).  So at these
    variances the moderate tail's steps lie below 1 and any bound >= 1 holds there: its check has room of about
    z^2 / (8V) + the bound's slack, while near the centre (z < 1.15) the steps exceed 1."""
    for z in ZS:
        w = _point(V, z)
        for s in SHIFTS:
            step, _, _ = _step(V, w, s)
            zm = math.sqrt(V) * math.asinh((w + 0.5 - (s - 1) / 2) / V)
            with mpmath.workdps(DPS):
                scaled = float((step - 1) * V)
            assert scaled == pytest.approx(1 / 6 - zm ** 2 / 8, abs=1e-3)


@pytest.mark.parametrize("V", VARIANCES)
def test_the_gaussian_constant_would_be_refused(V):
    """The check has teeth at the operating point: one sd from the centre the exact step exceeds 1 (about
    1 / (24 V) above it) by far more than its error, so accounting the Skellam as a Gaussian of its variance
    (c = 1) fails where gdp_constant(V) > 1 passes."""
    step, err, _ = _step(V, _point(V, 1.0), 1)
    with mpmath.workdps(DPS):
        assert step - err > 1
        excess = float((step - 1) * 24 * V)
    assert excess == pytest.approx(1.0, rel=0.01)
    assert sg.gdp_constant(V) > 1
