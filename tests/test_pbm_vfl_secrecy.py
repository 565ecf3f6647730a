"""PBM-VFL secrecy: pairwise X25519 mask keys among the clients only, what the server receives (the typed
frames of the party programs, run in process: the same frames, validated the same way, as between processes),
uniform masked values, exact masked sums, each party's own seed, refusal of one-client jobs."""
import json
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sqm.apps.pbm_vfl.trainer as trainer_module  # noqa: E402
import sqm.mpc.protocols.masked_sum as ms  # noqa: E402
from sqm.apps.pbm_vfl import PBMVFLProgram, VFLConfig, load_split, train_vfl  # noqa: E402
from sqm.apps.pbm_vfl.party import ClientParty  # noqa: E402
from sqm.apps.pbm_vfl.seeds import public_batch_seed  # noqa: E402
from sqm.mpc.protocols.masked_sum import MaskedSum, mask_bits, mask_key, mask_keypair  # noqa: E402
from sqm.mpc.net.abort import ProtocolError  # noqa: E402
from sqm.mpc.shares.randomness import is_secure  # noqa: E402
from sqm.apps.pbm_vfl.sum_exchange import SumExchange  # noqa: E402
from sqm.mechanism.rng import spawn_seeds  # noqa: E402

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
    """Test-only party program: logs (sender, step, type/shape, values) of everything this party RECEIVES (the
    decoded, validated frames) and the mask keys it derives; otherwise the real program."""

    made = []  # the programs built in the test
    logs = {}  # pid -> list of entries

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        type(self).made.append(self)

    async def run(self, ctx):
        log = type(self).logs.setdefault(ctx.pid, []).append
        orig_send_recv = ctx.send_recv

        async def send_recv(outgoing, senders, expect, step="message"):
            senders = list(senders)
            got = await orig_send_recv(outgoing, senders, expect, step)
            log({"call": step, "senders": senders})
            for s, g in zip(senders, got, strict=False):
                log({"sender": s, "step": step, **json.loads(json.dumps(_jsonable(g)))})
            return got

        ctx.send_recv = send_recv
        return await super().run(ctx)


def _tiny(clients):
    btr, bte, ytr, yte, nc = load_split("digits", clients)
    return [b[:100] for b in btr], [b[:40] for b in bte], ytr[:100], yte[:40], nc


@pytest.fixture(scope="module")
def tiny():
    return _tiny(4)


def _recorded_masked_run(tiny, monkeypatch, seed):
    monkeypatch.setattr(trainer_module, "PBMVFLProgram", RecordingProgram)
    RecordingProgram.made, RecordingProgram.logs = [], {}
    keys = {}
    orig = ms.mask_key

    def recording_mask_key(sk, me, my_pk, other, their_pk):
        keys[me, other] = orig(sk, me, my_pk, other, their_pk)
        return keys[me, other]

    monkeypatch.setattr(ms, "mask_key", recording_mask_key)
    btr, bte, ytr, yte, nc = tiny
    cfg = VFLConfig(epochs=1, n_classes=nc, b=16, beta=0.15, batch_size=50, hidden=16)
    res = train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=seed, secure_sum="masked")
    logs = [RecordingProgram.logs[pid] for pid in range(len(btr) + 1)]
    monkeypatch.undo()
    return res, logs, keys, list(RecordingProgram.made)


