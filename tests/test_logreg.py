"""SQM logistic regression: the secure kernel against the exact gradient (in process), the gradient against the
Taylor gradient, accuracy against scikit-learn, calibration, refusals (in process), clipping, scikit-learn
conventions, baselines' accounting.  The real-process run is tests/test_lr_client_view.py's (bit for bit the
in-process run)."""

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks
from scipy.stats import binom

from sqm.apps.logreg import party
from sqm.apps.logreg.baselines import dpsgd_fit, taylor_fit
from sqm.apps.logreg.experiment import compare, unit_ball_split
from sqm.apps.logreg.estimator import SQMLogisticRegression
from sqm.apps.logreg.party import LRPlan, batch_cap
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.party import PartyProgram
from sqm.mechanism import accounting
from sqm.mechanism.compensation import compensate
from sqm.mechanism.polynomial import logreg_gradient
from sqm.mechanism.quantize import stochastic_round


def small_plan(col_counts=(2, 3, 2), label_party=1, gamma=64.0, b_max=9, mu=0.0, W=1.0):
    bounds = np.sqrt(np.asarray(col_counts) / sum(col_counts))
    return LRPlan(n_records=30, col_counts=tuple(col_counts), label_party=label_party, gamma=gamma, mu=mu, q=0.1,
                  rounds=10, b_max=b_max, learning_rate=1.0, weight_bound=W, party_bounds=tuple(bounds))


def random_w(d, rng, norm=1.0):
    w = rng.normal(size=d)
    return w * norm / np.linalg.norm(w)


def coefs(plan, w, rng):
    return plan.statistic(w).compensate(plan.gamma, rng).int_coefs


def test_statistic_compensation_and_program_are_the_generic_polynomial_s():
    """LRGradient (a structured polynomial with secret coefficients): every coefficient it draws is floor or ceil
    of the one sqm.mechanism.compensation.compensate rounds for logreg_gradient(w) (in the same order; each
    output's weight terms rounded dependently, so their norm is within the dependent bound), and with the same
    integers its program is that polynomial's program."""
    from sqm.mechanism.compensation import check_rounding
    from sqm.mechanism.sensitivity import dependent_norm_bound_sq

    plan = small_plan()
    rng = np.random.default_rng(3)
    w = random_w(plan.d, rng)
    comp = plan.statistic(w).compensate(plan.gamma, np.random.default_rng(11))
    poly = logreg_gradient(w, plan.label_index)
    check_rounding(poly, plan.gamma, comp.int_coefs)
    ref = dataclasses.replace(compensate(poly, plan.gamma, np.random.default_rng(11)), int_coefs=comp.int_coefs)
    assert comp.scale == ref.scale == plan.scale
    a = np.array(comp.int_coefs, dtype=object).reshape(plan.d, plan.d + 2)[:, 1:plan.d + 1]
    gw = Fraction(plan.gamma) * Fraction(float(np.linalg.norm(w))) / 4
    assert all(sum(int(v) ** 2 for v in row) <= dependent_norm_bound_sq(gw, plan.d) for row in a)
    bounds = np.array(plan.release().int_col_bounds())
    X_hat = rng.integers(-bounds, bounds + 1, size=(plan.b_max, plan.d + 1))
    assert (plan.statistic().program(comp.int_coefs).evaluate(X_hat).tolist()
            == ref.program().evaluate(X_hat).tolist())
    assert np.allclose(plan.statistic(w).evaluate(X_hat), logreg_gradient(w, plan.label_index).evaluate(X_hat))
    with pytest.raises(ValueError, match="only the server"):
        plan.statistic().compensate(plan.gamma, rng)  # a client holds no weights


def test_result_bound_covers_program_bound():
    """The field's bound (computed alike by the clients, which do not know the coefficients) covers the generic
    program's bound, every coefficient the server can round (||w|| = W, mass on one coordinate) and the batch
    moments formed on shares at the column bounds."""
    plan = small_plan(mu=50.0)
    release, stat = plan.release(), plan.statistic()
    b = release.int_col_bounds()
    assert b[plan.label_index] == int(plan.gamma)  # the label's own bound, not its party's
    rng = np.random.default_rng(5)
    for _ in range(5):
        ints = coefs(plan, random_w(plan.d, rng), rng)
        generic = stat.program(ints).output_bound(b, plan.b_max) + release.addend_bound()
        assert plan.result_bound() >= generic
    w = np.zeros(plan.d)
    w[0] = plan.weight_bound
    ints = [c for s in (1, -1) for _ in range(20) for c in coefs(plan, s * w, rng)]
    assert max(abs(c) for c in ints) <= plan.result_bound()
    S = np.tile(np.array(b), (plan.b_max, 1)).astype(object)
    assert np.max(np.abs(S.T @ S)) <= plan.result_bound()


