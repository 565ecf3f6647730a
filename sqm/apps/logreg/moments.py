"""SQM-LR's moments solver (what the default ``solver="auto"`` runs unless records per feature are few): ONE SQM
release of the records' second moments, then a model fitted from them at the server (post-processing: no further
privacy cost).

Why: the per-batch protocol (:mod:`sqm.apps.logreg.party`, ``solver="sgd"``) releases a Taylor
gradient every round, and every release pays for the worst record under the worst weights: its sensitivity
grows with the weight bound W (a record's gradient term x (1/2 + <w, x>/4 - y) has norm up to
c (1/2 + W c / 4)), and R rounds compose.  But the second-order Taylor loss the protocol descends,

    L(w) = sum_i [ (1/2 - y_i) <w, x_i> + <w, x_i>^2 / 8 ] + const,

depends on the data only through G = sum x x^T, s = sum x and h = sum y x: its gradient at every w, for every
batch, is a function of these moments.  So releasing them once, with noise, gives every later step for free:
no W in the sensitivity, no composition over rounds, no subsampling, no schedule.  They are the Gram matrix of
the augmented rows z = [x, c, kappa y, beta (1/2 - y)] (c :data:`CONSTANT`, the intercept's public constant, kappa
:data:`LABEL_WEIGHT`, beta :data:`SCORE_WEIGHT`: the score column, a third reading of h and s) -- the
covariance polynomial SQM-PCA releases, over the label party's block with three more columns -- so the release
is :class:`sqm.mechanism.release.SQM` of :func:`sqm.mechanism.polynomial.covariance` with its proven Gram sensitivity
(:func:`sqm.mechanism.sensitivity.gram_sensitivity`, the constant, label and score columns each a group of one
column).

The fit (:func:`fit_from_moments`): the minimizer of the Taylor loss with a ridge on the features (the intercept
unpenalized) has the Fisher discriminant's direction w = (S_W + lambda I)^-1 (m_1 - m_0) (S_W the within-class
scatter; Sherman-Morrison), and the logistic model whose log-odds are linear in x with that direction is LDA's
posterior; its intercept is LDA's threshold.  Both come from the released moments only; the threshold's class
separation is debiased for the release's known noise variance (the noise enters both the direction and the
separation, which inflates the latter; what the correction gains is in docs/benchmarks.md, "Figures behind
design choices").  Solved by hand: no library fits LDA from noisy second moments with a known noise
variance (scikit-learn's LDA takes the records).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sqm.errors import UsageError

# The constants below (c, kappa, beta, the ridge multiple, the variance floor's share) were chosen by
# ``python -m bench lr-constants`` on the training/validation splits of breast_cancer, credit_default and adult (never
# their test splits; c, kappa, beta and the ridge by mean validation AUC at epsilon 1 and 4, the floor's share, which
# leaves the AUC unchanged, by the validation accuracy of the model's own decision); the figures are in
# docs/benchmarks.md ("SQM-LR's constants chosen on validation").
LABEL_WEIGHT = 0.5  # kappa: the label column enters the Gram as kappa * y (y in {0, 1})
# kappa trades the noise on h = sum y x (which sets the direction and the threshold) against the noise on
# everything else (||z||^2 <= 1 + c^2 + kappa^2 + beta^2 / 4 scales all of it).
CONSTANT = 0.5  # c: the intercept's constant column in the released Gram (its value, public)
# c trades the noise on s = sum x (read from the constant's column, so its noise is divided by c) against the noise
# on everything else (||z||^2 scales all of it).
SCORE_WEIGHT = 1.5  # beta: the label party's block also holds beta (1/2 - y), the score column
# Its Gram column carries beta t, t = sum (1/2 - y) x = s / 2 - h, a third noisy reading of (h, s), and the fit combines
# the three by generalized least squares.  Why: the class means' difference u = m_1 - m_0 comes from h and s, and in
# the Gram their entries carry a small share of the sensitivity (h's noise is divided by kappa, s's by c), so u's noise
# sets the direction's error at a few thousand records.  The column adds beta^2 / 4 to ||z||^2 (every entry's noise
# grows with it) and reads t with noise / beta.
RIDGE_NOISE_MULTIPLE = 4.0  # lambda = this x the noise's standard deviation per entry x sqrt(features)
# A larger ridge moves the direction (S + lambda I)^-1 u towards the means' difference u itself: the noise on the
# scatter's small eigenvalues then steers w less.
SEPARATION_FLOOR = 0.05
SEPARATION_MARGIN_SD = 1.0  # the debiased class separation is kept >= this fraction of the raw one
VARIANCE_FLOOR_SHARE = 0.1
# The within-class variance along w is read from the scatter's eigenvalues, each raised to at least
# min(VARIANCE_FLOOR_SHARE x the mean eigenvalue, the noise's spectral scale noise_sd sqrt(2 d)): an eigenvalue below
# the noise's scale is not known, and the noise drives w towards exactly those directions (the PSD projection, a floor
# of 0, underestimates v against the records' own scatter along the same w).  No noise, no floor: the fit stays LDA's.
# The floor only scales the fitted model and moves its threshold: the direction, hence the AUC, does not depend on it.


@dataclass(frozen=True)
class MomentsLayout:
    """Where the features, the constant, the label and the score column sit among the released Gram's columns: the
    clients' blocks in client order, the label party's block [its features, the constant c, kappa y,
    beta (1/2 - y)]."""

    feature_counts: tuple[int, ...]
    label_party: int
    constant: float  # c: the intercept's public constant (:data:`CONSTANT`)
    label_weight: float = LABEL_WEIGHT
    score_weight: float = SCORE_WEIGHT

    ADDED = 3  # the constant, the label and the score column

    @property
    def block_counts(self) -> tuple[int, ...]:
        return tuple(c + self.ADDED * (j == self.label_party) for j, c in enumerate(self.feature_counts))

    @property
    def n_cols(self) -> int:
        return sum(self.block_counts)

    @property
    def constant_index(self) -> int:
        return sum(self.block_counts[: self.label_party + 1]) - self.ADDED

    @property
    def label_index(self) -> int:
        return self.constant_index + 1

    @property
    def score_index(self) -> int:
        return self.constant_index + 2

    @property
    def features(self) -> np.ndarray:
        added = (self.constant_index, self.label_index, self.score_index)
        return np.array([j for j in range(self.n_cols) if j not in added])

    def block(self, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """The label party's block: [features, c, kappa y, beta (1/2 - y)] (labels 0/1)."""
        n = features.shape[0]
        y = np.asarray(labels, np.float64).reshape(n, 1)
        return np.hstack([np.asarray(features, np.float64), np.full((n, 1), self.constant),
                          self.label_weight * y, self.score_weight * (0.5 - y)])

    def separate_bounds(self) -> dict[int, float]:
        """The three added columns' bounds, each its own group (:meth:`sqm.mechanism.vertical.ColumnBounds.parties`):
        |c| <= c, |kappa y| <= kappa and |beta (1/2 - y)| <= beta / 2."""
        return {self.constant_index: float(self.constant), self.label_index: float(self.label_weight),
                self.score_index: float(self.score_weight) / 2.0}


