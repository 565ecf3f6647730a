"""The clients' rounding kernels (sqm.mechanism.quantize.dependent_round: the compiled one,
sqm/mechanism/_dependent_round.c, and the numpy one) against its slow reference (dependent_round_reference, the
algorithm as first written): the same integers, bit for bit, on random inputs with the edge cases each branch of
the kernels takes; and the compiled kernel used only where it agrees with the numpy kernel."""
import ctypes
import os

import numpy as np
import pytest

from sqm.mechanism import quantize
from sqm.mechanism.quantize import dependent_round, dependent_round_reference


def edge_block(rng, n, d, gamma):
    """Records of different norms (zero rows, tiny, unit, scaled), signs mixed, with exact integers after
    scaling (zero fractions: columns that a chain skips, rows with no fraction at all), fractions just above 0
    and just below 1, halves, and values at the bounds +-c with c = 1."""
    x = rng.normal(size=(n, d))
    x *= (rng.random((n, 1)) ** 2 / np.linalg.norm(x, axis=1, keepdims=True))
    x[::13] *= 1e-6
    x[2::19] /= np.linalg.norm(x[2::19], axis=1, keepdims=True)  # on the unit sphere
    x[1::17] = 0.0  # whole rows integral
    x[::5, 0] = 0.0  # a zero first column on some rows: their chains start later
    x[::3, d // 2] = np.round(x[::3, d // 2] * gamma) / gamma  # exact integers after scaling
    x[::7, 1] = (np.floor(x[::7, 1] * gamma) + 2.0 ** -30) / gamma  # tiny fractions
    x[::9, 2] = (np.floor(x[::9, 2] * gamma) + 1 - 2.0 ** -30) / gamma  # fractions near 1
    x[::11, 3] = (np.floor(x[::11, 3] * gamma) + 0.5) / gamma  # halves
    x[4::23, :] = 0.0
    x[4::23, d - 1] = 1.0  # the bound
    x[5::23, :] = 0.0
    x[5::23, 0] = -1.0  # minus the bound
    x[6::23, :] = 2.5 / gamma  # equal fractions and weights: the two rooms tie at every step
    x[7::23, :] = 0.5 / gamma * np.where(np.arange(d) % 2, 1.0, -1.0)  # ties, weights of both signs
    x[8::23, :] = 0.25 / gamma  # ties, and the carried fraction lands exactly on 1/2
    return x


def edge_coins(rng, shape):
    """Uniform coins, with some at 0 and some just below 1 (each coin test's both ends)."""
    u = rng.random(shape)
    u[::6] = 0.0
    u[1::8] = 1.0 - 2.0 ** -53
    return u


def built_kernel():
    """The compiled kernel's C function; the test is skipped where it is not built (it fails instead under
    ``SQM_REQUIRE_ROUNDING_KERNEL``, which CI sets)."""
    fn = quantize._library()
    if fn is None:
        if os.environ.get("SQM_REQUIRE_ROUNDING_KERNEL"):
            pytest.fail("SQM_REQUIRE_ROUNDING_KERNEL is set but the compiled rounding kernel "
                        "(sqm/mechanism/_dependent_round.c) is not built or does not load")
        pytest.skip("the compiled rounding kernel is not built (python setup.py build_ext --inplace, or "
                    "pip install -e .)")
    return fn


@pytest.fixture(params=["compiled", "numpy"])
def kernel(request, monkeypatch):
    """Runs the test once with each kernel behind dependent_round (the compiled one as built, unchecked)."""
    fn = built_kernel() if request.param == "compiled" else None
    monkeypatch.setattr(quantize, "_compiled", lambda: fn)
    return request.param


@pytest.fixture
def fresh_choice():
    """The kernel chosen anew in the test, and again after it (the choice is cached per process)."""
    quantize._compiled.cache_clear()
    yield
    quantize._compiled.cache_clear()


GROUPINGS = {
    "one group": lambda d: None,
    "interleaved": lambda d: [np.arange(0, d, 3), np.arange(1, d, 3), np.arange(2, d, 3)],
    "reversed and single": lambda d: [np.arange(d - 2, -1, -1), [d - 1]],
    "singletons": lambda d: [[j] for j in range(d)],
}


@pytest.mark.parametrize("grouping", sorted(GROUPINGS))
@pytest.mark.parametrize("gamma", [1.0, 7.3, 4096.0, 2.0 ** 30])
def test_the_kernel_gives_the_reference_integers(grouping, gamma, kernel):
    rng = np.random.default_rng(int(gamma) % 1000 + len(grouping))
    n, d = 3000, 11
    x = edge_block(rng, n, d, gamma)
    coins = edge_coins(rng, (n, d))
    groups = GROUPINGS[grouping](d)
    want = dependent_round_reference(x, gamma, groups, coins=coins)
    got = dependent_round(x, gamma, groups, coins=coins)
    assert got.dtype == want.dtype == np.int64
    assert np.array_equal(got, want)
    # the inputs do reach the kernel's masked path and its all-rows path, and both ends of the rounding
    y = gamma * x
    assert np.any(y == np.floor(y)) and np.any(y != np.floor(y))
    assert np.any(got == np.floor(y)) and np.any(got == np.ceil(y) * (y != np.floor(y)))


def test_dense_blocks_across_block_boundaries_and_seeds(kernel):
    """Every value fractional (the kernel's unmasked path on every column) over several row blocks, one of them
    partial, with the coins drawn from a seed as a caller without coins gets them."""
    rng = np.random.default_rng(11)
    n, d = 3 * quantize._ROWS + 123, 40
    x = rng.normal(size=(n, d)) / 7
    for seed in (0, 1):
        assert np.array_equal(dependent_round(x, 4096.0, None, seed=seed),
                              dependent_round_reference(x, 4096.0, None, seed=seed))


@pytest.mark.parametrize("tile", [1, 5, 64, 512])
def test_block_and_tile_sizes_do_not_change_the_kernel(monkeypatch, tile, kernel):
    """Blocks of any size (one record, partial last blocks, one block) transposed in tiles of any size (one
    record, a partial last tile, a tile larger than the block) give the reference's integers (the compiled
    kernel's own batches of rows: whole, partial, a single row)."""
    rng = np.random.default_rng(12)
    x = edge_block(rng, 500, 9, 100.0)
    coins = edge_coins(rng, x.shape)
    want = dependent_round_reference(x, 100.0, [[0, 4, 6], [1, 2, 3, 5, 7, 8]], coins=coins)
    monkeypatch.setattr(quantize, "_TILE", tile)
    for rows in (1, 7, 499, 500, 4096):
        monkeypatch.setattr(quantize, "_ROWS", rows)
        assert np.array_equal(dependent_round(x, 100.0, [[0, 4, 6], [1, 2, 3, 5, 7, 8]], coins=coins), want)


def test_a_client_input_across_coin_blocks_matches_the_reference(kernel):
    """A client's rows across the 65,536-record boundary of its coin keys, rounded whole and in parts, give the
    reference's integers for the same coins."""
    from sqm.mechanism.client import QuantizedRows
    from sqm.mechanism.coins import COIN_BLOCK, CoinKeys
    from sqm.mpc.protocols.stream import ArrayInput

    rng = np.random.default_rng(13)
    n, d = COIN_BLOCK + 700, 5
    x = edge_block(rng, n, d, 64.0) * 0.5  # norms <= 0.5: nothing clipped at the bound 1
    rows = QuantizedRows(ArrayInput(x), 1.0, 64.0, 0.0, 1, quantize.make_rng(21))
    coins = CoinKeys.from_generator(quantize.make_rng(21), d).random(0, n)
    want = dependent_round_reference(x, 64.0, None, coins=coins)
    assert np.array_equal(rows.whole(), want)
    a, b = COIN_BLOCK - 300, n
    part = rows.part(a, b)
    assert np.array_equal(np.concatenate(list(part.chunks(257))), want[a:b])


def test_empty_and_narrow_blocks(kernel):
    for shape in ((0, 4), (5, 1), (1, 6)):
        x = np.random.default_rng(14).normal(size=shape) / 3
        coins = np.random.default_rng(15).random(shape)
        got = dependent_round(x, 50.0, None, coins=coins)
        assert got.shape == shape
        assert np.array_equal(got, dependent_round_reference(x, 50.0, None, coins=coins))


def test_input_layouts_do_not_change_the_integers(kernel):
    """Column-major records, strided views of records and coins, float32 records: the integers of the same
    values in a contiguous float64 block."""
    rng = np.random.default_rng(34)
    x = edge_block(rng, 600, 10, 64.0)
    coins = edge_coins(rng, (600, 20))
    want = dependent_round_reference(x, 64.0, None, coins=coins[:, ::2])
    for xs in (np.asfortranarray(x), np.repeat(x, 2, axis=1)[:, ::2]):
        assert np.array_equal(dependent_round(xs, 64.0, None, coins=coins[:, ::2]), want)
    x32 = x.astype(np.float32)
    assert np.array_equal(dependent_round(x32, 64.0, None, coins=np.asfortranarray(coins[:, ::2])),
                          dependent_round_reference(x32.astype(np.float64), 64.0, None, coins=coins[:, ::2]))


def test_the_compiled_kernel_equals_the_numpy_kernel_on_every_edge_block():
    """Directly, kernel against kernel: every grouping and scale of the edge blocks, with a row count that is not
    a whole number of the compiled kernel's batches."""
    fn = built_kernel()
    for grouping in sorted(GROUPINGS):
        for gamma in (1.0, 7.3, 4096.0, 2.0 ** 30):
            rng = np.random.default_rng(31)
            x = edge_block(rng, 1001, 11, gamma)
            x, groups, coins = quantize._checked(x, gamma, GROUPINGS[grouping](11), None, edge_coins(rng, x.shape))
            want = quantize._round_numpy(x, gamma, groups, coins)
            assert np.array_equal(quantize._round_compiled(fn, x, gamma, groups, coins), want)


def test_the_built_kernel_is_chosen_unless_numpy_is_asked(monkeypatch, fresh_choice):
    built_kernel()
    monkeypatch.delenv("SQM_ROUNDING_KERNEL", raising=False)
    assert quantize.kernel_backend() == "compiled"
    monkeypatch.setenv("SQM_ROUNDING_KERNEL", "numpy")
    quantize._compiled.cache_clear()
    assert quantize.kernel_backend() == "numpy"


def _zeros(x, coins, n, d, gamma, cols, starts, ngroups, out):
    ctypes.memset(out, 0, n * d * 8)
    return 0


def _fails(*args):
    raise OSError("no kernel")


@pytest.mark.parametrize("fake", [_zeros, _fails, lambda *args: -1], ids=["wrong integers", "raises", "no memory"])
def test_a_kernel_that_disagrees_or_fails_is_refused(monkeypatch, fresh_choice, fake):
    """A kernel that writes other integers on the sample (zeros), raises, or cannot run is not used: the numpy
    kernel rounds, with the reference's integers."""
    monkeypatch.delenv("SQM_ROUNDING_KERNEL", raising=False)
    monkeypatch.setattr(quantize, "_library", lambda: fake)
    assert quantize.kernel_backend() == "numpy"
    x = edge_block(np.random.default_rng(32), 200, 6, 64.0)
    assert np.array_equal(dependent_round(x, 64.0, None, seed=3), dependent_round_reference(x, 64.0, None, seed=3))


def test_a_kernel_one_value_off_is_refused(monkeypatch, fresh_choice):
    """The built kernel with one integer of its output changed fails the sample check."""
    fn = built_kernel()

    def off_by_one(x, coins, n, d, gamma, cols, starts, ngroups, out):
        rc = fn(x, coins, n, d, gamma, cols, starts, ngroups, out)
        if n * d:
            ctypes.c_int64.from_address(out + 8 * (n * d - 1)).value += 1
        return rc

    monkeypatch.delenv("SQM_ROUNDING_KERNEL", raising=False)
    monkeypatch.setattr(quantize, "_library", lambda: off_by_one)
    assert quantize.kernel_backend() == "numpy"
    monkeypatch.setattr(quantize, "_library", lambda: fn)
    quantize._compiled.cache_clear()
    assert quantize.kernel_backend() == "compiled"


def test_a_kernel_that_cannot_run_falls_back_per_call(monkeypatch):
    """A kernel accepted at first use that later cannot allocate its work buffer: that call rounds on the numpy
    kernel, with the same integers."""
    monkeypatch.setattr(quantize, "_compiled", lambda: (lambda *args: -1))
    x = edge_block(np.random.default_rng(33), 300, 7, 64.0)
    assert np.array_equal(dependent_round(x, 64.0, None, seed=4), dependent_round_reference(x, 64.0, None, seed=4))


def test_both_refuse_the_same_inputs():
    from sqm.errors import UsageError

    for args, match in [((np.full((2, 3), np.nan), 10.0, None), "NaN"),
                        ((np.ones((2, 3)), 10.0, [[0, 1]]), "groups"),
                        ((np.ones((2, 3)) * 0.1, 2.0 ** 42, None), "too large"),
                        ((np.ones(3), 10.0, None), "records x columns")]:
        for fn in (dependent_round, dependent_round_reference):
            with pytest.raises(UsageError, match=match):
                fn(*args)
    with pytest.raises(UsageError, match="coins for a block"):
        dependent_round(np.ones((2, 3)) * 0.1, 10.0, None, coins=np.zeros((3, 2)))


def test_the_rounding_bench_checks_the_integers(tmp_path):
    """``python -m bench rounding`` at a small shape: its report holds every timing and ratio, says the kernel's
    integers equal the reference's, and its JSON document is written."""
    import json

    from bench.command import build_parser, parse

    path = tmp_path / "rounding.json"
    args = parse(["rounding", "--rows", "300", "--cols", "7", "--integral", "0.2", "--repeat", "1",
                  "--json", str(path)], build_parser())
    assert args.func(args) == 0
    rep = json.loads(path.read_text())["details"]
    assert rep["same_integers"] is True and rep["values"] == 2100
    assert rep["kernel"] == quantize.kernel_backend()
    for name in ("independent", "dependent", "numpy", "reference"):
        assert rep[f"{name}_cpu_seconds"] >= 0 and rep[f"{name}_given_cpu_seconds"] >= 0
    assert rep["dependent_ratio"] == pytest.approx(rep["dependent_cpu_seconds"]
                                                   / max(rep["independent_cpu_seconds"], 1e-9))
    assert rep["numpy_ratio"] == pytest.approx(rep["numpy_cpu_seconds"] / max(rep["independent_cpu_seconds"], 1e-9))
    assert rep["target_ratio"] == 1.5 and rep["target_met"] is (rep["dependent_ratio"] <= 1.5)
