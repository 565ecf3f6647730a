"""The lookup argument's pieces (:mod:`sqm.mpc.protocols.lookup`): the joint alphas, the table's inverses (compiled
and Python), the multiplicities, the identity's table side and its error; the protocol's checks are in
tests/test_input_proof.py."""
from __future__ import annotations

import numpy as np
import pytest

from sqm.errors import UsageError
from sqm.mpc.protocols import lookup
from sqm.mpc.shares.field import prime_below


@pytest.mark.parametrize("bits", [13, 42, 61])
@pytest.mark.parametrize("compiled", [True, False])
def test_the_inverses_are_the_fields(bits, compiled, monkeypatch):
    if not compiled:
        monkeypatch.setattr(lookup, "_kernel", lambda: None)
    elif lookup._kernel() is None:
        pytest.skip("the compiled kernel was not built here")
    p = prime_below(bits)
    for alpha, width in ((p - 1, 0), (600, 599), (p - 2, 1000)):
        inv = lookup.inverses(alpha, width, p)
        assert inv.shape == (width + 1,)
        assert [int(v) for v in inv] == [pow((alpha - t) % p, -1, p) for t in range(width + 1)]
    with pytest.raises(UsageError, match="lies in the table"):
        lookup.inverses(7, 100, p)


def test_the_alphas_are_joint_fresh_and_outside_the_tables():
    p = prime_below(42)
    a = lookup.alphas(b"s" * 32, 1, 5794, p)
    assert len(a) == lookup.ALPHAS and all(5794 < v < p for v in a)
    assert lookup.alphas(b"s" * 32, 1, 5794, p) == a  # every party computes the same
    assert lookup.alphas(b"s" * 32, 2, 5794, p) != a and lookup.alphas(b"t" * 32, 1, 5794, p) != a
    small = prime_below(13)
    draws = {v for s in range(200) for v in lookup.alphas(bytes([s]) * 32, 1, small - 4, small)}
    assert draws == {small - 3, small - 2, small - 1}  # uniform over [top + 1, p): every value, nothing else
    with pytest.raises(UsageError, match="field above them"):
        lookup.alphas(b"s" * 32, 1, small - 1, small)


def test_the_identity_holds_for_values_in_the_table_and_fails_outside():
    """sum_i 1 / (alpha - y_i) = sum_t m_t / (alpha - t) with the multiplicities of values in the table; a value
    outside it, with multiplicities that still add up, breaks it at a random alpha."""
    p = prime_below(42)
    rng = np.random.default_rng(3)
    y = rng.integers(0, 1001, size=(300, 4))
    m = lookup.multiplicities(y, 1000)
    assert m.shape == (1001,) and m.sum() == y.size and m[y[0, 0]] >= 1
    alpha = lookup.alphas(b"a" * 32, 1, 1000, p)[0]
    inv = lookup.inverses(alpha, 1000, p)
    assert int(inv[y].sum() % p) == lookup.table_sum(m, inv, p)
    bent = y.copy()
    bent[5, 1] = 1003
    lhs = sum(pow((alpha - int(v)) % p, -1, p) for v in bent.reshape(-1)) % p
    assert lhs != lookup.table_sum(lookup.multiplicities(np.clip(bent, 0, 1000), 1000), inv, p)
    with pytest.raises(UsageError, match="outside"):
        lookup.multiplicities(bent, 1000)


def test_the_widths_looked_up_and_the_error():
    assert not lookup.looked_up(511) and lookup.looked_up(512) and lookup.looked_up((1 << 16) - 1)
    assert not lookup.looked_up(1 << 16)
    p = prime_below(42)
    assert lookup.error(260_000, 5794, p) == ((260_000 + 5795) / (p - 5795)) ** 2 < 4e-15


@pytest.mark.parametrize("rows", [0, 1, 37])
def test_the_compiled_gather_of_the_inverses_is_numpys(rows, monkeypatch):
    """inverse_witness row by row in C and column by column in numpy: the same field elements, for two tables
    and a column of digits between the looked-up ones; an entry outside its table is refused."""
    from sqm.mpc.protocols import input_proof as ip

    if lookup._gather_kernel() is None:
        pytest.skip("the compiled kernel was not built here")
    p = prime_below(42)
    claim = ip.Claim(lo=(-300, -3, -700), hi=(300, 3, 700))
    rng = np.random.default_rng(rows)
    x = np.stack([rng.integers(-300, 301, size=rows), rng.integers(-3, 4, size=rows),
                  rng.integers(-700, 701, size=rows)], axis=1)
    W = ip.witness(x, claim)
    invs = lookup.table_inverses(lookup.alphas(b"g" * 32, 1, max(claim.tables), p), claim, p)
    fast = lookup.inverse_witness(W, claim, invs)
    monkeypatch.setattr(lookup, "_gather_kernel", lambda: None)
    assert np.array_equal(fast, lookup.inverse_witness(W, claim, invs))
    assert fast.shape == (rows, 4)
    if rows:
        assert int(fast[0, 0]) == pow((lookup.alphas(b"g" * 32, 1, 1400, p)[0] - int(x[0, 0]) - 300) % p, -1, p)
        W[0, claim.looked[1][1]] = 1401
        with pytest.raises(UsageError, match="outside"):
            lookup.inverse_witness(W, claim, invs)
