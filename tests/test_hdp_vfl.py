"""HDP-VFL (sqm.apps.hdp_vfl: party, privacy, estimator, cli): sensitivities, the passive party's residual clip,
calibration of the composed releases, the one party program (in process; one real-process run proves it equal),
scikit-learn conventions, refusals."""
import json
import math

import numpy as np
import pytest
from dp_accounting import ComposedDpEvent, GaussianDpEvent
from dp_accounting.pld import PLDAccountant

from sqm.apps.hdp_vfl.party import ACTIVE, PASSIVE, HDPConfig, HDPParty, PassiveParty, batches
from sqm.apps.hdp_vfl import HDPLogisticRegression, active_sensitivity, load_split, passive_sensitivity
from sqm.errors import EXIT_BAD_DATA, EXIT_REFUSED, EXIT_TIMEOUT
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError
from sqm.mechanism.calibration import gaussian_sigma


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


# ----- the passive party's residual clip: Lemma 3 holds for every received residual history ------------------
class UnclippedPassive(PassiveParty):
    residual_bound = math.inf  # Algorithm 1 as printed: the noisy Sec[IR_A] used as it arrives


def _ir_sequence(party_cls, cfg, X, perms, residuals) -> np.ndarray:
    """The passive party's noise-free IR_B sequence (sigma_passive = 0) for a FIXED history of received
    residuals: the real PassiveParty steps; neighbouring data sets are compared under the same history."""
    party, out, t = party_cls(cfg, X, seed=0), [], 0
    for perm in perms:
        for idx in batches(cfg, perm):
            out.append(party.intermediate(idx))
            party.update(idx, residuals[t])
            t += 1
    return np.concatenate(out)


def _worst_ratio(party_cls, trials: int = 150, seed: int = 0) -> float:
    """max over random small configurations, neighbouring passive data sets (one row replaced) and adversarial
    residual histories of ||IR_B(D) - IR_B(D')|| / Lemma 3's sensitivity."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(trials):
        b, r, e = int(rng.integers(2, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
        n, k, eta = b * r, float(rng.choice([0.3, 1.0, 2.0])), float(rng.choice([0.1, 0.5, 2.0]))
        cfg = HDPConfig(n_records=n, active_features=1, passive_features=2, batch_size=b, epochs=e, k=k, l2=0.001,
                        learning_rate=eta, sigma_active=0.0, sigma_passive=0.0)
        aligned = rng.random() < 0.5  # rows along one direction: the worst case for the weight gap
        X = 10 * (rng.normal(size=2) + 0.1 * rng.normal(size=(n, 2)) if aligned else rng.normal(size=(n, 2)))
        i = int(rng.integers(n))
        X2 = X.copy()
        X2[i] = -X[i] if rng.random() < 0.5 else 10 * rng.normal(size=2)  # rows are clipped to c_B by the party
        perms = [rng.permutation(n) for _ in range(e)]
        scale = float(rng.choice([1.0, 3.0, 30.0, 1e3]))
        residuals = []
        for perm in perms:
            for idx in batches(cfg, perm):
                if rng.random() < 0.5:  # noisy residuals as Sec[IR_A] brings them
                    residuals.append(rng.normal(0.0, scale, b))
                else:  # adversarial: a large residual on the changed record only
                    residuals.append(np.where(idx == i, scale * rng.choice([-1.0, 1.0]), 0.0))
        gap = np.linalg.norm(_ir_sequence(party_cls, cfg, X, perms, residuals)
                             - _ir_sequence(party_cls, cfg, X2, perms, residuals))
        worst = max(worst, gap / passive_sensitivity(e, cfg.iterations, eta, b, k))
    return worst


def test_clipped_residual_keeps_lemma3_and_unclipped_exceeds_it():
    clipped = _worst_ratio(PassiveParty)
    assert 0.3 < clipped <= 1.0 + 1e-12  # the search comes near the bound, and never crosses it
    unclipped = _worst_ratio(UnclippedPassive)  # the same configurations and histories (same seed)
    assert unclipped > 1.2  # the paper's Algorithm 1 as printed breaks Lemma 3


@pytest.mark.parametrize("epochs", [1, 3])
def test_counterexample_one_large_residual(epochs):
    """Algorithm 1 as printed: one large received residual on the changed record (noise of sigma_active in the
    hundreds, as small epsilons give, produces such values) pushes the two passive weight vectors to opposite
    sides of the ball, and the rest of the sequence differs by 2.7x Lemma 3's bound; clipped: far below it."""
    n, b = 16, 4
    cfg = HDPConfig(n_records=n, active_features=1, passive_features=2, batch_size=b, epochs=epochs, k=1.0,
                    l2=0.001, learning_rate=0.1, sigma_active=0.0, sigma_passive=0.0)
    X = np.tile([3.0, 4.0], (n, 1))  # aligned rows, clipped to c_B by the party
    X2 = X.copy()
    X2[0] = -X[0]
    perms = [np.arange(n)] * epochs
    residuals = [np.where(idx == 0, -1e3, 0.0) for _ in perms for idx in batches(cfg, perms[0])]
    bound = passive_sensitivity(epochs, cfg.iterations, 0.1, b, 1.0)
    ratio = {cls: np.linalg.norm(_ir_sequence(cls, cfg, X, perms, residuals)
                                 - _ir_sequence(cls, cfg, X2, perms, residuals)) / bound
             for cls in (PassiveParty, UnclippedPassive)}
    assert ratio[UnclippedPassive] > 2.5 and ratio[PassiveParty] < 0.2


