"""HDP-VFL (apps.hdp_vfl, apps.hdp_party): sensitivities, calibration, equivalence of the runs, bad input."""
import json
import math

import numpy as np
import pytest
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian
from scipy.stats import norm

from apps.hdp_party import ACTIVE, PASSIVE, HDPParty, PassiveParty, check_labels
from apps.hdp_vfl import HDPLogisticRegression, active_sensitivity, gaussian_sigma, load_split, passive_sensitivity
from mpc.launch import MPCError, run_parties


@pytest.fixture(scope="module")
def breast():
    Xtr, Xte, ytr, yte, _ = load_split("breast_cancer", test_size=0.2, seed=0)
    return Xtr, Xte, ytr, yte


# ----- Lemmas 3 and 4 -------------------------------------------------------------------------------------
def test_passive_sensitivity_lemma3_hand_computed():
    # e=2, T=4, eta=0.5, b=10, k=1, L=1: 4*4*4*0.25/10 + 8*4*0.5/10 + 4*2 = 1.6 + 1.6 + 8 = 11.2
    assert passive_sensitivity(2, 4, 0.5, 10, 1.0) == pytest.approx(math.sqrt(11.2), rel=1e-12)
    # e=T=b=eta=1, k=2: 4 + 16 + 16 = 36
    assert passive_sensitivity(1, 1, 1.0, 1, 2.0) == pytest.approx(6.0, rel=1e-12)


def test_active_sensitivity_lemma4_hand_computed():
    # logistic constants: beta_theta=0.25, beta_y=1.1, k_y=1, L=1; a = 0.25 k + 1.1
    # e=2, T=4, eta=0.5, b=10, k=1 (a=1.35): 0.25*4*4*0.25/10 + 8*1.35*0.25*4*0.5/10 + 4*1.35^2*2
    assert active_sensitivity(2, 4, 0.5, 10, 1.0) == pytest.approx(math.sqrt(0.1 + 0.54 + 14.58), rel=1e-12)
    # e=T=b=eta=1, k=2 (a=1.6): 0.25 + 8*1.6*0.25 + 4*1.6^2 = 0.25 + 3.2 + 10.24 = 13.69
    assert active_sensitivity(1, 1, 1.0, 1, 2.0) == pytest.approx(3.7, rel=1e-12)


def test_config_uses_lemmas_with_effective_batch_and_iterations():
    m = HDPLogisticRegression(epsilon=0.5, delta=0.01, epochs=3, batch_size=40, k=0.5, learning_rate=0.25)
    cfg = m.config(130, 2, 3)  # r = 130 // 40 = 3 batches of exactly 40, T = 9
    assert (cfg.batch_size, cfg.batches_per_epoch, cfg.iterations) == (40, 3, 9)
    c = math.sqrt(2 * math.log(1.25 / 0.01)) / 0.5
    assert cfg.sigma_passive == pytest.approx(c * passive_sensitivity(3, 9, 0.25, 40, 0.5), rel=1e-12)
    assert cfg.sigma_active == pytest.approx(c * active_sensitivity(3, 9, 0.25, 40, 0.5), rel=1e-12)
    big = m.config(30, 2, 3)  # batch above the data size: b = n, one batch per epoch
    assert (big.batch_size, big.iterations) == (30, 3)


# ----- Gaussian calibration -------------------------------------------------------------------------------
def _balle_wang_delta(sigma, eps):  # Balle & Wang 2018, Thm 8, sensitivity 1
    return norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)


def test_classic_calibration_is_the_papers_below_one_and_valid_above():
    assert gaussian_sigma(2.0, 0.5, 0.01, "classic") == pytest.approx(2.0 * math.sqrt(2 * math.log(125)) / 0.5)
    # at epsilon = 10 the classic formula (0.311) is below the exact minimum (0.350): lifted to it
    s = gaussian_sigma(1.0, 10.0, 0.01, "classic")
    assert s > math.sqrt(2 * math.log(125)) / 10
    assert _balle_wang_delta(s, 10.0) <= 0.01 * (1 + 1e-6)
    assert gaussian_sigma(3.0, math.inf, 0.01, "classic") == 0.0


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 4.0, 10.0])
def test_analytic_calibration_is_tight(eps):
    s = gaussian_sigma(1.0, eps, 0.01, "analytic")
    assert _balle_wang_delta(s, eps) == pytest.approx(0.01, rel=1e-3)  # exactly (eps, delta): no slack
    assert get_epsilon_gaussian(s, 0.01) == pytest.approx(eps, rel=1e-3)
    assert gaussian_sigma(2.5, eps, 0.01, "analytic") == pytest.approx(2.5 * s, rel=1e-12)


