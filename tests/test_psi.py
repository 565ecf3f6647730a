"""The ECDH private set intersection (sqm.mpc.protocols.psi): the group operations, and the n-client protocol against
Python's own set intersection, in process, for 2 to 4 clients with lists of several chunks."""
import gmpy2
import numpy as np
import pytest

from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols import psi
from sqm.mpc.protocols.psi import _A, _P, blind, common_values, hash_ids, n_steps, schedule


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

    def __init__(self, ids, sizes, chunk, seed, all_keys=False):
        self.ids, self.sizes, self.chunk, self.seed, self.all_keys = ids, sizes, chunk, seed, all_keys

    async def run(self, ctx):
        from sqm.mpc.protocols.psi import hash_ids, intersect

        if ctx.is_server and self.ids is None:
            return {"m": await intersect(ctx, self.sizes, chunk=self.chunk, all_keys=self.all_keys)}
        rng = np.random.default_rng([self.seed, ctx.pid])
        got = await intersect(ctx, self.sizes, hash_ids(self.ids), rng.bytes(32), rng, chunk=self.chunk,
                              all_keys=self.all_keys)
        return {"member": got.member, "rank": got.rank, "m": got.size}


def run_psi(sets, chunk=7, seed=0, runner=run_in_process, server_set=None, all_keys=False, **kw):
    sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
    if server_set is not None:
        sizes[0] = len(server_set)
    progs = [PSIProgram(None if server_set is None else list(server_set), sizes, chunk, seed, all_keys)]
    progs += [PSIProgram(list(s), sizes, chunk, seed, all_keys) for s in sets]
    return [r["result"] for r in runner(progs, timeout=120, **kw)]


@pytest.mark.parametrize("all_keys", [False, True])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_each_client_learns_which_of_its_own_ids_every_client_holds_in_one_common_order(n, all_keys):
    """Both modes (n = 4 clients, t = 2: every client's key in both), 2 to 4 clients, lists of several chunks."""
    rng = np.random.default_rng(n)
    universe = [str(i) for i in range(120)]
    sets = [[universe[i] for i in sorted(rng.choice(120, size=int(rng.integers(40, 90)), replace=False))]
            for _ in range(n)]
    common = set.intersection(*map(set, sets))
    out = run_psi(sets, all_keys=all_keys)
    assert out[0]["m"] == len(common) > 0
    ranks = {}
    for s, r in zip(sets, out[1:], strict=False):
        assert r["m"] == len(common)
        assert [x in common for x in s] == list(r["member"])
        assert all(r["rank"][k] == -1 for k in range(len(s)) if not r["member"][k])
        mine = {x: int(r["rank"][k]) for k, x in enumerate(s) if r["member"][k]}
        assert sorted(mine.values()) == list(range(len(common)))
        ranks = ranks or mine
        assert mine == ranks  # every client ranks every common id alike


@pytest.mark.parametrize("all_keys", [False, True])
@pytest.mark.parametrize("n,chunk,server_size", [(2, 7, 100), (3, 7, 30), (3, 5, 7), (4, 1 << 14, 60)])
def test_a_server_holding_a_set_of_its_own_learns_which_of_its_ids_every_holder_holds(n, chunk, server_size,
                                                                                      all_keys):
    """The server as a holder (a PBM-VFL job's labels): every holder, the server too, learns which of its own ids
    are in the intersection of all the sets (the server's included), ranked in one common order; lists of
    several chunks, a server list shorter and longer than the clients'."""
    rng = np.random.default_rng(10 + n)
    universe = [f"id{i}" for i in range(150)]
    sets = [[universe[i] for i in sorted(rng.choice(150, size=int(rng.integers(50, 120)), replace=False))]
            for _ in range(n)]
    server = [universe[i] for i in rng.choice(150, size=server_size, replace=False)]
    common = set.intersection(set(server), *map(set, sets))
    out = run_psi(sets, chunk=chunk, server_set=server, all_keys=all_keys)
    assert 0 < len(common) < min(map(len, sets))  # the server's set matters
    ranks = None
    for s, r in zip([server] + sets, out, strict=False):
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

    from bench.command import main

    out = tmp_path / "psi.json"
    for keys, hops in (("threshold", 1), ("all", 2)):
        assert main(["psi", "--ids", "400", "--clients", "2", "--overlap", "0.5", "--keys", keys, "--json", str(out),
                     "-q"]) == 0
        rep = json.loads(out.read_text())["details"]
        (row,) = rep["rows"]
        assert rep["correct"] and row["intersection"] == 200 and row["clients"] == 2 and rep["keys"] == keys
        # each id crosses 1 hop (the shared key: to the server) or 2 (the ring) as a 32-byte point, plus framing
        assert hops * 32 <= row["bytes_per_id"] < (hops + 1) * 32
    assert len(row["max_rss_bytes"]) == 3 and rep["target_met"] is None  # no 10^6-id cell in this run


