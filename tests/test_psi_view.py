"""What every party actually receives during the record alignment, through real party processes.

A test-only wrapper records, inside each real party process, every payload MPyC hands the protocol
(``MessageExchanger.receive``) during a job whose task does nothing after the alignment (the issue's
attacker: an honest-behaving party that keeps everything it receives).  The job runs with a seed
(insecure, test only) so that this test knows each party's PSI key.  The assertions:

(a) the brute-force attack of issue 23 recovers nothing: for 10^4 candidate ids (every id any client holds
    among them), no value a client received equals the candidate's hash on the curve or that hash blinded
    under the client's own key, and no value the server received equals the hash or the hash blinded under
    any ONE client's key (the server together with one client); the attack has power: given the key the
    receiver lacks (the owner's), the same search finds every id of the list it received;
(b) the server's view does not depend on the ids: a second job over other ids with the same set sizes and
    the same overlaps gives the server frames of the same kinds and shapes, and the same pattern of equal
    values, while not one value repeats between the two jobs.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sqm.framework.jobtask import JobTask

from sqm.framework.party import job_programs

from sqm.framework.spec import load_job
from sqm.mpc.net import wire
from sqm.mpc.net.launch import run_parties
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols.psi import blind, hash_ids
from sqm.mechanism.rng import party_key_bytes

from test_alignment import universe, write_parties

SEED = 7


class AlignOnly(JobTask):
    seed = SEED

    def public(self):
        return ("psi-view-test",)

    async def run(self, ctx, table, meta):
        return {}

    def release(self, meta):  # no ledger in this test
        raise NotImplementedError


class Recording(PartyProgram):
    """Runs ``inner`` and writes every payload this party receives (label, peer, bytes) to ``path``."""

    def __init__(self, inner, path):
        self.inner, self.path = inner, path

    async def run(self, ctx):
        from mpyc import asyncoro

        log = []
        orig = asyncoro.MessageExchanger.receive

        def receive(exchanger, pc):
            got = orig(exchanger, pc)
            if isinstance(got, (bytes, bytearray)):
                log.append([pc, exchanger.peer_pid, bytes(got)])
            else:
                got.add_done_callback(lambda f, peer=exchanger.peer_pid: f.exception() is None and
                                      log.append([pc, peer, bytes(f.result())]))
            return got
        asyncoro.MessageExchanger.receive = receive
        try:
            return await self.inner.run(ctx)
        finally:
            asyncoro.MessageExchanger.receive = orig
            with open(self.path, "wb") as f:
                f.write(wire.encode(log))


def _arrays(tree):
    if isinstance(tree, np.ndarray):
        yield tree
    elif isinstance(tree, list):
        for t in tree:
            yield from _arrays(t)
    elif isinstance(tree, dict):
        for t in tree.values():
            yield from _arrays(t)


def with_keys(job: str, keys: str) -> str:
    """The job file ``job`` with its ``alignment_keys`` set to ``keys`` (in place)."""
    import json

    raw = json.loads(Path(job).read_text())
    raw["alignment_keys"] = keys
    Path(job).write_text(json.dumps(raw))
    return job


def shared_key() -> bytes:
    """The clients' shared key K of the 3-client test jobs (threshold keys, t = 1): SHA-256 of the domain and the
    clients' contributions, their seeded PSI keys (:func:`sqm.mpc.protocols.psi._shared_key`)."""
    import hashlib

    from sqm.mpc.protocols.psi import SHARED_KEY_DOMAIN

    return hashlib.sha256(SHARED_KEY_DOMAIN + b"".join(party_key_bytes(SEED, j, "sqm-psi key")
                                                       for j in (1, 2, 3))).digest()


def list_keys(keys: str) -> list[bytes]:
    """The keys every client's list ends under at the server: K alone (threshold keys), or every client's."""
    return [shared_key()] if keys == "threshold" else [party_key_bytes(SEED, j, "sqm-psi key") for j in (1, 2, 3)]


