"""Job-file multi-party PCA: each party reads only its own CSV file.

Real party processes where the transport is what is tested (the bit-for-bit equality with the simulation, one
party per invocation, TLS, the ledger's refusal); refusals and validation run the same party programs in
process (:func:`sqm.framework.runners.simulate`, i.e. :func:`sqm.mpc.protocols.inprocess.run_in_process`)."""
import json
import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

from sqm.mpc.net.certs import DEFAULT_JOB, make_certificates

from sqm.framework.jobtask import JobTask
from sqm.framework.party import party_program
from sqm.framework.runners import run_job, run_local, simulate
from sqm.framework.spec import load_job, read_party_csv, write_job, write_party_csvs, write_shared_job
from sqm.errors import UsageError
from sqm.framework.tables import PartyFileError
from sqm.apps.pca import SQMPCA, PCAJobTask
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError, free_ports, run_parties
from sqm.mechanism.vertical import VerticalData


def make_X(m=30, n=6, seed=0):
    X = np.random.default_rng(seed).normal(size=(m, n)) * np.linspace(2.0, 0.5, n)
    return X / np.linalg.norm(X, axis=1).max()


def write(tmp_path, X, parties=2, **kw):
    return load_job(write_party_csvs(X, tmp_path, parties, **{"min_intersection": 1, **kw}))


TASK = dict(n_components=2, epsilon=1.0, delta=1e-5, gamma=1024.0, seed=5)
JOB_TASK = dict(TASK, insecure_reproducible=True)  # seeded (tests compare with the plain simulation)


def test_each_party_program_names_only_its_own_file(tmp_path):
    spec = write(tmp_path, make_X(), parties=3)
    task = PCAJobTask(**JOB_TASK)
    files = [p.file for p in spec.parties[1:]]
    for i in range(4):
        blob = pickle.dumps(party_program(spec, i, task))
        present = [f for f in files if f.encode() in blob]
        assert present == ([] if i == 0 else [files[i - 1]])


def test_one_party_per_invocation_equals_the_in_process_run_bit_for_bit(tmp_path):
    """``sqm pca --job J --index I`` style: each party started on its own (as on separate hosts), real
    processes; the server receives the very integers of ``SQMPCA(backend='plain')`` with the same seed (PCA's
    one bit-for-bit test of real processes against the in-process run)."""
    X = make_X(seed=1)
    local = write(tmp_path / "job", X, parties=2)
    task = PCAJobTask(**JOB_TASK)
    own = tmp_path / "elsewhere" / "mine.csv"  # client 2's operator keeps its file outside the job folder
    own.parent.mkdir()
    os.replace(local.parties[2].file, own)
    files = {1: local.parties[1].file, 2: str(own)}
    spec = load_job(write_shared_job(local.path, tmp_path / "shared.json"))  # what every party is given
    assert [p.file for p in spec.parties] == [None] * 3 and spec.private == ()
    with pytest.raises(UsageError, match="names client 1's \"file\"; client 2's \"file\": refused"):
        run_job(local, task, 1, data_file=files[1])  # a job file naming any party's file: refused
    keys = str(tmp_path / "keys")  # parties started one by one authenticate with TLS, over loopback too
    make_certificates(keys, 3, days=1, job=spec.name or DEFAULT_JOB)
    out = {}

    def go(i):  # each its own --data-file (client 2's an absolute path outside the job folder)
        out[i] = run_job(spec, task, i, timeout=120, data_file=files.get(i), ssl_dir=keys)[i]

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ref = SQMPCA(backend="plain", **TASK).fit(VerticalData.split(X, 2))
    server = out[0]["result"]
    assert list(server["raw"]) == list(ref.raw_)
    assert np.array_equal(server["components"], ref.components_)
    assert [out[j]["result"]["clipped"] for j in (1, 2)] == ref.clipped_
    assert server["col_counts"] == [3, 3] and server["n_records"] == 30
    assert "clipped" not in server  # clip counts stay with their party
    assert out[1]["result"]["rows"] == 30 and out[2]["result"]["cols"] == 3
    assert out[1]["result"]["file"] == files[1] and out[2]["result"]["file"] == str(own)


