"""Jobs over clients whose record sets differ (issue 23): the private set intersection aligns them, and a job
releases bit for bit what the same job releases on pre-intersected files with the same randomness, through
real party processes, for CSV and Parquet (read in chunks), for PCA, linear and logistic regression.  Bad
ids (repeats after canonicalisation, missing cells, floating-point ids, empty or too small intersections)
are refused naming the client and the problem, never an id, before any share of data."""
from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest

from sqm.framework.spec import load_job, write_job

from sqm.framework.runners import run_job, simulate
from sqm.apps.pca import PCAJobTask
from sqm.framework.tables import canonical_id, id_order_key
from sqm.errors import EXIT_BAD_DATA, EXIT_REFUSED
from sqm.mpc.net.launch import MPCError, free_ports

TASK = dict(n_components=2, epsilon=1.0, delta=1e-5, gamma=1024.0, seed=5, insecure_reproducible=True)
COLS = (2, 2, 2)


def universe(m=229, n=6, seed=0):
    X = np.random.default_rng(seed).normal(size=(m, n)) * np.linspace(2.0, 0.5, n)
    return X / np.linalg.norm(X, axis=1).max()


def overlap_sets(m=229, common=100, clients=3, seed=1):
    """Ids 1000..1000+m-1: ``common`` of them at every client, the rest split so that each client holds
    ``common`` / (its set) = 70% (3 clients, m = 229, common = 100: 100 + 43 of its own)."""
    ids = np.random.default_rng(seed).permutation(m) + 1000
    shared, rest = ids[:common], ids[common:]
    return [sorted(int(i) for i in np.concatenate([shared, part])) for part in np.array_split(rest, clients)], \
        sorted(int(i) for i in shared)


def write_parties(folder, X, sets, cols=COLS, fmt="csv", shuffle=True, id_text=str, min_intersection=None,
                  seed=2) -> str:
    """Client j's file holds its columns of X for its own ids (row id - 1000 of X), in shuffled order (CSV) or
    sorted by id (Parquet, read in chunks); ``id_text`` writes an id (CSV only)."""
    os.makedirs(folder, exist_ok=True)
    files, start, rng = [], 0, np.random.default_rng(seed)
    for j, (k, ids) in enumerate(zip(cols, sets, strict=False), start=1):
        rows = [(i, X[i - 1000, start:start + k]) for i in ids]
        names = [f"x{start + t}" for t in range(k)]
        start += k
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = os.path.join(folder, f"party{j}.parquet")
            table = {"id": pa.array([i for i, _ in rows], pa.int64())}
            table.update({n: pa.array([float(r[t]) for _, r in rows]) for t, n in enumerate(names)})
            pq.write_table(pa.table(table), path, row_group_size=16)
        else:
            if shuffle:
                rows = [rows[r] for r in rng.permutation(len(rows))]
            path = os.path.join(folder, f"party{j}.csv")
            with open(path, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["id"] + names)
                w.writerows([id_text(i)] + [repr(float(v)) for v in r] for i, r in rows)
        files.append(path)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(len(files) + 1)]
    return write_job(os.path.join(folder, "job.json"), addresses, files, min_intersection=min_intersection)


def raw(recs):
    return [int(v) for v in recs[0]["result"]["raw"]]


@pytest.mark.slow
def test_three_clients_70_percent_overlap_through_real_processes_equal_the_pre_intersected_job(tmp_path):
    X = universe()
    sets, common = overlap_sets()
    assert all(abs(len(common) / len(s) - 0.7) < 0.05 for s in sets)
    partial = load_job(write_parties(tmp_path / "partial", X, sets, min_intersection=50))
    pre = load_job(write_parties(tmp_path / "pre", X, [common] * 3, min_intersection=50))
    real = run_job(partial, PCAJobTask(**TASK), backend="mpyc", timeout=120)
    ref = simulate(pre, PCAJobTask(**TASK), timeout=120)
    assert raw(real) == raw(ref)  # the same released integers, bit for bit
    assert np.array_equal(real[0]["result"]["components"], ref[0]["result"]["components"])
    assert real[0]["result"]["n_records"] == len(common) == 100
    for r in real:  # every party learns the set sizes and the intersection size
        assert r["result"]["alignment"] == {"records": {"1": len(sets[0]), "2": len(sets[1]), "3": len(sets[2])},
                                            "intersection": len(common)}
    assert [r["result"]["rows"] for r in real[1:]] == [len(common)] * 3  # each client used its common rows only
    notes = real[0]["result"]["report"]["notes"]  # the report says what n is, and that it is released exactly
    assert "the 100 records all 3 clients hold" in notes and "intersection size is released exactly" in notes


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_simulation_aligns_csv_and_parquet_read_in_chunks_alike(tmp_path, fmt):
    X = universe()
    sets, common = overlap_sets(seed=4)
    partial = load_job(write_parties(tmp_path / fmt, X, sets, fmt=fmt, min_intersection=50))
    pre = load_job(write_parties(tmp_path / "pre", X, [common] * 3, min_intersection=50))
    task = dict(TASK, chunk_rows=7)  # the streamed path: chunks of 7 records out of a file of row groups of 16
    assert raw(simulate(partial, PCAJobTask(**task), timeout=120)) == raw(simulate(pre, PCAJobTask(**task),
                                                                                   timeout=120))


