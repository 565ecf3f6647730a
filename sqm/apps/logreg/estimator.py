"""SQM-LR's scikit-learn classifier, :class:`SQMLogisticRegression` (Section 5.2 of the SQM paper): parameters,
the public plan and privacy report, and the run of the parties' program (:mod:`sqm.apps.logreg.party`).

    SQMLogisticRegression(epsilon=1, delta=1e-5, gamma=8192).fit(X, y)
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from sqm.framework.progress import make_bar
from sqm.mechanism import accounting, events
from sqm.mechanism.polynomial import covariance
from sqm.mechanism.release import SQM
from sqm.mechanism.report import PrivacyReport
from sqm.mechanism.rng import spawn_seeds
from sqm.mechanism.sensitivity import BASE_RATE
from sqm.mechanism.validation import check_epsilon
from sqm.mechanism.vertical import ColumnBounds, VerticalData, party_norm_bounds
from sqm.apps.logreg import party
from sqm.apps.logreg.moments import CONSTANT, LABEL_WEIGHT, SCORE_WEIGHT, MomentsLayout, fit_release
from sqm.apps.logreg.params import EPOCHS, LEARNING_RATE, SAMPLING_RATE, SOLVERS, LogRegParams  # noqa: F401
from sqm.apps.logreg.party import LRPlan, batch_cap
from sqm.apps.logreg import texts
from sqm.apps.logreg.texts import SCHEDULE_HELP, SOLVER_HELP  # noqa: F401 (re-exported)
from sqm.errors import UsageError

PAPER_EPOCHS = {0.5: 2, 1.0: 5, 2.0: 8, 4.0: 10, 8.0: 10}  # Section 6.2
MODEL_SHARED_NOTE = ("clients observe nothing during training (only Shamir shares); the client-observed epsilon "
                     "is the guarantee of the final model only if the server chooses to share it with them")


def paper_epochs(epsilon: float) -> int:
    """The paper's epochs for epsilon in {0.5, 1, 2, 4, 8}; the nearest listed epsilon otherwise."""
    key = min(PAPER_EPOCHS, key=lambda e: abs(math.log(e) - math.log(epsilon)))
    return PAPER_EPOCHS[key]


@dataclass(frozen=True)
class Schedule:
    """A training run's public schedule: Poisson sampling rate, epochs, learning rate, ||w|| bound."""

    q: float
    epochs: int
    learning_rate: float
    weight_bound: float


BATCH_MIN = 64  # the smallest expected batch the default schedule aims for (see default_schedule)


def default_schedule(n_records: int, epsilon: float) -> Schedule:
    """The defaults of every SQM-LR run chosen from the record count n (local and job mode alike):

    - q = min(1, max(64, sqrt(n)) / n): an expected batch of max(64, sqrt(n)) records;
    - epochs: the paper's for this epsilon (2, 5, 8, 10, 10 at 0.5, 1, 2, 4, 8);
    - learning rate 2 and ||w|| <= 8.

    Why these: with a smaller weight bound the Taylor reference learns nothing (the rows' small features need
    large weights), a larger learning rate oscillates (the intercept's direction has curvature c^2 / 4 = 1/4),
    a larger weight bound raises SQM's sensitivity (DPSGD's does not), and larger batches leave too few steps at
    the paper's epochs; the measurements are in docs/benchmarks.md ("Figures behind design choices")."""
    check_epsilon(epsilon)
    n = int(n_records)
    if n < 1:
        raise UsageError(f"need at least one record, got {n_records!r}")
    q = min(1.0, max(BATCH_MIN, math.sqrt(n)) / n)
    return Schedule(q=q, epochs=paper_epochs(epsilon), learning_rate=2.0, weight_bound=8.0)


def resolve_schedule(n_records: int, epsilon: float, q=None, epochs=None, learning_rate=None,
                     weight_bound=None) -> Schedule:
    """The schedule a run on ``n_records`` records uses: the values given, the rest :func:`default_schedule`'s
    (validated; SQM and its baselines alike)."""
    auto = default_schedule(n_records, epsilon)
    pick = lambda given, default: default if given is None else given  # noqa: E731
    s = Schedule(q=float(pick(q, auto.q)), epochs=pick(epochs, auto.epochs),
                 learning_rate=float(pick(learning_rate, auto.learning_rate)),
                 weight_bound=float(pick(weight_bound, auto.weight_bound)))
    check_schedule(s.q, s.epochs, s.learning_rate)
    if not (math.isfinite(s.weight_bound) and s.weight_bound > 0):
        raise UsageError(f"weight_bound must be > 0, got {weight_bound!r}")
    return dataclasses.replace(s, epochs=int(s.epochs))



