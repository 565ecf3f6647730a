"""python -m bench job: the whole PCA job (alignment + release) beside SecretFlow's PSI + SPU ABY3 Gram.  The options'
parsing and refusals; the party files and the peer's Gram input built from them; the report's rows, ratios and
target from given runs; a tiny real run without ``spu`` (ours alone, a note, exit 0, every process's phases); with
an interpreter that imports ``spu`` (``$SQM_SPU_PYTHON``), a tiny run of both sides.  No timing bounds."""
import importlib.util
import json
import os
import subprocess
import time
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
    (["--probe-workers", "0"], "--probe-workers takes an integer >= 1, got 0"),
    (["--predict-cores", "many"], "--predict-cores takes a comma list of integers, got 'many'"),
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
                 "--probe-workers", "1", "--json", str(out), "-q"]) == 0
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
    split = row["phase_cpu_seconds"]  # every process's CPU split at the parties' phase boundaries
    assert sum(split.values()) == pytest.approx(row["cpu_seconds"]) and split["alignment"] > 0
    assert rep["model"]["checks"] == [] and len(rep["model"]["cells"]) == 1  # one size: nothing to check


def test_no_peer_runs_ours_alone_without_asking_for_spu(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.peers.spu_probe", lambda python: pytest.fail("--no-peer looks for no spu"))
    monkeypatch.setattr(job, "run_peer", lambda *a, **k: pytest.fail("--no-peer runs no peer"))
    monkeypatch.setattr(job, "run_ours", lambda path, timeout: dict(
        wall_seconds=1.0, cpu_seconds=2.0, load_1min=0.5, processes=3, intersection=40, phases=[]))
    out = tmp_path / "job.json"
    assert main(["job", "--rows", "50", "--cols", "4", "--clients", "2", "--no-peer", "--probe-workers", "1",
                 "--json", str(out), "-q"]) == 0
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
                 "--probe-workers", "1", "--json", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())["details"]
    ours, peer = rep["rows"]
    assert (ours["side"], peer["side"], peer["psi_protocol"]) == ("ours", "peer", protocol)
    assert ours["intersection"] == peer["intersection"] == 240 and rep["correct"] is True  # the peer's Gram exact too
    assert [p["process"] for p in peer["phases"]] == [f"PSI party {i}" for i in range(clients)] + [
        f"Gram node {i}" for i in range(3)]
    assert [(q["clients"], q["ratio"]) for q in rep["ratios"]] == [(clients, peer["cpu_seconds"] / ours["cpu_seconds"])]
    assert rep["target_met"] is None  # not the KDDCUP cell
    assert peer["gram_skipped"] is None and len(peer["gram_max_rss_bytes"]) == 3  # the Gram ran, its memory kept


# ------------------------------------------------------------------------------------------------ the model
from bench import job_model as jm  # noqa: E402


def _cell(clients, rows, a=(0.5, 4e-6, 1e-5), r=(0.2, 3e-6, 2e-6), start=1.5, overlap=0.8, bump=0.0):
    """A cell whose phases follow known costs: alignment fixed + per id (server, busiest client), release fixed
    + per record; ``bump`` added to the alignment's CPU (a term gone wrong)."""
    recs = int(overlap * rows)
    al_s, al_c = a[0] + a[1] * rows, a[0] + a[2] * rows
    re_s, re_c = r[0] + r[1] * recs, r[0] + r[2] * recs
    al, re = al_s + clients * al_c + bump, re_s + clients * re_c
    return dict(clients=clients, rows=rows, cols=117, records=recs, load_1min=1.0, processes=clients + 1,
                start_cpu=start, alignment_cpu=al, release_cpu=re, job_cpu=start + al + re,
                alignment_cpu_server=al_s, alignment_cpu_client=al_c, release_cpu_server=re_s,
                release_cpu_client=re_c, alignment_wall=al_c, release_wall=re_c, start_wall=0.7,
                job_wall=0.7 + al_c + re_c, job_bytes=100 * rows)


def test_the_fit_recovers_known_per_unit_costs():
    model = jm.fit([_cell(2, n) for n in (10_000, 40_000, 90_000)])[2]
    assert model["alignment_cpu_server"]["per_unit"] == pytest.approx(4e-6, rel=1e-9)
    assert model["alignment_cpu_client"]["per_unit"] == pytest.approx(1e-5, rel=1e-9)
    assert model["alignment_cpu_client"]["fixed"] == pytest.approx(0.5, rel=1e-9)
    assert model["release_cpu_server"]["per_unit"] == pytest.approx(3e-6, rel=1e-9)
    assert model["release_cpu"]["per_unit"] == pytest.approx(3e-6 + 2 * 2e-6, rel=1e-9)  # per record in common
    assert model["alignment_cpu"]["fixed"] == pytest.approx(3 * 0.5, rel=1e-9)
    assert model["start_cpu"] == 1.5 and model["job_bytes_per_row"] == 100


