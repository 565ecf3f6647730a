"""Shard workers (sqm.mpc.protocols.shards): a party's records split between worker processes, one MPC session per
shard, the moments' shares added by each party, the noise added and the result opened once."""
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from sqm.framework.runners import run_job
from sqm.framework.spec import load_job, write_job, write_party_csvs, write_shared_job
from sqm.framework.table_stream import scan_table
from sqm.mechanism.client import QuantizedRows
from sqm.mechanism.rng import make_rng
from sqm.apps.pca.job import PCAJobTask
from sqm.errors import UsageError
from sqm.mpc.net.launch import MPCError, free_ports
from sqm.mpc.net.certs import DEFAULT_JOB, make_certificates
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols.shards import agree_worker_addresses, shard_job_id, shard_ranges, worker_addresses
from sqm.mpc.protocols.stream import ArrayInput

TASK = dict(n_components=2, epsilon=1.0, gamma=1024.0, seed=5, insecure_reproducible=True)
BOUNDS = [None, {"x4": [-0.5, 0.5]}, None]


def test_shard_ranges_cover_every_record_once():
    for n, s in [(0, 2), (1, 3), (10, 3), (1000, 7), (5, 8)]:
        r = shard_ranges(n, s)
        assert len(r) == s and r[0][0] == 0 and r[-1][1] == n
        assert all(a == b for (_, a), (b, _) in zip(r, r[1:], strict=False))  # contiguous, in order
        sizes = [b - a for a, b in r]
        assert max(sizes) - min(sizes) <= 1
    with pytest.raises(UsageError):
        shard_ranges(10, 0)
    assert len({shard_job_id("ab" * 16, s) for s in range(4)}) == 4
    assert worker_addresses("10.0.0.1:5000", 2) == ["10.0.0.1:5001", "10.0.0.1:5002"]


@pytest.mark.parametrize("insecure_pcg64", [False, True])
def test_parts_round_exactly_as_the_whole_input(insecure_pcg64):
    """Each part's integers are the whole input's for those records (its block's counter-mode stream jumps to the
    part's first coin), and after the parts the noise is what the whole input draws after its chunks."""
    X = np.random.default_rng(0).normal(size=(1000, 7)) * 0.5
    make = (lambda: np.random.default_rng(9)) if insecure_pcg64 else (lambda: make_rng(9))

    rng = make()
    rng.random(5)  # a stream already in use: parts start where this input's coins start
    whole_in = QuantizedRows(ArrayInput(X), 0.9, 4096.0, 12.5, 16, rng)
    whole = np.vstack(list(whole_in.chunks(128)))
    noise = whole_in.addend()

    rng = make()
    rng.random(5)
    q = QuantizedRows(ArrayInput(X), 0.9, 4096.0, 12.5, 16, rng)
    parts = [q.part(a, b) for a, b in shard_ranges(1000, 3)]
    got = [np.vstack(list(p.chunks(77))) for p in parts]
    q.parts_taken([p.counts() for p in parts])
    assert np.array_equal(np.vstack(got), whole)
    assert np.array_equal(q.addend(), noise)
    assert q.clipped == whole_in.clipped > 0
    assert np.array_equal(rng.random(3), whole_in.rng.random(3))  # the caller's generator moved on alike