def test_residual_clip_is_applied_to_what_the_passive_party_receives():
    cfg = HDPConfig(n_records=4, active_features=1, passive_features=1, batch_size=4, epochs=1, k=10.0, l2=0.0,
                    learning_rate=1.0, sigma_active=0.0, sigma_passive=0.0)
    X = np.full((4, 1), 0.5)  # within c_B = sqrt(1/2): not clipped
    idx = np.arange(4)
    a, b = PassiveParty(cfg, X, seed=0), UnclippedPassive(cfg, X, seed=0)
    a.update(idx, np.array([5.0, -0.5, 2.0, -7.0]))  # clipped to [1, -0.5, 1, -1]: sum 0.5
    b.update(idx, np.array([5.0, -0.5, 2.0, -7.0]))  # sum -0.5
    assert a.w[0] == pytest.approx(-1.0 * 0.5 * 0.5 / 4) and b.w[0] == pytest.approx(+1.0 * 0.5 * 0.5 / 4)


# ----- calibration: one Gaussian policy, the composition of the T steps accounted ------------------------
def test_sigmas_are_the_tightest_gaussian_for_each_partys_sequence():
    m = HDPLogisticRegression(epsilon=0.5, delta=0.01, epochs=3, batch_size=40, k=0.5, learning_rate=0.25)
    cfg = m.config(130, 2, 3)  # r = 130 // 40 = 3 batches of exactly 40, T = 9
    assert (cfg.batch_size, cfg.batches_per_epoch, cfg.iterations) == (40, 3, 9)
    assert cfg.sigma_passive == gaussian_sigma(passive_sensitivity(3, 9, 0.25, 40, 0.5), 0.5, 0.01)
    assert cfg.sigma_active == gaussian_sigma(active_sensitivity(3, 9, 0.25, 40, 0.5), 0.5, 0.01)
    # below epsilon 1 the paper's sqrt(2 ln(1.25/delta))/epsilon is looser than needed
    assert cfg.sigma_passive < passive_sensitivity(3, 9, 0.25, 40, 0.5) * math.sqrt(2 * math.log(125)) / 0.5
    big = m.config(30, 2, 3)  # batch above the data size: b = n, one batch per epoch
    assert (big.batch_size, big.iterations) == (30, 3)
    free = HDPLogisticRegression(epsilon=math.inf).config(30, 2, 3)
    assert free.sigma_active == free.sigma_passive == 0.0


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_the_composed_steps_spend_exactly_epsilon(eps):
    """The T releases of one party, each with its own sensitivity bound (squares summing to Lemma 3's
    Delta^2), composed by dp-accounting's PLD accountant at the configured sigma, spend epsilon at delta; 3 %
    less noise would exceed it (the calibration is sound and tight)."""
    m = HDPLogisticRegression(epsilon=eps, delta=1e-3, epochs=2, batch_size=10, k=1.0, learning_rate=0.5)
    cfg = m.config(50, 2, 2)
    delta_total = passive_sensitivity(cfg.epochs, cfg.iterations, cfg.learning_rate, cfg.batch_size, cfg.k)
    share = np.random.default_rng(0).random(cfg.iterations)
    steps = delta_total * np.sqrt(share / share.sum())  # per-step bounds, uneven, sum of squares Delta^2

    def spent(sigma):
        acc = PLDAccountant(value_discretization_interval=1e-3)  # 5e-5 relative here
        return acc.compose(ComposedDpEvent([GaussianDpEvent(sigma / s) for s in steps])).get_epsilon(1e-3)

    assert spent(cfg.sigma_passive) == pytest.approx(eps, rel=1e-3)
    assert spent(0.97 * cfg.sigma_passive) > eps * 1.02  # 1.037-1.039 measured


