"""SQM-LR's base rate p0: the sgd solver's Taylor expansion taken at the intercept-only model sigma(b0) = p0 instead
of w = 0 (Eq. 19 is p0 = 1/2).  Its gradient sum x (p0 + p0 (1 - p0) <w, x> - y), the compensated coefficients, the
proven sensitivity at the new constants, the field's bound, the fitted intercept (b0 = logit p0 added) and the real
party processes against the simulation."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sqm.apps.logreg import LRPlan, SQMLogisticRegression
from sqm.apps.logreg.gradient import LRGradient
from sqm.mechanism.compensation import check_rounding
from sqm.mechanism.polynomial import logreg_gradient
from sqm.mechanism.quantize import dependent_round, stochastic_round
from sqm.mechanism.sensitivity import logreg_sensitivity, taylor_slope
from tests.test_sensitivity import worst_records


def plan_at(base_rate, gamma=64.0, W=1.0, mu=0.0, b_max=9, col_counts=(2, 3, 2), label_party=1):
    bounds = np.sqrt(np.asarray(col_counts) / sum(col_counts))
    return LRPlan(n_records=30, col_counts=tuple(col_counts), label_party=label_party, gamma=gamma, mu=mu, q=0.1,
                  rounds=10, b_max=b_max, learning_rate=1.0, weight_bound=W, party_bounds=tuple(bounds),
                  base_rate=base_rate)


def test_the_polynomial_is_the_expansion_at_the_base_rate_and_half_is_eq_19():
    """f = p0 x + p0 (1 - p0) <w, x> x - y x; at p0 = 1/2 the very coefficients of Eq. 19 (1/2, w/4, -1)."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=4)
    Z = rng.normal(size=(6, 5))
    Z[:, 4] = rng.integers(0, 2, 6)
    for p0 in (0.1, 0.5, 0.8):
        X, y = Z[:, :4], Z[:, 4]
        want = X.T @ (p0 + taylor_slope(p0) * (X @ w) - y)
        assert np.allclose(logreg_gradient(w, base_rate=p0).evaluate(Z), want)
    assert np.array_equal(logreg_gradient(w).term_coef, logreg_gradient(w, base_rate=0.5).term_coef)
    assert taylor_slope(0.5) == 0.25
    for bad in (0.0, 1.0, -0.2, float("nan"), True):
        with pytest.raises(ValueError, match="base_rate must lie in"):
            taylor_slope(bad)


@pytest.mark.parametrize("p0", [0.1, 0.75])
def test_the_compensated_coefficients_round_the_base_rates_polynomial(p0):
    """Every coefficient the server draws is floor or ceil of the p0 polynomial's scaled one, and the noiseless
    program at a large gamma is the p0 gradient."""
    plan = plan_at(p0, gamma=2.0 ** 20, b_max=25)
    rng = np.random.default_rng(3)
    w = rng.normal(size=plan.d)
    w /= np.linalg.norm(w)
    comp = plan.statistic(w).compensate(plan.gamma, np.random.default_rng(11))
    check_rounding(logreg_gradient(w, plan.label_index, p0), plan.gamma, comp.int_coefs)
    X = rng.normal(size=(25, plan.d))
    X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True)
    full = np.insert(X, plan.label_index, rng.integers(0, 2, 25).astype(float), axis=1)
    exact = logreg_gradient(w, plan.label_index, p0).evaluate(full)
    got = plan.statistic().program(comp.int_coefs).evaluate(stochastic_round(full, plan.gamma, rng))
    got = got.astype(float) / plan.scale
    assert np.max(np.abs(got - exact)) < 1e-4 * max(1.0, np.max(np.abs(exact)))


@pytest.mark.parametrize("gamma", [8.0, 64.0, 1024.0])
@pytest.mark.parametrize("p0", [0.1, 0.9])
def test_the_sensitivity_at_a_base_rate_holds_numerically_and_p0_matters(gamma, p0):
    """The bound at p0 covers every rounded record's compensated gradient (worst-case records, both labels, rounded
    coefficients for random ||w|| <= 1); the bound at 1/2 does not cover p0 = 0.9's (so the test can fail)."""
    rng = np.random.default_rng(1)
    d = 6
    s = logreg_sensitivity(gamma, d, base_rate=p0)
    half = logreg_sensitivity(gamma, d)
    worst = 0.0
    for trial in range(20):
        w = rng.normal(size=d)
        w = w / np.linalg.norm(w) * rng.random() ** 0.2
        prog = LRGradient(d, d, 1.0, 2, w, None, p0).compensate(gamma, seed=trial).program()
        for x in worst_records(d, 1.0, gamma, rng, k=15):
            for y in (0.0, 1.0):
                xh = dependent_round(np.r_[x, y][None, :], gamma, [list(range(d)), [d]], seed=rng)
                worst = max(worst, float(np.linalg.norm(np.array([float(v) for v in prog.evaluate(xh)]))))
    assert worst <= s.l2
    if p0 == 0.9 and gamma >= 64:
        assert worst > half.l2  # a negative record's term p0 x exceeds what the expansion at 1/2 allows
    assert logreg_sensitivity(gamma, d, base_rate=0.5) == half