def test_a_part_holds_no_master_key_no_generator_and_only_its_blocks_coin_keys():
    """What a client hands a shard worker (the part, pickled into its program) holds the coin keys of the blocks its
    records touch and nothing else of the client's randomness: no generator (so no noise share), no master key
    (so no other block's coins); rounding across a block boundary still gives the whole input's integers."""
    import pickle

    from sqm.mechanism.coins import COIN_BLOCK

    n = COIN_BLOCK + 600
    X = np.random.default_rng(3).normal(size=(n, 2)) * 0.5
    rng = make_rng(11)
    q = QuantizedRows(ArrayInput(X), 0.9, 256.0, 12.5, 4, rng)
    master = q.coins._master
    whole = np.vstack(list(QuantizedRows(ArrayInput(X), 0.9, 256.0, 12.5, 4, make_rng(11)).chunks(5000)))
    ranges = [(0, COIN_BLOCK - 100), (COIN_BLOCK - 100, COIN_BLOCK + 50), (COIN_BLOCK + 50, n)]
    parts = [q.part(a, b) for a, b in ranges]
    assert [sorted(p.coins._blocks) for p in parts] == [[0], [0, 1], [1]]
    for p in parts:
        blob = pickle.dumps(p)
        assert p.rng is None and not p.coins.has_master
        assert master not in blob and b"AESCounter" not in blob and b"Generator" not in blob
        with pytest.raises(UsageError, match="stays with the client"):
            p.addend()
    with pytest.raises(UsageError, match="not block 1"):
        parts[0].coins.random(COIN_BLOCK, 1)
    got = np.vstack([np.vstack(list(pickle.loads(pickle.dumps(p)).chunks(333))) for p in parts])
    assert np.array_equal(got, whole)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_table_parts_read_exactly_their_records(tmp_path, fmt):
    """A part of a party file (with the alignment's mask) yields exactly the whole table's rows there; a
    Parquet part starts at the row group holding its first record."""
    X = np.random.default_rng(1).normal(size=(2000, 3))
    job = write_party_csvs(X, tmp_path, 2, fmt=fmt, row_group_rows=300, min_intersection=1)
    f = load_job(job).parties[1].file
    table = scan_table(f, "id")
    keep = np.random.default_rng(2).random(2000) < 0.6
    for t in (table, table.restricted(keep)):
        whole = np.vstack(list(t.chunks(256)))
        m = t.n_rows
        for a, b in [(0, 1), (1, m // 3), (m // 3, m - 4), (m - 4, m), (7, 7)]:
            got = list(t.part(a, b).chunks(100))
            got = np.vstack(got) if got else np.zeros((0, t.n_cols))
            assert np.array_equal(got, whole[a:b])
        assert np.array_equal(np.vstack(list(t.part(10, m).part(5, 20).chunks(7))), whole[15:30])


def _sharded_job(tmp_path, rows: int = 3000, fmt: str = "parquet"):
    X = np.random.default_rng(3).normal(size=(rows, 9)) * 0.3
    ids = np.arange(rows)
    spec = load_job(write_party_csvs(X, tmp_path, 3, fmt=fmt, row_group_rows=500, min_intersection=1,
                                     bounds=BOUNDS, ids=ids))
    files = [p.file for p in spec.parties[1:]]
    def spaced(ps):  # a worker's default port (its party's + 1 + shard) is no other party's port
        return not any(0 < q - p <= 2 for p in ps[:4] for q in ps[:4])

    ports = next(ps for ps in iter(lambda: free_ports(4 + 8), None) if spaced(ps))
    addrs = [f"127.0.0.1:{p}" for p in ports[:4]]
    workers = [[f"127.0.0.1:{p}" for p in ports[4 + 2 * i:6 + 2 * i]] for i in range(4)]
    sharded = load_job(write_job(os.path.join(tmp_path, "sharded.json"), addrs, files, workers=2,
                                 worker_addresses=workers, bounds=BOUNDS, min_intersection=1))
    return spec, sharded


@pytest.mark.slow
def test_sharded_job_equals_unsharded_job_bit_for_bit(tmp_path):
    """PCA job mode, 3 clients, Parquet files read in parts: 2 shard workers per party (real processes, 2
    sessions of 4 parties each over loopback TLS) release the same integers as one process per party, with
    the same counts of clipped rows and values outside the declared ranges."""
    spec, sharded = _sharded_job(tmp_path)
    a = run_job(spec, PCAJobTask(**TASK, chunk_rows=128))
    b = run_job(sharded, PCAJobTask(**TASK, chunk_rows=128, steps_path=str(tmp_path / "progress")))
    assert np.array_equal(a[0]["result"]["raw"], b[0]["result"]["raw"])
    for i in range(4):  # progress in chunks, as shards finish: ends with every chunk of both shards done
        lines = [ln.split("\t", 1)[1] for ln in Path(f"{tmp_path / 'progress'}.{i}").read_text().split("\n")[:-1]
                 if ln.startswith("secure evaluation\t")]
        assert lines[-1] == "24\t24" and lines[0].split()[1] == "24"  # 2 shards of 1500 records, 12 chunks each
    for ra, rb in zip(a[1:], b[1:], strict=False):
        assert ra["result"]["clipped"] == rb["result"]["clipped"]
        assert ra["result"].get("outside_declared_range") == rb["result"].get("outside_declared_range")
    assert b[2]["result"]["outside_declared_range"] > 0 and sum(r["result"]["clipped"] for r in b[1:]) > 0
    assert all("shards" in r["phases"] for r in b) and not any("shards" in r["phases"] for r in a)
    # the records' shares went through the workers' sessions: each client's two workers sent them (and its
    # alignment's two buckets), the client itself only the bucket key, the summands, the degree reduction and the
    # opening
    for ra, rb in zip(a[1:], b[1:], strict=False):
        workers, buckets = rb["shard_workers"], rb["alignment_workers"]
        assert len(workers) == len(buckets) == 2
        assert all(w["bytes_sent"] > 0 and w["max_rss_bytes"] > 0 for w in workers + buckets)
        assert rb["bytes_sent"] < ra["bytes_sent"] < rb["bytes_sent"] + sum(w["bytes_sent"] for w in workers + buckets)
        assert "alignment_workers" not in ra


def _kill_worker_when_it_starts(job_id: str, index: int, shard: int, stop: threading.Event, killed: list):
    target = shard_job_id(job_id, shard)
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if (target.encode() in args and b"--index" in args
                    and args[args.index(b"--index") + 1] == str(index).encode()):
                time.sleep(0.3)
                os.kill(int(pid), 9)
                killed.append(int(pid))
                return
        time.sleep(0.02)


@pytest.mark.slow
def test_killed_worker_aborts_the_job_naming_the_shard(tmp_path, caplog):
    """SIGKILL to client 2's worker of shard 1: every party stops, nothing is released, and every party's
    message names shard 1."""
    _, sharded = _sharded_job(tmp_path)
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_worker_when_it_starts, args=(sharded.job_id, 2, 1, stop, killed))
    killer.start()
    try:
        with pytest.raises(MPCError) as err, caplog.at_level(logging.INFO, logger="sqm.mpc.net.launch"):
            run_job(sharded, PCAJobTask(**TASK, chunk_rows=64), timeout=120)
    finally:
        stop.set()
        killer.join()
    assert killed, "the worker was never seen"
    assert set(err.value.codes) == {0, 1, 2, 3} and all(c != 0 for c in err.value.codes.values())
    # every party's own messages (the launcher shows them at INFO)
    lines = [r.getMessage() for r in caplog.records if "sqm.mpc.net.party" in r.getMessage()]
    for who in ("server", "client 1", "client 2", "client 3"):
        mine = [ln for ln in lines if f"sqm.mpc.net.party {who}:" in ln]
        assert mine and all("shard 1 of 2" in ln for ln in mine), (who, lines)
    assert any("killed by signal 9" in ln for ln in lines if "client 2:" in ln)


# party addresses 10 ports apart (nothing binds them here): the default worker addresses (port + 1 + shard) never
# meet another party's port, as two of free_ports' answers may be adjacent
SPACED = ["127.0.0.1:40100", "127.0.0.1:40110", "127.0.0.1:40120"]


def test_job_file_workers_are_checked(tmp_path):
    X = np.random.default_rng(3).normal(size=(50, 4))
    spec = load_job(write_party_csvs(X, tmp_path, 2, min_intersection=1, addresses=SPACED))
    files = [p.file for p in spec.parties[1:]]
    job = write_job(os.path.join(tmp_path, "w.json"), spec.addresses, files, workers=2)
    assert load_job(job).shards == 2
    import json

    raw = json.loads(Path(job).read_text())
    raw["parties"][1]["workers"] = 3
    Path(job).write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="same number for every party"):
        load_job(job)
    raw["parties"][1]["workers"] = 1
    Path(job).write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="from 2 to 1024"):
        load_job(job)
    ports = [int(a.rsplit(":", 1)[1]) for a in spec.addresses]
    raw["parties"][1]["workers"] = 2
    raw["parties"][1]["address"] = f"127.0.0.1:{ports[0] + 1}"  # the server's first worker's port
    Path(job).write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="overlap"):
        load_job(job)


