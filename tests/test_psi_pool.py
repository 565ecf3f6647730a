"""A party's own local processes for its record alignment's CPU work (sqm.mpc.protocols.psi_pool): the same values as
its one process, value for value and in order, and through a whole job the same intersection, order and release."""
import asyncio
import csv
import logging
import os
import re
import signal

import numpy as np
import pytest

from sqm.mpc.protocols import psi, psi_pool
from sqm.mpc.protocols.psi_pool import POOL_MIN, PoolFailed, cuts, pooled

SIZES = [0, 1, 5, POOL_MIN - 1, POOL_MIN, POOL_MIN + 3, 3 * POOL_MIN + 1]


@pytest.fixture(scope="module")
def pool():
    p = psi_pool.PSIPool(3, 2)  # 3: sizes that are not a multiple of the processes' count; active only in _in
    yield p
    p.close()


def _points(n: int, seed: int = 0) -> np.ndarray:
    return psi.hash_ids([f"id-{seed}-{i}" for i in range(n)])


def test_cuts_cover_every_value_once_in_order():
    for n, w in [(0, 2), (1, 3), (7, 3), (POOL_MIN + 3, 3)]:
        r = cuts(n, w)
        assert [i for a, b in r for i in range(a, b)] == list(range(n)) and all(b > a for a, b in r)


def test_pooled_blind_off_curve_and_hashing_equal_the_one_process(pool):
    key = bytes(range(32))
    for n in SIZES:
        ids = [f"r{i}" for i in range(n)]
        alone = psi.hash_ids(ids)
        before = pool.values
        assert psi_pool.active(n) is None  # no pool here: this process (the reference)
        ref_hash = asyncio.run(psi.hash_ids_yielding(iter(ids), n))
        ref_blind = psi.blind(key, alone)
        ref_off = psi.off_curve(alone)
        got_hash = asyncio.run(_in(pool, psi.hash_ids_yielding(iter(ids), n)))
        got_unknown = asyncio.run(_in(pool, psi.hash_ids_yielding(iter(ids))))  # count not known: pooled too
        got_blind = _sync_in(pool, psi.blind, key, alone)
        got_off = _sync_in(pool, psi.off_curve, alone)
        assert np.array_equal(got_hash, alone) and np.array_equal(ref_hash, alone)
        assert np.array_equal(got_unknown, alone)
        assert np.array_equal(got_blind, ref_blind) and got_blind.shape == (n, 32)
        assert got_off is None and ref_off is None
        # below POOL_MIN the party's own process does the work (hashing of an unknown count excepted)
        assert pool.values - before == (4 * n if n >= POOL_MIN else n)


def test_pooled_checks_find_the_same_first_bad_value(pool):
    pts = _points(3 * POOL_MIN + 1, 1)
    twist = next(u for u in range(9, 10 ** 4) if psi._symbols(np.frombuffer(u.to_bytes(32, "little"), np.uint8)
                                                                 .reshape(1, 32))[0] == -1)
    for at in [0, POOL_MIN, 2 * POOL_MIN + 5, 3 * POOL_MIN]:  # in the first, a middle and the last part
        for bad in (twist.to_bytes(32, "little"), bytes([0xFF] * 32)):  # a point of the twist; top bit set
            v = pts.copy()
            v[at] = np.frombuffer(bad, np.uint8)
            v[-1] = np.frombuffer(bad, np.uint8)  # a later one too: the first is named
            assert _sync_in(pool, psi.off_curve, v) == psi.off_curve(v) == at
    small = pts.copy()
    small[2 * POOL_MIN] = 0  # u = 0: a point of small order, refused by blind alike
    with pytest.raises(psi.PSIError, match="small order"):
        psi.blind(bytes(32), small)
    with pytest.raises(psi.PSIError, match="small order"):
        _sync_in(pool, psi.blind, bytes(32), small)


def test_the_pool_serves_only_the_task_that_entered_it():
    async def main():
        async def party(workers):
            with pooled(workers, 1) as p:
                await asyncio.sleep(0.01)
                return p, psi_pool.active(POOL_MIN)
        return await asyncio.gather(party(2), party(None))
    (p, seen), (none, other) = asyncio.run(main())
    assert seen is p and none is None and other is None
    assert psi_pool.active(POOL_MIN) is None


def test_a_dead_process_aborts_the_party_naming_it():
    pts = _points(2 * POOL_MIN)
    with pooled(2, 3) as p:
        _sync_in(p, psi.blind, bytes(range(32)), pts)
        for pid in list(p._executor._processes):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(PoolFailed, match=r"client 3: a local process of its record alignment \(PSI\) failed"):
            for _ in range(50):  # the pool notices the death on its next use at the latest
                _sync_in(p, psi.blind, bytes(range(32)), pts)


