"""Membership-hiding alignment (issue 29): the clients' records over the union of their ids, each record's
contribution multiplied inside the protocol by its secret membership of the intersection."""
from pathlib import Path

import numpy as np
import pytest

from bench.attacks import frame_scalars, frame_shape

from sqm.mpc.protocols.backend import Job
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols.context import PartyContext
from sqm.mpc.protocols.program import SumProgram
from sqm.mpc.protocols.psi import Union, union_positions


class MaskedEvaluation(PartyProgram):
    """One evaluation over the union's positions: the server holds the intersection's indicator, each client
    its rows at the union's positions (zeros where it holds no record)."""

    def __init__(self, job, union, block=None, addend=None):
        self.job, self.union, self.block, self.addend = job, union, block, addend

    async def run(self, ctx):
        mine = None if self.block is None else (self.block, self.addend)
        return await PartyContext(ctx, membership=self.union).evaluate(self.job, mine)


def _case(prog, U=300, m=140, widths=(2, 3, 2), seed=0):
    rng = np.random.default_rng(seed)
    ind = np.zeros(U, dtype=bool)
    ind[rng.choice(U, m, replace=False)] = True
    X = rng.integers(-50, 51, size=(U, sum(widths)))
    blocks, start = [], 0
    for w in widths:  # a client's rows: its own records where it holds them (all members), zeros elsewhere
        holds = ind | (rng.random(U) < 0.5)
        b = np.where(holds[:, None], X[:, start:start + w], 0)
        blocks.append(b)
        start += w
    X = np.hstack(blocks)
    addends = [rng.integers(-1000, 1001, size=prog.n_out) for _ in widths]
    owner = [j for j, w in enumerate(widths) for _ in range(w)]
    job = Job(program=prog, clients=[], col_bounds=[50] * X.shape[1], n_records=m, addend_bound=3000,
              var_owner=owner, chunk_rows=64)
    programs = [MaskedEvaluation(job, Union(U, m, indicator=ind))]
    programs += [MaskedEvaluation(job, Union(U, m), b, a) for b, a in zip(blocks, addends, strict=False)]
    expected = prog.evaluate(X[ind]) + sum(a.astype(object) for a in addends)
    return programs, expected