def test_workers_refused_for_a_task_that_does_not_stream(tmp_path):
    from sqm.framework.party import party_program
    from sqm.apps.linreg.estimator import SQMLinearRegression
    from sqm.apps.linreg.job import LinRegJobTask

    X = np.random.default_rng(3).normal(size=(50, 4))
    spec = load_job(write_party_csvs(X, tmp_path, 2, min_intersection=1))
    job = write_job(os.path.join(tmp_path, "w.json"), SPACED, [p.file for p in spec.parties[1:]], workers=2)
    with pytest.raises(UsageError, match="read in chunks"):
        party_program(load_job(job), 1, LinRegJobTask(SQMLinearRegression(), label_column="x3",
                                                                 label_range=(-5, 5)))


@pytest.mark.slow
def test_sharded_job_on_a_dask_cluster_equals_local_workers(tmp_path):
    """The same job with every party's shard workers run by a Dask cluster (here one local cluster stands in
    for each organisation's own): the same released integers as the unsharded job."""
    distributed = pytest.importorskip("distributed")
    spec, sharded = _sharded_job(tmp_path, rows=1200)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=8, processes=False, dashboard_address=None,
                                  protocol="tcp://", host="127.0.0.1") as cluster:
        import json

        raw = json.loads(Path(sharded.path).read_text())
        for p in raw["parties"]:
            p["engine"] = cluster.scheduler_address
        Path(sharded.path).write_text(json.dumps(raw))
        on_dask = run_job(load_job(sharded.path), PCAJobTask(**TASK, chunk_rows=128))
    local = run_job(spec, PCAJobTask(**TASK, chunk_rows=128))
    assert np.array_equal(on_dask[0]["result"]["raw"], local[0]["result"]["raw"])
    assert all(len(r["shard_workers"]) == 2 for r in on_dask)


