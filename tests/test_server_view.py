"""What the server actually receives in a real run, and what a malformed frame from a peer does.

Every message the server process receives is recorded by a test-only wrapper around MPyC's transport
(``MessageExchanger.receive``: every payload the protocol consumes, whenever it arrived), inside the real
party process, and written out in the wire format.  The assertions:

(a) before the output phase the server holds only Shamir shares (int64 field elements) besides public
    digests and verdicts; the shares are uniform modulo p (chi-square), and their distribution is the same
    for two different client datasets (all-zero data, and data at the column bounds);
(b) the only values the server reconstructs are the noisy outputs;
and a peer that sends a pickle, a wrong dtype, a wrong shape or out-of-range shares makes every party
abort, naming that peer, with nothing released and no code in the frame run.

Shares are drawn from OS-entropy-keyed AES-CTR (not seedable, as in production), so each chi-square test
has a false-alarm probability equal to its threshold, 1e-4; a companion assertion proves each test has
power (it rejects the clients' own field-encoded data, which is far from uniform).
"""
import os
import pickle

import numpy as np
import pytest
from scipy import stats

from sqm.mpc.net import wire
from sqm.mpc.protocols.backend import FixedClient, Job
from sqm.mpc.shares.field import from_signed, prime_for_bound
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError, run_parties

from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols import sharing
from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.program import SumProgram

ALPHA = 1e-4  # chi-square false-alarm probability per test
BINS = 32


class Recording(PartyProgram):
    """Runs ``inner`` and records every payload this party receives, and every value it opens."""

    def __init__(self, inner, path):
        self.inner, self.path = inner, path

    async def run(self, ctx):
        from mpyc import asyncoro

        log, opened = [], []
        orig_receive = asyncoro.MessageExchanger.receive

        def receive(exchanger, pc):
            got = orig_receive(exchanger, pc)
            if isinstance(got, (bytes, bytearray)):
                log.append([exchanger.peer_pid, pc, bytes(got)])
            else:
                got.add_done_callback(lambda f, peer=exchanger.peer_pid: f.exception() is None and
                                      log.append([peer, pc, bytes(f.result())]))
            return got
        asyncoro.MessageExchanger.receive = receive
        orig_open = sharing.open_to  # this party's process: every opening goes through the module's

        async def open_to(at, share, p, receivers, *args, **kw):
            res = await orig_open(at, share, p, receivers, *args, **kw)
            if res is not None:
                opened.append(res)
            return res
        sharing.open_to = open_to
        try:
            return await self.inner.run(ctx)
        finally:
            sharing.open_to = orig_open
            asyncoro.MessageExchanger.receive = orig_receive
            with open(self.path, "wb") as f:
                f.write(wire.encode({"received": log, "opened": opened}))


def gram_job(blocks, bound, noise):
    n_out = sum(b.shape[1] for b in blocks) ** 2
    owner = [j for j, b in enumerate(blocks) for _ in range(b.shape[1])]
    clients = [FixedClient(b, n_out, z) for b, z in zip(blocks, noise, strict=False)]
    return Job(program=SumProgram.gram_program(len(owner)), clients=clients, col_bounds=[bound] * len(owner),
               n_records=blocks[0].shape[0], addend_bound=10 ** 6, var_owner=owner)


def run_recorded(job, tmp_path, tag):
    pub = job.public()
    path = str(tmp_path / f"server-{tag}.frames")
    programs = [Recording(EvaluateJob(pub), path)] + [EvaluateJob(pub, c) for c in job.clients]
    res = run_parties(programs)
    with open(path, "rb") as f:
        view = wire.decode(f.read())
    return res, view


def classify(view, p):
    """Split what the server received into public strings and share arrays (anything else fails)."""
    public, shares = [], []
    for peer, pc, payload in view["received"]:
        obj = wire.decode(payload)
        items = obj if isinstance(obj, list) else [obj]
        for x in items:
            if isinstance(x, str):
                public.append(x)
            elif isinstance(x, np.ndarray):
                assert x.dtype == np.int64 and x.size and x.min() >= 0 and x.max() < p, (peer, pc)
                shares.append((peer, pc, x))
            else:
                raise AssertionError(f"the server received an unexpected {type(x).__name__} from party {peer}")
    return public, shares


