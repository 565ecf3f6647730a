"""Rényi DP of the Skellam mechanism and its conversion to (epsilon, delta): the formulas, with no composition.

A leaf of the accounting: :mod:`sqm.mechanism.events` describes releases with these
curves, :mod:`sqm.mechanism.pbm` converts PBM's, and :mod:`sqm.mechanism.accounting` composes and calibrates with the
events; none of them imports the others in a circle.  The formulas are those of :mod:`sqm.mechanism.accounting`'s
docstring (SQM paper, Lemma 2 / Eq. 3, 12, 13, 20-23); :func:`exact_skellam_renyi` checks them against the exact
divergence.

It imports numpy only at its top: the Skellam curve (Lemma 2) and the conversion (:func:`epsilon_and_order`, the
same operations as dp-accounting's ``compute_epsilon``, which ``tests/test_fast_calibration.py`` checks bit for
bit) need nothing else, so a launcher or a party process calibrates mu without importing SciPy or dp-accounting
(their import time is the cost of a party's start).  SciPy is imported where a formula needs it (the subsampled bound,
the exact divergence).
"""
from __future__ import annotations

import math

import numpy as np

from .validation import check_delta
from sqm.errors import UsageError

DEFAULT_ORDERS = tuple(list(range(2, 65)) + [80, 96, 128, 160, 192, 256, 384, 512, 768, 1024])


def _check_pos(v, name):
    if not (np.all(np.isfinite(v)) and np.all(np.asarray(v) > 0)):
        raise UsageError(f"{name} must be > 0, got {v!r}")


def _check_sens(l1, l2):
    _check_pos(l1, "the L1 sensitivity l1")
    _check_pos(l2, "the L2 sensitivity l2")


def skellam_rdp(alpha, l1: float, l2: float, mu: float):
    """Lemma 2: RDP of order alpha > 1 for aggregate noise Sk(mu) (vectorized over alpha)."""
    _check_sens(l1, l2)
    _check_pos(mu, "mu")
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(a <= 1):
        raise UsageError(f"RDP orders must be > 1, got {alpha!r}")
    val = a * l2 ** 2 / (4 * mu) + np.minimum(((2 * a - 1) * l2 ** 2 + 6 * l1) / (16 * mu ** 2), 3 * l1 / (4 * mu))
    return float(val) if np.ndim(val) == 0 else val


def server_rdp(alpha, l1: float, l2: float, mu: float):
    """Eq. 12: server-observed RDP (zero-out neighbours; the server sees Sk(mu))."""
    return skellam_rdp(alpha, l1, l2, mu)


def client_rdp(alpha, l1: float, l2: float, mu: float, n_parties: int):
    """Eq. 13 under zero-out neighbours: client-observed RDP = skellam_rdp(alpha, l1, l2, mu (n - 1) / n) (the
    paper's replace-one form doubles l1 and l2; see the module docstring)."""
    if int(n_parties) != n_parties or n_parties < 2:
        raise UsageError(f"client-observed privacy needs n_parties >= 2 (a lone client knows all the noise), "
                         f"got {n_parties!r}")
    _check_pos(mu, "mu")
    return skellam_rdp(alpha, l1, l2, mu * (n_parties - 1) / n_parties)


def client_rdp_rounds(alpha, l1, l2, mu, n_parties, rounds: int):
    """Eq. 21: R rounds of client-observed RDP (clients know which records were sampled)."""
    _check_rounds(rounds)
    return rounds * client_rdp(alpha, l1, l2, mu, n_parties)


def _check_rounds(rounds):
    if int(rounds) != rounds or rounds < 1:
        raise UsageError(f"rounds must be an integer >= 1, got {rounds!r}")


def _check_q(q):
    if not (np.isfinite(q) and 0 < q <= 1):
        raise UsageError(f"sampling rate q must lie in (0, 1], got {q!r}")


def subsampled_rdp(alpha, q: float, rounds: int, l1: float, l2: float, mu: float):
    """Eq. 20 with tau_l of Eq. 23: Poisson subsampling at rate q, R rounds, integer alpha >= 2."""
    _check_q(q)
    _check_rounds(rounds)
    alphas = np.atleast_1d(np.asarray(alpha))
    if np.any(alphas != np.round(alphas)) or np.any(alphas < 2):
        raise UsageError(f"subsampled RDP needs integer orders >= 2, got {alpha!r}")
    from scipy.special import gammaln, logsumexp

    out = []
    for a in alphas.astype(int):
        if q == 1:
            out.append(rounds * skellam_rdp(a, l1, l2, mu))
            continue
        ls = np.arange(2, a + 1)
        tau = np.asarray(skellam_rdp(ls.astype(float), l1, l2, mu))
        log_binom = gammaln(a + 1) - gammaln(ls + 1) - gammaln(a - ls + 1)
        terms = log_binom + (a - ls) * math.log1p(-q) + ls * math.log(q) + (ls - 1) * tau
        first = (a - 1) * math.log1p(-q) + math.log(a * q - q + 1)
        out.append(rounds / (a - 1) * float(logsumexp(np.r_[first, terms])))
    return out[0] if np.ndim(alpha) == 0 else np.array(out)


def epsilon(orders, rdp_values, delta: float) -> float:
    """(epsilon, delta) from an RDP curve (:func:`epsilon_and_order`)."""
    return epsilon_and_order(orders, rdp_values, delta)[0]


