import math

import numpy as np
import pytest

from sqm.mechanism.compensation import compensate
from sqm.mechanism.polynomial import Polynomial, covariance
from sqm.mechanism.quantize import dependent_round, stochastic_round
from sqm.mechanism.sensitivity import (covariance_l2_paper, covariance_sensitivity, general_sensitivity,
                             l1_from_l2, logreg_l2_paper, logreg_sensitivity)


def worst_records(n, c, gamma, rng, k=300):
    """Random and adversarial records with ||x|| <= c (entries just above half-integers / gamma)."""
    recs = [rng.normal(size=n) for _ in range(k)]
    recs = [r / np.linalg.norm(r) * c * rng.random() ** 0.1 for r in recs]
    half = np.full(n, 1.5 / gamma)
    if np.linalg.norm(half) <= c:
        recs.append(half)
    recs.append(np.full(n, c / math.sqrt(n)))
    e = np.zeros(n)
    e[0] = c
    recs.append(e)
    return recs


def test_lemma7_is_not_an_upper_bound_but_ours_is():
    gamma, n = 64.0, 20
    x = np.full(n, 1.5 / gamma)  # gamma x_j = 1.5 rounds up to 2 with probability 1/2
    c = float(np.linalg.norm(x))
    worst = np.full(n, 2)  # an outcome of independent rounding (Algorithm 2), probability 2^-20
    frob = float(np.linalg.norm(np.outer(worst, worst)))
    assert frob == 4 * n
    assert frob > covariance_l2_paper(gamma, c, n)  # 4n > 2.25n + n
    # the clients' dependent rounding keeps sum_j 3 b_j = 30 up to the last coin: at most 11 entries round up
    outs = dependent_round(np.repeat(x[None, :], 2000, axis=0), gamma, None, seed=0)
    assert int(np.max(np.sum(outs ** 2, axis=1))) <= n + 3 * 11 < covariance_l2_paper(gamma, c, n)
    assert n + 3 * 11 <= covariance_sensitivity(gamma, c, n).l2


@pytest.mark.parametrize("gamma", [4.0, 64.0, 1000.0])
def test_covariance_bound_holds_numerically(gamma):
    rng = np.random.default_rng(0)
    n, c = 12, 1.0
    s = covariance_sensitivity(gamma, c, n)
    for x in worst_records(n, c, gamma, rng):
        xs = dependent_round(np.repeat(x[None, :], 50, axis=0), gamma, None, seed=rng)  # the clients' rounding
        assert float(np.max(np.sum(xs.astype(float) ** 2, axis=1))) <= s.l2
        # (tests/test_dependent_rounding.py enumerates every outcome; independent rounding's largest,
        # every entry away from 0, may exceed it)
    assert s.l1 == l1_from_l2(s.l2, n * n)


def test_per_party_groups_cost_at_most_one_more_last_fraction_each():
    """Each group rounded on its own (a party rounds only its columns) leaves one last fraction per group, of
    weight <= 2 ceil(gamma c_p) + 1: splitting one group in two costs at most that more, and never more than
    the independent-rounding bound of the split."""
    from fractions import Fraction

    gamma, c = 256.0, 1.0
    glob = covariance_sensitivity(gamma, c, 10).l2
    bs, cols = [math.sqrt(0.3), math.sqrt(0.7)], [3, 7]
    per = covariance_sensitivity(gamma, c, 10, party_bounds=bs, party_cols=cols).l2
    assert glob < per <= glob + sum(2 * math.ceil(Fraction(gamma) * Fraction(b)) + 3 for b in bs)
    assert per < sum((gamma * b + math.sqrt(n)) ** 2 for b, n in zip(bs, cols, strict=False))


@pytest.mark.parametrize("gamma", [8.0, 64.0, 1024.0])
def test_logreg_bound_holds_numerically(gamma):
    from sqm.apps.logreg.gradient import LRGradient

    rng = np.random.default_rng(1)
    d = 6
    s = logreg_sensitivity(gamma, d)
    for trial in range(40):
        w = rng.normal(size=d)
        w = w / np.linalg.norm(w) * rng.random() ** 0.2
        # the coefficients as the server rounds them (each output's weight terms dependently)
        comp = LRGradient(d, d, 1.0, 2, w).compensate(gamma, seed=trial)
        prog = comp.program()
        for x in worst_records(d, 1.0, gamma, rng, k=20):
            for y in (0.0, 1.0):
                row = np.r_[x, y][None, :]
                xh = dependent_round(row, gamma, [list(range(d)), [d]], seed=rng)  # the label its own group
                out = np.array([float(v) for v in prog.evaluate(xh)])
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


# ----- exact arithmetic, rounded up (issue 24, part 4) ------------------------------------------------------