def test_the_check_passes_an_exact_model_and_names_the_term_of_a_miss():
    model = jm.fit([_cell(3, n) for n in (10_000, 40_000)])
    good = jm.check(model, [_cell(3, 1_000_000)])
    assert {c["check"] for c in good} == {"start CPU", "alignment CPU", "release CPU", "job CPU", "alignment wall",
                                          "release wall", "job wall"}
    assert all(c["within"] and abs(c["rel_error"]) < 1e-9 for c in good)
    bad = {c["check"]: c for c in jm.check(model, [_cell(3, 1_000_000, bump=60.0)])}  # alignment CPU 60 s over
    assert not bad["alignment CPU"]["within"] and bad["release CPU"]["within"] and bad["start CPU"]["within"]
    assert bad["alignment CPU"]["measured"] - bad["alignment CPU"]["predicted"] == pytest.approx(60.0)
    assert bad["alignment CPU"]["rel_error"] < -jm.TOLERANCE
    assert bad["job CPU"]["wrong_term"].startswith("the alignment's per-row cpu cost")
    assert "at this cell" in bad["alignment CPU"]["wrong_term"]


def test_the_prediction_divides_the_per_unit_work_over_the_cores():
    model = jm.fit([_cell(2, n) for n in (10_000, 40_000, 90_000)])
    p = jm.predict(model, 2, 10 ** 8, 0.8, 16, 10.0, worker_start_cpu=0.5)
    assert p["workers"] == 16 and p["records"] == 8 * 10 ** 7
    assert p["alignment"]["cpu_s_per_party"] == pytest.approx(1e-5 * 1e8)  # the busiest role: a client
    assert p["alignment"]["compute_s"] == pytest.approx(1e-5 * 1e8 / 16)
    assert p["alignment"]["fixed_s"] == pytest.approx(0.7 + 0.5 + 0.5)  # start wall, workers' start, fixed CPU
    assert p["release"]["compute_s"] == pytest.approx((0.2 + 3e-6 * 8e7) / 16)  # the server: 3 us > 2 us
    assert p["transfer_s"] == pytest.approx(100 * 1e8 / 1.25e9)
    assert p["seconds"] == pytest.approx(p["alignment"]["seconds"] + p["release"]["seconds"] + p["transfer_s"])
    p32 = jm.predict(model, 2, 10 ** 8, 0.8, 32, 10.0, worker_start_cpu=0.5)
    assert p32["alignment"]["compute_s"] == pytest.approx(p["alignment"]["compute_s"] / 2)


class _Sampler:
    """A stand-in for TreeSampler: party i's CPU rises linearly from 0 at t = 0 by (i + 1) per second."""

    def groups(self, count):
        return [[i] for i in range(count)]

    def at(self, pids, when):
        return sum((p + 1) * when for p in pids)

    def last(self, pids):
        return sum((p + 1) * 10.0 for p in pids)


def test_the_split_attributes_each_party_cpu_at_its_phase_boundaries():
    recs = [dict(timeline=dict(spawned=0.0, started=0.1, agreed=1.0, finished=9.0, exited=9.5),
                 phases={"agree": 4.0}, cpu_seconds=0.0, bytes_sent=10 * (i + 1)) for i in range(3)]
    s = jm.split(_Sampler(), recs)
    assert [p["process"] for p in s["parties"]] == ["server", "client 1", "client 2"]
    assert s["parties"][2]["cpu"] == {"start": 3.0, "alignment": 12.0, "release": 15.0}  # 3 s per second
    assert s["cpu"] == {"start": 6.0, "alignment": 24.0, "release": 30.0}
    assert s["wall"] == {"start": 1.0, "alignment": 4.0, "release": 4.5}
    assert jm.split(_Sampler(), recs, total_cpu=70.0)["cpu"]["start"] == 16.0  # the rest: launcher and exits
    assert [p["bytes_sent"] for p in s["parties"]] == [10, 20, 30]


def test_the_sampler_follows_a_child_process():
    import subprocess

    with jm.TreeSampler(interval=0.02) as s:
        subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                        "while time.process_time() - t < 0.3: pass"], check=True)
    [[pid]] = s.groups(1)
    assert s.last([pid]) >= 0.25 and s.cpu_seconds > 0
    assert s.at([pid], 0.0) <= s.at([pid], time.time() + 1) == s.last([pid])  # clamped either side


