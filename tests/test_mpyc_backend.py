"""End-to-end: real MPyC party processes over loopback give bit for bit what the plain simulation gives, and the
BGW protocol (run in process over the mailboxes) gives what the ideal functionality gives on every program path:
Gram, general polynomials of degrees 0-3, the public-coefficient gradient, the secure sum."""

import numpy as np
import pytest

from sqm.mpc.protocols.backend import Job, PlainBackend
from sqm.mpc.shares.field import FieldTooSmall
from sqm.mpc.net.launch import MPCError
from sqm.mpc.protocols.mpyc_backend import MPyCBackend
from sqm.mpc.protocols.program import SumProgram
from sqm.mpc.protocols.secure_sum import SumClient, secure_sum
from sqm.mechanism.release import SQM
from sqm.mechanism.polynomial import Polynomial, covariance, logreg_gradient
from sqm.mechanism.vertical import VerticalData


def data(m, n, parties, seed=0):
    X = np.random.default_rng(seed).normal(size=(m, n))
    X /= np.linalg.norm(X, axis=1).max()
    return VerticalData.split(X, parties)


@pytest.fixture
def bgw_in_process(monkeypatch):
    """Backend "plain" runs the real BGW protocol over the in-process mailboxes (``ideal=False``) instead of the
    ideal functionality: the protocol's share arithmetic, checked without starting processes."""
    import functools

    from sqm.mpc.protocols import inprocess
    from sqm.mpc.protocols import sharing

    monkeypatch.setattr(inprocess, "run_in_process", functools.partial(inprocess.run_in_process, ideal=False))
    calls = []
    real = sharing.input_shares

    async def spy(ctx, *a, **k):
        calls.append(ctx.pid)
        return await real(ctx, *a, **k)

    monkeypatch.setattr(sharing, "input_shares", spy)
    return calls  # the parties that shared inputs (the protocol ran, not only the ideal functionality)


def test_covariance_mpyc_equals_plain():
    """Real processes (5 parties) against the in-process simulation; the other protocol paths below run the
    protocol in process (the transport is the same as here and in every other real-process test)."""
    d = data(60, 8, 4, seed=4)
    kw = dict(mu=50.0, seed=11)
    plain = SQM(covariance(8), 1024.0, backend="plain", **kw).run(d)
    secure = SQM(covariance(8), 1024.0, backend="mpyc", **kw).run(d)
    assert list(secure.raw) == list(plain.raw)
    assert secure.backend == "mpyc" and len(secure.bytes_sent) == 5
    assert all(b > 0 for b in secure.bytes_sent)


def _both(make):
    """``make()`` run twice: the BGW protocol in process, then the ideal functionality."""
    import sqm.mpc.protocols.inprocess as ip

    first = make()
    ip.run_in_process.keywords["ideal"] = True
    try:
        return first, make()
    finally:
        ip.run_in_process.keywords["ideal"] = False


def test_covariance_protocol_equals_ideal(bgw_in_process):
    d = data(60, 8, 2, seed=2)
    protocol, ideal = _both(lambda: SQM(covariance(8), 1024.0, backend="plain", mu=50.0, seed=11).run(d))
    assert list(protocol.raw) == list(ideal.raw)
    assert sorted(bgw_in_process) == [0, 1, 2]  # one protocol run: every party shared (or received) inputs


def test_general_polynomial_protocol_equals_ideal(bgw_in_process):
    # degrees 0..3 in one program: constant, linear, inner-product and a degree-3 product (extra reshare)
    p = Polynomial.from_exponents([[2.0, -0.5, 3.0], [1.0, 1.25]],
                                  [[[2, 0, 1], [0, 1, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 3]]])
    d = data(25, 3, 3, seed=5)
    kw = dict(mu=20.0, seed=4, row_norm_bound=1.0)
    protocol, ideal = _both(lambda: SQM(p, 64.0, backend="plain", **kw).run(d))
    assert list(protocol.raw) == list(ideal.raw)


def test_logreg_gradient_protocol_equals_ideal(bgw_in_process):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.1
    y = (rng.random(40) < 0.5).astype(float)
    d = VerticalData([X[:, :3], np.c_[X[:, 3:], y]])
    g = logreg_gradient(rng.normal(size=6) * 0.2)
    kw = dict(mu=30.0, seed=9, row_norm_bound=2.0)
    protocol, ideal = _both(lambda: SQM(g, 512.0, backend="plain", **kw).run(d))
    assert list(protocol.raw) == list(ideal.raw)


def test_secure_sum(bgw_in_process):
    arrays = [np.arange(10) * (j + 1) - 7 for j in range(3)]
    protocol, ideal = _both(lambda: secure_sum(arrays, bound=1000, backend="plain"))
    assert list(protocol.values) == list(ideal.values) == list(np.sum(arrays, axis=0))
    assert sorted(bgw_in_process) == [0, 1, 2, 3]


def test_overflowing_job_is_refused_before_start():
    job = Job(program=SumProgram.gram_program(2), clients=[SumClient(np.zeros(4, np.int64))] * 2,
              col_bounds=[2 ** 40, 2 ** 40], n_records=10)
    with pytest.raises(FieldTooSmall, match=r"needs a \d+-bit field"):
        MPyCBackend().run(job)


def test_mismatched_record_counts_refused():
    from sqm.mechanism.client import QuantizingClient

    clients = [QuantizingClient(np.zeros((5, 1)), 16.0, 1.0, 0.0, 4, 1),
               QuantizingClient(np.zeros((6, 1)), 16.0, 1.0, 0.0, 4, 2)]
    job = Job(program=SumProgram.gram_program(2), clients=clients, col_bounds=[16, 16], n_records=6,
              var_owner=[0, 1])
    with pytest.raises(MPCError, match="clients disagree on record count"):
        MPyCBackend().run(job)


# a party killed inside the job: tests/test_faults.py (kill-compute), which also checks nothing is left behind


class IdClient:
    """A client whose records carry ids: returns (block, addend, digest of its id column)."""

    def __init__(self, block, ids):
        self.block, self.ids = block, ids

    def __call__(self):
        import hashlib

        digest = hashlib.sha256(np.asarray(self.ids, np.int64).tobytes()).digest()
        return self.block, np.zeros(4, np.int64), digest


@pytest.mark.parametrize("backend", ["plain"])  # between processes: tests/test_jobfile.py's misaligned ids
def test_misaligned_ids_refused_and_aligned_ids_run(backend):
    ones = np.ones((3, 1), np.int64)
    job = Job(program=SumProgram.gram_program(2), col_bounds=[1, 1], n_records=3, var_owner=[0, 1], align_ids=True,
              clients=[IdClient(ones, [1, 2, 3]), IdClient(ones, [1, 3, 2])])
    error = MPCError  # the same refusal, the same error, in process and between processes
    with pytest.raises(error, match="record ids"):
        (PlainBackend() if backend == "plain" else MPyCBackend()).run(job)
    job.clients[1] = IdClient(ones, [1, 2, 3])
    res = (PlainBackend() if backend == "plain" else MPyCBackend()).run(job)
    assert list(res.values) == [3, 3, 3, 3]
