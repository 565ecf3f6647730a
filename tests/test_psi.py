"""The ECDH private set intersection (sqm.runtime.psi): the group operations, and the n-client protocol against
Python's own set intersection, in process, for 2 to 4 clients with lists of several chunks."""
import gmpy2
import numpy as np
import pytest

from sqm.runtime.inprocess import run_in_process
from sqm.runtime.party import PartyProgram
from sqm.runtime.psi import _A, _P, blind, common_values, hash_ids, n_steps, schedule


def _on_curve(u: bytes) -> bool:
    x = gmpy2.mpz(int.from_bytes(u, "little"))
    return 0 < x < _P and gmpy2.jacobi(x * (x * (x + _A) + 1) % _P, _P) == 1


def test_ids_hash_onto_the_curve_not_its_twist_deterministically():
    ids = [str(i) for i in range(300)] + ["a", "é", "x" * 500]
    pts = hash_ids(ids, len(ids))
    assert pts.shape == (len(ids), 32) and pts.dtype == np.uint8
    assert all(_on_curve(p.tobytes()) for p in pts)  # on Curve25519 itself: no curve/twist bit to test a guess by
    assert np.array_equal(pts, hash_ids(iter(ids)))  # the same ids, the same points (no key yet)
    assert len({p.tobytes() for p in pts}) == len(ids)
    with pytest.raises(ValueError, match="2 ids hashed, 3 expected"):
        hash_ids(["1", "2"], 3)


def test_blindings_commute_and_stay_on_the_curve():
    rng = np.random.default_rng(0)
    k1, k2, k3 = (rng.bytes(32) for _ in range(3))
    p = hash_ids([str(i) for i in range(50)])
    a = blind(k1, blind(k2, blind(k3, p)))
    b = blind(k3, blind(k1, blind(k2, p)))
    assert np.array_equal(a, b)
    assert all(_on_curve(x.tobytes()) for x in blind(k1, p))
    assert not np.array_equal(blind(k1, p), blind(k2, p))


def test_common_values_marks_and_ranks_what_every_list_holds():
    v = {i: bytes([i]) * 32 for i in range(10)}
    lists = {1: [v[3], v[1], v[7], v[0]], 2: [v[7], v[3], v[5]], 3: [v[9], v[3], v[7], v[1]]}
    member, rank = common_values(np.frombuffer(b"".join(sum(lists.values(), [])), np.uint8).reshape(-1, 32),
                                 {o: len(x) for o, x in lists.items()})
    assert [list(member[o]) for o in (1, 2, 3)] == [[True, False, True, False], [True, True, False],
                                                     [False, True, True, False]]
    assert list(rank[1]) == [0, 1] and list(rank[2]) == [1, 0] and list(rank[3]) == [0, 1]  # v3 < v7