def record(folder, sets, wrap=None, keys="threshold"):
    """Run the alignment-only job over client id ``sets`` through real processes, the job file's ``alignment_keys``
    ``keys``; per party, the list of (peer, decoded frame) it received.  ``wrap``: {party: program wrapper} (an
    attacker's); the job's failure is then raised after the frames are read, as ``(MPCError, frames)``."""
    from sqm.mpc.net.launch import MPCError

    spec = load_job(with_keys(write_parties(folder, universe(m=12000), sets, min_intersection=1), keys))
    paths = [str(folder / f"frames{i}.bin") for i in range(len(spec.parties))]
    progs = [Recording(p, path) for p, path in zip(job_programs(spec, AlignOnly()), paths, strict=False)]
    for i, w in (wrap or {}).items():
        progs[i] = w(progs[i])
    failed = None
    try:
        run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
    except MPCError as e:
        failed = e
    frames = [[(peer, wire.decode(b)) for _, peer, b in sorted(wire.decode(Path(p).read_bytes()), key=lambda e: e[:2])]
              if failed is None or os.path.exists(p) else None for p in paths]  # a party killed after a failure: None
    if failed is not None:
        raise Attacked(failed, frames)
    return frames


class Attacked(Exception):
    """The job failed (``error``: its MPCError); ``frames``: what each party had received."""

    def __init__(self, error, frames):
        super().__init__(str(error))
        self.error, self.frames = error, frames


def points(frames) -> set[bytes]:
    return {row.tobytes() for _, f in frames for a in _arrays(f) if a.dtype == np.uint8 and a.ndim == 2
            and a.shape[1] == 32 for row in a}


def sets_with_overlaps(offset=0, seed=0):
    """3 clients of 340 ids each (ids 1000 + offset ...): 180 at all three, 40 at each pair of clients, 80 at
    one client only."""
    rng = np.random.default_rng(seed)
    ids = [int(i) + 1000 + offset for i in rng.permutation(600)]
    common, pairs, alone = ids[:180], [ids[180:220], ids[220:260], ids[260:300]], ids[300:]
    own = [alone[0:80], alone[80:160], alone[160:240]]
    return [sorted(common + pairs[j] + pairs[(j + 2) % 3] + own[j]) for j in range(3)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["threshold", "all"])
def test_no_party_can_test_a_guessed_id_and_the_server_view_does_not_depend_on_the_ids(tmp_path, mode):
    """Both key modes.  Threshold keys (3 clients, t = 1): no client receives a single blinded id, the server's
    values open under the clients' shared key K only (which no party alone both holds and sees a list under).  Every
    client's key: each client receives the two other lists, the server the lists under all three keys."""
    sets = sets_with_overlaps()
    frames = record(tmp_path / "a", sets, keys=mode)
    keys = {j: party_key_bytes(SEED, j, "sqm-psi key") for j in (1, 2, 3)}
    candidates = [str(i) for i in range(1000, 11000)]  # every id any client holds, and 9,400 others
    assert set(map(str, sum(sets, []))) <= set(candidates)
    H = hash_ids(candidates)
    hashed = {h.tobytes(): c for h, c in zip(H, candidates, strict=False)}

    def found(received: set, key=None) -> set:
        table = hashed if key is None else {h.tobytes(): c for h, c in zip(blind(key, H), candidates, strict=False)}
        return {table[v] for v in received if v in table}

    for j in (1, 2, 3):
        got = points(frames[j])
        if mode == "threshold":
            assert not got  # no client receives any blinded id
            continue
        assert len(got) == 2 * 340  # the two other clients' lists, once each, never its own
        assert not found(got) and not found(got, keys[j])  # (a): the attack recovers nothing
        prev = (j - 2) % 3 + 1  # power: with the key of the owner of the list it received first, everything
        assert found(got, keys[prev]) == set(map(str, sets[prev - 1]))
    server = points(frames[0])
    assert len(server) == 180 + 3 * 40 + 3 * 80  # 3 x 340 fully blinded values, this many distinct
    assert not found(server) and not any(found(server, k) for k in keys.values())
    full = H
    for k in list_keys(mode):  # power: under K (or all three keys), every id appears
        full = blind(k, full)
    assert {c for v, c in zip(full, candidates, strict=False) if v.tobytes() in server} == set(map(str, sum(sets, [])))

    # (b) other ids, the same sizes and overlaps: the same kinds of frames, the same equality pattern
    other = record(tmp_path / "b", sets_with_overlaps(offset=5000), keys=mode)

    def shape(frames):
        return [(peer, [(a.dtype.str, a.shape) for a in _arrays(f)]) for peer, f in frames]

    def pattern(frames):
        first: dict[bytes, int] = {}
        return [first.setdefault(row.tobytes(), len(first)) for _, f in frames for a in _arrays(f)
                if a.dtype == np.uint8 and a.ndim == 2 for row in a]

    assert shape(other[0]) == shape(frames[0])
    assert pattern(other[0]) == pattern(frames[0])
    assert not points(other[0]) & server


