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
