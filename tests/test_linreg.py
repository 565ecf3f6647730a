import itertools
import json
import math

import numpy as np
import pytest
from sklearn.base import clone

from sqm.apps.linreg import SQMLinearRegression
from sqm.apps.linreg.baselines import central_dp_linreg
from sqm.apps.linreg.statistic import MEAN_NOTE, JointGram, joint_bounds, joint_matrix, solve_ridge
from sqm.mechanism.sensitivity import l1_from_l2


def _diabetes(n=None):
    from sqm.apps.linreg.experiment import regression_data

    X, y, _ = regression_data("diabetes")
    return (X, y) if n is None else (X[:n], y[:n])


def _check_rows(Z_real, sens, gamma):
    """Every rounding outcome (floor or ceil per entry) of every row: ||z_hat z_hat^T||_F = ||z_hat||^2 and
    ||z_hat z_hat^T||_1 = ||z_hat||_1^2 within the bound; returns the largest ||z_hat||^2 seen."""
    lo, hi = np.floor(gamma * Z_real), np.ceil(gamma * Z_real)
    top = 0.0
    for pick in itertools.product([False, True], repeat=Z_real.shape[1]):
        zh = np.where(np.array(pick), hi, lo)
        l2 = np.einsum("ij,ij->i", zh, zh)
        assert l2.max() <= sens.l2 + 1e-9
        assert (np.abs(zh).sum(1) ** 2).max() <= sens.l1 + 1e-9
        top = max(top, float(l2.max()))
    return top


@pytest.mark.parametrize("gamma", [2.0, 3.0, 5.5])
def test_joint_gram_sensitivity_exhaustive_small_grid(gamma):
    """Every row on a grid of step 1/(2 gamma) (half-integers after scaling: the worst rounding) with
    ||x|| <= c_x per party block, |y| <= c_y, and every rounding outcome: the change never exceeds the bound."""
    counts = [2, 3]  # client 1: x0 x1; client 2: x2, 1, y
    cx, cy = 1.0, 0.75
    bounds = joint_bounds(counts, cx, cy, True)
    sens = JointGram(5).sensitivity(gamma, bounds)
    assert sens.l1 == l1_from_l2(sens.l2, 25)
    (g1, b1), (g2, b2) = [(g, b) for g, b in zip(bounds.groups, bounds.bounds, strict=False)][:2]
    step = 1 / (2 * gamma)
    grid = np.arange(-math.ceil(cx / step), math.ceil(cx / step) + 1) * step
    rows = []
    for x0, x1 in itertools.product(grid, grid):
        if math.hypot(x0, x1) > b1:
            continue
        for x2 in grid[np.abs(grid) <= b2]:
            for y in grid[np.abs(grid) <= cy]:
                rows.append([x0, x1, x2, 1.0, y])
    assert len(rows) > 100
    assert _check_rows(np.array(rows), sens, gamma) > 0.6 * sens.l2  # and the bound is nearly attained


def test_joint_gram_sensitivity_random_neighbours_through_the_client_path():
    """Random datasets and neighbours D, D + {x} (x beyond the bounds, clipped by its parties' column groups, then
    rounded with the clients' own stochastic rounding): the quantized Gram changes by at most the bound."""
    from sqm.mechanism.client import client_input

    rng = np.random.default_rng(0)
    gamma, counts = 64.0, [3, 4]  # client 2: x3 x4, 1, y
    bounds = joint_bounds(counts, 1.0, 2.0, True)
    sens = JointGram(7).sensitivity(gamma, bounds)
    for trial in range(200):
        D = joint_matrix(rng.normal(size=(20, 5)) * 0.2, rng.normal(size=20), True)
        x = joint_matrix(rng.normal(size=(1, 5)) * rng.choice([0.1, 1, 10]), rng.normal(size=1) * 5, True)
        if trial % 10 == 0:  # at the bounds: entries just above half-integers after scaling
            x = np.array([[1.5 / gamma] * 5 + [1.0, 2.0]])
        grams = []
        for data in (D, np.vstack([D, x])):
            parts = []
            for p, (a, b) in enumerate([(0, 3), (3, 7)]):
                r = np.random.default_rng(100 * trial + p)  # the same coins for the shared rows
                xh, _, _ = client_input(data[:, a:b], bounds.own(counts, p), gamma, 0.0, 1, r)
                parts.append(xh)
            Q = np.hstack(parts).astype(object)
            grams.append(Q.T.dot(Q))
        diff = np.array(grams[1] - grams[0], dtype=np.float64)
        assert np.linalg.norm(diff) <= sens.l2 and np.abs(diff).sum() <= sens.l1