def test_hashing_many_ids_gives_the_event_loop_a_turn_between_batches():
    """The heartbeat task (sqm.mpc.net.liveness) must run while a client hashes 10^6 ids (11 s): the hashing yields
    between batches, and the result equals hash_ids's."""
    import asyncio

    from sqm.mpc.protocols.psi import hash_ids_yielding

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


# ----- checks on what a party receives (issue 43, attack 5) ----------------------------------------------------------

def test_off_curve_finds_twist_points_and_non_canonical_encodings():
    from sqm.mpc.protocols.psi import off_curve

    good = blind(b"\x05" * 32, hash_ids([str(i) for i in range(40)]))
    assert off_curve(good) is None and off_curve(good[:0]) is None
    u = 2
    while gmpy2.jacobi((u ** 3 + _A * u * u + u) % _P, _P) != -1:
        u += 1
    for bad in (u.to_bytes(32, "little"),  # a point of the twist
                (_P + 1).to_bytes(32, "little"),  # u >= p: not canonical (u - p = 1 is on neither... refused alike)
                bytes(good[3][:31]) + bytes([good[3][31] | 0x80])):  # the top bit set
        v = good.copy()
        v[7] = np.frombuffer(bad, np.uint8)
        assert off_curve(v) == 7, bad.hex()
    v = good.copy()
    v[2] = np.frombuffer(u.to_bytes(32, "little"), np.uint8)
    v[5, 31] |= 0x80
    assert off_curve(v) == 2  # the first bad value, whatever its fault


def test_product_key_blinds_as_both_keys_do_on_every_point():
    """[e]P = [k][r]P, also for points with a part of small order (u and 1/u differ by the point (0, 0) of order 2:
    the same after any blinding), and e is a clamped scalar, so libsodium uses it as it is."""
    from sqm.mpc.protocols.psi import _P, clamp, product_key

    rng = np.random.default_rng(4)
    P = hash_ids([str(i) for i in range(30)])
    twin = np.array([np.frombuffer(pow(int.from_bytes(p.tobytes(), "little"), -1, _P).to_bytes(32, "little"),
                                   np.uint8) for p in P])
    for _ in range(5):
        k = rng.bytes(32)
        r, e = product_key(k, rng)
        assert clamp(e) == int.from_bytes(e, "little")
        assert np.array_equal(blind(e, P), blind(k, blind(r, P)))
        assert np.array_equal(blind(e, twin), blind(e, P))


class Tamper(PartyProgram):
    """A client changes row 1 of a chunk it sends on the clients' ring, after its honest blinding: the first chunk of
    its own list (``target`` "own"), of the list it forwards to the next client ("forward": the second chunk of a
    step that sends two) or of the first it sends the server ("server").  ``"copy"`` puts row 0 there (a repeated
    value), ``"twin"`` row 0 plus the point of order 2 (u -> 1/u: distinct, equal after the next blinding),
    ``"twist"`` a point of the twist."""

    def __init__(self, inner, how, target="own"):
        self.inner, self.how, self.target = inner, how, target

    async def run(self, ctx):
        from sqm.mpc.protocols.psi import _P

        honest, done = ctx.send_recv, []

        async def send_recv(outgoing, senders, expect, step="message"):
            pick = {"own": (lambda to, ch: to != 0, 0), "forward": (lambda to, ch: to != 0 and len(ch) == 2, 1),
                    "server": (lambda to, ch: to == 0, None)}[self.target]
            to = next((t for t, ch in outgoing.items() if pick[0](t, ch)), None)
            if step in (psi.RING_STEP, psi.DIRECT_STEP) \
                    and to is not None and not done:
                done.append(1)
                chunks = outgoing[to]
                at = pick[1]
                c = np.array(chunks if at is None else chunks[at])
                if self.how == "copy":
                    c[1] = c[0]
                elif self.how == "twin":
                    c[1] = np.frombuffer(pow(int.from_bytes(c[0].tobytes(), "little"), -1, _P).to_bytes(32, "little"),
                                         np.uint8)
                else:
                    u = 2
                    while gmpy2.jacobi((u ** 3 + 486662 * u * u + u) % _P, _P) != -1:
                        u += 1
                    c[1] = np.frombuffer(u.to_bytes(32, "little"), np.uint8)
                outgoing = {**outgoing, to: c if at is None else [*chunks[:at], c, *chunks[at + 1:]]}
            return await honest(outgoing, senders, expect, step)
        ctx.send_recv = send_recv
        return await self.inner.run(ctx)


