"""Secret randomness: AES-CTR keyed from OS entropy, uniform Shamir shares, per-party seeds that reveal nothing."""
import hashlib
import hmac
import re
from pathlib import Path

import numpy as np
import pytest
from randomgen import AESCounter
from scipy.stats import chisquare

from sqm.errors import UsageError
from sqm.mpc.shares import randomness
from sqm.mpc.shares import shamir
from sqm.mpc.shares.field import prime_below
from sqm.mpc.shares.randomness import derive_seed, is_secure, secure_generator
from sqm.mechanism.client import QuantizingClient
from sqm.mechanism.coins import CoinKeys
from sqm.mechanism.compensation import compensate
from sqm.mechanism.release import SQM
from sqm.mechanism.pbm import encode
from sqm.mechanism.polynomial import covariance, logreg_gradient
from sqm.mechanism.quantize import dependent_round, stochastic_round
from sqm.mechanism.rng import make_rng, spawn_seeds
from sqm.mechanism.skellam import skellam
from sqm.mechanism.vertical import VerticalData, party_norm_bounds

ROOT = Path(__file__).resolve().parent.parent
ALPHA = 1e-4  # chi-square tests reject below this p-value (seeded: each test is deterministic)


# ----- the generator -------------------------------------------------------------------------------
def test_make_rng_is_aes_ctr_keyed_from_os_entropy(monkeypatch):
    for seed in (None, 7, np.random.SeedSequence(7)):
        rng = make_rng(seed)
        assert isinstance(rng.bit_generator, AESCounter) and is_secure(rng)
    assert not is_secure(np.random.default_rng(7))
    # unseeded generators differ (2^-128 chance of a clash per pair); seeded ones reproduce
    draws = [make_rng().integers(0, 2**62, 4) for _ in range(3)]
    assert len({tuple(d) for d in draws}) == 3
    assert np.array_equal(make_rng(7).random(5), make_rng(7).random(5))
    assert np.array_equal(make_rng(7).random(5), make_rng(np.random.SeedSequence(7)).random(5))
    assert not np.array_equal(make_rng(7).random(5), make_rng(8).random(5))
    # the key of an unseeded generator is what secrets hands out: fix secrets and two generators coincide
    asked = []

    def fixed_randbits(k):
        asked.append(k)
        return 0x1234567

    monkeypatch.setattr(randomness.secrets, "randbits", fixed_randbits)
    assert np.array_equal(secure_generator().random(4), secure_generator().random(4))
    assert np.array_equal(make_rng().random(4),
                          np.random.Generator(AESCounter(key=0x1234567)).random(4))
    assert asked == [128] * 3  # a 128-bit AES key per generator


def test_secret_draws_use_the_aes_ctr_stream():
    """Rounding, Skellam noise, coefficient rounding, PBM encoding and the client program draw from AES-CTR:
    with the same seed they equal draws from a generator built on AESCounter, not from PCG64."""
    x = np.random.default_rng(0).random(200)
    assert np.array_equal(stochastic_round(x, 10.0, seed=3), stochastic_round(x, 10.0, seed=make_rng(3)))
    assert not np.array_equal(stochastic_round(x, 10.0, seed=3), stochastic_round(x, 10.0, np.random.default_rng(3)))
    assert np.array_equal(skellam(40.0, 100, seed=4), skellam(40.0, 100, make_rng(4)))
    assert not np.array_equal(skellam(40.0, 100, seed=4), skellam(40.0, 100, np.random.default_rng(4)))
    assert np.array_equal(encode(x, 8, 0.2, rng=5).q, encode(x, 8, 0.2, rng=make_rng(5)).q)
    assert not np.array_equal(encode(x, 8, 0.2, rng=5).q, encode(x, 8, 0.2, rng=np.random.default_rng(5)).q)
    poly = logreg_gradient(np.full(4, 0.337), 3)
    assert compensate(poly, 2.0**10, 6).int_coefs == compensate(poly, 2.0**10, make_rng(6)).int_coefs
    ss = np.random.SeedSequence(9)
    block = np.random.default_rng(1).random((50, 3)) / 4
    xq, z = QuantizingClient(block, 2.0**10, 1.0, 30.0, 9, ss)()
    rng = make_rng(ss)
    coins = CoinKeys.from_generator(rng, 3).random(0, 50)  # the coins' master key first, then the noise
    assert np.array_equal(xq, dependent_round(block, 2.0**10, None, coins=coins))
    assert np.array_equal(z, skellam(30.0, 9, rng))
    xp, zp = QuantizingClient(block, 2.0**10, 1.0, 30.0, 9, ss, insecure_pcg64=True)()  # benchmark-only path
    assert not (np.array_equal(xq, xp) and np.array_equal(z, zp))