def uniform_pvalue(values, p):
    counts = np.bincount((values.astype(object) * BINS // p).astype(np.int64), minlength=BINS)
    return stats.chisquare(counts).pvalue, counts


def test_server_sees_only_uniform_shares_whatever_the_data(tmp_path):
    rows, bound = 1500, 4096
    rng = np.random.default_rng(0)
    datasets = {"zeros": [np.zeros((rows, 2), np.int64), np.zeros((rows, 2), np.int64)],
                "at bounds": [np.full((rows, 2), bound, np.int64), -np.full((rows, 2), bound, np.int64)]}
    noise = [rng.integers(-1000, 1000, 16), rng.integers(-1000, 1000, 16)]
    histograms = {}
    for tag, blocks in datasets.items():
        job = gram_job(blocks, bound, noise)
        p = prime_for_bound(job.result_bound(), 3)
        res, view = run_recorded(job, tmp_path, tag.replace(" ", "-"))
        public, shares = classify(view, p)
        # public strings: one agreement digest per party and the clients' verdicts ("ok")
        assert all(len(s) == 64 or s == "ok" for s in public), public
        # (b) the server opened exactly one vector: the noisy output it returns
        X = np.hstack(blocks).astype(object)
        exact = (X.T @ X).reshape(-1) + noise[0] + noise[1]
        assert len(view["opened"]) == 1
        released = res[0]["result"]
        assert list(released) == list(exact)
        # (a) before the output phase: input shares and degree-reduction sub-shares only; pooled, uniform
        last_pc = max(pc for _, pc, _ in shares)
        before = np.concatenate([x.reshape(-1) for _, pc, x in shares if pc < last_pc])
        assert before.size >= 2 * rows * 2
        pval, counts = uniform_pvalue(before, p)
        assert pval > ALPHA, (tag, pval)
        histograms[tag] = counts
        # the test has power: the clients' own field-encoded inputs are rejected as non-uniform
        plain = from_signed(np.concatenate([b.reshape(-1) for b in blocks]), p)
        assert uniform_pvalue(plain, p)[0] < ALPHA
    # the distribution does not depend on the data: chi-square test of homogeneity of the two histograms
    table = np.vstack([histograms["zeros"], histograms["at bounds"]])
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_with_three_clients_the_server_receives_no_input_share(tmp_path):
    """Three clients are 2t + 1 (t = 1 for 4 parties): they alone hold the input shares and reduce the degree,
    so the server receives no share of any record, only one degree-t subshare per client of each output and
    the output shares it opens (every array it receives has the output's length)."""
    rows, bound = 300, 4096
    rng = np.random.default_rng(1)
    blocks = [rng.integers(-bound, bound + 1, (rows, 2)) for _ in range(3)]
    noise = [rng.integers(-1000, 1000, 36) for _ in range(3)]
    job = gram_job(blocks, bound, noise)
    p = prime_for_bound(job.result_bound(), 4)
    res, view = run_recorded(job, tmp_path, "three")
    _, shares = classify(view, p)
    assert shares and all(x.shape == (36,) for _, _, x in shares)
    assert sorted(peer for peer, _, _ in shares) == [1, 1, 2, 2, 3, 3]  # per client: its subshare, its share
    X = np.hstack(blocks).astype(object)
    assert list(res[0]["result"]) == list((X.T @ X).reshape(-1) + sum(n.astype(object) for n in noise))


class Evil(PartyProgram):
    """A client that sends a malformed frame in place of its input shares, then carries on."""

    def __init__(self, inner, mode, marker):
        self.inner, self.mode, self.marker = inner, mode, marker

    def payload(self, shares, p):
        block, *rest = shares
        if self.mode == "pickle":  # would create the marker file at any party that unpickled it
            return pickle.dumps(_Exploit(self.marker))
        if self.mode == "dtype":
            return wire.encode([block.astype(np.int32), *rest])
        if self.mode == "shape":
            return wire.encode([block[:-1], *rest])
        if self.mode == "range":
            bad = block.copy()
            bad[0, 0] = p
            return wire.encode([bad, *rest])
        raise ValueError(self.mode)

    async def run(self, ctx):
        orig = ctx.send_recv

        async def send_recv(outgoing, senders, expect, step="message"):
            if step == "input shares" and outgoing:
                p = self.p
                raw = {k: self.payload(v, p) for k, v in outgoing.items()}
                await ctx._transport(raw, list(senders))
                await ctx._transport({}, [0])  # wait: the honest parties' abort notices end this
                raise AssertionError("the honest parties went on after a malformed frame")
            return await orig(outgoing, senders, expect, step)
        ctx.send_recv = send_recv
        self.p = prime_for_bound(self.inner.job.result_bound(), ctx.M)
        return await self.inner.run(ctx)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("mode", ["pickle", "dtype", "shape", "range"])
def test_malformed_frame_aborts_every_party_naming_the_sender(tmp_path, mode):
    """The pickle through real processes (nothing unpickles it, over TCP); the other frames through the
    in-process runner running the real protocol (``ideal=False``), whose frames the same validators check."""
    blocks = [np.ones((20, 1), np.int64), np.ones((20, 1), np.int64), np.ones((20, 1), np.int64)]
    job = gram_job(blocks, 4, [np.zeros(9, np.int64)] * 3)
    pub = job.public()
    marker = str(tmp_path / "code-ran")
    programs = [EvaluateJob(pub), EvaluateJob(pub, job.clients[0]),
                Evil(EvaluateJob(pub, job.clients[1]), mode, marker), EvaluateJob(pub, job.clients[2])]
    with pytest.raises(MPCError) as err:
        run_parties(programs) if mode == "pickle" else run_in_process(programs, ideal=False)
    msg, words = str(err.value), err.value.messages
    assert "no result released" in msg
    # every honest party names client 2 and the step; client 2 itself is told why
    for i in (0, 1, 3):
        assert err.value.codes[i] == 3 and "malformed message from client 2 at step 'input shares'" in words[i]
    assert err.value.codes[2] == 3 and "aborted the job" in words[2]
    assert "malformed message from client 2 at step 'input shares'" in msg.splitlines()[0]
    assert not os.path.exists(marker)


def test_server_holds_nothing_that_determines_a_clients_randomness(monkeypatch):
    """The issue's attack: a server that regenerates the clients' noise from what it holds.  In a real run the
    server holds its program file and the messages above; its program is byte-identical across two runs
    whose clients drew different noise, so no function of it yields their noise.  With a seed (a local
    experiment) the server's program still holds no seed: each client holds only its own derived seed."""
    import sqm.mpc.net.launch as mb
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.vertical import VerticalData

    held = []
    real = mb.run_parties

    def spy(programs, **kw):
        held.append([pickle.dumps(p) for p in programs])
        return real(programs, **kw)
    monkeypatch.setattr(mb, "run_parties", spy)
    X = np.random.default_rng(1).normal(size=(30, 4))
    X /= np.linalg.norm(X, axis=1).max()
    data = VerticalData.split(X, 2)
    runs = [SQM(covariance(4), 256.0, mu=1e4, backend="mpyc").run(data).raw for _ in range(2)]
    assert held[0][0] == held[1][0]  # the server's program: identical bytes
    assert list(runs[0]) != list(runs[1])  # the clients' noise: fresh in each run
    seeded = SQM(covariance(4), 256.0, mu=1e4, backend="mpyc", seed=12345).run(data)
    server, clients = held[2][0], held[2][1:]
    assert server == held[0][0]  # no seed, nothing derived from one
    client_seeds = [pickle.loads(c).seed for c in clients]
    assert all(s is not None for s in client_seeds)
    for s in client_seeds:
        ent = s.entropy if hasattr(s, "entropy") else s
        assert ent != 12345 and str(ent).encode() not in server
    assert list(seeded.raw) == list(SQM(covariance(4), 256.0, mu=1e4, backend="plain", seed=12345).run(data).raw)
