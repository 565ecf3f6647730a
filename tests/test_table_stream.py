"""Party files read in batches (issue 15): one checking pass, then chunks; the same ids, values, errors and
job results as reading the file whole, and a file that changes during the job is refused."""
from pathlib import Path

import numpy as np
import pytest

from sqm.framework.spec import load_job, write_party_csvs

from sqm.framework.party import load_own_file

from sqm.framework.runners import run_job
from sqm.apps.pca.job import PCAJobTask
from sqm.framework.table_stream import StreamedTable, scan_table
from sqm.framework.tables import read_table
from sqm.mpc.net.launch import MPCError

TASK = dict(n_components=2, epsilon=1.0, delta=1e-5, gamma=1024.0, seed=5, insecure_reproducible=True)


class WholeFilePCA(PCAJobTask):
    """The PCA task reading its party files whole (the path before streaming): the reference."""

    streams = False


def make_X(m=200, n=7, seed=0):
    X = np.random.default_rng(seed).normal(size=(m, n))
    return X / np.linalg.norm(X, axis=1).max()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_scan_then_chunks_give_read_tables_ids_and_values(tmp_path, fmt):
    X = make_X()
    spec = load_job(write_party_csvs(X, tmp_path, 2, fmt=fmt, row_group_rows=64, min_intersection=1))
    f = spec.parties[1].file
    t, whole = scan_table(f, "id"), read_table(f, "id")
    assert isinstance(t, StreamedTable) and t.n_rows == 200 and t.columns == whole.columns
    assert t.ids == whole.ids
    for rows in (7, 200, 1000):
        chunks = list(t.chunks(rows))
        assert all(c.shape[0] == rows for c in chunks[:-1])
        assert np.array_equal(np.vstack(chunks), whole.block)  # exact floats
    assert np.array_equal(t.select([2, 0]).block, whole.block[:, [2, 0]])


def _csv(tmp_path, text, name="p.csv"):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("ids, streamed", [
    (["1", "2", "10", "11"], True),  # increasing as integers (not as text): canonical order
    (["a", "b", "c1", "c2"], True),  # text ids increasing as text
    (["2", "1", "3", "4"], False),  # not sorted: read whole, sorted in memory
    (["1", "2", "2", "3"], False),  # a repeat: read_table names it
    (["1", "07", "7", "8"], False),  # '07' and '7' are one id (canonical form): a repeat
    (["-2", "1", "10", "a", "b"], True),  # integers by value first, then text
    (["1", "a", "2"], False),  # text sorted but not canonical: read whole
])
def test_only_files_in_canonical_order_stream(tmp_path, ids, streamed):
    f = _csv(tmp_path, "id,a\n" + "".join(f"{i},{k}.5\n" for k, i in enumerate(ids)))
    assert (scan_table(f, "id") is not None) == streamed


GOOD_AND_BAD = {
    "valid": "id,a,b\n1,0.5,-1\n2,3,4e-3\n",
    "bom and semicolons": "\ufeffid;a;b\n1;0.5;-1\n2;3;4\n",
    "padded cells": "id, a, b\n1, 0.5, -1\n2, 3, 4\n",
    "missing": "id,a,b\n1,0.5,NA\n2,3,4\n",
    "blank cell": "id,a,b\n1,0.5,\n2,3,4\n",
    "infinite": "id,a,b\n1,0.5,inf\n2,3,4\n",
    "text": "id,a,b\n1,0.5,hello\n2,3,4\n",
    "huge": "id,a,b\n1,0.5,1e200\n2,3,4\n",
    "repeated id": "id,a,b\n1,0.5,1\n1,3,4\n",
    "blank id": "id,a,b\n1,0.5,1\n,3,4\n",
    "no id column": "key,a,b\n1,0.5,1\n",
    "no records": "id,a,b\n",
    "ragged": "id,a,b\n1,0.5\n2,3,4\n",
}


@pytest.mark.parametrize("case", list(GOOD_AND_BAD))
def test_streaming_reader_gives_the_same_table_or_error(tmp_path, case, caplog):
    """load_own_file with stream=True: for every file, the same schema message (or the same refusal) and the
    same ids and values as reading it whole; what the checking pass cannot vouch for is read whole."""
    f = _csv(tmp_path, GOOD_AND_BAD[case])
    a, msg_a = load_own_file(f, "id", 1, stream=True)
    b, msg_b = load_own_file(f, "id", 1, stream=False)
    assert msg_a == msg_b
    if b is None:
        assert a is None and "error" in msg_a
    else:
        assert a.ids == b.ids and np.array_equal(a.block, b.block)


