"""Warm parties (sqm.mpc.net.warm): party processes started ahead of a job, their imports done, that the next job
attaches to.  Through real party processes: a warm job releases bit for bit what a cold one does, every process
serves one job only and none outlives the block, a warm party's failure reads as a cold one's, and a command
that is not a party's, or another environment, starts cold."""
from __future__ import annotations

import os

import numpy as np
import pytest

from sqm.errors import UsageError
from sqm.mpc.net.launch import Launch, MPCError, record_jobs, run_parties
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.net.warm import WarmPool, warm_parties


def _table(m: int = 40, d: int = 6) -> np.ndarray:
    i, j = np.arange(m)[:, None], np.arange(d)[None, :]
    return (((i * 7919 + j * 104729 + 1) * 2654435761) % 65 - 32) / 64.0


@pytest.fixture
def pids(monkeypatch):
    """The pid of every process a Launch starts, in order."""
    seen: list[int] = []
    start = Launch.start

    def recording(self, *a, **kw):
        p = start(self, *a, **kw)
        seen.append(p.pid)
        return p
    monkeypatch.setattr(Launch, "start", recording)
    return seen


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie not yet reaped counts as gone
        return f.read().split(") ")[-1].startswith("Z")


@pytest.mark.slow
def test_warm_jobs_release_what_cold_jobs_release_and_no_process_serves_two(pids):
    from sqm.apps.pca import SQMPCA

    X = _table()
    cold = SQMPCA(2, backend="mpyc", seed=5).fit(X)
    with warm_parties() as pool, record_jobs() as jobs:
        fits = [SQMPCA(2, backend="mpyc", seed=5).fit(X) for _ in range(3)]
        idle = [p for _, p in pool._idle]
    for m in fits:  # bit for bit: the same released integers give the same floats
        assert np.array_equal(m.components_, cold.components_)
        assert np.array_equal(m.explained_variance_, cold.explained_variance_)
    assert [[r["warm"] for r in job] for job in jobs] == [[False] * 3, [True] * 3, [True] * 3]
    assert pool.attached == 6 and pool.cold == 3
    assert len(set(pids)) == len(pids) == 12  # one process per party and job: none reused
    assert len(idle) == 3 and all(_gone(p) for p in pids + [p.pid for p in idle])  # none outlives the block
    for job in jobs[1:]:  # the start a warm job pays: handed its job -> connected, below a cold one's
        for r in job:
            t = r["timeline"]
            assert t["spawned"] <= t["started"] <= t["connected"]


class Refuses(PartyProgram):
    """Client 1 refuses the job at once (a public reason); the others wait for the job's next step."""

    async def run(self, ctx):
        from sqm.mpc.net.abort import ProtocolError

        if ctx.pid == 1:
            raise ProtocolError("client 1 refuses this job: a reason the test reads")
        await ctx.send_recv({}, [1], None, "a step client 1 never reaches")


@pytest.mark.slow
def test_a_warm_party_that_fails_reads_as_a_cold_one():
    def failed():
        with pytest.raises(MPCError) as e:
            run_parties([Refuses() for _ in range(3)], timeout=30, min_clients=2)
        return e.value.codes, str(e.value).splitlines()[0]

    cold = failed()
    with warm_parties() as pool:
        failed()  # fills the pool
        warm = failed()
    assert pool.attached == 3
    assert warm == cold and "client 1 refuses this job: a reason the test reads" in warm[1]


def test_only_party_commands_of_an_idle_environment_start_warm():
    import sys

    pool = WarmPool(1)
    env = dict(os.environ)
    party = [sys.executable, "-m", "sqm.mpc.net.party", "--program", "x"]
    try:
        assert pool.take(party, env, None) is None and pool.cold == 1  # nothing idle yet: cold
        pool.refill(env)  # (no preexec: this test's own child, waited for at close)
        assert pool.take([sys.executable, "-c", "pass"], env, None) is None  # not a party's command
        assert pool.take(party, {**env, "OMP_NUM_THREADS": "7"}, None) is None  # another environment
        assert pool.cold == 2 and len(pool._idle) == 1
        idle = [p for _, p in pool._idle]
    finally:
        pool.close()
    assert len(idle) == 1 and all(p.poll() is not None for p in idle) and not pool._idle  # closed: it exited
    with pytest.raises(UsageError, match="at least one process"):
        WarmPool(0)


@pytest.mark.slow
def test_bench_warm_writes_its_figures(tmp_path):
    """``python -m bench warm``: both sides' jobs counted, every warm job's parties warm, the releases equal; the
    figures in its JSON (no time is asserted: times belong to the benchmark)."""
    import json

    from bench.command import main

    out = tmp_path / "warm.json"
    assert main(["warm", "--repeat", "2", "--rows", "200", "--cols", "4", "--gap", "0.5", "--json", str(out),
                 "-q"]) == 0
    rep = json.loads(out.read_text())["details"]
    assert rep["same_release"] is True and rep["target_seconds"] == 0.15
    assert [rep["summary"][s]["jobs"] for s in ("cold", "warm")] == [2, 2]
    assert all(all(j["warm"]) for j in rep["runs"]["warm"]) and not any(any(j["warm"]) for j in rep["runs"]["cold"])
