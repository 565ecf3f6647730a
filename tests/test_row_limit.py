"""The secure row norm check (sqm.mpc.protocols.compare, Job.row_limit; SQM's row_norm_check): exact comparisons on
shares, the evaluation over the records within the limit only, bit for bit between the real protocol, the ideal
functionality and real processes, what each party receives, and the mechanism's limit and sensitivity."""
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from sqm.mechanism.quantize import dependent_round
from sqm.mechanism.sensitivity import row_checked_gram_sensitivity, row_limit_sq
from sqm.mechanism.vertical import VerticalData
from sqm.apps.pca import SQMPCA
from sqm.apps.pca.utility import covariance_release
from sqm.mpc.protocols import compare
from sqm.mpc.protocols import sharing
from sqm.mpc.shares import shamir
from sqm.mpc.net import wire
from sqm.mpc.protocols.backend import FixedClient, Job
from sqm.errors import UsageError
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols.context import EvaluateJob, PartyContext
from sqm.mpc.protocols.program import SumProgram
from sqm.mpc.protocols.psi import Union

ALPHA = 1e-4  # chi-square false-alarm probability per test


def _workers(ctx):
    return list(ctx.clients) if len(ctx.clients) >= 2 * ctx.t + 1 else list(range(ctx.M))


class Primitive(PartyProgram):
    """Client 1 shares ``values`` with the workers; every party runs ``what`` on the shares; the result is opened
    to every party.  ``what``: "at_most" (with ``limit``), "lsb", "bits" (random bits), "uniform" (the value r
    of uniform_with_bits, recomposed from its bits)."""

    def __init__(self, what, p, n, values=None, limit=0):
        self.what, self.p, self.n, self.values, self.limit = what, p, n, values, limit

    async def run(self, ctx):
        p, n = self.p, self.n
        workers = _workers(ctx)
        out = {}
        if ctx.pid == 1:
            sh = shamir.share(np.asarray(self.values, dtype=np.int64) % p, ctx.M, ctx.t, p, ctx.rng)
            out = {j: sh[j] for j in workers}
        got = await ctx.send_recv(out, [1] if ctx.pid in workers else [], wire.shares((n,), p), "values")
        v = got[0] if got else None
        if self.what == "at_most":
            res = await compare.at_most(ctx, v, self.limit, p, workers, n)
        elif self.what == "lsb":
            res = await compare.lsb(ctx, v, p, workers, n)
        elif self.what == "bits":
            res = await compare.random_bits(ctx, (n,), p, workers)
        else:
            bits = await compare.uniform_with_bits(ctx, n, p, workers)
            res = None
            if bits is not None:
                w = np.array([pow(2, i, p) for i in range(p.bit_length())], dtype=np.int64)[:, None]
                from sqm.mpc.shares import modarith
                res = modarith.sum_mod(modarith.mul_mod(bits, w, p), 0, p)
        return await sharing.open_to(ctx, res, p, range(ctx.M), workers, (n,), degree=ctx.t)


def _run(what, p, clients, values=None, limit=0, n=None, seed=None):
    n = len(values) if n is None else n
    progs = [Primitive(what, p, n, values if i == 1 else None, limit) for i in range(clients + 1)]
    rngs = None if seed is None else [np.random.default_rng([seed, i]) for i in range(clients + 1)]
    rec = run_in_process(progs, ideal=False, rngs=rngs)
    outs = [np.asarray(r["result"]) for r in rec]
    assert all(np.array_equal(o, outs[0]) for o in outs)  # opened to every party alike
    return outs[0]