def test_released_intermediate_results_carry_the_stated_noise():
    m = HDPLogisticRegression(epsilon=1.0, delta=0.01)
    cfg = m.config(4000, 3, 2)
    X = np.random.default_rng(1).normal(size=(4000, 2))
    party = PassiveParty(cfg, X, seed=3)  # weights start at 0: Sec[IR_B] is pure noise
    sec = party.intermediate(np.arange(4000))
    # std of 4000 normal samples: relative standard error 1/sqrt(2*3999) ~ 1.1 %; 5 % is > 4 standard errors
    assert np.std(sec) == pytest.approx(cfg.sigma_passive, rel=0.05)
    assert abs(np.mean(sec)) < 4 * cfg.sigma_passive / math.sqrt(4000)


# ----- training ---------------------------------------------------------------------------------------------
def test_huge_epsilon_matches_nonprivate_vfl(breast):
    Xtr, Xte, ytr, yte = breast
    ref = HDPLogisticRegression(epsilon=math.inf, seed=5).fit(Xtr, ytr)
    big = HDPLogisticRegression(epsilon=1e12, seed=5).fit(Xtr, ytr)
    assert ref.config_.sigma_active == 0 and 0 < big.config_.sigma_active < 1e-5
    gap = np.max(np.abs(big.coef_ - ref.coef_))
    assert 0 < gap < 1e-5  # the noise is there, and small as its sigma
    assert np.array_equal(big.predict(Xte), ref.predict(Xte))


def test_epsilon_one_reaches_papers_accuracy_on_breast_cancer(breast):
    Xtr, Xte, ytr, yte = breast
    accs = [HDPLogisticRegression(epsilon=1.0, delta=0.01, seed=s).fit(Xtr, ytr).score(Xte, yte) for s in range(8)]
    nonpriv = HDPLogisticRegression(epsilon=math.inf, seed=0).fit(Xtr, ytr).score(Xte, yte)
    assert np.mean(accs) >= 0.85  # the paper reports about 0.9 at epsilon = 1
    assert nonpriv >= 0.9
    # a tiny budget destroys the model: noise matters
    tiny = [HDPLogisticRegression(epsilon=0.001, seed=s).fit(Xtr, ytr).score(Xte, yte) for s in range(8)]
    assert np.mean(tiny) < np.mean(accs) - 0.05


def test_rows_and_intercept_respect_the_norm_bounds(breast):
    Xtr, Xte, ytr, _ = breast
    for u in (0.0, 0.5):
        m = HDPLogisticRegression(epsilon=1.0, intercept=u, seed=3, active_features=10).fit(Xtr, ytr)
        cA, cB = m.config_.row_bounds()
        assert u ** 2 + cA ** 2 + cB ** 2 == pytest.approx(1.0)
        rows = m._rows(Xte)
        assert np.max(np.linalg.norm(rows[:, :10], axis=1)) <= cA * (1 + 1e-12)
        assert np.max(np.linalg.norm(rows[:, 10:], axis=1)) <= cB * (1 + 1e-12)
        assert m.weights_active_.shape == (10 + (u > 0),) and m.coef_.shape == (30,)
        assert m.intercept_ == pytest.approx(u * m.weights_active_[0] if u else 0.0)
        full = np.hstack([np.full((len(Xte), 1), u), rows]) if u else rows
        w = np.concatenate([m.weights_active_, m.weights_passive_])
        assert np.allclose(m.decision_function(Xte), full @ w)