def test_released_intermediate_results_carry_the_stated_noise():
    cfg = HDPLogisticRegression(epsilon=1.0, delta=0.01).config(4000, 3, 2)
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
    ref = HDPLogisticRegression(epsilon=math.inf, seed=0).fit(Xtr, ytr)
    assert ref.score(Xte, yte) >= 0.9
    fits = {eps: [HDPLogisticRegression(epsilon=eps, seed=s).fit(Xtr, ytr) for s in range(8)] for eps in (0.001, 1.0)}
    assert np.mean([m.score(Xte, yte) for m in fits[1.0]]) >= 0.85  # the paper reports about 0.9 at epsilon = 1
    # noise matters: at a tiny budget the passive party's weights are further from the non-private ones (its
    # clipped residuals are nearly pure noise, so they stay near 0 and the model falls back to the active party's
    # columns; without the clip they wandered to norm k: accuracy about 0.70 instead of 0.90 here)
    gap = {eps: np.mean([np.linalg.norm(m.coef_passive_ - ref.coef_passive_) for m in ms]) for eps, ms in fits.items()}
    assert gap[0.001] > gap[1.0] + 0.03
    assert gap[0.001] == pytest.approx(np.linalg.norm(ref.coef_passive_), rel=0.05)


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
    from sqm.apps.hdp_vfl.party import ActiveParty
    from sqm.mpc.shares.randomness import is_secure
    from sqm.mechanism.rng import spawn_seeds

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
    """The one real-process test: the same HDPParty programs, as two MPyC processes over TCP and on the
    in-process context, give bit for bit the same model and exchange the same bytes."""
    Xtr, Xte, ytr, _ = breast
    Xs, ys = Xtr[:300], ytr[:300]
    kw = dict(epsilon=1.0, delta=0.01, epochs=3, batch_size=100, seed=11)  # 3 batches x 3 epochs
    plain = HDPLogisticRegression(backend="plain", **kw).fit(Xs, ys)
    procs = HDPLogisticRegression(backend="mpyc", **kw).fit(Xs, ys)
    assert np.array_equal(plain.weights_active_, procs.weights_active_)
    assert np.array_equal(plain.weights_passive_, procs.weights_passive_)
    assert procs.bytes_sent_[0] > 0 and procs.bytes_sent_[1] > 0
    assert not np.array_equal(plain.coef_, HDPLogisticRegression(**{**kw, "seed": 12}).fit(Xs, ys).coef_)


# ----- scikit-learn conventions -----------------------------------------------------------------------------
def test_labels_any_two_values_predictions_in_their_space(breast):
    Xtr, Xte, ytr, _ = breast
    a = HDPLogisticRegression(epsilon=1.0, seed=2).fit(Xtr, ytr)
    b = HDPLogisticRegression(epsilon=1.0, seed=2).fit(Xtr, 2 * ytr - 1)
    names = np.array(["benign", "malignant"])[ytr]
    c = HDPLogisticRegression(epsilon=1.0, seed=2).fit(Xtr, names)
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.coef_, c.coef_)
    assert a.classes_.tolist() == [0, 1] and b.classes_.tolist() == [-1, 1]
    assert c.classes_.tolist() == ["benign", "malignant"]
    assert np.array_equal(c.predict(Xte), np.array(["benign", "malignant"])[a.predict(Xte)])
    assert set(b.predict(Xte)) <= {-1, 1}


