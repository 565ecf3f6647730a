"""Membership-hiding alignment (issue 29): the clients' records over the union of their ids, each record's
contribution multiplied inside the protocol by its secret membership of the intersection."""
import numpy as np
import pytest

from sqm.runtime.backend import Job
from sqm.runtime.inprocess import run_in_process
from sqm.runtime.party import PartyProgram
from sqm.runtime.program import SumProgram
from sqm.runtime.psi import Union, union_positions


class MaskedEvaluation(PartyProgram):
    """One evaluation over the union's positions: the server holds the intersection's indicator, each client
    its rows at the union's positions (zeros where it holds no record)."""

    def __init__(self, job, union, block=None, addend=None):
        self.job, self.union, self.block, self.addend = job, union, block, addend

    async def run(self, ctx):
        ctx.membership = self.union
        mine = None if self.block is None else (self.block, self.addend)
        return await ctx.evaluate(self.job, mine)


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
    programs += [MaskedEvaluation(job, Union(U, m), b, a) for b, a in zip(blocks, addends)]
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
    from sqm.runtime.launch import run_parties

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
    AES-CTR stream after its rounding coins (one per value of every row it rounded)."""
    from sqm.mechanism.rng import make_rng, spawn_seeds
    from sqm.mechanism.skellam import skellam

    rep = recs[0]["result"]["report"]
    n = len(rows_per_client)
    mu_share = float(rep["mu"]) / n
    raw = np.array([int(v) for v in recs[0]["result"]["raw"]], dtype=object)
    seeds = spawn_seeds(seed, n + 1)
    for j, (rows, cols) in enumerate(zip(rows_per_client, cols_per_client), start=1):
        rng = make_rng(seeds[j])
        rng.bit_generator.advance(rows * cols)
        raw = raw - skellam(mu_share, raw.shape[0], rng).astype(object)
    return raw


def test_hidden_membership_job_equals_the_revealing_job_in_the_simulation(tmp_path, monkeypatch):
    """PCA job mode, 3 clients holding 70% of their records in common: hiding membership releases the same
    integers as revealing it (the same exact integer Gram of the intersection; noise set to zero here, and the
    data on gamma's grid, so that no coin differs); the report says membership was hidden and the union size."""
    from sqm.framework.runners import run_job
    from sqm.mechanism import client
    from sqm.methods.pca import PCAJobTask
    from test_alignment import TASK

    monkeypatch.setattr(client.QuantizedRows, "addend", lambda self: np.zeros(self.n_out, dtype=np.int64))
    X, sets, reveal, hide = _jobs(tmp_path)
    a = run_job(reveal, PCAJobTask(**TASK), backend="plain")
    b = run_job(hide, PCAJobTask(**TASK), backend="plain")
    common = sorted(set(sets[0]) & set(sets[1]) & set(sets[2]))
    Xq = np.rint(X[[i - 1000 for i in common]] * 1024).astype(np.int64)
    exact = [int(v) for v in (Xq.T @ Xq).reshape(-1)]
    assert [int(v) for v in a[0]["result"]["raw"]] == exact == [int(v) for v in b[0]["result"]["raw"]]
    U = len(set().union(*map(set, sets)))
    assert b[0]["result"]["alignment"] == {"records": {"1": len(sets[0]), "2": len(sets[1]), "3": len(sets[2])},
                                           "intersection": len(common), "union": U, "membership": "hidden"}
    assert "membership hidden" in b[0]["result"]["report"]["notes"]


@pytest.mark.slow
def test_hidden_membership_job_through_real_processes(tmp_path):
    """The same through real party processes, with every client's noise: after taking out each client's noise
    share (regenerated from the test-only seed), both modes released the exact Gram of the intersection."""
    from sqm.framework.runners import run_job
    from sqm.methods.pca import PCAJobTask
    from test_alignment import COLS, TASK

    X, sets, reveal, hide = _jobs(tmp_path)
    common = sorted(set(sets[0]) & set(sets[1]) & set(sets[2]))
    U = len(set().union(*map(set, sets)))
    Xq = np.rint(X[[i - 1000 for i in common]] * 1024).astype(np.int64)
    exact = [int(v) for v in (Xq.T @ Xq).reshape(-1)]
    a = run_job(reveal, PCAJobTask(**TASK))
    b = run_job(hide, PCAJobTask(**TASK))
    assert [int(v) for v in _noise_free(a, [len(common)] * 3, COLS)] == exact
    assert [int(v) for v in _noise_free(b, [U] * 3, COLS)] == exact
    assert b[0]["result"]["alignment"]["union"] == U and b[1]["result"]["alignment"]["union"] == U


def test_hiding_membership_is_refused_where_it_is_not_offered(tmp_path):
    from sqm.framework.party import party_program
    from sqm.framework.spec import load_job, write_job
    from sqm.methods.linreg.estimator import SQMLinearRegression
    from sqm.methods.linreg.job import LinRegJobTask
    from sqm.methods.pca import PCAJobTask
    from sqm.runtime.errors import UsageError
    from test_alignment import TASK
    import os

    _, _, reveal, hide = _jobs(tmp_path)
    with pytest.raises(UsageError, match="does not offer it"):
        party_program(hide, 1, LinRegJobTask(SQMLinearRegression(), label_column="x5"))
    sharded = load_job(write_job(os.path.join(tmp_path, "both.json"), reveal.addresses,
                                 [p.file for p in reveal.parties[1:]], hide_membership=True, workers=2))
    with pytest.raises(UsageError, match="shard workers"):
        party_program(sharded, 1, PCAJobTask(**TASK))