def test_weights_respect_bound_and_seeds(breast):
    Xtr, _, ytr, _ = breast
    m = HDPLogisticRegression(epsilon=0.1, k=0.3, seed=1).fit(Xtr, ytr)
    assert np.linalg.norm(m.coef_active_) <= 0.3 + 1e-12 and np.linalg.norm(m.coef_passive_) <= 0.3 + 1e-12
    again = HDPLogisticRegression(epsilon=0.1, k=0.3, seed=1).fit(Xtr, ytr)
    assert np.array_equal(m.coef_, again.coef_)
    a = HDPLogisticRegression(epsilon=0.1, k=0.3).fit(Xtr, ytr)  # OS entropy
    b = HDPLogisticRegression(epsilon=0.1, k=0.3).fit(Xtr, ytr)
    assert not np.array_equal(a.coef_, b.coef_)


def test_each_party_draws_from_its_own_cryptographic_stream():
    from apps.hdp_party import ActiveParty
    from mpc.randomness import is_secure
    from sqm.rng import spawn_seeds

    cfg = HDPLogisticRegression(epsilon=1.0).config(50, 3, 2)
    rng = np.random.default_rng(0)
    XA, XB, y = rng.normal(size=(50, 3)), rng.normal(size=(50, 2)), rng.integers(0, 2, 50)
    s_a, s_b = spawn_seeds(4, 2)
    parties = [ActiveParty(cfg, XA, y, s_a), ActiveParty(cfg, XA, y, None), PassiveParty(cfg, XB, s_b),
               PassiveParty(cfg, XB, None)]
    assert all(is_secure(p.rng) for p in parties)
    idx = np.arange(50)
    # the passive party's noise is a function of its own seed only: the same with another active party
    assert np.array_equal(PassiveParty(cfg, XB, s_b).intermediate(idx), parties[2].intermediate(idx))
    assert not np.array_equal(parties[3].intermediate(idx), PassiveParty(cfg, XB, None).intermediate(idx))
    assert not np.array_equal(parties[0].permutation(), parties[1].permutation())


def test_two_process_run_equals_in_process_run(breast):
    Xtr, Xte, ytr, _ = breast
    Xs, ys = Xtr[:300], ytr[:300]
    kw = dict(epsilon=1.0, delta=0.01, epochs=3, batch_size=100, seed=11)  # 3 batches x 3 epochs
    plain = HDPLogisticRegression(backend="plain", **kw).fit(Xs, ys)
    procs = HDPLogisticRegression(backend="mpyc", **kw).fit(Xs, ys)
    assert np.array_equal(plain.coef_active_, procs.coef_active_)
    assert np.array_equal(plain.coef_passive_, procs.coef_passive_)
    assert procs.bytes_sent_[0] > 0 and procs.bytes_sent_[1] > 0
    assert not np.array_equal(plain.coef_, HDPLogisticRegression(**{**kw, "seed": 12}).fit(Xs, ys).coef_)


# ----- bad input ------------------------------------------------------------------------------------------
def test_labels_zero_one_are_converted(breast):
    Xtr, _, ytr, _ = breast
    a = HDPLogisticRegression(epsilon=1.0, seed=2).fit(Xtr, ytr)
    b = HDPLogisticRegression(epsilon=1.0, seed=2).fit(Xtr, 2 * ytr - 1)
    assert np.array_equal(a.coef_, b.coef_)
    assert check_labels([0, 1, 1]).tolist() == [-1.0, 1.0, 1.0]


@pytest.mark.parametrize("labels", [[1, 2, 1, 2], [-1, 0, 1, 1], [0.5, 1, 0, 1], ["a", "b", "a", "b"]])
def test_bad_labels_refused(labels):
    X = np.random.default_rng(0).normal(size=(4, 4))
    with pytest.raises(ValueError, match="labels"):
        HDPLogisticRegression().fit(X, labels)


@pytest.mark.parametrize("kw, msg", [(dict(k=0), "k must"), (dict(k=-1.0), "k must"), (dict(k=math.inf), "k must"),
                                     (dict(epsilon=0), "epsilon"), (dict(delta=1.0), "delta"),
                                     (dict(epochs=0), "epochs"), (dict(batch_size=0), "batch_size"),
                                     (dict(l2=-1.0), "l2"), (dict(learning_rate=100.0), "exceeds"),
                                     (dict(calibration="rdp"), "calibration"), (dict(backend="gpu"), "backend"),
                                     (dict(intercept=1.0), "intercept"), (dict(intercept=-0.1), "intercept")])
