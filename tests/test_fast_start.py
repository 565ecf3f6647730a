"""Fast start (issue 15, part 3): ``sqm --help`` builds every command's parser without importing the learning,
accounting or plotting libraries, and a party process imports only what its program needs, which its record
says (``heavy_modules``).  Properties, not timings: the timings are ``python -m bench bgw-cost``'s phases."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sqm.apps.pbm_vfl.sum_exchange import SECURE_SUMS

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"torch", "sklearn", "scipy", "dp_accounting", "opacus", "matplotlib", "pandas"}
HELP_HEAVY = HEAVY | {"numpy"}  # --help imports not even numpy (a party process does: it computes)


def imported(argv: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime ARGV`` from the repository root; the top-level packages it imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=120)
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)$", p.stderr, re.M)
    assert names, p.stderr[-2000:]  # -X importtime wrote its table
    return p, {n.split(".")[0] for n in names}


@pytest.mark.parametrize("argv", [["-m", "sqm", "--help"], ["-m", "sqm", "pca", "--help"], ["-m", "bench", "--help"],
                                  ["-m", "sqm", "logreg", "--help"], ["-m", "sqm", "pbm-vfl", "--help"]])
def test_help_imports_no_heavy_package(argv):
    p, top = imported(argv)
    usage = "usage: python -m bench" if argv[1] == "bench" else "usage: sqm"
    assert p.returncode == 0 and p.stdout.startswith(usage), p.stderr[-2000:]
    assert not HELP_HEAVY & top, f"{' '.join(argv[1:])} imported {sorted(HELP_HEAVY & top)}"


def test_help_quotes_the_constants_it_reads_without_importing():
    """The help texts quote one definition of each constant, kept in a light module (no source is parsed)."""
    from sqm.apps.logreg import estimator, texts

    assert estimator.SCHEDULE_HELP is texts.SCHEDULE_HELP and estimator.SOLVER_HELP is texts.SOLVER_HELP
    from sqm.cli.command import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert " ".join(estimator.SCHEDULE_HELP.split()) in " ".join(sub["logreg"].format_help().split())
    assert list([a for a in sub["pbm-vfl"]._actions if a.dest == "secure_sum"][0].choices) == list(SECURE_SUMS)


def test_lazy_names_still_import():
    """The packages' and modules' names that moved behind PEP 562 hooks import as before."""
    from sqm.apps.hdp_vfl import HDPParty, check_labels  # noqa: F401
    from sqm.apps.linreg import LinRegJobTask, SQMLinearRegression  # noqa: F401
    from sqm.cli.linreg import LinRegJobTask as same
    from sqm.apps.pbm_vfl import PBMVFLClassifier, PBMVFLProgram, VFLConfig  # noqa: F401
    from sqm.cli.pbm_vfl import register  # noqa: F401
    from bench.bgw_cost import PCG64Backend
    from sqm.mpc.net.party import InputRefused, ProtocolError, messages, public_digest  # noqa: F401
    from sqm.mpc.protocols.mpyc_backend import MPyCBackend

    assert same is LinRegJobTask and issubclass(PCG64Backend, MPyCBackend) and messages.__name__ == "sqm.mpc.net.wire"
    assert issubclass(InputRefused, ProtocolError)


def test_covariance_parties_import_no_heavy_package():
    """A secure covariance through real party processes: no party imported torch, scikit-learn, SciPy,
    dp-accounting (or any of HEAVY): the launcher calibrates, the parties only quantize, share and add."""
    from sqm.mpc.net.launch import record_jobs
    from sqm.mpc.net.party import HEAVY_MODULES
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.vertical import VerticalData

    assert set(HEAVY_MODULES) >= HEAVY
    X = np.random.default_rng(0).normal(size=(40, 5))
    X /= np.linalg.norm(X, axis=1).max()
    with record_jobs() as seen:
        res = SQM(covariance(5), 1024.0, epsilon=1.0, backend="mpyc", seed=3).run(VerticalData.split(X, 2))
    assert res.estimate.shape == (25,) and len(seen) == 1 and len(seen[0]) == 3
    for r in seen[0]:
        assert r["heavy_modules"] == []
        tl = r["timeline"]  # the party's and the launcher's stamps, in the order they happen
        order = ["spawned", "started", "main", "unpickled", "ready", "connected", "agreed", "finished", "closed",
                 "writing", "exited", "collected"]
        assert all(tl[a] <= tl[b] for a, b in zip(order, order[1:], strict=False)), tl


@pytest.fixture(scope="module")
def pca_job_heavy(tmp_path_factory) -> list[list[str]]:
    """The heavy packages each party of one PCA job (sqm.framework.party.JobParty with PCAJobTask, real processes)
    imported."""
    from sqm.framework.spec import load_job, write_party_csvs
    from sqm.framework.runners import run_local
    from sqm.apps.pca import PCAJobTask

    X = np.random.default_rng(1).normal(size=(30, 6))
    X /= np.linalg.norm(X, axis=1).max()
    spec = load_job(write_party_csvs(X, tmp_path_factory.mktemp("pca-job"), 2, min_intersection=1))
    recs = run_local(spec, PCAJobTask(n_components=2, epsilon=1.0))
    assert len(recs[0]["result"]["components"]) == 2
    return [r["heavy_modules"] for r in recs]


def test_pca_job_parties_import_no_learning_library(pca_job_heavy):
    """No party of a PCA job imports torch, scikit-learn, Opacus, matplotlib or pandas."""
    for heavy in pca_job_heavy:
        assert not {"torch", "sklearn", "opacus", "matplotlib", "pandas"} & set(heavy), heavy


def test_pca_job_clients_import_no_accounting_library(pca_job_heavy):
    """A PCA job's clients plan their release (mu calibrated without dp-accounting, the report's events built
    only when used) and never load dp-accounting or SciPy."""
    for heavy in pca_job_heavy[1:]:
        assert heavy == [], heavy


def test_pca_job_parties_import_no_accounting_library(pca_job_heavy):
    """No party of a PCA job loads dp-accounting or SciPy: the server writes the report's events without
    building them (DeferredEvents) and takes the components with numpy."""
    for heavy in pca_job_heavy:
        assert heavy == [], heavy


def test_bench_start_report(tmp_path):
    """python -m bench start: the help's figures and each party's start, step by step, in its JSON."""
    import json

    from bench.command import main

    out = tmp_path / "start.json"
    assert main(["start", "--repeat", "1", "--rows", "60", "--cols", "4", "--json", str(out), "-q"]) == 0
    rep = json.loads(out.read_text())["details"]
    assert rep["help"]["tree"] == str(ROOT) and rep["help"]["best_seconds"] > 0 and rep["help"]["modules"] > 0
    assert not HELP_HEAVY & set(rep["help"]["heavy"])
    parties = rep["party_start"]["parties"]
    assert [p["party"] for p in parties] == ["server", "client 1", "client 2"]
    for p in parties:
        steps = [p[k] for k in ("interpreter", "stdlib", "program", "runtime")]
        assert all(s >= 0 for s in steps) and abs(sum(steps) - p["spawn -> ready"]) < 1e-6
        assert p["heavy_modules"] == [] and p["total"] >= p["spawn -> ready"] + p["connect"]
    ls = rep["launcher_start"]  # the launcher's first job in a fresh interpreter, step by step
    assert ls["repeat"] == 1 and len(ls["runs"]) == 1 and ls["runs"][0]["mu"] > 0
    steps = ls["runs"][0]["steps"]
    assert all(v >= 0 for v in steps.values())
    assert abs(steps["plan"] + steps["keys"] + steps["programs"] - steps["run -> first spawn"]) < 1e-6
