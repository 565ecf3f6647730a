"""Verified noise (:mod:`sqm.mpc.protocols.addend_check`, on with ``verify_inputs``): each client's noise share is the
exact Skellam draw from a key of committed randomness, checked on shares by the next client.  Checked: the check's
algebra on shares, the law and its keys, the verifiers, the privacy report's accounting, the protocol in process
(every party names a client that skips its noise, withholds or alters its seed), and through real party processes
the same three deviations named with nothing released, and an honest job's exact relation to the unverified one."""
from __future__ import annotations

import numpy as np
import pytest

from sqm.mechanism.skellam import SkellamAddend, skellam
from sqm.mpc.protocols import addend_check as ac
from sqm.mpc.shares import shamir
from sqm.mpc.shares.randomness import secure_generator

P = 2 ** 61 - 1


def _shared(v, M=3, seed=0):
    t = (M - 1) // 2
    return shamir.share(np.asarray(v, dtype=np.int64) % P, M, t, P, secure_generator(seed)), t


@pytest.mark.parametrize("M", [3, 4, 5])
def test_the_difference_opens_to_zero_for_the_same_addend_and_not_for_another(M):
    """On shares: d = sum rho (Z - Z') opens to 0 when both sharings hold the same addend, to its value otherwise;
    any single entry changed (a skipped share: all zeros) opens non-zero."""
    z = skellam(1e4, 20, 1)
    rho = ac.weights(b"\x01" * 32, 1, 20, P)
    for other, want_zero in ((z, True), (np.zeros_like(z), False), (z + np.eye(20, dtype=np.int64)[7], False)):
        a, t = _shared(z, M, 1)
        b, _ = _shared(other, M, 2)
        d = np.array([[ac.difference(a[j], b[j], rho, P)] for j in range(1, M)], dtype=np.int64)  # all but party 0
        xs = list(range(2, M + 1))
        opened = int(shamir.reconstruct(d, xs, P)[0])
        assert opened == ac.difference(z % P, np.asarray(other) % P, rho, P)
        assert (opened == 0) == want_zero


def test_the_law_is_the_exact_sampler_on_the_keys_stream():
    law = SkellamAddend(37.5, 1000)
    key = ac.addend_key(b"c" * 32, 2, b"s" * 32)
    assert np.array_equal(ac.draw(law, key), skellam(37.5, 1000, secure_generator(int.from_bytes(key, "little"))))
    # a fixed set of keys: mean 0, variance 2 mu (200 x 1000 draws; 5 standard errors)
    draws = np.concatenate([ac.draw(law, ac.addend_key(bytes([k]) * 32, 1, b"s" * 32)) for k in range(200)])
    assert abs(draws.mean()) < 5 * np.sqrt(75 / draws.size)
    assert draws.var() == pytest.approx(75.0, rel=0.02)


def test_the_key_depends_on_the_coin_the_client_and_the_seed():
    keys = {ac.addend_key(c, k, s) for c in (b"a" * 32, b"b" * 32) for k in (1, 2) for s in (b"x" * 32, b"y" * 32)}
    assert len(keys) == 8
    assert ac.commit_seed(b"x" * 32) != ac.commit_seed(b"y" * 32)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_every_client_is_verified_by_exactly_one_other_client(n):
    clients = list(range(1, n + 1))
    vs = [ac.verifier(c, clients) for c in clients]
    assert sorted(vs) == clients and all(v != c for v, c in zip(vs, clients, strict=True)) and 0 not in vs