class AlignWithServer(AlignOnly):
    server_table = True  # the server holds a table of its own (a PBM-VFL job's labels) and joins the PSI


def record_with_labels(folder, sets, labelled, wrap=None, keys="threshold"):
    """The alignment-only job with a server label table of ``labelled`` ids, through real processes; per party, the
    (peer, decoded frame) it received, and the parties' records.  ``wrap``: {party: program wrapper} (attacks)."""
    import csv
    import json

    job = write_parties(folder, universe(m=12000), sets, min_intersection=1)
    with open(folder / "labels.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "label"])
        w.writerows([i, i % 2] for i in reversed(labelled))
    raw = json.loads(Path(job).read_text())
    raw["parties"][0]["file"] = "labels.csv"
    raw["alignment_keys"] = keys
    Path(job).write_text(json.dumps(raw))
    spec = load_job(job)
    paths = [str(folder / f"frames{i}.bin") for i in range(len(spec.parties))]
    progs = [Recording(p, path) for p, path in zip(job_programs(spec, AlignWithServer()), paths, strict=False)]
    for i, w in (wrap or {}).items():
        progs[i] = w(progs[i])
    recs = run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
    frames = [[(peer, wire.decode(b)) for _, peer, b in sorted(wire.decode(Path(p).read_bytes()),
                                                                key=lambda e: e[:2])] for p in paths]
    return frames, recs


def stage_two_secrets(sizes: dict, common: int, mode: str = "all"):
    """The test-only seeded secrets of stage 2 (sqm.mpc.protocols.psi, "The server's own set"), regenerated as the
    parties draw them: each client's r_j (after its shuffle), and the server's s (after its shuffle, the padding's
    places and random strings); ``common``: |V_C|.  (The server's list goes out under k_0 s when it is at least as long
    as the padded V_C, else under k_0; V_C under s, else k_0 s: both come back under k_0 s K R.)  Threshold keys:
    each r_j is drawn against the shared key K, not k_j."""
    from sqm.framework.alignment import _psi_secrets
    from sqm.mpc.protocols.psi import product_key

    r = {}
    for j in (1, 2, 3):
        key, rng = _psi_secrets(SEED, j)
        rng.permutation(sizes[j])
        r[j] = product_key(shared_key() if mode == "threshold" else key, rng)[0]
    _, rng = _psi_secrets(SEED, 0)
    rng.permutation(sizes[0])
    L = min(sizes[j] for j in (1, 2, 3))
    rng.choice(L, size=common, replace=False)
    for _ in range(L):
        rng.bytes(16)
    return r, product_key(party_key_bytes(SEED, 0, "sqm-psi key"), rng)[0]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["threshold", "all"])
