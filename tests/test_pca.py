"""SQM-PCA and its baselines: the huge-epsilon limit is exact PCA, calibration, scikit-learn conventions.

Real party processes: PCA's one bit-for-bit test is in tests/test_jobfile.py (the job-file parties against
SQMPCA's in-process run); SQM.run through processes is tests/test_mpyc_backend.py's."""
import math

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD

from sqm.data.datasets import load_dataset, scale_rows
from sqm.apps.pca import (SQMPCA, central_dp_pca, check_components, local_dp_pca, nonprivate_pca, optimal_utility,
                      pca_utility, symmetric_gaussian, top_eigen, utility_ratio)
from sqm.mechanism.accounting import calibrate_mu
from sqm.mechanism.calibration import gaussian_sigma
from sqm.mechanism.vertical import VerticalData


def spectrum_data(m=300, n=8, seed=0, top=0.5):
    """Rows with a clear eigen-gap, every row norm <= top."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, n)) * np.linspace(3.0, 0.3, n)
    return scale_rows(X, top)


def test_huge_epsilon_matches_uncentered_pca():
    X = spectrum_data(300, 8, seed=2, top=0.5)  # sub-row norms <= 0.5 < c_j = sqrt(1/2): no clipping
    m = SQMPCA(n_components=3, epsilon=1e12, delta=1e-5, gamma=2.0 ** 24, backend="plain", seed=3)
    m.fit(VerticalData.split(X, 2))
    assert m.clipped_ == [0, 0]
    svd = TruncatedSVD(n_components=3, algorithm="arpack", random_state=0).fit(X)  # no centering
    for ours, ref in zip(m.components_, svd.components_, strict=False):
        assert abs(float(ours @ ref)) > 1 - 1e-10
    # and the eigenvalues of X^T X / m
    ref_ev = np.linalg.eigvalsh(X.T @ X)[::-1][:3] / X.shape[0]
    np.testing.assert_allclose(m.explained_variance_, ref_ev, rtol=1e-6)
    np.testing.assert_allclose(m.transform(X), X @ m.components_.T)
    assert m.components_.shape == (3, 8)


def test_utility_ratio_at_most_one_and_ordering():
    X = scale_rows(load_dataset("digits").X, 1.0)
    data = VerticalData.split(X, 3)
    k = 5
    opt = optimal_utility(X, k)
    assert pca_utility(X, nonprivate_pca(X, k)) == pytest.approx(opt, rel=1e-12)
    sqm_r, cen_r, loc_r = [], [], []
    for seed in range(3):
        sqm_r.append(SQMPCA(k, 1.0, 1e-5, 4096.0, backend="plain", seed=seed).fit(data).utility_ratio(X))
        cen_r.append(utility_ratio(X, central_dp_pca(X, k, 1.0, 1e-5, seed=seed).components))
        loc_r.append(utility_ratio(X, local_dp_pca(data, k, 1.0, 1e-5, seed=seed).components))
    for r in sqm_r + cen_r + loc_r:
        assert 0 < r <= 1 + 1e-12
    # fixed seeds; at epsilon 1 on digits the local baseline is far below (measured ~0.1 vs ~0.94)
    assert min(sqm_r) > 0.85 and min(cen_r) > 0.85 and max(loc_r) < 0.5


def test_baselines_use_the_one_calibration_policy():
    """Central and local DP baselines: sigma from sqm.mechanism.calibration.gaussian_sigma (the exact single-release
    optimum), so a hair less noise would miss (epsilon, delta); PCA's own RDP calibration is gone."""
    from sqm.mechanism.calibration import gaussian_delta

    X = spectrum_data(40, 6, seed=4)
    for eps, delta, c in [(0.5, 1e-5, 1.0), (1.0, 1e-5, 0.7), (8.0, 1e-6, 2.0)]:
        cen = central_dp_pca(X, 2, eps, delta, c, seed=0)
        loc = local_dp_pca(VerticalData.split(X, 2), 2, eps, delta, c, seed=0)
        assert cen.sigma == gaussian_sigma(c * c, eps, delta) and loc.sigma == gaussian_sigma(c, eps, delta)
        for r, l2 in ((cen, c * c), (loc, c)):
            assert gaussian_delta(r.sigma, l2, eps) <= delta < gaussian_delta(r.sigma * (1 - 1e-6), l2, eps)
            assert r.epsilon <= eps * (1 + 1e-9) and r.epsilon == pytest.approx(eps, rel=1e-6)


def test_skellam_noise_at_large_scale_is_close_to_the_optimal_gaussian():
    # Skellam Sk(mu) has variance 2 mu; at large sensitivity SQM's RDP accounting tends to the Gaussian's RDP
    # (sigma^2 = 2 mu), which the exact single-release optimum beats by a few percent (8.4% at epsilon 1)
    l2 = 2.0 ** 20
    mu = calibrate_mu(1.0, 1e-5, l2 * l2, l2).mu
    assert 1.0 < math.sqrt(2 * mu) / gaussian_sigma(l2, 1.0, 1e-5) < 1.1


