"""Accounting as events: mechanisms as data, composed in Rényi DP and converted with dp-accounting.

Every release is a dp-accounting ``DpEvent`` (the same style: frozen attrs classes holding exactly the
parameters accounting needs):

- :class:`SkellamDpEvent` ``(l1_sensitivity, l2_sensitivity, mu)``: an integer-valued statistic plus aggregate
  Skellam noise Sk(mu), as the SQM server sees it (zero-out neighbours, :data:`sqm.mechanism.report.NEIGHBOURING`;
  Lemma 2 / Eq. 12 of the SQM paper);
- :class:`ClientSkellamDpEvent` ``(l1_sensitivity, l2_sensitivity, mu, n_parties)``: the same release as one of
  the ``n_parties`` clients sees it: it knows its own share Sk(mu / n) of the noise, so the noise left is
  Sk(mu (n - 1) / n) (Eq. 13 under zero-out neighbours: the same sensitivities; the paper's replace-one form
  doubles them);
- ``PoissonSampledDpEvent(q, SkellamDpEvent(...))`` (dp-accounting's class): the release on a Poisson sample at
  rate q (Eq. 20 with tau of Eq. 23; integer orders only, other orders get no bound); ``SelfComposedDpEvent``
  repeats it (R rounds, Eq. 20's factor R).  Clients know the batch, so a client-observed event is never
  subsampled (Eq. 21: R rounds of :class:`ClientSkellamDpEvent`);
- :class:`PBMDpEvent` ``(b, beta, n_parties, embedding_size, level)``: one release of the sum of M parties'
  PBM-encoded vectors (its RDP is :func:`sqm.mechanism.pbm.pbm_rdp`);
- ``GaussianDpEvent(sigma / l2_sensitivity)`` and anything else dp-accounting's RDP accountant knows
  (subsampled Gaussian, Laplace, composition): delegated to it (:func:`gaussian_event` builds the first).

:class:`SQMAccountant` is dp-accounting's ``RdpAccountant`` extended with these events, so it composes any
sequence of them and converts with dp-accounting's ``compute_epsilon`` / ``compute_delta``.  :func:`compose`
is the one-call form.  :func:`event_to_json` / :func:`event_from_json` write and read events as plain JSON
(only the classes named here; nothing is imported or executed from the text), for the ledger.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import attr
import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from sqm.errors import UsageError

from . import rdp
from .conversion import gdp_mu_squared, pld_accountant, pld_epsilon, tighter_epsilon  # noqa: F401 (re-exported)
from .skellam_gdp import gdp_delta, skellam_gdp_mu
from .pbm import PBM_LEVELS, check_params

# Orders of the accountant: fractional orders help PBM and Gaussian events; the subsampled Skellam bound
# (Eq. 20) holds at integer orders only and gets +inf (no bound) at the others.
ORDERS = (1.25, 1.5, 1.75) + tuple(float(a) for a in rdp.DEFAULT_ORDERS)


def _number(v, name, positive=True, integer=False, minimum=None):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
        raise UsageError(f"{name} must be a finite number, got {v!r}")
    if integer and int(v) != v:
        raise UsageError(f"{name} must be an integer, got {v!r}")
    if positive and v <= 0:
        raise UsageError(f"{name} must be > 0, got {v!r}")
    if minimum is not None and v < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {v!r}")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SkellamDpEvent(dp_event.DpEvent):
    """An integer-valued statistic with L1 / L2 sensitivities (zero-out neighbours) released with aggregate
    Skellam noise Sk(mu), as the SQM server observes it.  RDP: :func:`sqm.mechanism.rdp.skellam_rdp` (Lemma 2)."""

    l1_sensitivity: float
    l2_sensitivity: float
    mu: float

    def __attrs_post_init__(self):
        _number(self.l1_sensitivity, "the L1 sensitivity l1")
        _number(self.l2_sensitivity, "the L2 sensitivity l2")
        _number(self.mu, "mu")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ClientSkellamDpEvent(dp_event.DpEvent):
    """The release of a :class:`SkellamDpEvent` with the same parameters as one of ``n_parties`` clients
    observes it (it knows its own share Sk(mu / n); zero-out neighbours): Lemma 2 with sensitivities
    (l1, l2) and noise mu (n - 1) / n (Eq. 13 under zero-out).  Never subsampled: a client knows the batch."""

    l1_sensitivity: float
    l2_sensitivity: float
    mu: float
    n_parties: int

    def __attrs_post_init__(self):
        SkellamDpEvent(self.l1_sensitivity, self.l2_sensitivity, self.mu)
        if isinstance(self.n_parties, bool) or not isinstance(self.n_parties, (int, np.integer)) \
                or self.n_parties < 2:
            raise UsageError(f"client-observed privacy needs n_parties >= 2 (a lone client knows all the noise), "
                             f"got {self.n_parties!r}")




@attr.s(frozen=True, slots=True, auto_attribs=True)
class PBMDpEvent(dp_event.DpEvent):
    """One release of the sum of ``n_parties`` parties' PBM-encoded ``embedding_size``-vectors (b trials,
    bias beta), at privacy ``level`` 'feature' (one party's vector changes) or 'sample' (one record, every
    party's vector).  RDP: :func:`sqm.mechanism.pbm.pbm_rdp`."""

    b: int
    beta: float
    n_parties: int
    embedding_size: int = 1
    level: str = "feature"

    def __attrs_post_init__(self):
        if self.level not in PBM_LEVELS:
            raise UsageError(f"PBM privacy level must be one of {PBM_LEVELS}, got {self.level!r}")
        check_params(self.b, self.beta)
        _number(self.n_parties, "n_parties", integer=True)
        _number(self.embedding_size, "embedding_size", integer=True)


SKELLAM_EVENTS = (SkellamDpEvent, ClientSkellamDpEvent)
_CONTAINERS = (dp_event.NoOpDpEvent, dp_event.SelfComposedDpEvent, dp_event.ComposedDpEvent)


def gaussian_event(sigma: float, l2_sensitivity: float) -> dp_event.GaussianDpEvent:
    """One Gaussian release with noise std ``sigma`` of a statistic with L2 sensitivity ``l2_sensitivity``."""
    _number(sigma, "sigma")
    _number(l2_sensitivity, "the L2 sensitivity")
    return dp_event.GaussianDpEvent(noise_multiplier=float(sigma) / float(l2_sensitivity))


def server_event(l1: float, l2: float, mu: float, q: float = 1.0, rounds: int = 1) -> dp_event.DpEvent:
    """What the SQM server observes: ``rounds`` releases with noise Sk(mu), each on a Poisson sample at rate
    ``q`` (plain :class:`SkellamDpEvent` for q = 1 and one round)."""
    rdp._check_q(q)
    rdp._check_rounds(rounds)
    ev = SkellamDpEvent(float(l1), float(l2), float(mu))
    if q < 1:
        ev = dp_event.PoissonSampledDpEvent(sampling_probability=float(q), event=ev)
    return ev if rounds == 1 else dp_event.SelfComposedDpEvent(event=ev, count=int(rounds))


def client_event(l1: float, l2: float, mu: float, n_parties: int, rounds: int = 1) -> dp_event.DpEvent:
    """What one of ``n_parties`` clients observes over ``rounds`` releases (Eq. 21: no subsampling benefit)."""
    rdp._check_rounds(rounds)
    ev = ClientSkellamDpEvent(float(l1), float(l2), float(mu), int(n_parties))
    return ev if rounds == 1 else dp_event.SelfComposedDpEvent(event=ev, count=int(rounds))


def _skellam_rdp(event, orders: np.ndarray) -> np.ndarray:
    if isinstance(event, ClientSkellamDpEvent):
        return np.asarray(rdp.client_rdp(orders, event.l1_sensitivity, event.l2_sensitivity, event.mu,
                                                event.n_parties), float)
    return np.asarray(rdp.skellam_rdp(orders, event.l1_sensitivity, event.l2_sensitivity, event.mu), float)


class SQMAccountant(RdpAccountant):
    """dp-accounting's RDP accountant, extended with the events of this module (zero-out neighbours, as every
    other event composed with them: :data:`sqm.mechanism.report.NEIGHBOURING`).

    ``SQMAccountant().compose(e1).compose(e2).get_epsilon(delta)``; ``.rdp`` is the composed curve."""

    def __init__(self, orders: Iterable[float] = ORDERS):
        super().__init__(orders=[float(a) for a in orders])
        self._gdp_sq = 0.0  # the composed mu_G^2 (Gaussian DP); inf once an event has no GDP bound here
        # (dominating Gaussian event, count) per composed event: see dominating_gaussian; None once one has none
        self._dominating: list | None = []

    def _dominating_add(self, event, count):
        g = dominating_gaussian(event)
        if g is None or self._dominating is None:
            self._dominating = None
            return
        self._dominating.append((g, int(count)))

    @property
    def _pld_pairs(self) -> list | None:
        """The dominating Gaussians whose PLD is computed: only where one of them is subsampled (otherwise GDP,
        exact, already covers them)."""
        pairs = self._dominating
        return pairs if pairs and any(isinstance(g, dp_event.PoissonSampledDpEvent) for g, _ in pairs) else None

    def _gdp_add(self, event, count):
        """Add ``count`` x the event's mu_G^2: Skellam releases on the whole data with the proven constant
        (:mod:`sqm.mechanism.skellam_gdp`), Gaussian ones exactly; inf for anything else (PBM, subsampled)."""
        if isinstance(event, dp_event.PoissonSampledDpEvent) and event.sampling_probability == 1:
            event = event.event
        if isinstance(event, SKELLAM_EVENTS):
            self._gdp_sq += gdp_mu_squared(event.l2_sensitivity, unknown_noise_variance(event), count)
        elif isinstance(event, dp_event.GaussianDpEvent) and event.noise_multiplier > 0:
            self._gdp_sq += count / float(event.noise_multiplier) ** 2
        else:
            self._gdp_sq = math.inf

    def _maybe_compose(self, event, count, do_compose):
        if do_compose and not isinstance(event, _CONTAINERS):  # a leaf release (containers recurse to theirs)
            self._gdp_add(event, count)
            self._dominating_add(event, count)
        if isinstance(event, SKELLAM_EVENTS):
            if do_compose:
                self._rdp += count * _skellam_rdp(event, self._orders)
            return None
        if isinstance(event, PBMDpEvent):
            if do_compose:
                from .pbm import pbm_rdp

                self._rdp += count * np.asarray(pbm_rdp(self._orders, event.b, event.beta, event.n_parties,
                                                        event.embedding_size, 1, event.level), float)
            return None
        if isinstance(event, dp_event.PoissonSampledDpEvent) and \
                isinstance(event.event, SKELLAM_EVENTS + (PBMDpEvent,)):
            inner = event.event
            if not isinstance(inner, SkellamDpEvent):
                return self.CompositionErrorDetails(
                    invalid_event=event, error_message=f"{type(inner).__name__} cannot be Poisson-subsampled: the "
                    "party it describes knows which records were sampled (compose it once per round instead)")
            q = event.sampling_probability
            rdp._check_q(q)
            if do_compose:
                if q == 1:
                    curve = _skellam_rdp(inner, self._orders)
                else:
                    ints = (self._orders == np.round(self._orders)) & (self._orders >= 2)
                    curve = np.full(self._orders.shape, np.inf)
                    curve[ints] = rdp.subsampled_rdp(self._orders[ints], q, 1, inner.l1_sensitivity,
                                                     inner.l2_sensitivity, inner.mu)
                self._rdp += count * curve
            return None
        return super()._maybe_compose(event, count, do_compose)

    def get_epsilon_and_optimal_order(self, target_delta: float) -> tuple[float, float]:
        """(RDP epsilon, optimal order) at ``target_delta``: :func:`sqm.mechanism.rdp.epsilon_and_order`."""
        return rdp.epsilon_and_order(self._orders, self._rdp, target_delta)

    @property
    def gdp_mu(self) -> float:
        """The composed Gaussian-DP parameter (inf where some event has no GDP bound)."""
        return math.sqrt(self._gdp_sq)

    def get_epsilon_and_conversion(self, target_delta: float) -> tuple[float, str]:
        """(epsilon at ``target_delta``, "rdp", "gdp" or "pld"): the smallest of the RDP conversion, Gaussian DP
        (releases on the whole data) and, where some release is subsampled, the privacy-loss distribution of the
        dominating subsampled Gaussians (:func:`sqm.mechanism.conversion.pld_epsilon`).  All are sound; the same
        floats as a job's own report (:func:`sqm.mechanism.conversion.tighter_epsilon`)."""
        return tighter_epsilon(self.get_epsilon_and_optimal_order(target_delta)[0], self._gdp_sq, target_delta,
                               self._pld_pairs)

    def get_epsilon(self, target_delta: float) -> float:
        return self.get_epsilon_and_conversion(target_delta)[0]

    def get_delta(self, target_epsilon: float) -> float:
        """delta at ``target_epsilon``: the smallest of the RDP conversion's, Gaussian DP's and the dominating
        Gaussians' PLD's (as :meth:`get_epsilon_and_conversion`)."""
        d = float(super().get_delta(target_epsilon))
        if math.isfinite(self._gdp_sq):
            d = min(d, gdp_delta(self.gdp_mu, target_epsilon))
        if self._pld_pairs:
            d = min(d, float(pld_accountant(self._pld_pairs).get_delta(target_epsilon)))
        return d


def unknown_noise_variance(event) -> float:
    """The variance of the Skellam noise per coordinate that the observer of a Skellam event does not know: the
    server's Sk(mu), 2 mu; a client's, knowing its own share, Sk(mu (n - 1) / n), 2 mu (n - 1) / n."""
    if isinstance(event, ClientSkellamDpEvent):
        n = int(event.n_parties)
        return 2.0 * event.mu * (n - 1) / n
    return 2.0 * event.mu


def dominating_gaussian(event) -> dp_event.DpEvent | None:
    """A Gaussian event whose pair of distributions can be post-processed into ``event``'s (Blackwell), for every
    zero-out neighbour; None where there is none here.

    - a Skellam release (server or client): GaussianDpEvent(1 / mu_G), mu_G = c(V) Delta2 / sqrt V with the proven
      constant (:mod:`sqm.mechanism.skellam_gdp`; V = 2 mu, or 2 mu (n - 1) / n for a client): the release is
      mu_G-GDP, i.e. its pair is dominated by (N(0, 1), N(mu_G, 1));
    - a Poisson-sampled one: the same Gaussian, Poisson-sampled at the same rate.  The kernel that maps the
      Gaussian pair to the release's maps their mixtures alike (it is linear), so the subsampled release is a
      post-processing of the subsampled Gaussian; adaptive composition keeps dominance (f-DP composition);
    - a Gaussian (or Poisson-sampled Gaussian) event: itself."""
    inner, q = event, None
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        inner, q = event.event, float(event.sampling_probability)
    if isinstance(inner, SKELLAM_EVENTS):
        m = skellam_gdp_mu(inner.l2_sensitivity, unknown_noise_variance(inner))
        # a client knows the batch: its event is never subsampled (SQMAccountant refuses it)
        ok = math.isfinite(m) and not (q is not None and isinstance(inner, ClientSkellamDpEvent))
        g = dp_event.GaussianDpEvent(1.0 / m) if ok else None
    elif isinstance(inner, dp_event.GaussianDpEvent) and inner.noise_multiplier > 0:
        g = inner
    else:
        return None
    if g is None or q is None or q == 1:
        return g
    return dp_event.PoissonSampledDpEvent(sampling_probability=q, event=g)


def accountant(events: Iterable[dp_event.DpEvent], orders: Iterable[float] = ORDERS) -> SQMAccountant:
    """A :class:`SQMAccountant` that has composed ``events`` (a sequence, or one event)."""
    acc = SQMAccountant(orders)
    for e in ([events] if isinstance(events, dp_event.DpEvent) else events):
        acc.compose(e)
    return acc


def compose(events: Iterable[dp_event.DpEvent], delta: float, orders: Iterable[float] = ORDERS) -> float:
    """Epsilon at ``delta`` of the composition of ``events`` (RDP, converted by dp-accounting)."""
    return float(accountant(events, orders).get_epsilon(delta))


def epsilon_delta(events: Iterable[dp_event.DpEvent], *, delta: float | None = None, epsilon: float | None = None,
                  orders: Iterable[float] = ORDERS) -> tuple[float, float]:
    """(epsilon, delta) of the composition of ``events``: give ``delta`` to get its epsilon, or ``epsilon`` to
    get its delta."""
    if (delta is None) == (epsilon is None):
        raise UsageError("give exactly one of delta or epsilon")
    acc = accountant(events, orders)
    if delta is not None:
        return float(acc.get_epsilon(delta)), float(delta)
    assert epsilon is not None  # exactly one of delta and epsilon was given
    if not (epsilon >= 0 and not math.isnan(epsilon)):
        raise UsageError(f"epsilon must be >= 0, got {epsilon!r}")
    return float(epsilon), float(acc.get_delta(epsilon))


# ----- JSON -------------------------------------------------------------------------------------------------
EVENT_TYPES = {cls.__name__: cls for cls in (
    SkellamDpEvent, ClientSkellamDpEvent, PBMDpEvent, dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent,
    dp_event.PoissonSampledDpEvent, dp_event.SelfComposedDpEvent, dp_event.ComposedDpEvent,
    dp_event.NoOpDpEvent, dp_event.NonPrivateDpEvent)}


def event_to_json(event: dp_event.DpEvent) -> dict:
    """``event`` as a plain dict: ``{"type": class name, field: value, ...}``, nested events as dicts."""
    name = type(event).__name__
    if EVENT_TYPES.get(name) is not type(event):
        raise UsageError(f"cannot write {name} as JSON: known events are {sorted(EVENT_TYPES)}")
    out = {"type": name}
    for f in attr.fields(type(event)):
        v = getattr(event, f.name)
        if isinstance(v, dp_event.DpEvent):
            v = event_to_json(v)
        elif isinstance(v, (list, tuple)):
            v = [event_to_json(e) for e in v]
        elif isinstance(v, (np.integer, np.floating)):
            v = v.item()
        out[f.name] = v
    return out


def event_from_json(obj: dict) -> dp_event.DpEvent:
    """The event :func:`event_to_json` wrote; ValueError for anything else (unknown type, missing or extra
    field, a value of the wrong kind)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise UsageError(f"an event must be a JSON object with a \"type\", got {obj!r}")
    cls = EVENT_TYPES.get(obj["type"])
    if cls is None:
        raise UsageError(f"unknown event type {obj['type']!r}: known events are {sorted(EVENT_TYPES)}")
    fields = {f.name: f for f in attr.fields(cls)}
    extra = set(obj) - set(fields) - {"type"}
    if extra:
        raise UsageError(f"{obj['type']} has no field(s) {sorted(extra)}")
    kw = {}
    for name, v in obj.items():
        if name == "type":
            continue
        if name == "event":
            v = event_from_json(v)
        elif name == "events":
            if not isinstance(v, list):
                raise UsageError(f"{obj['type']}.events must be a list, got {v!r}")
            v = [event_from_json(e) for e in v]
        elif fields[name].type in (str, "str"):
            if not isinstance(v, str):
                raise UsageError(f"{obj['type']}.{name} must be a string, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"{obj['type']}.{name} must be a number, got {v!r}")
        kw[name] = v
    try:
        return cls(**kw)
    except TypeError as e:
        raise UsageError(f"bad {obj['type']}: {e}") from None


def events_to_json(events: Iterable[dp_event.DpEvent]) -> list:
    return [event_to_json(e) for e in events]


def events_from_json(objs) -> list:
    if not isinstance(objs, list):
        raise UsageError(f"events must be a JSON list, got {objs!r}")
    return [event_from_json(o) for o in objs]