# solver="auto"'s sgd choice: one full-batch round, one noisy gradient at w = 0 (the direction sum x (1/2 - y) and
# the intercept's): the whole budget on d + 1 numbers where the moments release spreads it over (d + 3)^2 / 2; the
# small weight bound keeps the round's sensitivity small.  The threshold on n epsilon / d (records times epsilon per
# feature column) was chosen on the tuning sets' subsamples (python -m bench lr-select --study solvers), the floor
# AUTO_MIN_COLUMNS on d on their random feature subsets (--features 4, 8, 16): below 30 columns the moments fit did
# not catch up with the round at a smaller n epsilon, so for d <= 30 the crossover stays at n epsilon = 150
AUTO_ROUND = Schedule(q=float(texts.AUTO_ROUND["q"]), epochs=int(texts.AUTO_ROUND["epochs"]),
                      learning_rate=float(texts.AUTO_ROUND["learning_rate"]),
                      weight_bound=float(texts.AUTO_ROUND["weight_bound"]))
AUTO_THRESHOLD = texts.AUTO_THRESHOLD
AUTO_MIN_COLUMNS = texts.AUTO_MIN_COLUMNS


def auto_solver(n_records: int, n_features: int, epsilon: float, robust_noise: int = 0,
                verify_inputs: bool = False) -> tuple[str, str]:
    """(the solver ``solver="auto"`` runs, why) from public quantities only: the record count n, the feature
    column count d (the label and the intercept's constant excluded) and epsilon.  The moments release when
    ``robust_noise`` or ``verify_inputs`` is set (they apply to it only) or n epsilon / max(d,
    :data:`AUTO_MIN_COLUMNS`) >= :data:`AUTO_THRESHOLD`; else one full-batch sgd round (:data:`AUTO_ROUND`), whose
    single noisy gradient holds more signal than the moments' many noisy entries when few records carry each
    feature's share of the budget.  The round ranks records well (its AUC) but its own threshold, one gradient
    step's intercept, leans to the majority class, while the moments fit places LDA's threshold: the threshold is
    the largest at which the round's predictions were never less accurate than the moments fit's on the tuning
    sets, so the round runs only where it wins on both.  On their random subsets of 4, 8 and 16 columns the moments
    fit fell behind further than n epsilon / d says (breast cancer, 150 records, 8 columns, epsilon 1: AUC 0.816
    against the round's 0.947): the floor on d, chosen from none and {8, 12, 16, 20, 24, 30, 40} as the one of
    highest mean accuracy over those 72 cells, keeps the round up to n epsilon = 150 for every d <= 30."""
    if robust_noise or verify_inputs:
        given = "robust_noise" if robust_noise else "verify_inputs"
        return "moments", f"{given} applies to the moments release only"
    cols = max(int(n_features), AUTO_MIN_COLUMNS)
    ratio = float(n_records) * float(epsilon) / cols
    said = f"n epsilon / max(d, {AUTO_MIN_COLUMNS}) = {n_records} x {epsilon:g} / {cols} = {ratio:.4g}"
    if ratio < AUTO_THRESHOLD:
        return "sgd", f"{said} < {AUTO_THRESHOLD:g}: one full-batch sgd round"
    return "moments", f"{said} >= {AUTO_THRESHOLD:g}"


def moments_release(feature_counts, label_party: int, gamma: float, epsilon: float, delta: float,
                    constant: float | None = None, party_bounds=None, backend: str = "plain", seed=None, timeout=3600.0,
                    chunk_rows=None, label_weight=None, robust_noise: int = 0, verify_sharing: bool = False,
                    score_weight=None, verify_inputs: bool = False):
    """(the :class:`sqm.mechanism.release.SQM` release of the augmented rows' Gram, its
    :class:`sqm.apps.logreg.moments.MomentsLayout`) for clients holding ``feature_counts`` feature columns (the
    label party's features bounded with the others' by ||x||_2 <= 1, the constant and kappa y each a column of its
    own): the moments solver's one release (:mod:`sqm.apps.logreg.moments`); ``robust_noise``, ``verify_sharing``,
    ``verify_inputs``:
    :class:`sqm.mechanism.release.SQM`'s; ``constant``, ``label_weight``, ``score_weight`` None: the defaults
    c, kappa, beta (:mod:`sqm.apps.logreg.moments`)."""
    kappa = LABEL_WEIGHT if label_weight is None else float(label_weight)
    constant = CONSTANT if constant is None else float(constant)
    beta = SCORE_WEIGHT if score_weight is None else float(score_weight)
    layout = MomentsLayout(tuple(int(c) for c in feature_counts), int(label_party), constant, kappa, beta)
    bounds = ColumnBounds.parties(layout.block_counts, 1.0, party_bounds, separate=layout.separate_bounds())
    backend = "plain" if backend == "in-process" else backend
    opts = {"timeout": float(timeout)} if backend == "mpyc" else None
    mech = SQM(covariance(layout.n_cols), gamma, epsilon=epsilon, delta=delta, column_bounds=bounds,
               backend=backend, seed=seed, backend_options=opts, chunk_rows=chunk_rows, robust_noise=robust_noise,
               verify_sharing=verify_sharing, verify_inputs=verify_inputs)
    return mech, layout