def test_sensitivity_is_the_logreg_bound_over_the_feature_groups():
    from sqm.mechanism.sensitivity import logreg_sensitivity

    plan = small_plan()
    sens = plan.statistic().sensitivity(plan.gamma, plan.column_bounds())
    ref = logreg_sensitivity(plan.gamma, plan.d, 1.0, plan.weight_bound, plan.party_bounds, plan.col_counts)
    assert sens.l2 == pytest.approx(ref.l2, rel=1e-12) and sens.l1 == pytest.approx(ref.l1, rel=1e-12)


def test_rowdot_mod_is_exact():
    """The row-wise products of the coefficient shares and the moment shares (sqm.mpc.shares.modarith.rowdot_mod)."""
    from sqm.mpc.shares import modarith
    from sqm.mpc.shares.field import prime_below

    rng = np.random.default_rng(14)
    for bits in (20, 51, 58, 61):
        p = prime_below(bits)
        for shape in ((7, 9), (100, 100), (2, 5000)):
            A, B = rng.integers(0, p, shape), rng.integers(0, p, shape)
            A[0], B[0] = p - 1, p - 1
            exact = (A.astype(object) * B.astype(object)).sum(1) % p
            assert modarith.rowdot_mod(A, B, p).tolist() == exact.tolist(), (bits, shape)


def test_noiseless_gradient_equals_taylor_gradient():
    rng = np.random.default_rng(6)
    plan = small_plan(gamma=2.0 ** 20, b_max=25)
    X = rng.normal(size=(25, plan.d))
    X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.integers(0, 2, 25).astype(float)
    full = np.insert(X, plan.label_index, y, axis=1)
    w = random_w(plan.d, rng)
    exact = logreg_gradient(w, plan.label_index).evaluate(full)
    ints = coefs(plan, w, rng)
    got = plan.statistic().program(ints).evaluate(stochastic_round(full, plan.gamma, rng)).astype(float) / plan.scale
    assert np.max(np.abs(got - exact)) < 1e-4 * max(1.0, np.max(np.abs(exact)))


def test_in_process_runs_are_reproducible_and_seeded_apart():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 6)) * 0.3
    X[0] *= 10  # violates the norm bound: clipped, counted
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    models = [SQMLogisticRegression(4.0, 1e-5, 256, 0.25, 1, 1.0, "in-process", 3, seed=s, solver="sgd").fit(X, y)
              for s in (7, 7, 8)]
    assert models[0].backend_ == "in-process"
    assert np.array_equal(models[0].coef_, models[1].coef_)
    assert not np.array_equal(models[0].coef_, models[2].coef_)
    over = [int(np.sum(np.linalg.norm(b, axis=1) > np.sqrt(1 / 3))) for b in np.split(X, 3, axis=1)]
    assert models[0].clipped_ == over and over[0] >= 1
    assert min(models[0].bytes_sent_) > 0  # the frames travel through the mailboxes
    assert models[0].secure_mode_ is False  # seeded: one process knows every party's seed


def test_breast_cancer_accuracy_within_3_points_of_sklearn():
    Xtr, ytr, Xte, yte = unit_ball_split("breast_cancer")[:4]
    res = compare(Xtr, ytr, Xte, yte, epsilon=8.0, delta=1e-5, gamma=8192.0, q=0.05, epochs=10,
                  learning_rate=1.0, weight_bound=1.0, parties=3, backend="in-process", seed=0,
                  methods=("sqm", "nonprivate"), fit_intercept=False)  # the paper's setting: no intercept
    assert res["nonprivate"]["accuracy"] > 0.88
    assert res["sqm"]["accuracy"] >= res["nonprivate"]["accuracy"] - 0.03