def test_clone_and_params_round_trip(breast):
    from sklearn.base import clone

    m = HDPLogisticRegression(epsilon=2.0, k=0.5, seed=4, active_features=7, backend="mpyc")
    assert m.get_params()["k"] == 0.5 and m.get_params()["backend"] == "mpyc"
    c = clone(m)
    assert c.get_params() == m.get_params() and c is not m
    bad = HDPLogisticRegression(k=-1.0, backend="gpu")  # __init__ only stores: refused at fit
    assert clone(bad).get_params()["k"] == -1.0
    c.set_params(backend="plain", epochs=2)
    Xtr, _, ytr, _ = breast
    assert c.fit(Xtr[:100], ytr[:100]).config_.epochs == 2


def test_sklearn_check_estimator():
    """All of scikit-learn's checks pass.  Skipped by scikit-learn itself here: check_array_api_input
    (SCIPY_ARRAY_API unset) and check_classifier_data_not_an_array (pandas not installed); none by us.  Tags:
    binary only (multi_class False), and poor_score at finite epsilon (DP noise on the checks' 30-150 records;
    the non-private reference, epsilon = inf, passes the accuracy check too)."""
    from sklearn.utils.estimator_checks import check_estimator

    res = check_estimator(HDPLogisticRegression(epsilon=1.0, seed=0), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in res if r["status"] == "failed"]
    assert failed == []
    assert sum(r["status"] == "passed" for r in res) >= 50


# ----- refusals (in process: the same program, the same messages and exit codes as real processes) ----------
@pytest.mark.parametrize("labels, msg", [([1, 2, 3, 2], "Only binary classification"),
                                         ([0.5, 1, 0, 2], "Unknown label type: continuous"),
                                         ([1, 1, 1, 1], "Only binary classification")])
def test_labels_other_than_two_classes_refused(labels, msg):
    X = np.random.default_rng(0).normal(size=(4, 4))
    with pytest.raises(ValueError, match=msg):
        HDPLogisticRegression().fit(X, labels)


@pytest.mark.parametrize("kw, msg", [(dict(k=0), "k must"), (dict(k=-1.0), "k must"), (dict(k=math.inf), "k must"),
                                     (dict(epsilon=0), "epsilon"), (dict(delta=1.0), "delta"),
                                     (dict(epochs=0), "epochs"), (dict(batch_size=0), "batch_size"),
                                     (dict(l2=-1.0), "l2"), (dict(learning_rate=100.0), "exceeds"),
                                     (dict(backend="gpu"), "backend"), (dict(timeout=0), "timeout"),
                                     (dict(intercept=1.0), "intercept"), (dict(intercept=-0.1), "intercept"),
                                     (dict(active_features=4), "active_features")])
def test_bad_parameters_refused_at_fit(kw, msg):
    m = HDPLogisticRegression(**kw)  # stores them unchanged
    assert all(m.get_params()[k] == v for k, v in kw.items())
    X, y = np.random.default_rng(0).normal(size=(8, 4)), np.array([0, 1] * 4)
    with pytest.raises(ValueError, match=msg):
        m.fit(X, y)


def test_bad_data_refused():
    rng = np.random.default_rng(0)
    XA, XB, y = rng.normal(size=(20, 3)), rng.normal(size=(20, 2)), rng.integers(0, 2, 20)
    m = HDPLogisticRegression(seed=0)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        m.fit_parties(XA, y[:19], XB)
    bad = XB.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.fit_parties(XA, y, bad)
    with pytest.raises(ValueError, match="2D array"):
        m.fit_parties(XA[:, 0], y, XB)
    with pytest.raises(ValueError, match="minimum of 2 is required"):
        m.fit(XA[:, :1], y)


