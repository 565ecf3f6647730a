"""python -m bench peers: the Gram through SecretFlow SPU beside ours.  Without ``spu`` it is skipped with a note saying
how to install it (exit 0, the JSON says skipped); with an interpreter that imports ``spu`` (``$SQM_SPU_PYTHON``,
or this one), a tiny run whose SPU Grams (ABY3, SEMI2K) and ours equal numpy's exact X^T X.  No timing bounds."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from bench.command import main


def _no_spu_python(tmp_path):
    """An interpreter stand-in that cannot import spu (as a Python without it fails)."""
    stub = tmp_path / "python-without-spu"
    stub.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'spu'\" >&2\nexit 1\n")
    stub.chmod(0o755)
    return str(stub)


def _check_skipped(out, capsys, tmp_path):
    text = capsys.readouterr().out
    assert "skipped" in text and "SecretFlow SPU is not available" in text
    assert "pip install spu" in text and "--spu-python" in text  # says how to get it
    doc = json.loads(out.read_text())
    assert doc["command"] == "bench peers" and doc["details"]["skipped"] is True
    assert "spu" in doc["details"]["reason"] and doc["results"][0]["skipped"] is True


@pytest.mark.parametrize("which", ["without spu", "missing"])
def test_skipped_with_a_note_without_spu(tmp_path, capsys, which):
    out = tmp_path / "peers.json"
    python = _no_spu_python(tmp_path) if which == "without spu" else str(tmp_path / "no-such-python")
    assert main(["peers", "--rows", "200", "--cols", "6", "--spu-python", python, "--json", str(out)]) == 0
    _check_skipped(out, capsys, tmp_path)


def test_default_interpreter_without_spu_is_skipped(tmp_path, capsys, monkeypatch):
    if importlib.util.find_spec("spu") is not None:
        pytest.skip("this interpreter imports spu: the default is not skipped")
    monkeypatch.delenv("SQM_SPU_PYTHON", raising=False)
    out = tmp_path / "peers.json"
    assert main(["peers", "--rows", "200", "--cols", "6", "--json", str(out)]) == 0
    _check_skipped(out, capsys, tmp_path)


def _spu_python():
    python = os.environ.get("SQM_SPU_PYTHON") or (sys.executable if importlib.util.find_spec("spu") else None)
    if python is None:
        pytest.skip("no interpreter imports spu (set SQM_SPU_PYTHON to one that does, e.g. a venv with "
                    "pip install spu)")
    p = subprocess.run([python, "-c", "import spu"], capture_output=True, timeout=120)
    if p.returncode != 0:
        pytest.skip(f"{python} cannot import spu")
    return python


@pytest.mark.slow
def test_tiny_run_spu_gram_is_exact(tmp_path):
    python = _spu_python()
    out = tmp_path / "peers.json"
    assert main(["peers", "--rows", "200", "--cols", "6", "--repeat", "1", "--spu-python", python,
                 "--json", str(out)]) == 0
    rep = json.loads(out.read_text())["details"]
    assert not rep.get("skipped") and rep["shape"] == [[200, 6]]
    assert [r["side"] for r in rep["rows"]] == ["ours", "ABY3", "SEMI2K"]
    for r in rep["rows"]:
        assert r["max_abs_error"] == 0 and r["exact"], r  # equal to numpy's exact X^T X
        assert r["processes"] == 3 and len(r["max_rss_bytes"]) == 3 and min(r["max_rss_bytes"]) > 0
        assert r["seconds"] > 0 and r["protocol_seconds"] > 0
    for r in rep["runs"]:  # each process's peak memory: sampled VmHWM (Linux), its own ru_maxrss kept beside it
        assert all(n["max_rss_bytes"] > 0 and n["self_reported_max_rss_bytes"] > 0 for n in r["nodes"])
        assert all(n["rss_sampled"] for n in r["nodes"]) or not os.path.isdir("/proc/self")
    assert [(r["side"], r["repeat"]) for r in rep["runs"]] == [("ours", 0), ("ABY3", 0), ("SEMI2K", 0)]
    for r in rep["runs"][1:]:
        for n in r["nodes"]:
            assert set(n["phases"]) == {"start", "connect", "compile", "share", "gram", "open", "output", "total"}
            assert n["link_bytes_sent"] is not None and n["bytes_sent"] >= n["link_bytes_sent"]


@pytest.mark.slow
def test_three_holders_spu_gram_equals_numpy(tmp_path):
    """Three data holders (SPU nodes 0, 1, 2 each share a block): SPU's Gram is numpy's, integer for integer."""
    from bench.peers import exact_gram, quantized_blocks, spu_run

    python = _spu_python()
    blocks, _ = quantized_blocks(150, 7, 3, 4096.0, seed=1)
    got = spu_run(python, blocks, [0, 1, 2], "ABY3", "FM64", timeout=300)
    assert got["result"].dtype.kind == "i" and (got["result"] == exact_gram(blocks)).all()