def check_label_weight(kappa: float) -> float:
    if not (isinstance(kappa, (int, float, np.floating)) and math.isfinite(kappa) and kappa > 0):
        raise UsageError(f"label_weight must be > 0, got {kappa!r}")
    return float(kappa)


def _psd(A: np.ndarray) -> np.ndarray:
    """The nearest positive semi-definite matrix (negative eigenvalues set to 0) of the symmetric part."""
    A = (A + A.T) / 2.0
    ev, U = np.linalg.eigh(A)
    return (U * np.maximum(ev, 0.0)) @ U.T


def _variance_along(w: np.ndarray, S: np.ndarray, noise_sd: float,
                    floor_share: float = VARIANCE_FLOOR_SHARE) -> float:
    """w^T S w with S's eigenvalues raised to at least min(``floor_share`` (:data:`VARIANCE_FLOOR_SHARE`) x their
    mean, the noise's spectral scale noise_sd sqrt(2 d)) (a floor of 0, the PSD projection, without noise)."""
    S = (S + S.T) / 2.0
    ev, U = np.linalg.eigh(S)
    d = ev.size
    floor = min(float(floor_share) * max(float(np.sum(ev)), 0.0) / d, noise_sd * math.sqrt(2.0 * d))
    return float(((U.T @ w) ** 2) @ np.maximum(ev, max(floor, 0.0)))


