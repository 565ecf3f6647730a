"""Robust noise (issue 25): with ``robust_noise=k`` each of n clients draws Sk(mu / (n - k)), so the calibrated
Sk(mu), and the reported epsilon, hold even if k clients add no noise.  Checked: the plan's shares, the report's
epsilons, and, statistically (fixed seed), the noise a release carries when k clients withhold theirs."""
from __future__ import annotations

import numpy as np
import pytest

from sqm.mechanism import accounting
from sqm.mechanism.release import SQM, robust_noise_cost
from sqm.mechanism.polynomial import covariance
from sqm.mechanism.vertical import VerticalData


def test_shares_and_reports():
    data = VerticalData([np.zeros((5, 1))] * 3)
    base = SQM(covariance(3), 64.0, epsilon=1.0, delta=1e-5)
    robust = SQM(covariance(3), 64.0, epsilon=1.0, delta=1e-5, robust_noise=1)
    _, rb = base.plan(data)
    _, rr = robust.plan(data)
    assert rr.mu == rb.mu and rr.epsilon_server == rb.epsilon_server <= 1.0  # calibrated to the same mu
    plan = robust._release_plan(rr, (1, 1, 1), 5)
    assert plan.noise_share_mu == pytest.approx(rr.mu / 2) and plan.total_noise_mu == pytest.approx(1.5 * rr.mu)
    # a client knows its own share; with 1 other withholding, mu / 2 is left: the 2-party client event
    assert rr.epsilon_client == pytest.approx(accounting.client_epsilon(rr.mu, 1e-5, rr.l1_sensitivity,
                                                                       rr.l2_sensitivity, 2), rel=1e-9)
    assert rr.epsilon_client > rb.epsilon_client and "up to 1 client(s) add no noise" in rr.notes
    assert robust_noise_cost(3, 1) == 1.5
    with pytest.raises(ValueError, match="at least one must add noise"):
        SQM(covariance(3), 64.0, epsilon=1.0, robust_noise=3).plan(data)


def test_with_k_clients_withholding_the_noise_is_still_the_calibrated_one(monkeypatch):
    """3 clients, k = 1, mu fixed: client 1 withholds its noise (its share replaced by zeros).  Over 400
    releases of the 3 x 3 Gram (9 entries each, 3,600 draws), the noise's variance is 2 mu within 10%; without
    robust noise the same withholding leaves 2/3 of it (also checked), so the reported epsilon would be false."""
    from sqm.mechanism import client

    orig = client.QuantizedRows.addend

    def addend(self):  # the client holding the 0.5 column withholds its noise share
        z = orig(self)
        return np.zeros_like(z) if float(np.asarray(self.source.block).flat[0]) == 0.5 else z

    monkeypatch.setattr(client.QuantizedRows, "addend", addend)
    # exact multiples of 1 / 64: no rounding, so the release varies only by its noise
    X = VerticalData([np.full((4, 1), 0.25), np.full((4, 1), 0.5), np.full((4, 1), 0.125)])
    mu = 50.0
    for k, want in ((1, 1.0), (0, 2 / 3)):
        draws = []
        for s in range(400):
            r = SQM(covariance(3), 64.0, mu=mu, robust_noise=k, seed=s).run(X)
            draws.append(np.asarray(r.raw, dtype=np.float64))
        raw = np.stack(draws)
        noise = raw - raw.mean(axis=0)  # the exact integer sum varies only through rounding, tiny here
        var = float(noise.var())
        assert var == pytest.approx(want * 2 * mu, rel=0.10), (k, var / (2 * mu))