def test_symmetric_gaussian_variances():
    E = symmetric_gaussian(400, 2.0, seed=0)
    assert np.array_equal(E, E.T)
    diag = np.diag(E)
    off = E[np.triu_indices(400, 1)]
    # 400 diagonal and ~80k off-diagonal samples: 5 standard errors
    assert np.var(diag) == pytest.approx(4.0, abs=5 * 4.0 * math.sqrt(2 / 400))
    assert np.var(off) == pytest.approx(2.0, abs=5 * 2.0 * math.sqrt(2 / off.size))


def test_top_eigen_is_sorted_orthonormal():
    A = np.random.default_rng(0).normal(size=(10, 10))
    w, V = top_eigen(A, 4)
    assert np.all(np.diff(w) <= 0)
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(w, np.linalg.eigvalsh((A + A.T) / 2)[::-1][:4], rtol=1e-10)


@pytest.mark.parametrize("k,msg", [(0, ">= 1"), (-2, ">= 1"), (7, "k <= columns"), (2.5, "integer")])
def test_bad_component_counts_refused_before_running(k, msg):
    data = VerticalData.split(spectrum_data(20, 6), 2)
    with pytest.raises(ValueError, match=msg):
        SQMPCA(k, 1.0, backend="mpyc").fit(data)  # refused before any party process starts
    with pytest.raises(ValueError, match=msg):
        central_dp_pca(data.to_matrix(), k, 1.0, 1e-5)
    with pytest.raises(ValueError, match=msg):
        local_dp_pca(data, k, 1.0, 1e-5)