def test_calibration_meets_target_epsilon_with_the_batch_cap_in_delta(monkeypatch):
    """mu meets the server-observed (epsilon, delta) with the batch cap's failure probability eta entering delta as
    (1 + e^epsilon) eta; a cap failing often enough (2^-20 instead of 2^-40) shows the difference from eta alone:
    mu is the smallest that meets epsilon at delta - (1 + e) eta, and so more than epsilon at delta - eta needs."""
    import math

    from sqm.apps.logreg import estimator

    Xtr, ytr, _, _ = unit_ball_split("breast_cancer")[:4]
    monkeypatch.setattr(estimator, "batch_cap", lambda n, q, r: batch_cap(n, q, r, log2_failure=-20))
    m = SQMLogisticRegression(1.0, 1e-5, 1024.0, 0.05, 2, seed=0, solver="sgd")
    plan, rep = m.plan(Xtr.shape[0], [10, 10, 10], 2)
    eta = batch_cap(plan.n_records, 0.05, 40, log2_failure=-20)[1]
    assert rep.rounds == 40 and plan.mu > 0 and 1e-7 < eta <= 2.0 ** -20
    delta_mu = 1e-5 - (1 + math.e) * eta
    eps = accounting.server_epsilon(plan.mu, delta_mu, rep.l1_sensitivity, rep.l2_sensitivity, q=0.05, rounds=40)
    assert 0.99 <= eps <= 1.0 and rep.epsilon_server <= 1.0
    # mu is the smallest meeting epsilon at that delta (calibrated at 1e-5 - eta, it would be smaller and fail)
    assert accounting.server_epsilon(0.999 * plan.mu, delta_mu, rep.l1_sensitivity, rep.l2_sensitivity, q=0.05,
                                     rounds=40) > 1.0
    assert accounting.server_epsilon(plan.mu, 1e-5 - eta, rep.l1_sensitivity, rep.l2_sensitivity, q=0.05,
                                     rounds=40) < 0.995
    eps_c = accounting.client_epsilon(plan.mu, delta_mu, rep.l1_sensitivity, rep.l2_sensitivity, 3, rounds=40)
    # clients observe only shares during training: the client-observed epsilon is that of a shared final model
    assert "shares" in rep.notes and rep.epsilon_client == pytest.approx(eps_c) and eps_c > 1.0
    assert rep.events and rep.method == "SQM" and rep.scale == 1024.0 ** 3


