"""Converting composed releases to (epsilon, delta) by the tightest sound route: the RDP conversion, Gaussian DP
(Skellam releases on the whole data, with the proven constant of :mod:`sqm.mechanism.skellam_gdp`; Gaussian
releases exactly) or the privacy-loss distribution of dominating Gaussians (Poisson-sampled releases,
:func:`sqm.mechanism.events.dominating_gaussian`).  A leaf of the accounting: :mod:`sqm.mechanism.accounting` (a
job's epsilons and calibration) and :mod:`sqm.mechanism.events` (the accountant of the ledger) both convert here,
so the two give the same floats.  dp-accounting is imported only for the PLD (subsampled releases)."""
from __future__ import annotations

import functools
import math

from .skellam_gdp import gdp_epsilon, skellam_gdp_mu

PLD_DISCRETIZATION = 1e-3  # dp-accounting's value discretization (pessimistic): epsilon within ~1e-3 of exact


def gdp_mu_squared(l2, variance, count=1) -> float:
    """``count`` x mu_G^2 of a release with Skellam noise of variance ``variance`` per coordinate and L2
    sensitivity ``l2`` (:func:`sqm.mechanism.skellam_gdp.skellam_gdp_mu`; inf where no constant is proven).
    GDP composes by adding mu_G^2: :class:`sqm.mechanism.events.SQMAccountant` sums these same floats."""
    m = skellam_gdp_mu(l2, variance)
    return count * m * m if math.isfinite(m) else math.inf


PLD_MAX_EPSILON = 20.0  # above it the PLD is not computed: slow (seconds; tiny noise) and of no practical use


def tighter_epsilon(rdp_epsilon: float, mu_squared: float, delta: float, dominating=None) -> tuple[float, str]:
    """(epsilon, conversion): the smallest of the RDP epsilon, the GDP one of sqrt(``mu_squared``) and, given
    ``dominating`` ((Gaussian event, count) pairs, some subsampled), their privacy-loss distribution's
    (:func:`pld_epsilon`; only where the smaller of the other two is at most
    :data:`PLD_MAX_EPSILON`), at ``delta`` (all sound for the same releases), and which it is ("rdp", "gdp" or
    "pld")."""
    best = (float(rdp_epsilon), "rdp")
    if math.isfinite(mu_squared):
        eps_g = gdp_epsilon(math.sqrt(mu_squared), delta)
        if eps_g < best[0]:
            best = (float(eps_g), "gdp")
    if dominating and best[0] <= PLD_MAX_EPSILON:
        eps_p = pld_epsilon(dominating, delta)
        if eps_p < best[0]:
            best = (eps_p, "pld")
    return best


def pld_accountant(pairs):
    """dp-accounting's PLD accountant (value interval :data:`PLD_DISCRETIZATION`, pessimistic) that has composed
    ``pairs`` ((Gaussian event, count))."""
    from dp_accounting.pld import PLDAccountant

    acc = PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    for g, count in pairs:
        acc.compose(g, count)
    return acc


def pld_epsilon(pairs, delta: float) -> float:
    """Epsilon at ``delta`` of the composition of ``pairs`` ((Gaussian event, count), from
    :func:`sqm.mechanism.events.dominating_gaussian`) by dp-accounting's privacy-loss-distribution accountant
    (pessimistic discretization: an upper bound), under add/remove-one, which for a sum is zero-out (a record adds x or
    0).  Cached: a job's calibration, its report and the ledger ask for the same composition (each a PLD
    composition, far slower than a cache lookup)."""
    return _pld_epsilon(tuple((g, int(c)) for g, c in pairs), float(delta))


@functools.lru_cache(maxsize=1024)
def _pld_epsilon(pairs: tuple, delta: float) -> float:
    return float(pld_accountant(pairs).get_epsilon(delta))
