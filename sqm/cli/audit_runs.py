"""The releases ``sqm audit`` runs: each release type's real SQM release (the clients' clipping, dependent rounding
and Skellam noise shares, the server's rescaling, the calibration and accounting of its report) on a small
synthetic data set with and without a canary record, many times, each run with fresh per-party seeds
(:func:`sqm.mechanism.rng.spawn_seeds`: OS entropy, or derived from ``--seed``), on the in-process simulation
(backend "plain": the same party programs as real processes, bit for bit: tests/test_linreg.py,
tests/test_lr_moments.py, tests/test_jobfile.py); the membership test's bound is :mod:`sqm.mechanism.audit`'s.

The canary sits at the clipping bound of every column group (so its squared norm is the sum of the groups' squared
bounds, the worst case the sensitivity covers) in the last column of each group of two or more columns, which the
other records leave at zero; single-column groups (the intercept's constant, the label, a client's lone feature) it
fills at their bound too.  Its neighbour is the null record of the zero-out relation: every value zero, the
intercept's constant included, the record count unchanged.  The test statistic is the released Gram's quadratic
form u' G u along the canary's direction u = z / ||z||: the canary adds ||z||^2 to it, the noise is symmetric.
PBM-VFL's release is audited apart (:func:`pbm_scores`: one embedding coordinate under its own relation;
:func:`pbm_sample_scores`: a training's releases of one record under the sample-level relation), as are the sgd
solver (:func:`logreg_sgd_scores`) and HDP-VFL (:func:`hdp_scores`), whose statistics are trained weights.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sqm.mechanism.release import SQM
    from sqm.mechanism.report import PrivacyReport
    from sqm.mechanism.vertical import VerticalData

NOT_AUDITED: dict[str, str] = {}
"""The release types ``sqm audit`` does not audit yet, in words (printed with every audit when there are any)."""


@dataclass
class AuditCase:
    """One release type to audit: ``mechanism`` (an :class:`sqm.mechanism.release.SQM` whose ``seed`` each run
    sets), the data with the canary (``data_in``) and with its null record (``data_out``), the canary ``z``, and
    ``statistic`` (the released estimate to the score)."""

    name: str
    mechanism: SQM
    data_in: VerticalData
    data_out: VerticalData
    z: np.ndarray
    statistic: Callable[[np.ndarray], float]


def canary_rows(bounds, n_records: int, rng: np.random.Generator, fill=None,
                canary: dict[int, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the other records, the canary z) for column groups ``bounds`` (a ColumnBounds): the records in the columns
    the canary leaves free, each group's sub-row at most 0.8 of its bound, single columns zero unless ``fill(X,
    rng)`` sets them (an intercept's constant, a label); the canary at every group's bound, or at ``canary``'s
    value for a column it names (a label's encoding whose sign is fixed)."""
    n_cols = sum(len(g) for g in bounds.groups)
    X = np.zeros((n_records, n_cols))
    z = np.zeros(n_cols)
    for cols, b in zip(bounds.groups, bounds.bounds, strict=True):
        z[cols[-1]] = b
        if len(cols) >= 2:
            free = list(cols[:-1])
            v = rng.standard_normal((n_records, len(free)))
            v *= (0.8 * b * rng.uniform(0, 1, (n_records, 1))) / np.linalg.norm(v, axis=1, keepdims=True)
            X[:, free] = v
    for j, value in (canary or {}).items():
        z[j] = value
    if fill is not None:
        fill(X, rng)
    return X, z


def _gram_statistic(z: np.ndarray) -> Callable[[np.ndarray], float]:
    u = z / np.linalg.norm(z)
    p = len(z)
    return lambda est: float(u @ np.asarray(est, np.float64).reshape(p, p) @ u)


def _worlds(X: np.ndarray, z: np.ndarray, col_counts):
    from sqm.mechanism.vertical import VerticalData

    def split(rows):
        edges = np.cumsum([0, *col_counts])
        return VerticalData([rows[:, a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)])

    return split(np.vstack([X, z])), split(np.vstack([X, np.zeros_like(z)]))


def pca_case(epsilon: float, delta: float, gamma: float, n_records: int, rng: np.random.Generator,
             mu: float | None = None) -> AuditCase:
    """SQM-PCA's release (the Gram X^T X, :func:`sqm.apps.pca.utility.covariance_release`), 2 clients of 2 columns
    each, row norm bound 1.  ``mu``: a noise parameter in place of the calibrated one (tests only: a release that
    does not meet its claimed epsilon)."""
    from sqm.apps.pca.utility import covariance_release

    col_counts = (2, 2)
    mech = covariance_release(sum(col_counts), gamma=gamma, epsilon=epsilon, delta=delta, backend="plain")
    if mu is not None:
        mech.mu = float(mu)
    X, z = canary_rows(mech.bounds_for(col_counts), n_records - 1, rng)
    d_in, d_out = _worlds(X, z, col_counts)
    return AuditCase("pca", mech, d_in, d_out, z, _gram_statistic(z))


