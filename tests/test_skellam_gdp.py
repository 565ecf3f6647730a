"""bench/skellam_gdp.py (issue 24, part 2, a research measurement): its double-precision c(V) equals the same
maximum computed exactly, in 400-digit mpmath from the Bessel pmf, and at V = 2 the largest increment is the
central one, 2 Phi^-1((1 + p(0)) / 2)."""
from __future__ import annotations

import math

import pytest

mpmath = pytest.importorskip("mpmath")


def _exact_c(V: float, reach: float = 25.0) -> float:
    mp = mpmath.mp
    mp.dps = 400  # the tail sums reach 1e-200 at 25 sd for V = 10: 1 - 2 T must not round to -1
    V = mp.mpf(V)
    sd = mp.sqrt(V)
    top = int((reach + 12) * float(sd) + 60)
    p = [mp.exp(-V) * mp.besseli(k, V) for k in range(top + 1)]
    tail = [mp.mpf(0)] * (top + 2)
    for k in range(top, -1, -1):
        tail[k] = tail[k + 1] + p[k]  # P(Z >= k), k >= 0 (truncated at top: far below what the steps read)
    g = [-mp.sqrt(2) * mp.erfinv(2 * tail[w + 1] - 1) for w in range(0, int(reach * float(sd)) + 3)]  # Phi^-1(F(w))
    g = [-g[0]] + g
    return float(sd * max(g[i + 1] - g[i] for i in range(int(reach * float(sd)) + 2)))


@pytest.mark.parametrize("V", [2.0, 10.0])
def test_the_bench_constant_equals_the_exact_one(V):
    from bench.skellam_gdp import gdp_constant

    c, _ = gdp_constant(V)
    assert c == pytest.approx(_exact_c(V), rel=1e-9)


def test_at_small_variance_the_largest_step_is_the_central_one():
    from bench.skellam_gdp import gdp_constant

    c, at = gdp_constant(2.0)
    p0 = math.exp(-2.0) * float(mpmath.besseli(0, 2.0))
    from scipy.special import ndtri

    assert at == -1 and c == pytest.approx(math.sqrt(2.0) * 2 * ndtri((1 + p0) / 2), rel=1e-12)