def _sync_in(pool, fn, *args):
    """``fn(*args)`` with ``pool`` the active one (as inside the party's alignment)."""
    token = psi_pool._ACTIVE.set(pool)
    try:
        return fn(*args)
    finally:
        psi_pool._ACTIVE.reset(token)


async def _in(pool, coro):
    token = psi_pool._ACTIVE.set(pool)
    try:
        return await coro
    finally:
        psi_pool._ACTIVE.reset(token)


# ----- through real processes: a PCA job with 2 workers per party against one process per party ----------------

TASK = dict(n_components=2, epsilon=1.0, gamma=1024.0, seed=5, insecure_reproducible=True)


def _overlapping_job(tmp_path, rows: int = 9000):
    """Three clients whose ids overlap in part (each drops its own tenth of the records): one job file without
    workers and one with 2 per party."""
    from sqm.framework.spec import load_job, write_job, write_party_csvs
    from sqm.mpc.net.launch import free_ports

    X = np.random.default_rng(3).normal(size=(rows, 6)) * 0.3
    spec = load_job(write_party_csvs(X, tmp_path, 3, min_intersection=1))
    files = [p.file for p in spec.parties[1:]]
    for j, f in enumerate(files):
        with open(f) as fh:
            lines = list(csv.reader(fh))
        keep = [ln for k, ln in enumerate(lines[1:]) if k % 10 != j]  # client j+1 lacks ids with k = j mod 10
        with open(f, "w", newline="") as fh:
            csv.writer(fh).writerows([lines[0], *keep])
    ports = free_ports(4 + 8)
    addrs = [f"127.0.0.1:{p}" for p in ports[:4]]
    workers = [[f"127.0.0.1:{p}" for p in ports[4 + 2 * i:6 + 2 * i]] for i in range(4)]
    plain = load_job(write_job(os.path.join(tmp_path, "plain.json"), addrs, files, min_intersection=1))
    sharded = load_job(write_job(os.path.join(tmp_path, "sharded.json"), addrs, files, workers=2,
                                 worker_addresses=workers, min_intersection=1))
    ring = load_job(write_job(os.path.join(tmp_path, "ring.json"), addrs, files, workers=2,
                              worker_addresses=workers, min_intersection=1, alignment_keys="all"))
    return plain, sharded, ring, rows - 3 * (rows // 10)


def _orders(lines: list[str]) -> dict[int, str]:
    """Each client's logged digest of its order of the records in common (the PSI's ranks)."""
    got = [re.search(r"party ([1-3]): record alignment \(PSI\).*order's digest ([0-9a-f]{16})", ln) for ln in lines]
    return {int(g.group(1)): g.group(2) for g in got if g}


@pytest.mark.slow
def test_two_workers_per_party_align_and_release_as_one_process(tmp_path, caplog):
    """Real party processes, 2 workers per party against one process per party: with the threshold's keys the
    alignment runs as 2 bucket PSIs on the parties' shard workers (every party logs it), with every client's key on
    the parties' own local processes (every party logs how many values its 2 processes hashed, blinded or checked);
    both find the same intersection, every client holds it in one order (the digest of the PSI's ranks, equal at
    the 3 clients: bucket after bucket with buckets), and the job releases the same integers as the one-process
    job, so the records line up in the same order."""
    from sqm.apps.pca.job import PCAJobTask
    from sqm.framework.runners import run_job

    plain, sharded, ring, common = _overlapping_job(tmp_path)
    runs, logs = [], []
    for spec in (plain, sharded, ring):
        caplog.clear()
        with caplog.at_level(logging.INFO):  # the parties log at the root logger's level; the launcher shows it
            runs.append(run_job(spec, PCAJobTask(**TASK, chunk_rows=512)))
        logs.append([r.getMessage() for r in caplog.records])
    for other in runs[1:]:
        assert np.array_equal(runs[0][0]["result"]["raw"], other[0]["result"]["raw"])
        for ra, rb in zip(runs[0], other, strict=False):
            assert ra["result"]["alignment"] == rb["result"]["alignment"]
            assert ra["result"]["alignment"]["intersection"] == common
    for lines in logs:
        orders = _orders(lines)
        assert sorted(orders) == [1, 2, 3] and len(set(orders.values())) == 1, lines
    assert not any("local processes" in ln or "buckets" in ln for ln in logs[0])
    assert not any("local processes" in ln for ln in logs[1])  # the buckets' workers did the work, no pool
    for pid in range(4):
        assert sum(f"party {pid}: record alignment in 2 buckets on its shard workers" in ln for ln in logs[1]) == 1
        got = [re.search(rf"party {pid}: record alignment on 2 local processes: ([0-9,]+) values", ln)
               for ln in logs[2]]
        counts = [int(g.group(1).replace(",", "")) for g in got if g]
        assert len(counts) == 1 and counts[0] >= common, logs[2]