def test_masked_sum_server_view_keys_and_seeds(tiny, monkeypatch):
    """Two runs of Protocol 0 with the same user seed: exact sums equal to the BGW sum's; the server receives
    nothing during key setup and only masked values (uniform mod 2^k) afterwards; pairwise keys agree at both
    ends and are fresh per run; each party's program holds only its own seed.  (The second run has two
    clients, to stay small: clients 1 and 2 hold the same seeds as in the first, spawn_seeds being per index,
    so keys derived from seeds would repeat there.)"""
    from scipy.stats import chisquare

    btr, bte, ytr, yte, nc = tiny
    M = len(btr)
    k = mask_bits(16 * M)
    assert k == 7  # 2^7 = 128 > b M = 64
    cfg = VFLConfig(epochs=1, n_classes=nc, b=16, beta=0.15, batch_size=50, hidden=16)
    bgw = train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=12)
    res_a, logs_a, keys_a, progs = _recorded_masked_run(tiny, monkeypatch, 12)
    two = _tiny(2)
    res_b, logs_b, keys_b, _ = _recorded_masked_run(two, monkeypatch, 12)

    # the masked sum is exact: same released sums and metrics as the BGW sum
    assert res_a.sum_digest == bgw.sum_digest and res_a.history == bgw.history
    assert res_b.sum_digest == train_vfl(*two[:4], cfg, "plain", seed=12).sum_digest

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
    assert len(masked) == M * (bgw.iterations + 1)
    assert all(e["dtype"] == "uint8" and max(e["values"]) < 2 ** k for e in masked)

    # uniform modulo 2^k: the values of any M - 1 clients are jointly uniform (the M-th is fixed by the sum)
    vals = np.concatenate([e["values"] for e in masked if e["sender"] != M])
    assert vals.size == (M - 1) * (bgw.records + 40) * 16  # 6720 values, 52.5 expected per bin
    p_masked = chisquare(np.bincount(vals, minlength=2 ** k)).pvalue
    assert p_masked > ALPHA, p_masked
    # the same test rejects what the masks hide: the sums the server decodes are far from uniform
    sums = np.sum([np.array(e["values"]) for e in masked[:M]], axis=0) % 2 ** k
    assert chisquare(np.bincount(sums, minlength=2 ** k)).pvalue < 1e-100

    # clients: each received one 32-byte public key from every other client, and derived one key per pair;
    # the server derived none
    for logs, keys, m in ((logs_a, keys_a, M), (logs_b, keys_b, 2)):
        assert [e for e in logs[0] if e.get("call") == "mask public keys"][0]["senders"] == []
        assert not any(me == 0 for me, _ in keys)
        for pid in range(1, m + 1):
            pks = [e for e in logs[pid] if e.get("step") == "mask public keys"]
            assert sorted(e["sender"] for e in pks) == [j for j in range(1, m + 1) if j != pid]
            assert all(e["type"] == "bytes" and e["len"] == 32 for e in pks)
        pairs = [(i, j) for i in range(1, m + 1) for j in range(1, m + 1) if i < j]
        assert sorted(keys) == sorted(pairs + [(j, i) for i, j in pairs])
        assert all(keys[i, j] == keys[j, i] for i, j in pairs)  # both ends agree
        assert len({keys[i, j] for i, j in pairs}) == len(pairs)  # one key per pair
    assert keys_a[1, 2] != keys_b[1, 2]  # fresh per run, with the same user seed

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
    u = ms.prg(keys[1, 2], 1, size, k)
    assert u.min() >= 0 and u.max() < 2 ** k
    assert chisquare(np.bincount(u, minlength=2 ** k)).pvalue > 1e-3  # fixed keys: a fixed p-value
    assert not np.array_equal(u, ms.prg(keys[1, 2], 2, size, k))  # a new stream every round
    q = np.random.default_rng(0).integers(0, 17, size=(M, size))
    y = q.copy()
    for (i, j), key in keys.items():
        m = ms.prg(key, 5, size, k)
        y[i - 1] += m
        y[j - 1] -= m
    assert np.array_equal(np.sum(y % 2 ** k, axis=0) % 2 ** k, q.sum(axis=0))


class _FakeCtx:
    def __init__(self, M):
        self.pid, self.M, self.clients, self.is_server = 1, M + 1, list(range(1, M + 1)), False


def test_one_client_is_refused(tiny):
    btr, bte, ytr, yte, nc = tiny
    cfg = VFLConfig(epochs=1, n_classes=nc, batch_size=50)
    for backend, mode in (("mpyc", "masked"), ("mpyc", "bgw"), ("plain", "bgw")):
        with pytest.raises(ValueError, match="at least two clients.*in the clear"):
            train_vfl(btr[:1], bte[:1], ytr, yte, cfg, backend, seed=0, secure_sum=mode)
    for mode in ("masked", "bgw"):  # the party program refuses too, naming the reason to the other parties
        with pytest.raises(ProtocolError, match="party 1: PBM-VFL's secure sum needs at least two clients"):
            SumExchange(_FakeCtx(1), mode, 16, 16)
    with pytest.raises(ProtocolError, match="party 1: a masked sum needs at least two clients"):
        MaskedSum(_FakeCtx(1), 16)
    # the baselines are not secure protocols: one client is fine
    from dataclasses import replace
    r = train_vfl([btr[0][:50]], [bte[0][:20]], ytr[:50], yte[:20], replace(cfg, method="npq"), "plain", seed=0)
    assert r.iterations == 1


