"""The private correlation matrix (sqm.apps.correlation, `sqm correlation`), the statistic the how-to
docs/how-to/add-a-statistic.md adds end to end: its release is close to numpy's correlations at a large epsilon,
a seeded job equals the in-process estimator bit for bit, and the job file's task block runs it through real
party processes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sqm.cli.command import main
from sqm.framework.runners import run_job
from sqm.framework.spec import load_job, write_party_csvs
from sqm.apps.correlation import CorrelationJobTask, CorrelationParams, SQMCorrelation


def _data(n=4000, seed=0):
    """Four correlated columns with non-zero means, each scaled to |x_j| <= 1/2 (so ||x|| <= 1: no clipping)."""
    rng = np.random.default_rng(seed)
    L = np.array([[1, 0, 0, 0], [0.8, 0.6, 0, 0], [0.3, -0.5, 0.8, 0], [0, 0.2, 0.1, 0.97]])
    X = rng.normal(size=(n, 4)) @ L.T + np.array([1.0, -0.5, 0.2, 0.0])
    return X / (np.abs(X).max(axis=0) * 2.0)


def test_the_release_is_close_to_numpys_correlations_at_a_large_epsilon():
    X = _data()
    m = SQMCorrelation(epsilon=100.0, n_parties=2, backend="plain", seed=1).fit(X)
    exact = np.corrcoef(X.T)
    assert m.clipped_ == [0, 0]
    assert np.abs(m.correlation_ - exact).max() <= 0.02  # measured 0.0023 at this seed
    assert np.abs(m.mean_ - X.mean(axis=0)).max() <= 0.01
    assert abs(m.n_records_ - len(X)) <= 20
    # a small epsilon is visibly noisier on the same data and seed: the test can tell the two apart
    assert np.abs(SQMCorrelation(epsilon=1.0, n_parties=2, backend="plain", seed=1).fit(X).correlation_
                  - exact).max() > 0.05


def test_the_task_agrees_on_its_declared_public_parameters():
    task = CorrelationJobTask(epsilon=2.0, gamma=1024.0)
    assert task.public() == ("correlation", 2.0, 1e-5, 1024.0, 1.0, None)
    assert CorrelationJobTask(robust_noise=1).with_party_bounds([0.6, 0.8]).public() == (
        "correlation", 1.0, 1e-5, 4096.0, 1.0, (0.6, 0.8), ("robust_noise", 1))
    with pytest.raises(ValueError, match="^gamma must be a finite number >= 1, got 0.5$"):
        CorrelationJobTask(gamma=0.5)
    assert CorrelationParams.options() == {"epsilon": "epsilon", "delta": "delta", "gamma": "gamma",
                                           "row_norm_bound": "row_norm_bound", "robust_noise": "robust_noise",
                                           "verify_sharing": "verify_sharing", "verify_inputs": "verify_inputs"}


def test_a_seeded_job_equals_the_estimator_bit_for_bit(tmp_path):
    X = _data(n=300, seed=2)
    spec = load_job(write_party_csvs(X, str(tmp_path), col_counts=[2, 2], min_intersection=1))
    task = CorrelationJobTask(CorrelationParams(epsilon=5.0, gamma=1024.0), seed=7, insecure_reproducible=True)
    recs = run_job(spec, task, backend="plain")
    local = SQMCorrelation(epsilon=5.0, gamma=1024.0, n_parties=2, backend="plain", seed=7).fit(X)
    assert [int(v) for v in recs[0]["result"]["raw"]] == [int(v) for v in local.raw_]
    assert np.array_equal(recs[0]["result"]["correlation"], local.correlation_)


@pytest.mark.slow
def test_the_command_runs_the_files_task_through_real_processes(tmp_path, capsys):
    X = _data(n=400, seed=3)
    job = write_party_csvs(X, str(tmp_path), col_counts=[2, 2], min_intersection=1,
                           task={"statistic": "correlation", "epsilon": 50, "gamma": 4096})
    out = tmp_path / "out.json"
    assert main(["correlation", "--job", job, "--json", str(out)]) == 0
    assert "task (from the job file" in capsys.readouterr().out
    r = json.loads(out.read_text())
    assert r["privacy"][0]["epsilon_server"] <= 50 + 1e-9 and r["privacy"][0]["gamma"] == 4096
    corr = np.array(r["released"]["correlation"])
    assert corr.shape == (4, 4) and np.abs(corr - np.corrcoef(X.T)).max() <= 0.1
