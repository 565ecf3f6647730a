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
``confidence`` by the union bound), and the test's threshold is chosen on one half of the runs and evaluated on the
other half only (so choosing it costs no correction).  A lower bound below the claimed epsilon is what a correct
mechanism must give; it proves nothing about the claim's tightness beyond the test's own power (one canary, one
statistic, finitely many runs).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """The one-sided upper confidence limit at level 1 - alpha of a binomial rate with ``k`` successes in ``n``."""
    from scipy.stats import beta

    if k >= n:
        return 1.0
    return float(beta.ppf(1.0 - alpha, k + 1, n - k))


def epsilon_from_rates(fpr: float, fnr: float, delta: float) -> float:
    """The epsilon lower bound a test with these rates proves (0 when it proves nothing)."""
    best = 0.0
    for a, b in ((fpr, fnr), (fnr, fpr)):
        num = 1.0 - delta - b
        if num > 0:
            best = max(best, math.inf if a <= 0 else math.log(num / a))
    return best


def epsilon_lower_bound(scores_in, scores_out, threshold: float, delta: float, confidence: float = 0.95) -> float:
    """The epsilon lower bound, at ``confidence``, of the test "canary in when score >= threshold" on runs with the
    canary (``scores_in``) and without (``scores_out``): Clopper-Pearson upper limits of FPR and FNR, each at
    (1 - confidence) / 2."""
    s_in, s_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    alpha = (1.0 - confidence) / 2.0
    fp = int(np.sum(s_out >= threshold))
    fn = int(np.sum(s_in < threshold))
    return epsilon_from_rates(clopper_pearson_upper(fp, len(s_out), alpha),
                              clopper_pearson_upper(fn, len(s_in), alpha), delta)


def best_threshold(scores_in, scores_out, delta: float) -> float:
    """The threshold among the observed scores whose point-estimate bound is largest (chosen on held-in runs)."""
    s_in, s_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    candidates = np.unique(np.concatenate([s_in, s_out]))
    best_t, best_e = float(candidates[0]), -1.0
    for t in candidates:
        fpr = np.mean(s_out >= t)
        fnr = np.mean(s_in < t)
        # a rate of 0 observed is taken as half a run: the point estimate would be infinite for every such t
        e = epsilon_from_rates(max(fpr, 0.5 / len(s_out)), max(fnr, 0.5 / len(s_in)), delta)
        if e > best_e:
            best_t, best_e = float(t), e
    return best_t


@dataclass(frozen=True)
class AuditBound:
    """One audit's bound: ``epsilon_lower`` at ``confidence``, the threshold (chosen on the first half of each
    side's runs) and its errors on the held-out halves (``positives`` runs with the canary, ``negatives`` without)."""

    epsilon_lower: float
    confidence: float
    threshold: float
    positives: int
    negatives: int
    false_negatives: int
    false_positives: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def audit_scores(scores_in, scores_out, delta: float, confidence: float = 0.95) -> AuditBound:
    """The threshold chosen on the first half of each side's runs, the bound measured on the second half."""
    s_in, s_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    hi, ho = len(s_in) // 2, len(s_out) // 2
    t = best_threshold(s_in[:hi], s_out[:ho], delta)
    test_in, test_out = s_in[hi:], s_out[ho:]
    lb = epsilon_lower_bound(test_in, test_out, t, delta, confidence)
    return AuditBound(float(lb), float(confidence), t, len(test_in), len(test_out), int(np.sum(test_in < t)),
                      int(np.sum(test_out >= t)))