def test_label_is_its_own_group_not_clipped_with_features():
    """Breast cancer, label (0/1) in client 2's block: clipped with the block (party bounds), most rows' labels
    shrink; as its own group (|y| <= 1), no label changes, and the joint sensitivity is below the block's."""
    from sklearn.datasets import load_breast_cancer

    from sqm.data.datasets import scale_rows
    from sqm.mechanism.release import SQM
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.vertical import ColumnBounds, VerticalData

    raw = load_breast_cancer()
    X, y = scale_rows(raw.data, 1.0), raw.target.astype(float)
    data = VerticalData([X[:, :15], np.c_[X[:, 15:], y]])
    block, counts = data.clip(1.0)
    assert counts[1] > 300  # the label clipped with its party's features (362 of 569 in the try)
    assert np.sum(block.blocks[1][:, -1] != y) > 300  # labels 1 scaled down with their rows
    cb = ColumnBounds.parties(data.col_counts, 1.0, separate={30: 1.0})
    own, own_counts = data.clip(column_bounds=cb)
    assert np.array_equal(own.blocks[1][:, -1], y)  # every label kept exactly
    assert np.linalg.norm(own.blocks[1][:, :-1], axis=1).max() <= cb.bounds[1]
    # and through SQM: the clients' clip counts, with the label's own bound in the sensitivity
    res = SQM(covariance(31), 1024.0, mu=1.0, column_bounds=cb, seed=0).run(data)
    assert res.clipped == own_counts
    joint = SQM(covariance(31), 1024.0, mu=1.0, row_norm_bound=math.sqrt(2.0))
    assert SQM(covariance(31), 1024.0, mu=1.0, column_bounds=cb).sensitivity_for(data).l2 < \
        1.01 * joint.sensitivity_for(data).l2


def test_solve_ridge_matches_sklearn_without_noise():
    from sklearn.linear_model import Ridge

    X, y = _diabetes()
    Z = joint_matrix(X, y, True)
    coef, b = solve_ridge(Z.T @ Z, 0.1)
    ref = Ridge(alpha=0.1).fit(X, y)
    assert np.allclose(coef, ref.coef_, atol=1e-8) and abs(b - ref.intercept_) < 1e-8
    # an indefinite noisy matrix: the eigenvalue floor keeps the system solvable and finite
    coef, b = solve_ridge(Z.T @ Z - 10 * np.eye(Z.shape[1]), 0.0, noise_std=5.0)
    assert np.all(np.isfinite(coef))


def test_estimator_clone_and_r2_close_to_nonprivate_at_large_epsilon():
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import train_test_split

    X, y = _diabetes()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)
    est = SQMLinearRegression(alpha=0.1, epsilon=1e3, gamma=2.0 ** 16, n_parties=3, backend="plain", seed=1)
    c = clone(est)
    assert c.get_params() == est.get_params()
    m = est.fit(Xtr, ytr)
    ref = Ridge(alpha=0.1).fit(Xtr, ytr).score(Xte, yte)
    assert abs(m.score(Xte, yte) - ref) < 0.01  # at epsilon 1000 the noise costs < 0.01 of R^2 (seed 1)
    assert m.report_.epsilon_server <= 1e3 * (1 + 1e-9) and len(m.clipped_) == 3  # sub-rows clipped per party
    assert clone(m).get_params() == m.get_params() and not hasattr(clone(m), "coef_")
    # the central baseline at the same epsilon is also close
    cd = central_dp_linreg(Xtr, ytr, 0.1, 1e3, 1e-5, seed=2)
    r2 = 1 - np.sum((yte - Xte @ cd["coef"] - cd["intercept"]) ** 2) / np.sum((yte - yte.mean()) ** 2)
    assert abs(r2 - ref) < 0.01


def test_sklearn_estimator_checks():
    """check_estimator at a huge epsilon and large bounds (the checks' data are not scaled to ||x|| <= 1), in
    process.  Skipped: none; the estimator splits [X 1 y]'s columns among 2 clients, so 1-feature data works."""
    from sklearn.utils.estimator_checks import check_estimator

    est = SQMLinearRegression(alpha=1e-6, epsilon=1e6, gamma=2.0 ** 12, feature_bound=100.0, label_bound=100.0,
                              backend="plain", seed=0)
    check_estimator(est)