def linreg_case(epsilon: float, delta: float, gamma: float, n_records: int, rng: np.random.Generator,
                mu: float | None = None) -> AuditCase:
    """SQM-linreg's release (the joint Gram of [X 1 y], :class:`sqm.apps.linreg.statistic.JointGram`), 4 features,
    an intercept and the label over 3 clients of 2 columns each, feature and label bounds 1."""
    from sqm.apps.linreg.statistic import JointGram, joint_bounds
    from sqm.mechanism.release import SQM

    col_counts = (2, 2, 2)
    bounds = joint_bounds(col_counts, 1.0, 1.0, True)
    mech = SQM(JointGram(sum(col_counts)), gamma, epsilon=epsilon, delta=delta, column_bounds=bounds,
               backend="plain")
    if mu is not None:
        mech.mu = float(mu)
    def fill(X, rng):  # the intercept's constant 1 and a label in +-0.8 of its bound
        X[:, 4] = 1.0
        X[:, 5] = rng.uniform(-0.8, 0.8, len(X))

    X, z = canary_rows(bounds, n_records - 1, rng, fill)
    d_in, d_out = _worlds(X, z, col_counts)
    return AuditCase("linreg", mech, d_in, d_out, z, _gram_statistic(z))


def logreg_moments_case(epsilon: float, delta: float, gamma: float, n_records: int, rng: np.random.Generator,
                        mu: float | None = None) -> AuditCase:
    """SQM-LR's default solver's release (the Gram of [x, c, kappa y, beta (1/2 - y)],
    :func:`sqm.apps.logreg.estimator.moments_release`), 2 clients of 2 features each, the second holding the label;
    the canary's label is 1 (kappa y and beta (1/2 - y) both at their bounds' magnitude)."""
    from sqm.apps.logreg.estimator import moments_release

    mech, layout = moments_release((2, 2), 1, gamma, epsilon, delta, backend="plain")
    if mu is not None:
        mech.mu = float(mu)
    col_counts = layout.block_counts
    bounds = mech.bounds_for(col_counts)

    def fill(X, rng):  # the constant, and the label's two columns of random 0/1 labels
        y = rng.integers(0, 2, len(X)).astype(np.float64)
        X[:, layout.constant_index] = layout.constant
        X[:, layout.label_index] = layout.label_weight * y
        X[:, layout.score_index] = layout.score_weight * (0.5 - y)

    X, z = canary_rows(bounds, n_records - 1, rng, fill, {layout.score_index: -layout.score_weight / 2.0})
    d_in, d_out = _worlds(X, z, col_counts)
    return AuditCase("logreg-moments", mech, d_in, d_out, z, _gram_statistic(z))


def correlation_case(epsilon: float, delta: float, gamma: float, n_records: int, rng: np.random.Generator,
                     mu: float | None = None) -> AuditCase:
    """The correlation release (the Gram of [X 1], :func:`sqm.apps.correlation.statistic.correlation_release`),
    3 features over 2 clients (2 and 1, the second also holding the constant column), row norm bound 1."""
    from sqm.apps.correlation.params import CorrelationParams
    from sqm.apps.correlation.statistic import correlation_release

    mech = correlation_release((2, 1), CorrelationParams(epsilon=epsilon, delta=delta, gamma=gamma))
    if mu is not None:
        mech.mu = float(mu)
    col_counts = (2, 2)  # the second client's feature and the constant

    def fill(X, rng):  # every record's constant 1
        X[:, 3] = 1.0

    X, z = canary_rows(mech.bounds_for(col_counts), n_records - 1, rng, fill)
    d_in, d_out = _worlds(X, z, col_counts)
    return AuditCase("correlation", mech, d_in, d_out, z, _gram_statistic(z))


CASES = {"pca": pca_case, "linreg": linreg_case, "logreg-moments": logreg_moments_case,
         "correlation": correlation_case}


def run_case(case: AuditCase, runs: int, seed=None) -> tuple[np.ndarray, np.ndarray, PrivacyReport]:
    """(scores with the canary, scores without, the release's privacy report): ``runs`` releases of each world,
    every one with its own seed (:func:`sqm.mechanism.rng.spawn_seeds`; ``seed`` None: OS entropy each)."""
    from sqm.mechanism.rng import spawn_seeds

    seeds = spawn_seeds(seed, 2 * runs)
    mech = case.mechanism
    _, report = mech.plan(case.data_in)
    scores = np.empty((2, runs))
    for i in range(runs):
        for w, data in enumerate((case.data_in, case.data_out)):
            mech.seed = seeds[2 * i + w]
            scores[w, i] = case.statistic(mech.run(data).estimate)
    return scores[0], scores[1], report


