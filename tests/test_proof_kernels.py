"""The compiled steps around the input proof (``_flp_kernel.c``: the witness, the weighted digit sums, the grid's
gather, the sharing's linear combinations; ``_wire_kernel.c``: the bit packing) give their numpy twins' integers and
bytes exactly, on random inputs in fields of 13 to 61 bits, with blocks of 0 and 1 records, and the protocol's
functions give the same results with the kernel and with numpy."""
from __future__ import annotations

import os

import numpy as np
import pytest

from sqm.mpc.net import wire
from sqm.mpc.net.abort import InputRefused
from sqm.mpc.protocols import input_proof as ip
from sqm.mpc.protocols import lookup
from sqm.mpc.shares.field import from_signed, prime_below

BITS = [13, 23, 33, 42, 44, 52, 61]


def _built(fns, what: str):
    """``fns`` (a compiled kernel's functions), or the test failed (SQM_REQUIRE_FLP_KERNEL set: the kernels must
    be built) or skipped."""
    if fns is None:
        if os.environ.get("SQM_REQUIRE_FLP_KERNEL"):
            pytest.fail(f"SQM_REQUIRE_FLP_KERNEL is set but the compiled {what} kernel (setup.py) was not built")
        pytest.skip(f"the compiled {what} kernel was not built here")
    return fns


def _steps():
    return _built(ip._step_functions(), "FLP")


