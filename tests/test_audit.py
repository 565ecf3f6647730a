"""The empirical privacy audit (``sqm audit``): the Clopper-Pearson epsilon lower bound against hand-computed cases,
the real releases' lower bounds below their claimed epsilons, and the audit's power: a release whose noise is far
too small for its claim gets a lower bound above the claim, so these tests can fail.  In process (the plain
backend), fixed seeds: every figure is deterministic."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sqm.cli.audit_runs import CASES, NOT_AUDITED, pbm_scores, run_case
from sqm.cli.command import main
from sqm.errors import UsageError
from sqm.mechanism.audit import audit_scores, clopper_pearson_upper, epsilon_lower_bound
from sqm.mechanism.report import ZERO_OUT, relation_phrase
from sqm.mechanism.rng import make_rng

GAMMA = 64.0  # a coarse grid: the rounding is part of what is audited, and the runs are fast


def test_clopper_pearson_closed_forms():
    """No successes: P(Bin(n, p) = 0) = (1 - p)^n = level, so p = 1 - level^(1/n); n - 1 successes: 1 - p^n = level."""
    assert clopper_pearson_upper(0, 40, 0.025) == pytest.approx(1 - 0.025 ** (1 / 40), rel=1e-12)
    assert clopper_pearson_upper(39, 40, 0.025) == pytest.approx(0.975 ** (1 / 40), rel=1e-12)
    assert clopper_pearson_upper(40, 40, 0.025) == 1.0


def test_bound_against_a_hand_computed_case():
    """100 canary runs all flagged, 50 null runs none flagged, delta 0.01, 95%: FNR <= 1 - 0.025^(1/100) = 0.036214,
    FPR <= 1 - 0.025^(1/50) = 0.071163; log((1 - 0.01 - 0.036214) / 0.071163) = 2.5955 and
    log((1 - 0.01 - 0.071163) / 0.036214) = 3.2337: the bound is the larger."""
    fnr, fpr = 1 - 0.025 ** (1 / 100), 1 - 0.025 ** (1 / 50)
    expected = max(math.log((0.99 - fnr) / fpr), math.log((0.99 - fpr) / fnr))
    assert expected == pytest.approx(3.2337, abs=1e-4)
    assert epsilon_lower_bound(0, 100, 0, 50, 0.01, 0.95) == pytest.approx(expected, rel=1e-12)
    # a test no better than chance demonstrates nothing
    assert epsilon_lower_bound(50, 100, 25, 50, 0.01) == 0.0
    assert epsilon_lower_bound(100, 100, 0, 50, 0.0) == 0.0
    # vectorized over thresholds: the same figures
    both = epsilon_lower_bound(np.array([0, 50]), 100, np.array([0, 25]), 50, 0.01)
    assert both[0] == pytest.approx(expected, rel=1e-12) and both[1] == 0.0


def test_audit_scores_splits_its_runs_and_refuses_too_few():
    """Separated worlds: the threshold comes from the first halves, the bound is the second halves' (0 errors of
    50 and 50); identical worlds: near nothing."""
    rng = np.random.default_rng(0)  # the scores' own test data, not a release's randomness
    b = audit_scores(rng.normal(10, 1, 100), rng.normal(0, 1, 100), 1e-5)
    assert (b.false_negatives, b.positives, b.false_positives, b.negatives) == (0, 50, 0, 50)
    assert 0 < b.threshold < 10
    assert b.epsilon_lower == pytest.approx(epsilon_lower_bound(0, 50, 0, 50, 1e-5), rel=1e-12)
    same = audit_scores(rng.normal(0, 1, 400), rng.normal(0, 1, 400), 1e-5)
    assert same.epsilon_lower < 0.5
    with pytest.raises(UsageError, match="at least 4 finite scores"):
        audit_scores([1.0, 2.0], [0.0, 1.0, 2.0, 3.0], 1e-5)
    with pytest.raises(UsageError, match="confidence"):
        audit_scores(np.ones(8), np.zeros(8), 1e-5, confidence=1.0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_lower_bound_stays_below_the_claimed_epsilon(name):
    """The real release at epsilon 4 (its calibration's claim), 200 runs per world: the canary is seen (the
    statistic's mean moves by ||z||^2) but the bound stays below the claim (the next test shows the same audit
    exceeds a claim the noise does not meet)."""
    case = CASES[name](4.0, 1e-5, GAMMA, 30, make_rng(1))
    scores_in, scores_out, report = run_case(case, 200, seed=2)
    assert report.epsilon_server == pytest.approx(4.0, rel=1e-3) and report.neighbouring == ZERO_OUT
    bound = audit_scores(scores_in, scores_out, 1e-5)
    assert bound.epsilon_lower < report.epsilon_server
    # the canary shifts the statistic by ||z||^2 (up to rounding) in expectation: the test measures the release
    shift = float(case.z @ case.z)
    sd = math.sqrt(2 * report.mu) / report.scale  # every released entry's noise std; u'Gu's too (u a unit vector)
    assert abs(np.mean(scores_in) - np.mean(scores_out) - shift) < 4 * sd * math.sqrt(2 / 200)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_miscalibrated_release_is_caught(name):
    """Power: the same release with mu = 10 (noise std a few quantization steps) claiming epsilon 1 gives a lower
    bound above 1 from 100 runs per world."""
    case = CASES[name](1.0, 1e-5, GAMMA, 30, make_rng(1), mu=10.0)
    scores_in, scores_out, _ = run_case(case, 100, seed=3)
    assert audit_scores(scores_in, scores_out, 1e-5).epsilon_lower > 1.0


def test_the_command_prints_each_claim_with_its_relation(tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert main(["audit", "--releases", "pca,linreg", "--runs", "8", "--records", "10", "--gamma", "64",
                 "--seed", "1", "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("SIMULATION")
    for name in ("pca", "linreg"):
        line = next(li for li in text.splitlines() if li.startswith(f"{name}: claimed epsilon"))
        assert relation_phrase(ZERO_OUT, "the server") in line and "lower bound" in line
    assert ("not audited yet" in text) == bool(NOT_AUDITED) and all(k in text for k in NOT_AUDITED)
    doc = json.loads(out.read_text())
    assert (doc["command"], doc["mode"], doc["simulation"], doc["secure_mode"]) == ("audit", "local", True, False)
    assert [r["method"] for r in doc["results"]] == ["pca", "linreg"]
    assert all(r["runs_per_world"] == 8 and r["positives"] == 4 for r in doc["results"])
    with pytest.raises(SystemExit):
        main(["audit", "--releases", "svm"])


def test_the_command_lists_every_audited_release():
    """The command's light list of release types (its parser imports no numpy) is the table of cases, and no
    release type is both audited and listed as not audited."""
    from sqm.cli.audit import RELEASES

    from sqm.cli.audit import SCORED

    assert (*CASES, "pbm-vfl", *SCORED) == RELEASES and not set(RELEASES) & set(NOT_AUDITED)


def test_pbm_vfl_one_coordinate_stays_below_its_feature_level_claim():
    """PBM-VFL's default b and beta, one coordinate, 400 runs per world: the decoded sums differ by 2C on average
    (unbiased decoding), and the bound stays below the claimed feature-level epsilon."""
    scores_in, scores_out, claimed, _ = pbm_scores(1e-5, 400, seed=4)
    assert claimed > 1 and abs(np.mean(scores_in) - np.mean(scores_out) - 2.0) < 0.5
    assert audit_scores(scores_in, scores_out, 1e-5).epsilon_lower < claimed


def test_the_sgd_solver_and_hdp_vfl_stay_below_their_claims_and_are_caught_without_noise():
    """The sgd solver (full batches, two rounds; and Poisson batches at rate 1/2, four rounds, claimed by the
    subsampled accounting) and HDP-VFL at epsilon 1, 60 runs per world: the bound stays below the claim; the same
    trainings without noise (which no epsilon covers) give a bound above 1, so the audit can see the canary through
    the trained weights.  Without noise the subsampled training still varies with the other records' batches, so
    there the check is the canary's shift of the statistic: its mean moves by more than 4 standard errors."""
    from sqm.cli.audit_runs import SGD_SAMPLED_SCHEDULE, hdp_scores, logreg_sgd_scores

    for scored, noiseless, sampled in (
            (lambda **k: logreg_sgd_scores(1.0, 1e-5, GAMMA, 30, make_rng(5), 60, 6, **k), dict(noise=False), False),
            (lambda **k: logreg_sgd_scores(1.0, 1e-5, GAMMA, 30, make_rng(5), 60, 6, schedule=SGD_SAMPLED_SCHEDULE,
                                           **k), dict(noise=False), True),
            (lambda **k: hdp_scores(1.0, 1e-5, 30, make_rng(5), 60, 6, **k), dict(noiseless=True), False)):
        a = scored()
        assert a.claimed == 1.0 and a.report is not None
        assert audit_scores(a.scores_in, a.scores_out, 1e-5).epsilon_lower < a.claimed
        b = scored(**noiseless)
        if sampled:
            se = np.sqrt((np.var(b.scores_in) + np.var(b.scores_out)) / len(b.scores_in))
            assert np.mean(b.scores_in) - np.mean(b.scores_out) > 4 * se
        else:
            assert audit_scores(b.scores_in, b.scores_out, 1e-5).epsilon_lower > 1.0


def test_pbm_vfl_training_stays_below_its_sample_level_claim():
    """A training's releases of one record at PBM-VFL's defaults (every party, every coordinate, every epoch), 200
    runs per world: the decoded totals differ by 2 C P epochs M on average and the bound stays below the claimed
    sample-level epsilon."""
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.cli.audit_runs import pbm_sample_scores

    a = pbm_sample_scores(1e-5, 200, seed=7)
    cfg = VFLConfig()
    shift = 2 * cfg.C * cfg.embedding_size * cfg.epochs * 2
    assert a.relation == "sample" and abs(np.mean(a.scores_in) - np.mean(a.scores_out) - shift) < 0.1 * shift
    assert audit_scores(a.scores_in, a.scores_out, 1e-5).epsilon_lower < a.claimed
