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

import numpy as np
import pytest

from sqm.framework.jobtask import JobTask

from sqm.framework.party import job_programs

from sqm.framework.spec import load_job
from sqm.runtime import wire
from sqm.runtime.launch import run_parties
from sqm.runtime.party import PartyProgram
from sqm.runtime.psi import blind, hash_ids
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


def record(folder, sets):
    """Run the alignment-only job over client id ``sets`` through real processes; per party, the list of
    (peer, decoded frame) it received."""
    spec = load_job(write_parties(folder, universe(m=12000), sets, min_intersection=1))
    paths = [str(folder / f"frames{i}.bin") for i in range(len(spec.parties))]
    progs = [Recording(p, path) for p, path in zip(job_programs(spec, AlignOnly()), paths)]
    run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
    return [[(peer, wire.decode(b)) for _, peer, b in sorted(wire.decode(open(p, "rb").read()), key=lambda e: e[:2])]
            for p in paths]


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
def test_no_party_can_test_a_guessed_id_and_the_server_view_does_not_depend_on_the_ids(tmp_path):
    sets = sets_with_overlaps()
    frames = record(tmp_path / "a", sets)
    keys = {j: party_key_bytes(SEED, j, "sqm-psi key") for j in (1, 2, 3)}
    candidates = [str(i) for i in range(1000, 11000)]  # every id any client holds, and 9,400 others
    assert set(map(str, sum(sets, []))) <= set(candidates)
    H = hash_ids(candidates)
    hashed = {h.tobytes(): c for h, c in zip(H, candidates)}

    def found(received: set, key=None) -> set:
        table = hashed if key is None else {h.tobytes(): c for h, c in zip(blind(key, H), candidates)}
        return {table[v] for v in received if v in table}

    for j in (1, 2, 3):
        got = points(frames[j])
        assert len(got) == 2 * 340  # the two other clients' lists, once each, never its own
        assert not found(got) and not found(got, keys[j])  # (a): the attack recovers nothing
        prev = (j - 2) % 3 + 1  # power: with the key of the owner of the list it received first, everything
        assert found(got, keys[prev]) == set(map(str, sets[prev - 1]))
    server = points(frames[0])
    assert len(server) == 180 + 3 * 40 + 3 * 80  # 3 x 340 fully blinded values, this many distinct
    assert not found(server) and not any(found(server, k) for k in keys.values())
    full = blind(keys[1], blind(keys[2], blind(keys[3], H)))  # power: under all three keys, every id appears
    assert {c for v, c in zip(full, candidates) if v.tobytes() in server} == set(map(str, sum(sets, [])))

    # (b) other ids, the same sizes and overlaps: the same kinds of frames, the same equality pattern
    other = record(tmp_path / "b", sets_with_overlaps(offset=5000))

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


@pytest.mark.slow
def test_a_server_holding_labels_joins_the_psi_and_still_no_party_can_test_a_guessed_id(tmp_path):
    """A PBM-VFL job's alignment: the server holds a label table keyed by id.  Every frame each party receives is
    recorded: no client can test a guessed id against the server's list (it lies under the server's key k_0,
    which only the server holds) nor against any other list, and the server can test none with its own key or
    any single client's; with the right keys, everything (the test's power)."""
    import csv
    import itertools
    import json

    sets = sets_with_overlaps()
    labelled = sorted(set(sum(sets, [])))[::2]  # 300 of the 600 ids any client holds
    folder = tmp_path / "s"
    job = write_parties(folder, universe(m=12000), sets, min_intersection=1)
    with open(folder / "labels.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "label"])
        w.writerows([i, i % 2] for i in reversed(labelled))
    raw = json.load(open(job))
    raw["parties"][0]["file"] = "labels.csv"
    json.dump(raw, open(job, "w"))
    spec = load_job(job)
    paths = [str(folder / f"frames{i}.bin") for i in range(len(spec.parties))]
    progs = [Recording(p, path) for p, path in zip(job_programs(spec, AlignWithServer()), paths)]
    recs = run_parties(progs, timeout=120, addresses=spec.addresses, min_clients=2, job_id=spec.job_id)
    common = set.intersection(set(labelled), *map(set, sets))
    assert recs[0]["result"]["n_records"] == len(common) > 0
    assert recs[0]["result"]["alignment"]["records"]["0"] == len(labelled)
    frames = [[(peer, wire.decode(b)) for _, peer, b in sorted(wire.decode(open(p, "rb").read()),
                                                                key=lambda e: e[:2])] for p in paths]
    keys = {j: party_key_bytes(SEED, j, "sqm-psi key") for j in (0, 1, 2, 3)}
    candidates = [str(i) for i in range(1000, 11000)]
    H = hash_ids(candidates)

    def found(received: set, *ks) -> set:
        V = H
        for k in ks:
            V = blind(k, V)
        return {c for v, c in zip(V, candidates) if v.tobytes() in received}

    for j in (1, 2, 3):
        got = points(frames[j])
        assert len(got) == 2 * 340 + len(labelled)  # the two other clients' lists and the server's, once each
        assert not found(got) and not found(got, keys[j])
        # power: the server's list, as client j receives it, under k_0 and the keys of the clients before j
        before = [keys[k] for k in range(1, j)]
        assert found(got, keys[0], *before) == set(map(str, labelled))
        theirs = blind(keys[0], hash_ids([str(i) for i in labelled]))
        for k in before:
            theirs = blind(k, theirs)
        theirs = {v.tobytes() for v in theirs}
        for S in itertools.chain.from_iterable(itertools.combinations((1, 2, 3), r) for r in range(4)):
            assert not found(theirs, *[keys[k] for k in S])  # without k_0, no set of client keys opens it
    server = points(frames[0])
    assert not found(server) and not any(found(server, k) for k in keys.values())
    assert found(server, keys[1], keys[2], keys[3]) == set(map(str, sum(sets, [])))  # power
    assert found(server, keys[0], keys[1], keys[2], keys[3]) == set(map(str, labelled))  # its own, come back
