"""The tooling that keeps the house as it is: ruff (E, F, W, B, UP, SIM) and mypy, as pyproject.toml configures
them, find nothing.  Both come with the ``[test]`` extra; ``.ci/run`` sets ``SQM_REQUIRE_LINT`` so that a
missing tool fails there instead of skipping."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    here = pathlib.Path(sys.executable).parent / name
    path = str(here) if here.exists() else shutil.which(name)
    if path is None:
        if os.environ.get("SQM_REQUIRE_LINT"):
            pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_finds_nothing():
    proc = _run([_tool("ruff"), "check", "--no-cache", "sqm", "bench", "tests"])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


@pytest.mark.slow
def test_mypy_finds_nothing():
    proc = _run([_tool("mypy"), "--no-incremental"])  # files and settings: pyproject.toml's [tool.mypy]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "Success" in proc.stdout