def intercept_note(plan: LRPlan) -> str:
    if not plan.has_intercept:
        return "no intercept"
    return (f"intercept: a public constant column {plan.intercept:g} at the label party, counted in the "
            f"sensitivity (row norm <= sqrt(1 + {plan.intercept:g}^2))")


def split_weights(w, plan: LRPlan) -> tuple[np.ndarray, np.ndarray]:
    """(coef_ of shape (1, features), intercept_ of shape (1,)) from the protocol's weights (the constant
    column's weight at ``plan.intercept_index``, times the constant, is the intercept, plus the expansion point's
    b0 = logit(base_rate): 0 at the default 1/2)."""
    w = np.asarray(w, np.float64)
    b0 = math.log(float(plan.base_rate) / (1.0 - float(plan.base_rate)))  # log(1) = 0 at 1/2
    if not plan.has_intercept:
        return w.reshape(1, -1), np.array([b0])
    k = plan.intercept_index
    assert k is not None  # a plan with an intercept has its column
    return np.delete(w, k).reshape(1, -1), np.array([w[k] * plan.intercept + b0])


def check_labels(y, n: int | None = None) -> np.ndarray:
    if y is None:
        raise UsageError("labels are missing: one client (the label party) must hold the label column")
    y = np.asarray(y)
    if y.ndim != 1:
        raise UsageError(f"labels must be a 1-D array, got shape {y.shape}")
    if n is not None and y.shape[0] != n:
        raise UsageError(f"{y.shape[0]} labels for {n} records")
    yf = y.astype(np.float64)
    if not np.all(np.isfinite(yf)) or not np.all((yf == 0) | (yf == 1)):
        bad = sorted(set(np.unique(y[~((yf == 0) | (yf == 1))]).tolist()))[:5]
        raise UsageError(f"labels must be 0 or 1; found {bad}")
    return yf


def binary_labels(values) -> tuple[np.ndarray, list]:
    """A label column of any two distinct values as 0/1 (the smaller value 0, the larger 1: {0, 1}, {1, 2},
    {-1, +1}, {False, True}...) and the two values (negative, positive).  ValueError naming the problem and
    the fix for one value, more than two, or a missing (NaN) one."""
    v = np.asarray(values)
    if v.ndim != 1 or v.size == 0:
        raise UsageError(f"the label column must hold one value per record, got shape {v.shape}")
    if v.dtype.kind == "f" and np.isnan(v).any():
        raise UsageError(f"the label column has {int(np.isnan(v).sum())} missing value(s): every record needs "
                         f"a label (drop or label those records)")
    classes = np.unique(v)
    if classes.size != 2:
        shown = ", ".join(f"{c:g}" if isinstance(c, float) else str(c) for c in classes[:5].tolist())
        raise UsageError(f"the label column holds {classes.size} distinct value(s) ({shown}"
                         f"{', ...' if classes.size > 5 else ''}): logistic regression needs exactly two "
                         f"classes; recode it to two values (e.g. 0/1) or choose another --label-column")
    return (v == classes[1]).astype(np.float64), classes.tolist()


def label_mapping_note(classes) -> str:
    """What :func:`binary_labels` did, in words: "{1, 2} mapped to 0/1 (2 = positive)"."""
    a, b = (f"{c:g}" if isinstance(c, float) else str(c) for c in classes)
    if {a, b} == {"0", "1"}:
        return "0/1 (1 = positive)"
    return f"{{{a}, {b}}} mapped to 0/1 ({b} = positive)"


def split_label(block, columns, label_column: str, where: str) -> tuple[np.ndarray, np.ndarray, list, str]:
    """(features, labels as 0/1, feature column names, the label mapping in words) of a table whose column
    ``label_column`` is the label; ValueError naming ``where`` (the file), --label-column and the columns when
    it is absent, and :func:`binary_labels`'s problem and fix when it does not hold exactly two values."""
    columns = list(columns)
    if label_column not in columns:
        raise UsageError(f"{where} has no label column '{label_column}': name it with --label-column; its columns "
                         f"are {columns[:20]}{' ...' if len(columns) > 20 else ''}")
    k = columns.index(label_column)
    try:
        y, classes = binary_labels(np.asarray(block)[:, k])
    except ValueError as e:
        raise UsageError(f"{where}: {e}") from None
    return np.delete(block, k, axis=1), y, columns[:k] + columns[k + 1:], label_mapping_note(classes)