def test_the_fields_bound_covers_every_coefficient_at_the_base_rate():
    plan = plan_at(0.9, mu=50.0)
    rng = np.random.default_rng(5)
    w = np.zeros(plan.d)
    w[0] = plan.weight_bound
    ints = [c for s in (1, -1) for _ in range(20) for c in plan.statistic(s * w).compensate(plan.gamma, rng).int_coefs]
    assert max(abs(c) for c in ints) <= plan.result_bound()
    generic = plan.statistic().program(ints[:len(ints) // 40]).output_bound(plan.release().int_col_bounds(),
                                                                            plan.b_max)
    assert plan.result_bound() >= generic + plan.release().addend_bound()


def _data(n=60, d=4, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)  # rows well inside every party's bound: nothing clipped
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0.2).astype(float)
    return X, y


def test_one_noiseless_round_is_the_direction_sum_x_of_y_minus_p0_and_the_intercept_adds_logit_p0():
    """One full-batch round from w = 0, no noise, learning rate 1, a large weight bound: w = sum x (y - p0) / n
    (the constant column's weight included), intercept_ = its weight times c plus logit p0."""
    X, y = _data()
    n = len(y)
    for p0 in (0.5, 0.2):
        m = SQMLogisticRegression(solver="sgd", sampling_rate=1.0, epochs=1, learning_rate=1.0, weight_bound=100.0,
                                  base_rate=p0, noise=False, gamma=2.0 ** 16, backend="in-process", n_parties=2,
                                  seed=4).fit(X, y)
        assert m.clipped_ == [0, 0]
        assert np.allclose(m.coef_[0], X.T @ (y - p0) / n, atol=1e-3)
        assert m.intercept_[0] == pytest.approx(np.sum(y - p0) / n + math.log(p0 / (1 - p0)), abs=1e-3)
        assert m.report_.l2_sensitivity == SQMLogisticRegression(
            solver="sgd", sampling_rate=1.0, epochs=1, learning_rate=1.0, weight_bound=100.0, base_rate=p0,
            gamma=2.0 ** 16, backend="in-process", n_parties=2).fit(X, y).report_.l2_sensitivity


def test_the_base_rate_is_the_sgd_solvers_and_refused_with_moments():
    X, y = _data()
    with pytest.raises(ValueError, match="base_rate: the schedule of solver='sgd'"):
        SQMLogisticRegression(base_rate=0.2, solver="moments", backend="in-process").fit(X, y)
    with pytest.raises(ValueError, match=r"base rate p0 must lie in \(0, 1\), got 1.5"):
        SQMLogisticRegression(base_rate=1.5, solver="sgd", backend="in-process").fit(X, y)


def test_simulation_equals_real_party_processes_at_a_base_rate():
    """The same seed: the same weights through real MPyC party processes as in the simulation, and the noise
    calibrated to the sensitivity at p0."""
    X, y = _data(80, 4)
    kw = dict(epsilon=2.0, gamma=1024.0, n_parties=2, seed=7, solver="sgd", sampling_rate=1.0, epochs=1,
              learning_rate=1.0, weight_bound=0.5, base_rate=0.15)
    sim = SQMLogisticRegression(backend="in-process", **kw).fit(X, y)
    real = SQMLogisticRegression(backend="mpyc", **kw).fit(X, y)
    assert np.array_equal(sim.coef_, real.coef_) and np.array_equal(sim.intercept_, real.intercept_)
    assert real.backend_ == "mpyc" and sum(real.bytes_sent_) > 0
    assert real.report_.l2_sensitivity == real.plan_.statistic().sensitivity(
        real.plan_.gamma, real.plan_.column_bounds()).l2 > SQMLogisticRegression(
        backend="in-process", **dict(kw, base_rate=0.5)).fit(X, y).report_.l2_sensitivity
    assert real.report_.epsilon_server <= 2.0


def test_sqm_logreg_takes_the_base_rate_and_refuses_it_without_the_sgd_solver(capsys):
    """The local command passes --base-rate to SQM-LR (its noise is calibrated at p0: another mu than at 1/2, said
    in the solver line) and refuses it with the moments solver, naming the option."""
    from sqm.cli.command import main

    args = ["logreg", "--backend", "plain", "--no-baselines", "--seed", "0", "--solver", "sgd", "--q", "1",
            "--epochs", "1", "--learning-rate", "1", "--weight-bound", "0.1"]
    assert main(args) == 0
    half = capsys.readouterr().out
    assert main(args + ["--base-rate", "0.2"]) == 0
    p0 = capsys.readouterr().out
    mu = [float(o.split("  mu ")[1].split()[0]) for o in (half, p0)]
    assert "base rate p0 0.2" in p0 and "base rate" not in half and mu[1] > mu[0]
    assert main(["logreg", "--backend", "plain", "--no-baselines", "--solver", "moments", "--base-rate", "0.2"]) != 0
    assert "base_rate: the schedule of solver='sgd'" in capsys.readouterr().err