def pbm_scores(delta: float, runs: int, seed=None) -> tuple[np.ndarray, np.ndarray, float, str]:
    """PBM-VFL's release of one embedding coordinate at its default b and beta (:class:`sqm.apps.pbm_vfl.config.
    VFLConfig`), 2 parties: (decoded sums with party 0's value at +C, the same at -C (its embedding-level
    neighbour: one client's embedding of one record changed anywhere in [-C, C]), the claimed feature-level epsilon
    of that one release (:func:`sqm.mechanism.pbm.privacy_report`), the setting in words).  The other party's value
    sits at +C, where its coins are least random.  Each party's coins come from its own seed, as in training
    (:func:`sqm.mechanism.pbm.encode`); their sum is taken in the clear (the secure sum opens the same integer)."""
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.mechanism.pbm import decode, encode, privacy_report
    from sqm.mechanism.rng import spawn_seeds

    cfg, parties = VFLConfig(), 2
    b, beta, C = int(cfg.b), float(cfg.beta), float(cfg.C)
    claimed = privacy_report(b, beta, parties, 1, 1, delta).epsilon_feature
    seeds = spawn_seeds(seed, 2 * runs * parties)
    scores = np.empty((2, runs))
    for i in range(runs):
        for w, x0 in enumerate((C, -C)):
            q = sum(int(encode(np.array([x]), b, beta, C, seeds[(2 * i + w) * parties + m]).q[0])
                    for m, x in enumerate([x0] + [C] * (parties - 1)))
            scores[w, i] = float(decode(np.array([q]), b, beta, parties, C)[0])
    return scores[0], scores[1], float(claimed), f"b {b}, beta {beta:g}, {parties} parties, one coordinate"


@dataclass
class ScoredAudit:
    """A release type audited from its own scores (not a Gram): the statistic's values with the canary
    (``scores_in``) and with its neighbour (``scores_out``), the ``claimed`` epsilon, the relation's key
    (:data:`sqm.mechanism.report.RELATION_WORDS`), the observer it holds against, the ``setting`` in words and the
    privacy report when the release has one."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    claimed: float
    relation: str
    against: str
    setting: str
    report: PrivacyReport | None = None


def _records(n_records: int, d: int, rng: np.random.Generator, radius: float = 0.8) -> np.ndarray:
    """``n_records`` rows of ``d`` columns, each at a uniform fraction of ``radius`` in a random direction."""
    X = rng.standard_normal((n_records, d))
    return X * (radius * rng.uniform(0, 1, (n_records, 1))) / np.linalg.norm(X, axis=1, keepdims=True)


SGD_SCHEDULE = dict(sampling_rate=1.0, epochs=2)
"""The sgd solver's schedule ``logreg-sgd`` audits: full batches, two rounds (every round sees the canary: the
strongest audit of the composition)."""
SGD_SAMPLED_SCHEDULE = dict(sampling_rate=0.5, epochs=2)
"""The schedule ``logreg-sgd-sampled`` audits: Poisson batches at rate 1/2, four rounds; the claim is the
subsampled accounting's (amplification by sampling), the canary in each round's batch with probability 1/2."""
SGD_SCHEDULES = {"logreg-sgd": SGD_SCHEDULE, "logreg-sgd-sampled": SGD_SAMPLED_SCHEDULE}
"""The sgd solver's audited release types, each with its schedule."""


def logreg_sgd_scores(epsilon: float, delta: float, gamma: float, n_records: int, rng: np.random.Generator,
                      runs: int, seed=None, noise: bool = True, schedule: dict | None = None) -> ScoredAudit:
    """SQM-LR's sgd solver (:class:`sqm.apps.logreg.SQMLogisticRegression`, ``solver="sgd"``, its per-round Taylor
    gradients released to the server, the weights their post-processing), 4 features over 2 clients, no intercept
    (so the zero-out null record, all zeros with label 0, contributes nothing to any round), ``schedule`` (sampling
    rate and epochs; default :data:`SGD_SCHEDULE`, or :data:`SGD_SAMPLED_SCHEDULE`).
    The canary: every feature at 1/2 (norm 1, each client's sub-row at its bound) with label 1; the statistic the
    trained weights along it.  ``noise=False`` (tests only): the same training without noise, which no epsilon
    covers."""
    from sqm.apps.logreg import SQMLogisticRegression
    from sqm.mechanism.rng import spawn_seeds

    sched = SGD_SCHEDULE if schedule is None else schedule
    d = 4
    X, y = _records(n_records - 1, d, rng), rng.integers(0, 2, n_records - 1)
    z = np.full(d, 1.0 / np.sqrt(d))
    seeds = spawn_seeds(seed, 2 * runs)
    scores = np.empty((2, runs))
    report = None
    for i in range(runs):
        for w, (row, label) in enumerate(((z, 1), (np.zeros(d), 0))):
            m = SQMLogisticRegression(epsilon, delta, gamma, backend="in-process", n_parties=2, solver="sgd",
                                      fit_intercept=False, noise=noise, seed=seeds[2 * i + w],
                                      **sched).fit(np.vstack([X, row]), np.r_[y, label])
            scores[w, i] = float(np.asarray(m.coef_).reshape(-1) @ z)
            report = m.report_
    assert report is not None  # runs >= 1
    return ScoredAudit(scores[0], scores[1], float(epsilon), report.neighbouring, "the server",
                       f"{d} features, 2 clients, q {sched['sampling_rate']:g}, {sched['epochs']} epochs, "
                       "no intercept", report)


