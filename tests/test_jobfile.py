"""Job-file multi-party PCA: separate party processes, each reading only its own CSV file."""
import json
import os
import pickle
import threading

import numpy as np
import pytest

from apps.jobfile import (load_job, party_program, read_party_csv, run_local, run_one, write_job,
                          write_party_csvs)
from apps.pca import SQMPCA, PCAJobTask
from mpc.launch import MPCError, free_ports, run_parties
from sqm.vertical import VerticalData


def make_X(m=30, n=6, seed=0):
    X = np.random.default_rng(seed).normal(size=(m, n)) * np.linspace(2.0, 0.5, n)
    return X / np.linalg.norm(X, axis=1).max()


def write(tmp_path, X, parties=2, **kw):
    return load_job(write_party_csvs(X, tmp_path, parties, **kw))


TASK = dict(n_components=2, epsilon=1.0, delta=1e-5, gamma=1024.0, seed=5)


def test_job_file_parties_equal_the_plain_simulation_bit_for_bit(tmp_path):
    X = make_X()
    spec = write(tmp_path, X, parties=2)
    recs = run_local(spec, PCAJobTask(**TASK))
    server = recs[0]["result"]
    ref = SQMPCA(backend="plain", **TASK).fit(VerticalData.split(X, 2))
    assert list(server["raw"]) == list(ref.raw_)
    assert np.array_equal(server["components"], ref.components_)
    assert [recs[j]["result"]["clipped"] for j in (1, 2)] == ref.clipped_
    assert server["col_counts"] == [3, 3] and server["n_records"] == 30
    assert "clipped" not in server  # clip counts stay with their party
    assert recs[1]["result"]["file"] == spec.parties[1].file


def test_each_party_program_names_only_its_own_file(tmp_path):
    spec = write(tmp_path, make_X(), parties=3)
    task = PCAJobTask(**TASK)
    files = [p.file for p in spec.parties[1:]]
    for i in range(4):
        blob = pickle.dumps(party_program(spec, i, task))
        present = [f for f in files if f.encode() in blob]
        assert present == ([] if i == 0 else [files[i - 1]])


def test_one_party_per_invocation(tmp_path):
    """``sqm pca --job J --index I`` style: each party started on its own (as on separate hosts)."""
    X = make_X(seed=1)
    spec = write(tmp_path, X, parties=2)
    task = PCAJobTask(**TASK)
    out = {}

    def go(i):
        out[i] = run_one(spec, i, task, timeout=120, connect_timeout=60)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ref = SQMPCA(backend="plain", **TASK).fit(VerticalData.split(X, 2))
    assert np.array_equal(out[0]["result"]["components"], ref.components_)
    assert out[1]["result"]["rows"] == 30 and out[2]["result"]["cols"] == 3