def test_a_server_holding_labels_joins_the_psi_and_still_no_party_can_test_a_guessed_id(tmp_path, mode):
    """A PBM-VFL job's alignment: the server holds a label table keyed by id.  Every frame each party receives is
    recorded: no client can test a guessed id against the server's list (under the server's key k_0) nor against
    the padded list of the clients' common values (under the server's fresh s), nor against any other list, with its
    own key and its r; the server can test none with its own keys (k_0, s) or any single client's; with the right
    keys, everything (the test's power).  Both key modes: with threshold keys the clients' lists go to the server
    alone, under K, and client 1 adds K to the server's list (K r_1), the others r_j."""
    import itertools

    sets = sets_with_overlaps()
    labelled = sorted(set(sum(sets, [])))[::2]  # 300 of the 600 ids any client holds
    frames, recs = record_with_labels(tmp_path / "s", sets, labelled, keys=mode)
    allc = set.intersection(*map(set, sets))
    common = set(labelled) & allc
    assert recs[0]["result"]["n_records"] == len(common) > 0
    assert recs[0]["result"]["alignment"]["records"]["0"] == len(labelled)
    keys = {j: party_key_bytes(SEED, j, "sqm-psi key") for j in (0, 1, 2, 3)}
    r, s = stage_two_secrets({0: len(labelled), 1: 340, 2: 340, 3: 340}, len(allc), mode)
    candidates = [str(i) for i in range(1000, 11000)]
    H = hash_ids(candidates)

    def found(received: set, *ks) -> set:
        V = H
        for k in ks:
            V = blind(k, V)
        return {c for v, c in zip(V, candidates, strict=False) if v.tobytes() in received}

    K = list_keys(mode)
    held = {j: (K if mode == "threshold" else [keys[j]]) for j in (1, 2, 3)}  # the keys client j holds
    adds = {j: ((K if j == 1 else []) if mode == "threshold" else [keys[j]]) for j in (1, 2, 3)}  # to the server's
    for j in (1, 2, 3):
        got = points(frames[j])
        # (every key: the two other clients' lists), the server's list and the padded common list (340: the
        # smallest set)
        assert len(got) == (0 if mode == "threshold" else 2 * 340) + len(labelled) + 340
        for ks in ([], held[j], [r[j]], [*held[j], r[j]]):
            assert not found(got, *ks)  # nothing a client holds opens any value it received
        # power: the server's list (300 ids, shorter than the padded V_C's 340) under k_0 and what the clients
        # before j added; V_C under k_0 s, K and their r_i
        before = [x for i in range(1, j) for x in (*adds[i], r[i])]
        assert found(got, keys[0], *before) == set(map(str, labelled))
        assert found(got, keys[0], s, *K, *[r[i] for i in range(1, j)]) == set(map(str, allc))
        for S in itertools.chain.from_iterable(itertools.combinations((1, 2, 3), n) for n in range(4)):
            assert not found(got, *[x for i in S for x in (*held[i], r[i])])  # without k_0 and s, none
    server = points(frames[0])
    for ks in ([], [keys[0]], [s], [keys[0], s], *[[keys[j]] for j in (1, 2, 3)]):
        assert not found(server, *ks)  # (threshold keys: K, which every client holds, is the power below)
    assert found(server, *K) == set(map(str, sum(sets, [])))  # power: the clients' lists
    R = [r[1], r[2], r[3]]
    assert found(server, keys[0], *K, *R) == set(map(str, labelled))  # its own, come back under the r's
    assert found(server, keys[0], s, *K, *R) == set(map(str, allc))  # V_C, come back


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["threshold", "all"])
def test_a_server_whose_label_table_holds_the_whole_id_space_names_no_clients_ids(tmp_path, mode):
    """Issue 43's attack 2: the server's label table holds every id of the id space (1,000 ids, every id any client
    holds among them).  With the previous protocol the server blinded each client's list with its key k_0 and
    compared it with its own list come back under k_0 and every client's key, naming every id of every client (340
    of 340).  Now, from every frame it received: no value of any client's list, blinded with any product of the
    server's own secrets (k_0, s), equals any other value it received blinded likewise, so no id of a client links
    to anything it can name; it learns only its own members (the 180 ids every client holds, all in its table).
    Power: with the clients' r's (which it does not hold) the same search names every id of every client."""
    import itertools

    sets = sets_with_overlaps()
    labelled = list(range(1000, 2000))  # the whole id space: every client's 340 ids are in it
    assert set(sum(sets, [])) <= set(labelled)
    frames, recs = record_with_labels(tmp_path / "w", sets, labelled, keys=mode)
    allc = set.intersection(*map(set, sets))
    assert recs[0]["result"]["n_records"] == len(allc) == 180
    keys = {j: party_key_bytes(SEED, j, "sqm-psi key") for j in (0, 1, 2, 3)}
    server = points(frames[0])
    lists = {}  # each client's list as the server received it: under K (or every client's key)
    for j in (1, 2, 3):
        v = hash_ids([str(i) for i in sets[j - 1]])
        for k in list_keys(mode):
            v = blind(k, v)
        lists[j] = {row.tobytes(): i for row, i in zip(v, sets[j - 1], strict=False)}
        assert set(lists[j]) <= server
    others = np.frombuffer(b"".join(sorted(server - set().union(*lists.values()))), np.uint8).reshape(-1, 32)

    def under(v: np.ndarray, ks) -> np.ndarray:
        for k in ks:
            v = blind(k, v)
        return v

    def named(secrets) -> dict:
        """Per client, the ids the server links to anything else it received, blinding both sides with every
        product of ``secrets`` (its own)."""
        products = [[]] + [list(c) for n in range(1, len(secrets) + 1) for c in itertools.combinations(secrets, n)]
        bridges = {row.tobytes() for ks in products for row in under(others, ks)}
        out = {}
        for j in (1, 2, 3):
            mine_j = np.frombuffer(b"".join(lists[j]), np.uint8).reshape(-1, 32)
            out[j] = {lists[j][c.tobytes()] for ks in products for c, t in zip(mine_j, under(mine_j, ks), strict=False)
                      if t.tobytes() in bridges}
        return out

    assert named([keys[0]]) == {1: set(), 2: set(), 3: set()}  # the attack of the issue (k_0): nothing
    r, s = stage_two_secrets({0: len(labelled), 1: 340, 2: 340, 3: 340}, len(allc), mode)
    assert named([keys[0], s]) == {1: set(), 2: set(), 3: set()}  # with every secret the server holds: nothing
    for j in (1, 2, 3):  # power: with the r's, which it does not hold, it would name all 340 of each client
        mine_j = np.frombuffer(b"".join(lists[j]), np.uint8).reshape(-1, 32)
        power = {lists[j][c.tobytes()]
                 for c, t in zip(mine_j, under(mine_j, [keys[0], s, r[1], r[2], r[3]]), strict=False)
                 if t.tobytes() in server}
        assert power == set(sets[j - 1])