def test_no_statistical_generator_for_secrets_in_the_mechanism_and_the_runtime():
    """numpy's PCG64 (default_rng) appears in sqm/ and sqm/mpc/ only on the benchmark-only insecure paths and in
    the compiled FLP prover's self-check, whose statements are fixed public ones (flp._sample: nothing secret)."""
    allowed = {("sqm/mechanism/rng.py", "if insecure_pcg64"), ("sqm/mechanism/coins.py", "if self.insecure_pcg64"),
               ("sqm/mpc/net/party.py", "share_rng = np.random.default_rng()"),
               ("sqm/mpc/protocols/flp.py", "rng = np.random.default_rng(20261)")}
    found = []
    paths = sorted((ROOT / "sqm" / "mechanism").glob("*.py")) + sorted((ROOT / "sqm" / "mpc").rglob("*.py"))
    assert len(paths) > 40  # the two rooms are read
    for path in paths:
        for line in path.read_text().splitlines():
            if re.search(r"default_rng\(|RandomState\(|PCG64\(|Philox\(|\bimport random\b", line):
                rel = str(path.relative_to(ROOT))
                if not any(rel == f and key in line for f, key in allowed):
                    found.append(f"{rel}: {line.strip()}")
    assert found == []


# ----- Shamir shares -------------------------------------------------------------------------------
def _bin(values, p: int, bins: int) -> np.ndarray:
    return (np.asarray(values).astype(object) * bins // p).astype(np.int64)


def _bin_probs(p: int, bins: int) -> np.ndarray:
    """P(bin k) for a uniform value of [0, p): bin k holds v with ceil(k p / bins) <= v < ceil((k + 1) p / bins)."""
    edges = [-(-k * p // bins) for k in range(bins + 1)]
    return np.diff(np.array(edges, dtype=object)).astype(np.float64) / p


def _uniform_pvalue(values, p: int, bins: int) -> float:
    counts = np.bincount(_bin(values, p, bins), minlength=bins)
    return float(chisquare(counts, counts.sum() * _bin_probs(p, bins)).pvalue)


@pytest.mark.parametrize("p_bits", [8, 61])
def test_shamir_shares_of_a_fixed_secret_are_uniform(p_bits):
    """20,000 sharings (M = 5, t = 2) of one secret: each party's share, and any t parties' shares jointly,
    are uniform mod p (chi-square over 64 bins, 16 x 16 for pairs, rejected below p-value 1e-4)."""
    p = prime_below(p_bits)
    M, t, trials = 5, 2, 20_000
    for secret in (0, p - 1, p // 3):
        sh = shamir.share(np.full(trials, secret, np.int64), M, t, p, secure_generator(1000 + secret % 997))
        assert np.all(shamir.reconstruct(sh[:t + 1], [1, 2, 3], p) == secret)  # t + 1 shares do determine it
        for i in range(M):
            assert _uniform_pvalue(sh[i], p, 64) > ALPHA, (secret, i)
        for i, j in ((0, 1), (1, 4), (2, 3)):  # t = 2 shares together
            counts = np.bincount(_bin(sh[i], p, 16) * 16 + _bin(sh[j], p, 16), minlength=256)
            expected = trials * np.outer(_bin_probs(p, 16), _bin_probs(p, 16)).reshape(-1)
            assert chisquare(counts, expected).pvalue > ALPHA, (secret, i, j)
    # the same test does catch non-uniform shares: coefficients from [0, p/4) shift the first share
    biased = shamir.share(np.full(trials, 0, np.int64), M, t, p, _QuarterRange(secure_generator(1)))
    assert _uniform_pvalue(biased[0], p, 64) < ALPHA


class _QuarterRange:
    """A broken share generator (coefficients only in [0, p/4)): the control of the uniformity test."""

    def __init__(self, rng):
        self.rng = rng

    def integers(self, lo, hi, size=None, dtype=np.int64):
        return self.rng.integers(lo, max(lo + 1, hi // 4), size=size, dtype=dtype)


@pytest.mark.parametrize("p_bits", [13, 40, 61])
def test_field_stream_is_the_aes256_ctr_keystream_masked_and_uniform(p_bits):
    """A seed's expansion (a seeded party's share): the AES-256-CTR keystream of the key (nonce 0), each 8-byte
    little-endian word masked to p's bit length, words >= p replaced in order by the next ones below p; uniform
    mod p (chi-square over 64 bins of 200,000 draws, rejected below p-value 1e-4), the same array for the same key
    in any shape, another for another key."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    p = prime_below(p_bits)
    key = hashlib.sha256(b"field stream %d" % p_bits).digest()
    v = randomness.field_stream(key, (200_000,), p)
    assert v.dtype == np.int64 and v.min() >= 0 and v.max() < p
    assert _uniform_pvalue(v, p, 64) > ALPHA
    assert np.array_equal(randomness.field_stream(key, (400, 500), p).reshape(-1), v)
    assert not np.array_equal(randomness.field_stream(bytes(32), (200_000,), p), v)
    # the reference: the keystream's first 200,000 words, masked; those >= p replaced in order by the words after
    # them that are below p
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(8 * 300_000))
    words = (np.frombuffer(stream, dtype="<u8") & np.uint64((1 << p.bit_length()) - 1)).astype(np.int64)
    want, rest = words[:200_000].copy(), words[200_000:]
    bad = np.flatnonzero(want >= p)
    want[bad] = rest[rest < p][:bad.size]
    assert (p_bits != 13) or bad.size > 0  # the 13-bit field does take the replacement path
    assert np.array_equal(v, want)


def test_field_stream_refuses_a_bad_key_or_field():
    for key in (b"short", "x" * 32, bytes(31)):
        with pytest.raises(UsageError, match="32 bytes"):
            randomness.field_stream(key, (3,), 101)
    for p in (1, 1 << 63):
        with pytest.raises(UsageError, match="2 <= p < 2\\^63"):
            randomness.field_stream(bytes(32), (3,), p)
    assert randomness.field_stream(bytes(32), (0,), 101).shape == (0,)


# ----- per-party seeds -----------------------------------------------------------------------------
def _entropy_bytes(ss: np.random.SeedSequence) -> bytes:
    e = int(ss.entropy)
    return e.to_bytes(max(1, (e.bit_length() + 7) // 8), "big")


def test_party_seeds_are_hmac_derived_and_reveal_neither_root_nor_each_other():
    root = (1 << 127) + 0xC0FFEE  # 16 bytes, so "contains the root" is a meaningful byte search
    seeds = spawn_seeds(root, 4)  # 0: the server, 1..3: clients
    key = root.to_bytes(16, "big")
    for i, ss in enumerate(seeds):
        want = int.from_bytes(hmac.new(key, f"party {i}".encode(), hashlib.sha256).digest(), "big")
        assert ss.entropy == want == derive_seed(root, f"party {i}")
        assert ss.entropy != root and key not in _entropy_bytes(ss)
    server = seeds[0]
    assert server.entropy != root  # numpy's SeedSequence(root).spawn() children all carry entropy == root
    assert np.random.SeedSequence(root).spawn(4)[0].entropy == root
    for client in seeds[1:]:
        assert client.entropy != server.entropy
        assert _entropy_bytes(client) not in _entropy_bytes(server)
        assert _entropy_bytes(server) not in _entropy_bytes(client)
    assert len({ss.entropy for ss in seeds}) == 4
    # deterministic, prefix-stable, and the same from an int and from a bare SeedSequence of it
    assert [s.entropy for s in spawn_seeds(root, 4)] == [s.entropy for s in seeds]
    assert [s.entropy for s in spawn_seeds(root, 2)] == [s.entropy for s in seeds[:2]]
    assert [s.entropy for s in spawn_seeds(np.random.SeedSequence(root), 4)] == [s.entropy for s in seeds]


def test_server_seed_does_not_reproduce_a_client_noise():
    """The issue's attack: the server, holding its own seed, tries to regenerate a client's noise share."""
    seeds = spawn_seeds(1, 3)
    block = np.random.default_rng(2).random((40, 3)) / 4
    truth = [QuantizingClient(block, 2.0**12, 1.0, 500.0, 9, s)() for s in seeds[1:]]
    attempts = [seeds[0], *seeds[0].spawn(4), np.random.SeedSequence(seeds[0].entropy)]
    for guess in attempts:
        x_g, z_g = QuantizingClient(block, 2.0**12, 1.0, 500.0, 9, guess)()
        for x_c, z_c in truth:
            assert not np.array_equal(z_g, z_c) and not np.array_equal(x_g, x_c)
    # whereas the client's own seed does reproduce it (the test would notice a no-op)
    x1, z1 = QuantizingClient(block, 2.0**12, 1.0, 500.0, 9, spawn_seeds(1, 3)[1])()
    assert np.array_equal(z1, truth[0][1]) and np.array_equal(x1, truth[0][0])


def test_party_seeds_from_a_spawned_sequence_and_from_os_entropy():
    child_a, child_b = np.random.SeedSequence(5).spawn(2)  # e.g. one run of a benchmark
    sa, sb = spawn_seeds(child_a, 3), spawn_seeds(child_b, 3)
    assert [s.entropy for s in sa] == [s.entropy for s in spawn_seeds(child_a, 3)]
    assert not {s.entropy for s in sa} & {s.entropy for s in sb}
    assert all(s.entropy not in (5, child_a.entropy) for s in sa)
    fresh, again = spawn_seeds(None, 3), spawn_seeds(None, 3)
    assert all(isinstance(s, np.random.SeedSequence) for s in fresh)
    assert len({s.entropy for s in fresh + again}) == 6  # each party its own 256 bits of OS entropy
    assert spawn_seeds(None, 0) == [] and len(spawn_seeds(3, 0)) == 0
    for bad in (-1, 1.5, "7", True):
        with pytest.raises(ValueError):
            spawn_seeds(bad, 2)


def test_seeded_mechanism_reproduces_and_each_party_uses_its_derived_seed():
    X = np.random.default_rng(4).random((60, 4)) / 4
    data = VerticalData.split(X, 2)
    a = SQM(covariance(4), 2.0**8, mu=50.0, seed=11).run(data)
    b = SQM(covariance(4), 2.0**8, mu=50.0, seed=11).run(data)
    c = SQM(covariance(4), 2.0**8, mu=50.0, seed=12).run(data)
    assert list(a.raw) == list(b.raw) and list(a.raw) != list(c.raw)
    # client j's program ran on spawn_seeds(11, 3)[j] (entry 0 is the server's): redo it by hand
    bounds = party_norm_bounds(1.0, data.col_counts)
    outs = [QuantizingClient(blk, 2.0**8, float(bd), a.report.mu / 2, 16, s)()
            for blk, bd, s in zip(data.blocks, bounds, spawn_seeds(11, 3)[1:], strict=False)]
    Xq = np.hstack([x for x, _ in outs]).astype(object)
    noise = sum(z.astype(object) for _, z in outs)
    assert list(a.raw) == list(Xq.T.dot(Xq).reshape(-1) + noise)


# ----- the benchmark-only PCG64 path (python -m bench bgw-cost --compare-rng) ------------------------------
def test_bench_compare_rng_runs_both_generators_through_real_parties():
    from bench.bgw_cost import PCG64Backend, print_table, run
    from sqm.mpc.protocols.backend import PlainBackend
    from sqm.mpc.protocols.mpyc_backend import MPyCBackend

    with pytest.raises(ValueError, match="benchmark only"):
        MPyCBackend(insecure_share_rng="mt19937")

    class PlainPCG64(PlainBackend):  # the simulation of the benchmark-only path
        insecure_share_rng = "pcg64"

    data = VerticalData.split(np.random.default_rng(5).random((40, 4)) / 4, 2)
    assert PCG64Backend().insecure_share_rng == "pcg64"  # the bench's real parties: run below, in run()
    pcg = SQM(covariance(4), 2.0**8, mu=50.0, backend=PlainPCG64(), seed=3).run(data)
    assert list(pcg.raw) != list(SQM(covariance(4), 2.0**8, mu=50.0, seed=3).run(data).raw)  # AES-CTR by default

    rep = run(rows=200, cols=4, gammas=[64.0], progress=False, compare_rng=True)
    (row,) = rep["rows"]
    assert row["rng"] == "aes_ctr" and row["seconds"] > 0 and row["pcg64_seconds"] > 0
    assert row["rng_time_ratio"] == pytest.approx(row["seconds"] / row["pcg64_seconds"])
    assert row["party_cpu_seconds"] > 0 and row["pcg64_party_cpu_seconds"] > 0
    assert row["rng_cpu_ratio"] == pytest.approx(row["party_cpu_seconds"] / row["pcg64_party_cpu_seconds"])
    assert rep["rng_time_ratio_max"] == row["rng_time_ratio"] and rep["rng_ratio_target"] == 1.25
    mb = rep["rng_microbench"]
    assert mb["elements"] == 800 and min(v for k, v in mb.items() if k.endswith("_seconds")) > 0
    print_table(rep)