# p = 131: about half of the draws r < 2^8 are >= p and redrawn; 8191 = 2^13 - 1: none; 2^61 - 1: the largest
@pytest.mark.parametrize("p", [131, 8191, (1 << 61) - 1])
@pytest.mark.parametrize("clients", [2, 3, 4])
def test_at_most_is_exact_at_and_around_the_limit(p, clients):
    rng = np.random.default_rng(clients)
    limit = p // 4
    edge = np.arange(max(0, limit - 25), limit + 26)
    vals = np.concatenate([edge, [0, p // 2 - 1], rng.integers(0, p // 2, size=150)])
    got = _run("at_most", p, clients, vals, limit)
    assert got.tolist() == (vals <= limit).astype(int).tolist()


@pytest.mark.parametrize("p", [131, (1 << 37) - 25])
def test_lsb_of_any_field_element(p):
    rng = np.random.default_rng(4)
    vals = np.concatenate([[0, 1, p - 1, p - 2], rng.integers(0, p, size=300)])
    assert _run("lsb", p, 3, vals).tolist() == (vals & 1).tolist()


def test_random_bits_are_fair_bits():
    """50,000 XORed bits: every one 0 or 1, their mean within 5 standard errors of 1/2 (fixed share seeds)."""
    n = 50_000
    bits = _run("bits", 8191, 3, n=n, values=np.zeros(n, np.int64), seed=11)
    assert set(bits.tolist()) <= {0, 1}
    assert abs(bits.mean() - 0.5) < 5 * 0.5 / math.sqrt(n)


def test_rejection_makes_r_uniform_in_the_field():
    """p = 131 (k = 8 bits): the draws >= p are redrawn, so every r is below p and the 131 values are equally
    likely (chi-square, 26,200 draws, fixed share seeds): without rejection r would be uniform on [0, 256)."""
    p, n = 131, 26_200
    r = _run("uniform", p, 3, n=n, values=np.zeros(n, np.int64), seed=12)
    assert r.max() < p
    assert stats.chisquare(np.bincount(r, minlength=p)).pvalue > ALPHA


class AtLeastP(PartyProgram):
    """Client 1 shares the bits of given values r < 2^k (k = bit length of p); the parties compute [r >= p]
    (compare.at_least_p, the rejection step); opened to every party."""

    def __init__(self, p, r=None, n=0):
        self.p, self.r, self.n = p, r, n

    async def run(self, ctx):
        p, workers, k = self.p, _workers(ctx), self.p.bit_length()
        out = {}
        if ctx.pid == 1:
            sh = shamir.share(compare.public_bits(self.r, k), ctx.M, ctx.t, p, ctx.rng)
            out = {j: sh[j] for j in workers}
        got = await ctx.send_recv(out, [1] if ctx.pid in workers else [], wire.shares((k, self.n), p), "bits")
        res = await compare.at_least_p(ctx, got[0] if got else None, p, workers, self.n)
        return await sharing.open_to(ctx, res, p, range(ctx.M), workers, (self.n,), degree=ctx.t)


# p = 2^k - m for m = 1 (Mersenne: the top bits alone), 9, 15, 25 (a few low bits), 125 and 255 (one top bit)
@pytest.mark.parametrize("p", [131, 257, 8191, 2039, 65521, (1 << 37) - 25, (1 << 61) - 1])
@pytest.mark.parametrize("clients", [2, 3])
def test_rejection_bit_is_exact_for_every_draw(p, clients):
    """[r >= p] from p's form 2^k - m is exact: every r < 2^k for the small fields, the values from p - 100 up to
    2^k - 1 and random ones for the large."""
    k = p.bit_length()
    if k <= 16:
        r = np.arange(1 << k)
    else:
        edges = [0, 1, (1 << k) - 1, (1 << (k - 1)) - 1, 1 << (k - 1)]
        r = np.concatenate([np.arange(p - 100, min(p + 100, 1 << k)), edges,
                            np.random.default_rng(k).integers(0, 1 << k, size=100)])
    progs = [AtLeastP(p, r if i == 1 else None, len(r)) for i in range(clients + 1)]
    got = np.asarray(run_in_process(progs, ideal=False)[0]["result"])
    assert got.tolist() == (r >= p).astype(int).tolist()


def _opened_by(client, what_values, p, limit, seed):
    """The masked values c = x + r a worker opens in at_most (recorded at client 1)."""
    seen = []

    class Spy(Primitive):
        def describe(self) -> str:
            return "Primitive"

        async def run(self, ctx):
            orig = sharing.open_to

            async def open_to(at, share, q, receivers, *a, **kw):  # every party's openings: this one's recorded
                res = await orig(at, share, q, receivers, *a, **kw)
                if at is ctx and res is not None and list(receivers) != list(range(ctx.M)):
                    seen.append(res)
                return res
            sharing.open_to = open_to
            try:
                return await super().run(ctx)
            finally:
                sharing.open_to = orig

    n = len(what_values)
    progs = [(Spy if i == client else Primitive)("at_most", p, n, what_values if i == 1 else None, limit)
             for i in range(4)]
    run_in_process(progs, ideal=False, rngs=[np.random.default_rng([seed, i]) for i in range(4)])
    return np.concatenate(seen)


def test_the_opened_masked_values_are_uniform_whatever_the_data():
    """What a worker opens in the comparison, c = 2 (B - v) + r mod p, is uniform on F_p for all-zero values and
    for values at the limit's far side alike (chi-square, p = 131, 13,100 values each), and the two histograms
    are homogeneous; the test has power: the values 2 (B - v) themselves are rejected as non-uniform."""
    p, n, limit = 131, 13_100, 30
    hists = []
    for k, vals in enumerate([np.zeros(n, np.int64), np.full(n, 60, np.int64)]):
        c = _opened_by(2, vals, p, limit, 20 + k)
        assert c.size == n
        h = np.bincount(c, minlength=p)
        assert stats.chisquare(h).pvalue > ALPHA
        hists.append(h)
        assert stats.chisquare(np.bincount(2 * (limit - vals) % p, minlength=p)).pvalue < ALPHA
    assert stats.chi2_contingency(np.vstack(hists)).pvalue > ALPHA


# ----- evaluations with a row limit --------------------------------------------------------------------------


def _job(X, widths, limit, prog=None, chunk_rows=64, bound=50):
    prog = prog or SumProgram.gram_program(X.shape[1])
    owner = [j for j, w in enumerate(widths) for _ in range(w)]
    job = Job(program=prog, clients=[], col_bounds=[bound] * X.shape[1], n_records=X.shape[0], addend_bound=0,
              var_owner=owner, chunk_rows=chunk_rows, row_limit=limit)
    blocks = np.split(X, np.cumsum(widths)[:-1], axis=1)
    return job, [EvaluateJob(job)] + [EvaluateJob(job, FixedClient(b, prog.n_out)) for b in blocks]


PROGRAMS = {
    "gram": None,
    "degree 1-2": SumProgram.from_terms(7, 3, [(0,), (1, 4), (2, 2), (6,), (3, 5)], [1, 1, 2, 2, 0],
                                        [-2, 5, 1, 7, -1]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("widths", [(2, 3, 2), (3, 4), (1, 2, 2, 2)])
def test_evaluation_counts_the_records_within_the_limit_only(name, widths):
    """The BGW protocol over in-memory mailboxes and the ideal functionality both give the program over the
    records with sum_j x_ij^2 <= B, exactly (B the median: about half are left out, the records at B kept);
    with 3 or more clients the clients alone compute, with 2 the server is a worker too."""
    rng = np.random.default_rng(len(widths))
    X = rng.integers(-50, 51, size=(300, 7))
    X[0] = 0
    norms = (X.astype(np.int64) ** 2).sum(axis=1)
    limit = int(np.sort(norms)[150])  # one record exactly at the limit (kept), the next above it (left out)
    job, progs = _job(X, widths, limit, PROGRAMS[name])
    ideal = run_in_process(progs)[0]["result"]
    real = run_in_process(progs, ideal=False)[0]["result"]
    expected = job.program.evaluate(X[norms <= limit])
    assert [int(v) for v in real] == [int(v) for v in ideal] == [int(v) for v in expected]
    assert 100 < int((norms <= limit).sum()) < 200


def test_row_limit_and_membership_together_keep_the_members_within_the_limit():
    rng = np.random.default_rng(3)
    U, m = 200, 90
    ind = np.zeros(U, dtype=bool)
    ind[rng.choice(U, m, replace=False)] = True
    X = rng.integers(-50, 51, size=(U, 6))
    norms = (X.astype(np.int64) ** 2).sum(axis=1)
    limit = int(np.median(norms))
    prog = SumProgram.gram_program(6)
    job = Job(program=prog, clients=[], col_bounds=[50] * 6, n_records=m, addend_bound=0, var_owner=[0, 0, 1, 1, 2, 2],
              chunk_rows=50, row_limit=limit)

    class Masked(PartyProgram):
        def __init__(self, block=None, server=False):
            self.block, self.server = block, server

        async def run(self, ctx):
            union = Union(U, m, indicator=ind) if self.server else Union(U, m)
            mine = None if self.block is None else (self.block, np.zeros(prog.n_out, np.int64))
            return await PartyContext(ctx, membership=union).evaluate(job, mine)

    progs = [Masked(server=True)] + [Masked(X[:, 2 * j:2 * j + 2]) for j in range(3)]
    ideal = run_in_process(progs)[0]["result"]
    real = run_in_process(progs, ideal=False)[0]["result"]
    expected = prog.evaluate(X[ind & (norms <= limit)])
    assert [int(v) for v in real] == [int(v) for v in ideal] == [int(v) for v in expected]


def test_a_program_with_a_constant_monomial_is_refused_before_any_share():
    X = np.ones((10, 4), np.int64)
    prog = SumProgram.from_terms(4, 1, [(), (0, 1)], [0, 0], [1, 1])
    _, progs = _job(X, (2, 2), 10, prog)
    with pytest.raises(MPCError, match="row limit needs programs without a constant monomial"):
        run_in_process(progs, ideal=False)


def test_real_processes_give_the_same_integers(tmp_path):
    """Real MPyC party processes over TCP: the same integers as the ideal functionality."""
    from sqm.mpc.net.launch import run_parties

    rng = np.random.default_rng(8)
    X = rng.integers(-50, 51, size=(120, 5))
    norms = (X.astype(np.int64) ** 2).sum(axis=1)
    job, progs = _job(X, (2, 3), int(np.median(norms)), chunk_rows=50)
    real = run_parties(progs)[0]["result"]
    assert [int(v) for v in real] == [int(v) for v in job.program.evaluate(X[norms <= int(np.median(norms))])]


# ----- the mechanism: the limit, the sensitivity, SQM-PCA with the check -------------------------------------


@pytest.mark.parametrize("gamma", [4.0, 64.0, 4096.0, 2.0 ** 20])
@pytest.mark.parametrize("widths", [(64,), (21, 21, 22), (1, 1, 1, 1), (3, 50)])
def test_every_row_within_c_rounds_within_the_limit(gamma, widths):
    """Rows with ||x|| <= c (random directions, one coordinate carrying all, the norm exactly c, fractions near
    0, 1/2 and 1), their party groups rounded on their own as the clients round them: ||x_hat||^2 <= B every
    time, and B exceeds (gamma c)^2 by what the docstring's proof adds, no more."""
    rng = np.random.default_rng(int(gamma) % 1000 + len(widths))
    d, G, c = sum(widths), len(widths), 1.0
    B = row_limit_sq(gamma, c, d, G)
    gc = Fraction(gamma) * Fraction(c)
    extra = B - gc * gc
    assert 0 < extra <= gc * gc * Fraction(1, 2 ** 38) + Fraction(d, 4) + 2 * math.sqrt(G) * gc + 4 * G + 1
    rows = [rng.normal(size=d) for _ in range(60)] + [np.eye(d)[0], np.ones(d)]
    fr = rng.choice([1e-9, 0.5, 1 - 1e-9], size=d)
    rows.append((np.arange(d) + fr) / gamma)
    starts = np.concatenate([[0], np.cumsum(widths)])
    for x in rows:
        x = np.asarray(x, np.float64)
        x = x / np.linalg.norm(x) * c * (rng.uniform(0.9, 1.0) if rng.random() < 0.5 else 1.0)
        for coins in range(3):
            sq = 0
            for a, b in zip(starts[:-1], starts[1:], strict=False):
                q = dependent_round(x[None, a:b], gamma, [np.arange(b - a)], np.random.default_rng(coins))
                sq += int((q.astype(object) ** 2).sum())
            assert sq <= B


def test_sensitivity_is_the_limit():
    s = row_checked_gram_sensitivity(4096.0, 1.0, 64, 3)
    B = row_limit_sq(4096.0, 1.0, 64, 3)
    assert s.l2 == float(B) and s.l1 == min(float(B) ** 2, 64.0 * float(B)) and s.dim == 64 * 64
    with pytest.raises(UsageError, match="groups"):
        row_limit_sq(4096.0, 1.0, 3, 4)


def _digits(n=300, parties=3):
    from sqm.data.datasets import load_dataset, scale_rows

    X = scale_rows(load_dataset("digits").X[:n], 1.0)
    return X, VerticalData.split(X, parties)


def test_pca_with_the_check_clips_nothing_and_leaves_out_rows_above_c():
    """Normalised rows: no client clips a sub-row and every record counts (its contribution is in the release);
    a record scaled to 1.01 c is left out: the release equals, bit for bit, the one where that record is zeros
    (the clients' coins are per value in record order, so nothing else changes).  Without the check the clients
    clip sub-rows (per-party bounds c sqrt(n_p / n))."""
    X, data = _digits()
    kw = dict(n_components=3, epsilon=1.0, gamma=4096.0, backend="plain", seed=5)
    m = SQMPCA(**kw, row_norm_check=True).fit(data)
    assert m.clipped_ == [0, 0, 0]
    assert m.report_.l2_sensitivity == float(row_limit_sq(4096.0, 1.0, 64, 3))
    assert f"at most {row_limit_sq(4096.0, 1.0, 64, 3)} count" in m.report_.notes  # the report says so
    assert sum(SQMPCA(**kw).fit(data).clipped_) > 0

    def raw(Y):
        return [int(v) for v in SQMPCA(**kw, row_norm_check=True).fit(VerticalData.split(Y, 3)).raw_]
    Z = X.copy()
    Z[7] = 0
    big = X.copy()
    big[7] *= 1.01 / np.linalg.norm(big[7])
    assert raw(big) == raw(Z)
    assert raw(X) != raw(Z)


def test_pca_with_the_check_real_processes_equal_the_simulation():
    """SQM-PCA with the row norm check through real MPyC processes: the same integers as the in-process
    simulation for the same seeds (one record above c left out in both)."""
    X, data = _digits(200)
    X = X.copy()
    X[3] *= 1.05
    data = VerticalData.split(X, 3)
    kw = dict(n_components=2, epsilon=1.0, gamma=1024.0, seed=9, row_norm_check=True)
    real = SQMPCA(**kw, backend="mpyc").fit(data)
    sim = SQMPCA(**kw, backend="plain").fit(data)
    assert [int(v) for v in real.raw_] == [int(v) for v in sim.raw_]


def test_the_check_is_refused_where_it_does_not_apply():
    from sqm.mechanism.polynomial import logreg_gradient
    from sqm.mechanism.release import SQM
    from sqm.mechanism.sensitivity import gram_sensitivity

    with pytest.raises(UsageError, match="covariance"):
        SQM(logreg_gradient(np.zeros(3)), 1024.0, epsilon=1.0, row_norm_check=True)
    with pytest.raises(UsageError, match="party_bounds"):
        covariance_release(4, 1024.0, 1.0, 1e-5, party_bounds=[0.5, 0.5], row_norm_check=True)
    rel = covariance_release(4, 1024.0, 1.0, 1e-5)
    with pytest.raises(UsageError, match="sensitivity"):
        SQM(rel.polynomial, 1024.0, epsilon=1.0, row_norm_check=True,
            sensitivity=gram_sensitivity(1024.0, rel.bounds_for([2, 2])))


class Suffix(PartyProgram):
    """Client 1 shares a (k, n) array; the parties compute its suffix products; opened to every party."""

    def __init__(self, p, D=None, shape=None):
        self.p, self.D, self.shape = p, D, shape

    async def run(self, ctx):
        p, workers = self.p, _workers(ctx)
        out = {}
        if ctx.pid == 1:
            sh = shamir.share(self.D, ctx.M, ctx.t, p, ctx.rng)
            out = {j: sh[j] for j in workers}
        got = await ctx.send_recv(out, [1] if ctx.pid in workers else [], wire.shares(self.shape, p), "values")
        Q = await compare.suffix_products(ctx, got[0] if got else None, p, workers, self.shape)
        return await sharing.open_to(ctx, Q, p, range(ctx.M), workers, self.shape, degree=ctx.t)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 9, 16, 37, 62])
def test_suffix_products_of_every_length(k):
    p = 8191
    D = np.random.default_rng(k).integers(0, p, size=(k, 5))
    progs = [Suffix(p, D if i == 1 else None, D.shape) for i in range(4)]
    got = np.asarray(run_in_process(progs, ideal=False)[0]["result"])
    want = np.ones_like(D)
    acc = np.ones(5, dtype=object)
    for i in reversed(range(k)):
        acc = acc * D[i].astype(object) % p
        want[i] = acc.astype(np.int64)
    assert got.tolist() == want.tolist()


def test_pca_job_with_the_check_equals_the_estimator(tmp_path):
    """Job mode (each party reads its own file, the records aligned by id) with ``row_norm_check``: the server
    receives the integers of ``SQMPCA(row_norm_check=True)`` on the same columns with the same seed, no client
    clips, and the task's public parameters carry the option (every party agrees on it)."""
    from sqm.framework.runners import run_job
    from sqm.framework.spec import load_job, write_party_csvs
    from sqm.apps.pca import PCAJobTask

    X, _ = _digits(60, 2)
    X = X[:, :6] / np.max(np.linalg.norm(X[:, :6], axis=1))
    spec = load_job(write_party_csvs(X, tmp_path, 2, min_intersection=1))
    task = PCAJobTask(n_components=2, epsilon=1.0, gamma=1024.0, seed=5, insecure_reproducible=True,
                      row_norm_check=True)
    assert ("row_norm_check", True) in task.public()
    out = run_job(spec, task, backend="plain")
    ref = SQMPCA(n_components=2, epsilon=1.0, gamma=1024.0, seed=5, backend="plain", row_norm_check=True).fit(
        VerticalData.split(X, 2))
    assert list(out[0]["result"]["raw"]) == list(ref.raw_)
    assert [out[j]["result"]["clipped"] for j in (1, 2)] == ref.clipped_ == [0, 0]


class ServerLog(PartyProgram):
    """Runs ``inner`` and records (step, frame) of every message this party receives."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def describe(self) -> str:
        return self.inner.describe()

    async def run(self, ctx):
        orig = ctx.send_recv

        async def send_recv(outgoing, senders, expect, step="message"):
            got = await orig(outgoing, senders, expect, step)
            self.log.extend((step, wire.encode(g)) for g in got)
            return got
        ctx.send_recv = send_recv
        return await self.inner.run(ctx)


def test_the_server_view_of_the_check_does_not_depend_on_the_data():
    """3 clients (the server is no worker): with the same share generators, what the server receives before the
    output's degree reduction is the same bytes for records all within the limit and for records all above it
    (shares it never gets; the redraw bits depend on the random bits only), and nothing at the steps of the
    comparison but those redraw bits."""
    views = []
    for scale in (1, 3):
        X = np.random.default_rng(0).integers(-10, 11, size=(150, 6)) * scale
        job, progs = _job(X, (2, 2, 2), 600, chunk_rows=50)
        log = []
        progs[0] = ServerLog(progs[0], log)
        out = run_in_process(progs, ideal=False, rngs=[np.random.default_rng([7, i]) for i in range(4)])
        norms = (X.astype(np.int64) ** 2).sum(axis=1)
        assert [int(v) for v in out[0]["result"]] == [int(v) for v in job.program.evaluate(X[norms <= 600])]
        views.append(log)
    base = (np.random.default_rng(0).integers(-10, 11, size=(150, 6)).astype(np.int64) ** 2).sum(axis=1)
    assert (base <= 600).sum() > 100 and (9 * base <= 600).sum() < 50
    before = [v[:min(i for i, (s, _) in enumerate(v) if s == "degree reduction")] for v in views]
    assert before[0] == before[1]
    steps = [s for s, _ in before[0]]
    assert "open result" in steps and "random bits" not in steps  # the redraw bits; no bit share, no record share
    assert not any(s in steps for s in ("input shares", "values"))


def test_row_limit_with_the_sharing_check():
    """verify_sharing (every party a worker, the clients' sharings checked before any output opens) and a row
    limit together: the records within the limit, exactly, in the real protocol."""
    rng = np.random.default_rng(5)
    X = rng.integers(-50, 51, size=(120, 6))
    norms = (X.astype(np.int64) ** 2).sum(axis=1)
    limit = int(np.sort(norms)[60])
    prog = SumProgram.gram_program(6)
    job = Job(program=prog, clients=[], col_bounds=[50] * 6, n_records=120, addend_bound=0,
              var_owner=[0, 0, 1, 1, 2, 2], chunk_rows=40, row_limit=limit, verify_sharing=True)
    progs = [EvaluateJob(job)] + [EvaluateJob(job, FixedClient(X[:, 2 * j:2 * j + 2], prog.n_out)) for j in range(3)]
    real = run_in_process(progs, ideal=False)[0]["result"]
    assert [int(v) for v in real] == [int(v) for v in prog.evaluate(X[norms <= limit])]