def test_cli_job_mode_writes_json(tmp_path):
    from sqm.cli.command import main

    spec = write(tmp_path, make_X(seed=2), parties=2)
    out = tmp_path / "out.json"
    assert main(["pca", "--job", spec.path, "--components", "2", "--gamma", "1024", "--json", str(out),
                 "--backend", "plain"]) == 0
    r = json.loads(out.read_text())
    assert r["columns"] == [f"x{j}" for j in range(6)]  # the clients' column names, in client order
    V = np.array([[c[col] for col in r["columns"]] for c in r["released"]["components"]])  # {column: loading}
    assert V.shape == (2, 6)
    assert r["warnings"] == [w for w in r["warnings"] if "client 1 clipped 3 of its 30 rows (10.0%)" in w] != []
    np.testing.assert_allclose(V @ V.T, np.eye(2), atol=1e-10)
    rep = r["privacy"][0]
    assert rep["epsilon_server"] <= 1.0 + 1e-9 and rep["epsilon_client"] > rep["epsilon_server"]
    assert set(r["clients"]) == {"1", "2"}
    assert r["secure_mode"] is True  # no seed: every party's randomness from OS entropy


def _rewrite_ids(path, ids):
    lines = Path(path).read_text().splitlines()
    body = [f"{i},{line.split(',', 1)[1]}" for i, line in zip(ids, lines[1:], strict=False)]
    with open(path, "w") as f:
        f.write("\n".join([lines[0]] + body) + "\n")


def test_different_ids_run_on_the_records_in_common(tmp_path):
    """(Records in another order are aligned: tests/test_owndata.py; issue 23's cases: tests/test_alignment.py.)"""
    spec = write(tmp_path, make_X(), parties=2)
    ids = list(range(30))
    ids[7] = 1000
    _rewrite_ids(spec.parties[2].file, ids)
    recs = simulate(spec, PCAJobTask(**JOB_TASK))
    assert recs[0]["result"]["n_records"] == 29 and recs[0]["result"]["alignment"]["intersection"] == 29


def _set_cell(f, line: int, col: int, text: str) -> None:
    """Write ``text`` into one cell of a party CSV (0-based line, header included, and column)."""
    lines = Path(f).read_text().splitlines()
    parts = lines[line].split(",")
    parts[col] = text
    lines[line] = ",".join(parts)
    Path(f).write_text("\n".join(lines) + "\n")


