"""PBM-VFL secrecy: pairwise X25519 mask keys among the clients only, what the server receives in real party
processes, uniform masked values, exact masked sums, each party's own seed, refusal of one-client jobs."""
import json
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import apps.pbm_vfl as pv  # noqa: E402
from apps.pbm_vfl import (PBMVFLProgram, PartyIO, VFLConfig, load_split, mask_bits, mask_key,  # noqa: E402
                          mask_keypair, public_batch_seed, train_vfl)
from mpc.protocol import ProtocolError  # noqa: E402
from mpc.randomness import is_secure  # noqa: E402
from sqm.rng import spawn_seeds  # noqa: E402

LOG_ENV = "SQM_TEST_PBM_RECORD_DIR"
# chi-square tolerance for masked values drawn from fresh OS-entropy keys (no seed can fix them): a correct
# implementation fails with probability 1e-6; plaintext PBM sums give p-values below 1e-100 (checked below)
ALPHA = 1e-6


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return {"type": "ndarray", "dtype": str(x.dtype), "shape": list(x.shape),
                "values": x.tolist() if x.dtype.kind in "iu" and x.size <= 4096 else None}
    if isinstance(x, bytes):
        return {"type": "bytes", "len": len(x), "hex": x.hex()}
    return {"type": type(x).__name__, "repr": repr(x)[:80]}


class RecordingProgram(PBMVFLProgram):
    """Test-only party program: logs (sender, step, type/shape, values) of everything this party RECEIVES and
    the mask keys it derives, to $SQM_TEST_PBM_RECORD_DIR/party<pid>.jsonl; otherwise the real program."""

    made = []  # the programs built in the test process (class attribute: not pickled)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        type(self).made.append(self)

    async def run(self, ctx):
        path = os.path.join(os.environ[LOG_ENV], f"party{ctx.pid}.jsonl")

        def log(entry):
            with open(path, "a") as f:
                f.write(json.dumps(entry) + "\n")

        orig_send_recv, orig_mask_key = ctx.send_recv, pv.mask_key

        async def send_recv(outgoing, senders, expect, step="message"):
            senders = list(senders)
            got = await orig_send_recv(outgoing, senders, expect, step)
            log({"call": step, "senders": senders})
            for s, g in zip(senders, got):
                log({"sender": s, "step": step, **_jsonable(g)})
            return got

        def recording_mask_key(sk, me, my_pk, other, their_pk):
            key = orig_mask_key(sk, me, my_pk, other, their_pk)
            log({"mask_key": [me, other], "hex": key.hex()})
            return key

        ctx.send_recv = send_recv
        pv.mask_key = recording_mask_key
        return await super().run(ctx)


def _read_logs(folder, M):
    out = []
    for pid in range(M + 1):
        with open(os.path.join(folder, f"party{pid}.jsonl")) as f:
            out.append([json.loads(line) for line in f])
    return out


def _tiny(clients):
    btr, bte, ytr, yte, nc = load_split("digits", clients)
    return [b[:100] for b in btr], [b[:40] for b in bte], ytr[:100], yte[:40], nc


@pytest.fixture(scope="module")
def tiny():
    return _tiny(4)


def _recorded_masked_run(tiny, tmp_path, monkeypatch, name, seed):
    folder = tmp_path / name
    folder.mkdir()
    monkeypatch.setenv(LOG_ENV, str(folder))
    monkeypatch.setattr(pv, "PBMVFLProgram", RecordingProgram)
    RecordingProgram.made = []
    btr, bte, ytr, yte, nc = tiny
    cfg = VFLConfig(epochs=1, n_classes=nc, b=16, beta=0.15, batch_size=50)
    res = train_vfl(btr, bte, ytr, yte, cfg, "mpyc", seed=seed, secure_sum="masked")
    return res, _read_logs(folder, len(btr)), list(RecordingProgram.made)


