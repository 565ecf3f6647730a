"""python -m bench psi --peer: SecretFlow's PSI beside ours.  Without ``spu`` (this suite never needs it) the run says
"SecretFlow absent: ..." and measures ours alone (exit 0, the JSON's runs are ours only, each intersection checked);
which SecretFlow protocols run on how many clients; the options' parsing.  No timing bounds."""
import json
import os
from pathlib import Path

import pytest

from bench import psi, psi_peer
from bench.command import build_parser, main, parse
from sqm.errors import UsageError


def _no_spu_python(tmp_path):
    """An interpreter stand-in that cannot import spu (as a Python without it fails)."""
    stub = tmp_path / "python-without-spu"
    stub.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'spu'\" >&2\nexit 1\n")
    stub.chmod(0o755)
    return str(stub)


def test_options_parse_and_reach_the_peer_bench():
    args = parse(["psi", "--peer", "--ids", "300", "--clients", "2,3", "--spu-python", "/x/python",
                  "--peer-protocols", "ecdh,kkrt_npc", "--repeat", "2"], build_parser())
    assert args.peer is True and args.spu_python == "/x/python" and args.peer_protocols == "ecdh,kkrt_npc"
    assert args.repeat == 2 and args.command == "bench psi"
    plain = parse(["psi", "--ids", "300"], build_parser())
    assert plain.peer is False and plain.spu_python is None and plain.peer_protocols == ",".join(psi_peer.PROTOCOLS)


def test_which_protocols_run_on_how_many_clients():
    assert [p for p in psi_peer.PROTOCOLS if psi_peer.applies(p, 2)] == ["ECDH", "RR22", "KKRT"]
    assert [p for p in psi_peer.PROTOCOLS if psi_peer.applies(p, 3)] == ["ECDH_NPC", "KKRT_NPC"]
    assert [p for p in psi_peer.PROTOCOLS if psi_peer.applies(p, 4)] == ["ECDH_NPC", "KKRT_NPC"]


@pytest.mark.parametrize("argv, message", [
    (["--peer-protocols", "ECDH,FOO"], "--peer-protocols: unknown FOO"),
    (["--clients", "1"], "--clients of at least 2"),
    (["--overlap", "0"], "--overlap in (0, 1]"),
])
def test_bad_options_are_refused(argv, message):
    args = parse(["psi", "--peer", "--ids", "50"] + argv, build_parser())
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        args.func(args)


def test_without_spu_a_note_and_ours_alone_in_the_json(tmp_path, capsys, monkeypatch):
    """The skip path without party processes: ours stubbed, every cell and round asked of ours only."""
    asked = []

    def fake_ours(run_one, job, ids, clients):
        # bench.psi's own, on its files: the job file (threshold keys) and its copy with every client's key
        assert run_one is psi.run_one and os.path.basename(job) in ("job.json", "job-all-keys.json")
        if os.path.basename(job) == "job-all-keys.json":
            assert json.loads(Path(job).read_text())["alignment_keys"] == "all"
        asked.append((ids, clients, os.path.basename(job)))
        return dict(wall_seconds=1.0, cpu_seconds=2.0, load_1min=0.5, processes=clients + 1,
                    intersection=int(round(0.5 * ids)), bytes_per_id=64.0)

    monkeypatch.setattr(psi_peer, "_ours", fake_ours)
    monkeypatch.setattr(psi_peer, "write_csvs", lambda job: pytest.fail("no CSV copies without SecretFlow"))
    out = tmp_path / "peer.json"
    assert main(["psi", "--peer", "--ids", "40,60", "--clients", "2,3", "--overlap", "0.5",
                 "--spu-python", str(tmp_path / "no-such-python"), "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("SecretFlow absent: --spu-python ") and "no such executable" in text.splitlines()[0]
    assert asked == [(i, c, f) for c in (2, 3) for i in (40, 60) for f in ("job.json", "job-all-keys.json")]
    doc = json.loads(out.read_text())
    assert doc["command"] == "bench psi" and doc["mode"] == "bench"
    assert [(r["clients"], r["ids"], r["side"]) for r in doc["results"]] == [
        (c, i, s) for c in (2, 3) for i in (40, 60) for s in ("ours", "ours-all")]
    rep = doc["details"]
    assert rep["secretflow"] is None and rep["spu_python"] is None and rep["correct"] is True
    assert rep["note"] == text.splitlines()[0]


@pytest.mark.slow
def test_without_spu_ours_alone_with_a_note(tmp_path, capsys):
    out = tmp_path / "peer.json"
    assert main(["psi", "--peer", "--ids", "200", "--clients", "2", "--repeat", "2",
                 "--spu-python", _no_spu_python(tmp_path), "--json", str(out)]) == 0
    text = capsys.readouterr()
    assert "SecretFlow absent: the spu package is not importable" in text.out
    assert "pip install spu" in text.out and "--spu-python" in text.out  # says how to get it
    doc = json.loads(out.read_text())
    rep = doc["details"]
    assert doc["command"] == "bench psi" and rep["secretflow"] is None and rep["note"].startswith("SecretFlow absent")
    assert [(r["side"], r["repeat"]) for r in rep["runs"]] == [("ours", 0), ("ours-all", 0), ("ours", 1),
                                                                ("ours-all", 1)]
    assert [r["side"] for r in doc["results"]] == ["ours", "ours-all"]  # one row per cell and side
    for r in rep["runs"]:
        assert r["intersection"] == r["expected_intersection"] == 140 and r["correct"]
        assert r["processes"] == 3 and len(r["bytes_sent"]) == 3 and r["bytes_per_id"] > 0
        assert r["bytes_per_id"] == sum(r["bytes_sent"]) / 400
        assert r["cpu_seconds"] == pytest.approx(r["children_cpu_seconds"] + r["launcher_cpu_seconds"])
        assert r["children_cpu_seconds"] > 0  # the party processes' CPU is counted
    assert rep["correct"] is True
    for row in rep["rows"]:
        assert row["all_wall_seconds"] == [r["wall_seconds"] for r in rep["runs"] if r["side"] == row["side"]]


def test_summary_rows_take_the_fastest_run_and_check_every_intersection():
    def run(side, wall, cpu, got):
        return dict(side=side, clients=2, ids=10, repeat=0, wall_seconds=wall, cpu_seconds=cpu, processes=2,
                    intersection=got, expected_intersection=7, correct=got == 7, bytes_per_id=None, load_1min=1.0)

    rep = psi_peer.summarize(dict(runs=[run("ours", 2.0, 1.0, 7), run("ECDH", 3.0, 0.5, 7), run("ours", 1.0, 1.5, 7),
                                        run("ECDH", 4.0, 0.4, 6)]))
    ours, ecdh = rep["rows"]
    assert (ours["side"], ours["wall_seconds"], ours["cpu_seconds"], ours["min_cpu_seconds"]) == ("ours", 1.0, 1.5, 1.0)
    assert ours["all_wall_seconds"] == [2.0, 1.0] and ours["cpu_us_per_id"] == pytest.approx(1e6 / 20)
    assert ecdh["correct"] is False and rep["correct"] is False  # one round's wrong intersection is seen
