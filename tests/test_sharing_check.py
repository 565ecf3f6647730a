"""Consistent sharing (issue 25): with ``verify_sharing`` the parties check, before any output is opened, that every
client's input sharing has degree <= t, and name a client whose sharing does not (real processes); an honest job
gives the same release with and without the check."""
from __future__ import annotations

import numpy as np
import pytest

from bench.faults import Deviate
from sqm.mpc.net.launch import MPCError, run_parties
from sqm.mpc.shares.shamir import consistent
from sqm.mechanism.release import SQM
from sqm.mechanism.polynomial import covariance
from sqm.mechanism.vertical import VerticalData


def _data():
    rng = np.random.default_rng(4)
    return VerticalData([rng.normal(size=(30, 2)) * 0.2, rng.normal(size=(30, 2)) * 0.2,
                         rng.normal(size=(30, 1)) * 0.2])


def test_points_on_one_polynomial():
    p = 2 ** 61 - 1
    f = lambda x: (7 + 3 * x) % p  # noqa: E731  degree 1
    assert consistent([f(1), f(2), f(4)], [1, 2, 4], 1, p)
    assert not consistent([f(1), f(2), f(4) + 1], [1, 2, 4], 1, p)


def test_a_client_with_an_inconsistent_sharing_is_named_and_nothing_is_released():
    data = _data()
    mech = SQM(covariance(5), 1024.0, epsilon=4.0, verify_sharing=True, backend="mpyc", seed=3)
    programs, _ = mech.programs(data)
    programs[2] = Deviate(programs[2])  # client 2 deals inconsistent shares
    with pytest.raises(MPCError) as err:
        run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    msg = str(err.value)
    assert "the input sharing of client 2 is inconsistent" in msg, msg
    assert "client 1" not in msg.split("inconsistent")[0].split("sharing of")[-1]  # only client 2 is named


def test_an_honest_job_gives_the_same_release_with_the_check():
    data = _data()
    plain = SQM(covariance(5), 1024.0, epsilon=4.0, backend="mpyc", seed=3).run(data)
    checked = SQM(covariance(5), 1024.0, epsilon=4.0, backend="mpyc", seed=3, verify_sharing=True).run(data)
    assert [int(v) for v in np.asarray(checked.raw).reshape(-1)] == [int(v) for v in np.asarray(plain.raw).reshape(-1)]


def test_two_clients_cannot_be_checked():
    data = VerticalData([np.zeros((5, 1)), np.zeros((5, 1))])
    with pytest.raises(MPCError, match="needs at least t \\+ 2 = 3 parties besides each client"):
        SQM(covariance(2), 64.0, epsilon=1.0, backend="mpyc", verify_sharing=True).run(data)


def test_a_party_deviating_in_the_opening_is_detected_by_the_server():
    """Outputs are opened with all shares and checked: a client adding 1 to its share of the result makes the
    server's M = 3 shares inconsistent with degree t = 1; the server refuses and releases nothing."""
    from bench.faults import DeviateOpening

    data = VerticalData([np.full((6, 1), 0.25), np.full((6, 1), 0.5)])
    programs, _ = SQM(covariance(2), 64.0, epsilon=4.0, backend="mpyc", seed=1).programs(data)
    programs[1] = DeviateOpening(programs[1])
    with pytest.raises(MPCError) as err:
        run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    assert "the shares opened to it are inconsistent" in str(err.value), str(err.value)


def _gradient_release(verify: bool):
    """One release of SQM-LR's per-batch kernel (sqm.apps.logreg.kernel.secure_gradient: the server's weights as secret
    coefficients) over 3 clients, the last holding the label."""
    from sqm.apps.logreg.gradient import LRGradient
    from sqm.mechanism.vertical import ColumnBounds

    rng = np.random.default_rng(4)
    data = VerticalData([rng.normal(size=(30, 2)) * 0.2, rng.normal(size=(30, 2)) * 0.2,
                         (rng.random((30, 1)) < 0.5).astype(float)])
    stat = LRGradient(4, 4, 4.0, 3, np.array([0.1, -0.2, 0.3, 0.0]))
    bounds = ColumnBounds.parties([2, 2, 1], 1.0, separate={4: 1.0})
    return SQM(stat, 64.0, epsilon=4.0, backend="mpyc", seed=3, column_bounds=bounds, verify_sharing=verify), data


def test_the_sgd_kernel_checks_sharings_too():
    """The same integers with and without the check; a client dealing inconsistent shares is named by every
    party before the masked opening (real processes)."""
    plain, data = _gradient_release(False)
    checked, _ = _gradient_release(True)
    assert [int(v) for v in np.asarray(checked.run(data).raw)] == [int(v) for v in np.asarray(plain.run(data).raw)]
    programs, _ = checked.programs(data)
    programs[2] = Deviate(programs[2])
    with pytest.raises(MPCError) as err:
        run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    assert "the input sharing of client 2 is inconsistent" in str(err.value), str(err.value)


def test_sqm_lr_sgd_takes_the_check_into_every_round():
    from sqm.apps.logreg import SQMLogisticRegression

    est = SQMLogisticRegression(solver="sgd", verify_sharing=True, epsilon=1.0)
    plan, _ = est.plan(200, (2, 2, 1), 2)
    assert plan.release().verify_sharing