def check_schedule(q: float, epochs, learning_rate: float) -> None:
    """A schedule's values inside their declared domains (:mod:`sqm.apps.logreg.params`), none left None."""
    for p, value, name in ((SAMPLING_RATE, q, "sampling_rate"), (EPOCHS, epochs, "epochs"),
                           (LEARNING_RATE, learning_rate, "learning_rate")):
        dataclasses.replace(p, optional=False).check(value, name)


def steps(q: float, epochs: int) -> int:
    """Rounds R = epochs * round(1/q) (one epoch is 1/q Poisson-sampled batches)."""
    return int(epochs) * max(1, int(round(1.0 / q)))


def _progress(total: int | None, desc: str, enabled: bool, figure: str = "loss"):
    """A bar over rounds (:func:`sqm.framework.progress.make_bar`) and its callback(i, value): ``figure`` names
    the server's running value."""
    bar = make_bar(total=total, desc=desc, disable=not enabled, leave=False, unit="round")
    state = {"n": 0}

    def cb(i: int, value: float):
        bar.update(i - state["n"])
        state["n"] = i
        bar.set_postfix_str(f"{figure} {value:.4g}")
    return bar, cb


P = LogRegParams  # the declared defaults of SQMLogisticRegression's release parameters


class SQMLogisticRegression(ClassifierMixin, BaseEstimator):
    """Logistic regression trained with SQM on vertically partitioned data (a scikit-learn binary classifier).

    ``fit(X, y)``: ``X`` is a ``VerticalData`` of feature blocks (client j holds ``X.blocks[j]``) or a matrix
    split into ``n_parties`` contiguous column blocks; ``y`` holds any two labels (``classes_``, sorted; the
    second is the positive class, 1 inside the protocol) and is held by client ``label_party`` (0-based,
    default the last).  Each client's feature sub-rows are clipped to its bound c_j (sum c_j^2 = 1, so
    ||x||_2 <= 1; counted in ``clipped_``).  ``fit_intercept`` (default True, as scikit-learn): the label party
    appends a public constant column of value ``intercept_scaling`` (c, default 1; scikit-learn's liblinear
    convention), whose weight times c is ``intercept_``; the sensitivity counts it as a feature (a record's
    row then has norm <= sqrt(1 + c^2)).  The weights, the constant's included, are projected onto
    ||w||_2 <= W.  ``sampling_rate``, ``epochs``, ``learning_rate``, ``weight_bound`` left None are chosen in
    ``fit`` from the record count by :func:`default_schedule` (``schedule_`` holds what ran).  ``solver``: "moments"
    (one release of the second moments, :mod:`sqm.apps.logreg.moments`), "sgd" (the per-batch protocol below) or
    "auto" (default: one of them chosen from the record count, the feature column count and epsilon by
    :func:`auto_solver`); ``solver_`` and ``solver_reason_`` say which ran and why.
    mu is calibrated before training for the server-observed (epsilon, delta) over R = epochs * round(1/q)
    Poisson-subsampled rounds (Eq. 20) with the proven sensitivity of
    :func:`sqm.mechanism.sensitivity.logreg_sensitivity`.  The weights stay at the server (their coefficients are
    secret-shared): during training the clients observe nothing but Shamir shares.  ``report_``
    (:class:`sqm.mechanism.report.PrivacyReport`): its ``epsilon_client`` (Eq. 21: a client knows the batches and
    its own noise share) is the guarantee against a client only if the server chooses to share the final model with
    the clients.  ``noise=False`` trains without noise (for tests and the
    approximation's cost; epsilon is then infinite).  ``seed=None``: every party's randomness from OS entropy;
    a seed makes the run reproducible (each party's seed derived from it by :func:`sqm.mechanism.rng.spawn_seeds`), so
    whoever holds it can regenerate every party's randomness (``secure_mode_`` is then False).
    ``backend``: "mpyc" (real party processes) or "in-process" (the same party programs in this process:
    a simulation, bit for bit the same model for the same seed; "plain", ``sqm --backend``'s name, is the same).
    ``timeout``: seconds for the whole run.
    Parameters are validated in ``fit``.
    """

    # scikit-learn's constraints of the declared parameters (its tooling reads them; the declaration checks them)
    _parameter_constraints: ClassVar[dict] = P.parameter_constraints()

    def __init__(self, epsilon: float = P.epsilon, delta: float = P.delta, gamma: float = P.gamma,
                 sampling_rate: float | None = P.sampling_rate, epochs: int | None = P.epochs,
                 learning_rate: float | None = P.learning_rate, backend: str = "mpyc", n_parties: int = 3,
                 label_party: int | None = P.label_party, weight_bound: float | None = P.weight_bound,
                 party_bounds=P.party_bounds, noise: bool = True, seed=None, progress: bool = False,
                 eval_every: int | None = None, timeout: float = 3600.0, fit_intercept: bool = P.fit_intercept,
                 intercept_scaling: float = P.intercept_scaling, solver: str = P.solver,
                 robust_noise: int = P.robust_noise, verify_sharing: bool = P.verify_sharing,
                 verify_inputs: bool = P.verify_inputs, base_rate: float | None = P.base_rate):
        self.epsilon, self.delta, self.gamma = epsilon, delta, gamma
        self.sampling_rate, self.epochs, self.learning_rate = sampling_rate, epochs, learning_rate
        self.base_rate = base_rate
        self.backend, self.n_parties, self.label_party = backend, n_parties, label_party
        self.weight_bound, self.party_bounds, self.noise = weight_bound, party_bounds, noise
        self.seed, self.progress, self.eval_every, self.timeout = seed, progress, eval_every, timeout
        self.fit_intercept, self.intercept_scaling = fit_intercept, intercept_scaling
        self.solver = solver
        self.robust_noise, self.verify_sharing = robust_noise, verify_sharing
        self.verify_inputs = verify_inputs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # binary only: the protocol trains one weight vector
        tags.non_deterministic = self.seed is None
        return tags

    # ----- planning ------------------------------------------------------------------------------------
    def params(self) -> LogRegParams:
        """This estimator's release parameters (checked: a UsageError names the first one out of its domain)."""
        return LogRegParams(**{name: getattr(self, name) for name in LogRegParams.names()})

    def check_params(self) -> None:
        """Validates the parameters (raises ValueError naming the bad one), those left None included: each
        inside its declared domain (:class:`sqm.apps.logreg.params.LogRegParams`), then how they combine."""
        self.params()
        if self.solver == "sgd" and self.robust_noise:
            raise UsageError("robust_noise applies to the moments solver's release, not to the per-batch sgd "
                             "protocol")
        if self.solver == "sgd" and self.verify_inputs:
            raise UsageError("verify_inputs applies to the moments solver's release, not to the per-batch sgd "
                             "protocol (its rounds are not proven)")
        if self.solver != "sgd":
            given = [n for n in ("sampling_rate", "epochs", "learning_rate", "weight_bound", "base_rate")
                     if getattr(self, n) is not None]
            if given:
                what = ("releases the moments once and has no schedule" if self.solver == "moments" else
                        "runs the moments release or one full-batch sgd round of its own schedule")
                raise UsageError(f"{', '.join(given)}: the schedule of solver='sgd'; solver '{self.solver}' "
                                 f"{what} (set solver='sgd' to use one)")
        if self.solver == "auto" and not self.noise:
            raise UsageError("noise=False is available with solver='sgd' only (set it: solver 'auto' may run the "
                             "moments release, which is always noisy)")
        if self.backend not in party.BACKENDS:
            raise UsageError(f"backend must be one of {party.BACKENDS}, got {self.backend!r}")
        if isinstance(self.n_parties, bool) or int(self.n_parties) != self.n_parties or self.n_parties < 2:
            raise UsageError(f"n_parties must be an integer >= 2 (Shamir sharing needs two clients), "
                             f"got {self.n_parties!r}")

    def resolve_solver(self, n_records: int, n_features: int) -> tuple[str, str]:
        """(the solver a fit on ``n_records`` records of ``n_features`` feature columns runs, why): the one given,
        or :func:`auto_solver`'s choice from those public counts and epsilon."""
        self.check_params()
        if self.solver != "auto":
            return self.solver, "given"
        return auto_solver(n_records, n_features, self.epsilon, int(self.robust_noise), bool(self.verify_inputs))

    def for_solver(self, solver: str) -> SQMLogisticRegression:
        """The estimator that runs ``solver`` (from :meth:`resolve_solver`): this one when it is the one given, else
        a copy with it set (the sgd solver with :data:`AUTO_ROUND`'s schedule)."""
        if solver == self.solver:
            return self
        from sklearn.base import clone

        extra = dict(sampling_rate=AUTO_ROUND.q, epochs=AUTO_ROUND.epochs, learning_rate=AUTO_ROUND.learning_rate,
                     weight_bound=AUTO_ROUND.weight_bound) if solver == "sgd" else {}
        return clone(self).set_params(solver=solver, **extra)

    def schedule(self, n_records: int) -> Schedule:
        """The schedule a fit on ``n_records`` records runs: the parameters given, the rest from
        :func:`default_schedule` (validated)."""
        self.check_params()
        return resolve_schedule(n_records, self.epsilon, self.sampling_rate, self.epochs, self.learning_rate,
                                self.weight_bound)

    @property
    def intercept_constant(self) -> float:
        """The constant column's value (0: no intercept)."""
        return float(self.intercept_scaling) if self.fit_intercept else 0.0

    def _data(self, X, y) -> tuple[list[np.ndarray], list[int], int]:
        """The clients' blocks (the label party's with the 0/1 label column last), column counts, label party;
        sets ``classes_`` and ``n_features_in_``."""
        if isinstance(X, VerticalData):
            data = X
            self.n_features_in_ = data.n_cols
            y = column_or_1d(y, warn=True) if y is not None else None
        else:
            X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=False)
            if X.shape[1] < self.n_parties:
                raise UsageError(f"X has {X.shape[1]} feature(s): too few to split among {self.n_parties} clients "
                                 f"(each holds at least one column)")
            data = VerticalData.split(X, int(self.n_parties))
        if y is None:
            raise UsageError("labels are missing: one client (the label party) must hold the label column")
        if y.shape[0] != data.n_records:
            raise UsageError(f"{y.shape[0]} labels for {data.n_records} records")
        check_classification_targets(y)
        self.classes_ = unique_labels(y)
        if len(self.classes_) != 2:
            raise UsageError(f"Only binary classification is supported: y must hold exactly 2 classes, got "
                             f"{len(self.classes_)} class(es) {self.classes_[:5].tolist()}")
        y01 = (y == self.classes_[1]).astype(np.float64)
        label = data.n_parties - 1 if self.label_party is None else self.label_party
        if isinstance(label, bool) or int(label) != label or not 0 <= label < data.n_parties:
            raise UsageError(f"label party {label!r} is missing: the clients are 0..{data.n_parties - 1}")
        blocks = [np.hstack([b, y01[:, None]]) if j == label else b for j, b in enumerate(data.blocks)]
        return blocks, data.col_counts, int(label)

    def plan(self, n_records: int, col_counts, label_party: int, union: int = 0) -> tuple[LRPlan, PrivacyReport]:
        """Public plan and privacy report, before any randomness is drawn (validates the parameters).

        ``union`` (membership hidden, :mod:`sqm.apps.logreg.party`): the batches are Poisson samples of the
        ``union`` positions the clients' records are placed over, of which the members count; each member is still
        sampled independently at rate q, so the accounting is the revealing mode's, with the cap b_max (and eta) of
        Binomial(union, q).  A job hiding membership passes S (the sum of the set sizes) as both ``n_records`` and
        ``union``: its plan holds nothing a client may not know.

        The batch cap: the run differs from the uncapped mechanism only when a Poisson batch exceeds b_max, with
        probability eta (over all rounds, on every dataset), so an (epsilon, delta_mu)-DP uncapped run makes the
        capped one (epsilon, delta_mu + (1 + e^epsilon) eta)-DP (P[M'(D) in S] <= P[M(D) in S] + eta <=
        e^epsilon (P[M'(D') in S] + eta) + delta_mu + eta); mu is calibrated at delta_mu = delta minus that."""
        sched = self.schedule(n_records)
        epochs = sched.epochs
        n = len(col_counts)
        q, R = sched.q, steps(sched.q, epochs)
        if union and int(union) < int(n_records):
            raise UsageError(f"the union ({union}) cannot be smaller than the intersection ({n_records})")
        b_max, eta = batch_cap(int(union) if union else n_records, q, R)
        bounds = party_norm_bounds(1.0, col_counts, self.party_bounds)
        plan = LRPlan(n_records=int(n_records), col_counts=tuple(int(c) for c in col_counts),
                      label_party=label_party, gamma=float(self.gamma), mu=0.0, q=q, rounds=R, b_max=b_max,
                      learning_rate=sched.learning_rate, weight_bound=sched.weight_bound,
                      party_bounds=tuple(float(b) for b in bounds), intercept=self.intercept_constant,
                      verify_sharing=bool(self.verify_sharing), union=int(union),
                      base_rate=BASE_RATE if self.base_rate is None else float(self.base_rate))
        sens = plan.statistic().sensitivity(plan.gamma, plan.column_bounds())
        delta = float(self.delta)
        if self.noise:
            # the one place eta enters delta: (1 + e^epsilon) eta, not eta (see above)
            delta_mu = accounting.delta_before_failure(delta, float(self.epsilon), eta)
            cap_delta = delta - delta_mu
            if cap_delta >= delta / 2:
                raise UsageError(f"the batch cap's failure probability adds {cap_delta:.3g} to delta: not small "
                                 f"against delta {delta:g}")
            cal = accounting.calibrate_mu_cached(float(self.epsilon), delta_mu, sens.l1, sens.l2, q=q, rounds=R,
                                                 n_parties=n if n >= 2 else None)
            mu, eps_s, eps_c, conversion = cal.mu, cal.epsilon_server, cal.epsilon_client, cal.conversion
            evs: tuple = (events.server_event(sens.l1, sens.l2, mu, q, R),)  # PrivacyReport.events
            notes = (f"{MODEL_SHARED_NOTE}; {epochs} epochs; {intercept_note(plan)}; batch cap {b_max} "
                     f"(exceeded with probability {eta:.3g} over the run, which adds (1 + e^epsilon) x that = "
                     f"{cap_delta:.3g} to delta, included; the ledger adds it through eta)"
                     + (f"; batches sampled over the {int(union)} positions the union is placed over, each counting "
                        f"times its secret membership: every member is in a batch with probability q, as when "
                        f"membership is revealed" if union else ""))
        else:
            mu, eps_s, eps_c, evs, conversion = 0.0, math.inf, math.inf, (), ""
            notes = f"noise off; {epochs} epochs; {intercept_note(plan)}"
            eta = 0.0
        plan = dataclasses.replace(plan, mu=float(mu))
        report = PrivacyReport(method="SQM", epsilon_server=float(eps_s), delta=delta, epsilon_client=eps_c,
                               mu=float(mu), l2_sensitivity=sens.l2, l1_sensitivity=sens.l1,
                               gamma=float(self.gamma), scale=plan.scale, n_parties=n, sampling_rate=q, rounds=R,
                               events=evs, eta=float(eta), notes=notes, conversion=conversion)
        return plan, report

    def moments_plan(self, n_records: int, feature_counts, label_party: int):
        """(the SQM release, its layout, its privacy report) of the moments solver (``solver="moments"``), from
        public counts only: one release of the Gram of [features, c, kappa y, beta (1/2 - y)]
        (:mod:`sqm.apps.logreg.moments`)."""
        self.check_params()
        mech, layout = moments_release(feature_counts, label_party, self.gamma, self.epsilon, self.delta,
                                       party_bounds=self.party_bounds, backend=self.backend, seed=self.seed,
                                       timeout=self.timeout, robust_noise=int(self.robust_noise),
                                       verify_sharing=bool(self.verify_sharing),
                                       verify_inputs=bool(self.verify_inputs))
        if not self.noise:
            raise UsageError("noise=False is available with solver='sgd' only (the moments solver's release is "
                             "always noisy)")
        _, report = mech.round_plan(layout.block_counts, n_records)
        notes = (f"{MODEL_SHARED_NOTE}; one release of the second moments of [features, {layout.constant:g}, "
                 f"{layout.label_weight:g} y, {layout.score_weight:g} (1/2 - y)]; "
                 f"the model is fitted from them at the server (post-processing)")
        report = dataclasses.replace(report, notes="; ".join(n for n in (notes, report.notes) if n))
        return mech, layout, report

    def _fit_moments(self, blocks, counts, label) -> SQMLogisticRegression:
        n = blocks[0].shape[0]
        mech, layout, report = self.moments_plan(n, counts, label)
        blocks = [layout.block(b[:, :-1], b[:, -1]) if j == label else b for j, b in enumerate(blocks)]
        t0 = time.perf_counter()
        res = mech.run(VerticalData(blocks))
        self.moments_, w, b = fit_release(res.estimate, layout, n, res.report.mu, self.gamma, bool(self.fit_intercept))
        self.coef_, self.intercept_ = w.reshape(1, -1), np.array([b])
        self.schedule_: Schedule | None = None  # the moments solver has no schedule and no training plan
        self.epochs_: int | None = None
        self.plan_: LRPlan | None = None
        self.layout_ = layout
        self.report_ = report
        self.clipped_, self.batches_truncated_ = list(res.clipped), 0
        self.seconds_, self.bytes_sent_, self.backend_ = time.perf_counter() - t0, list(res.bytes_sent), res.backend
        self.secure_mode_ = self.seed is None
        return self

    # ----- training ------------------------------------------------------------------------------------
    def fit(self, X, y, eval_set=None) -> SQMLogisticRegression:
        """Train; ``eval_set=(X, y)`` (held by the server, e.g. a public validation set) drives the running
        loss shown on the progress bar of ``solver="sgd"`` (nothing else is computed from it)."""
        self.check_params()
        blocks, counts, label = self._data(X, y)
        solver, why = self.resolve_solver(blocks[0].shape[0], sum(counts))
        run = self.for_solver(solver)
        if run is not self:
            run.classes_, run.n_features_in_ = self.classes_, self.n_features_in_
            run._fit_blocks(blocks, counts, label, eval_set)
            for name, value in vars(run).items():
                if name.endswith("_") and not name.startswith("_"):
                    setattr(self, name, value)
        else:
            self._fit_blocks(blocks, counts, label, eval_set)
        self.solver_, self.solver_reason_ = solver, why
        return self

    def _fit_blocks(self, blocks, counts, label, eval_set=None) -> SQMLogisticRegression:
        """Train this estimator's own (explicit) solver on the clients' blocks (:meth:`_data`)."""
        if self.solver == "moments":
            return self._fit_moments(blocks, counts, label)
        plan, report = self.plan(blocks[0].shape[0], counts, label)
        if eval_set is not None:
            ex = np.asarray(eval_set[0], np.float64)
            n_feat = plan.d - int(plan.has_intercept)
            if ex.ndim != 2 or ex.shape[1] != n_feat:
                raise UsageError(f"eval_set features must have {n_feat} columns, got shape {ex.shape}")
            if plan.intercept_index is not None:  # has_intercept
                ex = np.insert(ex, plan.intercept_index, plan.intercept, axis=1)
            ey = np.asarray(eval_set[1])
            if ey.shape != (ex.shape[0],) or not np.all(np.isin(ey, self.classes_)):
                raise UsageError(f"eval_set labels must be {ex.shape[0]} values among {self.classes_.tolist()}")
            eval_set = (ex, (ey == self.classes_[1]).astype(np.float64))
        seeds = spawn_seeds(self.seed, plan.n_parties + 1)  # 0: the server's; j: client j's own
        every = self.eval_every or max(1, plan.rounds // 100)
        bar, cb = _progress(plan.rounds, f"SQM-LR ({self.backend})", self.progress,
                            "test loss" if eval_set is not None else "noisy gradient norm")
        try:
            res = party.train(blocks, plan, seeds, eval_set, cb if self.progress else None, every,
                              backend=self.backend, timeout=self.timeout)
        finally:
            bar.close()
        self.coef_, self.intercept_ = split_weights(res.weights, plan)
        self.schedule_ = self.schedule(plan.n_records)
        self.epochs_ = self.schedule_.epochs
        self.plan_, self.report_ = plan, report
        self.clipped_, self.batches_truncated_ = res.clipped, res.truncated  # per client; batches over the cap
        self.seconds_, self.bytes_sent_, self.backend_ = res.seconds, res.bytes_sent, res.backend
        self.secure_mode_ = self.seed is None
        return self

    def decision_function(self, X) -> np.ndarray:
        """<w, x> + intercept for each row (positive: ``classes_[1]``).  ``X`` a :class:`VerticalData` with
        ``backend='mpyc'``: the clients' blocks are never joined, each client's partial score goes through the
        runtime's secure sum (:func:`sqm.apps.inference.secure.secure_scores`; within 2^-20 per client of the
        plain score)."""
        check_is_fitted(self)
        if isinstance(X, VerticalData) and self.backend == "mpyc" and len(X.blocks) >= 2:
            from sqm.apps.inference.secure import secure_scores

            return secure_scores(X.blocks, self.coef_[0][:, None], self.intercept_[:1], self.backend)[:, 0]
        X = X.to_matrix() if isinstance(X, VerticalData) else X
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_[0] + self.intercept_[0]

    def predict_proba(self, X) -> np.ndarray:
        """(P(classes_[0]), P(classes_[1])) = (1 - sigmoid(<w, x>), sigmoid(<w, x>))."""
        u = self.decision_function(X)
        return np.column_stack([expit(-u), expit(u)])  # not 1 - expit(u): that underflows to 0 for large u

    def predict_log_proba(self, X) -> np.ndarray:
        u = self.decision_function(X)
        return np.column_stack([-np.logaddexp(0, u), -np.logaddexp(0, -u)])

    def predict(self, X) -> np.ndarray:
        """Labels in the input label space: ``classes_[1]`` where <w, x> > 0, else ``classes_[0]``."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(np.int64)]