@pytest.mark.parametrize("who,how,target,culprit,what", [
    (1, "copy", "own", "client 1", "repeated values in client 1's list"),  # the owner: client 2 finds it
    (1, "twin", "own", "client 1", "repeated values in client 1's list"),  # distinct, equal under client 2's key
    (2, "copy", "forward", "client 2", "repeated values in client 1's list"),  # a forwarder: client 3 finds it
    (2, "twin", "forward", "client 2", "repeated values in client 1's list"),
    (3, "copy", "server", "client 3", "repeated values in client 1's list"),  # the last hop: the server finds it
    (1, "twist", "own", "client 1", "not the canonical encoding of a point of Curve25519"),
    (3, "twist", "server", "client 3", "not the canonical encoding of a point of Curve25519"),  # to the server
])
def test_a_list_with_repeated_values_or_a_twist_point_is_refused_naming_its_sender(who, how, target, culprit, what):
    """Every receiver checks what it receives and its blinded output of each list; one verdict exchange before the
    server compares anything; every party names the same sender (3 clients, every client's key, lists of several
    chunks)."""
    from sqm.mpc.net.launch import MPCError

    rng = np.random.default_rng(1)
    sets = [[str(i) for i in sorted(rng.choice(100, 60, replace=False))] for _ in range(3)]
    sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
    progs = [PSIProgram(None, sizes, 7, 0, True)] + [PSIProgram(s, sizes, 7, 0, True) for s in sets]
    progs[who] = Tamper(progs[who], how, target)
    with pytest.raises(MPCError) as e:
        run_in_process(progs, timeout=60)
    msg = str(e.value)
    assert msg.count(culprit) >= 3 and what in msg, msg


@pytest.mark.parametrize("who,how,what", [
    (2, "copy", "client 2 sent repeated values in client 2's list"),
    (3, "twist", "malformed message from client 3 in the PSI: a value that is not the canonical encoding"),
])
def test_with_the_shared_key_the_server_refuses_a_list_with_repeats_or_a_twist_point_naming_its_owner(who, how,
                                                                                                       what):
    """The shared key (3 clients, t = 1): each client sends its own list to the server, which checks every value and
    the list's distinctness before comparing anything and names the owner."""
    from sqm.mpc.net.launch import MPCError

    rng = np.random.default_rng(3)
    sets = [[str(i) for i in sorted(rng.choice(100, 60, replace=False))] for _ in range(3)]
    sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
    progs = [PSIProgram(None, sizes, 7, 0)] + [PSIProgram(s, sizes, 7, 0) for s in sets]
    progs[who] = Tamper(progs[who], how, "server")
    with pytest.raises(MPCError) as e:
        run_in_process(progs, timeout=60)
    assert what in str(e.value), str(e.value)


