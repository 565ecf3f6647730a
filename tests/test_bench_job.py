"""python -m bench job: the whole PCA job (alignment + release) beside SecretFlow's PSI + SPU ABY3 Gram.  The options'
parsing and refusals; the party files and the peer's Gram input built from them; the report's rows, ratios and
target from given runs; a tiny real run without ``spu`` (ours alone, a note, exit 0, every process's phases); with
an interpreter that imports ``spu`` (``$SQM_SPU_PYTHON``), a tiny run of both sides.  No timing bounds."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench import job
from bench.command import build_parser, main, parse
from sqm.errors import UsageError


def _no_spu_python(tmp_path):
    """An interpreter stand-in that cannot import spu (as a Python without it fails)."""
    stub = tmp_path / "python-without-spu"
    stub.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'spu'\" >&2\nexit 1\n")
    stub.chmod(0o755)
    return str(stub)


def test_options_parse_with_their_defaults():
    args = parse(["job", "--rows", "300,1e3", "--cols", "6", "--clients", "2", "--repeat", "2", "--overlap", "0.5",
                  "--spu-python", "/x/python"], build_parser())
    assert (args.rows, args.cols, args.clients, args.repeat, args.overlap) == ("300,1e3", "6", "2", 2, 0.5)
    assert args.spu_python == "/x/python" and args.command == "bench job" and args.func is job.cli
    assert job._ints(args.rows, "--rows", 1) == [300, 1000]
    plain = parse(["job"], build_parser())
    assert (plain.rows, plain.cols, plain.clients, plain.repeat, plain.spu_python) == (
        "195666,1000000", "117", "2,3", 1, None)


@pytest.mark.parametrize("argv, message", [
    (["--clients", "1"], "--clients takes a comma list of integers >= 2"),
    (["--rows", "many"], "--rows takes a comma list of integers, got 'many'"),
    (["--overlap", "0"], "--overlap takes a fraction in (0, 1]"),
    (["--repeat", "0"], "--repeat takes an integer >= 1"),
    (["--cols", "2", "--clients", "3"], "--cols 2: every one of 3 clients needs a column"),
])
def test_bad_options_are_refused(argv, message, monkeypatch):
    monkeypatch.setattr(job, "run", lambda *a, **k: pytest.fail("refused before any run"))
    args = parse(["job", "--rows", "50", "--cols", "6", "--clients", "2"] + argv, build_parser())
    with pytest.raises(UsageError) as err:
        args.func(args)
    assert message in str(err.value)


def test_party_files_split_the_columns_and_the_peer_rounds_the_common_rows(tmp_path):
    path = job.write_job_files(str(tmp_path), 400, 7, 3, 0.75, seed=3)
    assert os.path.basename(path) == "job.json"
    tables = [pq.read_table(tmp_path / f"party{j}.parquet") for j in (1, 2, 3)]
    assert [t.column_names for t in tables] == [["id", "x0", "x1", "x2"], ["id", "x3", "x4"], ["id", "x5", "x6"]]
    ids = [np.asarray(t.column("id")) for t in tables]
    assert all(len(i) == 400 and np.all(np.diff(i) > 0) for i in ids)  # rows per client, sorted, distinct
    common = np.intersect1d(np.intersect1d(ids[0], ids[1]), ids[2])
    assert common.size == 300  # the overlap built in
    blocks, m = job.peer_blocks(path, 4096.0)
    assert m == 300 and [b.shape for b in blocks] == [(300, 3), (300, 2), (300, 2)]
    for t, own, b in zip(tables, ids, blocks, strict=True):  # the common rows, in id order, rounded at gamma
        X = np.column_stack([np.asarray(t.column(c)) for c in t.column_names[1:]])[np.isin(own, common)]
        assert b.dtype == np.int64 and np.all(np.abs(b - 4096.0 * X) < 1)


def _run(side, cpu, clients=2, rows=195666, cols=117, repeat=0, correct=True):
    return dict(side=side, clients=clients, rows=rows, cols=cols, repeat=repeat, cpu_seconds=cpu, wall_seconds=cpu / 2,
                processes=clients + 1, intersection=10, correct=correct, load_1min=1.0, phases=[{"process": "p"}])


@pytest.mark.parametrize("ours, met", [(10.0, True), (20.0, False)])
def test_report_rows_ratio_and_target(ours, met):
    runs = [_run("ours", ours + 5), _run("peer", 120.0), _run("ours", ours, repeat=1), _run("peer", 110.0, repeat=1),
            _run("ours", 1.0, rows=1000), _run("peer", 3.0, rows=1000)]
    rep = job.summarize(dict(runs=runs))
    assert [(r["rows"], r["side"]) for r in rep["rows"]] == [(195666, "ours"), (195666, "peer"), (1000, "ours"),
                                                             (1000, "peer")]
    first = rep["rows"][0]
    assert first["cpu_seconds"] == ours and first["all_cpu_seconds"] == [ours + 5, ours]  # the least CPU quoted
    assert [(q["rows"], q["ratio"]) for q in rep["ratios"]] == [(195666, 110.0 / ours), (1000, 3.0)]
    assert rep["target_met"] is met and rep["target_ratio"] == job.TARGET_RATIO and rep["correct"] is True


def test_no_target_verdict_without_the_target_cell():
    rep = job.summarize(dict(runs=[_run("ours", 1.0, clients=3), _run("peer", 30.0, clients=3),
                                   _run("ours", 1.0, rows=5, correct=False)]))
    assert rep["target_met"] is None and rep["correct"] is False and len(rep["ratios"]) == 1


def test_phase_names_keep_each_process_order():
    phases = [{"process": "server", "start": 1, "agree": 1, "open": 1, "exit": 1, "cpu": 1},
              {"process": "client", "start": 1, "agree": 1, "checks": 1, "share": 1, "open": 1, "exit": 1, "cpu": 1}]
    assert job._phase_names(phases) == ["start", "agree", "checks", "share", "open", "exit"]


def test_without_spu_ours_alone_through_real_processes(tmp_path, capsys):
    out = tmp_path / "job.json"
    assert main(["job", "--rows", "300", "--cols", "6", "--clients", "2", "--spu-python", _no_spu_python(tmp_path),
                 "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "SecretFlow absent" in text and "pip install spu" in text  # the note, and how to get the peer
    assert "seconds per phase, ours" in text and "target (KDDCUP" not in text  # no verdict without the peer
    doc = json.loads(out.read_text())
    rep = doc["details"]
    assert doc["command"] == "bench job" and rep["note"].startswith("SecretFlow absent")
    assert rep["secretflow"] is None and rep["ratios"] == [] and rep["target_met"] is None
    [row] = rep["rows"]
    assert (row["side"], row["clients"], row["rows"], row["cols"], row["processes"]) == ("ours", 2, 300, 6, 3)
    assert row["intersection"] == 240 and row["correct"] is True  # 80% of 300 ids in both sets
    assert row["cpu_seconds"] > 0 and row["wall_seconds"] > 0
    assert [p["process"] for p in row["phases"]] == ["server", "client 1", "client 2"]
    for p in row["phases"]:  # each party's own timings: start, its transport's phases, exit, its CPU
        assert {"start", "agree", "exchange input shares", "degree reduction", "open result", "exit", "cpu"} <= set(p)
        assert p["cpu"] > 0 and p["start"] > 0
    assert all("share inputs (local)" in p for p in row["phases"][1:])  # the clients round, noise and share
    assert doc["results"] == rep["rows"]


def test_no_peer_runs_ours_alone_without_asking_for_spu(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.peers.spu_probe", lambda python: pytest.fail("--no-peer looks for no spu"))
    monkeypatch.setattr(job, "run_peer", lambda *a, **k: pytest.fail("--no-peer runs no peer"))
    monkeypatch.setattr(job, "run_ours", lambda path, timeout: dict(
        wall_seconds=1.0, cpu_seconds=2.0, load_1min=0.5, processes=3, intersection=40, phases=[]))
    out = tmp_path / "job.json"
    assert main(["job", "--rows", "50", "--cols", "4", "--clients", "2", "--no-peer", "--json", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())["details"]
    assert rep["note"] == "the peer not run (--no-peer): ours alone" and [r["side"] for r in rep["rows"]] == ["ours"]
    assert rep["rows"][0]["correct"] is True  # 80% of 50 ids


def _spu_python():
    python = os.environ.get("SQM_SPU_PYTHON") or (sys.executable if importlib.util.find_spec("spu") else None)
    if python is None:
        pytest.skip("no interpreter imports spu (set SQM_SPU_PYTHON to one that does)")
    if subprocess.run([python, "-c", "import spu"], capture_output=True, timeout=120).returncode != 0:
        pytest.skip(f"{python} cannot import spu")
    return python


@pytest.mark.slow
@pytest.mark.parametrize("clients, protocol", [(2, "ECDH"), (3, "ECDH_NPC")])
def test_tiny_run_beside_the_peer(tmp_path, clients, protocol):
    out = tmp_path / "job.json"
    assert main(["job", "--rows", "300", "--cols", "6", "--clients", str(clients), "--spu-python", _spu_python(),
                 "--json", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())["details"]
    ours, peer = rep["rows"]
    assert (ours["side"], peer["side"], peer["psi_protocol"]) == ("ours", "peer", protocol)
    assert ours["intersection"] == peer["intersection"] == 240 and rep["correct"] is True  # the peer's Gram exact too
    assert [p["process"] for p in peer["phases"]] == [f"PSI party {i}" for i in range(clients)] + [
        f"Gram node {i}" for i in range(3)]
    assert [(q["clients"], q["ratio"]) for q in rep["ratios"]] == [(clients, peer["cpu_seconds"] / ours["cpu_seconds"])]
    assert rep["target_met"] is None  # not the KDDCUP cell