# ----- attacks of issue 43 (attack 5), each by a client process that deviates ---------------------------------------

class Points(PartyProgram):
    """An attacking client: runs ``inner`` with its hashed ids changed by ``how`` before its PSI (``"double"``: the
    hashes of ``guesses``, ids it does not hold, each twice in place of its first ids; ``"twist"``: its first id's
    point replaced by a point of the curve's twist)."""

    def __init__(self, inner, how: str, guesses=()):
        self.inner, self.how, self.guesses = inner, how, list(guesses)

    async def run(self, ctx):
        from sqm.framework import alignment

        honest = alignment.hash_ids_yielding

        async def changed(ids, n=None, **kw):
            pts = np.array(await honest(ids, n, **kw))
            if self.how == "double":
                pts[:2 * len(self.guesses)] = np.repeat(hash_ids(self.guesses), 2, axis=0)
            else:
                pts[0] = np.frombuffer(twist_point(), np.uint8)
            return pts
        alignment.hash_ids_yielding = changed
        return await self.inner.run(ctx)


class Declares(PartyProgram):
    """An attacking client: runs ``inner`` declaring ``rows`` records in its schema (issue 43: 10^12)."""

    def __init__(self, inner, rows: int):
        self.inner, self.rows = inner, rows

    async def run(self, ctx):
        from sqm.framework import party

        honest = party.load_own_file

        def lying(*a, **kw):
            table, schema = honest(*a, **kw)
            return table, {**schema, "rows": self.rows}
        party.load_own_file = lying
        return await self.inner.run(ctx)


