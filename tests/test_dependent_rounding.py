"""The clients' rounding (sqm.mechanism.quantize.dependent_round): exact marginals, every outcome floor or ceil,
and every outcome's group norm within the bound the sensitivity uses (all outcomes enumerated)."""
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from sqm.mechanism import quantize
from sqm.mechanism.quantize import dependent_round, stochastic_round
from sqm.mechanism.sensitivity import dependent_norm_bound_sq, quantized_norm_bound_sq
from sqm.errors import UsageError


class _Coins:
    """A stand-in generator whose ``random`` returns fixed coins (to walk every branch of the rounding)."""

    def __init__(self, coins):
        self.coins = coins

    def random(self, shape):
        assert tuple(shape) == self.coins.shape
        return self.coins


def every_outcome(x, gamma, groups, monkeypatch):
    """Every outcome dependent rounding can give ``x`` (one record): each coin at 0 or just below 1 takes each
    decision's either branch (go up iff coin * total < s_dn; the last fraction up iff coin < p), so the 2^d
    coin vectors reach every outcome of positive probability."""
    d = len(x)
    coins = np.array(list(itertools.product([0.0, 1.0 - 2.0 ** -53], repeat=d)))
    quantize._compiled()  # the kernel's one-time self-check draws its sample with make_rng: run it unpatched
    monkeypatch.setattr(quantize, "make_rng", lambda seed: _Coins(coins))
    out = dependent_round(np.repeat(np.asarray(x, float)[None, :], len(coins), axis=0), gamma, groups)
    monkeypatch.undo()
    return np.unique(out, axis=0)


def adversarial_records(d, c, gamma, rng, k=40):
    """Records with ||x|| <= c: random, all fractions just above 0 or at 1/2, and one large coordinate with a
    tiny fraction (the last fraction's weight is then near 2 gamma c), signs mixed."""
    recs = []
    for _ in range(k):
        r = rng.normal(size=d)
        recs.append(r / np.linalg.norm(r) * c * rng.random() ** 0.1)
    for frac in (1e-9, 0.5, 1 - 1e-9):
        y = np.floor(rng.random(d) * gamma * c / math.sqrt(d)) + frac
        recs.append(y / gamma * min(1.0, gamma * c / np.linalg.norm(y)))
    big = np.full(d, 0.5 / gamma)
    big[0] = 0.0
    big[0] = math.sqrt(max(c * c - big @ big, 0.0)) * (1 - 1e-12)
    big[0] = (math.floor(gamma * big[0]) + 1e-6) / gamma
    recs.append(big)
    recs.append(-big)
    e = np.zeros(d)
    e[-1] = c
    recs.append(e)
    return [r for r in recs if np.linalg.norm(r) <= c]


@pytest.mark.parametrize("gamma,c,d", [(4.0, 1.0, 6), (7.3, 0.8, 9), (64.0, 1.0, 10), (1000.0, 0.6, 8),
                                       (2.0 ** 33, 1.0, 6)])
def test_every_outcome_is_floor_or_ceil_and_within_the_bound(gamma, c, d, monkeypatch):
    rng = np.random.default_rng(int(gamma * 10) + d)
    bound = dependent_norm_bound_sq(Fraction(gamma) * Fraction(c), d)
    worst_seen = 0
    for x in adversarial_records(d, c, gamma, rng):
        y = gamma * x
        outs = every_outcome(x, gamma, None, monkeypatch)
        assert np.all((outs == np.floor(y)) | (outs == np.ceil(y)))
        worst = int(np.max(np.sum(outs.astype(object) ** 2, axis=1)))
        assert worst <= bound
        worst_seen = max(worst_seen, worst)
    # where gamma c is large against sqrt(d), independent rounding's outcome with every entry rounded up
    # exceeds the bound: it is dependent rounding's own
    y = np.full(d, math.floor(gamma * c / math.sqrt(d) - 1e-5) + 1e-6)
    assert np.linalg.norm(y) <= gamma * c
    assert (int(np.sum(np.ceil(y) ** 2)) > bound) == (gamma * c >= 50)
    assert worst_seen >= (gamma * c) ** 2 * 0.8  # the records do reach the scale of the bound


def test_groups_are_rounded_apart_and_each_keeps_its_own_bound(monkeypatch):
    gamma, d = 16.0, 8
    groups = [[0, 3, 5], [1, 2, 4, 6], [7]]
    bounds = [0.6, 0.7, math.sqrt(1 - 0.6 ** 2 - 0.7 ** 2)]
    rng = np.random.default_rng(3)
    for _ in range(25):
        x = np.zeros(d)
        for g, b in zip(groups, bounds, strict=False):
            v = rng.normal(size=len(g))
            x[g] = v / np.linalg.norm(v) * b * rng.random() ** 0.2
        outs = every_outcome(x, gamma, groups, monkeypatch)
        for g, b in zip(groups, bounds, strict=False):
            cap = min(dependent_norm_bound_sq(Fraction(gamma) * Fraction(b), len(g)),
                      len(g) * math.ceil(Fraction(gamma) * Fraction(b)) ** 2)
            assert int(np.max(np.sum(outs[:, g] ** 2, axis=1))) <= cap
        total = int(np.max(np.sum(outs ** 2, axis=1)))
        assert total <= quantized_norm_bound_sq(gamma, bounds, [len(g) for g in groups])