def test_the_report_accounts_for_the_share_each_verifier_learns():
    from sqm.mechanism import accounting
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM, verified_noise_left
    from sqm.mechanism.vertical import VerticalData

    def report(n, k, verify):
        data = VerticalData([np.zeros((5, 1))] * n)
        return SQM(covariance(n), 64.0, epsilon=1.0, robust_noise=k, verify_inputs=verify).plan(data)[1]

    for n, k in ((3, 0), (4, 0), (3, 1), (4, 2)):
        plain, checked = report(n, k, False), report(n, k, True)
        assert checked.mu == plain.mu and checked.epsilon_server == plain.epsilon_server  # the server sees no share
        left = plain.mu * (n - 2) / (n - k)
        assert verified_noise_left(plain.mu, n, k) == pytest.approx(left)
        assert checked.epsilon_client == pytest.approx(accounting.client_epsilon(
            2 * left, 1e-5, plain.l1_sensitivity, plain.l2_sensitivity, 2), rel=1e-12)
        # the price, never hidden; with robust noise a withholding client is caught, so no share is assumed missing
        assert checked.epsilon_client > plain.epsilon_client if k == 0 else \
            checked.epsilon_client <= plain.epsilon_client * (1 + 1e-12)
        assert f"{(n - 2) / (n - k):.4g} of mu left" in checked.notes
    # robust noise K = 1 pays it back: the same client-observed epsilon as robust noise alone
    assert report(3, 1, True).epsilon_client == pytest.approx(report(3, 1, False).epsilon_client, rel=1e-12)
    two = report(2, 0, True)
    assert two.epsilon_client is None and "no client-observed guarantee" in two.notes


# ----- the protocol in process (real exchanges over in-memory mailboxes) -----------------------------------------

class _Party:
    """A party running the check alone; ``mode`` makes it the deviating client."""

    def __init__(self, law, mode=None):
        self.law, self.mode = law, mode

    async def run(self, ctx):
        check = ac.AddendCheck(ctx, P, self.law)
        if self.mode == "skip":
            check.own_addend = lambda key: np.zeros(check.size, dtype=np.int64)
        elif self.mode == "withhold":
            check.seed_for_verifier = lambda seed: b""
        elif self.mode == "wrong-seed":
            check.seed_for_verifier = lambda seed: bytes(32)
        own = await check.run()
        return {"own": own, "total": check.total}


@pytest.mark.parametrize("mode", ["skip", "withhold", "wrong-seed"])
@pytest.mark.parametrize("n", [2, 3])
def test_every_party_names_the_deviating_client(mode, n):
    from sqm.mpc.net.launch import MPCError
    from sqm.mpc.protocols.inprocess import run_in_process

    law = SkellamAddend(500.0, 6)
    programs = [_Party(law)] + [_Party(law, mode if c == 2 else None) for c in range(1, n + 1)]
    with pytest.raises(MPCError) as err:
        run_in_process(programs, timeout=30, min_clients=2)
    msg = str(err.value)
    assert "the addend check of client 2 (checked by" in msg, msg
    assert "client 1 (checked by" not in msg and "client 3 (checked by" not in msg


@pytest.mark.parametrize("n", [2, 3])
def test_honest_clients_pass_and_the_shares_sum_their_addends(n):
    from sqm.mpc.protocols.inprocess import run_in_process

    law = SkellamAddend(500.0, 6)
    recs = run_in_process([_Party(law) for _ in range(n + 1)], timeout=30, min_clients=2)
    owns = [r["result"]["own"] for r in recs[1:]]
    assert recs[0]["result"]["own"] is None and all(o.shape == (6,) and np.any(o != 0) for o in owns)
    totals = np.stack([r["result"]["total"] for r in recs])
    xs = list(range(1, n + 2))
    assert shamir.consistent(totals, xs, n // 2, P)
    got = shamir.reconstruct(totals, xs, P)
    want = sum(owns) % P
    assert np.array_equal(got, want)


def test_a_client_cannot_cancel_its_checked_noise_through_its_summand(monkeypatch):
    """The real protocol over in-memory mailboxes: client 1 shares its checked noise Z_1 and -Z_1 as its addend
    summand.  The release less the checked shares is the same integers as an honest job's (same seeds): the
    evaluation adds the checked sharings and ignores the summand."""
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.mechanism.vertical import VerticalData
    from sqm.mpc.protocols import evaluation
    from sqm.mpc.protocols.inprocess import run_in_process

    drawn: dict[int, np.ndarray] = {}
    attack = {"on": False}
    own, summands = ac.AddendCheck.own_addend, evaluation._Feed.summands

    def recorded(self, key):
        drawn[self.ctx.pid] = z = own(self, key)
        return z

    def cancelling(self):
        out = summands(self)
        if self.first_client and attack["on"]:
            out[0] = (-drawn[1]).astype(object)
        return out

    monkeypatch.setattr(ac.AddendCheck, "own_addend", recorded)
    monkeypatch.setattr(evaluation._Feed, "summands", cancelling)
    data = VerticalData(list(_data()))
    less = []
    for on in (False, True):
        attack["on"] = on
        programs, _ = SQM(covariance(5), 1024.0, epsilon=4.0, seed=3, verify_inputs=True).programs(data)
        raw = run_in_process(programs, timeout=60, min_clients=2, ideal=False)[0]["result"].raw
        less.append([int(v) for v in np.asarray(raw, dtype=object) - (drawn[1] + drawn[2]).astype(object)])
    assert less[0] == less[1]


# ----- through real party processes -----------------------------------------------------------------------------

def _data():
    rng = np.random.default_rng(4)
    return (rng.normal(size=(30, 2)) * 0.2, rng.normal(size=(30, 3)) * 0.2)


def _programs(verify: bool):
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM
    from sqm.mechanism.vertical import VerticalData

    return SQM(covariance(5), 1024.0, epsilon=4.0, backend="mpyc", seed=3,
               verify_inputs=verify).programs(VerticalData(list(_data())))[0]


def _run(programs):
    from sqm.mpc.net.launch import run_parties

    return run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)


