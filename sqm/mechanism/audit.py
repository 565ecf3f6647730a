"""Empirical privacy audits: a lower bound on epsilon from a membership test on many real releases.

A mechanism M is (epsilon, delta)-DP under a neighbouring relation when, for every pair of neighbouring data sets
D (with a canary record) and D' (the canary replaced by its neighbour: here zero-out's null record) and every test
that decides "canary in" from the output, the test's false positive rate (FPR: says "in" on D') and false negative
rate (FNR: says "out" on D) satisfy

    FNR + e^epsilon FPR >= 1 - delta   and   FPR + e^epsilon FNR >= 1 - delta

(Kairouz, Oh and Viswanath 2015; the auditing argument of Jagielski, Ullman and Oprea 2020, "Auditing
differentially private machine learning: how private is private SGD?", and Nasr et al. 2021, "Adversary
instantiation: lower bounds for differentially private machine learning").  So any observed test gives

    epsilon >= max( log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR) ).

The rates are estimated from runs; to keep the bound a bound at a stated confidence, FPR and FNR are replaced by
their one-sided Clopper-Pearson upper limits (each at (1 - confidence) / 2, so both hold together at
``confidence`` by the union bound), and the test's threshold is chosen on one half of the runs
(:func:`choose_threshold`) and evaluated on the other half only (:func:`audit_scores`; so choosing it costs no
correction).  A lower bound below the claimed epsilon is what a correct mechanism must give; it proves nothing
about the claim's tightness beyond the test's own power (one canary, one statistic, finitely many runs).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from sqm.errors import UsageError


@dataclass(frozen=True)
class AuditBound:
    """One membership test's figures: the ``epsilon_lower`` bound (at ``confidence``), the ``threshold`` (on the
    statistic times the test's ``orientation``: +1, "canary in" above it, -1, below; both chosen on the other
    half of the runs), the evaluation half's counts (``false_negatives`` of ``positives`` runs with the canary,
    ``false_positives`` of ``negatives`` runs without) and ``delta``."""

    epsilon_lower: float
    threshold: float
    false_negatives: int
    positives: int
    false_positives: int
    negatives: int
    delta: float
    confidence: float
    orientation: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


def _check(delta: float, confidence: float) -> None:
    if not 0 <= delta < 1:
        raise UsageError(f"delta must lie in [0, 1), got {delta!r}")
    if not 0 < confidence < 1:
        raise UsageError(f"confidence must lie in (0, 1), got {confidence!r}")


def clopper_pearson_upper(k, n: int, level: float):
    """The one-sided Clopper-Pearson upper limit of a binomial rate after ``k`` successes in ``n`` trials: the
    rate p with P(Bin(n, p) <= k) = ``level`` (1 when k = n).  Array-valued in ``k``."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=np.float64)
    out = np.where(k >= n, 1.0, beta.ppf(1.0 - level, k + 1.0, np.maximum(n - k, 1.0)))
    return float(out) if out.ndim == 0 else out


def epsilon_lower_bound(false_negatives, positives: int, false_positives, negatives: int, delta: float,
                        confidence: float = 0.95):
    """The epsilon lower bound of a test that missed ``false_negatives`` of ``positives`` canary runs and flagged
    ``false_positives`` of ``negatives`` null runs (module docstring); 0 where the test demonstrates nothing.
    Array-valued in the two counts (one per threshold)."""
    _check(delta, confidence)
    if positives < 1 or negatives < 1:
        raise UsageError(f"a membership test needs runs of both worlds, got {positives} and {negatives}")
    level = (1.0 - confidence) / 2.0
    fnr = np.asarray(clopper_pearson_upper(false_negatives, positives, level))
    fpr = np.asarray(clopper_pearson_upper(false_positives, negatives, level))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fnr, 0.0) / fpr)
        b = np.log(np.maximum(1.0 - delta - fpr, 0.0) / fnr)
    out = np.maximum(np.maximum(np.nan_to_num(a, nan=0.0, neginf=0.0), np.nan_to_num(b, nan=0.0, neginf=0.0)), 0.0)
    return float(out) if out.ndim == 0 else out


def _counts(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray):
    """(false negatives, false positives) of the test "canary in when score > t" at every threshold t."""
    fn = np.searchsorted(np.sort(scores_in), thresholds, side="right")  # canary runs at or below t
    fp = len(scores_out) - np.searchsorted(np.sort(scores_out), thresholds, side="right")  # null runs above t
    return fn, fp


def choose_threshold(scores_in, scores_out, delta: float, confidence: float = 0.95) -> float:
    """The threshold whose bound on these runs is largest (every midpoint between the sorted scores tried): the
    Clopper-Pearson limits already penalize a threshold that rests on a handful of runs in a tail."""
    s_in, s_out = np.asarray(scores_in, np.float64), np.asarray(scores_out, np.float64)
    allv = np.unique(np.concatenate([s_in, s_out]))
    cand = np.concatenate([[allv[0] - 1.0], (allv[1:] + allv[:-1]) / 2.0, [allv[-1] + 1.0]])
    fn, fp = _counts(s_in, s_out, cand)
    eps = np.atleast_1d(epsilon_lower_bound(fn, len(s_in), fp, len(s_out), delta, confidence))
    return float(cand[int(np.argmax(eps))])


def audit_scores(scores_in, scores_out, delta: float, confidence: float = 0.95) -> AuditBound:
    """The membership test's epsilon lower bound from the statistic's values in runs with the canary
    (``scores_in``) and without it (``scores_out``): the threshold and the orientation (the canary moving the
    statistic up or down; a trained model's response to it may go either way) chosen on the first half of each,
    the bound evaluated on the second half (the runs are independent, so the split is fair)."""
    _check(delta, confidence)
    s_in, s_out = np.asarray(scores_in, np.float64), np.asarray(scores_out, np.float64)
    if len(s_in) < 4 or len(s_out) < 4 or not (np.all(np.isfinite(s_in)) and np.all(np.isfinite(s_out))):
        raise UsageError(f"an audit needs at least 4 finite scores per world, got {len(s_in)} and {len(s_out)}")
    hi, ho = len(s_in) // 2, len(s_out) // 2

    def first_half(sign: int) -> tuple[float, float]:
        t = choose_threshold(sign * s_in[:hi], sign * s_out[:ho], delta, confidence)
        fn, fp = _counts(sign * s_in[:hi], sign * s_out[:ho], np.array([t]))
        return float(np.atleast_1d(epsilon_lower_bound(fn, hi, fp, ho, delta, confidence))[0]), t

    (_, t), sign = max((first_half(sg), sg) for sg in (1, -1))  # ties: +1 (max keeps the first of equals)
    fn, fp = _counts(sign * s_in[hi:], sign * s_out[ho:], np.array([t]))
    eps = float(np.atleast_1d(epsilon_lower_bound(int(fn[0]), len(s_in) - hi, int(fp[0]), len(s_out) - ho, delta,
                                                  confidence))[0])
    return AuditBound(eps if math.isfinite(eps) else 0.0, t, int(fn[0]), len(s_in) - hi, int(fp[0]),
                      len(s_out) - ho, float(delta), float(confidence), sign)