def test_parquet_files_sorted_by_id_are_read_in_chunks_with_a_mask(tmp_path):
    from sqm.framework.party import load_own_file

    X = universe()
    sets, _ = overlap_sets()
    spec = load_job(write_parties(tmp_path, X, sets, fmt="parquet"))
    table, schema = load_own_file(spec.parties[1].file, "id", 1, stream=True)
    assert type(table).__name__ == "StreamedTable" and schema["rows"] == len(sets[0])
    keep = np.array([i % 3 == 0 for i in sets[0]])
    sub = table.restricted(keep)
    assert sub.n_rows == int(keep.sum()) and sub.ids == [canonical_id(i) for i in np.array(sets[0])[keep]]
    blocks = list(sub.chunks(5))
    assert [b.shape[0] for b in blocks[:-1]] == [5] * (len(blocks) - 1)
    assert np.array_equal(np.vstack(blocks), X[np.array(sets[0])[keep] - 1000, :2])


@pytest.mark.parametrize("task", ["linreg", "logreg"])
def test_linreg_and_logreg_jobs_run_on_the_intersection(tmp_path, task):
    X = universe(seed=3)
    sets, common = overlap_sets(seed=5)
    if task == "logreg":
        X[:, -1] = (X[:, 0] + 0.3 * X[:, 2] > 0).astype(float)  # client 3's last column: the label
        from sqm.apps.logreg.job import LRJobTask

        make = lambda: LRJobTask(4.0, 1e-5, 256.0, 0.25, 1, 1.0, label_column="x5", seed=3, solver="sgd",  # noqa: E731
                                 insecure_reproducible=True)
        key = "coef"
    else:
        from sqm.apps.linreg import SQMLinearRegression
        from sqm.apps.linreg.job import LinRegJobTask

        make = lambda: LinRegJobTask(SQMLinearRegression(epsilon=2.0, gamma=1024.0, seed=3),  # noqa: E731
                                     label_column="x5", insecure_reproducible=True, label_range=(-1, 1))
        key = "coef"
    partial = load_job(write_parties(tmp_path / "partial", X, sets, min_intersection=50))
    pre = load_job(write_parties(tmp_path / "pre", X, [common] * 3, min_intersection=50))
    a, b = simulate(partial, make(), timeout=120), simulate(pre, make(), timeout=120)
    assert np.array_equal(np.asarray(a[0]["result"][key]), np.asarray(b[0]["result"][key]))
    assert a[0]["result"]["n_records"] == len(common)


# ----- ids: canonical form, bad ids -------------------------------------------------------------------------


def test_ids_are_canonicalised_before_anything_compares_them():
    assert [canonical_id(x) for x in ["007", "7", " 7 ", "+7", 7, "-0", "00", "-007"]] == \
        ["7", "7", "7", "7", "7", "0", "0", "-7"]
    assert [canonical_id(x) for x in ["7.0", "7e0", "0x7", "A7", "a7", "Cafe\u0301"]] == \
        ["7.0", "7e0", "0x7", "A7", "a7", "Caf\u00e9"]  # other text is exact (NFC)
    ids = ["b", "10", "-3", "a", "2", "9" * 30]
    assert sorted(ids, key=id_order_key) == ["-3", "2", "10", "9" * 30, "a", "b"]  # integers first, by value


def test_leading_zeros_and_integer_columns_align_across_clients(tmp_path):
    """Client 1 writes its ids zero-padded as text ('0001007'), clients 2 and 3 as plain integers (client 3 in
    a Parquet int64 column): the same ids, the same release as all-plain files."""
    X = universe()
    sets, common = overlap_sets(seed=6)
    plain = load_job(write_parties(tmp_path / "plain", X, sets, min_intersection=50))
    spec = load_job(write_parties(tmp_path / "mixed", X, sets, id_text=lambda i: f"{i:07d}", min_intersection=50))
    pq_spec = load_job(write_parties(tmp_path / "pq", X, sets, fmt="parquet", min_intersection=50))
    assert Path(spec.parties[1].file).read_text().splitlines()[1].split(",")[0].startswith("000")
    parties = list(spec.parties)
    parties[3] = pq_spec.parties[3]
    import dataclasses

    spec = dataclasses.replace(spec, parties=tuple(parties))
    assert raw(simulate(spec, PCAJobTask(**TASK), timeout=120)) == raw(simulate(plain, PCAJobTask(**TASK),
                                                                                timeout=120))