def test_sqrt_up_and_float_up_bound_from_above_and_are_exact_where_they_can_be():
    from fractions import Fraction

    from sqm.mechanism.sensitivity import SQRT_BITS, float_up, sqrt_up

    assert sqrt_up(9) == 3 and sqrt_up(Fraction(9, 4)) == Fraction(3, 2) and sqrt_up(0) == 0
    for q in [2, 3, Fraction(1, 3), 18, 10 ** 30 + 7, 0.1, 12547.5]:
        r = sqrt_up(q)
        step = Fraction(1, Fraction(q).denominator << SQRT_BITS)
        assert r * r >= q > (r - step) ** 2  # an upper bound, within one step of the root
    for q in [Fraction(1, 3), Fraction(2, 3), Fraction(10 ** 20 + 1), Fraction(5, 1)]:
        f = float_up(q)
        assert Fraction(f) >= q > Fraction(math.nextafter(f, -math.inf))  # the smallest float at or above q
    with pytest.raises(ValueError):
        sqrt_up(-1)


def test_a_bound_is_never_a_float_below_the_attained_worst_case():
    """Two one-column groups at gamma x_j = 2.5: both round up to 3 with probability 1/4, so ||x_hat||^2 = 18 is
    attained.  Float arithmetic (sqrt of the sum, squared) gave 17.999999999999996: below a sensitivity that
    occurs.  Exact rationals give 18."""
    s = covariance_sensitivity(2.5, 1.0, 2, party_bounds=[1.0, 1.0], party_cols=[1, 1])
    assert s.l2 == 18.0 and s.l1 == 36.0
    outcomes = {tuple(int(v) for v in stochastic_round(np.array([[1.0, 1.0]]), 2.5, seed=k)[0]) for k in range(200)}
    assert (3, 3) in outcomes and 3 ** 2 + 3 ** 2 == 18  # the worst case occurs
    assert covariance_sensitivity(100.5, 1.0, 2, party_bounds=[1.0, 1.0], party_cols=[1, 1]).l2 == 20402.0


def test_general_bound_takes_the_exact_ceiling_of_gamma_times_a_bound():
    """gamma b = 3 x 0.33333333333333337 is 1.0000000000000001110... exactly, 1.0 in floats: its ceiling is 2,
    not 1, so |x_hat| can be 2 and x_hat^2 can be 4."""
    b = math.nextafter(1 / 3, 1)
    assert 3.0 * b == 1.0 and math.ceil(3.0 * b) == 1  # what float arithmetic saw
    assert general_sensitivity(covariance(1), 3.0, [b], preprocess=False).l2 == 4.0


@pytest.mark.parametrize("seed", range(3))
def test_every_bound_is_at_or_above_its_value_in_50_digit_arithmetic(seed):
    import mpmath

    rng = np.random.default_rng(seed)
    mpmath.mp.dps = 50
    for _ in range(40):
        gamma = float(rng.choice([1.0, 3.0, 64.0, 4096.0, 8192.0]) * rng.uniform(1.0, 1.5))
        k = int(rng.integers(1, 4))
        bounds = rng.uniform(0.05, 1.0, size=k).tolist()
        cols = rng.integers(1, 40, size=k).tolist()
        exact = mpmath.fsum(min((mpmath.mpf(gamma) * mpmath.mpf(c) + mpmath.sqrt(n)) ** 2,
                                n * mpmath.ceil(mpmath.mpf(gamma) * mpmath.mpf(c)) ** 2,
                                mpmath.floor((mpmath.mpf(gamma) * mpmath.mpf(c)) ** 2 * (1 + mpmath.mpf(2) ** -40)
                                             + mpmath.mpf(n) / 4) + 2 * mpmath.ceil(mpmath.mpf(gamma) * mpmath.mpf(c))
                                + 2) for c, n in zip(bounds, cols, strict=False))
        s = covariance_sensitivity(gamma, 1.0, int(sum(cols)), party_bounds=bounds, party_cols=cols)
        assert mpmath.mpf(s.l2) >= exact and mpmath.mpf(s.l2) <= exact * (1 + mpmath.mpf(2) ** -50)
        d = int(sum(cols))
        g = mpmath.mpf(gamma)
        A = max(mpmath.ceil(g * g / 2), mpmath.ceil(g) ** 2 - mpmath.floor(g * g / 2))
        N = mpmath.sqrt(exact)
        gw = g / 4  # W = 1: each output's weight coefficients, rounded dependently (LRGradient.compensate)
        K = min(gw + mpmath.sqrt(d),
                mpmath.sqrt(mpmath.floor(gw ** 2 * (1 + mpmath.mpf(2) ** -40) + mpmath.mpf(d) / 4) + 2 * mpmath.ceil(gw)
                            + 2))
        lr = N * (A + K * N)
        got = logreg_sensitivity(gamma, d, 1.0, 1.0, bounds, cols).l2
        assert mpmath.mpf(got) >= lr and mpmath.mpf(got) <= lr * (1 + mpmath.mpf(2) ** -48)


def test_the_linreg_gram_bound_of_issue_24_is_the_exact_integer():
    """Issue 24's example: a gram bound of exactly 12548 came out as 12547.999999999998 (a square root squared).
    With dependent rounding the 4-feature group's part is 64^2 + 1 + 2 * 64 + 2 = 4227 (was (64 + 2)^2 = 4356):
    12419 = 4227 + 2 x 4096 (each one-column group ceil(64)^2), exactly."""
    from sqm.apps.linreg import SQMLinearRegression

    mech = SQMLinearRegression(gamma=64.0).mechanism([5, 1])
    assert mech.polynomial.sensitivity(64.0, mech.bounds_for([5, 1]), mech.preprocess).l2 == 12419.0
