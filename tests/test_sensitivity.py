import math

import numpy as np
import pytest

from sqm.compensation import compensate
from sqm.polynomial import Polynomial, covariance, logreg_gradient
from sqm.quantize import stochastic_round
from sqm.sensitivity import (covariance_l2_paper, covariance_sensitivity, general_sensitivity,
                             l1_from_l2, logreg_l2_paper, logreg_sensitivity)


def worst_records(n, c, gamma, rng, k=300):
    """Random and adversarial records with ||x|| <= c (entries just above half-integers / gamma)."""
    recs = [rng.normal(size=n) for _ in range(k)]
    recs = [r / np.linalg.norm(r) * c * rng.random() ** 0.1 for r in recs]
    half = np.full(n, 1.5 / gamma)
    if np.linalg.norm(half) <= c:
        recs.append(half)
    recs.append(np.full(n, c / math.sqrt(n)))
    e = np.zeros(n); e[0] = c
    recs.append(e)
    return recs


def test_lemma7_is_not_an_upper_bound_but_ours_is():
    gamma, n = 64.0, 20
    x = np.full(n, 1.5 / gamma)  # gamma x_j = 1.5 rounds up to 2 with probability 1/2
    c = float(np.linalg.norm(x))
    worst = np.full(n, 2)  # a possible rounding outcome
    frob = float(np.linalg.norm(np.outer(worst, worst)))
    assert frob == 4 * n
    assert frob > covariance_l2_paper(gamma, c, n)  # 4n > 2.25n + n
    assert frob <= covariance_sensitivity(gamma, c, n).l2


@pytest.mark.parametrize("gamma", [4.0, 64.0, 1000.0])
def test_covariance_bound_holds_numerically(gamma):
    rng = np.random.default_rng(0)
    n, c = 12, 1.0
    s = covariance_sensitivity(gamma, c, n)
    for x in worst_records(n, c, gamma, rng):
        xh = np.where(x >= 0, np.ceil(gamma * x), np.floor(gamma * x))  # the largest rounding outcome
        assert float(xh @ xh) <= s.l2
        xs = stochastic_round(x[None, :], gamma, seed=rng)[0]
        assert float(xs @ xs) <= s.l2
    assert s.l1 == l1_from_l2(s.l2, n * n)


def test_per_party_bound_is_never_looser():
    gamma, c = 256.0, 1.0
    glob = covariance_sensitivity(gamma, c, 10).l2
    per = covariance_sensitivity(gamma, c, 10, party_bounds=[math.sqrt(0.3), math.sqrt(0.7)], party_cols=[3, 7]).l2
    assert per <= glob * (1 + 1e-12)


@pytest.mark.parametrize("gamma", [8.0, 64.0, 1024.0])
def test_logreg_bound_holds_numerically(gamma):
    rng = np.random.default_rng(1)
    d = 6
    s = logreg_sensitivity(gamma, d)
    for trial in range(40):
        w = rng.normal(size=d)
        w = w / np.linalg.norm(w) * rng.random() ** 0.2
        g = logreg_gradient(w)
        comp = compensate(g, gamma, seed=trial)
        prog = comp.program()
        for x in worst_records(d, 1.0, gamma, rng, k=20):
            for y in (0.0, 1.0):
                row = np.r_[x, y][None, :]
                out = np.array([float(v) for v in prog.evaluate(stochastic_round(row, gamma, seed=rng))])
                assert np.linalg.norm(out) <= s.l2
    # leading term 3/4 gamma^3, and below the paper's Eq. 22 for large d
    big = logreg_sensitivity(8192.0, 800)
    assert 0.75 * 8192.0 ** 3 < big.l2 < logreg_l2_paper(8192.0, 800)


def test_general_bound_holds_numerically():
    rng = np.random.default_rng(2)
    p = Polynomial.from_exponents([[2.0, -0.5, 3.0], [1.0, 1.25]],
                                  [[[2, 0, 1], [0, 1, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 3]]])
    gamma = 32.0
    bounds = np.array([0.5, 0.5, 0.7])
    s = general_sensitivity(p, gamma, bounds)
    for trial in range(50):
        comp = compensate(p, gamma, seed=trial)
        x = (rng.random(3) * 2 - 1) * bounds
        out = np.array([float(v) for v in comp.program().evaluate(stochastic_round(x[None], gamma, seed=trial))])
        assert np.linalg.norm(out) <= s.l2
        assert np.abs(out).sum() <= s.l1
    # the covariance through the general bound (|x_j| <= c for ||x|| <= c) is looser than the dedicated one
    g = general_sensitivity(covariance(4), 16.0, [1.0] * 4, preprocess=False)
    assert g.l2 == 4 * 16.0 ** 2 > covariance_sensitivity(16.0, 1.0, 4).l2