def hdp_scores(epsilon: float, delta: float, n_records: int, rng: np.random.Generator, runs: int,
               seed=None, noiseless: bool = False) -> ScoredAudit:
    """HDP-VFL (:class:`sqm.apps.hdp_vfl.HDPLogisticRegression`, the plain simulation of its two party programs), 2
    active and 2 passive features: the active party's canary record (its features at their bound, label +1) against
    its zero-out neighbour (its features zero), the passive party's part of that record the same in both worlds, at
    its bound.  The statistic, the passive party's trained weights along its part of the record, is a function of
    what the passive party receives (the active party's noisy residuals) and its own data: post-processing of the
    view the active party's guarantee is stated against.  ``noiseless`` (tests only): epsilon infinite, no noise."""
    import math

    from sqm.apps.hdp_vfl import HDPLogisticRegression
    from sqm.mechanism.rng import spawn_seeds

    XA, XB = _records(n_records - 1, 2, rng), _records(n_records - 1, 2, rng)
    y = rng.choice([0, 1], n_records - 1)
    za, zb = np.full(2, 1.0), np.full(2, 1.0)  # clipped by each party to its bound
    seeds = spawn_seeds(seed, 2 * runs)
    scores = np.empty((2, runs))
    report = None
    for i in range(runs):
        for w, (a_row, label) in enumerate(((za, 1), (np.zeros(2), 1))):
            m = HDPLogisticRegression(math.inf if noiseless else epsilon, delta, backend="plain",
                                      seed=seeds[2 * i + w])
            m.fit_parties(np.vstack([XA, a_row]), np.r_[y, label], np.vstack([XB, zb]))
            scores[w, i] = float(np.asarray(m.coef_passive_) @ zb)
            report = m.privacy_[0]  # the active party's records
    assert report is not None
    return ScoredAudit(scores[0], scores[1], float(epsilon), "zero-out", "the passive party",
                       "2 + 2 features; the active party's features of one record zeroed, its label and constant "
                       "kept: a replace-one pair, which HDP-VFL's lemmas bound", report)


def pbm_sample_scores(delta: float, runs: int, seed=None) -> ScoredAudit:
    """PBM-VFL's sample-level relation over a training run at its defaults (:class:`sqm.apps.pbm_vfl.config.
    VFLConfig`: b, beta, the embedding size P, the epochs), 2 parties: every party's embedding of the canary record,
    all P coordinates, at +C in every epoch's release, against -C (its sample-level neighbour); the statistic the
    sum of the decoded sums over coordinates and epochs; the claim :func:`sqm.mechanism.pbm.privacy_report`'s
    sample-level epsilon for that many releases.  Each party's coins come from its own seed, as in training."""
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.mechanism.pbm import decode, encode, privacy_report
    from sqm.mechanism.rng import spawn_seeds

    cfg, parties = VFLConfig(), 2
    b, beta, C, P, uses = int(cfg.b), float(cfg.beta), float(cfg.C), int(cfg.embedding_size), int(cfg.epochs)
    claimed = privacy_report(b, beta, parties, P, uses, delta).epsilon_sample
    seeds = iter(spawn_seeds(seed, 2 * runs * parties * uses))
    scores = np.zeros((2, runs))
    for i in range(runs):
        for w, x in enumerate((C, -C)):
            for _ in range(uses):
                q = sum(np.asarray(encode(np.full(P, x), b, beta, C, next(seeds)).q, dtype=np.int64)
                        for _ in range(parties))
                scores[w, i] += float(np.sum(decode(q, b, beta, parties, C)))
    return ScoredAudit(scores[0], scores[1], float(claimed), "sample", "the server",
                       f"b {b}, beta {beta:g}, P {P}, {uses} releases (epochs), {parties} parties")