def test_the_peer_gram_is_skipped_with_its_reason():
    done = [dict(clients=2, rows=rows, cpu_seconds=cpu, gram_cpu_seconds=cpu, gram_max_rss_bytes=[rss] * 3)
            for rows, cpu, rss in ((50_000, 20.0, 1 << 30), (100_000, 40.0, 3 << 29))]
    fits, why = jm.peer_feasible(done, 200_000, 2, 1000.0, 64 << 30)
    assert fits and "7.5 GiB and 80 CPU-s at 200,000" in why  # on the line through the two
    fits, why = jm.peer_feasible(done, 1_000_000, 2, 1000.0, 20 << 30)
    assert not fits and why.startswith("SPU's Gram would not fit") and "over 60% of the 20.0 GiB" in why
    fits, why = jm.peer_feasible(done, 1_000_000, 2, 100.0, 1 << 40)
    assert not fits and "over --peer-budget 100 CPU-s" in why and "400 CPU-s at 1,000,000" in why
    assert jm.peer_feasible(done, 1_000_000, 3, 1.0, 1) == (True, "no smaller peer run to extrapolate from")


def test_the_model_report_fits_the_smaller_cells_and_checks_the_largest():
    def run(clients, rows, side="ours", cpu=None):
        c = _cell(clients, rows)
        split = dict(parties=[dict(processes=1, bytes_sent=c["job_bytes"],
                                   cpu={"start": 0.5, "alignment": c["alignment_cpu_server"],
                                        "release": c["release_cpu_server"]})]
                     + [dict(processes=1, bytes_sent=0, cpu={"start": 0.5, "alignment": c["alignment_cpu_client"],
                                                            "release": c["release_cpu_client"]})] * clients,
                     cpu={k: c[f"{k}_cpu"] for k in jm.PHASES},
                     wall={k: c[f"{k}_wall"] for k in jm.PHASES})
        return dict(side=side, clients=clients, rows=rows, cols=117, intersection=c["records"],
                    cpu_seconds=cpu or c["job_cpu"], wall_seconds=c["job_wall"], load_1min=1.0, split=split,
                    workers=2 if side != "ours" else 1)

    runs = [run(2, n) for n in (10_000, 40_000, 90_000, 1_000_000)]
    runs.append(run(2, 10_000, job.WORKERS, cpu=runs[0]["cpu_seconds"] + 3 * 0.25))  # 3 parties, 1 worker more
    rep = job.model_report(runs, 0.8)
    assert rep["fitted_on"] == {2: [10_000, 40_000, 90_000]} and rep["cpu_checks_within"] is True
    assert {c["rows"] for c in rep["checks"]} == {1_000_000}
    assert rep["worker_start_cpu_seconds"] == pytest.approx(0.25)
    assert [(p["clients"], p["cores"]) for p in rep["predictions"]] == [(2, 16), (2, 32)]


@pytest.mark.slow
def test_tiny_run_fits_checks_and_predicts(tmp_path, capsys):
    out = tmp_path / "job.json"
    assert main(["job", "--rows", "300,600,1200", "--cols", "6", "--clients", "2", "--no-peer", "--json", str(out),
                 "-q"]) == 0
    text = capsys.readouterr().out
    assert "the model's checks" in text and "predicted: 1e+08 ids per client" in text and "assumptions:" in text
    rep = json.loads(out.read_text())["details"]
    assert [(r["side"], r["rows"]) for r in rep["rows"]] == [("ours", 300), (job.WORKERS, 300), ("ours", 600),
                                                             ("ours", 1200)]
    assert rep["rows"][1]["workers"] == 2 and rep["rows"][1]["correct"] is True  # the same intersection
    m = rep["model"]
    assert m["fitted_on"] == {"2": [300, 600]}  # JSON keys
    assert {(c["rows"], c["check"]) for c in m["checks"]} >= {(1200, "alignment CPU"), (1200, "job CPU")}
    assert all(c["within"] == (abs(c["rel_error"]) <= m["tolerance"]) for c in m["checks"])
    assert [(p["clients"], p["cores"], p["workers"]) for p in m["predictions"]] == [(2, 16, 16), (2, 32, 32)]
    for c in m["cells"]:  # the phases add up to the job's CPU
        assert c["start_cpu"] + c["alignment_cpu"] + c["release_cpu"] == pytest.approx(c["job_cpu"])
