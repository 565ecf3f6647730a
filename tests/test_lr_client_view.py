"""What each client receives while SQM logistic regression trains; the real run equals the in-process run.

The one real-process test of SQM-LR.  Its party programs (:class:`sqm.apps.logreg.party.LRParty`, wrapped) run twice
with the same seeds and the same share generators: as real MPyC party processes and in process
(:func:`sqm.mpc.protocols.inprocess.run_in_process` with ``ideal=False``: the real protocol over in-memory mailboxes;
its default, the ideal functionality of the kernel, must give the same weights too).  A test-only wrapper records, at
each client, every frame it receives from a peer with the step of the exchange: in the real processes at MPyC's own
receive (``MessageExchanger.receive``, whatever arrived), in process at the context's transport.
Assertions:

- the real run and the in-process run are bit for bit the same: the server's weights after EVERY iteration,
  and every frame every client receives (same exchange, same sender, same bytes), so the in-process frames
  are the real ones and the checks below hold for both runners;
- for every client: every array it receives from the server or another client is a share array: int64,
  entries in [0, p); pooled over the run, those share entries are uniform modulo p (chi-square over 32
  equal bins, p-value above 1e-3; the run is deterministic: fixed seeds);
- no received array equals the server's rounded coefficients (as integers or field elements; recomputed from
  the server's seed and its weight history, the generator's only use), and none is a float array (weights);
- the only other messages are the digest of the public plan (from every party), and from the other clients
  only: their contributions to the shared sampling seed (32 bytes), their record counts and the verdicts
  of the checks.  The server sends a client nothing but shares and the plan digest.

Two clients (M = 3, t = 1) so that the degree reduction of the batch moments runs (with three clients,
M > 3t, it is skipped: tests/test_logreg.py runs that path in process).
"""
import os
import pickle

import numpy as np
from scipy import stats

from sqm.apps.logreg import party
from sqm.apps.logreg.party import LRPlan
from sqm.mpc.net import wire
from sqm.mpc.shares.field import from_signed, prime_for_bound
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import run_parties
from sqm.mpc.net.party import PartyProgram
from sqm.mechanism.rng import spawn_seeds

PVALUE_MIN = 1e-3  # the uniformity test's threshold (the run is deterministic: fixed seeds)
BINS = 32


class ClientView(PartyProgram):
    """Runs ``inner`` with a fixed share generator; records the step of every exchange this party makes and every
    frame it receives from a peer as (exchange index, sender, bytes), in ``folder/party<pid>.pkl``."""

    def __init__(self, inner, folder, share_seed):
        self.inner, self.folder, self.share_seed = inner, folder, share_seed

    async def run(self, ctx):
        from sqm.mpc.shares.randomness import secure_generator

        ctx.rng = secure_generator(np.random.SeedSequence([self.share_seed, ctx.pid]))  # test only: fixed
        steps, received, labels = [], [], {}
        send_recv = ctx.send_recv

        async def named(outgoing, senders, expect, step="message"):
            if ctx.rt is not None:  # MPyC labels the exchange with its next program counter
                labels[ctx.rt._program_counter[0] + 1] = len(steps)
            steps.append(step)
            return await send_recv(outgoing, senders, expect, step)
        ctx.send_recv = named
        if ctx.rt is None:  # in process: what the context's transport hands over
            transport = ctx._transport

            async def recording(outgoing, senders):
                got = await transport(outgoing, senders)
                received.extend((len(steps) - 1, s, bytes(g))
                                for s, g in zip(senders, got, strict=False) if s != ctx.pid)
                return got
            ctx._transport = recording
            return await self._finish(ctx, steps, lambda: received)
        from mpyc import asyncoro

        raw, orig_receive = [], asyncoro.MessageExchanger.receive

        def receive(exchanger, pc):  # whatever MPyC hands over from a peer, whenever it arrived
            got = orig_receive(exchanger, pc)
            if isinstance(got, (bytes, bytearray)):
                raw.append((pc, exchanger.peer_pid, bytes(got)))
            else:
                got.add_done_callback(lambda f, peer=exchanger.peer_pid: f.exception() is None and
                                      raw.append((pc, peer, bytes(f.result()))))
            return got
        def frames():  # a frame labelled past the program's last exchange is the closing barrier's: left out
            assert all(pc in labels or pc > max(labels) for pc, _, _ in raw)
            return [(labels[pc], peer, b) for pc, peer, b in raw if pc in labels]
        asyncoro.MessageExchanger.receive = receive
        try:
            return await self._finish(ctx, steps, frames)
        finally:
            asyncoro.MessageExchanger.receive = orig_receive

    async def _finish(self, ctx, steps, frames):
        try:
            return await self.inner.run(ctx)
        finally:
            with open(os.path.join(self.folder, f"party{ctx.pid}.pkl"), "wb") as f:  # own test file
                pickle.dump({"received": sorted(frames()), "steps": list(steps)}, f)