def test_nan_in_a_party_file_refused_before_sharing(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    _set_cell(spec.parties[2].file, 5, 2, "nan")
    with pytest.raises(MPCError) as err:
        simulate(spec, PCAJobTask(**JOB_TASK))
    msg = str(err.value)
    assert "refused before any share was sent" in msg and "client 2" in msg and "missing values" in msg
    assert err.value.codes == {0: 3, 1: 3, 2: 6}  # client 2 refused its own data, the others refused the job


def test_missing_party_file(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    os.remove(spec.parties[1].file)
    with pytest.raises(ValueError, match="does not exist"):  # the launcher's check, before starting anyone
        run_local(spec, PCAJobTask(**JOB_TASK))
    # a party on another host whose file is missing: its own process refuses, naming it, for everyone
    programs = [party_program(spec, i, PCAJobTask(**JOB_TASK)) for i in range(3)]
    with pytest.raises(MPCError, match="^client 1 refused: its party file does not exist") as err:
        run_in_process(programs, timeout=60)
    assert spec.parties[1].file not in str(err.value)  # peers are not told where a party keeps its data


def test_empty_party_and_too_many_components(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    f = spec.parties[1].file
    Path(f).write_text("id\n" + "\n".join(str(i) for i in range(30)) + "\n")  # ids only, no columns
    with pytest.raises(MPCError, match="empty party"):
        simulate(spec, PCAJobTask(**JOB_TASK))
    spec = write(tmp_path / "b", make_X(), parties=2)
    with pytest.raises(MPCError, match="cannot find 7 components"):
        simulate(spec, PCAJobTask(**{**JOB_TASK, "n_components": 7}))


def test_read_party_csv_checks(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("id,a,b\n1,0.5,0.25\n2,1e-3,-2\n")
    t = read_party_csv(p)
    assert t.columns == ["a", "b"] and t.block.tolist() == [[0.5, 0.25], [1e-3, -2.0]]
    q = tmp_path / "q.csv"
    q.write_text("b,id,a\n0.25,1,0.5\n-2,2,1e-3\n")  # the same ids in another column position
    assert read_party_csv(q).ids == t.ids == ["1", "2"]
    assert t.ids_digest is None  # no digest of any id is ever made: the alignment sets the order's digest
    cases = {"id,a\n1,x\n": "holds text", "id,a\n1,1\n1,2\n": "repeats an id", "a,b\n1,2\n": "no id column",
             "id,a\n": "no records", "id,a\n1,inf\n": "infinite", "id,a\n1,2,3\n": "fields",
             "": "empty"}
    for text, msg in cases.items():
        p.write_text(text)
        with pytest.raises(ValueError, match=msg):
            read_party_csv(p)
    p.write_text("id,a\n1,secretvalue\n")
    with pytest.raises(PartyFileError) as err:
        read_party_csv(p)
    assert "secretvalue" in str(err.value)  # the detail shows its own operator the cell...
    assert "secretvalue" not in err.value.public and "'a'" not in err.value.public  # ...never a peer


def test_load_job_checks(tmp_path):
    j = tmp_path / "job.json"
    with pytest.raises(ValueError, match="does not exist"):
        load_job(j)
    bad = {
        "{": "not valid JSON",
        json.dumps({"parties": [{"address": "127.0.0.1:5000"}]}): "at least two clients, got 0",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:2", "file": "a.csv"}]}): "t = 0",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "nohost", "file": "a.csv"},
                                {"address": "h:3", "file": "b.csv"}]}): "host:port",
        json.dumps({"parties": [{"address": "h:1", "file": "/s.csv"}, {"address": "h:2", "file": "a"},
                                {"address": "h:3", "file": "b.csv"}]}): "the server's file is an absolute path",
        json.dumps({"parties": [{"address": "h:1", "bounds": {"a": [0, 1]}}, {"address": "h:2", "file": "a"},
                                {"address": "h:3", "file": "b.csv"}]}): "server",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:2", "file": "a", "model": "m.py"},
                                {"address": "h:3", "file": "b.csv"}]}): "file.py:factory",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:2", "file": 5}, {"address": "h:3", "file": "b"}]}):
            "client 1's 'file' must be a string or null, got 5",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:2", "file": ""}, {"address": "h:3", "file": "b"}]}):
            "client 1's 'file' must be a path",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:1", "file": "a.csv"},
                                {"address": "h:3", "file": "b.csv"}]}): "duplicate",
    }
    for text, msg in bad.items():
        j.write_text(text)
        with pytest.raises(ValueError, match=msg):
            load_job(j)
    ports = free_ports(3)
    write_job(j, [f"127.0.0.1:{p}" for p in ports], [tmp_path / "a.csv", tmp_path / "b.csv"], min_intersection=1)
    spec = load_job(j)
    assert spec.n_clients == 2 and spec.parties[2].file == str(tmp_path / "b.csv")
    with pytest.raises(ValueError, match="out of range"):
        party_program(spec, 3, PCAJobTask(**JOB_TASK))


def test_job_file_over_mutually_authenticated_tls(tmp_path):
    from sqm.mpc.net.certs import make_certificates

    make_certificates(str(tmp_path / "keys"), 3, job="pca-test")  # certificates naming party i of job pca-test
    X = make_X(seed=3)
    spec = write(tmp_path / "job", X, parties=2)
    raw = json.loads(Path(spec.path).read_text())
    with open(spec.path, "w") as f:  # the job file names the job as its certificates do
        json.dump({**raw, "name": "pca-test"}, f)
    spec = load_job(spec.path)
    assert spec.name == "pca-test" and len(spec.job_id) == 32
    recs = run_local(spec, PCAJobTask(**JOB_TASK), ssl_dir=str(tmp_path / "keys"))
    ref = SQMPCA(backend="plain", **TASK).fit(VerticalData.split(X, 2))
    assert np.array_equal(recs[0]["result"]["components"], ref.components_)
    assert len({r["job_digest"] for r in recs}) == 1  # every party agreed the same job description


# ----- issue 11: seeds stay with their party, keyed id digests, no file content to peers, confined paths -----


