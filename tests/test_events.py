"""sqm.mechanism.events: releases as dp-accounting DpEvents, composed in RDP; JSON round trip."""
import json
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import compute_delta, compute_epsilon

from sqm.mechanism import accounting as acc
from sqm.mechanism import events as ev
from sqm.mechanism import pbm

ORD = np.array(ev.ORDERS)
INT = (np.round(ORD) == ORD) & (ORD >= 2)


def test_two_sqm_releases_compose_as_the_sum_of_their_rdp():
    a = ev.server_event(40.0, 10.0, 500.0)
    b = ev.server_event(12.0, 3.0, 80.0, q=0.01, rounds=200)
    by_hand = acc.skellam_rdp(ORD, 40.0, 10.0, 500.0) + np.where(
        INT, 0.0, np.inf)  # the subsampled part has no bound at fractional orders
    by_hand[INT] += acc.subsampled_rdp(ORD[INT], 0.01, 200, 12.0, 3.0, 80.0)
    accountant = ev.accountant([a, b])
    assert np.allclose(accountant.rdp, by_hand, rtol=1e-12)
    assert ev.compose([a, b], 1e-6) == compute_epsilon(ORD, by_hand, 1e-6)[0]
    assert ev.epsilon_delta([a, b], epsilon=2.0)[1] == compute_delta(ORD, by_hand, 2.0)[0]
    assert ev.compose([a, b], 1e-6) > max(ev.compose([a], 1e-6), ev.compose([b], 1e-6))


def test_existing_functions_are_the_events():
    l1, l2, mu = 40.0, 10.0, 500.0
    assert acc.server_epsilon(mu, 1e-5, l1, l2, 0.05, 30) == ev.compose(
        [ev.server_event(l1, l2, mu, 0.05, 30)], 1e-5, acc.DEFAULT_ORDERS)
    rdp = 7 * acc.client_rdp(np.array(acc.DEFAULT_ORDERS, float), l1, l2, mu, 3)
    assert acc.client_epsilon(mu, 1e-5, l1, l2, 3, 7) == pytest.approx(
        compute_epsilon(np.array(acc.DEFAULT_ORDERS, float), rdp, 1e-5)[0], rel=1e-12)
    # client-observed = the server's Lemma 2 with doubled sensitivities and noise mu (n - 1) / n
    assert np.allclose(ev.accountant(ev.client_event(l1, l2, mu, 4)).rdp,
                       ev.accountant(ev.SkellamDpEvent(l1, l2, mu * 3 / 4)).rdp, rtol=1e-12)


def test_gaussian_and_pbm_are_delegated():
    g = ev.gaussian_event(2.5, 0.5)  # noise multiplier 5
    ref = RdpAccountant(orders=list(ev.ORDERS)).compose(dp_event.GaussianDpEvent(5.0))
    assert np.array_equal(ev.accountant([g]).rdp, ref.rdp)
    sg = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 100)
    ref = RdpAccountant(orders=list(ev.ORDERS)).compose(sg)
    assert np.array_equal(ev.accountant([sg]).rdp, ref.rdp)
    p = ev.PBMDpEvent(b=8, beta=0.2, n_parties=3, embedding_size=4)
    three = dp_event.SelfComposedDpEvent(p, 3)
    assert np.allclose(ev.accountant([three]).rdp, pbm.pbm_rdp(ORD, 8, 0.2, 3, 4, uses=3), rtol=1e-12)
    mixed = ev.accountant([three, g]).rdp
    assert np.allclose(mixed, pbm.pbm_rdp(ORD, 8, 0.2, 3, 4, uses=3) + ORD / (2 * 25.0), rtol=1e-12)


def test_refusals():
    with pytest.raises(dp_accounting.UnsupportedEventError, match="knows which records"):
        ev.accountant([dp_event.PoissonSampledDpEvent(0.1, ev.ClientSkellamDpEvent(1.0, 1.0, 10.0, 3))])
    with pytest.raises(dp_accounting.UnsupportedEventError):
        ev.accountant([dp_event.UnsupportedDpEvent()])
    assert ev.compose([dp_event.NonPrivateDpEvent()], 1e-5) == math.inf
    with pytest.raises(ValueError, match="n_parties >= 2"):
        ev.ClientSkellamDpEvent(1.0, 1.0, 10.0, 1)
    with pytest.raises(ValueError, match="mu"):
        ev.SkellamDpEvent(1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="delta"):
        ev.compose([ev.SkellamDpEvent(1.0, 1.0, 10.0)], 0.0)
    with pytest.raises(ValueError, match="level"):
        ev.PBMDpEvent(8, 0.2, 3, level="party")


ALL = [ev.SkellamDpEvent(3.0, 2.0, 50.5), ev.client_event(3.0, 2.0, 50.5, 4, rounds=9),
       ev.server_event(12.0, 3.0, 80.0, q=0.01, rounds=200), ev.PBMDpEvent(16, 0.15, 4, 32, "sample"),
       ev.gaussian_event(1.7, 0.3), dp_event.ComposedDpEvent([ev.SkellamDpEvent(1.0, 1.0, 1e6),
                                                             dp_event.NoOpDpEvent()])]


def test_json_round_trip():
    text = json.dumps(ev.events_to_json(ALL))
    back = ev.events_from_json(json.loads(text))
    assert back == ALL  # attrs equality: every field, nested events included
    assert ev.compose(back, 1e-5) == ev.compose(ALL, 1e-5)


@pytest.mark.parametrize("bad, match", [
    ({"type": "os.system"}, "unknown event type"), ([1], "JSON object"),
    ({"type": "SkellamDpEvent", "l1_sensitivity": 1, "l2_sensitivity": 1}, "bad SkellamDpEvent"),
    ({"type": "SkellamDpEvent", "l1_sensitivity": 1, "l2_sensitivity": 1, "mu": 1, "x": 2}, "no field"),
    ({"type": "SkellamDpEvent", "l1_sensitivity": [1], "l2_sensitivity": 1, "mu": 1}, "must be a number"),
    ({"type": "GaussianDpEvent", "noise_multiplier": "1"}, "must be a number"),
    ({"type": "PBMDpEvent", "b": 8, "beta": 0.2, "n_parties": 3, "embedding_size": 1, "level": 1}, "must be a string"),
    ({"type": "SkellamDpEvent", "l1_sensitivity": 1, "l2_sensitivity": 1, "mu": -1}, "mu"),
    ({"type": "SelfComposedDpEvent", "event": {"type": "Nope"}, "count": 2}, "unknown event type"),
])
def test_json_refuses_anything_else(bad, match):
    with pytest.raises(ValueError, match=match):
        ev.event_from_json(bad) if isinstance(bad, dict) else ev.events_from_json(bad)
