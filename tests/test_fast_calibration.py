"""Calibrating mu without dp-accounting or SciPy (issue 28, part 3): the direct curves of
:mod:`sqm.mechanism.accounting` give the same floats as composing the events in dp-accounting's RDP accountant, the
conversion of :mod:`sqm.mechanism.rdp` the same floats as dp-accounting's ``compute_epsilon``, so the calibrated mu is
bit-identical to the one the accountant gives; and planning a job imports neither package."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon as dp_compute_epsilon

from sqm.mechanism import accounting, events, rdp
from sqm.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent


def _curves(n: int, seed: int = 0):
    """RDP curves of every kind the conversion meets: Skellam curves over the default and the events' orders
    (which include 1.25-1.75), curves with +inf entries (the subsampled bound's fractional orders), zeros, tiny
    values (the KL branch), negative entries and random ones."""
    rng = np.random.default_rng(seed)
    orders_sets = [np.asarray(rdp.DEFAULT_ORDERS, float), np.asarray(events.ORDERS, float),
                   np.array([1.001, 1.01, 1.02, 2.0, 7.5, 1e4])]
    for _ in range(n):
        orders = orders_sets[rng.integers(len(orders_sets))]
        kind = rng.integers(5)
        if kind == 0:
            l2 = 10 ** rng.uniform(-1, 8)
            curve = np.asarray(rdp.skellam_rdp(orders, l2 * rng.uniform(1, 50), l2, l2 * l2 * 10 ** rng.uniform(-2, 4)))
        elif kind == 1:
            curve = 10 ** rng.uniform(-12, 3, size=orders.shape)
        elif kind == 2:
            curve = rng.normal(size=orders.shape)
        elif kind == 3:
            curve = 10 ** rng.uniform(-3, 2, size=orders.shape)
            curve[rng.random(orders.shape) < 0.3] = np.inf
        else:
            curve = np.zeros(orders.shape)
        yield orders, curve, 10 ** rng.uniform(-12, -0.01)


def test_conversion_equals_dp_accountings_bit_for_bit():
    for orders, curve, delta in _curves(2000):
        ours = rdp.compute_epsilon(orders, curve, delta)
        theirs = dp_compute_epsilon(orders, curve, delta)
        assert float(ours[0]) == float(theirs[0]) and float(ours[1]) == float(theirs[1]), (orders, curve, delta)
        assert rdp.epsilon_and_order(orders, curve, delta) == (float(theirs[0]), float(theirs[1]))


def _params(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        l2 = 10 ** rng.uniform(-2, 9)
        l1 = l2 * rng.uniform(1, 100)
        mu = l2 * l2 * 10 ** rng.uniform(-3, 4)
        q = 1.0 if rng.random() < 0.5 else float(10 ** rng.uniform(-4, -0.01))
        rounds = int(rng.choice([1, 1, 3, 100, 5000]))
        delta = float(10 ** rng.uniform(-12, -2))
        yield l1, l2, mu, q, rounds, int(rng.integers(2, 9)), delta


@pytest.mark.slow
def test_server_and_client_epsilons_equal_the_accountants():
    """accounting.server_epsilon / client_epsilon (direct curves) = events.compose of the events (dp-accounting's
    RdpAccountant, extended), exactly, over both order sets."""
    for l1, l2, mu, q, rounds, n, delta in _params(300):
        for orders in (rdp.DEFAULT_ORDERS, events.ORDERS):
            by_events = events.compose([events.server_event(l1, l2, mu, q, rounds)], delta, orders)
            assert accounting.server_epsilon(mu, delta, l1, l2, q, rounds, orders) == by_events
            by_events = events.compose([events.client_event(l1, l2, mu, n, rounds)], delta, orders)
            assert accounting.client_epsilon(mu, delta, l1, l2, n, rounds, orders) == by_events
            acc = events.accountant([events.server_event(l1, l2, mu, q, rounds)], orders)
            o, curve = accounting.server_curve(mu, l1, l2, q, rounds, orders)
            assert np.array_equal(curve, acc._rdp) and np.array_equal(o, acc._orders)


def _calibrate_through_events(target, delta, l1, l2, q=1.0, rounds=1):
    """calibrate_mu's search with every epsilon from the events in dp-accounting's accountant (the path before)."""
    return accounting.smallest_meeting(
        lambda mu: events.compose([events.server_event(l1, l2, mu, q, rounds)], delta, rdp.DEFAULT_ORDERS),
        target, start=max(l2 * l2, 1e-12), factor=4.0, rtol=1e-6)


@pytest.mark.parametrize("target,delta,l1,l2,q,rounds", [
    (1.0, 1e-5, 1973315334.2930589, 16865943.0281458, 1.0, 1),  # the KDDCUP shape's covariance at gamma 4096
    (0.5, 1e-6, 40.0, 10.0, 1.0, 1), (8.0, 1e-5, 3.0, 3.0, 1.0, 1), (1.0, 1e-5, 500.0, 60.0, 0.01, 300),
    (2.0, 1e-7, 1e6, 1e4, 1.0, 20)])
def test_calibrated_mu_is_bit_identical_to_the_accountants(target, delta, l1, l2, q, rounds):
    cal = accounting.calibrate_mu(target, delta, l1, l2, q=q, rounds=rounds, n_parties=3)
    assert cal.mu == _calibrate_through_events(target, delta, l1, l2, q, rounds)
    assert cal.epsilon_server <= target
    assert cal.epsilon_server == events.compose([events.server_event(l1, l2, cal.mu, q, rounds)], delta,
                                                rdp.DEFAULT_ORDERS)


def test_the_curves_refuse_what_the_events_refuse():
    for bad in (dict(l1=0.0), dict(l2=-1.0), dict(mu=math.inf), dict(mu=-2), dict(l1=math.nan)):
        kw = {**dict(mu=10.0, l1=1.0, l2=1.0), **bad}
        with pytest.raises(UsageError):
            accounting.server_curve(**kw)
        with pytest.raises(UsageError):
            events.server_event(kw["l1"], kw["l2"], kw["mu"])
    for q in (0.0, 1.5):
        with pytest.raises(UsageError):
            accounting.server_curve(10.0, 1.0, 1.0, q=q)
    with pytest.raises(UsageError):
        accounting.client_curve(10.0, 1.0, 1.0, 1)


def test_planning_a_job_imports_no_accounting_library():
    """Calibrating mu and the report's epsilons (q = 1) import neither dp-accounting nor SciPy."""
    code = ("import sys\n"
            "from sqm.mechanism import accounting\n"
            "cal = accounting.calibrate_mu(1.0, 1e-5, 40.0, 10.0, n_parties=3)\n"
            "accounting.privacy_report(cal.mu, 1e-5, 40.0, 10.0, n_parties=3)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'dp_accounting', 'sklearn'}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
