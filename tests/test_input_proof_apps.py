"""Verifiable inputs (``verify_inputs``) in every application whose release is one SQM release: linear regression,
correlation and logistic regression's moments release.  Each exposes the flag (estimator, job task, command line);
a client bending one record is named through real processes and nothing is released; a job file's task block
carries the flag to every party; the sgd solver, whose rounds are not proven, refuses it."""
from __future__ import annotations

import numpy as np
import pytest

from sqm.errors import UsageError


def _data(rows: int = 40):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(rows, 4)) * 0.2
    return X, np.clip(X @ [1.0, -1.0, 0.5, 0.0] + 0.05 * rng.normal(size=rows), -1, 1)


def _linreg(verify: bool):
    from sqm.apps.linreg import SQMLinearRegression
    from sqm.apps.linreg.statistic import joint_matrix
    from sqm.mechanism.vertical import VerticalData

    X, y = _data()
    Z = joint_matrix(X, y, True)
    data = VerticalData([Z[:, :2], Z[:, 2:]])  # client 2: two features (a group of its own), 1 and y
    est = SQMLinearRegression(epsilon=4.0, gamma=1024.0, backend="mpyc", seed=3, verify_inputs=verify)
    return est.mechanism(data.col_counts), data


def _correlation(verify: bool):
    from sqm.apps.correlation.params import CorrelationParams
    from sqm.apps.correlation.statistic import correlation_release, with_constant
    from sqm.mechanism.vertical import VerticalData

    X, _ = _data()
    blocks = [X[:, :2], with_constant(X[:, 2:])]
    mech = correlation_release([2, 2], CorrelationParams(epsilon=4.0, gamma=1024.0, verify_inputs=verify),
                               backend="mpyc", seed=3)
    return mech, VerticalData(blocks)


def _logreg(verify: bool):
    from sqm.apps.logreg.estimator import moments_release
    from sqm.mechanism.vertical import VerticalData

    X, y = _data()
    mech, layout = moments_release([2, 2], 1, 1024.0, 4.0, 1e-5, backend="mpyc", seed=3, verify_inputs=verify)
    return mech, VerticalData([X[:, :2], layout.block(X[:, 2:], (y > 0).astype(np.float64))])


APPS = {"linreg": _linreg, "correlation": _correlation, "logreg moments": _logreg}


@pytest.mark.slow
@pytest.mark.parametrize("app", sorted(APPS))
def test_a_client_bending_one_record_is_named_in_every_application(app):
    """Client 2 puts all its energy on record 0 (every column at its bound: each value in range, the record's
    squared norm over its group's limit) and proves the clipped block: with the proofs every other party names it
    and the server receives nothing; the same programs without the flag release."""
    from bench.faults import DeviateRecord
    from sqm.mpc.net.launch import MPCError, run_parties

    mech, data = APPS[app](False)
    programs, _ = mech.programs(data)
    programs[2] = DeviateRecord(programs[2], "norm")
    assert run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)[0]["result"].raw is not None
    mech, data = APPS[app](True)
    assert mech.verify_inputs
    programs, _ = mech.programs(data)
    programs[2] = DeviateRecord(programs[2], "norm")
    with pytest.raises(MPCError) as err:
        run_parties(programs, timeout=60, connect_timeout=30, min_clients=2)
    assert "the input proof of client 2 failed" in str(err.value) and "client 1 failed" not in str(err.value)


@pytest.mark.slow
def test_a_linreg_job_file_carries_the_flag_to_every_party(tmp_path, capsys):
    """``"verify_inputs": true`` in the job file's task block: ``sqm linreg --job`` runs the proofs at every party
    (real processes) and releases; the privacy report says the inputs and the noise were verified and gives no
    client-observed epsilon (with 2 clients the one checking a client's noise knows both noise shares)."""
    import json

    from sqm.cli.command import main
    from sqm.framework.spec import write_party_csvs

    X, y = _data(60)
    task = {"statistic": "linreg", "epsilon": 4, "gamma": 1024, "label_column": "x4", "label_range": [-1, 1],
            "verify_inputs": True}
    job = write_party_csvs(np.column_stack([X, y]), str(tmp_path), col_counts=[2, 3], min_intersection=1, task=task)
    out = tmp_path / "out.json"
    assert main(["linreg", "--job", job, "--seed", "4", "--insecure-reproducible", "--json", str(out), "-q"]) == 0
    r = json.loads(out.read_text())
    notes = r["privacy"][0]["notes"]
    assert "verified inputs: every client proved" in notes and "verified noise" in notes
    assert r["privacy"][0]["epsilon_client"] is None and len(r["released"]["coef"]) == 4


@pytest.mark.parametrize("cmd", ["linreg", "correlation", "logreg", "pca"])
def test_every_single_release_command_has_the_option(cmd):
    from sqm.cli.command import build_parser

    args = build_parser().parse_args([cmd, "--verify-inputs"])
    assert args.verify_inputs is True


def test_the_sgd_solver_refuses_the_flag():
    from sqm.apps.logreg import SQMLogisticRegression

    X, y = _data()
    with pytest.raises(UsageError, match="verify_inputs applies to the moments solver's release"):
        SQMLogisticRegression(solver="sgd", verify_inputs=True, backend="plain").fit(X, (y > 0).astype(int))


@pytest.mark.parametrize("make", ["linreg", "correlation"])
def test_the_estimators_pass_the_flag_to_their_release(make):
    from sqm.apps.correlation import SQMCorrelation
    from sqm.apps.linreg import SQMLinearRegression

    est = SQMLinearRegression(verify_inputs=True) if make == "linreg" else SQMCorrelation(verify_inputs=True)
    assert est.params().verify_inputs is True and est.get_params()["verify_inputs"] is True
    if make == "linreg":
        assert est.mechanism([2, 3]).verify_inputs
