"""Privacy accounting for SQM in Rényi DP, converted to (epsilon, delta) with dp-accounting.

Formulas (SQM paper, Bao et al.):
- Lemma 2 / Eq. 3: for aggregate noise Sk(mu) on an integer function with sensitivities (Delta1, Delta2),
  tau(alpha) = alpha Delta2^2 / (4 mu) + min(((2 alpha - 1) Delta2^2 + 6 Delta1) / (16 mu^2), 3 Delta1 / (4 mu)).
- Eq. 12 (server-observed): the same bound.
- Eq. 13 (client-observed, the client knows its own share Sk(mu / n)): the bound with noise mu (n - 1) / n.  The
  paper states it for replace-one neighbours, which double the sensitivities; every guarantee here is under ONE
  relation, zero-out (:data:`sqm.mechanism.report.NEIGHBOURING`: a record's values replaced by zeros, n public), under
  which a record changes the integer sum by f_hat(x_hat) - f_hat(0) = f_hat(x_hat) (every monomial has degree
  >= 1), bounded by the same (Delta1, Delta2) as on the server's side: no doubling.
- Eq. 20 / 23: Poisson subsampling at rate q over R rounds (integer alpha >= 2).
- Eq. 21: client-observed over R rounds, no subsampling benefit (a client knows the batch).

The formulas themselves are in :mod:`sqm.mechanism.rdp` (a leaf: the events and PBM's accounting use them without
importing this module); releases are accounted as events (:mod:`sqm.mechanism.events`): ``server_epsilon``,
``client_epsilon``, ``privacy_report`` and ``calibrate_mu`` account the events of one SQM job, and the ledger
(:mod:`sqm.mechanism.ledger`) composes the events of many.  One job's own events compose to one curve, which
:func:`server_curve` and :func:`client_curve` compute with the operations of :class:`sqm.mechanism.events.SQMAccountant`
(an accountant that starts at zero and adds count x the event's curve), so the two give the same floats
(``tests/test_fast_calibration.py``) and calibrating mu imports neither dp-accounting nor SciPy (only the
subsampled bound, q < 1, imports SciPy): a launcher plans a job without their import time.  A bad event of probability
eta (e.g. a batch cap overflowing) enters delta as (1 + e^epsilon) eta (:func:`delta_with_failure`,
:func:`delta_before_failure`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from sqm.errors import UsageError

import numpy as np

from .rdp import (  # noqa: F401
    DEFAULT_ORDERS,
    _check_pos,
    _check_q,
    _check_rounds,
    _check_sens,
    client_rdp,
    client_rdp_rounds,
    epsilon as epsilon,  # an explicit re-export: some parameters below are named epsilon too
    epsilon_and_order,
    exact_skellam_renyi,
    log_skellam_pmf,
    server_rdp,
    skellam_rdp,
    subsampled_rdp,  # (re-exported: the formulas live in sqm.mechanism.rdp)
)
from .conversion import gdp_mu_squared, tighter_epsilon  # noqa: F401 (re-exported)
from .validation import check_delta, check_param


def _event_params(l1, l2, mu):
    """(l1, l2, mu) as floats, refused as :func:`sqm.mechanism.events.server_event` refuses them (float() first, then
    finite and > 0)."""
    out = tuple(float(v) for v in (l1, l2, mu))
    for v, name in zip(out, ("the L1 sensitivity l1", "the L2 sensitivity l2", "mu"), strict=False):
        if not math.isfinite(v):
            raise UsageError(f"{name} must be a finite number, got {v!r}")
        if v <= 0:
            raise UsageError(f"{name} must be > 0, got {v!r}")
    return out


def _composed(curve: np.ndarray, count: int, orders: np.ndarray) -> np.ndarray:
    """What an RDP accountant over ``orders`` holds after composing ``count`` times an event with ``curve``."""
    rdp = np.zeros_like(orders, dtype=np.float64)
    rdp += count * curve
    return rdp


def server_curve(mu, l1, l2, q=1.0, rounds=1, orders=DEFAULT_ORDERS) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP curve) of :func:`sqm.mechanism.events.server_event` ``(l1, l2, mu, q, rounds)`` as
    :class:`sqm.mechanism.events.SQMAccountant` composes it: Lemma 2 (q = 1), else Eq. 20 at the integer orders
    (+inf at the others), times ``rounds``."""
    _check_q(q)
    _check_rounds(rounds)
    l1, l2, mu = _event_params(l1, l2, mu)
    orders = np.array([float(a) for a in orders])
    if q == 1:
        curve = np.asarray(skellam_rdp(orders, l1, l2, mu), float)
    else:
        ints = (orders == np.round(orders)) & (orders >= 2)
        curve = np.full(orders.shape, np.inf)
        curve[ints] = subsampled_rdp(orders[ints], float(q), 1, l1, l2, mu)
    return orders, _composed(curve, int(rounds), orders)