@pytest.mark.parametrize("fmt, backend", [("csv", "mpyc"), ("parquet", "plain")])
def test_streamed_job_equals_whole_file_job(tmp_path, fmt, backend):
    """PCA job mode from party files read in chunks of 16 records equals the job reading its files whole (in
    one chunk), bit for bit, through real processes (CSV) and the simulation (Parquet); declared ranges
    scale each chunk as they scale the whole block, with the same count of values outside."""
    X = make_X(m=150)
    bounds = [None, {"x5": [-0.3, 0.3]}]
    spec = load_job(write_party_csvs(X, tmp_path, 2, fmt=fmt, bounds=bounds, row_group_rows=40, min_intersection=1))
    streamed = run_job(spec, PCAJobTask(**TASK, chunk_rows=16), backend=backend)
    whole = run_job(spec, WholeFilePCA(**TASK, chunk_rows=16), backend="plain")
    assert np.array_equal(streamed[0]["result"]["raw"], whole[0]["result"]["raw"])
    assert streamed[2]["result"]["outside_declared_range"] == whole[2]["result"]["outside_declared_range"] > 0


def test_file_changed_during_the_job_is_refused(tmp_path, monkeypatch):
    """A file truncated after its checking pass: the client refuses its own input (exit 6) and nothing is
    released."""
    import sqm.framework.table_stream as ts

    X = make_X(m=100)
    spec = load_job(write_party_csvs(X, tmp_path, 2, min_intersection=1))
    f = spec.parties[2].file
    real = ts.scan_table

    def scan_then_truncate(path, id_column):
        t = real(path, id_column)
        if path == f:
            lines = Path(f).read_text().splitlines(True)
            Path(f).write_text("".join(lines[:60]))
        return t

    monkeypatch.setattr(ts, "scan_table", scan_then_truncate)
    with pytest.raises(MPCError) as err:
        run_job(spec, PCAJobTask(**TASK, chunk_rows=16), backend="plain")
    assert err.value.codes[2] == 6 and "its party file changed during the job" in str(err.value)


@pytest.mark.slow
def test_bench_scale_small_run(tmp_path):
    """python -m bench scale end to end on small Parquet jobs (real processes): the report's rows, its schema, and the
    chunked-vs-one-chunk identity check of the released integers."""
    import json

    import jsonschema

    from sqm.cli import output
    from bench.command import parse

    out = tmp_path / "scale.json"
    args = parse(["scale", "--rows", "3000,6000", "--cols", "12", "--check-rows", "3000",
                  "--workdir", str(tmp_path / "w"), "--json", str(out), "-q"])
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, output.schema())
    rep = doc["details"]
    assert [r["rows"] for r in rep["rows"]] == [3000, 6000]
    assert all(len(r["max_rss_bytes"]) == 4 and min(r["max_rss_bytes"]) > 0 for r in rep["rows"])
    assert rep["unchunked_check"]["identical"] is True and rep["unchunked_check"]["chunks"] > 1
    assert not list((tmp_path / "w").iterdir())  # the party files are removed unless --keep


def test_cli_chunk_rows_changes_nothing_but_memory(tmp_path):
    """sqm pca --job --chunk-rows N: the same released components as the default chunks (seeded simulation);
    a chunk of no record, or the option without --job, is refused before anything runs."""
    import json

    from sqm.cli.command import parse

    job = write_party_csvs(make_X(m=120), tmp_path, 2, fmt="parquet", min_intersection=1)
    docs = []
    for extra in ([], ["--chunk-rows", "16"]):
        out = tmp_path / f"out{len(extra)}.json"
        args = parse(["pca", "--job", job, "--backend", "plain", "--seed", "3", "--insecure-reproducible",
                      "--components", "2", "--json", str(out), "-q"] + extra)
        assert args.func(args) == 0
        docs.append(json.loads(out.read_text()))
    assert "components" in _release(docs[0]) and _release(docs[0]) == _release(docs[1])
    with pytest.raises(ValueError, match="chunk_rows"):
        args = parse(["pca", "--job", job, "--backend", "plain", "--chunk-rows", "0", "-q"])
        args.func(args)
    with pytest.raises(ValueError, match="--chunk-rows"):
        args = parse(["pca", "--dataset", "iris", "--chunk-rows", "16", "-q"])
        args.func(args)


def _release(doc):
    """The released values of a job's JSON (components, explained variance), wherever the document keeps them."""
    def find(x):
        if isinstance(x, dict):
            if "released" in x:
                return x["released"]
            for v in x.values():
                r = find(v)
                if r is not None:
                    return r
        return None
    return find(doc)


def test_parties_write_chunk_progress(tmp_path):
    """Each party of a PCA job appends "secure evaluation<TAB>done<TAB>due" per chunk to its own progress file,
    PATH.i (sqm.framework.progress.step_lines: the command's bar follows one of them)."""
    X = make_X(m=100)
    spec = load_job(write_party_csvs(X, tmp_path, 2, min_intersection=1))
    path = tmp_path / "progress"

    def chunks(i: int) -> list:
        lines = (tmp_path / f"progress.{i}").read_text().splitlines()
        return [ln for ln in lines if ln.startswith("secure evaluation\t")]
    run_job(spec, PCAJobTask(**TASK, chunk_rows=16, steps_path=str(path)), backend="mpyc")
    for i in range(3):
        assert chunks(i) == [f"secure evaluation\t{k}\t7" for k in range(1, 8)]
    run_job(spec, PCAJobTask(**TASK, chunk_rows=16, steps_path=str(path)), backend="plain")
    assert chunks(1) == ["secure evaluation\t7\t7"]  # the simulation: every chunk at once
