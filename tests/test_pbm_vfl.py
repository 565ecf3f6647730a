"""PBM-VFL training: real MPyC party processes = the one-process simulation, utility ordering, bad input.
(The masked sum, its keys and what the server receives: tests/test_pbm_vfl_secrecy.py.)"""
import math
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from apps.pbm_vfl import VFLConfig, load_split, model_bits, train_vfl  # noqa: E402
from mpc.launch import MPCError  # noqa: E402
from mpc.secure_sum import secure_sum  # noqa: E402
from sqm import pbm  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    return load_split("digits", 4)


def _tiny(digits, n_train=200, n_test=60):
    btr, bte, ytr, yte, nc = digits
    return [b[:n_train] for b in btr], [b[:n_test] for b in bte], ytr[:n_train], yte[:n_test], nc


def test_secure_sum_of_pbm_vectors_same_in_mpyc_and_plain():
    rng = np.random.default_rng(3)
    b, beta, M = 16, 0.2, 3
    qs = [pbm.encode(rng.uniform(-1, 1, size=40), b, beta, rng=rng).q for _ in range(M)]
    plain = secure_sum(qs, b * M, "plain").values
    real = secure_sum(qs, b * M, "mpyc").values
    assert [int(v) for v in plain] == [int(v) for v in real] == [int(v) for v in np.sum(qs, axis=0)]


def test_mpyc_training_equals_plain_simulation(digits):
    """Same seeds: the party processes release exactly the same sums and reach the same metrics."""
    btr, bte, ytr, yte, nc = _tiny(digits)
    cfg = VFLConfig(epochs=2, n_classes=nc, b=16, beta=0.15, batch_size=50)
    plain = train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=11)
    real = train_vfl(btr, bte, ytr, yte, cfg, "mpyc", seed=11)
    assert real.sum_digest == plain.sum_digest
    assert real.history == plain.history
    assert real.iterations == plain.iterations == 2 * math.ceil(200 / 50)
    # the runtime measured every message; secure sums carry most of them
    assert real.bytes_sent > 0 and real.bytes_detail["sum"] > real.bytes_detail["grad"] > 0
    assert plain.bytes_sent is None


def test_short_digits_run_beats_chance_and_orders_npq_pbm_ldp(digits):
    btr, bte, ytr, yte, nc = digits
    cfg = VFLConfig(epochs=3, n_classes=nc, b=16, beta=0.15)
    res = {m: train_vfl(btr, bte, ytr, yte, replace(cfg, method=m), "plain", seed=2024) for m in ("pbm", "npq", "ldp")}
    mean = {m: float(np.mean([h["test_accuracy"] for h in r.history])) for m, r in res.items()}
    assert res["pbm"].accuracy > 0.6  # chance is 0.1 on 10 classes
    assert mean["npq"] >= mean["pbm"] >= mean["ldp"], mean
    assert res["npq"].accuracy > res["ldp"].accuracy + 0.2
    # communication: the paper's model T B M P (log2(b M) + F)
    assert res["pbm"].records == 3 * len(ytr)
    assert res["pbm"].bits_model == pytest.approx(3 * len(ytr) * 4 * 16 * (math.log2(16 * 4) + 32))
    assert res["npq"].bits_model == model_bits(3 * len(ytr), 4, 16, "npq", 16) == 3 * len(ytr) * 4 * 16 * 64


def test_bad_parameters_are_refused(digits):
    btr, bte, ytr, yte, nc = _tiny(digits, 50, 20)
    for kw, msg in ((dict(beta=0.3), "beta"), (dict(beta=0.0), "beta"), (dict(b=0), "b >= 1"),
                    (dict(method="foo"), "method"), (dict(epochs=0), "epochs"), (dict(lr=-1.0), "learning rate")):
        with pytest.raises(ValueError, match=msg):
            train_vfl(btr, bte, ytr, yte, VFLConfig(n_classes=nc, **kw), "plain", seed=0)
    with pytest.raises(ValueError, match="misaligned"):
        train_vfl([btr[0][:-1]] + btr[1:], bte, ytr, yte, VFLConfig(n_classes=nc), "plain", seed=0)
    bad = [b.copy() for b in btr]
    bad[2][0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        train_vfl(bad, bte, ytr, yte, VFLConfig(n_classes=nc), "plain", seed=0)
    with pytest.raises(ValueError, match="secure sum"):
        train_vfl(btr, bte, ytr, yte, VFLConfig(n_classes=nc), "mpyc", seed=0, secure_sum="xor")


def test_parties_disagreeing_on_the_batch_are_refused(digits):
    btr, bte, ytr, yte, nc = _tiny(digits, 50, 20)
    cfg = VFLConfig(n_classes=nc, epochs=1, batch_size=25)
    seeds = [7, 7, 7, 8, 7]  # client 3 derives a different batch order
    with pytest.raises(ValueError, match="disagree on the mini-batch order"):
        train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=0, batch_seeds=seeds)
    with pytest.raises(MPCError, match="mini-batch order"):
        train_vfl(btr, bte, ytr, yte, cfg, "mpyc", seed=0, batch_seeds=seeds)


def test_embeddings_outside_the_bound_are_clipped_and_counted():
    e = pbm.encode(np.array([[1.5, 0.2], [-1.0001, -0.3]]), 8, 0.1, C=1.0, rng=1)
    assert e.clipped == 2