def test_public_parameters_hold_no_seed_and_a_seed_needs_the_opt_in():
    plain = PCAJobTask(**{**TASK, "seed": None})
    assert plain.secure_mode and plain.seed is None
    seeded = [PCAJobTask(**{**JOB_TASK, "seed": s}) for s in (5, 6)]
    assert all(not t.secure_mode for t in seeded)
    assert seeded[0].public() == seeded[1].public() == plain.public()  # the seed is no public parameter
    with pytest.raises(ValueError, match="--insecure-reproducible"):
        PCAJobTask(**TASK)  # a seed without the opt-in


def test_each_party_uses_only_the_seed_on_its_own_command_line(tmp_path):
    """Parties given different seeds still agree (no seed is compared or sent), and client j's noise and
    rounding come from entry j of spawn_seeds(ITS seed), bit for bit."""
    from sqm.mechanism.client import QuantizingClient
    from sqm.mechanism.rng import spawn_seeds
    from sqm.mechanism.vertical import party_norm_bounds

    X = make_X(seed=4)
    spec = write(tmp_path, X, parties=2)
    seeds = [100, 101, 102]
    programs = [party_program(spec, i, PCAJobTask(**{**JOB_TASK, "seed": seeds[i]})) for i in range(3)]
    recs = run_in_process(programs, timeout=120)
    server = recs[0]["result"]
    mu = server["report"]["mu"]
    bounds = party_norm_bounds(1.0, [3, 3])
    parts = [QuantizingClient(X[:, 3 * (j - 1):3 * j], 1024.0, float(bounds[j - 1]), mu / 2, 36,
                              spawn_seeds(seeds[j], 3)[j])() for j in (1, 2)]
    Xh = np.hstack([p[0] for p in parts]).astype(object)
    expect = (Xh.T @ Xh).reshape(-1) + parts[0][1].astype(object) + parts[1][1].astype(object)
    assert [int(v) for v in server["raw"]] == [int(v) for v in expect]


class DigestTask(JobTask):
    """A job-file task returning each client's digest of its aligned records' order to that client only."""

    def public(self):
        return ("digest-test",)

    async def run(self, ctx, table, meta):
        return {} if table is None else {"digest": table.ids_digest}

    def release(self, meta):  # no ledger in this test
        raise NotImplementedError