@pytest.mark.parametrize("seed", range(3))
def test_marginals_are_exact(seed):
    """E[x_hat_j] = gamma x_j: over 200,000 roundings of one record, every column's mean is within 5 standard
    errors (sqrt(f (1 - f) / n), the Bernoulli's own: each marginal is exactly Bernoulli(f_j))."""
    rng = np.random.default_rng(100 + seed)
    d, n, gamma = 9, 200_000, 5.7
    x = rng.normal(size=d)
    x = x / np.linalg.norm(x)
    groups = [[0, 1, 2, 3, 4], [5, 6], [7, 8]]
    out = dependent_round(np.repeat(x[None, :], n, axis=0), gamma, groups, seed=seed)
    y = gamma * x
    f = y - np.floor(y)
    z = (out.mean(axis=0) - y) / np.sqrt(f * (1 - f) / n)
    assert np.max(np.abs(z)) < 5, z
    # the negative correlation that keeps the norm: the group's weighted sum varies far less than independently
    w = 2 * np.floor(y) + 1
    g = groups[0]
    dep = np.var(out[:, g] @ w[g])
    assert dep <= np.max(w[g] ** 2) / 4 * 1.05  # only the last fraction's coin moves it
    assert dep < 0.6 * np.sum(w[g] ** 2 * f[g] * (1 - f[g]))  # independent rounding's variance


def test_one_column_groups_are_stochastic_rounding_bit_for_bit():
    x = np.random.default_rng(4).normal(size=(50, 6))
    assert np.array_equal(dependent_round(x, 300.0, [[j] for j in range(6)], seed=9),
                          stochastic_round(x, 300.0, seed=9))


def test_the_gram_sensitivity_is_lower_where_groups_are_wide():
    """What dependent rounding buys: ||x_hat||^2 <= 1.00049 gamma^2 for one 64-column group at gamma 4096
    (independent rounding: (gamma + 8)^2 = 1.0039 gamma^2), 1.036 against 1.266 at gamma 64."""
    for gamma, ours, indep in [(4096.0, 1.000490, (4096 + 8) ** 2), (64.0, 1.0357, (64 + 8) ** 2)]:
        b = quantized_norm_bound_sq(gamma, [1.0], [64])
        assert b <= Fraction(ours) * Fraction(gamma) ** 2 < indep


def test_bad_groups_and_scales_are_refused():
    x = np.ones((2, 3)) * 0.1
    with pytest.raises(UsageError, match="groups"):
        dependent_round(x, 10.0, [[0, 1]])
    with pytest.raises(UsageError, match="groups"):
        dependent_round(x, 10.0, [[0, 1], [1, 2]])
    with pytest.raises(UsageError, match="too large"):
        dependent_round(x, 2.0 ** 42, None)
    with pytest.raises(UsageError, match="records x columns"):
        dependent_round(np.ones(3), 10.0)


def test_row_blocks_do_not_change_the_integers(monkeypatch):
    """Rows are rounded independently: the loop's row blocking (for cache) gives the same integers."""
    x = np.random.default_rng(6).normal(size=(1000, 7)) / 3
    x[::5, 2] = 0.0  # integral values skip their column
    whole = dependent_round(x, 100.0, [[0, 4, 6], [1, 2, 3, 5]], seed=3)
    monkeypatch.setattr(quantize, "_ROWS", 7)
    assert np.array_equal(dependent_round(x, 100.0, [[0, 4, 6], [1, 2, 3, 5]], seed=3), whole)


def test_a_client_input_takes_a_bound_or_its_column_groups_only():
    """The rounding must keep the groups the sensitivity bounds: a bare clip function (which would say nothing of
    them) is refused, naming what is expected."""
    from sqm.mechanism.client import QuantizedRows
    from sqm.mechanism.coins import CoinKeys
    from sqm.mechanism.vertical import ColumnBounds
    from sqm.mpc.protocols.stream import ArrayInput

    x = np.random.default_rng(8).normal(size=(20, 4)) / 4
    bounds = ColumnBounds(((0, 1), (2,), (3,)), (0.8, 0.4, 0.4))
    with pytest.raises(UsageError, match="column groups"):
        QuantizedRows(ArrayInput(x), lambda b: bounds.clip(b, [4], 0), 64.0, 0.0, 1, np.random.default_rng(0))
    got = QuantizedRows(ArrayInput(x), bounds.own([4], 0), 64.0, 0.0, 1, quantize.make_rng(5)).whole()
    coins = CoinKeys.from_generator(quantize.make_rng(5), 4).random(0, 20)
    want = dependent_round(bounds.clip(x, [4], 0)[0], 64.0, [[0, 1], [2], [3]], coins=coins)
    assert np.array_equal(got, want)