def test_clients_given_different_shares_of_the_shared_key_are_refused_before_any_id_is_sent():
    """A client that sends another contribution to the shared key to one client than to the other: the clients'
    digests of K differ, every client refuses naming the odd one out before any blinded id is sent."""
    from sqm.mpc.net.launch import MPCError

    class Equivocate(PartyProgram):
        def __init__(self, inner):
            self.inner = inner

        async def run(self, ctx):
            honest = ctx.send_recv
            sent = []

            async def send_recv(outgoing, senders, expect, step="message"):
                if step == "PSI: blinding around the ring" or step.startswith("PSI: each client"):
                    sent.append(step)
                if step == psi.KEY_STEP:
                    outgoing = {**outgoing, 3: bytes(32)}
                return await honest(outgoing, senders, expect, step)
            ctx.send_recv = send_recv
            try:
                return await self.inner.run(ctx)
            finally:
                assert not sent

    rng = np.random.default_rng(5)
    sets = [[str(i) for i in sorted(rng.choice(100, 60, replace=False))] for _ in range(3)]
    sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
    progs = [PSIProgram(None, sizes, 7, 0)] + [PSIProgram(s, sizes, 7, 0) for s in sets]
    progs[1] = Equivocate(progs[1])
    with pytest.raises(MPCError, match=f"disagree on {psi.KEY_CHECK}"):
        run_in_process(progs, timeout=60)


def test_the_shared_key_is_one_multiplication_per_id_and_every_client_receives_no_list(monkeypatch):
    """Counting what the parties blind and each receives: with the shared key (3 clients) the clients blind each id
    once (their lists' 165 ids) and receive no blinded id; under every client's key every list is blinded by every
    client (3 x 165) and each client receives the two other lists."""
    import sqm.mpc.protocols.psi as psi

    rng = np.random.default_rng(6)
    sets = [[str(i) for i in sorted(rng.choice(100, 50 + 5 * j, replace=False))] for j in range(3)]
    orig = psi.blind
    for all_keys, blinded, received in ((False, 165, [0, 0, 0]), (True, 3 * 165, [115, 110, 105])):
        counts: dict = {"blinded": 0}

        def blind(key, points, counts=counts):
            counts["blinded"] += points.shape[0]
            return orig(key, points)
        monkeypatch.setattr(psi, "blind", blind)

        class Count(PartyProgram):
            def __init__(self, inner, counts):
                self.inner, self.counts = inner, counts

            async def run(self, ctx):
                honest, counts = ctx.send_recv, self.counts
                counts[ctx.pid] = 0

                async def send_recv(outgoing, senders, expect, step="message"):
                    got = await honest(outgoing, senders, expect, step)
                    if step.startswith("PSI: b") or step.startswith("PSI: each"):
                        for g in got or []:
                            for a in (g if isinstance(g, list) else [g]):
                                counts[ctx.pid] += a.shape[0]
                    return got
                ctx.send_recv = send_recv
                return await self.inner.run(ctx)
        sizes = {j: len(s) for j, s in enumerate(sets, start=1)}
        progs = [Count(PSIProgram(None, sizes, 7, 0, all_keys), counts)]
        progs += [Count(PSIProgram(s, sizes, 7, 0, all_keys), counts) for s in sets]
        run_in_process(progs, timeout=60)
        assert counts["blinded"] == blinded
        assert [counts[j] for j in (1, 2, 3)] == received
        assert counts[0] == 165


def test_a_server_holding_a_set_refuses_a_client_repeating_its_lists_values():
    """Stage 2 (the server's own list and the clients' common values around the ring) is checked alike: client 2
    repeats a value of the server's list it forwards; client 3 finds it, the verdict names client 2."""
    from sqm.mpc.net.launch import MPCError

    class Stage2(PartyProgram):
        def __init__(self, inner):
            self.inner = inner

        async def run(self, ctx):
            honest, done = ctx.send_recv, []

            async def send_recv(outgoing, senders, expect, step="message"):
                if step == "PSI: the server's lists around the ring" and outgoing and not done:
                    done.append(1)
                    (to, chunks), = outgoing.items()
                    c = np.array(chunks[0])
                    c[1] = c[0]
                    outgoing = {to: [c] + list(chunks[1:])}
                return await honest(outgoing, senders, expect, step)
            ctx.send_recv = send_recv
            return await self.inner.run(ctx)

    rng = np.random.default_rng(2)
    sets = [[str(i) for i in sorted(rng.choice(100, 60, replace=False))] for _ in range(3)]
    server = [str(i) for i in range(100)]
    sizes = {0: 100, **{j: len(s) for j, s in enumerate(sets, start=1)}}
    progs = [PSIProgram(server, sizes, 7, 0)] + [PSIProgram(s, sizes, 7, 0) for s in sets]
    progs[2] = Stage2(progs[2])
    with pytest.raises(MPCError, match="client 2 sent repeated values in the server's list of blinded ids"):
        run_in_process(progs, timeout=60)
