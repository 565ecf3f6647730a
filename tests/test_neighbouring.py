"""One neighbouring relation (issue 24, part 3): every record-level report names zero-out (one record's values
replaced by zeros, n public), and each method's epsilon is computed from what zeroing one record changes in its
release: measured here on the release itself, then the report's epsilon recomputed from that sensitivity."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sqm.mechanism import accounting, events
from sqm.mechanism.quantize import stochastic_round
from sqm.mechanism.report import NEIGHBOURING, ZERO_OUT, PrivacyReport


def test_the_relations_are_named_and_checked():
    assert set(NEIGHBOURING) == {"zero-out", "embedding", "none"} and "n, which is public" in NEIGHBOURING[ZERO_OUT]
    assert PrivacyReport(epsilon_server=1.0, delta=1e-5).neighbouring == ZERO_OUT
    assert PrivacyReport(epsilon_server=1.0, delta=1e-5).as_dict()["neighbouring"] == "zero-out"
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        PrivacyReport(epsilon_server=1.0, delta=1e-5, neighbouring="add/remove")


def test_sqm_lr_moments_zeroing_a_record_moves_the_release_by_at_most_its_sensitivity():
    """The moments release: zeroing a record removes z_hat z_hat^T (constant included) from the integer Gram;
    over rounding outcomes of records at every bound, ||z_hat z_hat^T||_F = ||z_hat||^2 <= the report's L2; the
    server- and client-observed epsilons are those of that sensitivity (the client's without doubling)."""
    from sqm.apps.logreg.estimator import SQMLogisticRegression

    m = SQMLogisticRegression(epsilon=1.0, gamma=1024.0)
    mech, lay, rep = m.moments_plan(500, (2, 3), 1)
    assert rep.neighbouring == ZERO_OUT
    rng = np.random.default_rng(0)
    bounds = mech.bounds_for(lay.block_counts)
    worst = 0.0
    for _ in range(200):
        z = np.zeros(lay.n_cols)
        for g, b in zip(bounds.groups, bounds.bounds, strict=False):
            v = rng.normal(size=len(g))
            z[list(g)] = b * v / np.linalg.norm(v)  # every group at its bound
        z[lay.label_index] = lay.label_weight  # a positive label
        zh = stochastic_round(z, 1024.0, rng).astype(float)
        zero = stochastic_round(np.zeros(lay.n_cols), 1024.0, rng)
        assert not zero.any()  # the zeroed record's quantized row is 0: it adds nothing
        worst = max(worst, float(np.linalg.norm(np.outer(zh, zh))))
    assert worst <= rep.l2_sensitivity
    assert worst > 0.99 * (1024.0 ** 2 * (1 + lay.constant ** 2 + lay.label_weight ** 2))
    n = 2
    assert rep.epsilon_server == pytest.approx(events.compose(
        [events.server_event(rep.l1_sensitivity, rep.l2_sensitivity, rep.mu)], rep.delta), rel=1e-9)
    # by hand, with the sensitivities undoubled (zero-out) and the noise a client does not know, Sk(mu (n-1)/n):
    # the smaller of the RDP conversion and Gaussian DP (variance 2 mu (n - 1) / n)
    by_hand_rdp = accounting.epsilon(accounting.DEFAULT_ORDERS, accounting.skellam_rdp(
        np.array(accounting.DEFAULT_ORDERS, float), rep.l1_sensitivity, rep.l2_sensitivity, rep.mu * (n - 1) / n),
        rep.delta)
    from sqm.mechanism import skellam_gdp

    by_hand_gdp = skellam_gdp.gdp_epsilon(skellam_gdp.skellam_gdp_mu(rep.l2_sensitivity, 2 * rep.mu * (n - 1) / n),
                                          rep.delta)
    assert rep.epsilon_client == pytest.approx(min(by_hand_rdp, by_hand_gdp), rel=1e-9)


def test_sqm_lr_sgd_zeroed_record_contributes_no_gradient():
    """The per-batch protocol: the zeroed record's row (the intercept's constant included) makes every monomial
    of Eq. 19 zero, so its change is f_hat(x_hat), bounded by the report's sensitivity."""
    from sqm.apps.logreg.estimator import SQMLogisticRegression
    from sqm.mechanism.polynomial import logreg_gradient

    m = SQMLogisticRegression(epsilon=1.0, gamma=256.0, solver="sgd")
    plan, rep = m.plan(400, (2, 3), 1)
    assert rep.neighbouring == ZERO_OUT
    poly = logreg_gradient(np.full(plan.d, 0.3), plan.label_index)
    assert not np.any(poly.evaluate(np.zeros((1, plan.d + 1))))


def test_baselines_are_computed_under_zero_out():
    """Local DP (LR): zeroing a unit row labelled 1 changes [X | y] by sqrt(2), its sensitivity; central and local
    PCA: x x^T and x; DPSGD: the zeroed record's gradient is 0, the clip norm bounds the change.  Each epsilon is
    that of its own sensitivity."""
    from sqm.apps.logreg.baselines import LOCAL_DP_SENSITIVITY, local_dp_fit
    from sqm.apps.pca.baselines import central_dp_pca, local_dp_pca
    from sqm.mechanism.calibration import gaussian_epsilon
    from sqm.mechanism.vertical import VerticalData

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 4)) * 0.2
    y = (X[:, 0] > 0).astype(float)
    _, rep = local_dp_fit(X, y, 1.0, 1e-5, seed=0)
    row = np.r_[np.eye(4)[0], 1.0]
    assert rep.neighbouring == ZERO_OUT and np.linalg.norm(row - 0) == pytest.approx(LOCAL_DP_SENSITIVITY)
    assert rep.epsilon_server == pytest.approx(gaussian_epsilon(rep.sigma, LOCAL_DP_SENSITIVITY, 1e-5))
    assert rep.epsilon_client == rep.epsilon_server
    for r in (central_dp_pca(X, 2, 1.0, 1e-5, seed=0).report,
              local_dp_pca(VerticalData.split(X, 2), 2, 1.0, 1e-5, seed=0).report):
        assert r.neighbouring == ZERO_OUT
        assert r.epsilon_server == pytest.approx(gaussian_epsilon(r.sigma, r.l2_sensitivity, 1e-5))


def test_dpsgd_report_names_zero_out():
    pytest.importorskip("opacus")
    from sqm.apps.logreg.baselines import dpsgd_fit

    rng = np.random.default_rng(2)
    X = np.hstack([rng.normal(size=(80, 3)) * 0.3, np.ones((80, 1))])
    y = (X[:, 0] > 0).astype(float)
    _, rep = dpsgd_fit(X, y, 1.0, 1e-5, 0.25, 1, 1.0, 8.0, max_grad_norm=math.sqrt(2), seed=0)
    assert rep.neighbouring == ZERO_OUT and rep.l2_sensitivity == pytest.approx(math.sqrt(2))


def test_pbm_reports_are_in_their_own_unit():
    from sqm.apps.pbm_vfl.privacy import privacy_reports
    from sqm.apps.pbm_vfl.config import VFLConfig

    reps = privacy_reports(VFLConfig(), 3)
    assert reps["pbm"].neighbouring == "embedding" and reps["npq"].neighbouring == "none"


def test_pbm_reports_say_what_they_guarantee():
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.apps.pbm_vfl.privacy import privacy_reports

    reps = privacy_reports(VFLConfig(), 3)
    for m in ("pbm", "ldp", "ldp_eq"):
        if m in reps:
            assert reps[m].neighbouring == "embedding" and "NOT for the records' features" in reps[m].notes
            assert reps[m].as_dict()["neighbouring"] == "embedding"