@pytest.mark.slow
def test_bench_scale_workers_releases_the_same_integers(tmp_path):
    """`python -m bench scale --workers 2` (small): each record count runs with one process per party and with 2
    workers per party; the releases are identical and the model gives a figure for every run and the 10^8
    predictions."""
    from bench import scale_workers

    rep = scale_workers.run([1500, 3000], 2, cols=12, workdir=str(tmp_path), progress=False)
    assert rep["all_identical"] and [r["workers"] for r in rep["runs"]] == [1, 2, 1, 2]
    assert {(c["rows"], c["workers"]) for c in rep["model"]["checks"]} == {(1500, 1), (1500, 2), (3000, 1), (3000, 2)}
    assert all(len(p["workers"]) == 2 for r in rep["runs"] if r["workers"] == 2 for p in r["parties"])
    assert [p["workers"] for p in rep["predictions"]] == [8, 32] and all(p["seconds"] > 0 for p in rep["predictions"])


@pytest.mark.slow
def test_the_sharing_check_runs_across_shards_and_names_a_deviating_client(tmp_path):
    """verify_sharing with 2 workers per party: the seeds are agreed in the job's session, every worker adds its
    chunks to the check, its party adds the workers' sums and the masks, and one exchange verifies.  An honest
    job releases what the unsharded checked job releases; a client whose shard worker deals inconsistent shares
    is named and nothing is released."""
    from bench.faults import Deviate
    from sqm.framework.party import job_programs
    from sqm.mpc.net.launch import run_parties

    spec, sharded = _sharded_job(tmp_path, rows=1200)
    task = PCAJobTask(**TASK, chunk_rows=128, verify_sharing=True)
    a = run_job(spec, task)
    b = run_job(sharded, task)
    assert np.array_equal(a[0]["result"]["raw"], b[0]["result"]["raw"])
    progs = job_programs(sharded, task)
    progs[2].shard_wrap = Deviate  # client 2's workers deal shares off by one to the last party
    with pytest.raises(MPCError) as err:
        run_parties(progs, timeout=120, addresses=sharded.addresses, min_clients=2, job_id=sharded.job_id)
    assert "the input sharing of client 2 is inconsistent" in str(err.value)


def test_the_row_norm_check_runs_across_shards(tmp_path):
    """The secure row norm check with 2 workers per party: every shard session compares its own records with
    the job's row limit (agreed in each session's description).  The release is bit for bit the unsharded
    checked job's, and differs from the unchecked one's (rows past c are left out in secret: the data has
    some, since each client then clips its sub-row to c only)."""
    spec, sharded = _sharded_job(tmp_path, rows=600)
    task = dict(TASK, chunk_rows=128, row_norm_check=True)
    X = np.random.default_rng(3).normal(size=(600, 9)) * 0.3
    assert (np.linalg.norm(X, axis=1) > 1).sum() > 10  # records above c = 1 to leave out
    a = run_job(spec, PCAJobTask(**task))
    b = run_job(sharded, PCAJobTask(**task))
    plain = run_job(spec, PCAJobTask(**TASK, chunk_rows=128))
    assert np.array_equal(a[0]["result"]["raw"], b[0]["result"]["raw"])
    assert not np.array_equal(a[0]["result"]["raw"], plain[0]["result"]["raw"])
    assert all("shards" in r["phases"] for r in b)
    assert all(w["bytes_sent"] > 0 for r in b[1:] for w in r["shard_workers"])


@pytest.mark.slow
def test_an_unreachable_dask_scheduler_is_named_before_any_share(tmp_path):
    """A party whose "engine" cannot be reached refuses the job naming its scheduler; every party stops and
    nothing is released."""
    pytest.importorskip("distributed")
    import json

    _, sharded = _sharded_job(tmp_path, rows=600)
    raw = json.loads(Path(sharded.path).read_text())
    dead = free_ports(1)[0]  # nothing listens there
    raw["parties"][1]["engine"] = f"tcp://127.0.0.1:{dead}"
    Path(sharded.path).write_text(json.dumps(raw))
    with pytest.raises(MPCError) as err:
        run_job(load_job(sharded.path), PCAJobTask(**TASK), connect_timeout=3, timeout=60)
    assert f"could not reach its Dask scheduler tcp://127.0.0.1:{dead}" in str(err.value) or \
        "client 1 could not start its shard workers" in str(err.value)