def client_curve(mu, l1, l2, n_parties, rounds=1, orders=DEFAULT_ORDERS) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP curve) of :func:`sqm.mechanism.events.client_event` as
    :class:`sqm.mechanism.events.SQMAccountant` composes it (Eq. 13 under zero-out, times ``rounds``: Eq. 21)."""
    _check_rounds(rounds)
    l1, l2, mu = _event_params(l1, l2, mu)
    n = int(n_parties)  # as the event takes it
    if n < 2:
        raise UsageError(f"client-observed privacy needs n_parties >= 2 (a lone client knows all the noise), "
                         f"got {n_parties!r}")
    orders = np.array([float(a) for a in orders])
    curve = np.asarray(client_rdp(orders, l1, l2, mu, n), float)
    return orders, _composed(curve, int(rounds), orders)


def server_conversion(mu, delta, l1, l2, q=1.0, rounds=1, orders=DEFAULT_ORDERS) -> tuple[float, str]:
    """(server-observed epsilon at ``delta``, "rdp", "gdp" or "pld"): the RDP curve of :func:`server_curve`
    converted, or where smaller (:func:`_tighter_than_rdp`).  The same float as
    :func:`sqm.mechanism.events.compose` of :func:`sqm.mechanism.events.server_event`."""
    eps = float(epsilon_and_order(*server_curve(mu, l1, l2, q, rounds, orders), delta)[0])
    return _tighter_than_rdp(eps, mu, delta, l1, l2, q, rounds)


def _tighter_than_rdp(rdp_epsilon, mu, delta, l1, l2, q, rounds) -> tuple[float, str]:
    """The server's (epsilon, conversion) given its RDP epsilon: for releases on the whole data (q = 1), Gaussian DP
    with the proven Skellam constant (:mod:`sqm.mechanism.skellam_gdp`; noise Sk(mu) has variance 2 mu) where that is
    smaller; for Poisson-sampled ones, the privacy-loss distribution of the dominating subsampled Gaussian
    (:func:`sqm.mechanism.events.dominating_gaussian`, dp-accounting's PLD) where that is."""
    if q == 1:
        return tighter_epsilon(rdp_epsilon, gdp_mu_squared(float(l2), 2.0 * float(mu), int(rounds)), delta)
    from .events import dominating_gaussian, server_event  # dp-accounting: subsampled releases only

    g = dominating_gaussian(server_event(l1, l2, mu, q))
    return tighter_epsilon(rdp_epsilon, math.inf, delta, None if g is None else [(g, int(rounds))])


def client_conversion(mu, delta, l1, l2, n_parties, rounds=1, orders=DEFAULT_ORDERS) -> tuple[float, str]:
    """(client-observed epsilon at ``delta``, "rdp" or "gdp"): as :func:`server_conversion` for the noise a
    client does not know, Sk(mu (n - 1) / n) (variance 2 mu (n - 1) / n)."""
    eps = float(epsilon_and_order(*client_curve(mu, l1, l2, n_parties, rounds, orders), delta)[0])
    n = int(n_parties)
    mu_sq = gdp_mu_squared(float(l2), 2.0 * float(mu) * (n - 1) / n, int(rounds))
    return tighter_epsilon(eps, mu_sq, delta)


def server_epsilon(mu, delta, l1, l2, q=1.0, rounds=1, orders=DEFAULT_ORDERS) -> float:
    """Server-observed epsilon at ``delta`` (:func:`server_conversion`)."""
    return server_conversion(mu, delta, l1, l2, q, rounds, orders)[0]


def client_epsilon(mu, delta, l1, l2, n_parties, rounds=1, orders=DEFAULT_ORDERS) -> float:
    """Client-observed epsilon at ``delta`` (:func:`client_conversion`)."""
    return client_conversion(mu, delta, l1, l2, n_parties, rounds, orders)[0]


def privacy_report(mu, delta, l1, l2, q=1.0, rounds=1, n_parties=None, orders=DEFAULT_ORDERS):
    """(server-observed epsilon, client-observed epsilon or None) at ``delta`` for noise mu."""
    return privacy_conversion(mu, delta, l1, l2, q, rounds, n_parties, orders)[:2]


def privacy_conversion(mu, delta, l1, l2, q=1.0, rounds=1, n_parties=None, orders=DEFAULT_ORDERS):
    """(server-observed epsilon, client-observed epsilon or None, the server's conversion) at ``delta`` for noise
    mu (:func:`server_conversion`, :func:`client_epsilon`)."""
    _check_pos(mu, "mu")
    eps_s, conversion = server_conversion(mu, delta, l1, l2, q, rounds, orders)
    eps_c = None if n_parties is None or n_parties < 2 else client_epsilon(mu, delta, l1, l2, n_parties, rounds, orders)
    return eps_s, eps_c, conversion


def smallest_meeting(eps, target: float, start: float = 1.0, factor: float = 2.0, rtol: float = 1e-6,
                     floor: float = 1e-300) -> float:
    """The smallest x > 0 (to relative precision ``rtol``) with ``eps(x) <= target``, for ``eps`` decreasing in x
    (a noise scale).  Brackets by powers of ``factor`` from ``start``, then bisects on log x; the upper end of
    the final bracket is returned, so the target is always met."""
    lo = hi = float(start)
    while eps(hi) > target:
        lo, hi = hi, hi * factor
    while eps(lo) <= target:
        lo, hi = lo / factor, lo
        if lo < floor:
            break
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0, rtol: float = 1e-9) -> float:
    """The tightest sound single-release Gaussian: :func:`sqm.mechanism.calibration.gaussian_sigma` (kept for callers of
    this name; new code calls that)."""
    from .calibration import gaussian_sigma  # SciPy: imported by the Gaussian baselines only

    return gaussian_sigma(l2_sensitivity, epsilon, delta, rtol=rtol)