@pytest.mark.slow
def test_a_client_skipping_its_noise_is_named_and_nothing_is_released():
    """Client 2 shares zeros for its noise: without verification the job releases (nothing sees it); with
    ``verify_inputs`` every party names client 2 and the server receives nothing."""
    from bench.faults import SkipVerifiedNoise, WithholdNoise
    from sqm.mpc.net.launch import MPCError

    programs = _programs(False)
    programs[2] = WithholdNoise(programs[2])
    assert _run(programs)[0]["result"].raw is not None
    programs = _programs(True)
    programs[2] = SkipVerifiedNoise(programs[2], "skip")
    with pytest.raises(MPCError) as err:
        _run(programs)
    _named_by_everyone(err.value)


def _named_by_everyone(err):
    msg = str(err)
    assert "the addend check of client 2 (checked by client 1) failed" in msg, msg
    assert "client 1 (checked by" not in msg
    for pid in range(3):  # each party's own last words name client 2
        assert "the addend check of client 2" in err.messages.get(pid, ""), (pid, err.messages)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["withhold", "wrong-seed"])
def test_a_withheld_or_wrong_seed_reveal_names_the_client(mode):
    from bench.faults import SkipVerifiedNoise
    from sqm.mpc.net.launch import MPCError

    programs = _programs(True)
    programs[2] = SkipVerifiedNoise(programs[2], mode)
    with pytest.raises(MPCError) as err:
        _run(programs)
    _named_by_everyone(err.value)


@pytest.mark.slow
def test_an_honest_verified_job_releases_the_unverified_integers_with_its_own_noise(tmp_path):
    """The same job and seeds with and without verification: the data part is the same integers and only the noise
    differs (verified, each client's share is drawn from its committed key instead of its own stream), so exactly
    raw_verified - raw_unverified = sum of the verified shares - sum of the unverified shares, each client's share
    as it recorded it."""
    from bench.faults import RecordNoise

    out = {}
    for verify in (False, True):
        programs = _programs(verify)
        paths = [str(tmp_path / f"noise-{verify}-{c}.npy") for c in (1, 2)]
        programs[1:] = [RecordNoise(p, path) for p, path in zip(programs[1:], paths, strict=True)]
        raw = np.array([int(v) for v in np.asarray(_run(programs)[0]["result"].raw).reshape(-1)], dtype=object)
        noise = sum(np.load(path).astype(object) for path in paths)
        out[verify] = (raw, noise)
    (raw_u, z_u), (raw_v, z_v) = out[False], out[True]
    assert list(raw_v - raw_u) == list(z_v - z_u)
    assert list(z_v) != list(z_u)  # the verified draw is a different one