def twist_point() -> bytes:
    """The smallest u whose u^3 + A u^2 + u is not a square mod p: a point of the twist, not of Curve25519."""
    import gmpy2

    from sqm.mpc.protocols.psi import _A, _P

    u = 2
    while gmpy2.jacobi((u ** 3 + _A * u * u + u) % _P, _P) != -1:
        u += 1
    return u.to_bytes(32, "little")


def _lines(e) -> dict:
    """Each failed party's own last words (MPCError.messages: party -> its lines)."""
    return dict(e.error.messages)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["threshold", "all"])
def test_a_client_doubling_the_hashes_of_guessed_ids_is_refused_and_learns_nothing(tmp_path, mode):
    """Issue 43's duplicate attack: client 1 puts the hashes of 15 ids it does not hold (15 of them held by exactly
    one other client) twice each in its list, so that before, the server's answer told it "held by exactly one other
    client" for each (30/30, 0 false) and the honest clients then aborted blaming the server.  Now client 2, the
    first receiver of client 1's list, finds the repeated values after its blinding (threshold keys: the server, its
    only receiver, finds them in the list as received), the verdict exchange tells every party before the server
    compares anything, and every party exits 3 naming client 1; no party receives the server's answer (client 1
    recovers nothing)."""
    sets = sets_with_overlaps()
    others = set(sets[1]) | set(sets[2])
    held_once = sorted((set(sets[1]) ^ set(sets[2])) - set(sets[0]))[:15]
    guesses = [str(i) for i in held_once]
    assert len(guesses) == 15 and not set(held_once) & set(sets[0]) and set(held_once) <= others
    with pytest.raises(Attacked) as got:
        record(tmp_path / "d", sets, {1: lambda p: Points(p, "double", guesses)}, keys=mode)
    lines = _lines(got.value)
    assert set(got.value.error.codes.values()) == {3} and sorted(lines) == [0, 1, 2, 3]
    for who, line in lines.items():
        assert "client 1 sent repeated values in client 1's list of blinded ids" in line, (who, line)
    for frames in got.value.frames:  # nobody got the server's answer
        assert not any(isinstance(f, dict) and "member" in f for _, f in frames)


@pytest.mark.slow
@pytest.mark.parametrize("mode,receiver", [("threshold", 0), ("all", 2)])
def test_a_twist_point_is_refused_naming_its_sender(tmp_path, mode, receiver):
    """Issue 43: a point of the twist in client 1's list (blinded by client 1, still on the twist) is refused by its
    first receiver (client 2; threshold keys: the server) naming client 1; every party exits non-zero, naming
    client 1."""
    sets = sets_with_overlaps()
    with pytest.raises(Attacked) as got:
        record(tmp_path / "t", sets, {1: lambda p: Points(p, "twist")}, keys=mode)
    lines = _lines(got.value)
    assert "malformed message from client 1 in the PSI: a value that is not the canonical encoding of a point of " \
           "Curve25519" in lines[receiver]
    assert all("client 1" in line for line in lines.values()), lines


@pytest.mark.slow
def test_a_declared_set_of_a_trillion_is_refused_naming_the_client(tmp_path):
    """Issue 43: client 2 declares 10^12 records.  Before, the server died of a MemoryError naming nobody; now every
    party refuses it, naming client 2, before any id is hashed or sent: above the PSI's 32-bit ranks.  And a set far
    smaller (10^6) but beyond the default size policy (a peer's set at most 10 times a party's own; at the server,
    the largest at most 10 times the smallest) is refused alike."""
    sets = sets_with_overlaps()
    for rows, why in ((10 ** 12, ("above the 4,294,967,295 a private set intersection can rank",) * 2),
                      (10 ** 6, ("more than 10 times the smallest set, 340", "more than 10 times this party's 340"))):
        with pytest.raises(Attacked) as got:
            record(tmp_path / str(rows), sets, {2: lambda p, rows=rows: Declares(p, rows)})
        lines = _lines(got.value)
        assert f"refused before any id was sent: client 2 declared {rows:,} records, {why[0]}" in lines[0]
        for who in (1, 3):  # its own refusal, or the server's if that came first: either names client 2
            assert any(f"refused before any id was sent: client 2 declared {rows:,} records, {w}" in lines[who]
                       for w in why), lines[who]
        assert all(frames is None or not points(frames) for frames in got.value.frames)  # no id was sent