def _claim(p: int, rng, cols: int = 4) -> ip.Claim:
    """Ranges of one value to about p / 4 (within the field), a group of several columns and one of one column
    where their norms fit the field."""
    top = max(1, min(1 << 40, p // (4 * cols)))
    lo = tuple(int(v) for v in -rng.integers(0, top, size=cols))
    hi = tuple(int(v) for v in rng.integers(0, top, size=cols))
    lo, hi = lo[:-1] + (3,), hi[:-1] + (3,)  # one column of a single value
    groups = (((0, cols - 1), max(lo[0] ** 2, hi[0] ** 2) + 9 - int(rng.integers(0, 3))), ((1,), hi[1] ** 2))
    claim = ip.Claim(lo, hi, groups)
    return claim if claim.needed_bound() < p else ip.Claim(lo, hi)


def _block(claim: ip.Claim, rows: int, rng) -> np.ndarray:
    x = np.stack([rng.integers(a, b + 1, size=rows) for a, b in zip(claim.lo, claim.hi, strict=True)], axis=1)
    x = x.astype(np.int64)
    for cols, lim in claim.groups:  # keep each record within its group limits
        while rows and int((x[:, list(cols)] ** 2).sum(axis=1).max()) > lim:
            big = (x[:, list(cols)] ** 2).sum(axis=1) > lim
            x[big, cols[0]] //= 2
    return x.reshape(rows, len(claim.lo))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("rows", [0, 1, 37])
def test_the_compiled_witness_is_the_numpy_witness(bits, rows):
    k = _steps()
    p = prime_below(bits)
    rng = np.random.default_rng(bits * 100 + rows)
    for _ in range(3):
        claim = _claim(p, rng)
        x = _block(claim, rows, rng)
        got = ip._witness_compiled(k.witness, x, claim)
        assert got is not None
        assert np.array_equal(got, ip._witness_numpy(x, claim))


def test_a_block_outside_its_claim_is_refused_with_the_kernel_as_without():
    _steps()
    claim = ip.Claim((-5, 0), (5, 3), (((0, 1), 20),))
    for bad, msg in ((np.array([[6, 0]]), "outside its declared ranges"),
                     (np.array([[4, 3]]), "squared norm is above its declared limit")):
        with pytest.raises(InputRefused, match=msg):
            ip.witness(bad, claim)
        with pytest.raises(InputRefused, match=msg):
            ip._witness_numpy(bad, claim)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("rows", [0, 1, 29])
def test_the_compiled_weighted_sums_are_the_numpy_ones(bits, rows):
    """On shares (arbitrary field elements) and on a column slice of a wider array, with and without the added
    constants, widths of zero included."""
    k = _steps()
    p = prime_below(bits)
    rng = np.random.default_rng(bits + rows)
    ranges = [0, 7, 8, 4096, int(rng.integers(1, 1 << min(bits - 2, 40)))]
    widths = [ip.digit_count(r) for r in ranges]
    wide = rng.integers(0, p, size=(rows, sum(widths) + 3), dtype=np.int64)
    digits = wide[:, 2:2 + sum(widths)]
    add = rng.integers(0, p, size=len(widths), dtype=np.int64)
    w = np.concatenate([ip.range_weights(r) for r in ranges])
    want = ip._weighted_numpy(digits, widths, w, p)
    assert np.array_equal(ip._weighted_compiled(k.weighted, digits, widths, w, p, None), want)
    assert np.array_equal(ip._weighted_compiled(k.weighted, digits, widths, w, p, add), (want + add) % p)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("nv", [1, 2, 5])
def test_the_compiled_linear_combination_is_the_field_sum(bits, nv):
    k = _steps()
    p = prime_below(bits)
    rng = np.random.default_rng(bits * nv)
    vals = [rng.integers(0, p, size=(7, 3), dtype=np.int64) for _ in range(nv)]
    vals[0][0, :3] = [p - 1, 0, 1]
    vals[-1][1, :3] = [p - 1, p - 2, 0]
    coef = [int(c) for c in rng.integers(0, p, size=nv)]
    coef[-1] = p - 1
    small = [(k + 2) % p if k % 2 else p - k - 1 for k in range(nv)]  # small signed: one int64 sum per entry
    for co in (coef, small):
        want = sum(int(c) * v.astype(object) for c, v in zip(co, vals, strict=True)) % p
        got = ip._lincomb_compiled(k.lincomb, vals, co, p)
        assert got.shape == (7, 3) and [int(v) for v in got.reshape(-1)] == [int(v) for v in want.reshape(-1)]
    empty = ip._lincomb_compiled(k.lincomb, [np.zeros((0, 4), np.int64)] * nv, coef, p)
    assert empty.shape == (0, 4)


@pytest.mark.parametrize("bits", [13, 42, 49, 50, 61])
def test_the_fast_sums_take_any_integers_in_every_vector_variant(bits):
    """The int64 paths of the linear combination (small coefficients, a block of entries at a time) and of the
    weighted sums (small weights) on arrays over several blocks with a few entries outside [0, p) (negative, p,
    near 2^63), in each vector variant the processor has: the exact field sums."""
    from sqm.mpc.protocols import flp

    k, simd = _steps(), flp._simd()
    p = prime_below(bits)
    rng = np.random.default_rng(bits)
    n = 3 * 1024 + 77
    vals = [rng.integers(0, p, size=n, dtype=np.int64) for _ in range(3)]
    vals[1][[5, 2048, n - 1]] = [-1, p, (1 << 63) - 1]  # in the first, third and last blocks
    ranges = [4096, 7, (1 << min(bits - 2, 40)) - 3]
    widths = [ip.digit_count(r) for r in ranges]
    digits = rng.integers(0, p, size=(700, sum(widths)), dtype=np.int64)
    digits[[3, 699], [0, 6]] = [-5, p + 3]
    w = np.concatenate([ip.range_weights(r) for r in ranges])
    starts = np.cumsum([0] + widths[:-1])
    want_w = np.array([[sum(int(w[o + i]) * int(row[o + i]) for i in range(kw)) % p
                        for o, kw in zip(starts, widths, strict=True)] for row in digits], dtype=np.int64)
    best = simd(-1) if simd is not None else 0
    try:
        for level in range(best + 1):
            if simd is not None:
                assert simd(level) == level
            for co in ([p - 1, 2, 0], [p - 2, 3, 1], [int(c) for c in rng.integers(0, p, size=3)]):
                want = sum(int(c) * v.astype(object) for c, v in zip(co, vals, strict=True)) % p
                got = ip._lincomb_compiled(k.lincomb, vals, co, p)
                assert [int(v) for v in got] == [int(v) for v in want]
            assert np.array_equal(ip._weighted_compiled(k.weighted, digits, widths, w, p, None), want_w)
    finally:
        if simd is not None:
            simd(-1)


@pytest.mark.parametrize("rows", [0, 1, 15, 16, 17, 50])
def test_the_compiled_gather_lays_the_records_as_numpy_does(rows):
    k = _steps()
    rng = np.random.default_rng(rows)
    src = rng.integers(0, 1 << 40, size=(rows, 9), dtype=np.int64)
    g, idx = 4, [8, 0, 3]
    per = max(1, -(-rows // g))
    Y = np.full((g, 2 + per * len(idx) + 1), -1, dtype=np.int64)
    assert ip._gather_compiled(k.gather, src, rows, idx, g, per, Y, 2)
    assert np.array_equal(Y[:, 2:-1].reshape(g, per, len(idx)), ip._gather_numpy(src, idx, g, per))
    assert (Y[:, :2] == -1).all() and (Y[:, -1] == -1).all()


@pytest.mark.parametrize("bits", [13, 42, 61])
@pytest.mark.parametrize("rows", [0, 1, 40])
def test_the_protocols_steps_are_the_same_with_the_kernel_and_with_numpy(bits, rows, monkeypatch):
    """witness, values, linear_check, grid and the sharing (its seeds fixed) with the compiled steps and with
    numpy alone."""
    _steps()
    p = prime_below(bits)
    rng = np.random.default_rng(bits + 7 * rows)
    claim = _claim(p, rng, 5)
    x = _block(claim, rows, rng)
    seeds = iter([bytes([i]) * 32 for i in range(1, 40)])

    def run():
        W = ip.witness(x, claim)
        co = ip.coins(b"c" * 32, 1, rows, claim, p)
        X = ip.values(W, claim, p)
        consts = lookup.alphas(b"a" * 32, 1, max(claim.tables), p) if claim.tables else []
        invs = lookup.table_inverses(consts, claim, p)
        H = lookup.inverse_witness(W, claim, invs) if claim.tables else None
        M = lookup.table_counts(W, claim)
        Y, _, beta, z = ip.grid(from_signed(x, p), W, claim, co, p, H=H)
        Yv, *_ = ip.grid(X, W, claim, co, p, H=H)
        sh = ip.seeded_shares(W, 1, 4, 1, p)
        blinds, bl = ip.blind_shares(1, 4, 1, 5, p)
        checks = [z, ip.linear_check(W, claim, co, p), lookup.check(H, M, claim, co, invs, p)]
        return [W, X, Y, Yv, beta, np.array(checks), blinds] + [sh[j] for j in sorted(sh)] + \
            [bl[j] for j in sorted(bl)] + ([H, M] if claim.tables else [])

    monkeypatch.setattr(ip, "fresh_bytes", lambda n: next(seeds))
    fast = run()
    seeds = iter([bytes([i]) * 32 for i in range(1, 40)])
    monkeypatch.setattr(ip, "_steps", lambda: None)
    slow = run()
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert (a == b) if isinstance(a, bytes) else np.array_equal(a, b)


def _bit_kernel():
    return _built(wire._bit_kernel(), "wire")


@pytest.mark.parametrize("bits", [33, 34, 40, 41, 42, 48, 49, 50, 57, 61, 62])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7, 8, 9, 1001])
def test_the_compiled_bit_packing_is_numpys_bytes_and_integers(bits, n, monkeypatch):
    """pack_bits' bytes and packed_bits' integers with the kernel and without; an entry not below p is refused
    with the same message either way."""
    _bit_kernel()
    p = prime_below(bits)
    rng = np.random.default_rng(bits * 10 + n)
    a = rng.integers(0, p, size=n, dtype=np.int64)
    a[:min(n, 2)] = [p - 1, 0][:min(n, 2)]
    frame = wire.pack_bits(a, p)
    back = wire.packed_bits((n,), p)(frame)
    bad = frame.copy()
    if n:
        bad[:] = 255  # every bit set: the entries above p
    monkeypatch.setattr(wire, "_bit_kernel", lambda: None)
    assert np.array_equal(frame, wire.pack_bits(a, p))
    assert np.array_equal(back, a) and np.array_equal(wire.packed_bits((n,), p)(frame), a)
    if n:
        with pytest.raises(wire.WireError, match="outside"):
            wire.packed_bits((n,), p)(bad)
        monkeypatch.undo()
        with pytest.raises(wire.WireError, match="outside"):
            wire.packed_bits((n,), p)(bad)
