"""The server's aggregate bounds check on covariance releases (issue 25, sqm.mechanism.input_check): honest inputs at
their bounds pass; a client sharing values 1000x outside its bounds, or offset, is refused naming it, nothing released.
In-process simulation here; ``python -m bench faults --cases out-of-bounds`` runs it through real processes."""
from __future__ import annotations

import numpy as np
import pytest

from bench.bounds_check import deviating_client
from sqm.mpc.net.launch import MPCError
from sqm.mechanism.input_check import energy_limits
from sqm.mechanism.release import SQM
from sqm.mechanism.polynomial import covariance
from sqm.mechanism.vertical import VerticalData


def _rows_at_the_bound(n, d, seed):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)  # ||x|| = 1: every sub-row at its share of the bound


def test_honest_rows_at_their_bounds_pass_and_the_limit_is_tight():
    """Every row at norm 1 (the largest honest energy): released, and each client's diagonal sum is within 5%
    of the honest part of its limit (the limit is not loose by orders of magnitude, so a 1000x deviation shows)."""
    X = _rows_at_the_bound(400, 6, 0)
    mech = SQM(covariance(6), 64.0, epsilon=1.0, seed=1)
    res = mech.run(VerticalData.split(X, 2))
    plan, _ = mech.round_plan([3, 3], 400)
    G = np.asarray(res.raw, dtype=object).reshape(6, 6)
    for cols, limit in energy_limits(plan):
        total = sum(int(G[j, j]) for j in cols)
        assert total <= limit
        assert total > 0.5 * limit  # c_p = 1/sqrt(2) per client: gamma^2 / 2 per row, against (gamma c + sqrt 3)^2


@pytest.mark.parametrize("factor, offset", [(1000.0, 0.0), (1.0, 1e4)])
def test_a_client_far_outside_its_bounds_is_refused_naming_it(factor, offset):
    """Both deviations are large enough to wrap the field, so a diagonal entry lands in its honest range with
    probability about 1/2, independently per column (the module's docstring): a run with 3 such columns is
    missed with probability about 1/8.  Over six seeded runs at least five are refused, each naming client 2
    (fixed seeds: deterministic; P(two or more misses) ~ 0.17 for a fresh set of seeds)."""
    X = np.random.default_rng(2).uniform(-0.3, 0.3, size=(300, 6))
    data = VerticalData.split(X, 2)
    SQM(covariance(6), 64.0, epsilon=1.0, seed=3).run(data)  # honest: released
    refused = 0
    for seed in range(3, 9):
        with deviating_client(factor, offset):
            try:
                SQM(covariance(6), 64.0, epsilon=1.0, seed=seed).run(data)
            except MPCError as e:
                assert "client 2's inputs exceed its public bounds" in str(e)
                refused += 1
    assert refused >= 5


def test_limits_name_each_clients_columns_and_grow_with_the_noise():
    mech = SQM(covariance(5), 64.0, mu=1e6)
    plan, _ = mech.round_plan([2, 3], 100)
    (c1, l1), (c2, l2) = energy_limits(plan)
    assert (c1, c2) == ([0, 1], [2, 3, 4])
    quiet, _ = SQM(covariance(5), 64.0, mu=1.0).round_plan([2, 3], 100)
    assert energy_limits(quiet)[0][1] < l1  # the noise's tail is part of the limit
