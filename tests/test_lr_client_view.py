"""What each client receives while SQM logistic regression trains, through real party processes.

A test-only wrapper records, inside each client's process, every payload MPyC hands over from a peer
(``MessageExchanger.receive``, whenever it arrived) and the step name of every exchange; the server's wrapper
records the coefficients it rounds and the weights it computes.  Assertions, for every client:

- every array it receives from the server or another client is a share array: int64, entries in [0, p);
- pooled over the run, those share entries are uniform modulo p: chi-square over 32 equal bins, p-value
  above 1e-3 (the share randomness and every party's seed are fixed, so the run and the test are
  deterministic);
- no received array equals the server's rounded coefficients (as integers or field elements), and none is
  a float array (the weights);
- the only other messages are the digest of the public plan (from every party), and from the other clients
  only: their contributions to the shared sampling seed (32 bytes), their record counts and the verdicts
  of the checks.  The server sends a client nothing but shares and the plan digest;
- and the weights equal the plain simulation's bit for bit.

Two clients (M = 3, t = 1) so that the degree reduction of the batch moments runs (with three clients,
M > 3t, it is skipped: tests/test_logreg.py covers that path).
"""
import os
import pickle

import numpy as np
from scipy import stats

from apps import lr_party
from apps.lr_party import LRPlan
from mpc import wire
from mpc.field import from_signed, prime_for_bound
from mpc.launch import run_parties
from mpc.party import PartyProgram
from sqm.rng import spawn_seeds

PVALUE_MIN = 1e-3  # the uniformity test's threshold (the run is deterministic: fixed seeds)
BINS = 32


class ClientView(PartyProgram):
    """Runs ``inner``; records what this party receives (clients) or rounds and computes (the server)."""

    def __init__(self, inner, folder, share_seed):
        self.inner, self.folder, self.share_seed = inner, folder, share_seed

    async def run(self, ctx):
        from mpyc import asyncoro

        from mpc.randomness import secure_generator

        ctx.rng = secure_generator(np.random.SeedSequence([self.share_seed, ctx.pid]))  # test only: fixed
        received, steps, coefs, weights = [], {}, [], []
        orig_receive = asyncoro.MessageExchanger.receive

        def receive(exchanger, pc):
            got = orig_receive(exchanger, pc)
            if isinstance(got, (bytes, bytearray)):
                received.append((exchanger.peer_pid, pc, bytes(got)))
            else:
                got.add_done_callback(lambda f, peer=exchanger.peer_pid: f.exception() is None and
                                      received.append((peer, pc, bytes(f.result()))))
            return got
        send_recv = ctx.send_recv

        async def named(outgoing, senders, expect, step="message"):
            steps[ctx.rt._program_counter[0] + 1] = step  # the label the exchange is about to use
            return await send_recv(outgoing, senders, expect, step)
        round_coefs, update = lr_party.compensated_coefficients, lr_party.server_update

        def rounding(*a):
            coefs.append(round_coefs(*a))
            return coefs[-1]

        def stepping(*a):
            weights.append(update(*a))
            return weights[-1]
        asyncoro.MessageExchanger.receive, ctx.send_recv = receive, named
        lr_party.compensated_coefficients, lr_party.server_update = rounding, stepping
        try:
            return await self.inner.run(ctx)
        finally:
            asyncoro.MessageExchanger.receive = orig_receive
            lr_party.compensated_coefficients, lr_party.server_update = round_coefs, update
            with open(os.path.join(self.folder, f"party{ctx.pid}.pkl"), "wb") as f:  # own test file
                pickle.dump({"received": list(received), "steps": dict(steps), "coefs": coefs,
                             "weights": weights}, f)


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


def test_clients_receive_only_uniform_shares_and_public_messages(tmp_path):
    plan, blocks, seeds = small_run()
    p = prime_for_bound(plan.result_bound(), plan.n_parties + 1)
    programs = [lr_party.LRParty(plan, seeds[0])]
    programs += [lr_party.LRParty(plan, s, b) for s, b in zip(seeds[1:], blocks)]
    res = run_parties([ClientView(prog, str(tmp_path), 5) for prog in programs], timeout=120, blas_threads=1)
    sim = lr_party.train_plain(blocks, plan, seeds)
    assert np.array_equal(np.asarray(res[0]["result"]["weights"]), sim.weights)  # bit for bit

    with open(tmp_path / "party0.pkl", "rb") as f:
        server = pickle.load(f)
    assert len(server["coefs"]) == plan.rounds and np.array_equal(server["weights"][-1], sim.weights)
    secret = list(server["coefs"]) + [from_signed(c, p) for c in server["coefs"]]
    assert any(np.any(c != 0) for c in server["coefs"])
    for pid in range(1, plan.n_parties + 1):
        with open(tmp_path / f"party{pid}.pkl", "rb") as f:
            view = pickle.load(f)
        assert "weights" in view and not view["coefs"] and not view["weights"]  # clients round nothing
        steps = view["steps"]
        assert sum(s == "degree reduction" for s in steps.values()) == 2 * plan.rounds  # moments, then y
        shares, other = [], []
        for peer, pc, payload in view["received"]:
            assert peer != pid
            step, obj = steps[pc], wire.decode(payload)
            for x in (obj if isinstance(obj, list) else [obj]):
                if isinstance(x, np.ndarray):
                    assert x.dtype == np.int64 and x.size and 0 <= x.min() and x.max() < p, (peer, step)
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
                assert isinstance(x, bytes) and len(x) == lr_party.SEED_BYTES
            elif step == "compare record count":
                assert x == plan.n_records
            elif step == "closing barrier":
                assert x is None
            else:
                assert step.startswith("verdict on") and x == "ok", (peer, step, x)
        assert sum(s == "clients' key" for _, s, _ in other) == plan.n_parties - 1
        from_server = [steps[pc] for peer, pc, _ in view["received"] if peer == 0]
        assert set(from_server) == {"agree on logistic-regression plan", "coefficient shares", "degree reduction"}
        assert from_server.count("coefficient shares") == plan.rounds
        pooled = np.concatenate(shares)
        assert pooled.size > 30 * BINS  # >= 30 expected per bin
        assert uniform_pvalue(pooled, p) > PVALUE_MIN, pid
    # the uniformity test has power: the server's field-encoded coefficients are rejected
    assert uniform_pvalue(np.concatenate([from_signed(c, p) for c in server["coefs"]]), p) < PVALUE_MIN