def small_run():
    col_counts = (2, 3)
    bounds = np.sqrt(np.asarray(col_counts) / sum(col_counts))
    plan = LRPlan(n_records=40, col_counts=col_counts, label_party=1, gamma=256.0, mu=1e4, q=0.25, rounds=10,
                  b_max=16, learning_rate=1.0, weight_bound=1.0, party_bounds=tuple(bounds))
    rng = np.random.default_rng(31)
    X = rng.normal(size=(40, plan.d)) * 0.3
    y = (X[:, 0] - X[:, 3] > 0).astype(float)
    blocks = [X[:, :2], np.hstack([X[:, 2:], y[:, None]])]
    return plan, blocks, spawn_seeds(17, plan.n_parties + 1)


def uniform_pvalue(values, p):
    counts = np.bincount((values.astype(object) * BINS // p).astype(np.int64), minlength=BINS)
    return stats.chisquare(counts).pvalue


def load(folder, pid):
    with open(os.path.join(folder, f"party{pid}.pkl"), "rb") as f:
        return pickle.load(f)


def test_real_run_equals_in_process_and_clients_receive_only_uniform_shares(tmp_path):
    plan, blocks, seeds = small_run()
    p = prime_for_bound(plan.result_bound(), plan.n_parties + 1)
    programs = [party.LRParty(plan, seeds[0], history=True)]
    programs += [party.LRParty(plan, s, b) for s, b in zip(seeds[1:], blocks, strict=False)]
    (tmp_path / "real").mkdir(), (tmp_path / "sim").mkdir()
    real = run_parties([ClientView(prog, str(tmp_path / "real"), 5) for prog in programs], timeout=120,
                       blas_threads=1)
    sim = run_in_process([ClientView(prog, str(tmp_path / "sim"), 5) for prog in programs], timeout=120,
                         ideal=False)  # the real protocol over the mailboxes: every frame a real party receives
    history = real[0]["result"]["history"]
    assert history.shape == (plan.rounds, plan.d) and np.any(history[-1] != 0)
    assert np.array_equal(history, sim[0]["result"]["history"])  # every iteration, bit for bit
    assert np.array_equal(real[0]["result"]["weights"], history[-1])
    ideal = run_in_process(programs, timeout=120)  # the simulation's default: the kernel's ideal functionality
    assert np.array_equal(ideal[0]["result"]["history"], history)
    assert real[1]["result"].keys() == {"clipped", "truncated", "seconds"}  # no weights at a client
    # a different client seed gives different weights (the comparison above can fail)
    other = run_in_process([programs[0], party.LRParty(plan, seeds[2], blocks[0]), programs[2]], timeout=120)
    assert not np.array_equal(other[0]["result"]["weights"], history[-1])

    # the server's rounded coefficients: its generator's only draws, from the weights before each round
    rng = party.party_generator(seeds[0])
    coefs = [np.array(plan.statistic(w).compensate(plan.gamma, rng).int_coefs)
             for w in np.vstack([np.zeros(plan.d), history[:-1]])]
    secret = coefs + [from_signed(c, p) for c in coefs]
    assert any(np.any(c != 0) for c in coefs)
    for pid in range(1, plan.n_parties + 1):
        view, sim_view = load(tmp_path / "real", pid), load(tmp_path / "sim", pid)
        steps = view["steps"]
        assert steps == sim_view["steps"]
        frames = view["received"]
        assert frames == sim_view["received"]  # the in-process frames are the real ones, byte for byte
        # per iteration: input shares, the moments' reduction carrying the server's coefficient shares, the masked
        # opening (y goes to the server without a degree reduction of its own: sqm.apps.logreg.kernel.secure_gradient)
        assert sum(s == "degree reduction and coefficient shares" for s in steps) == plan.rounds
        shares, other = [], []
        for k, peer, payload in frames:
            assert peer != pid
            step, obj = steps[k], wire.decode(payload)
            for x in (obj if isinstance(obj, list) else [obj]):
                if isinstance(x, np.ndarray):
                    assert x.dtype == np.int64 and x.size and x.min() >= 0 and x.max() < p, (peer, step)
                    assert not any(x.size == c.size and np.array_equal(x.reshape(-1), c.reshape(-1))
                                   for c in secret), (peer, step)
                    shares.append(x.reshape(-1))
                else:
                    other.append((peer, step, x))
        for peer, step, x in other:
            if step.startswith("agree on"):  # the plan digest (every party, the server included)
                assert isinstance(x, str) and len(x) == 64, (peer, step)
                continue
            assert peer != 0, f"client {pid} received a non-share {type(x).__name__} from the server at {step}"
            if step == "clients' key":
                assert isinstance(x, bytes) and len(x) == party.SEED_BYTES
            elif step == "compare record count":
                assert x == plan.n_records
            else:
                assert step.startswith("verdict on") and x == "ok", (peer, step, x)
        assert sum(s == "clients' key" for _, s, _ in other) == plan.n_parties - 1
        from_server = [steps[k] for k, peer, _ in frames if peer == 0]
        assert set(from_server) == {"agree on logistic-regression plan", "degree reduction and coefficient shares"}
        assert from_server.count("degree reduction and coefficient shares") == plan.rounds
        pooled = np.concatenate(shares)
        assert pooled.size > 30 * BINS  # >= 30 expected per bin
        assert uniform_pvalue(pooled, p) > PVALUE_MIN, pid
    # the uniformity test has power: the server's field-encoded coefficients are rejected
    assert uniform_pvalue(np.concatenate([from_signed(c, p) for c in coefs]), p) < PVALUE_MIN
