"""The "Your own data" tutorial (docs/tutorials/own-data.md), run as a new user would: the bash blocks between
its ``guide:begin`` and ``guide:end`` markers, verbatim and in order, in a fresh folder with this environment's
``sqm`` first on PATH (real party processes over loopback).  Checked: every command exits 0, the proposed ranges
are printed with the not-private note, both JSON files are strict and valid against the schema, carry the columns
and the release in their terms, and no client clipped anything."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sqm.cli import output

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "tutorials", "own-data.md")


def guide_blocks() -> list[str]:
    text = Path(GUIDE).read_text(encoding="utf-8")
    m = re.search(r"<!-- guide:begin.*?-->(.*?)<!-- guide:end -->", text, re.S)
    assert m, "docs/tutorials/own-data.md has no guide:begin ... guide:end section"
    blocks = re.findall(r"```bash\n(.*?)```", m.group(1), re.S)
    assert len(blocks) >= 3
    return blocks


def _strict(path) -> dict:
    def refuse(name):
        raise ValueError(f"{path} holds {name}: not JSON")
    doc = json.loads(Path(path).read_text(), parse_constant=refuse)
    jsonschema.validate(doc, output.schema())
    return doc


@pytest.mark.slow
def test_the_guide_runs_as_written(tmp_path):
    script = "set -euo pipefail\n" + "\n".join(guide_blocks())
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    env.pop("SQM_LOCAL_PORTS", None)  # the job file names its own addresses
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out, demo = proc.stdout, tmp_path / "demo"
    assert '"bounds": {\n    "age": [0, 89],' in out and "NOT private" in proc.stderr
    pca, lr = _strict(demo / "pca.json"), _strict(demo / "lr.json")
    features = ["age", "income", "balance", "bmi", "glucose", "systolic"]
    assert (pca["command"], pca["mode"], pca["simulation"]) == ("pca", "job", False)
    assert pca["columns"] == features and [list(c) for c in pca["released"]["components"]] == [features] * 2
    assert (lr["command"], lr["mode"], lr["columns"]) == ("logreg", "job", features)
    assert list(lr["released"]["coef"]) == features and isinstance(lr["released"]["intercept"], float)
    assert lr["released"]["schedule"] is None and lr["parameters"]["solver"] == "auto"  # the default: it chose
    assert lr["released"]["solver"] == "moments"
    assert lr["released"]["solver_reason"].startswith("n epsilon / max(d, 30) = ")
    assert lr["privacy"][0]["rounds"] == 1 and lr["privacy"][0]["sampling_rate"] == 1.0
    for doc in (pca, lr):
        assert doc["privacy"][0]["epsilon_server"] <= 1.0 and doc["dataset"] == "bank-clinic"
        assert [doc["clients"][j]["clipped"] for j in ("1", "2")] == [0, 0]
        assert [doc["clients"][j]["outside_declared_range"] for j in ("1", "2")] == [0, 0]
        assert "warnings" not in doc
    assert lr["clients"]["2"]["labels"] == "0/1 (1 = positive)"
    # step 5: the clinic's scores of the common people, the released model on their raw values
    import csv

    import numpy as np

    with open(demo / "scores.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 560 and list(rows[0]) == ["id", "log_odds", "probability"]
    raw = {}
    for name in ("bank.csv", "clinic.csv"):
        with open(demo / name) as fh:
            for r in csv.DictReader(fh):
                raw.setdefault(r["id"], {}).update(r)
    coef, b = lr["released"]["coef"], lr["released"]["intercept"]
    bounds = json.loads((demo / "job.json").read_text())["parties"]
    lohi = {c: v for party in bounds[1:] for c, v in party.get("bounds", {}).items()}
    for r in rows[:50]:
        x = raw[r["id"]]
        want = b + sum(w * float(np.clip(float(x[c]), *lohi[c])) for c, w in coef.items())
        assert abs(float(r["log_odds"]) - want) < 1e-5, (r, want)