def fit_from_moments(K: np.ndarray, layout: MomentsLayout, n_records: int, noise_sd: float,
                     fit_intercept: bool = True, variance_scale: float = 1.0,
                     floor_share: float = VARIANCE_FLOOR_SHARE,
                     ridge_multiple: float = RIDGE_NOISE_MULTIPLE) -> tuple[np.ndarray, float]:
    """(w over the features in column order, intercept) from the noisy Gram ``K`` of the augmented rows (real
    units: the integers over gamma^2), ``n_records`` (public) and ``noise_sd`` (sqrt(2 mu) / gamma^2: the
    standard deviation of one entry's noise before symmetrization; the symmetrized off-diagonal has noise_sd^2 / 2).

    With ``fit_intercept``: LDA from the moments, m_1 = h / n_1, m_0 = (s - h) / n_0, the within-class scatter
    S = G - n_1 m_1 m_1^T - n_0 m_0 m_0^T (made PSD), direction w = (S + lambda I)^-1 (m_1 - m_0) with
    lambda = ``ridge_multiple`` (:data:`RIDGE_NOISE_MULTIPLE`) x noise_sd x sqrt(d); along w the classes have means
    w.m +- (class share) D and variance v = w^T S w / (N - 2) (S's eigenvalues floored where the noise hides
    them: :func:`_variance_along`), D = w.(m_1 - m_0) debiased by its noise part tr((S + lambda I)^-1)
    Var(noise of m_1 - m_0), the midpoint debiased for the noise w shares with s; the returned model is LDA's
    posterior log-odds (D / v)(w.x - t), t = the midpoint + (v / D) log(n_0 / n_1).
    Without: the Taylor loss's minimizer with no intercept, w = -4 (G + lambda I)^-1 (s / 2 - h).
    ``variance_scale`` (a diagnostic of ``python -m bench lr-threshold``; 1 in every fit): v multiplied by it;
    ``floor_share``: the eigenvalue floor's share of their mean (:data:`VARIANCE_FLOOR_SHARE`, a tuning knob)."""
    m = read_moments(K, layout, n_records, noise_sd, ridge_multiple)
    if not fit_intercept:
        A = _psd(m.G) + m.ridge * np.eye(m.s.size)
        return -4.0 * np.linalg.solve(A, m.s / 2.0 - m.h), 0.0
    lda = _discriminant(m, n_records, noise_sd, variance_scale, floor_share)
    if lda is None:
        return np.zeros(m.s.size), float(math.log(m.n1 / m.n0))
    t = lda.mid + lda.variance / lda.separation * math.log(lda.n0 / lda.n1)
    scale = lda.separation / lda.variance
    return lda.w * scale, -t * scale


@dataclass(frozen=True)
class Moments:
    """What the fit reads from the noisy Gram (symmetrized, real units): G = sum x x^T, s = sum x, h = sum y x, the
    class counts n1 (clipped to [1, N - 1]) and n0 = N - n1, the ridge lambda, and the noise covariance of one
    feature's (h, s) (``noise``, 2 x 2; the same for every feature)."""

    G: np.ndarray
    s: np.ndarray
    h: np.ndarray
    n1: float
    n0: float
    ridge: float
    noise: np.ndarray

    @property
    def scatter(self) -> np.ndarray:
        """The within-class scatter S = G - n1 m1 m1^T - n0 m0 m0^T (not made PSD)."""
        m1, m0 = self.h / self.n1, (self.s - self.h) / self.n0
        return self.G - self.n1 * np.outer(m1, m1) - self.n0 * np.outer(m0, m0)


def read_moments(K: np.ndarray, layout: MomentsLayout, n_records: int, noise_sd: float,
                 ridge_multiple: float = RIDGE_NOISE_MULTIPLE) -> Moments:
    """:class:`Moments` from the noisy Gram ``K`` of the augmented rows (see :func:`fit_from_moments`)."""
    K = np.asarray(K, np.float64)
    K = (K + K.T) / 2.0
    F, ci, li, kappa = layout.features, layout.constant_index, layout.label_index, layout.label_weight
    c, beta = float(layout.constant), float(layout.score_weight)
    N = float(n_records)
    n1 = float(np.clip(K[ci, li] / (c * kappa), 1.0, N - 1.0))
    ridge = max(float(ridge_multiple) * float(noise_sd) * math.sqrt(F.size), 1e-12)
    h, s = K[F, li] / kappa, K[F, ci] / c
    noise: np.ndarray = np.zeros((2, 2))
    tau2 = float(noise_sd) ** 2 / 2.0  # an off-diagonal entry's noise variance after symmetrization
    if tau2 > 0:
        # three readings of each feature's (h, s), each with independent noise: h (var tau2 / kappa^2), s (tau2 / c^2)
        # and t = s / 2 - h (tau2 / beta^2); generalized least squares, and its covariance
        A = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]])
        weights = np.array([kappa * kappa, c * c, beta * beta]) / tau2
        noise = np.linalg.inv(A.T @ (A * weights[:, None]))
        readings = np.vstack([h, s, K[F, layout.score_index] / beta])
        h, s = noise @ (A.T @ (readings * weights[:, None]))
    return Moments(G=K[np.ix_(F, F)], s=s, h=h, n1=n1, n0=N - n1, ridge=ridge, noise=noise)