# ----- issue 43, attack 1: a party's engine and workers come from its own operator, never from the job file -------


class _Announce(PartyProgram):
    """Announces ``own`` as this party's workers' addresses (2 shards) and returns the table it agrees."""

    def __init__(self, own):
        self.own = own

    async def run(self, ctx):
        return await agree_worker_addresses(ctx, 2, self.own)


def test_each_party_announces_its_own_workers_and_a_stolen_address_is_refused():
    own = [[f"h{i}:{7000 + 10 * i + s}" for s in range(2)] for i in range(3)]
    recs = run_in_process([_Announce(a) for a in own], min_clients=2)
    assert all(r["result"] == own for r in recs)  # every party holds the same table, each row from its owner
    with pytest.raises(MPCError, match="client 2 announces worker address h0:7001, which is also the server "
                                       "\\(party 0\\)'s"):
        run_in_process([_Announce(own[0]), _Announce(own[1]), _Announce(["h2:7020", "h0:7001"])], min_clients=2)
    with pytest.raises(MPCError, match="2 worker addresses"):
        run_in_process([_Announce(own[0]), _Announce(["h1:7010"]), _Announce(own[2])], min_clients=2)


@pytest.mark.slow
def test_a_job_file_naming_an_engine_is_refused_and_the_operators_own_engine_runs(tmp_path):
    """Attack 1 of issue 43: the coordinator's job file points client 1's "engine" at a scheduler the attacker
    runs.  Client 1, started alone, refuses the job file naming the field before it opens any connection: the
    attacker's listener receives nothing.  The same job from the shared job file, client 1's operator giving its
    own Dask cluster with --engine (an argument of run_job) and every party its own --data-file, releases the
    unsharded job's integers."""
    import json
    import socket

    distributed = pytest.importorskip("distributed")
    spec, sharded = _sharded_job(tmp_path, rows=1200)
    shared_path = write_shared_job(sharded.path, tmp_path / "shared.json")
    attacker = socket.create_server(("127.0.0.1", 0))
    attacker.settimeout(0.5)
    raw = json.loads(Path(shared_path).read_text())
    raw["parties"][1]["engine"] = f"tcp://127.0.0.1:{attacker.getsockname()[1]}"
    (tmp_path / "attack.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="names client 1's \"engine\": refused.*its own operator \\(--engine\\)"):
        run_job(load_job(tmp_path / "attack.json"), PCAJobTask(**TASK), 1, data_file=spec.parties[1].file)
    with pytest.raises(socket.timeout):
        attacker.accept()  # nothing connected to the attacker's scheduler
    attacker.close()
    files = {i: p.file for i, p in enumerate(spec.parties) if p.file}
    shared = load_job(shared_path)
    assert all(p.engine is None and p.worker_addresses is None and p.file is None for p in shared.parties)
    keys = str(tmp_path / "keys")
    make_certificates(keys, 4, days=1, job=shared.name or DEFAULT_JOB)
    taken = {int(p.address.rsplit(":", 1)[1]) for p in shared.parties}  # the parties' ports, not bound yet
    ports = next(ps for ps in iter(lambda: free_ports(8), None) if not taken & set(ps))
    out = {}
    with distributed.LocalCluster(n_workers=1, threads_per_worker=8, processes=False, dashboard_address=None,
                                  protocol="tcp://", host="127.0.0.1") as cluster:
        def go(i):
            try:
                out[i] = run_job(shared, PCAJobTask(**TASK, chunk_rows=128), i, timeout=180, ssl_dir=keys,
                                 data_file=files.get(i), engine=cluster.scheduler_address if i == 1 else None,
                                 worker_addresses=[f"127.0.0.1:{p}" for p in ports[2 * i:2 * i + 2]])[i]
            except Exception as e:  # noqa: BLE001 - reported below
                out[i] = e

        threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not any(isinstance(r, Exception) for r in out.values()), out
    local = run_job(spec, PCAJobTask(**TASK, chunk_rows=128))
    assert np.array_equal(out[0]["result"]["raw"], local[0]["result"]["raw"])
    assert all(len(out[i]["shard_workers"]) == 2 for i in range(4))