def test_a_huge_epsilon_fits_the_sgd_round():
    """Epsilon 1000 (e^epsilon overflows a float): the round fits, calibrated at or below it, and nearly noiseless
    finds the direction the labels follow (it had raised OverflowError in the failure-probability accounting)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = (X[:, 0] > 0).astype(int)
    m = SQMLogisticRegression(1000.0, 1e-5, sampling_rate=1.0, epochs=1, learning_rate=1.0, weight_bound=0.1,
                              backend="plain", n_parties=3, seed=1, solver="sgd").fit(X, y)
    w = np.asarray(m.coef_).ravel()
    assert 999.0 < m.report_.epsilon_server <= 1000.0 and np.argmax(np.abs(w)) == 0 and w[0] > 0


def test_batch_cap_failure_probability():
    b, p = batch_cap(30000, 0.001, 5000)
    assert 5000 * binom.sf(b, 30000, 0.001) <= 2.0 ** -40
    assert p <= 2.0 ** -40
    assert 5000 * binom.sf(b - 1, 30000, 0.001) > 2.0 ** -40


@pytest.mark.parametrize("kwargs, y, match", [
    ({}, "three-labels", "exactly 2 classes"),
    ({}, "one-label", "exactly 2 classes"),
    ({"label_party": 5}, None, "label party 5 is missing"),
    ({}, "none", "requires y to be passed"),
    ({}, "short", "inconsistent numbers of samples"),
])
def test_bad_data_raises(kwargs, y, match):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 6)) * 0.2
    labels = {"three-labels": np.r_[np.zeros(10), 2 * np.ones(5), np.ones(5)], "one-label": np.ones(20),
              "none": None, "short": np.r_[np.zeros(10), np.ones(9)]}.get(y, np.r_[np.zeros(10), np.ones(10)])
    with pytest.raises(ValueError, match=match):
        SQMLogisticRegression(1.0, backend="in-process", sampling_rate=0.5, epochs=1, solver="sgd",
                              **kwargs).fit(X, labels)


@pytest.mark.parametrize("kwargs, match", [
    ({"sampling_rate": 0.0}, "sampling rate q"), ({"sampling_rate": 1.5}, "sampling rate q"),
    ({"epochs": 0}, "epochs"), ({"epsilon": -1.0}, "epsilon"), ({"backend": "gpu"}, "backend"),
    ({"n_parties": 1}, "n_parties"), ({"weight_bound": 0.0}, "weight_bound"),
])
def test_bad_parameters_raise_in_fit(kwargs, match):
    m = SQMLogisticRegression(**{"epsilon": 1.0, **kwargs})  # __init__ only stores them
    assert m.get_params()[next(iter(kwargs))] == next(iter(kwargs.values()))
    with pytest.raises(ValueError, match=match):
        m.fit(np.eye(4)[:, :3] * 0.5, [0, 1, 0, 1])


def test_clipping_counted_per_party():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 6)) * 0.1
    X[:4, :2] = 5.0  # party 0's sub-rows of 4 records exceed sqrt(2/6)
    X[10, 4:] = 3.0  # one record of party 2
    y = rng.integers(0, 2, 30)
    m = SQMLogisticRegression(2.0, backend="in-process", sampling_rate=0.5, epochs=1, noise=False, seed=0,
                             solver="sgd").fit(X, y)
    assert m.clipped_ == [4, 0, 1]


def test_local_dp_noise_is_the_optimum_at_sensitivity_sqrt2():
    """Local DP: one Gaussian release of [X | y], L2 sensitivity sqrt(2) (add/remove one record, ||x|| <= 1,
    y in {0, 1}), calibrated by sqm.mechanism.calibration: it meets (1, 1e-5) by dp-accounting's PLD, 2% less does
    not."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    from sqm.apps.logreg.baselines import LOCAL_DP_SENSITIVITY, local_dp_fit
    from sqm.mechanism.calibration import gaussian_sigma

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = (X[:, 0] > 0).astype(int)
    worst = np.linalg.norm(np.r_[X[0], 1.0])  # a unit row labelled 1 against its absence (a zero row)
    assert LOCAL_DP_SENSITIVITY == pytest.approx(worst) == np.sqrt(2)
    model, rep = local_dp_fit(X, y, 1.0, 1e-5, seed=0)
    sigma = rep.sigma
    assert sigma == gaussian_sigma(np.sqrt(2), 1.0, 1e-5) and model.coef_.shape == (1, 4)
    assert rep.l2_sensitivity == LOCAL_DP_SENSITIVITY and 0.999 < rep.epsilon_server <= 1.0
    for factor, meets in ((1.0, True), (0.98, False)):
        acc = pld_privacy_accountant.PLDAccountant()
        acc.compose(dp_accounting.GaussianDpEvent(factor * sigma / np.sqrt(2)))
        assert (acc.get_epsilon(1e-5) <= 1.0 + 1e-6) is meets


def test_dpsgd_and_taylor_baselines_run_and_account():
    Xtr, ytr, Xte, yte = unit_ball_split("breast_cancer")[:4]
    w, rep = dpsgd_fit(Xtr, ytr, 2.0, 1e-5, 0.05, 2, 1.0, seed=0)
    assert rep.method == "DPSGD" and rep.rounds == 40 and rep.sigma > 0
    assert 1.95 <= rep.epsilon_server <= 2.0  # calibrated at the target by Opacus' PRV accountant
    assert np.linalg.norm(w) <= 1.0 + 1e-6
    # q = 0.1067: 1/q is not an integer (9 batches an epoch): the report is the epsilon of R Poisson steps at
    # rate q, at most the target (Opacus' engine would book rate 1/9 and report 1.038 for this 0.994 run)
    rep = dpsgd_fit(Xtr, ytr, 1.0, 1e-5, 0.1067, 5, 1.0, seed=0)[1]
    assert rep.rounds == 45 and 0.98 <= rep.epsilon_server <= 1.0
    wt = taylor_fit(Xtr, ytr, 0.05, 5, 1.0, seed=0)
    assert np.mean((Xte @ wt > 0) == yte) > 0.85


