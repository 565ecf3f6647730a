"""The across-hosts tutorial (docs/tutorials/across-hosts.md) runs as written: its bash blocks between the
``hosts:begin`` and ``hosts:end`` marks in order, in a fresh folder with this environment's ``sqm`` first on
PATH; consecutive blocks marked ``<!-- party -->`` (one per host) run at once, as three hosts would, over
loopback TLS (each party's stdout appended to ``party_K.out``, its stderr to ``party_K.log``).  Checked: every
command exits 0; each private key exists only in its owner's folder (each organisation made its own; the
authority signed requests) and every party's key is pinned in the job files; the PCA and the model are
released; each client's own ledger holds both releases of its records; the requester's scores are the released
model on its new customers' raw values; nobody else received a score; the page's excerpt of the server's output
(marked ``<!-- output: checked by tests/test_across_hosts.py -->``) is what the server printed."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "tutorials",
                    "across-hosts.md")


def script() -> str:
    """One bash script: sequential blocks as they are, each group of party blocks started at once and waited."""
    text = Path(PAGE).read_text(encoding="utf-8")
    m = re.search(r"<!-- hosts:begin.*?-->(.*?)<!-- hosts:end -->", text, re.S)
    assert m, "the tutorial has no hosts:begin ... hosts:end section"
    parts, group = ["set -euo pipefail"], []
    for party, block in re.findall(r"(<!-- party -->\n)?```bash\n(.*?)```", m.group(1), re.S):
        if party:
            group.append(block.strip())
            continue
        parts += _group(group)
        group = []
        parts.append(block)
    parts += _group(group)
    return "\n".join(parts)


def _group(blocks):
    if not blocks:
        return []
    lines = [f"(\n{b}\n) >> party_{k}.out 2>> party_{k}.log & pid_{k}=$!" for k, b in enumerate(blocks)]
    lines += [f"wait $pid_{k} || {{ cat party_*.out party_*.log; exit 1; }}" for k in range(len(blocks))]
    return lines


def test_the_script_groups_the_parties():
    s = script()
    assert s.count("& pid_0=$!") == 4 and "sqm data example hosts && cd hosts" in s  # keys, PCA, training, scoring
    assert "sqm.mpc.net.certs" not in s and "make_certificates" not in s  # no dealer: each party makes its own key


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    env.pop("SQM_LOCAL_PORTS", None)  # the job files name their own addresses
    proc = subprocess.run(["bash", "-c", script()], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    d = tmp_path / "hosts"
    keys = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes())
    assert keys == ["bank-keys/party_1.key", "ca/authority/mpyc_ca.key", "clinic-keys/party_2.key",
                    "server-keys/party_0.key"]
    for name in ("job.json", "train.json", "new.json"):
        pins = [p.get("fingerprint", "") for p in json.loads((d / name).read_text())["parties"]]
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", p) for p in pins) and len(set(pins)) == 3, pins
    from sqm.mechanism.ledger import Ledger

    for j, name in ((1, "bank-customers"), (2, "clinic-patients")):  # each owner's ledger, under its own name: the
        entries = Ledger(str(d / f"ledger_{j}.sqlite")).releases(name)  # PCA and the model, both of its records
        assert [e["status"] for e in entries] == ["completed", "completed"]
    lr = json.loads((d / "lr.json").read_text())
    coef, b = lr["released"]["coef"], lr["released"]["intercept"]
    with open(d / "scores.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and list(rows[0]) == ["id", "log_odds", "probability"]
    raw = {}
    for name in ("bank.csv", "clinic.csv"):
        with open(d / "new" / name) as fh:
            for r in csv.DictReader(fh):
                raw.setdefault(r["id"], {}).update(r)
    job = json.loads((d / "new.json").read_text())
    lohi = {c: v for p in job["parties"][1:] for c, v in p.get("bounds", {}).items()}
    for r in rows:
        x = raw[r["id"]]
        want = b + sum(w * float(np.clip(float(x[c]), *lohi[c])) for c, w in coef.items())
        assert abs(float(r["log_odds"]) - want) < 1e-5
    logs = {k: (d / f"party_{k}.out").read_text() + (d / f"party_{k}.log").read_text() for k in range(3)}
    assert "(the requester)" in logs[2] and "it learns no score" in logs[0] and "it learns no score" in logs[1]
    # the page's excerpt of what the server printed (its stdout, every step appended)
    from test_docs_outputs import ELSEWHERE, blocks, excerpt_missing, normalise

    shown = [b for b in blocks(Path(PAGE)) if ELSEWHERE.fullmatch(b.marker)]
    printed = normalise((d / "party_0.out").read_text(), str(tmp_path))
    assert len(shown) == 1 and excerpt_missing(shown[0].body, printed) == [], (
        f"{shown[0].where}: lines the server did not print: {excerpt_missing(shown[0].body, printed)}")