@dataclass(frozen=True)
class Discriminant:
    """The classes along the fitted direction ``w``, as :func:`fit_from_moments` estimates them from the noisy
    moments: their midpoint, separation D and within-class variance v, the class counts; ``mid_correction`` is the
    part of ``mid`` that removes the bias of w.mbar (kept apart so that tests can measure it)."""

    w: np.ndarray
    mid: float
    mid_correction: float
    separation: float
    variance: float
    n1: float
    n0: float


def discriminant(K: np.ndarray, layout: MomentsLayout, n_records: int, noise_sd: float,
                 variance_scale: float = 1.0) -> Discriminant | None:
    """LDA along w = (S + lambda I)^-1 (m_1 - m_0) from the noisy Gram ``K`` (see :func:`fit_from_moments`); None
    when the raw separation (m_1 - m_0).w is not positive."""
    return _discriminant(read_moments(K, layout, n_records, noise_sd), n_records, noise_sd, variance_scale)


def _discriminant(m: Moments, n_records: int, noise_sd: float, variance_scale: float,
                  floor_share: float = VARIANCE_FLOOR_SHARE) -> Discriminant | None:
    """:func:`discriminant` from the moments already read."""
    s, h, n1, n0, N, d = m.s, m.h, m.n1, m.n0, float(n_records), m.s.size
    m1, m0 = h / n1, (s - h) / n0
    S_raw = m.scatter
    Si = np.linalg.inv(_psd(S_raw) + m.ridge * np.eye(d))
    u = m1 - m0
    w = Si @ u
    D_raw = float(u @ w)
    if not D_raw > 0:
        return None
    # u = a h + b s, a = 1/n1 + 1/n0, b = -1/n0; (h, s) per feature with the noise covariance m.noise
    a, b = 1.0 / n1 + 1.0 / n0, -1.0 / n0
    var_u = float(a * a * m.noise[0, 0] + b * b * m.noise[1, 1] + 2.0 * a * b * m.noise[0, 1])
    # the noise part of D_raw, u_n^T Si u_n with u_n ~ (0, var_u I): mean var_u tr(Si), sd var_u sqrt(2 tr(Si^2));
    # its mean is subtracted and SEPARATION_MARGIN_SD of its sd too: an overestimated separation moves the
    # threshold too little towards the majority class (measured below the majority rate on imbalanced data)
    noise_sd_D = var_u * math.sqrt(2.0 * float(np.sum(Si * Si)))
    D = max(D_raw - var_u * float(np.trace(Si)) - SEPARATION_MARGIN_SD * noise_sd_D, SEPARATION_FLOOR * D_raw)
    # ((w.m + p0 D) + (w.m - p1 D)) / 2, and the bias of w.mbar removed: w = Si u holds a e_h + b e_s (the noise on
    # h and s, independent of Si's entries), so E[w.e_s / N] = tr(Si) (a Cov(e_h, e_s) + b Var(e_s)) / N.  Measured on
    # breast_cancer at epsilon 1 (10 seeds, in process, before the score column): the midpoint's median error was
    # -0.82 within-class standard deviations along w without the correction, -0.30 with it; accuracy 0.812 -> 0.850
    correction = -float(np.trace(Si)) * float(a * m.noise[0, 1] + b * m.noise[1, 1]) / N
    mid = float(w @ (s / N)) + (n0 - n1) / N * D / 2.0 + correction
    v = max(float(variance_scale) * _variance_along(w, S_raw, float(noise_sd), floor_share) / max(N - 2.0, 1.0),
            1e-300)
    return Discriminant(w=w, mid=mid, mid_correction=correction, separation=D, variance=v, n1=n1, n0=n0)


def fit_release(estimate, layout: MomentsLayout, n_records: int, mu: float, gamma: float,
                fit_intercept: bool = True, floor_share: float = VARIANCE_FLOOR_SHARE,
                ridge_multiple: float = RIDGE_NOISE_MULTIPLE) -> tuple[np.ndarray, np.ndarray, float]:
    """(the released Gram as a square matrix, w, intercept) from the release's estimate (the integers over
    gamma^2) and its public mu: :func:`fit_from_moments` with the noise's standard deviation per entry
    sqrt(2 mu) / gamma^2 (local and job mode alike); ``floor_share``, ``ridge_multiple``: the fit's two knobs
    (:func:`fit_from_moments`)."""
    K = np.asarray(estimate, np.float64).reshape(layout.n_cols, layout.n_cols)
    w, b = fit_from_moments(K, layout, n_records, math.sqrt(2.0 * mu) / float(gamma) ** 2, fit_intercept,
                            floor_share=floor_share, ridge_multiple=ridge_multiple)
    return K, w, b
