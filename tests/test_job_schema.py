"""The job file's schema (sqm.framework.job_schema): a misspelt key or a value of another type is refused by
load_job, naming the party and the closest valid key, before anything is read or started; every key the writers
emit is declared and loads; the reference page's table is the declaration's."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sqm.errors import UsageError
from sqm.framework.job_schema import JOB_KEYS, PARTY_KEYS, check_job_keys, markdown_table
from sqm.framework.spec import load_job, write_job, write_party_csvs, write_shared_job
from conftest import joined

ROOT = Path(__file__).resolve().parent.parent
MISSPELT = [  # (change to a valid job file, the refusal's text)
    (lambda r: r.update(hide_membershp=True),
     "job file .* has an unknown key 'hide_membershp': did you mean 'hide_membership'\\?"),
    (lambda r: r["parties"][2].update(bound={"x3": [0, 1]}),
     "job file .*: client 2's entry has an unknown key 'bound': did you mean 'bounds'\\?"),
    (lambda r: r.update(id_colum="id"), "job file .* has an unknown key 'id_colum': did you mean 'id_column'\\?"),
]


def _job(tmp_path) -> tuple[Path, dict]:
    """A valid local job file (two clients' CSV files beside it) and its JSON."""
    X = np.random.default_rng(0).normal(size=(20, 4))
    path = Path(write_party_csvs(X / np.linalg.norm(X, axis=1).max(), tmp_path, 2, min_intersection=1))
    return path, json.loads(path.read_text())


def _rewrite(path: Path, raw: dict, change) -> None:
    raw = json.loads(json.dumps(raw))
    change(raw)
    path.write_text(json.dumps(raw))


@pytest.mark.parametrize("change, msg", MISSPELT)
def test_a_misspelt_key_is_refused_with_the_closest_valid_one(tmp_path, change, msg):
    path, raw = _job(tmp_path)
    load_job(path)  # valid as written
    _rewrite(path, raw, change)
    with pytest.raises(UsageError, match=msg):
        load_job(path)


def test_an_unknown_key_without_a_close_one_lists_the_keys(tmp_path):
    path, raw = _job(tmp_path)
    _rewrite(path, raw, lambda r: r["parties"][0].update(zzz=1))
    keys = ", ".join(k.name for k in PARTY_KEYS)
    with pytest.raises(UsageError, match=f"the server's entry has an unknown key 'zzz': the keys are {keys}$"):
        load_job(path)


@pytest.mark.parametrize("change, msg", [
    (lambda r: r.update(hide_membership="true"), "'hide_membership' must be true or false, got 'true'"),
    (lambda r: r.update(min_intersection="5"), "'min_intersection' must be an integer, got '5'"),
    (lambda r: r.update(id_column=None), "'id_column' must be a string, got None"),
    (lambda r: r["parties"][1].update(norm_share="0.5"), "client 1's 'norm_share' must be a number or null"),
    (lambda r: r["parties"][2].update(workers=2.0), "client 2's 'workers' must be an integer or null, got 2.0"),
    (lambda r: r["parties"][0].update(name=7), "the server's 'name' must be a string or null, got 7"),
    (lambda r: r["parties"][1].pop("address"), "client 1's entry needs 'address'"),
])
def test_a_value_of_another_type_is_refused_naming_key_and_type(tmp_path, change, msg):
    path, raw = _job(tmp_path)
    _rewrite(path, raw, change)
    with pytest.raises(UsageError, match=re.escape(msg)):
        load_job(path)


def test_the_command_line_refuses_a_misspelt_key_before_any_party_starts(tmp_path):
    """``sqm pca --job`` with ``"hide_membershp"`` exits 2 with the suggestion; no party ran, nothing was written."""
    path, raw = _job(tmp_path)
    _rewrite(path, raw, MISSPELT[0][0])
    out = tmp_path / "out.json"
    p = subprocess.run([sys.executable, "-m", "sqm", "pca", "--job", str(path), "--components", "2", "--json",
                        str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2, p.stderr[-2000:]
    assert "unknown key 'hide_membershp': did you mean 'hide_membership'?" in joined(p.stderr)
    assert not out.exists() and "party" not in p.stdout.lower()


def test_every_key_the_writers_emit_is_declared_and_loads(tmp_path):
    """write_job with every option set, and its shared form, load; the keys they emit are exactly the declared ones
    (a party's "name" aside: no writer emits it)."""
    for name in ("a.csv", "b.csv", "labels.csv"):
        (tmp_path / name).write_text("id,x\n1,2\n")
    pins = [f"sha256:{d * 64}" for d in "abc"]
    path = write_job(tmp_path / "job.json", ["127.0.0.1:5000", "127.0.0.1:5010", "127.0.0.1:5020"],
                     [tmp_path / "a.csv", tmp_path / "b.csv"], job_id="0" * 32, name="job-a", dataset="d",
                     bounds=[{"x": [0, 5]}, None], norm_shares=[0.5, 0.5], min_intersection=3,
                     task={"statistic": "pca", "components": 1}, server_file=tmp_path / "labels.csv",
                     models=[None, str(tmp_path / "m.py") + ":build", None], workers=2,
                     worker_addresses=[None, ["127.0.0.1:6001", "127.0.0.1:6002"], None],
                     engines=[None, "tcp://127.0.0.1:8786", None], hide_membership=True, fingerprints=pins,
                     alignment_keys="all")
    raw = json.loads(Path(path).read_text())
    assert set(raw) == {k.name for k in JOB_KEYS}
    assert {k for e in raw["parties"] for k in e} == {k.name for k in PARTY_KEYS} - {"name"}
    spec = load_job(path)
    assert spec.hide_membership and spec.alignment_keys == "all"
    assert spec.parties[1].bounds == (("x", 0.0, 5.0),) and spec.shards == 2
    shared = load_job(write_shared_job(path, tmp_path / "shared.json"))
    assert shared.parties[1].file is None and shared.task == {"statistic": "pca", "components": 1}


def _doc_job_files() -> list[tuple[str, dict]]:
    """Every job file the docs show as JSON (```json blocks and ``cat > X.json`` here-documents) that parses."""
    out = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        blocks = re.findall(r"```json\n(.*?)```", text, re.S) + re.findall(r"cat > \S+\.json <<'EOF'\n(.*?)\nEOF",
                                                                          text, re.S)
        for block in blocks:
            try:
                doc = json.loads(block)
            except json.JSONDecodeError:
                continue  # a fragment ("...")
            if isinstance(doc, dict) and "parties" in doc:
                out.append((md.name, doc))
    return out


def test_the_docs_job_files_hold_only_declared_keys():
    found = _doc_job_files()
    assert {name for name, _ in found} >= {"job-files.md", "scale.md", "own-data.md"}  # the reader found them
    for name, doc in found:
        check_job_keys(doc, name)


def test_the_reference_table_is_the_declaration():
    text = (ROOT / "docs" / "reference" / "jobs.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- job-schema -->\n(.*?)<!-- /job-schema -->", text, re.S)
    assert table, "docs/reference/jobs.md lost its <!-- job-schema --> table"
    assert table.group(1) == markdown_table(), (
        "regenerate the table between the <!-- job-schema --> markers with "
        "python -c 'from sqm.framework.job_schema import markdown_table; print(markdown_table(), end=\"\")'")
    assert len(table.group(1).splitlines()) == 2 + len(JOB_KEYS) + len(PARTY_KEYS)


def test_alignment_keys_takes_threshold_or_all_and_refuses_anything_else(tmp_path):
    """The PSI's keys: absent is the threshold's; "all" loads; another value is refused naming the key and the
    choices (before any party starts)."""
    (tmp_path / "a.csv").write_text("id,x\n1,2\n")
    (tmp_path / "b.csv").write_text("id,x\n1,2\n")
    path = write_job(tmp_path / "job.json", ["127.0.0.1:5000", "127.0.0.1:5010", "127.0.0.1:5020"],
                     [tmp_path / "a.csv", tmp_path / "b.csv"])
    assert load_job(path).alignment_keys == "threshold"
    raw = json.loads(Path(path).read_text())
    for value, ok in (("all", True), ("threshold", True), ("none", False), ("ALL", False)):
        Path(path).write_text(json.dumps({**raw, "alignment_keys": value}))
        if ok:
            assert load_job(path).alignment_keys == value
        else:
            with pytest.raises(UsageError, match=f"'alignment_keys' must be one of 'threshold', 'all', got '{value}'"):
                load_job(path)
    with pytest.raises(UsageError, match="alignment_keys must be one of"):
        write_job(tmp_path / "j2.json", ["127.0.0.1:5000", "127.0.0.1:5010", "127.0.0.1:5020"],
                  [tmp_path / "a.csv", tmp_path / "b.csv"], alignment_keys="some")
