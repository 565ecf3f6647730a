"""Every sqm command that writes JSON (--json FILE) writes one shape: sqm/cli/output.schema.json (JSON Schema
2020-12, schema_version "1"), strict JSON (no NaN or Infinity), the same top-level keys in local and job mode.
Each command runs once with tiny settings, in process (--backend plain: the labelled simulation) where it can;
job mode through the CLI's plain path (sqm.framework.runners.simulate)."""
import argparse
import json
import math

import numpy as np
import pytest

from sqm.cli import output
from sqm.cli.command import build_parser, main

jsonschema = pytest.importorskip("jsonschema")


def _refuse(constant):
    raise ValueError(f"not strict JSON: {constant}")


def load_valid(path) -> dict:
    """The file parsed by a strict parser (NaN/Infinity refused) and validated against the schema."""
    doc = json.loads(path.read_text(), parse_constant=_refuse)
    jsonschema.Draft202012Validator(output.schema()).validate(doc)
    return doc


def run(tmp_path, name: str, *argv, entry=main) -> dict:
    """``entry(ARGV --json FILE)`` (``sqm``'s main, or ``python -m bench``'s): its file, validated."""
    out = tmp_path / f"{name}.json"
    assert entry([*argv, "--json", str(out)]) == 0
    doc = load_valid(out)
    assert doc["schema_version"] == output.SCHEMA_VERSION == "1"
    return doc


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A two-client job file (40 records, 6 columns; client 2's last column is a regression label)."""
    from sqm.framework.spec import write_party_csvs

    X = np.random.default_rng(0).normal(size=(40, 6))
    X /= np.linalg.norm(X, axis=1).max()
    return write_party_csvs(X, str(tmp_path_factory.mktemp("job")), 2, dataset="schema-test", min_intersection=1)


def test_the_schema_is_valid_2020_12_and_shipped_beside_the_writer():
    s = output.schema()
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["$schema"].endswith("2020-12/schema") and s["properties"]["schema_version"]["const"] == "1"
    assert set(output.OPTIONAL) <= set(s["properties"])  # every optional key the writer accepts is declared


def test_pca_local_and_job_write_the_same_keys(tmp_path, job):
    local = run(tmp_path, "pca", "pca", "--dataset", "iris", "--parties", "2", "--components", "2",
                "--backend", "plain", "-q")
    assert (local["command"], local["mode"], local["simulation"]) == ("pca", "local", True)
    assert len(local["privacy"]) == len(local["results"]) == 4  # one report per method, SQM first
    assert local["results"][0]["method"] == "SQM (plain)" and local["privacy"][0]["method"] == "SQM"
    assert local["privacy"][3]["epsilon_server"] == "inf"  # non-private: no guarantee, strict JSON
    assert local["bytes"] == {"total": None, "per_party": []}  # the simulation measures no bytes
    assert len(local["released"]["components"]) == 2 and local["columns"][0] == "sepal length (cm)"
    jobdoc = run(tmp_path, "pcajob", "pca", "--job", job, "--components", "2", "--backend", "plain")
    assert (jobdoc["command"], jobdoc["mode"], jobdoc["dataset"]) == ("pca", "job", "schema-test")
    assert set(jobdoc["parameters"]) == set(local["parameters"])  # one command, one parameter set
    required = set(output.schema()["required"])
    assert required <= set(local) and required <= set(jobdoc)
    assert jobdoc["results"][0]["method"] == "SQM" and jobdoc["results"][0]["records"] == 40
    assert np.asarray(jobdoc["released"]["components"]).shape[0] == 2
    assert jobdoc["bytes"] == {"total": None, "per_party": [None, None, None]}
    assert set(jobdoc["clients"]) == {"1", "2"}


def test_linreg_local_and_job(tmp_path, job):
    local = run(tmp_path, "linreg", "linreg", "--backend", "plain", "--parties", "2", "-q")
    assert [p["method"] for p in local["privacy"]][1:] == ["central DP (Gauss)", "non-private (Ridge)"]
    assert local["results"][2]["epsilon"] == "inf"
    jobdoc = run(tmp_path, "linjob", "linreg", "--job", job, "--backend", "plain", "--label-column", "x5",
                 "--label-range", "-10", "10")
    assert jobdoc["mode"] == "job" and set(jobdoc["parameters"]) == set(local["parameters"])
    assert len(jobdoc["released"]["coef"]) == 5 and math.isfinite(jobdoc["released"]["intercept"])


def test_logreg(tmp_path):
    doc = run(tmp_path, "logreg", "logreg", "--backend", "plain", "--parties", "2", "--epochs", "1",
              "--no-baselines", "--seed", "0", "-q")
    assert doc["secure_mode"] is False and [r["method"] for r in doc["results"]] == ["SQM"]
    assert doc["parameters"]["epochs"] == 1 and 0 <= doc["results"][0]["accuracy"] <= 1


def test_hdp_vfl(tmp_path):
    doc = run(tmp_path, "hdp", "hdp-vfl", "--backend", "plain", "--epochs", "1", "--no-sqm", "--seed", "0", "-q")
    assert doc["command"] == "hdp-vfl" and doc["results"][0]["method"] == "HDP-VFL"
    assert len(doc["privacy"]) == 2 and doc["details"]["references"]["majority_class"] > 0


def test_pbm_vfl(tmp_path):
    pytest.importorskip("torch")
    doc = run(tmp_path, "pbm", "pbm-vfl", "--backend", "plain", "--parties", "2", "--epochs", "1", "--hidden",
              "4", "--embedding-size", "2", "--batch-size", "1000", "--device", "cpu", "--no-baselines",
              "--secure-sum", "masked", "-q")
    assert [p["method"] for p in doc["privacy"]] == ["PBM-VFL"] and doc["simulation"] is True


def test_correlation_local_and_job(tmp_path, job):
    local = run(tmp_path, "corr", "correlation", "--dataset", "iris", "--backend", "plain", "--seed", "1", "-q")
    assert (local["command"], local["mode"], local["secure_mode"]) == ("correlation", "local", False)
    assert np.array(local["released"]["correlation"]).shape == (4, 4)
    doc = run(tmp_path, "corrjob", "correlation", "--job", job, "--backend", "plain", "-q")
    assert (doc["command"], doc["mode"], doc["dataset"]) == ("correlation", "job", "schema-test")
    assert doc["columns"] == [f"x{j}" for j in range(6)]
    assert np.array(doc["released"]["correlation"]).shape == (6, 6)


def test_budget_show_and_list(tmp_path):
    from sqm.mechanism import events as ev
    from sqm.mechanism.ledger import Ledger

    path = str(tmp_path / "l.sqlite")
    assert main(["budget", "set", "adult", "--budget", "2,1e-5", "--ledger", path]) == 0
    Ledger(path).record("adult", [ev.gaussian_event(3.0, 1.0)], "pca", "job-1")
    show = run(tmp_path, "show", "budget", "show", "adult", "--ledger", path)
    assert (show["command"], show["mode"], show["dataset"]) == ("budget show", "ledger", "adult")
    assert len(show["results"]) == 1 and show["details"]["summary"]["left"] > 0
    listed = run(tmp_path, "list", "budget", "list", "--ledger", path)
    assert listed["results"][0]["dataset"] == "adult"


def test_benches(tmp_path):
    from bench.command import main as bench

    gamma = run(tmp_path, "lrg", "lr-gamma", "--gammas", "64,1024", "--d", "10", "--q", "0.5", "--epochs", "1",
                entry=bench)
    assert gamma["command"] == "bench lr-gamma" and gamma["results"] == gamma["details"]["rows"]
    assert "bench" not in gamma["parameters"] and gamma["parameters"]["gammas"] == "64,1024"
    pca = run(tmp_path, "pcau", "pca-utility", "--datasets", "iris", "--epsilons", "1", "--gammas",
              "1024", "--kmax", "1", "--runs", "1", "--seed", "0", "-q", entry=bench)
    assert pca["mode"] == "bench" and pca["results"][0]["runs"] == 1 and "iris" in pca["details"]["results"]


def test_score(tmp_path, job):
    model = run(tmp_path, "pcajob", "pca", "--job", job, "--components", "2", "--backend", "plain", "-q")
    doc = run(tmp_path, "score", "score", "--job", job, "--model", str(tmp_path / "pcajob.json"), "--backend",
              "plain", "--scores", str(tmp_path / "s.csv"), "-q")
    assert (doc["command"], doc["mode"], doc["privacy"]) == ("score", "job", [])  # nothing charged
    assert doc["released"] == {"outputs": ["PC1", "PC2"], "kind": "projection", "records": 40,
                               "scores_file": str(tmp_path / "s.csv")}
    assert model["released"]["components"] and [r["requester"] for r in doc["results"]] == [2, 2, 2]


def test_audit(tmp_path):
    doc = run(tmp_path, "audit", "audit", "--releases", "pca", "--runs", "4", "--records", "5", "--gamma", "16",
              "--seed", "1", "-q")
    assert (doc["command"], doc["mode"], doc["simulation"]) == ("audit", "local", True)
    assert [r["method"] for r in doc["results"]] == ["pca"] and len(doc["privacy"]) == 1


def test_every_json_command_is_covered():
    """Every subcommand with --json is run above (the commands) or writes through bench.common.finish (benches)."""
    from bench.command import build_parser as bench_parser

    covered = {"pca", "linreg", "correlation", "logreg", "hdp-vfl", "pbm-vfl", "score", "budget show",
               "budget list", "audit"}

    def walk(parser, prefix=""):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from walk(sub, f"{prefix} {name}".strip())
            elif "--json" in a.option_strings:
                yield prefix

    assert set(walk(build_parser())) == covered
    assert {"bench lr-gamma", "bench pca-utility"} <= set(walk(bench_parser(), "bench"))


def test_non_finite_and_numpy_values_are_strict_json(tmp_path):
    doc = output.document("pca", "local", parameters={"gamma": np.float32(2.0), "k": np.int64(3)},
                          results=[{"method": "x", "epsilon_server": math.inf, "r2": math.nan,
                                    "v": np.array([1.0, -np.inf])}])
    out = tmp_path / "x.json"
    output.write(str(out), doc)
    d = load_valid(out)
    assert d["results"][0] == {"method": "x", "epsilon_server": "inf", "r2": "nan", "v": [1.0, "-inf"]}
    assert d["parameters"] == {"gamma": 2.0, "k": 3}
    with pytest.raises(ValueError, match="not in schema version 1"):
        output.document("pca", "local", parameters={}, results=[], extras=1)
    with pytest.raises(ValueError, match="unknown output mode"):
        output.document("pca", "remote", parameters={}, results=[])
    bad = dict(d, results=[{"accuracy": 1.0}])  # local/job rows name their method
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, output.schema())