class OneGradient(PartyProgram):
    """Test program: one kernel evaluation with given coefficients (server) or quantized rows and noise (client)."""

    def __init__(self, plan, ints=None, my_input=None):
        self.plan, self.ints, self.my_input = plan, ints, my_input

    async def run(self, ctx):
        res = await self.plan.statistic().kernel(ctx, self.plan.release(), self.ints, self.my_input)
        return {"y": None if res is None else [int(v) for v in res]}


@pytest.mark.parametrize("ideal", [False, True])
@pytest.mark.parametrize("col_counts, label_party", [((2, 3), 1), ((2, 3, 2), 0)])
def test_secure_gradient_equals_exact_sum(col_counts, label_party, ideal):
    """The secure kernel on shares (in process with ideal=False: the real sharing, degree reductions and opening
    over the mailboxes) reconstructs exactly the compensated gradient sum plus the clients' noise, with two
    clients (M = 3: the moments are reduced) and three (M = 4 > 3t: one reduction of y serves both); the
    clients' rows (fewer than b_max) are padded by the kernel.  The ideal functionality (the in-process
    default) gives the same integers."""
    from sqm.mechanism.skellam import skellam

    plan = small_plan(col_counts, label_party, mu=1e4, b_max=12, W=1.0)
    rng = np.random.default_rng(9)
    ints = coefs(plan, random_w(plan.d, rng), rng)
    bounds = np.array(plan.release().int_col_bounds())
    X_hat = rng.integers(-bounds, bounds + 1, size=(9, plan.d + 1))
    X_hat[:, plan.label_index] = rng.integers(0, 2, 9) * int(plan.gamma)
    cuts = np.cumsum(plan.block_widths)[:-1]
    noise = [skellam(plan.mu / plan.n_parties, plan.d, rng) for _ in col_counts]
    inputs = [(b, z) for b, z in zip(np.split(X_hat, cuts, axis=1), noise, strict=False)]
    res = run_in_process([OneGradient(plan, ints)] + [OneGradient(plan, my_input=x) for x in inputs], ideal=ideal)
    exact = plan.statistic().program(ints).evaluate(X_hat) + sum(n.astype(object) for n in noise)
    assert res[0]["result"]["y"] == [int(v) for v in exact]
    assert res[1]["result"]["y"] is None  # opened to the server only


def run_job_in_process(job, task, ledger=None):
    from sqm.framework.spec import load_job
    from sqm.framework.runners import simulate

    return simulate(load_job(job), task, timeout=120, ledger=ledger)