def test_bad_parameters_raise_in_fit():
    X, y = _diabetes(40)
    with pytest.raises(ValueError, match="alpha"):
        SQMLinearRegression(alpha=-1.0, backend="plain").fit(X, y)
    with pytest.raises(ValueError, match="n_parties"):
        SQMLinearRegression(n_parties=20, backend="plain").fit(X, y)
    with pytest.raises(ValueError, match="epsilon"):
        SQMLinearRegression(epsilon=0.0, backend="plain").fit(X, y)


def test_mpyc_equals_in_process_bit_for_bit():
    X, y = _diabetes(60)
    kw = dict(alpha=0.5, epsilon=2.0, gamma=1024.0, n_parties=2, seed=7)
    real = SQMLinearRegression(backend="mpyc", **kw).fit(X, y)
    sim = SQMLinearRegression(backend="plain", **kw).fit(X, y)
    assert real.backend_ == "mpyc" and list(real.raw_) == list(sim.raw_)
    assert np.array_equal(real.coef_, sim.coef_) and real.intercept_ == sim.intercept_


def test_cli_job_through_real_processes_equals_the_estimator(tmp_path, capsys):
    from sqm.cli.command import main
    from sqm.framework.spec import write_party_csvs

    X, y = _diabetes(50)
    X = X[:, :4]
    # client 2: x3 and the label x4
    job = write_party_csvs(np.c_[X, y], str(tmp_path), col_counts=[3, 2], min_intersection=1)
    out = tmp_path / "out.json"
    code = main(["linreg", "--job", job, "--seed", "5", "--insecure-reproducible", "--epsilon", "2", "--gamma",
                 "1024", "--alpha", "0.5", "--label-column", "x4", "--label-range", "-1", "1", "--json", str(out)])
    assert code == 0
    r = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert r["secure_mode"] is False and "ridge coefficients" in printed
    ref = SQMLinearRegression(alpha=0.5, epsilon=2.0, gamma=1024.0, n_parties=2, backend="plain", seed=5).fit(X, y)
    # the server prints the released model's R^2 interval and its shrinkage toward the mean, as the estimator's
    assert f"interval [{ref.r2_lower_:.3f}, {ref.r2_upper_:.3f}]" in printed
    assert f"toward the mean by {ref.shrinkage_:.2f}" in printed and (MEAN_NOTE in printed) == ref.mean_returned_
    assert r["released"]["shrinkage"] == ref.shrinkage_ and r["released"]["r2_upper"] == ref.r2_upper_
    assert np.array_equal(np.array([r["released"]["coef"][c] for c in r["columns"]]), ref.coef_)
    assert r["released"]["intercept"] == ref.intercept_
    assert r["privacy"][0]["epsilon_server"] == ref.report_.epsilon_server


def test_the_local_comparison_on_the_users_own_table(tmp_path, capsys):
    """sqm linreg --data FILE: the user's own table (a target column, an id column, features), compared as a
    data set is; a missing target column and options without --data are refused naming the fix."""
    import json

    from sqm.cli.command import main

    rng = np.random.default_rng(0)
    n = 200
    X = np.column_stack([rng.uniform(20, 80, n), rng.uniform(0, 5000, n)])
    y = 0.05 * X[:, 0] + 0.001 * X[:, 1] + rng.normal(0, 0.1, n)
    f = tmp_path / "t.csv"
    f.write_text("id,age,income,spend\n"
                 + "".join(f"{i},{a},{b},{c}\n" for i, (a, b, c) in enumerate(zip(*X.T, y, strict=False))))
    out = tmp_path / "o.json"
    assert main(["linreg", "--data", str(f), "--label-column", "spend", "--parties", "2", "--backend", "plain",
                 "--epsilon", "4", "--seed", "0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["columns"] == ["age", "income"] and doc["dataset"] == "t.csv" and doc["details"]["shape"] == [200, 2]
    nonpriv = doc["results"][2]
    assert nonpriv["method"] == "non-private (Ridge)" and nonpriv["r2"] > 0.5
    capsys.readouterr()
    assert main(["linreg", "--data", str(f), "--label-column", "nope", "--backend", "plain"]) == 2
    assert "has no column 'nope' (--label-column)" in capsys.readouterr().err
    assert main(["linreg", "--label-column", "spend", "--backend", "plain"]) == 2
    assert "give --data FILE" in capsys.readouterr().err