def test_bad_parameters_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        HDPLogisticRegression(**kw)


def test_bad_data_refused():
    rng = np.random.default_rng(0)
    XA, XB, y = rng.normal(size=(20, 3)), rng.normal(size=(20, 2)), rng.integers(0, 2, 20)
    m = HDPLogisticRegression(seed=0)
    with pytest.raises(ValueError, match="active party holds 20 records and the passive party 19"):
        m.fit_parties(XA, y, XB[:19])
    with pytest.raises(ValueError, match="labels"):
        m.fit_parties(XA, y[:19], XB)
    bad = XB.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.fit_parties(XA, y, bad)
    with pytest.raises(ValueError, match="2-D"):
        m.fit_parties(XA[:, 0], y, XB)


def test_two_process_refuses_misaligned_passive_party():
    rng = np.random.default_rng(0)
    XA, XB, y = rng.normal(size=(20, 3)), rng.normal(size=(18, 2)), rng.integers(0, 2, 20)
    cfg = HDPLogisticRegression(seed=0).config(20, 3, 2)
    with pytest.raises(MPCError, match="passive party 18: records are not aligned"):
        run_parties([HDPParty(ACTIVE, cfg, XA, y, 1), HDPParty(PASSIVE, cfg, XB, None, 2)])


def test_cli_writes_json(tmp_path, capsys):
    import argparse

    from apps.hdp_vfl import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    out = tmp_path / "hdp.json"
    args = parser.parse_args(["hdp-vfl", "--backend", "plain", "--seed", "0", "--no-sqm", "--quiet",
                              "--json", str(out)])
    assert args.func(args) == 0
    rep = json.loads(out.read_text())
    assert 0.5 < rep["hdp"]["accuracy"] <= 1 and rep["sqm"]["accuracy"] is None
    assert {"single_party", "centralized", "nonprivate_vfl", "majority_class"} <= set(rep)
    assert rep["secure_mode"] is False  # a seeded run is an experiment, and says so
    text = capsys.readouterr().out
    assert "different guarantee" in text and "HDP-VFL" in text and "EXPERIMENT" in text
    args = parser.parse_args(["hdp-vfl", "--backend", "plain", "--no-sqm", "--quiet", "--epochs", "1",
                              "--json", str(out)])
    assert args.func(args) == 0
    assert json.loads(out.read_text())["secure_mode"] is True
    assert "EXPERIMENT" not in capsys.readouterr().out


def test_bench_reduced_run_structure_and_trend():
    from bench.hdp_vfl import run

    rep = run(["breast_cancer"], [0.001, 10.0], repeats=2, fig2=True, verify_mpyc=False, progress=False)
    rows = rep["figure1"]["breast_cancer"]["rows"]
    assert [r["epsilon"] for r in rows] == [0.001, 10.0]
    assert rows[1]["accuracy_mean"] > rows[0]["accuracy_mean"]  # more budget, better model (fixed seeds)
    # classic sigma at 0.001 is 3107 Delta, the lifted one at 10 is 0.350 Delta (exact minimum)
    assert rows[0]["sigma_active"] / rows[1]["sigma_active"] == pytest.approx(3107.51146 / 0.3500967, rel=1e-4)
    assert [(c["epochs"], c["k"]) for c in rep["figure2"]] == [(5, 1.0), (10, 1.0), (15, 1.0), (10, 0.1), (10, 0.5)]
    # Figure 2's e=10, k=1 curve is Figure 1's breast-cancer curve: same seeds, same models
    assert rep["figure2"][1]["rows"][0]["accuracies"] == rows[0]["accuracies"]


def test_timeout_option_bounds_the_two_process_job():
    from apps.hdp_vfl import HDPLogisticRegression
    from mpc.launch import MPCError

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)) / 4
    y = (rng.random(40) < 0.5).astype(int)
    with pytest.raises(ValueError, match="timeout"):
        HDPLogisticRegression(timeout=0)
    with pytest.raises(MPCError) as err:  # the job cannot finish in 1 ms: both parties exit TIMEOUT
        HDPLogisticRegression(epochs=2, batch_size=20, backend="mpyc", timeout=0.001).fit_parties(X[:, :2], y, X[:, 2:])
    assert err.value.exit_code == 5, str(err.value)