def test_job_file_mode_equals_estimator_and_refuses_misaligned_records(tmp_path):
    """Each party reads only its own CSV (the label party's holds the label column); same weights as the
    estimator for the same seed; refused (in process, as real parties refuse): a label party without the label
    column, a client whose records come in another order (aligned: the same model), a client with another id set (the
    records in common), a party running other public parameters."""
    from sqm.framework.party import JobMeta
    from sqm.framework.ledger_guard import LedgerGuard
    from sqm.framework.spec import write_party_csvs
    from sqm.apps.logreg.job import LRJobTask
    from sqm.errors import EXIT_BAD_DATA, EXIT_REFUSED
    from sqm.mpc.net.launch import MPCError
    from sqm.mechanism.vertical import VerticalData

    rng = np.random.default_rng(12)
    X = rng.normal(size=(40, 6)) * 0.25
    y = (X[:, 0] - X[:, 5] > 0).astype(float)
    job = write_party_csvs(np.hstack([X, y[:, None]]), tmp_path, col_counts=[2, 2, 3], dataset="lr-test",
                           min_intersection=1)
    with pytest.raises(ValueError, match="--insecure-reproducible"):
        LRJobTask(4.0, 1e-5, 256.0, 0.25, 1, 1.0, label_column="x6", seed=5, solver="sgd")
    task = LRJobTask(4.0, 1e-5, 256.0, 0.25, 1, 1.0, label_column="x6", seed=5, insecure_reproducible=True,
                     solver="sgd")
    unseeded = LRJobTask(4.0, 1e-5, 256.0, 0.25, 1, 1.0, label_column="x6", solver="sgd")
    assert task.public() == unseeded.public() and unseeded.secure_mode and not task.secure_mode  # seed not public
    recs = run_job_in_process(job, task)
    est = SQMLogisticRegression(4.0, 1e-5, 256.0, 0.25, 1, 1.0, "in-process", seed=5, solver="sgd").fit(
        VerticalData([X[:, :2], X[:, 2:4], X[:, 4:]]), y)
    assert np.array_equal(recs[0]["result"]["coef"], est.coef_[0])
    assert recs[0]["result"]["intercept"] == est.intercept_[0] != 0  # the constant column's weight (c = 1)
    assert recs[0]["result"]["report"].epsilon_server <= 4.0
    rep = recs[0]["result"]["report"]  # the estimator's report, and the job's note on its record count
    from sqm.framework.party import ALIGNMENT_NOTE

    assert rep.notes == est.report_.notes + "; " + ALIGNMENT_NOTE.format(m=40, k=3)
    assert dataclasses.replace(rep, notes=est.report_.notes) == est.report_ == task.release(JobMeta((2, 2, 3), 40))
    ledger = LedgerGuard(str(tmp_path / "ledger.db"), budget=(5.0, 1e-4))  # the release is charged to the dataset
    recs = run_job_in_process(job, task, ledger)
    assert recs[0]["result"]["ledger"]["dataset"] == "lr-test"
    assert recs[0]["result"]["ledger"]["epsilon"] == pytest.approx(est.report_.epsilon_server, rel=1e-6)
    from sqm.mechanism.ledger import Ledger

    (entry,) = Ledger(str(tmp_path / "ledger.db")).releases("lr-test")  # the batch cap's eta is charged too
    assert entry["eta"] == pytest.approx(est.report_.eta) and 0 < entry["eta"] <= 2.0 ** -40
    assert recs[0]["result"]["secure_mode"] is False
    assert all("weights" not in r["result"] for r in recs[1:])
    with pytest.raises(MPCError, match="client 3 refused: its file has no label column") as e:
        run_job_in_process(job, LRJobTask(4.0, 1e-5, 256.0, 0.25, 1, 1.0, label_column="y", solver="sgd"))
    assert e.value.codes[3] == EXIT_BAD_DATA and e.value.codes[0] == EXIT_REFUSED
    lines = (tmp_path / "party2.csv").read_text().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]  # client 2's records in another order: aligned, the same model
    (tmp_path / "party2.csv").write_text("".join(lines))
    assert np.array_equal(run_job_in_process(job, task)[0]["result"]["coef"], est.coef_[0])
    lines[1] = "1000" + lines[1][lines[1].index(","):]  # one id that no other client holds: 39 records in common
    (tmp_path / "party2.csv").write_text("".join(lines))
    assert run_job_in_process(job, unseeded)[0]["result"]["n_records"] == 39


def test_parties_with_different_plans_or_blocks_are_refused():
    """In process, as between real parties: a client whose block does not fit the public plan refuses its own
    input before any share is sent; a party running another plan is refused at the plan agreement."""
    from sqm.errors import EXIT_BAD_DATA
    from sqm.mpc.net.launch import MPCError

    plan = small_plan(col_counts=(2, 3), label_party=1)
    rng = np.random.default_rng(3)
    blocks = [rng.normal(size=(30, 2)) * 0.2, np.hstack([rng.normal(size=(30, 3)) * 0.2, np.ones((30, 1))])]
    good = [party.LRParty(plan, 0)] + [party.LRParty(plan, j, b) for j, b in enumerate(blocks, 1)]
    with pytest.raises(MPCError, match="client 2 refused: its block has shape") as e:
        run_in_process(good[:2] + [party.LRParty(plan, 2, blocks[1][:29])])
    assert e.value.codes[2] == EXIT_BAD_DATA
    other = dataclasses.replace(plan, learning_rate=0.5)
    with pytest.raises(MPCError, match="different logistic-regression plan"):
        run_in_process(good[:2] + [party.LRParty(other, 2, blocks[1])])
    assert run_in_process(good)[0]["result"]["weights"].shape == (plan.d,)


