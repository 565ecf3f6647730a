"""Streaming evaluation (issue 15): the clients' records go through the BGW protocol in chunks, every party
accumulating its moment shares chunk by chunk; the result is the same integers whatever the chunk size, and
a client's rounding and noise are the same integers as on its whole block."""
import functools

import numpy as np
import pytest

from sqm.mpc.protocols.backend import FixedClient, Job, PlainBackend
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError
from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.program import SumProgram
from sqm.mpc.protocols.stream import ArrayInput, ChunkedInput, chunk_rows, rechunk
from sqm.mechanism.client import QuantizedRows, client_input
from sqm.mechanism.release import SQM
from sqm.mechanism.polynomial import covariance
from sqm.mechanism.rng import make_rng
from sqm.mechanism.vertical import VerticalData


def _blocks(m=53, widths=(2, 3), seed=0, bound=9):
    rng = np.random.default_rng(seed)
    return [rng.integers(-bound, bound + 1, size=(m, w)) for w in widths]


def _job(program, blocks, chunk, n_records=None, addends=None):
    n = sum(b.shape[1] for b in blocks)
    owner = [j for j, b in enumerate(blocks) for _ in range(b.shape[1])]
    clients = [FixedClient(b, program.n_out, None if addends is None else addends[j]) for j, b in enumerate(blocks)]
    return Job(program=program, clients=clients, col_bounds=[9] * n, n_records=n_records or blocks[0].shape[0],
               addend_bound=10 ** 6, var_owner=owner, chunk_rows=chunk)


def _bgw(job):
    """The real BGW protocol over the in-process mailboxes: (result, each party's record)."""
    programs = [EvaluateJob(job.public())] + [EvaluateJob(job.public(), c) for c in job.clients]
    records = run_in_process(programs, ideal=False)
    return records[0]["result"], records


def test_rechunk_regroups_rows_exactly():
    X = np.arange(2 * 23).reshape(23, 2)
    parts = [X[:5], X[5:6], X[6:6], X[6:20], X[20:]]
    got = list(rechunk(parts, 4))
    assert [g.shape[0] for g in got] == [4, 4, 4, 4, 4, 3]
    assert np.array_equal(np.vstack(got), X)
    assert [g.shape[0] for g in rechunk([X], 23)] == [23]
    with pytest.raises(ValueError, match="at least one record"):
        list(rechunk([X], 0))
    assert chunk_rows(117) == (1 << 19) // 117 and chunk_rows(10 ** 9) == 1024