def test_the_schedule_blinds_every_chunk_once_by_every_client_in_ring_order():
    sizes, chunk = {1: 23, 2: 5, 3: 40}, 7
    seen = {}
    for s in range(n_steps(sizes, chunk)):
        for i in sizes:
            for h, o, k in schedule(i, s, sizes, chunk):
                seen.setdefault((o, k), []).append((s, h, i))
    for o, size in sizes.items():
        for k in range(-(-size // chunk)):
            hops = seen.pop((o, k))
            assert [h for _, h, _ in hops] == [0, 1, 2]
            assert [i for _, _, i in hops] == [o, o % 3 + 1, (o + 1) % 3 + 1]  # owner, then around the ring
            assert [s for s, _, _ in hops] == [k, k + 1, k + 2]  # one hop per step, pipelined
    assert not seen


class PSIProgram(PartyProgram):
    """Party ``pid`` of a bare PSI over ``ids`` (None at the server); returns the member mask and ranks."""

    def __init__(self, ids, sizes, chunk, seed):
        self.ids, self.sizes, self.chunk, self.seed = ids, sizes, chunk, seed

    async def run(self, ctx):
        from sqm.runtime.psi import hash_ids, intersect

        if ctx.is_server and self.ids is None:
            return {"m": await intersect(ctx, self.sizes, chunk=self.chunk)}
        rng = np.random.default_rng([self.seed, ctx.pid])
        got = await intersect(ctx, self.sizes, hash_ids(self.ids), rng.bytes(32), rng, chunk=self.chunk)
        return {"member": got.member, "rank": got.rank, "m": got.size}


def run_psi(sets, chunk=7, seed=0, runner=run_in_process, server_set=None, **kw):
    sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
    if server_set is not None:
        sizes[0] = len(server_set)
    progs = [PSIProgram(None if server_set is None else list(server_set), sizes, chunk, seed)]
    progs += [PSIProgram(list(s), sizes, chunk, seed) for s in sets]
    return [r["result"] for r in runner(progs, timeout=120, **kw)]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_each_client_learns_which_of_its_own_ids_every_client_holds_in_one_common_order(n):
    rng = np.random.default_rng(n)
    universe = [str(i) for i in range(120)]
    sets = [[universe[i] for i in sorted(rng.choice(120, size=int(rng.integers(40, 90)), replace=False))]
            for _ in range(n)]
    common = set.intersection(*map(set, sets))
    out = run_psi(sets)
    assert out[0]["m"] == len(common) > 0
    ranks = {}
    for s, r in zip(sets, out[1:]):
        assert r["m"] == len(common)
        assert [x in common for x in s] == list(r["member"])
        assert all(r["rank"][k] == -1 for k in range(len(s)) if not r["member"][k])
        mine = {x: int(r["rank"][k]) for k, x in enumerate(s) if r["member"][k]}
        assert sorted(mine.values()) == list(range(len(common)))
        ranks = ranks or mine
        assert mine == ranks  # every client ranks every common id alike


@pytest.mark.parametrize("n,chunk,server_size", [(2, 7, 100), (3, 7, 30), (3, 5, 7), (4, 1 << 14, 60)])
def test_a_server_holding_a_set_of_its_own_learns_which_of_its_ids_every_holder_holds(n, chunk, server_size):
    """The server as a holder (a PBM-VFL job's labels): every holder, the server too, learns which of its own ids
    are in the intersection of all the sets (the server's included), ranked in one common order; lists of
    several chunks, a server list shorter and longer than the clients'."""
    rng = np.random.default_rng(10 + n)
    universe = [f"id{i}" for i in range(150)]
    sets = [[universe[i] for i in sorted(rng.choice(150, size=int(rng.integers(50, 120)), replace=False))]
            for _ in range(n)]
    server = [universe[i] for i in rng.choice(150, size=server_size, replace=False)]
    common = set.intersection(set(server), *map(set, sets))
    out = run_psi(sets, chunk=chunk, server_set=server)
    assert 0 < len(common) < min(map(len, sets))  # the server's set matters
    ranks = None
    for s, r in zip([server] + sets, out):
        assert r["m"] == len(common)
        assert [x in common for x in s] == list(r["member"])
        mine = {x: int(r["rank"][k]) for k, x in enumerate(s) if r["member"][k]}
        assert sorted(mine.values()) == list(range(len(common)))
        ranks = ranks or mine
        assert mine == ranks


def test_disjoint_sets_and_one_chunk_lists():
    out = run_psi([["1", "2"], ["3"], ["1", "3"]], chunk=1 << 14)
    assert out[0]["m"] == 0 and all(r["m"] == 0 and not r["member"].any() for r in out[1:])


@pytest.mark.slow
def test_bench_psi_through_real_processes_writes_its_figures(tmp_path):
    import json

    from sqm.cli.command import main

    out = tmp_path / "psi.json"
    assert main(["bench", "psi", "--ids", "400", "--clients", "2", "--overlap", "0.5", "--json", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())["details"]
    (row,) = rep["rows"]
    assert rep["correct"] and row["intersection"] == 200 and row["clients"] == 2
    assert row["bytes_per_id"] >= 2 * 32  # each id crosses 2 hops as a 32-byte point; the rest is framing
    assert len(row["max_rss_bytes"]) == 3 and rep["target_met"] is None  # no 10^6-id cell in this run


def test_hashing_many_ids_gives_the_event_loop_a_turn_between_batches():
    """The heartbeat task (sqm.runtime.liveness) must run while a client hashes 10^6 ids (11 s): the hashing yields
    between batches, and the result equals hash_ids's."""
    import asyncio

    from sqm.runtime.psi import hash_ids_yielding

    ids = [str(i) for i in range(1000)]
    turns = []

    async def main():
        async def other():
            while True:
                turns.append(1)
                await asyncio.sleep(0)
        task = asyncio.ensure_future(other())
        out = await hash_ids_yielding(iter(ids), len(ids), batch=100)
        task.cancel()
        return out

    out = asyncio.run(main())
    assert np.array_equal(out, hash_ids(ids)) and len(turns) >= 9  # a turn after each of the 10 batches but the last
    with pytest.raises(ValueError, match="1000 ids hashed, 999 expected"):
        asyncio.run(hash_ids_yielding(ids, 999))