PROGRAMS = {
    "gram": SumProgram.gram_program(7),
    "degree 0-2": SumProgram.from_terms(7, 3, [(), (0,), (1, 4), (2, 2), (6,), (3, 5)], [0, 1, 1, 2, 2, 0],
                                        [3, -2, 5, 1, 7, -1]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("widths", [(2, 3, 2), (3, 4)])
def test_masked_evaluation_counts_the_intersection_only(name, widths):
    """The BGW protocol over in-memory mailboxes (every frame a real party would exchange) and the ideal
    functionality both give the program over the intersection's records plus the addends, exactly; with
    3 clients the clients alone compute, with 2 the server is a worker too."""
    prog = PROGRAMS[name]
    programs, expected = _case(prog, widths=widths)
    for ideal in (False, True):
        got = run_in_process(programs, min_clients=2, ideal=ideal)[0]["result"]
        assert [int(v) for v in got] == [int(v) for v in expected], (name, widths, ideal)


@pytest.mark.slow
def test_masked_evaluation_through_real_processes():
    from sqm.mpc.net.launch import run_parties

    programs, expected = _case(SumProgram.gram_program(7), U=500, m=333)
    got = run_parties(programs, min_clients=2)[0]["result"]
    assert [int(v) for v in got] == [int(v) for v in expected]


def test_union_positions_and_indicator():
    """The server's answer: every list's positions in the union (sorted values), and which are in all lists."""
    rng = np.random.default_rng(1)
    pool = rng.integers(0, 256, size=(40, 32), dtype=np.uint8)
    sets = {1: [0, 1, 2, 3, 10, 11], 2: [2, 3, 4, 10, 20], 3: [3, 10, 2, 30, 31, 32, 33]}
    values = np.concatenate([pool[v] for v in sets.values()])
    position, indicator = union_positions(values, {c: len(v) for c, v in sets.items()})
    union = sorted({i for v in sets.values() for i in v}, key=lambda i: pool[i].tobytes())
    assert indicator.shape == (len(union),)
    for c, v in sets.items():
        assert [union[k] for k in position[c]] == v
    assert sorted(union[k] for k in np.flatnonzero(indicator)) == [2, 3, 10]


# ----- jobs ---------------------------------------------------------------------------------------------------

def _grid_universe(m=229, n=6, seed=0):
    """Values on the 1/1024 grid (gamma 1024 rounds them exactly: no rounding coin changes anything) with row
    norms far below every client's bound (nothing clipped)."""
    return np.random.default_rng(seed).integers(-40, 41, size=(m, n)) / 1024.0


def _jobs(tmp_path, sets=None):
    import os

    from sqm.framework.spec import load_job, write_job
    from test_alignment import overlap_sets, write_parties

    X = _grid_universe()
    sets = sets or overlap_sets()[0]
    reveal = load_job(write_parties(tmp_path, X, sets, min_intersection=50))
    hide = load_job(write_job(os.path.join(tmp_path, "hide.json"), reveal.addresses,
                              [p.file for p in reveal.parties[1:]], min_intersection=50, hide_membership=True))
    return X, sets, reveal, hide


def _noise_free(recs, rows_per_client, cols_per_client, seed=5):
    """The released integers less every client's noise share, regenerated from the (test-only) seed: client j's
    AES-CTR stream after the 32 bytes that key its rounding coins (sqm.mechanism.coins), whatever its row count."""
    from sqm.mechanism.rng import make_rng, spawn_seeds
    from sqm.mechanism.skellam import skellam

    rep = recs[0]["result"]["report"]
    n = len(rows_per_client)
    mu_share = float(rep["mu"]) / n
    raw = np.array([int(v) for v in recs[0]["result"]["raw"]], dtype=object)
    seeds = spawn_seeds(seed, n + 1)
    for j, (_rows, _cols) in enumerate(zip(rows_per_client, cols_per_client, strict=False), start=1):
        rng = make_rng(seeds[j])
        rng.bytes(32)  # the coins' master key
        raw = raw - skellam(mu_share, raw.shape[0], rng).astype(object)
    return raw


def test_hidden_membership_linreg_job_equals_the_revealing_job_in_the_simulation(tmp_path, monkeypatch):
    """The linear-regression job (the joint Gram of features, the constant column and the label, over the union:
    the constant column is 1 on every row, members or not, and the membership still counts members only)."""
    from sqm.framework.runners import run_job
    from sqm.mechanism import client
    from sqm.apps.linreg.estimator import SQMLinearRegression
    from sqm.apps.linreg.job import LinRegJobTask

    monkeypatch.setattr(client.QuantizedRows, "addend", lambda self: np.zeros(self.n_out, dtype=np.int64))
    _, _, reveal, hide = _jobs(tmp_path)
    task = dict(label_column="x5", insecure_reproducible=True, label_range=(-1, 1))
    a = run_job(reveal, LinRegJobTask(SQMLinearRegression(gamma=1024.0, seed=5), **task), backend="plain")
    b = run_job(hide, LinRegJobTask(SQMLinearRegression(gamma=1024.0, seed=5), **task), backend="plain")
    assert [int(v) for v in a[0]["result"]["raw"]] == [int(v) for v in b[0]["result"]["raw"]]
    assert np.allclose(a[0]["result"]["coef"], b[0]["result"]["coef"])


def test_hidden_membership_job_equals_the_revealing_job_in_the_simulation(tmp_path, monkeypatch):
    """PCA job mode, 3 clients holding 70% of their records in common: hiding membership releases the same
    integers as revealing it (the same exact integer Gram of the intersection; noise set to zero here, and the
    data on gamma's grid, so that no coin differs); the report says membership was hidden and the union size."""
    from sqm.framework.runners import run_job
    from sqm.mechanism import client
    from sqm.apps.pca import PCAJobTask
    from test_alignment import TASK

    monkeypatch.setattr(client.QuantizedRows, "addend", lambda self: np.zeros(self.n_out, dtype=np.int64))
    X, sets, reveal, hide = _jobs(tmp_path)
    a = run_job(reveal, PCAJobTask(**TASK), backend="plain")
    b = run_job(hide, PCAJobTask(**TASK), backend="plain")
    common = sorted(set(sets[0]) & set(sets[1]) & set(sets[2]))
    Xq = np.rint(X[[i - 1000 for i in common]] * 1024).astype(np.int64)
    exact = [int(v) for v in (Xq.T @ Xq).reshape(-1)]
    assert [int(v) for v in a[0]["result"]["raw"]] == exact == [int(v) for v in b[0]["result"]["raw"]]
    U, S = len(set().union(*map(set, sets))), sum(map(len, sets))
    records = {"1": len(sets[0]), "2": len(sets[1]), "3": len(sets[2])}
    assert b[0]["result"]["alignment"] == {"records": records, "intersection": len(common), "union": U,
                                           "positions": S, "membership": "hidden"}
    for rec in b[1:]:  # told neither U nor m (issue 43): only the sizes and S, a function of them
        assert rec["result"]["alignment"] == {"records": records, "positions": S, "membership": "hidden"}
        assert "n_records" not in rec["result"]
    assert "membership hidden" in b[0]["result"]["report"]["notes"]


@pytest.mark.slow
def test_hidden_membership_job_through_real_processes(tmp_path):
    """The same through real party processes, with every client's noise: after taking out each client's noise
    share (regenerated from the test-only seed), both modes released the exact Gram of the intersection."""
    from sqm.framework.runners import run_job
    from sqm.apps.pca import PCAJobTask
    from test_alignment import COLS, TASK

    X, sets, reveal, hide = _jobs(tmp_path)
    common = sorted(set(sets[0]) & set(sets[1]) & set(sets[2]))
    U = len(set().union(*map(set, sets)))
    Xq = np.rint(X[[i - 1000 for i in common]] * 1024).astype(np.int64)
    exact = [int(v) for v in (Xq.T @ Xq).reshape(-1)]
    a = run_job(reveal, PCAJobTask(**TASK))
    b = run_job(hide, PCAJobTask(**TASK))
    assert [int(v) for v in _noise_free(a, [len(common)] * 3, COLS)] == exact
    S = sum(map(len, sets))  # the clients round the S positions their union is placed over
    assert [int(v) for v in _noise_free(b, [S] * 3, COLS)] == exact
    assert b[0]["result"]["alignment"]["union"] == U and "union" not in b[1]["result"]["alignment"]
    assert b[1]["result"]["alignment"]["positions"] == S


def test_union_table_buckets_give_the_placed_rows_in_any_chunks_and_parts(tmp_path):
    """sqm.framework.union_table.place: 5,000 records of a Parquet file read in chunks, placed at random positions of
    a union of 12,000 in 7 buckets; every chunk size and every part gives exactly the rows of the in-memory
    placement; a pickled part (a shard worker's copy) reads the same rows and cannot remove the buckets, which
    the placing table's close removes."""
    import os
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sqm.framework import union_table
    from sqm.framework.table_stream import scan_table

    rng = np.random.default_rng(0)
    n, U = 5000, 12000
    X = rng.normal(size=(n, 3))
    path = os.path.join(tmp_path, "p.parquet")
    pq.write_table(pa.table({"id": np.sort(rng.choice(10 ** 6, n, replace=False)), "a": X[:, 0], "b": X[:, 1],
                             "c": X[:, 2]}), path, row_group_size=1000)
    pos = rng.choice(U, n, replace=False)
    table = union_table.place(scan_table(path, "id"), pos, U, buckets=7, min_bucket_rows=100)
    ref = np.zeros((U, 3))
    ref[pos] = X
    assert len(table.edges) == 8
    for rows in (1, 999, 1715, 12000, 50000):
        chunks = list(table.chunks(rows))
        assert np.array_equal(np.vstack(chunks), ref) and all(c.shape[0] == rows for c in chunks[:-1])
    part = table.part(1234, 9000)
    assert np.array_equal(np.vstack(list(part.chunks(333))), ref[1234:9000])
    copy = pickle.loads(pickle.dumps(part))
    assert np.array_equal(np.vstack(list(copy.chunks(500))), ref[1234:9000])
    copy.close()
    assert os.path.isdir(table.folder.path)
    table.close()
    assert not os.path.exists(table.folder.path)
    with pytest.raises(ValueError, match="4999 union positions"):
        union_table.place(scan_table(path, "id"), pos[:-1], U)


def test_a_streamed_file_is_placed_over_the_union_in_buckets_on_disk(tmp_path, monkeypatch):
    """A PCA job's Parquet files sorted by id are read in chunks (sqm.framework.table_stream); hiding membership keeps
    them streamed: each client sorts its records into position buckets on disk (sqm.framework.union_table, here 5
    buckets of at least 16 positions) and reads them back bucket by bucket.  The release is bit for bit that of
    the same data from shuffled CSV files, which are read whole and placed in memory; the bucket folders are gone
    after the job."""
    import os

    from sqm.framework import union_table
    from sqm.framework.runners import simulate
    from sqm.framework.spec import load_job, write_job
    from sqm.apps.pca import PCAJobTask
    from test_alignment import TASK, overlap_sets, write_parties

    monkeypatch.setattr(union_table, "BUCKETS", 5)
    monkeypatch.setattr(union_table, "MIN_BUCKET_ROWS", 16)
    placed = []
    place = union_table.place
    monkeypatch.setattr(union_table, "place", lambda *a, **k: placed.append(place(*a, **k)) or placed[-1])
    X, sets = _grid_universe(), overlap_sets()[0]
    raws = []
    for fmt in ("csv", "parquet"):
        reveal = load_job(write_parties(tmp_path / fmt, X, sets, fmt=fmt, min_intersection=50))
        hide = load_job(write_job(os.path.join(tmp_path, fmt, "hide.json"), reveal.addresses,
                                  [p.file for p in reveal.parties[1:]], min_intersection=50, hide_membership=True))
        raws.append([int(v) for v in simulate(hide, PCAJobTask(**TASK, chunk_rows=64))[0]["result"]["raw"]])
        assert len(placed) == (0 if fmt == "csv" else 3)
    assert raws[0] == raws[1]
    S = sum(map(len, sets))  # the union placed over the sum of the set sizes
    assert all(t.n_rows == S and len(t.edges) == 6 for t in placed)
    assert not any(os.path.exists(t.folder.path) for t in placed)


def test_hiding_membership_is_refused_where_it_is_not_offered(tmp_path):
    from sqm.framework.party import party_program
    from sqm.errors import UsageError

    _, _, _, hide = _jobs(tmp_path)
    from sqm.apps.inference.job import ScoringJobTask

    with pytest.raises(UsageError, match="does not offer it"):
        party_program(hide, 1, ScoringJobTask.__new__(ScoringJobTask))


@pytest.mark.slow
def test_hidden_membership_with_shard_workers_equals_one_process_per_party(tmp_path):
    """Membership hiding and 2 shard workers per party together, through real processes: each shard's session
    gets the server's indicator of its own positions; the release is bit for bit the unsharded hiding job's,
    with the sharing check too (every party is then a worker, the server included), and from Parquet files read in
    chunks (each worker reads its positions from its party's bucket files: sqm.framework.union_table)."""
    import os

    from sqm.framework.runners import run_job
    from sqm.framework.spec import load_job, write_job
    from sqm.apps.pca import PCAJobTask
    from sqm.mpc.net.launch import free_ports
    from test_alignment import TASK

    _, _, _, hide = _jobs(tmp_path)
    ports = free_ports(4 + 8)
    workers = [[f"127.0.0.1:{p}" for p in ports[4 + 2 * i:6 + 2 * i]] for i in range(4)]
    both = load_job(write_job(os.path.join(tmp_path, "both.json"), [f"127.0.0.1:{p}" for p in ports[:4]],
                              [p.file for p in hide.parties[1:]], min_intersection=50, hide_membership=True,
                              workers=2, worker_addresses=workers))
    from test_alignment import overlap_sets, write_parties

    streamed = load_job(write_parties(tmp_path / "pq", _grid_universe(), overlap_sets()[0], fmt="parquet"))
    ports = free_ports(4 + 8)
    pq = load_job(write_job(os.path.join(tmp_path, "pq", "both.json"), [f"127.0.0.1:{p}" for p in ports[:4]],
                            [p.file for p in streamed.parties[1:]], min_intersection=50, hide_membership=True,
                            workers=2, worker_addresses=[[f"127.0.0.1:{p}" for p in ports[4 + 2 * i:6 + 2 * i]]
                                                         for i in range(4)]))
    a = run_job(hide, PCAJobTask(**TASK, chunk_rows=64))
    b = run_job(both, PCAJobTask(**TASK, chunk_rows=64))
    c = run_job(both, PCAJobTask(**TASK, chunk_rows=64, verify_sharing=True))  # the sharing check too
    d = run_job(pq, PCAJobTask(**TASK, chunk_rows=64))  # Parquet read in chunks: each worker reads its buckets
    assert [int(v) for v in a[0]["result"]["raw"]] == [int(v) for v in b[0]["result"]["raw"]] == \
        [int(v) for v in c[0]["result"]["raw"]] == [int(v) for v in d[0]["result"]["raw"]]
    assert all(len(r["shard_workers"]) == 2 for r in b) and b[0]["result"]["alignment"]["membership"] == "hidden"
    # the secure row norm check on top: each record's bit is its membership times [within the limit], in every
    # shard's session alike
    e = run_job(hide, PCAJobTask(**TASK, chunk_rows=64, row_norm_check=True))
    f = run_job(both, PCAJobTask(**TASK, chunk_rows=64, row_norm_check=True))
    assert [int(v) for v in e[0]["result"]["raw"]] == [int(v) for v in f[0]["result"]["raw"]]


# ----- what a client sees ----------------------------------------------------------------------------------------

def _scenario(flip: bool):
    """Client 1 holds ids 1000..1199 in both scenarios, the same data; clients 2 and 3 hold 150 ids each, 100 of
    client 1's (the intersection) plus 50 of their own.  Which 100 of client 1's ids are in the intersection
    differs between the scenarios (the first or the last 100); every size is the same: |S_j|, U and m."""
    mine = list(range(1000, 1200))
    common = mine[100:] if flip else mine[:100]
    return [mine, sorted(common + list(range(5000, 5050))), sorted(common + list(range(6000, 6050)))], common


def _swapped(swap: bool):
    """Issue 43's rerun attack: as :func:`_scenario` (the first 100 of client 1's ids in common), and with ``swap``
    client 1's id 1000, a member, replaced by 6400, an id nobody else holds: m falls from 100 to 99 and U rises
    from 300 to 301, while every set size, hence S = 500, stays the same."""
    sets, common = _scenario(False)
    if swap:
        sets[0] = sorted(sets[0][1:] + [6400])
        common = common[1:]
    return sets, common


_signature, _scalars = frame_shape, frame_scalars  # what a client's two views are compared on (bench.attacks)


def recorded_views(tmp_path, X, task, scenarios=None):
    """Client 1's frames in a membership-hiding job of ``task`` through real processes, in two scenarios (default:
    the two of :func:`_scenario`; X: the universe's rows, id 1000 + r at row r): per scenario (frames, (sets,
    common), the parties' records)."""
    import os

    from sqm.framework.party import job_programs
    from sqm.framework.spec import load_job, write_job
    from sqm.mpc.net import wire
    from sqm.mpc.net.launch import run_parties
    from test_alignment import write_parties
    from test_psi_view import Recording

    out = []
    for k, (sets, common) in enumerate(scenarios or [_scenario(False), _scenario(True)]):
        folder = tmp_path / str(k)
        reveal = load_job(write_parties(folder, X, sets, min_intersection=50))
        spec = load_job(write_job(os.path.join(folder, "hide.json"), reveal.addresses,
                                  [p.file for p in reveal.parties[1:]], min_intersection=50, hide_membership=True))
        path = str(folder / "frames1.bin")
        progs = job_programs(spec, task)
        progs[1] = Recording(progs[1], path)
        recs = run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
        frames = [(pc, peer, wire.decode(b)) for pc, peer, b in sorted(wire.decode(Path(path).read_bytes()),
                                                                       key=lambda e: e[:2])]
        out.append((frames, (sets, common), recs))
    return out


def check_client_view(runs, S: int = 500):
    """What every test of a client's recorded view asserts (client 1, two scenarios of ``runs``): the frames have the
    same structure step by step and the same values wherever they are not arrays (counts, digests, verdicts); the
    PSI's answer holds only client 1's positions, distinct, in 0..S-1; its result says the sizes and S alone;
    every array of field elements it receives is uniform on [0, p) (mean of v / p within 5 standard errors of
    1/2); the server's S indicator shares it receives are uncorrelated with the true membership of the positions
    (|r| < 5 / sqrt(S)).  Returns the indicator arrays (per scenario) for further checks."""
    from test_psi_view import _arrays

    views, truths = [f for f, _, _ in runs], [t for _, t, _ in runs]
    assert [(pc, peer, _signature(f)) for pc, peer, f in views[0]] == \
        [(pc, peer, _signature(f)) for pc, peer, f in views[1]]
    assert [_scalars(f) for _, _, f in views[0]] == [_scalars(f) for _, _, f in views[1]]
    for _, (sets, _), recs in runs:
        res = recs[1]["result"]
        assert res["alignment"] == {"records": {"1": len(sets[0]), "2": len(sets[1]), "3": len(sets[2])},
                                    "positions": S, "membership": "hidden"}
        assert "n_records" not in res
    out = []
    for frames, (sets, common) in zip(views, truths, strict=False):
        field = np.concatenate([a.reshape(-1) for _, _, f in frames for a in _arrays(f)
                                if a.dtype == np.int64 and a.size]).astype(np.float64)
        u = field / (field.max() + 1)  # the field's p, from below: the largest of many uniform values
        assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size), u.mean()
        answers = [f for _, peer, f in frames if isinstance(f, dict) and "position" in f]
        assert len(answers) == 1 and set(answers[0]) == {"position"}
        pos = answers[0]["position"].astype(np.int64)
        assert pos.shape == (len(sets[0]),) and len(set(pos.tolist())) == pos.size and pos.max() < S
        truth = _membership_over_positions(sets, set(common), pos, S)
        assert truth.sum() == len(common)
        dealt = [a for _, peer, f in frames if peer == 0 for a in _arrays(f) if a.dtype == np.int64 and a.shape == (S,)]
        ind = dealt[0] if len(dealt) == 1 else np.concatenate(
            [a.reshape(-1) for _, peer, f in frames if peer == 0 for a in _arrays(f) if a.dtype == np.int64])
        assert ind.shape == (S,)
        r = np.corrcoef(ind.astype(np.float64), truth)[0, 1]
        assert abs(r) < 5 / np.sqrt(S), r
        out.append(ind)
    return out


@pytest.mark.slow
def test_a_clients_view_does_not_depend_on_which_of_its_records_are_in_the_intersection(tmp_path):
    """Every frame client 1 receives in a membership-hiding PCA job, through real processes, recorded in two
    scenarios that differ only in which of its records are in the intersection (same sizes): what
    :func:`check_client_view` asserts.  The positions it is given are tested over many alignments below; the
    blinded ids are the PSI's (tests/test_psi_view.py)."""
    from sqm.apps.pca import PCAJobTask
    from test_alignment import TASK

    check_client_view(recorded_views(tmp_path, _grid_universe(m=6000), PCAJobTask(**TASK)))


@pytest.mark.slow
def test_a_client_that_swaps_one_record_for_an_id_nobody_holds_learns_nothing(tmp_path):
    """Issue 43's attack 6: a client reruns the alignment with one of its records swapped for an id nobody holds and
    compares.  Before, every client was told m and U (100 and 300, then 99 and 301: the record's membership, 12/12);
    now, recorded through real processes, the two views have the same structure and the same values wherever they
    are not arrays, the same result, and uniform shares (:func:`check_client_view`): nothing it receives depends on
    m or U.  The server's own result does change (it knows m)."""
    from sqm.apps.pca import PCAJobTask
    from test_alignment import TASK

    runs = recorded_views(tmp_path, _grid_universe(m=6000), PCAJobTask(**TASK), [_swapped(False), _swapped(True)])
    check_client_view(runs)
    assert [r[2][0]["result"]["alignment"]["intersection"] for r in runs] == [100, 99]
    assert [r[2][0]["result"]["alignment"]["union"] for r in runs] == [300, 301]


def _membership_over_positions(sets, common, position, S: int) -> np.ndarray:
    """The intersection's indicator over the S positions, rebuilt by the test from client 1's answer (its positions,
    in the order of its shuffled list) and its shuffle, regenerated from the test-only seed 5 (no party holds the
    placement and the membership both but the server)."""
    from sqm.framework.alignment import _psi_secrets

    _, rng = _psi_secrets(5, 1)  # the job's seed, as the alignment uses it (sqm.framework.alignment)
    perm = rng.permutation(len(sets[0]))
    mine = np.empty(len(sets[0]), dtype=np.int64)
    mine[perm] = position  # the r-th of its ids (canonical order: sorted) at mine[r]
    truth = np.zeros(S)
    truth[[mine[r] for r, i in enumerate(sets[0]) if i in common]] = 1.0
    return truth


def _positions_over_runs(flip: bool, runs: int, leak: bool = False):
    """Client 1's union positions (normalised by U) of its records in and out of the intersection, over ``runs``
    alignments with fresh keys (seeded, test only), through the PSI over in-memory mailboxes.  ``leak``: a broken
    server that orders the union with the intersection first (the test must see it)."""
    from sqm.mpc.protocols import psi
    from sqm.mpc.protocols.inprocess import run_in_process
    from sqm.mpc.shares.randomness import secure_generator

    sets, common = _scenario(flip)
    sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
    points = {j: psi.hash_ids([str(i) for i in s]) for j, s in enumerate(sets, start=1)}
    common = set(common)
    inside, outside = [], []

    class Align(PartyProgram):
        def __init__(self, j, run):
            self.j, self.run_ = j, run

        async def run(self, ctx):
            if self.j == 0:
                return await psi.intersect(ctx, sizes, hide_membership=True)
            g = secure_generator(1000 * self.run_ + self.j)
            return await psi.intersect(ctx, sizes, points[self.j], g.bytes(32), g, hide_membership=True)

    real = psi.place_union

    def members_first(indicator, S, rng):  # a leak: the members take the lowest of the random positions
        place, m = np.sort(real(indicator, S, rng)), int(indicator.sum())
        out = np.empty_like(place)
        out[indicator], out[~indicator] = place[:m], place[m:]
        return out

    psi.place_union = members_first if leak else real
    try:
        for run in range(runs):
            recs = run_in_process([Align(j, run) for j in range(4)], min_clients=2)
            u = recs[1]["result"]
            for i, pos in zip(sets[0], u.position, strict=False):
                (inside if i in common else outside).append(pos / u.size)
    finally:
        psi.place_union = real
    return np.array(inside), np.array(outside)


def test_a_clients_positions_do_not_depend_on_membership():
    """Over 60 alignments with fresh keys per scenario: the union positions client 1 is given for its records in
    the intersection and for those outside it have the same distribution (two-sample Kolmogorov-Smirnov,
    p > 0.001, fixed seeds), in both scenarios, and the members' positions agree across the scenarios.  Power:
    a server ordering the intersection first is caught (p < 1e-6)."""
    from scipy.stats import ks_2samp

    a_in, a_out = _positions_over_runs(False, 60)
    b_in, b_out = _positions_over_runs(True, 60)
    assert ks_2samp(a_in, a_out).pvalue > 1e-3 and ks_2samp(b_in, b_out).pvalue > 1e-3
    assert ks_2samp(a_in, b_in).pvalue > 1e-3
    leak_in, leak_out = _positions_over_runs(False, 5, leak=True)
    assert ks_2samp(leak_in, leak_out).pvalue < 1e-6


@pytest.mark.slow
def test_bench_psi_hide_membership(tmp_path):
    """`python -m bench psi --hide-membership` (small): both modes release over the same m records; hiding sends more
    per client (the union's records, the membership's reductions) and the report has a ratio per fraction."""
    from bench import psi_hidden

    rep = psi_hidden.run([0.5], union=400, clients=3, cols=6, workdir=str(tmp_path), progress=False)
    reveal, hide = rep["rows"]
    assert (reveal["mode"], hide["mode"]) == ("reveal", "hide")
    assert reveal["records"] == hide["records"] == 200 and hide["union"] == 400 and reveal["union"] is None
    assert max(hide["bytes_sent"][1:]) > max(reveal["bytes_sent"][1:])
    assert [q["fraction"] for q in rep["ratios"]] == [0.5]


def test_the_job_command_says_membership_was_hidden(tmp_path, capsys):
    """`sqm pca --job` on a hiding job file (simulation): the alignment line gives the union and says that no
    client learns which of its records are in common; the JSON holds the union size."""
    import json

    from sqm.cli.command import main

    _, sets, _, hide = _jobs(tmp_path)
    out = tmp_path / "out.json"
    assert main(["pca", "--job", hide.path, "--components", "2", "--epsilon", "1", "--backend", "plain",
                 "--json", str(out)]) == 0
    U = len(set().union(*map(set, sets)))
    printed = capsys.readouterr().out
    assert f"record alignment hiding membership: the clients hold 143, 143, 143 records, {U:,} in their union" \
        in printed and "no client learns which of its records they are" in printed
    doc = json.loads(out.read_text())
    assert doc["alignment"]["union"] == U and doc["alignment"]["membership"] == "hidden"
    jsonschema = pytest.importorskip("jsonschema")
    from sqm.cli import output

    jsonschema.Draft202012Validator(output.schema()).validate(doc)  # the schema knows the hidden alignment