def test_misaligned_passive_party_refused_by_the_parties():
    rng = np.random.default_rng(0)
    XA, XB, y = rng.normal(size=(20, 3)), rng.normal(size=(18, 2)), rng.integers(0, 2, 20)
    with pytest.raises(MPCError, match="passive party 18: records are not aligned") as err:
        HDPLogisticRegression(seed=0).fit_parties(XA, y, XB)
    assert err.value.codes == {ACTIVE: EXIT_REFUSED, PASSIVE: EXIT_REFUSED}


def test_a_party_refuses_its_own_unusable_input():
    rng = np.random.default_rng(0)
    XA, XB, y = rng.normal(size=(20, 3)), rng.normal(size=(20, 2)), 2 * rng.integers(0, 2, 20) - 1.0
    cfg = HDPLogisticRegression(seed=0).config(20, 3, 2)
    XB[2, 0] = np.inf
    refused = r"^client 1 refused: .*NaN or infinite(.|\n)*client 1 \(party 1\) exited 6: "
    with pytest.raises(MPCError, match=refused) as err:
        run_in_process([HDPParty(ACTIVE, cfg, XA, y, 1), HDPParty(PASSIVE, cfg, XB, None, 2)])
    assert err.value.codes[PASSIVE] == EXIT_BAD_DATA and err.value.codes[ACTIVE] == EXIT_REFUSED
    with pytest.raises(MPCError, match="party 1 was given the program of party 0"):
        run_in_process([HDPParty(ACTIVE, cfg, XA, y, 1), HDPParty(ACTIVE, cfg, XA, y, 2)])
    other = HDPLogisticRegression(seed=0, k=0.5).config(20, 3, 2)
    with pytest.raises(MPCError, match="different HDP-VFL configuration"):
        run_in_process([HDPParty(ACTIVE, cfg, XA, y, 1), HDPParty(PASSIVE, other, XB, None, 2)])


def test_timeout_bounds_the_job():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)) / 4
    y = (rng.random(40) < 0.5).astype(int)
    with pytest.raises(MPCError) as err:  # the job cannot finish in 1 ms: both parties exit TIMEOUT
        HDPLogisticRegression(epochs=50, batch_size=20, timeout=0.001).fit_parties(X[:, :2], y, X[:, 2:])
    assert err.value.exit_code == EXIT_TIMEOUT, str(err.value)


# ----- the command and the bench ----------------------------------------------------------------------------
def test_cli_writes_json(tmp_path, capsys):
    from sqm.cli.command import parse

    out = tmp_path / "hdp.json"
    args = parse(["hdp-vfl", "--backend", "plain", "--seed", "0", "--no-sqm", "--quiet",
                              "--json", str(out)])
    assert args.func(args) == 0
    rep = json.loads(out.read_text())  # sqm.cli.output: the printed table's rows as results
    acc = {r["method"]: r["test accuracy"] for r in rep["results"]}
    assert 0.5 < acc["HDP-VFL"] <= 1 and acc["SQM-LR (same eps, delta)"] is None
    assert {"single_party", "centralized", "nonprivate_vfl", "majority_class"} <= set(rep["details"]["references"])
    assert [p["method"] for p in rep["privacy"]] == ["HDP-VFL (active party)", "HDP-VFL (passive party)"]
    assert rep["secure_mode"] is False  # a seeded run is an experiment, and says so
    text = capsys.readouterr().out
    assert "different guarantee" in text and "HDP-VFL" in text and "EXPERIMENT" in text
    args = parse(["hdp-vfl", "--backend", "plain", "--no-sqm", "--quiet", "--epochs", "1",
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
    assert rows[0]["sigma_active"] / rows[1]["sigma_active"] == pytest.approx(
        gaussian_sigma(1.0, 0.001, 0.01) / gaussian_sigma(1.0, 10.0, 0.01), rel=1e-9)
    assert [(c["epochs"], c["k"]) for c in rep["figure2"]] == [(5, 1.0), (10, 1.0), (15, 1.0), (10, 0.1), (10, 0.5)]
    # Figure 2's e=10, k=1 curve is Figure 1's breast-cancer curve: same seeds, same models
    assert rep["figure2"][1]["rows"][0]["accuracies"] == rows[0]["accuracies"]