def _refused(spec, capsys=None):
    with pytest.raises(MPCError) as e:
        simulate(spec, PCAJobTask(**TASK), timeout=120)
    return e.value


@pytest.mark.parametrize("case", ["repeat after canonicalisation", "missing id cell"])
def test_bad_id_columns_are_refused_naming_the_client_and_never_an_id(tmp_path, caplog, case):
    X = universe()
    sets, _ = overlap_sets()
    spec = load_job(write_parties(tmp_path, X, sets, min_intersection=50))
    f = spec.parties[2].file
    lines = Path(f).read_text().splitlines()
    victim = lines[5].split(",")[0]
    if case == "repeat after canonicalisation":
        lines[9] = "000" + victim + "," + lines[9].split(",", 1)[1]  # '0001234' repeats '1234'
        want = "client 2 refused: its file repeats ids"
    else:
        lines[9] = "," + lines[9].split(",", 1)[1]
        want = "client 2 refused: its file has an empty 'id' value"
    Path(f).write_text("\n".join(lines) + "\n")
    err = _refused(spec)
    assert want in str(err) and err.codes[2] == EXIT_BAD_DATA and err.codes[0] == EXIT_REFUSED
    everything = str(err) + caplog.text
    assert victim not in everything  # no id value anywhere, not even in the operator's own detail


def test_a_floating_point_parquet_id_column_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = universe()
    sets, _ = overlap_sets()
    spec = load_job(write_parties(tmp_path, X, sets, fmt="parquet", min_intersection=50))
    f = spec.parties[1].file
    t = pq.read_table(f)
    pq.write_table(t.set_column(0, "id", pa.array(t.column("id").to_numpy().astype(float))), f)
    err = _refused(spec)
    assert "client 1 refused: its id column 'id' holds floating-point numbers, not integers or text" in str(err)


def test_an_empty_or_too_small_intersection_is_refused_before_any_share(tmp_path):
    X = universe()
    sets, common = overlap_sets()
    disjoint = [sets[0], [i for i in sets[1] if i not in common], sets[2]]
    err = _refused(load_job(write_parties(tmp_path / "empty", X, disjoint, min_intersection=1)))
    assert "refused before any share was sent: the clients' record sets have 0 records in common" in str(err)
    assert "no record is in every client's file" in str(err) and set(err.codes.values()) == {EXIT_REFUSED}
    at_default = simulate(load_job(write_parties(tmp_path / "default", X, sets)), PCAJobTask(**TASK), timeout=120)
    assert at_default[0]["result"]["n_records"] == 100  # the default minimum, 100 records: met exactly
    err = _refused(load_job(write_parties(tmp_path / "small", X, sets, min_intersection=101)))
    assert (f"the clients' record sets have 100 records in common (client 1 {len(sets[0])}, client 2 "
            f"{len(sets[1])}, client 3 {len(sets[2])}), fewer than the job's minimum 101 (--min-intersection)"
            ) in str(err)
    assert set(err.codes.values()) == {EXIT_REFUSED}


def test_the_minimum_is_a_positive_integer_in_the_job_file_and_on_the_command_line(tmp_path, capsys):
    import json

    from sqm.cli.command import main
    from sqm.errors import EXIT_USAGE

    X = universe()
    sets, _ = overlap_sets()
    job = write_parties(tmp_path, X, sets, min_intersection=50)
    raw_job = json.loads(Path(job).read_text())
    for bad in (0, -3, 2.5, "100", True):
        with open(job, "w") as f:
            json.dump({**raw_job, "min_intersection": bad}, f)
        with pytest.raises(ValueError, match="'min_intersection' must be an integer"):  # (>= 1; the schema: a type)
            load_job(job)
    with open(job, "w") as f:
        json.dump(raw_job, f)
    assert load_job(job).min_intersection == 50
    code = main(["pca", "--job", job, "--components", "2", "--backend", "plain", "-q", "--min-intersection", "0"])
    assert code == EXIT_USAGE and "--min-intersection must be an integer >= 1" in capsys.readouterr().err


# ----- each party's size policy (issue 43) ------------------------------------------------------------------------