def test_cli_job_mode_writes_json(tmp_path):
    from apps.cli import main

    spec = write(tmp_path, make_X(seed=2), parties=2)
    out = tmp_path / "out.json"
    assert main(["pca", "--job", spec.path, "--components", "2", "--gamma", "1024", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    V = np.array(r["components"])
    assert V.shape == (2, 6)
    np.testing.assert_allclose(V @ V.T, np.eye(2), atol=1e-10)
    assert r["epsilon_server"] <= 1.0 + 1e-9 and r["epsilon_client"] > r["epsilon_server"]
    assert set(r["clients"]) == {"1", "2"}


def _rewrite_ids(path, ids):
    lines = open(path).read().splitlines()
    body = [f"{i},{line.split(',', 1)[1]}" for i, line in zip(ids, lines[1:])]
    with open(path, "w") as f:
        f.write("\n".join([lines[0]] + body) + "\n")


@pytest.mark.parametrize("how", ["order", "values"])
def test_misaligned_ids_refused(tmp_path, how):
    spec = write(tmp_path, make_X(), parties=2)
    ids = list(range(30))
    if how == "order":
        ids[3], ids[4] = ids[4], ids[3]
    else:
        ids[7] = 1000
    _rewrite_ids(spec.parties[2].file, ids)
    with pytest.raises(MPCError, match="record ids"):
        run_local(spec, PCAJobTask(**TASK))


def test_nan_in_a_party_file_refused_before_sharing(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    f = spec.parties[2].file
    lines = open(f).read().splitlines()
    parts = lines[5].split(",")
    parts[2] = "nan"
    lines[5] = ",".join(parts)
    open(f, "w").write("\n".join(lines) + "\n")
    with pytest.raises(MPCError) as err:
        run_local(spec, PCAJobTask(**TASK))
    msg = str(err.value)
    assert "refused before any share was sent" in msg and "client 2" in msg and "NaN" in msg
    assert "exited 3" in msg  # refused (not crashed) at every party


def test_missing_party_file(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    os.remove(spec.parties[1].file)
    with pytest.raises(ValueError, match="does not exist"):  # the launcher's check, before starting anyone
        run_local(spec, PCAJobTask(**TASK))
    # a party on another host whose file is missing: its own process refuses, naming it, for everyone
    programs = [party_program(spec, i, PCAJobTask(**TASK)) for i in range(3)]
    with pytest.raises(MPCError, match="client 1: party file .* does not exist"):
        run_parties(programs, timeout=60)


def test_empty_party_and_too_many_components(tmp_path):
    spec = write(tmp_path, make_X(), parties=2)
    f = spec.parties[1].file
    open(f, "w").write("id\n" + "\n".join(str(i) for i in range(30)) + "\n")  # ids only, no columns
    with pytest.raises(MPCError, match="empty party"):
        run_local(spec, PCAJobTask(**TASK))
    spec = write(tmp_path / "b", make_X(), parties=2)
    with pytest.raises(MPCError, match="cannot find 7 components"):
        run_local(spec, PCAJobTask(**{**TASK, "n_components": 7}))


def test_read_party_csv_checks(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("id,a,b\n1,0.5,0.25\n2,1e-3,-2\n")
    t = read_party_csv(p)
    assert t.columns == ["a", "b"] and t.block.tolist() == [[0.5, 0.25], [1e-3, -2.0]]
    q = tmp_path / "q.csv"
    q.write_text("b,id,a\n0.25,1,0.5\n-2,2,1e-3\n")  # the same ids in another column position
    assert read_party_csv(q).ids_digest == t.ids_digest
    cases = {"id,a\n1,x\n": "not a number", "id,a\n1,1\n1,2\n": "repeats ids", "a,b\n1,2\n": "no id column",
             "id,a\n": "no records", "id,a\n1,inf\n": "NaN or infinite", "id,a\n1,2,3\n": "fields",
             "": "empty"}
    for text, msg in cases.items():
        p.write_text(text)
        with pytest.raises(ValueError, match=msg):
            read_party_csv(p)
    p.write_text("id,a\n1,secretvalue\n")
    with pytest.raises(ValueError) as err:
        read_party_csv(p)
    assert "secretvalue" not in str(err.value)  # errors never echo a record's values


def test_load_job_checks(tmp_path):
    j = tmp_path / "job.json"
    with pytest.raises(ValueError, match="does not exist"):
        load_job(j)
    bad = {
        "{": "not valid JSON",
        json.dumps({"parties": [{"address": "127.0.0.1:5000"}]}): "at least one client",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "nohost", "file": "a.csv"}]}): "host:port",
        json.dumps({"parties": [{"address": "h:1", "file": "s.csv"}, {"address": "h:2", "file": "a"}]}): "server",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:2"}]}): "needs a 'file'",
        json.dumps({"parties": [{"address": "h:1"}, {"address": "h:1", "file": "a.csv"}]}): "duplicate",
    }
    for text, msg in bad.items():
        j.write_text(text)
        with pytest.raises(ValueError, match=msg):
            load_job(j)
    ports = free_ports(3)
    write_job(j, [f"127.0.0.1:{p}" for p in ports], [tmp_path / "a.csv", tmp_path / "b.csv"])
    spec = load_job(j)
    assert spec.n_clients == 2 and spec.parties[2].file == str(tmp_path / "b.csv")
    with pytest.raises(ValueError, match="out of range"):
        party_program(spec, 3, PCAJobTask(**TASK))


def test_job_file_over_mutually_authenticated_tls(tmp_path):
    from mpc.certs import make_certificates

    make_certificates(str(tmp_path / "keys"), 3)
    X = make_X(seed=3)
    spec = write(tmp_path / "job", X, parties=2)
    recs = run_local(spec, PCAJobTask(**TASK), ssl_dir=str(tmp_path / "keys"))
    ref = SQMPCA(backend="plain", **TASK).fit(VerticalData.split(X, 2))
    assert np.array_equal(recs[0]["result"]["components"], ref.components_)