def test_parties_draw_secrets_from_their_own_cryptographic_streams(tiny):
    """Each epoch's noise stream and each step's torch seed are AES-CTR / SeedSequence functions of the party's
    own seed and the epoch (so a resumed run draws what an uninterrupted one would), differ between epochs and
    parties, and are fresh without a seed; the default models are initialised from the party's own seed."""
    from sqm.apps.pbm_vfl.modules import default_client_model
    from sqm.apps.pbm_vfl.seeds import party_stream, torch_step_seed

    btr, bte, ytr, yte, nc = tiny
    cfg = VFLConfig(epochs=1, n_classes=nc)
    s = spawn_seeds(3, 3)

    def client(seed):
        return ClientParty(cfg, 4, default_client_model(cfg, 16, seed), None, btr[0], bte[0], seed, 0)

    a, b, fresh = client(s[1]), client(s[1]), client(None)
    for p in (a, b, fresh):
        p.begin(1)
    assert is_secure(a.rng) and is_secure(fresh.rng)
    x = a.rng.random(8)
    assert np.array_equal(x, b.rng.random(8))  # a function of the party's own seed
    assert not np.array_equal(x, fresh.rng.random(8))
    draws = {(i, e): party_stream(s[i], e).random(4).tobytes() for i in (1, 2) for e in (0, 1, 2)}
    assert len(set(draws.values())) == 6  # every (party, epoch) its own stream
    assert party_stream(s[1], 2).random(4).tobytes() == draws[1, 2]  # and the same again (a resumed run)
    assert party_stream(None, 2).random(4).tobytes() != party_stream(None, 2).random(4).tobytes()
    steps = {torch_step_seed(s[1], e, k, t) for e in (1, 2) for k in (0, 1) for t in (True, False)}
    assert len(steps) == 8 and torch_step_seed(s[1], 1, 0) == torch_step_seed(s[1], 1, 0)
    assert torch_step_seed(None, 1, 0) != torch_step_seed(None, 1, 0)
    w = [next(p.model.parameters()).detach().numpy().copy() for p in (a, b, fresh)]
    assert np.array_equal(w[0], w[1]) and not np.array_equal(w[0], w[2])
    # the public batch seed: deterministic for a seeded experiment, fresh otherwise, and no party's seed
    assert public_batch_seed(12) == public_batch_seed(12) != public_batch_seed(13)
    assert public_batch_seed(None) != public_batch_seed(None)
    assert public_batch_seed(12) not in {int(x.entropy) for x in spawn_seeds(12, 5)} | {12}


def test_cli_records_secure_mode(tmp_path, capsys):
    from sqm.cli.command import parse

    assert parse(["pbm-vfl"]).backend == "mpyc"  # the default runner, as in every command
    for extra, secure in ((["--seed", "1"], False), ([], True)):
        out = tmp_path / f"pbm{secure}.json"
        args = parse(["pbm-vfl", "--epochs", "1", "--hidden", "8", "--embedding-size", "4",
                                  "--device", "cpu", "--backend", "plain", "--json", str(out), *extra]
                                 + ([] if secure else ["--no-baselines", "--save", str(tmp_path / "pbm.pt")]))
        assert args.func(args) == 0
        obj = json.loads(out.read_text())
        if not secure:  # --save: PBM-VFL's checkpoint, tensors and plain types only
            import torch

            ck = torch.load(tmp_path / "pbm.pt", weights_only=True)
            assert ck["epoch"] == 1 and len(ck["clients"]) == 4 and ck["accountant"]["uses"] == 1
            assert ck["clients"][0]["module"]["0.weight"].shape == (8, 16)
        assert obj["secure_mode"] is secure
        text = capsys.readouterr().out
        assert ("EXPERIMENT" in text) is (not secure)
    # the table and the JSON report the paper's LDP and the equal-epsilon one, with their epsilons
    methods = obj["details"]["methods"]  # sqm.cli.output: privacy holds the reports in the methods' order
    assert list(methods) == ["pbm", "npq", "ldp", "ldp_eq"] and len(obj["privacy"]) == len(obj["results"]) == 4
    p = dict(zip(methods, obj["privacy"], strict=False))
    assert p["ldp_eq"]["epsilon_server"] == pytest.approx(p["pbm"]["epsilon_server"])
    assert p["ldp"]["epsilon_server"] < p["pbm"]["epsilon_server"] and p["ldp"]["sigma"] > p["ldp_eq"]["sigma"]
    assert p["npq"]["epsilon_server"] == "inf"  # strict JSON (sqm.mechanism.report.write_json)
    assert "LDP (paper)" in text and "LDP (equal eps)" in text