def test_each_party_refuses_peers_beyond_its_own_size_policy():
    """sqm.framework.alignment.check_set_sizes: a peer's set at most R times this party's own; a party holding no set,
    the largest at most R times the smallest; never above the PSI's 32-bit limit (hiding membership: their sum);
    the message names the peer and the counts only."""
    from sqm.framework.alignment import check_max_set_ratio, check_set_sizes
    from sqm.mpc.net.party import ProtocolError

    sizes = {1: 100, 2: 1000, 3: 1001}
    check_set_sizes(2, sizes)  # 10x: within the default
    with pytest.raises(ProtocolError, match=r"party 1 refused before any id was sent: client 3 declared 1,001 "
                                            r"records, more than 10 times this party's 100 \(its --max-set-ratio\)"):
        check_set_sizes(1, sizes)
    with pytest.raises(ProtocolError, match=r"client 3 declared 1,001 records, more than 10 times the smallest set, "
                                            r"100"):
        check_set_sizes(0, sizes)  # the server of a PCA job: no set of its own
    check_set_sizes(1, sizes, 10.01)
    with pytest.raises(ProtocolError, match="client 2 declared 150 records, more than 1.2 times this party's 100"):
        check_set_sizes(1, {1: 100, 2: 150}, 1.2)
    with pytest.raises(ProtocolError, match="the server .party 0. declared 5,000 records, more than 3 times this "
                                            "party's 1,500"):
        check_set_sizes(2, {0: 5000, 1: 1500, 2: 1500}, 3)  # a PBM-VFL server's label table
    huge = {1: 2 ** 32, 2: 2 ** 32}
    with pytest.raises(ProtocolError, match="client 1 declared 4,294,967,296 records, above the 4,294,967,295"):
        check_set_sizes(1, huge, 1e9)
    with pytest.raises(ProtocolError, match="in all, above the 4,294,967,295 positions"):
        check_set_sizes(1, {1: 2 ** 31, 2: 2 ** 31}, hide=True)
    for bad in (0.5, float("nan"), "10", True):
        with pytest.raises(ValueError, match="--max-set-ratio must be a number >= 1"):
            check_max_set_ratio(bad)


def test_max_set_ratio_reaches_every_party_program_from_the_command_line(tmp_path, capsys):
    """--max-set-ratio (one option, sqm.cli.options' job group) is each party's own policy: with 1.5, a client
    holding 286 records against the others' 143 is refused, naming it; the default (10) runs the job; below 1 is a
    usage error."""
    from sqm.cli.command import main
    from sqm.errors import EXIT_REFUSED, EXIT_USAGE

    X = universe(m=400)
    sets, common = overlap_sets()
    big = sets[2] + list(range(1229, 1229 + len(sets[2])))  # client 3 twice the others
    job = write_parties(tmp_path, X, [sets[0], sets[1], big], min_intersection=50)
    base = ["pca", "--job", job, "--components", "2", "--backend", "plain", "-q"]
    assert main(base + ["--max-set-ratio", "1.5"]) == EXIT_REFUSED
    assert "client 3 declared 286 records, more than 1.5 times" in capsys.readouterr().err
    assert main(base) == 0
    assert main(base + ["--max-set-ratio", "0.5"]) == EXIT_USAGE
    assert "--max-set-ratio must be a number >= 1" in capsys.readouterr().err


def test_below_the_minimum_with_membership_hidden_the_server_alone_withholds_the_release(tmp_path, capsys):
    """With membership hidden a refusal the clients see would tell them whether m is below the minimum; so the
    server alone checks it: the job runs (with an indicator of zeros), every client's result is what it is with a
    lower minimum, and the server's result holds the reason and no release; sqm pca --job exits REFUSED saying
    so."""
    import os

    from sqm.cli.command import main
    from sqm.framework.spec import write_job
    from sqm.errors import EXIT_REFUSED

    X = universe()
    sets, common = overlap_sets()
    base = load_job(write_parties(tmp_path, X, sets, min_intersection=50))
    runs = {}
    for minimum in (100, 101):  # m = 100
        spec = load_job(write_job(os.path.join(tmp_path, f"hide{minimum}.json"), base.addresses,
                                  [p.file for p in base.parties[1:]], min_intersection=minimum, hide_membership=True))
        runs[minimum] = simulate(spec, PCAJobTask(**TASK), timeout=120)
    assert "raw" in runs[100][0]["result"] and runs[100][0]["result"]["n_records"] == 100
    withheld = runs[101][0]["result"]
    assert set(withheld) >= {"withheld"} and not {"raw", "components", "report"} & set(withheld)
    assert "100 records in common" in withheld["withheld"]
    assert "fewer than the job's minimum 101" in withheld["withheld"]
    for j in (1, 2, 3):  # every client's result: the same in both jobs
        assert runs[100][j]["result"] == runs[101][j]["result"]
    code = main(["pca", "--job", os.path.join(tmp_path, "hide101.json"), "--components", "2", "--backend", "plain",
                 "--seed", "5", "--insecure-reproducible", "-q"])
    assert code == EXIT_REFUSED and "the server withholds the release" in capsys.readouterr().err