def test_masked_sum_in_real_processes_server_view_keys_and_seeds(tiny, tmp_path, monkeypatch):
    """Two real runs of Protocol 0 with the same user seed: exact sums equal to the simulation; the server
    receives nothing during key setup and only masked values (uniform mod 2^k) afterwards; pairwise keys agree
    at both ends and are fresh per run; each party's program holds only its own seed.  (The second run has two
    clients, to stay small: clients 1 and 2 hold the same seeds as in the first, spawn_seeds being per index,
    so keys derived from seeds would repeat there.)"""
    from scipy.stats import chisquare

    btr, bte, ytr, yte, nc = tiny
    M = len(btr)
    k = mask_bits(16, M)
    assert k == 7  # 2^7 = 128 > b M = 64
    cfg = VFLConfig(epochs=1, n_classes=nc, b=16, beta=0.15, batch_size=50)
    plain = train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=12)
    res_a, logs_a, progs = _recorded_masked_run(tiny, tmp_path, monkeypatch, "a", 12)
    two = _tiny(2)
    res_b, logs_b, _ = _recorded_masked_run(two, tmp_path, monkeypatch, "b", 12)

    # the masked sum is exact: same released sums and metrics as the simulation
    assert res_a.sum_digest == plain.sum_digest and res_a.history == plain.history
    assert res_b.sum_digest == train_vfl(*two[:4], VFLConfig(epochs=1, n_classes=nc, b=16, beta=0.15, batch_size=50),
                                         "plain", seed=12).sum_digest
    # ~k bits per value: the clients send ceil(k / 8) = 1 byte per masked value plus frame headers
    values = M * (plain.records + 40) * 16
    messages = M * (plain.iterations + 1)
    assert values <= res_a.bytes_detail["sum"] <= values + 400 * messages

    server = logs_a[0]
    # key setup: the server took part in the exchange and received nothing
    setup_calls = [e for e in server if e.get("call") == "mask public keys"]
    assert setup_calls == [{"call": "mask public keys", "senders": []}]
    # everything the server ever received: the batch-order digests, masked values, the empty closing frames
    received = [e for e in server if "sender" in e]
    assert {e["step"] for e in received} == {"agree on mini-batch order of epoch 1", "masked sum", "closing barrier"}
    assert all(e["type"] == "NoneType" for e in received if e["step"] == "closing barrier")
    assert all(e["type"] == "str" for e in received if e["step"].startswith("agree"))
    assert not any(e["type"] == "bytes" for e in received)
    masked = [e for e in received if e["step"] == "masked sum"]
    assert len(masked) == M * (plain.iterations + 1)
    assert all(e["dtype"] == "uint8" and max(e["values"]) < 2 ** k for e in masked)

    # uniform modulo 2^k: the values of any M - 1 clients are jointly uniform (the M-th is fixed by the sum)
    vals = np.concatenate([e["values"] for e in masked if e["sender"] != M])
    assert vals.size == (M - 1) * (plain.records + 40) * 16  # 6720 values, 52.5 expected per bin
    p_masked = chisquare(np.bincount(vals, minlength=2 ** k)).pvalue
    assert p_masked > ALPHA, p_masked
    # the same test rejects what the masks hide: the sums the server decodes are far from uniform
    sums = np.sum([np.array(e["values"]) for e in masked[:M]], axis=0) % 2 ** k
    assert chisquare(np.bincount(sums, minlength=2 ** k)).pvalue < 1e-100

    # clients: each received one 32-byte public key from every other client, and derived one key per pair
    keys = {}
    for run, logs, m in (("a", logs_a, M), ("b", logs_b, 2)):
        assert [e for e in logs[0] if e.get("call") == "mask public keys"][0]["senders"] == []
        assert not any("mask_key" in e for e in logs[0])
        for pid in range(1, m + 1):
            pks = [e for e in logs[pid] if e.get("step") == "mask public keys"]
            assert sorted(e["sender"] for e in pks) == [j for j in range(1, m + 1) if j != pid]
            assert all(e["type"] == "bytes" and e["len"] == 32 for e in pks)
            for e in logs[pid]:
                if "mask_key" in e:
                    keys[(run, *e["mask_key"])] = e["hex"]
        pairs = [(i, j) for i in range(1, m + 1) for j in range(1, m + 1) if i < j]
        assert all(keys[run, i, j] == keys[run, j, i] for i, j in pairs)  # both ends agree
        assert len({keys[run, i, j] for i, j in pairs}) == len(pairs)  # one key per pair
    assert keys["a", 1, 2] != keys["b", 1, 2]  # fresh per run, with the same user seed

    # each party's program holds its own seed only (none of the other parties' seeds, in any form)
    seeds = spawn_seeds(12, M + 1)
    assert len(progs) == M + 1
    for pid, prog in enumerate(progs):
        assert prog.seed.entropy == seeds[pid].entropy
        blob = pickle.dumps(prog, protocol=5)
        for other in range(M + 1):
            if other != pid:
                assert seeds[other].entropy.to_bytes(32, "little") not in blob
    assert len({prog.batch_seed for prog in progs}) == 1 and progs[0].batch_seed == public_batch_seed(12)


def test_pairwise_keys_agree_bind_the_pair_and_are_fresh():
    (a, pa), (b, pb), (c, pc) = mask_keypair(), mask_keypair(), mask_keypair()
    assert len(pa) == len(pb) == 32 and len({pa, pb, pc}) == 3  # fresh from OS entropy
    k_ab = mask_key(a, 1, pa, 2, pb)
    assert len(k_ab) == 32 and k_ab == mask_key(b, 2, pb, 1, pa)  # both ends derive the same key
    assert mask_key(a, 1, pa, 3, pc) == mask_key(c, 3, pc, 1, pa) != k_ab
    # the info string binds the party indices: the same secret under other indices gives another key
    assert mask_key(a, 1, pa, 4, pb) != k_ab and mask_key(a, 2, pa, 3, pb) != k_ab
    with pytest.raises(ProtocolError, match="client 2's X25519 public key is invalid"):
        mask_key(a, 1, pa, 2, bytes(32))  # a low-order point: the shared secret would be all zeros


