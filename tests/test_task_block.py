"""The job file declares the job (issue 26, part 3): a "task" block names the statistic and its parameters; every
job command runs it through real processes, a command of another statistic is refused, and an option given on
the command line may only repeat the file (a difference is refused before anything connects)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sqm.cli.command import main
from sqm.framework.spec import load_job, write_party_csvs


def _job(tmp_path, task, label=False):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 5)) * 0.2
    if label:
        X[:, 4] = (X[:, 0] + X[:, 1] > 0).astype(float)
    return write_party_csvs(X, str(tmp_path), col_counts=[2, 3], min_intersection=1, task=task)


def test_the_block_is_read_and_checked(tmp_path):
    spec = load_job(_job(tmp_path, {"statistic": "pca", "components": 1, "epsilon": 1}))
    assert spec.task == {"statistic": "pca", "components": 1, "epsilon": 1}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(Path(spec.path).read_text()), "task": {"components": 1}}))
    with pytest.raises(ValueError, match="'task' must be an object naming its \"statistic\""):
        load_job(str(bad))


@pytest.mark.parametrize("command, task, extra, label", [
    ("pca", {"statistic": "pca", "components": 1, "epsilon": 2, "gamma": 1024}, ["--progress-timeout", "7"], False),
    ("logreg", {"statistic": "logreg", "epsilon": 2, "gamma": 1024, "label_column": "x4"}, [], True),
    ("linreg", {"statistic": "linreg", "epsilon": 2, "gamma": 1024, "alpha": 0.5, "label_column": "x4",
                "label_range": [-1, 1]}, [], True),
])
def test_every_job_command_runs_the_files_task_through_real_processes(tmp_path, capsys, command, task, extra, label):
    job = _job(tmp_path, task, label)
    out = tmp_path / "out.json"
    assert main([command, "--job", job, "--json", str(out), *extra]) == 0
    printed = capsys.readouterr().out
    assert f"task (from the job file {job}): sqm {command}" in printed and "epsilon 2" in printed
    r = json.loads(out.read_text())
    assert r["privacy"][0]["epsilon_server"] <= 2.0 + 1e-9 and r["privacy"][0]["gamma"] == 1024


def test_another_statistic_and_differing_options_are_refused_before_connecting(tmp_path, capsys):
    job = _job(tmp_path, {"statistic": "pca", "components": 1, "epsilon": 1})
    assert main(["logreg", "--job", job, "--label-column", "x4"]) == 2
    assert "declares the task 'pca': run it with sqm pca --job, not sqm logreg" in capsys.readouterr().err
    assert main(["pca", "--job", job, "--epsilon", "2"]) == 2
    assert "--epsilon 2.0 differs from the task in job file" in capsys.readouterr().err
    job2 = _job(tmp_path / "b", {"statistic": "pca", "components": 1, "epsilon": 1, "learning_rate": 0.1})
    assert main(["pca", "--job", job2]) == 2
    assert "the task block's ['learning_rate'] are not parameters of sqm pca --job" in capsys.readouterr().err


def test_repeating_the_file_is_allowed(tmp_path, capsys):
    job = _job(tmp_path, {"statistic": "pca", "components": 1, "epsilon": 1, "gamma": 1024})
    assert main(["pca", "--job", job, "--epsilon", "1", "--components", "1", "--backend", "plain"]) == 0