def test_order_digests_agree_within_a_job_and_are_fresh_per_job(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    jobs = [simulate(spec, DigestTask(), timeout=120) for _ in range(2)]
    for recs in jobs:
        d1, d2 = recs[1]["result"]["digest"], recs[2]["result"]["digest"]
        assert isinstance(d1, bytes) and len(d1) == 32 and d1 == d2  # one job: the same order at both clients
        assert "digest" not in recs[0]["result"]  # the server holds no digest
    assert jobs[0][1]["result"]["digest"] != jobs[1][1]["result"]["digest"]  # same ids, two jobs: unlinkable
    ids = read_party_csv(spec.parties[1].file).ids
    import hashlib

    unkeyed = hashlib.sha256(b"".join(len(i.encode()).to_bytes(8, "big") + i.encode() for i in ids)).digest()
    assert unkeyed not in (jobs[0][1]["result"]["digest"], jobs[1][1]["result"]["digest"])


SECRETS = ["7.123456789", "secretA", "4242.5", "secretvalue", "31337"]
BAD_FILES = {  # each holds some of SECRETS in its cells
    "first line is a record": "7.123456789,secretA\n8,4242.5\n",
    "no id column": "key,a\n31337,4242.5\n",
    "not a number": "id,a\n31337,secretvalue\n",
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_refusal_sent_to_peers_names_no_cell_value(tmp_path, caplog, case):
    from sqm.framework.party import load_own_file
    from sqm.mpc.net import wire

    f = tmp_path / "p.csv"
    f.write_text(BAD_FILES[case])
    table, msg = load_own_file(str(f), "id", 2)
    assert table is None and set(msg) == {"error"}
    sent = wire.encode(msg)  # the bytes every peer receives
    assert not any(s.encode() in sent for s in SECRETS + ["key", str(tmp_path)])
    local = caplog.text  # the full detail stays at the party itself (its own log)
    assert "client 2" in local and str(f) in local


def test_headerless_file_refused_without_sending_its_first_record(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    with open(spec.parties[2].file, "w") as fh:
        fh.write(BAD_FILES["first line is a record"])
    with pytest.raises(MPCError) as err:
        simulate(spec, PCAJobTask(**JOB_TASK), timeout=120)
    msg = str(err.value)  # every party's last word, the server's included
    assert "client 2 refused: its file has no id column 'id'" in err.value.messages[0] and err.value.codes[0] == 3
    assert msg.startswith("client 2 refused: its file has no id column 'id'"), msg
    assert not any(s in msg for s in SECRETS)


def test_job_file_paths_confined_to_its_folder(tmp_path, monkeypatch):
    import builtins

    job_dir = tmp_path / "job"
    (job_dir / "sub").mkdir(parents=True)
    (tmp_path / "outside.csv").write_text("id,a\n1,2\n")
    os.symlink(tmp_path / "outside.csv", job_dir / "link.csv")
    os.symlink(tmp_path, job_dir / "up")
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    j = job_dir / "job.json"

    def job(first):
        j.write_text(json.dumps({"parties": [{"address": "h:1"}, {"address": "h:2", "file": first},
                                             {"address": "h:3", "file": "b.csv"}]}))
        return load_job(j)

    for bad, msg in [("../../../../etc/passwd", "resolves outside"), ("/etc/passwd", "absolute path"),
                     ("link.csv", "resolves outside"), ("up/outside.csv", "resolves outside"),
                     ("sub/../../outside.csv", "resolves outside")]:
        with pytest.raises(ValueError, match=f"client 1's file .*{msg}.*--data-file") as err:
            job(bad)
        assert "passwd" not in "".join(opened) and "outside.csv" not in "".join(opened)  # nothing was read
        assert "root:" not in str(err.value)
    spec = job("sub/../a.csv")  # inside the folder: fine
    assert spec.parties[1].file == os.path.join(str(job_dir), "sub/../a.csv")
    # an operator's own file anywhere, on its own command line, for its own party only
    mine = spec.with_file(1, tmp_path / "outside.csv")
    assert mine.parties[1].file == str(tmp_path / "outside.csv") and mine.parties[2] == spec.parties[2]
    with pytest.raises(ValueError, match="--index 0..2"):
        spec.with_file(3, tmp_path / "outside.csv")
    # the server's own file: only for a task where it holds one (PBM-VFL's labels), refused before anything runs
    with pytest.raises(ValueError, match="the server holds no data: remove party 0's"):
        party_program(spec.with_file(0, tmp_path / "outside.csv"), 0, PCAJobTask(**JOB_TASK))
    with pytest.raises(ValueError, match="does not use: remove it"):
        party_program(spec.with_model(1, "m.py:build"), 1, PCAJobTask(**JOB_TASK))
    with pytest.raises(ValueError, match="--index"):
        run_job(spec, PCAJobTask(**JOB_TASK), None, data_file=str(tmp_path / "outside.csv"))
    with pytest.raises(ValueError, match="outside the job file's folder"):
        write_job(j, ["h:1", "h:2", "h:3"], [tmp_path / "outside.csv", job_dir / "b.csv"], min_intersection=1)


def test_fewer_than_two_clients_refused_before_any_process_starts(monkeypatch):
    import subprocess

    from sqm.mpc.protocols.mpyc_backend import MPyCBackend
    from sqm.mpc.protocols.context import EvaluateJob
    from sqm.mpc.protocols.secure_sum import SumClient, sum_job

    def no_process(*a, **k):
        raise AssertionError("a party process was started")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    with pytest.raises(ValueError, match="at least two clients, got 1: .*t = 0 .*server's share"):
        run_parties([EvaluateJob(None), EvaluateJob(None)], min_clients=2)
    with pytest.raises(ValueError, match="at least two clients, got 1: .*t = 0"):
        MPyCBackend().run(sum_job([SumClient(np.array([1, 2]))], 2, 10))
    with pytest.raises(ValueError, match="at least two clients, got 1: .*t = 0"):
        SQMPCA(2, 1.0, backend="mpyc").fit(VerticalData.split(make_X(), 1))


def test_cli_seed_in_job_mode_needs_the_opt_in(tmp_path, capsys):
    from sqm.cli.command import main

    spec = write(tmp_path, make_X(seed=2), parties=2)
    out = tmp_path / "out.json"
    args = ["pca", "--job", spec.path, "--components", "2", "--gamma", "1024", "--json", str(out), "--seed", "1",
            "--backend", "plain"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--insecure-reproducible" in err and not out.exists()
    assert main(args + ["--insecure-reproducible"]) == 0
    cap = capsys.readouterr()
    assert "WARNING" in cap.err and "regenerate every party's noise" in cap.err
    r = json.loads(out.read_text())
    assert r["secure_mode"] is False and [len(c) for c in r["released"]["components"]] == [6, 6]
    assert main(["pca", "--job", spec.path, "--data-file", str(out)]) == 2  # --data-file needs --index
    assert "--index" in capsys.readouterr().err


# ----- the server's privacy-budget ledger (issue 13) -----------------------------------------------------------


def _ledger_setup(tmp_path, dataset="survey"):
    """A job file naming a dataset, a PCA task, its one release's events, and a budget that two releases fit
    and three do not (the RDP composition at the budget's delta, sqm.mechanism.events.compose)."""
    from sqm.framework.party import JobMeta
    from sqm.mechanism.events import compose

    spec = load_job(write_party_csvs(make_X(), tmp_path / "job", 2, dataset=dataset, min_intersection=1))
    task = PCAJobTask(n_components=2, epsilon=1.0, delta=1e-6, gamma=1024.0)
    events = list(task.release(JobMeta((3, 3), 30)).events)
    two, three = compose(events * 2, 1e-5), compose(events * 3, 1e-5)
    assert 1.0 < two < three
    return spec, task, two, ((two + three) / 2, 1e-5)


def test_ledger_composes_two_releases_and_refuses_a_third_before_any_share(tmp_path):
    """Real processes: two PCA releases on one dataset compose in the server's ledger; a third that would exceed
    the dataset's budget is refused by the server before any share is sent: every party exits 'refused' (3)
    naming what is left, and nothing more is recorded."""
    from sqm.mechanism.ledger import Ledger

    spec, task, two, budget = _ledger_setup(tmp_path)
    path = str(tmp_path / "ledger.sqlite")
    first = run_job(spec, task, ledger=path, budget=budget)  # real party processes
    second = run_job(spec, task, ledger=path, budget=budget, backend="plain")  # the same programs in process
    assert first[0]["result"]["ledger"]["status"] == "completed" and "ledger" not in first[1]["result"]
    entry = second[0]["result"]["ledger"]
    assert entry["dataset"] == "survey" and entry["spent"] == pytest.approx(two, rel=1e-9)
    assert entry["left"] == pytest.approx(budget[0] - two, rel=1e-9)
    ledger = Ledger(path)
    assert [r["status"] for r in ledger.releases("survey")] == ["completed", "completed"]
    assert ledger.status("survey").spent == pytest.approx(two, rel=1e-9)
    with pytest.raises(MPCError) as err:
        run_job(spec, task, ledger=path, budget=budget)  # real party processes
    assert err.value.codes == {0: 3, 1: 3, 2: 3}, err.value  # refused at every party, no one lost or crashed
    msg = str(err.value)
    assert msg.startswith("server refused before any share was sent: dataset 'survey' is over its privacy budget")
    assert msg.count(f"left {budget[0] - two:.4g}") == 1  # the server's figures stay with the server's operator
    for i in (1, 2):  # what the clients are told, not repeated in the message
        assert ("the server (party 0) refused: the job would exceed its own privacy budget for dataset 'survey'"
                in err.value.messages[i]), err.value.messages
        assert any(d.startswith(f"client {i} (party {i}) exited 3 (refused): on server's notice")
                   for d in err.value.details), err.value.details
    assert msg.count("the job would exceed its own privacy budget for dataset 'survey'") == 1  # told, said once
    assert len(ledger.releases("survey")) == 2


def test_ledger_refusals_send_no_share(tmp_path, monkeypatch):
    """In process, with every party's input phase spied on (where a client hands over its input: shares in
    the real protocol): a job over budget, or on a dataset without a budget, is refused before any party
    reaches it (the clients stop at the evaluation's first agreement, which the refusing server never
    answers); a job within budget reaches it at every party."""
    from sqm.mpc.protocols.evaluation import Evaluation

    calls = []
    real = Evaluation._secure_outputs

    async def spy(self, *a, **k):
        calls.append(self.tr.pid)
        return await real(self, *a, **k)

    monkeypatch.setattr(Evaluation, "_secure_outputs", spy)
    spec, task, two, budget = _ledger_setup(tmp_path)
    path = str(tmp_path / "ledger.sqlite")
    with pytest.raises(MPCError, match="has no privacy budget in the ledger") as err:
        run_job(spec, task, ledger=path, backend="plain")
    assert err.value.codes == {0: 3, 1: 3, 2: 3} and calls == []
    with pytest.raises(MPCError, match="over its privacy budget: budget epsilon 0.5 .* left 0.5") as err:
        run_job(spec, task, ledger=path, budget=(0.5, 1e-5), backend="plain")
    assert calls == []
    run_job(spec, task, ledger=str(tmp_path / "other.sqlite"), budget=budget, backend="plain")
    assert sorted(calls) == [0, 1, 2]
    unnamed = load_job(write_party_csvs(make_X(), tmp_path / "unnamed", 2, min_intersection=1))
    with pytest.raises(ValueError, match="names no dataset"):
        run_job(unnamed, task, ledger=path, backend="plain")



def test_a_client_keeps_its_own_ledger(tmp_path):
    """A client's own ledger records the release of its records (the events against the server, as the server's
    ledger does) and, over that client's budget, the client refuses the job before any share is sent, naming
    itself (tests/test_client_budget.py runs it through real processes)."""
    from sqm.framework.party import JobMeta
    from sqm.framework.ledger_guard import LedgerGuard
    from sqm.mechanism.ledger import Ledger

    spec, task, _, _ = _ledger_setup(tmp_path)
    report = task.release(JobMeta((3, 3), 30))
    mine = str(tmp_path / "client1.sqlite")

    def programs(guard):
        return [party_program(spec, i, task, guard if i == 1 else None) for i in range(3)]

    run_in_process(programs(LedgerGuard(mine, (10.0, 1e-5))))
    led = Ledger(mine)
    [entry] = [e for d in led.datasets() for e in led.releases(d)]  # its own dataset (its file's), not 'survey'
    assert entry["dataset"] != "survey" and entry["epsilon"] == pytest.approx(report.epsilon_server, rel=1e-9)
    assert entry["statistic"].endswith("(this client's records, released to the server)")
    with pytest.raises(MPCError, match="^client 1 refused before any share was sent: dataset ") as err:
        run_in_process(programs(LedgerGuard(str(tmp_path / "strict.sqlite"), (0.5, 1e-5))))
    assert err.value.codes == {0: 3, 1: 3, 2: 3}
    assert ("refused before any share was sent: client 1 refused: the job would exceed its own privacy budget"
            in err.value.messages[0])  # what the others are told


def test_cli_job_ledger_and_budget(tmp_path):
    import json

    from sqm.cli.command import main

    spec, _, _, _ = _ledger_setup(tmp_path, dataset="census")
    out = tmp_path / "out.json"
    args = ["pca", "--job", spec.path, "--components", "2", "--epsilon", "1", "--delta", "1e-6", "--backend",
            "plain", "--ledger", str(tmp_path / "l.sqlite"), "--budget", "1.1,1e-5", "--json", str(out)]
    assert main(args) == 0
    r = json.loads(out.read_text())
    assert r["dataset"] == "census" and r["ledger"]["dataset"] == "census" and r["ledger"]["left"] > 0
    assert main(args) == 3  # a second release (composed: 1.29) does not fit 1.1: refused (exit 3)
    with pytest.raises(SystemExit):
        main(args[:-4] + ["--budget", "1.1"])  # --budget needs EPS,DELTA


def test_a_local_jobs_operator_sees_the_bad_files_detail(tmp_path):
    """All parties on this machine (real processes): the launcher's error shows the bad-data party's own detail
    (its file, the column), which its peers were not told (issue 26: not "see the detail above" with nothing
    above it)."""
    spec = write(tmp_path, make_X(), parties=2)
    f = spec.parties[2].file
    _set_cell(f, 4, 2, "oops")
    with pytest.raises(MPCError) as err:
        run_local(spec, PCAJobTask(**JOB_TASK))
    msg = str(err.value)
    assert err.value.codes[2] == 6 and os.path.basename(f) in msg  # the detail names its own file
    assert "client 1 (party 1) exited 3 (refused): on client 2's notice" in msg and msg.count(os.path.basename(f)) >= 1