# ----- the bucketed alignment: one PSI per bucket on the parties' shard workers ------------------------------------

class AlignStreamed(AlignOnly):
    streams = True  # records read in chunks: the job may give its parties shard workers


class RecordShard:
    """A party's shard wrapper (picklable): each of its workers records what it receives to ``folder``."""

    def __init__(self, folder, pid):
        self.folder, self.pid = str(folder), pid

    def __call__(self, work):
        return Recording(work, os.path.join(self.folder, f"worker{self.pid}.{work.shard}.bin"))


def record_buckets(folder, sets, workers=2):
    """The alignment-only job over client id ``sets`` with ``workers`` shard workers per party (so the bucketed
    alignment); per party, the (peer, frame) its workers received, and the results."""
    import json

    from sqm.mpc.net.launch import free_ports

    job = write_parties(folder, universe(m=12000), sets, min_intersection=1)
    raw = json.loads(Path(job).read_text())
    ports = free_ports(len(raw["parties"]) * workers)
    for i, entry in enumerate(raw["parties"]):
        entry["workers"] = workers
        entry["worker_addresses"] = [f"127.0.0.1:{p}" for p in ports[i * workers:(i + 1) * workers]]
    Path(job).write_text(json.dumps(raw))
    spec = load_job(job)
    progs = job_programs(spec, AlignStreamed())
    for i, p in enumerate(progs):
        p.shard_wrap = RecordShard(folder, i)
    recs = run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
    frames = []
    for i in range(len(progs)):
        got = []
        for s in range(workers):
            log = wire.decode(Path(folder / f"worker{i}.{s}.bin").read_bytes())
            got += [(peer, wire.decode(b)) for _, peer, b in sorted(log, key=lambda e: e[:2])]
        frames.append(got)
    return frames, recs


@pytest.mark.slow
def test_the_bucketed_alignment_shows_each_party_what_one_psi_shows(tmp_path):
    """With shard workers (2 per party, 3 clients, the threshold's keys) the alignment runs as 2 bucket PSIs, each
    client's bucket padded to a public length.  Recorded in every worker: no client's worker receives a blinded id;
    the server's workers receive every client's padded buckets, the same shapes for a job over other ids with the
    same sizes (the padding hides how the ids fall in the buckets), and the equal values among them are the Venn
    counts the one-process PSI shows the server (180 in all three lists, 3 x 40 in two), nothing repeated between
    the two jobs; the intersection is the one-process job's."""
    from sqm.mpc.protocols.psi_buckets import padded_size

    sets = sets_with_overlaps()
    frames, recs = record_buckets(tmp_path / "a", sets)
    assert recs[0]["result"]["alignment"]["intersection"] == 180
    for j in (1, 2, 3):
        assert not points(frames[j])  # no client's worker receives any blinded id

    def values(frames):
        return [row.tobytes() for _, f in frames for a in _arrays(f) if a.dtype == np.uint8 and a.ndim == 2
                and a.shape[1] == 32 for row in a]

    got = values(frames[0])
    assert len(got) == 3 * 2 * padded_size(340, 2)  # every client's 2 padded buckets, once each
    counts = np.bincount(np.unique(got, return_counts=True)[1])
    assert counts[3] == 180 and counts[2] == 3 * 40 and counts[1] == len(got) - 3 * 180 - 2 * 120

    other, _ = record_buckets(tmp_path / "b", sets_with_overlaps(offset=5000))

    def shape(frames):
        return sorted((peer, str([(a.dtype.str, a.shape) for a in _arrays(f)])) for peer, f in frames)

    assert shape(other[0]) == shape(frames[0])
    assert not set(values(other[0])) & set(got)