def epsilon_and_order(orders, rdp_values, delta: float) -> tuple[float, float]:
    """(epsilon, the order attaining it) at ``delta`` of an RDP curve: :func:`compute_epsilon`."""
    check_delta(delta)
    eps, order = compute_epsilon(np.asarray(orders, float), np.asarray(rdp_values, float), delta)
    return float(eps), float(order)


def compute_epsilon(orders, rdp_values, delta: float) -> tuple[float, float]:
    """dp-accounting's ``rdp_privacy_accountant.compute_epsilon`` (version 0.6.0), operation for operation, so
    that the conversion needs neither dp-accounting nor SciPy at import (``tests/test_fast_calibration.py``
    checks that the two give the same floats on many curves):

    epsilon = min over orders a of r(a) + log(1 - 1/a) - log(delta a) / (a - 1) (Canonne, Kamath, Steinke 2020,
    Prop. 12; Asoodeh et al. 2020, Eq. 20), 0 where delta^2 + expm1(-r) > 0 (the bound through the KL
    divergence: delta <= sqrt(1 - e^-r)) or r < 0, inf at orders <= 1.01; the scalar ``math`` functions in a
    loop, as there (numpy's vectorized log may differ from them in the last bit); its errors are UsageErrors."""
    if delta < 0:
        raise UsageError(f"Delta cannot be negative. Found {delta}.")
    if delta == 0:
        return (0, 0) if all(r == 0 for r in rdp_values) else (np.inf, 0)
    if len(orders) != len(rdp_values):
        raise UsageError("Input lists must have the same length.")
    eps = []
    for a, r in zip(orders, rdp_values, strict=False):
        if a < 1:
            raise UsageError(f"Renyi divergence order must be at least 1. Found {a}.")
        if r < 0:
            value = 0.0  # a negative divergence: numerical trouble upstream (dp-accounting warns, returns 0)
        elif delta ** 2 + math.expm1(-r) > 0:
            value = 0
        elif a > 1.01:
            value = r + math.log1p(-1 / a) - math.log(delta * a) / (a - 1)
        else:
            value = np.inf
        eps.append(value)
    best = int(np.argmin(eps))
    return max(0, eps[best]), orders[best]



def _log_ive_debye(nu: np.ndarray, x: float) -> np.ndarray:
    """log(I_nu(x) e^-x) by Debye's uniform asymptotic expansion (DLMF 10.41.3, four correction terms; relative
    error below 1e-12 for nu >= 50, where it is used)."""
    z = x / nu
    sq = np.sqrt(1 + z * z)
    t = 1 / sq
    eta = sq + np.log(z / (1 + sq))
    t2 = t * t
    u1 = t * (3 - 5 * t2) / 24
    u2 = t2 * (81 - 462 * t2 + 385 * t2 * t2) / 1152
    u3 = t * t2 * (30375 - 369603 * t2 + 765765 * t2 ** 2 - 425425 * t2 ** 3) / 414720
    u4 = t2 * t2 * (4465125 - 94121676 * t2 + 349922430 * t2 ** 2 - 446185740 * t2 ** 3
                    + 185910725 * t2 ** 4) / 39813120
    series = 1 + u1 / nu + u2 / nu ** 2 + u3 / nu ** 3 + u4 / nu ** 4
    return nu * eta - 0.5 * np.log(2 * np.pi * nu) - 0.5 * np.log(sq) + np.log(series) - x


def log_skellam_pmf(k, mu: float) -> np.ndarray:
    """log P(k) of Sk(mu) (difference of two Poisson(mu)): log(exp(-2mu) I_|k|(2mu)), without underflow (scipy's
    ``ive`` where it is well above the float64 range's bottom, Debye's expansion beyond)."""
    from scipy.special import ive

    nu = np.abs(np.asarray(k, dtype=np.float64))
    with np.errstate(divide="ignore"):
        out = np.log(ive(nu, 2 * mu))
    far = ~(out > -600) & (nu >= 50)
    if np.any(far):
        out[far] = _log_ive_debye(nu[far], 2 * mu)
    return out


def exact_skellam_renyi(alpha: float, shift: int, mu: float) -> float:
    """Exact D_alpha(Sk(mu) + shift || Sk(mu)) = log(sum_k P(k - shift)^alpha P(k)^(1 - alpha)) / (alpha - 1).

    Reference for tests.  The summand peaks near k = alpha * shift (far in the tail of Sk(mu) when
    alpha * shift >> sqrt(mu), where the pmf is taken in log space by :func:`log_skellam_pmf`); the window
    starts around the peak and is widened until the summand at both ends is 60 nats below its maximum."""
    from scipy.special import logsumexp

    shift = int(shift)
    if shift == 0:
        return 0.0
    if not alpha > 1:
        raise UsageError(f"the Renyi order must be > 1, got {alpha!r}")
    center = alpha * shift
    half = abs(shift) + int(40 * math.sqrt(2 * mu)) + 200
    for _ in range(60):
        lo, hi = int(min(0, center) - half), int(max(0, center) + half)
        k = np.arange(lo, hi + 1)
        terms = alpha * log_skellam_pmf(k - shift, mu) + (1 - alpha) * log_skellam_pmf(k, mu)
        peak = float(np.max(terms))
        if terms[0] < peak - 60 and terms[-1] < peak - 60:
            return float(logsumexp(terms) / (alpha - 1))
        center, half = float(k[int(np.argmax(terms))]), 2 * half
    raise RuntimeError(f"exact_skellam_renyi: no window found (alpha {alpha}, shift {shift}, mu {mu})")