def test_masks_are_uniform_and_cancel():
    """With fixed keys (deterministic): SHAKE-256 masks are uniform mod 2^k, and the pairwise masks of M
    clients cancel in the sum, so the masked sum of any values is exact."""
    from scipy.stats import chisquare

    k, size, M = 7, 20000, 4
    keys = {(i, j): bytes([i, j]) * 16 for i in range(1, M + 1) for j in range(i + 1, M + 1)}
    u = pv._prg(keys[1, 2], 1, size, k)
    assert u.min() >= 0 and u.max() < 2 ** k
    assert chisquare(np.bincount(u, minlength=2 ** k)).pvalue > 1e-3  # fixed keys: a fixed p-value
    assert not np.array_equal(u, pv._prg(keys[1, 2], 2, size, k))  # a new stream every round
    q = np.random.default_rng(0).integers(0, 17, size=(M, size))
    y = q.copy()
    for (i, j), key in keys.items():
        m = pv._prg(key, 5, size, k)
        y[i - 1] += m
        y[j - 1] -= m
    assert np.array_equal(np.sum(y % 2 ** k, axis=0) % 2 ** k, q.sum(axis=0))


class _FakeCtx:
    def __init__(self, M):
        self.pid, self.M, self.clients = 1, M + 1, list(range(1, M + 1))


def test_one_client_is_refused(tiny):
    btr, bte, ytr, yte, nc = tiny
    cfg = VFLConfig(epochs=1, n_classes=nc, batch_size=50)
    for backend, mode in (("mpyc", "masked"), ("mpyc", "bgw"), ("plain", "bgw")):
        with pytest.raises(ValueError, match="at least two clients.*in the clear"):
            train_vfl(btr[:1], bte[:1], ytr, yte, cfg, backend, seed=0, secure_sum=mode)
    for mode in ("masked", "bgw"):  # the party program refuses too, naming the reason to the other parties
        with pytest.raises(ProtocolError, match="party 1: PBM-VFL's secure sum needs at least two clients"):
            PartyIO(_FakeCtx(1), cfg, 1, mode)
    # the baselines are not secure protocols: one client is fine
    from dataclasses import replace
    r = train_vfl([btr[0][:50]], [bte[0][:20]], ytr[:50], yte[:20], replace(cfg, method="npq"), "plain", seed=0)
    assert r.iterations == 1


def test_parties_draw_secrets_from_their_own_cryptographic_streams(tiny):
    btr, bte, ytr, yte, nc = tiny
    cfg = VFLConfig(epochs=1, n_classes=nc)
    s = spawn_seeds(3, 2)
    a = pv.ClientParty(cfg, 4, btr[0], bte[0], s[1], 0)
    b = pv.ClientParty(cfg, 4, btr[0], bte[0], s[1], 0)
    fresh = pv.ClientParty(cfg, 4, btr[0], bte[0], None, 0)
    assert is_secure(a.rng) and is_secure(fresh.rng)
    x = a.rng.random(8)
    assert np.array_equal(x, b.rng.random(8))  # a function of the party's own seed
    assert not np.array_equal(x, fresh.rng.random(8))
    w = [next(p.model.parameters()).detach().numpy().copy() for p in (a, b, fresh)]
    assert np.array_equal(w[0], w[1]) and not np.array_equal(w[0], w[2])
    # the public batch seed: deterministic for a seeded experiment, fresh otherwise, and no party's seed
    assert public_batch_seed(12) == public_batch_seed(12) != public_batch_seed(13)
    assert public_batch_seed(None) != public_batch_seed(None)
    assert public_batch_seed(12) not in {int(x.entropy) for x in spawn_seeds(12, 5)} | {12}


def test_cli_records_secure_mode(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    pv.register(parser.add_subparsers())
    for extra, secure in ((["--seed", "1"], False), ([], True)):
        out = tmp_path / f"pbm{secure}.json"
        args = parser.parse_args(["pbm-vfl", "--epochs", "1", "--no-baselines", "--hidden", "8",
                                  "--embedding-size", "4", "--device", "cpu", "--json", str(out), *extra])
        assert args.func(args) == 0
        assert json.loads(out.read_text())["secure_mode"] is secure
        text = capsys.readouterr().out
        assert ("EXPERIMENT" in text) is (not secure)