def test_bad_input():
    X = spectrum_data(20, 6)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SQMPCA(2, 1.0, backend="plain").fit(bad)
    with pytest.raises(ValueError, match="NaN"):
        SQMPCA(2, 1.0, backend="plain").fit(VerticalData([bad[:, :3], bad[:, 3:]]))
    with pytest.raises(ValueError, match="NaN"):
        central_dp_pca(bad, 2, 1.0, 1e-5)
    with pytest.raises(ValueError, match="not fitted"):
        SQMPCA(2, 1.0).transform(X)
    with pytest.raises(ValueError, match="epsilon"):
        central_dp_pca(X, 2, 0.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        central_dp_pca(X, 2, 1.0, 1.5)
    assert check_components(np.int64(3), 6) == 3


def test_cli_plain_json(tmp_path):
    import json

    from sqm.cli.command import main

    out = tmp_path / "pca.json"
    assert main(["pca", "--dataset", "iris", "--parties", "2", "--components", "2", "--backend", "plain",
                 "--runs", "2", "--seed", "1", "--quiet", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    rows = r["results"]  # SQM, central, local, non-private (sqm.cli.output)
    assert len(rows) == 4 and all(0 < m["utility_ratio"] <= 1 + 1e-12 and m["utility"] > 0 for m in rows)
    assert rows[3]["utility_ratio"] == 1.0
    sqm = r["privacy"][0]
    assert sqm["epsilon_server"] <= 1 + 1e-9 and sqm["epsilon_client"] > sqm["epsilon_server"]
    p = r["parameters"]
    assert p["delta"] == 1e-5 and p["gamma"] == 4096 and p["runs"] == 2
    assert len(r["details"]["utilities"][rows[0]["method"]]) == 2
    assert main(["pca", "--dataset", "iris", "--components", "5", "--backend", "plain", "--quiet"]) == 2  # k > 4


def test_bench_sweep_and_target_check():
    from bench.pca_utility import check_target, sweep

    X = scale_rows(load_dataset("iris").X, 1.0)
    r = sweep("iris", X, 2, [1.0], [64.0, 4096.0], [1, 2, 3], runs=2, seed=0, progress=False)
    assert r["nonprivate"] == pytest.approx(r["optimum"], rel=1e-12)
    for vals in [r["central"]["1.0"], r["local"]["1.0"], *r["sqm"]["1.0"].values()]:
        assert all(0 < v <= o * (1 + 1e-12) for v, o in zip(vals, r["optimum"], strict=False))
    # the SQM / central ratio's standard error, by the delta method from the two samples' spreads
    g = "4096.0"
    R = np.array(r["sqm"]["1.0"][g]) / np.array(r["central"]["1.0"])
    want = R * np.sqrt((np.array(r["sqm_std"]["1.0"][g]) / np.array(r["sqm"]["1.0"][g])) ** 2
                       + (np.array(r["central_std"]["1.0"]) / np.array(r["central"]["1.0"])) ** 2)  # runs - 1 = 1
    assert r["runs"] == 2 and r["sqm_over_central_se"]["1.0"][g] == pytest.approx(want.tolist(), rel=1e-12)
    from bench.pca_utility import ratio_se
    assert all(math.isnan(v) for v in ratio_se([1.0], [0.0], [1.0], [0.0], 1))
    # central DP on the rows as SQM's clients clip them: never more energy than the rows themselves
    assert 0 < r["party_clip_energy"] <= 1 and len(r["central_party_clip"]["1.0"]) == 3
    assert all(0 < v <= o * (1 + 1e-12) for v, o in zip(r["central_party_clip"]["1.0"], r["optimum"], strict=False))
    fake = {"ks": [1, 2], "central": {"1": [10.0, 20.0]}, "local": {"1": [1.0, 2.0]},
            "sqm": {"1": {"64": [5.0, 5.0], "1024": [9.95, 19.7], "4096": [10.0, 20.5]}}}
    t = check_target(fake)
    assert not t["holds"] and t["misses"] == [{"epsilon": 1.0, "gamma": 1024.0, "k": 2, "ratio": 19.7 / 20}]
    assert t["max_local_over_min_sqm_central"] == pytest.approx(0.4)  # vs the worst gamma (2^6) too


def test_local_comparison_records_secure_mode():
    """A seeded local run is a labelled experiment (secure_mode false); unseeded runs draw from OS entropy."""
    from sqm.apps.pca import compare

    X = spectrum_data(40, 6, seed=5)
    seeded = compare(X, 2, 2, 1.0, 1e-5, 1024.0, backend="plain", seed=1, progress=False)
    again = compare(X, 2, 2, 1.0, 1e-5, 1024.0, backend="plain", seed=1, progress=False)
    fresh = compare(X, 2, 2, 1.0, 1e-5, 1024.0, backend="plain", progress=False)
    assert seeded["secure_mode"] is False and fresh["secure_mode"] is True
    assert seeded["sqm"]["utilities"] == again["sqm"]["utilities"]  # reproducible: that is what the seed buys
    with pytest.raises(ValueError, match="at least two clients"):
        compare(X, 1, 2, 1.0, 1e-5, 1024.0, backend="mpyc", seed=1, progress=False)


# ----- scikit-learn conventions ------------------------------------------------------------------------------


def test_sklearn_clone_and_params_round_trip():
    from sklearn.base import clone

    m = SQMPCA(n_components=3, epsilon=2.0, gamma=1024.0, backend="plain", seed=7, party_bounds=[0.5, 0.5],
               n_parties=2)
    params = m.get_params()
    assert params["party_bounds"] == [0.5, 0.5] and params["n_parties"] == 2
    c = clone(m)
    assert c is not m and c.get_params() == params
    assert SQMPCA().set_params(**params).get_params() == params
    SQMPCA(n_components=-1, epsilon="bad")  # __init__ only stores: nothing is checked before fit
    with pytest.raises(ValueError, match="epsilon"):
        SQMPCA(n_components=1, epsilon=-1.0, backend="plain").fit(spectrum_data(20, 4))
    X = spectrum_data(30, 4, seed=8)
    fitted = clone(m).set_params(party_bounds=None).fit(X)
    assert not hasattr(c, "components_") and fitted.components_.shape == (3, 4)
    # a matrix is split among n_parties clients as VerticalData.split does: the same release bit for bit
    same = SQMPCA(3, 2.0, gamma=1024.0, backend="plain", seed=7).fit(VerticalData.split(X, 2))
    assert list(same.raw_) == list(fitted.raw_)


def test_sklearn_check_estimator():
    """All of scikit-learn's estimator checks pass on the in-process simulation with two clients (the
    plain backend: the checks fit ~75 times).  Skipped by scikit-learn itself: check_array_api_input
    (needs SCIPY_ARRAY_API).  The calibration of mu, a pure function of the public parameters, is memoized by
    the release itself (:data:`sqm.mechanism.accounting.calibrate_mu_cached`), which keeps the test fast."""
    from sklearn.utils.estimator_checks import check_estimator

    results = check_estimator(SQMPCA(n_components=1, backend="plain", seed=0, n_parties=2), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert not failed
    assert sum(r["status"] == "passed" for r in results) >= 40


def test_one_dataset_loader():
    """sqm.data.datasets.load_dataset is the one loader: one Dataset type for every set."""
    from sqm.data.datasets import Dataset

    d = load_dataset("breast_cancer")
    assert isinstance(d, Dataset) and d.X.shape == (569, 30) and d.X.dtype == np.float64
    assert len(d.feature_names) == 30 and d.feature_names[0] == "mean radius" and d.X_test is None
    assert [len(c) for c in d.party_columns] == [10, 20]  # the HDP-VFL paper's active / passive split
    Xtr, ytr, Xte, yte = d.train_test(0.25, seed=3)
    again = d.train_test(0.25, seed=3)
    assert Xtr.shape == (426, 30) and Xte.shape == (143, 30) and np.array_equal(Xtr, again[0])
    assert abs(ytr.mean() - yte.mean()) < 0.01  # stratified
    assert load_dataset("iris").party_columns is None
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        load_dataset("mnist")