def delta_with_failure(delta: float, epsilon: float, eta: float) -> float:
    """Delta of a mechanism that is (epsilon, delta)-DP except on a bad event of probability <= ``eta`` (on
    every dataset; e.g. the LR batch cap overflowing): delta + (1 + e^epsilon) eta.

    If M equals an (epsilon, delta)-DP mechanism M* except with probability eta, then for every set S,
    P[M(D) in S] <= P[M*(D) in S] + eta <= e^eps (P[M(D') in S] + eta) + delta + eta."""
    _check_failure(epsilon, eta)
    return float(delta) + _failure_share(epsilon, eta)


def delta_before_failure(total_delta: float, epsilon: float, eta: float) -> float:
    """The delta a mechanism must meet so that with a bad event of probability ``eta`` the whole is
    (epsilon, total_delta)-DP: total_delta - (1 + e^epsilon) eta (the inverse of :func:`delta_with_failure`).
    ValueError if nothing is left."""
    _check_failure(epsilon, eta)
    share = _failure_share(epsilon, eta)
    left = float(total_delta) - share
    if not left > 0:
        raise UsageError(f"the failure probability {eta:.3g} uses up delta {total_delta:g} at epsilon {epsilon:g} "
                         f"((1 + e^epsilon) eta = {share:.3g}); make it smaller")
    return left


def _failure_share(epsilon, eta) -> float:
    """(1 + e^epsilon) eta: 0 when eta is 0 at any epsilon, inf where e^epsilon overflows a float."""
    if float(eta) == 0.0:
        return 0.0
    try:
        return (1.0 + math.exp(epsilon)) * float(eta)
    except OverflowError:
        return math.inf


def _check_failure(epsilon, eta):
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise UsageError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not (0 <= eta <= 1):
        raise UsageError(f"the failure probability eta must lie in [0, 1], got {eta!r}")


@dataclass(frozen=True)
class Calibration:
    mu: float
    epsilon_server: float
    epsilon_client: float | None
    delta: float
    target_epsilon: float
    conversion: str = ""  # how epsilon_server was converted (sqm.mechanism.report.CONVERSIONS)


def calibrate_mu(target_epsilon: float, delta: float, l1: float, l2: float, q: float = 1.0, rounds: int = 1,
                 n_parties: int | None = None, orders=DEFAULT_ORDERS, rtol: float = 1e-6) -> Calibration:
    """The smallest mu (to relative precision ``rtol``) whose server-observed epsilon meets the target.

    Bisection on log mu; the upper end of the final bracket is returned, so the target is always met.
    """
    check_param("epsilon", target_epsilon, "target epsilon")
    check_delta(delta)
    _check_sens(l1, l2)
    _check_q(q)
    _check_rounds(rounds)

    def meets_or_epsilon(mu):
        # the search only compares with the target: where RDP alone meets it, so does the smallest epsilon, and the
        # slower PLD (subsampled releases) is not computed; the comparisons are those of server_epsilon
        eps = float(epsilon_and_order(*server_curve(mu, l1, l2, q, rounds, orders), delta)[0])
        return eps if eps <= target_epsilon else _tighter_than_rdp(eps, mu, delta, l1, l2, q, rounds)[0]

    hi = smallest_meeting(meets_or_epsilon, target_epsilon, start=max(l2 * l2, 1e-12), factor=4.0, rtol=rtol)
    eps_s, eps_c, conversion = privacy_conversion(hi, delta, l1, l2, q, rounds, n_parties, orders)
    return Calibration(mu=hi, epsilon_server=eps_s, epsilon_client=eps_c, delta=delta, target_epsilon=target_epsilon,
                       conversion=conversion)


# the calibration is a pure function of public numbers and a bisection over RDP curves (10 ms to a second): repeated
# releases with the same parameters (--runs, grid searches, sweeps, job parties in one process) share it; its result
# is frozen, and a call that raises is not kept
calibrate_mu_cached = functools.lru_cache(maxsize=256)(calibrate_mu)