def test_cli_job_mode_refuses_seed_without_opt_in(tmp_path, capsys):
    """sqm logreg --job ... --seed is refused (before any party starts) unless --insecure-reproducible."""
    from sqm.cli.command import main

    code = main(["logreg", "--job", str(tmp_path / "missing.json"), "--seed", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--seed 1 is refused in job mode" in err and "--insecure-reproducible" in err


def test_noise_share_large_mu_is_fine_grained_with_the_skellam_variance():
    """The clients' noise shares at SQM-LR's scale (gamma 2^13: mu / n ~ 1e20), drawn by sqm.mechanism.skellam."""
    from sqm.mechanism.skellam import skellam

    rng = np.random.default_rng(13)
    mu = 1e20  # far above numpy's fine-grained Poisson range: still an exact Skellam share
    z = skellam(mu, 20000, rng).astype(np.float64)
    assert abs(np.var(z) / (2 * mu) - 1) < 0.05
    residues = np.array([int(v) % 16 for v in skellam(mu, 20000, rng)])
    assert abs(np.mean(residues == 0) - 1 / 16) < 0.01  # numpy's Poisson at this lam gives only multiples


def test_public_split_cuts_between_attributes_and_never_clips():
    """adult's one-hot groups (public metadata) are never cut; on breast_cancer (one attribute a column, rows
    scaled to the unit ball) the attribute-proportional bounds clip nothing."""
    from sqm.data.datasets import adult_feature_names
    from sqm.apps.logreg.experiment import public_split

    groups = [n.split("=")[0] for n in adult_feature_names()]
    counts, bounds = public_split(groups, 3)
    cuts = np.cumsum(counts)[:-1]
    assert sum(counts) == len(groups) and all(groups[c - 1] != groups[c] for c in cuts)
    assert abs(np.sum(bounds ** 2) - 1) < 1e-12
    Xtr, _, Xte, _, attrs = unit_ball_split("breast_cancer")
    counts, bounds = public_split(attrs, 3)
    for X in (Xtr, Xte):
        blocks = np.split(X, np.cumsum(counts)[:-1], axis=1)
        assert all(np.all(np.linalg.norm(b, axis=1) <= c + 1e-12) for b, c in zip(blocks, bounds, strict=False))


# scikit-learn conventions.  The checks run the estimator in process (the same party programs as real parties) with
# two clients (their datasets have as few as 2 features; 1 feature is refused, as check_fit2d_1feature accepts),
# one full-batch round and noise off: check_classifiers_train demands accuracy > 0.83 of any classifier, which a
# DP model cannot promise on every toy set (with noise at epsilon 1 every check passed as well, in 25 s instead
# of 4 s).  Skipped by scikit-learn itself here: check_array_api_input (SCIPY_ARRAY_API unset) and
# check_classifier_data_not_an_array (pandas not installed).
@parametrize_with_checks([SQMLogisticRegression(gamma=1024.0, sampling_rate=1.0, epochs=1, backend="in-process",
                                                solver="sgd", n_parties=2, noise=False, seed=0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("labels", [("no", "yes"), (-1, 1), (2, 5)])
def test_estimator_conventions_and_label_space(labels):
    from sklearn.base import clone

    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 5)) * 0.3
    pos = X[:, 0] - X[:, 4] > 0
    y = np.where(pos, labels[1], labels[0])
    m = SQMLogisticRegression(8.0, gamma=1024, sampling_rate=0.5, epochs=4, backend="in-process", n_parties=2,
                              solver="sgd",
                              noise=False, seed=3)
    params = m.get_params()
    assert params["gamma"] == 1024 and type(params["gamma"]) is int and params["epochs"] == 4  # stored as given
    c = clone(m)
    assert c.get_params() == params and c is not m
    m.fit(X, y)
    assert m.get_params() == params and not hasattr(c, "coef_")  # fit changes no parameter; clone is unfitted
    assert m.classes_.tolist() == sorted(labels) and m.n_features_in_ == 5 and m.coef_.shape == (1, 5)
    pred = m.predict(X)
    assert set(pred.tolist()) <= set(labels) and np.mean(pred == y) > 0.8
    u = m.decision_function(X)
    proba = m.predict_proba(X)
    assert np.allclose(proba.sum(1), 1) and np.array_equal(proba[:, 1] > 0.5, u > 0)
    assert np.array_equal(pred, m.classes_[(u > 0).astype(int)])
    assert np.allclose(np.exp(m.predict_log_proba(X)), proba)
    # the protocol sees the labels as {0, 1} (1: classes_[1]): the same model as training on 0/1 directly
    m01 = clone(m).fit(X, pos.astype(int))
    assert np.array_equal(m01.coef_, m.coef_)
    assert m.set_params(epochs=None).get_params()["epochs"] is None  # resolved only in fit
    assert m.fit(X, y).epochs_ == 10  # the paper's epochs at epsilon 8