@pytest.mark.parametrize("chunk", [1, 7, 53, 1000])
def test_gram_in_chunks_equals_the_exact_integers(chunk):
    """vec(X^T X) plus the addends, through the real BGW protocol in chunks of 1, 7, 53 (one) and 1000 records:
    exactly the plain integers; a chunk costs one exchange."""
    blocks = _blocks()
    addends = [np.arange(25) - 12, 3 * np.ones(25, np.int64)]
    job = _job(SumProgram.gram_program(5), blocks, chunk, addends=addends)
    got, records = _bgw(job)
    want = PlainBackend().run(job).values
    assert np.array_equal(got, want)
    one = _bgw(_job(SumProgram.gram_program(5), blocks, 1000, addends=addends))[1]
    extra = -(-53 // chunk) - 1
    assert all(r["exchanges"] == o["exchanges"] + extra for r, o in zip(records, one, strict=False))


def test_general_program_and_padding_in_chunks():
    """A program of degrees 0-3 (the constant monomial counts the records) over a record bound above the
    clients' count (zero records pad the last chunks): the same integers for chunks of 4 and of all."""
    rng = np.random.default_rng(3)
    terms = [(), (0,), (1, 4), (2, 2), (0, 3, 4), (1, 1, 2)]
    prog = SumProgram.from_terms(5, 3, terms, [0, 1, 2, 0, 1, 2], rng.integers(-5, 6, size=6))
    blocks = _blocks(m=19, seed=4)
    results = [_bgw(_job(prog, blocks, c, n_records=30))[0] for c in (4, 30)]
    want = PlainBackend().run(_job(prog, blocks, None, n_records=30)).values
    assert np.array_equal(results[0], want) and np.array_equal(results[1], want)
    assert want[0] != 0


def test_quantized_rows_are_the_whole_blocks_integers():
    """A client's chunked rounding and noise equal those made on the whole block by hand (clip_rows; the coins'
    master key, 32 bytes of the generator; dependent_round with block 0's coins, AES-CTR keyed by
    HMAC-SHA256(master, label || 0); then skellam from the generator), for any chunk size, and client_input's."""
    import hashlib
    import hmac

    from randomgen import AESCounter

    from sqm.mechanism.quantize import dependent_round
    from sqm.mechanism.skellam import skellam
    from sqm.mechanism.vertical import clip_rows

    X = np.random.default_rng(0).normal(size=(101, 4)) / 3
    rng = make_rng(7)
    clipped_X, clipped = clip_rows(X, 0.9)
    master = rng.bytes(32)
    key = hmac.new(master, b"sqm rounding coins\x00" + (0).to_bytes(8, "little"), hashlib.sha256).digest()[:16]
    coins = np.random.Generator(AESCounter(key=int.from_bytes(key, "little"))).random((101, 4))
    x_hat = dependent_round(clipped_X, 4096.0, None, coins=coins)
    z = skellam(12.5, 16, rng)
    ref = client_input(X, 0.9, 4096.0, 12.5, 16, make_rng(7))
    assert np.array_equal(ref[0], x_hat) and np.array_equal(ref[1], z) and ref[2] == clipped
    for rows in (1, 10, 101, 500):
        q = QuantizedRows(ArrayInput(X), 0.9, 4096.0, 12.5, 16, make_rng(7))
        chunks = list(q.chunks(rows))
        assert [c.shape[0] for c in chunks] == [min(rows, 101 - s) for s in range(0, 101, rows)]
        assert np.array_equal(np.vstack(chunks), x_hat)
        assert np.array_equal(q.addend(), z) and q.clipped == clipped
    assert clipped > 0


def _sqm(chunk, backend="plain"):
    X = np.random.default_rng(1).normal(size=(300, 7))
    X /= np.linalg.norm(X, axis=1).max()
    data = VerticalData.split(X, 3)
    return SQM(covariance(7), 1024.0, epsilon=1.0, seed=5, backend=backend, chunk_rows=chunk).run(data)


def test_sqm_covariance_same_integers_for_any_chunk_size(monkeypatch):
    """SQM's noisy X^T X with the same seeds: the same integers in chunks of 16 records as in one chunk, through
    real MPyC processes and through the BGW protocol in process, and equal to the ideal simulation."""
    from sqm.mpc.protocols import inprocess

    ideal = _sqm(None).raw
    real = _sqm(16, "mpyc").raw
    monkeypatch.setattr(inprocess, "run_in_process", functools.partial(inprocess.run_in_process, ideal=False))
    bgw = _sqm(16).raw
    assert np.array_equal(real, ideal) and np.array_equal(bgw, ideal)
    with pytest.raises(ValueError, match="chunk_rows"):
        SQM(covariance(7), 1024.0, epsilon=1.0, chunk_rows=0)


class _Liar(ChunkedInput):
    """A stream that declares more records than it produces."""

    def __init__(self, block, n_out):
        self.block, self.n_out = block, n_out
        self.n_rows, self.n_cols = block.shape[0] + 5, block.shape[1]

    def chunks(self, rows):
        yield from ArrayInput(self.block).chunks(rows)

    def addend(self):
        return np.zeros(self.n_out, np.int64)


def test_a_stream_breaking_its_declared_count_is_its_own_bad_input():
    """A client whose stream ends early is refused (its own bad input, exit 6) before the result is opened."""
    blocks = _blocks(m=25)
    job = _job(SumProgram.gram_program(5), blocks, 8)
    liar = [EvaluateJob(job.public(), (lambda b=blocks[1][:20]: _Liar(b, 25)))]
    programs = [EvaluateJob(job.public()), EvaluateJob(job.public(), job.clients[0])] + liar
    with pytest.raises(MPCError) as err:
        run_in_process(programs, ideal=False)
    assert err.value.codes[2] == 6 and "client 2" in str(err.value)
