"""Private logistic regression on vertically partitioned data: SQM-LR (Section 5.2 of the SQM paper) and its
baselines (DPSGD with Opacus, VFL local DP, non-private scikit-learn and the noiseless Taylor gradient).

    sqm logreg --dataset breast_cancer --parties 3 --epsilon 1 --delta 1e-5 --gamma 8192

The protocol's steps and its one party program live in :mod:`apps.lr_party` (real processes or in process).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, unique_labels
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from sqm import accounting, events
from sqm.calibration import gaussian_epsilon, gaussian_sigma
from sqm.report import PrivacyReport, render_table, write_json
from sqm.rng import make_rng, spawn_seeds
from sqm.validation import check_delta, check_epsilon, check_gamma
from sqm.vertical import VerticalData, clip_rows, party_norm_bounds

from . import lr_party
from .lr_party import LRPlan, batch_cap, logistic_loss

PAPER_EPOCHS = {0.5: 2, 1.0: 5, 2.0: 8, 4.0: 10, 8.0: 10}  # Section 6.2
CLIENT_VIEW = "nothing (only Shamir shares)"  # what a client observes during SQM-LR training
MODEL_SHARED_NOTE = ("clients observe nothing during training (only Shamir shares); the client-observed epsilon "
                     "is the guarantee of the final model only if the server chooses to share it with them")


# the calibration is a pure function of public numbers, and a bisection over RDP curves (about a second):
# repeated fits with the same parameters (--runs, sweeps, job parties in one process) share it
_calibrate_mu = functools.lru_cache(maxsize=64)(accounting.calibrate_mu)


def paper_epochs(epsilon: float) -> int:
    """The paper's epochs for epsilon in {0.5, 1, 2, 4, 8}; the nearest listed epsilon otherwise."""
    key = min(PAPER_EPOCHS, key=lambda e: abs(math.log(e) - math.log(epsilon)))
    return PAPER_EPOCHS[key]


def check_labels(y, n: int | None = None) -> np.ndarray:
    if y is None:
        raise ValueError("labels are missing: one client (the label party) must hold the label column")
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array, got shape {y.shape}")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"{y.shape[0]} labels for {n} records")
    yf = y.astype(np.float64)
    if not np.all(np.isfinite(yf)) or not np.all((yf == 0) | (yf == 1)):
        bad = sorted(set(np.unique(y[~((yf == 0) | (yf == 1))]).tolist()))[:5]
        raise ValueError(f"labels must be 0 or 1; found {bad}")
    return yf


def check_schedule(q: float, epochs, learning_rate: float) -> None:
    if not (isinstance(q, (int, float, np.floating)) and math.isfinite(q) and 0 < q <= 1):
        raise ValueError(f"sampling rate q must lie in (0, 1], got {q!r}")
    if isinstance(epochs, bool) or int(epochs) != epochs or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")


def steps(q: float, epochs: int) -> int:
    """Rounds R = epochs * round(1/q) (one epoch is 1/q Poisson-sampled batches)."""
    return int(epochs) * max(1, int(round(1.0 / q)))


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, disable=not enabled, leave=False)
    state = {"n": 0}

    def cb(i: int, loss: float):
        bar.update(i - state["n"])
        state["n"] = i
        bar.set_postfix(loss=f"{loss:.4f}")
    return bar, cb


class SQMLogisticRegression(ClassifierMixin, BaseEstimator):
    """Logistic regression trained with SQM on vertically partitioned data (a scikit-learn binary classifier).

    ``fit(X, y)``: ``X`` is a ``VerticalData`` of feature blocks (client j holds ``X.blocks[j]``) or a matrix
    split into ``n_parties`` contiguous column blocks; ``y`` holds any two labels (``classes_``, sorted; the
    second is the positive class, 1 inside the protocol) and is held by client ``label_party`` (0-based,
    default the last).  Each client's feature sub-rows are clipped to its bound c_j (sum c_j^2 = 1, so
    ||x||_2 <= 1; counted in ``clipped_``); the weights are projected onto ||w||_2 <= W (no intercept).
    mu is calibrated before training for the server-observed (epsilon, delta) over R = epochs * round(1/q)
    Poisson-subsampled rounds (Eq. 20) with the proven sensitivity of :func:`sqm.sensitivity.logreg_sensitivity`.
    The weights stay at the server (their coefficients are secret-shared): during training the clients observe
    nothing but Shamir shares.  ``report_`` (:class:`sqm.report.PrivacyReport`): its ``epsilon_client`` (Eq. 21:
    a client knows the batches and its own noise share) is the guarantee against a client only if the server
    chooses to share the final model with the clients.  ``noise=False`` trains without noise (for tests and the
    approximation's cost; epsilon is then infinite).  ``seed=None``: every party's randomness from OS entropy;
    a seed makes the run reproducible (each party's seed derived from it by :func:`sqm.rng.spawn_seeds`), so
    whoever holds it can regenerate every party's randomness (``secure_mode_`` is then False).
    ``backend``: "mpyc" (real party processes) or "in-process" (the same party programs in this process:
    a simulation, bit for bit the same model for the same seed; "plain", ``sqm --backend``'s name, is the same).
    ``epochs=None``: the paper's epochs for this epsilon (``epochs_``); ``timeout``: seconds for the whole run.
    Parameters are validated in ``fit``.
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-5, gamma: float = 8192.0,
                 sampling_rate: float = 0.001, epochs: int | None = None, learning_rate: float = 1.0,
                 backend: str = "mpyc", n_parties: int = 3, label_party: int | None = None,
                 weight_bound: float = 1.0, party_bounds=None, noise: bool = True, seed=None,
                 progress: bool = False, eval_every: int | None = None, timeout: float = 3600.0):
        self.epsilon, self.delta, self.gamma = epsilon, delta, gamma
        self.sampling_rate, self.epochs, self.learning_rate = sampling_rate, epochs, learning_rate
        self.backend, self.n_parties, self.label_party = backend, n_parties, label_party
        self.weight_bound, self.party_bounds, self.noise = weight_bound, party_bounds, noise
        self.seed, self.progress, self.eval_every, self.timeout = seed, progress, eval_every, timeout

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # binary only: the protocol trains one weight vector
        tags.non_deterministic = self.seed is None
        return tags

    # ----- planning ------------------------------------------------------------------------------------
    def _epochs(self) -> int:
        """The validated parameters (raises ValueError naming the bad one); returns the epochs to run."""
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_gamma(self.gamma)
        epochs = paper_epochs(self.epsilon) if self.epochs is None else self.epochs
        check_schedule(self.sampling_rate, epochs, self.learning_rate)
        if self.backend not in lr_party.BACKENDS:
            raise ValueError(f"backend must be one of {lr_party.BACKENDS}, got {self.backend!r}")
        if not (isinstance(self.weight_bound, (int, float, np.number)) and math.isfinite(self.weight_bound)
                and self.weight_bound > 0):
            raise ValueError(f"weight_bound must be > 0, got {self.weight_bound!r}")
        if isinstance(self.n_parties, bool) or int(self.n_parties) != self.n_parties or self.n_parties < 2:
            raise ValueError(f"n_parties must be an integer >= 2 (Shamir sharing needs two clients), "
                             f"got {self.n_parties!r}")
        return int(epochs)

    def _data(self, X, y) -> tuple[list[np.ndarray], tuple[int, ...], int]:
        """The clients' blocks (the label party's with the 0/1 label column last), column counts, label party;
        sets ``classes_`` and ``n_features_in_``."""
        if isinstance(X, VerticalData):
            data = X
            self.n_features_in_ = data.n_cols
            y = column_or_1d(y, warn=True) if y is not None else None
        else:
            X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=False)
            if X.shape[1] < self.n_parties:
                raise ValueError(f"X has {X.shape[1]} feature(s): too few to split among {self.n_parties} clients "
                                 f"(each holds at least one column)")
            data = VerticalData.split(X, int(self.n_parties))
        if y is None:
            raise ValueError("labels are missing: one client (the label party) must hold the label column")
        if y.shape[0] != data.n_records:
            raise ValueError(f"{y.shape[0]} labels for {data.n_records} records")
        check_classification_targets(y)
        self.classes_ = unique_labels(y)
        if len(self.classes_) != 2:
            raise ValueError(f"Only binary classification is supported: y must hold exactly 2 classes, got "
                             f"{len(self.classes_)} class(es) {self.classes_[:5].tolist()}")
        y01 = (y == self.classes_[1]).astype(np.float64)
        label = data.n_parties - 1 if self.label_party is None else self.label_party
        if isinstance(label, bool) or int(label) != label or not 0 <= label < data.n_parties:
            raise ValueError(f"label party {label!r} is missing: the clients are 0..{data.n_parties - 1}")
        blocks = [np.hstack([b, y01[:, None]]) if j == label else b for j, b in enumerate(data.blocks)]
        return blocks, data.col_counts, int(label)

    def plan(self, n_records: int, col_counts, label_party: int) -> tuple[LRPlan, PrivacyReport]:
        """Public plan and privacy report, before any randomness is drawn (validates the parameters).

        The batch cap: the run differs from the uncapped mechanism only when a Poisson batch exceeds b_max, with
        probability eta (over all rounds, on every dataset), so an (epsilon, delta_mu)-DP uncapped run makes the
        capped one (epsilon, delta_mu + (1 + e^epsilon) eta)-DP (P[M'(D) in S] <= P[M(D) in S] + eta <=
        e^epsilon (P[M'(D') in S] + eta) + delta_mu + eta); mu is calibrated at delta_mu = delta minus that."""
        epochs = self._epochs()
        n = len(col_counts)
        q, R = float(self.sampling_rate), steps(self.sampling_rate, epochs)
        b_max, eta = batch_cap(n_records, q, R)
        bounds = party_norm_bounds(1.0, col_counts, self.party_bounds)
        plan = LRPlan(n_records=int(n_records), col_counts=tuple(int(c) for c in col_counts),
                      label_party=label_party, gamma=float(self.gamma), mu=0.0, q=q, rounds=R, b_max=b_max,
                      learning_rate=float(self.learning_rate), weight_bound=float(self.weight_bound),
                      party_bounds=tuple(float(b) for b in bounds))
        sens = plan.statistic().sensitivity(plan.gamma, plan.column_bounds())
        delta = float(self.delta)
        if self.noise:
            # the one place eta enters delta: (1 + e^epsilon) eta, not eta (see above)
            delta_mu = accounting.delta_before_failure(delta, float(self.epsilon), eta)
            cap_delta = delta - delta_mu
            if cap_delta >= delta / 2:
                raise ValueError(f"the batch cap's failure probability adds {cap_delta:.3g} to delta: not small "
                                 f"against delta {delta:g}")
            cal = _calibrate_mu(float(self.epsilon), delta_mu, sens.l1, sens.l2, q=q, rounds=R,
                                n_parties=n if n >= 2 else None)
            mu, eps_s, eps_c = cal.mu, cal.epsilon_server, cal.epsilon_client
            evs = (events.server_event(sens.l1, sens.l2, mu, q, R),)
            notes = (f"{MODEL_SHARED_NOTE}; {epochs} epochs; batch cap {b_max} (exceeded with probability "
                     f"{eta:.3g} over the run, which adds (1 + e^epsilon) x that = {cap_delta:.3g} to delta, "
                     f"included; the ledger must add it to the events' delta)")
        else:
            mu, eps_s, eps_c, evs, notes = 0.0, math.inf, math.inf, (), f"noise off; {epochs} epochs"
        plan = dataclasses.replace(plan, mu=float(mu))
        report = PrivacyReport(method="SQM", epsilon_server=float(eps_s), delta=delta, epsilon_client=eps_c,
                               mu=float(mu), l2_sensitivity=sens.l2, l1_sensitivity=sens.l1,
                               gamma=float(self.gamma), scale=plan.scale, n_parties=n, sampling_rate=q, rounds=R,
                               events=evs, notes=notes)
        return plan, report

    # ----- training ------------------------------------------------------------------------------------
    def fit(self, X, y, eval_set=None) -> "SQMLogisticRegression":
        """Train; ``eval_set=(X, y)`` (held by the server, e.g. a public validation set) drives the running
        loss shown on the progress bar (nothing else is computed from it)."""
        self._epochs()
        blocks, counts, label = self._data(X, y)
        plan, report = self.plan(blocks[0].shape[0], counts, label)
        if eval_set is not None:
            ex = np.asarray(eval_set[0], np.float64)
            if ex.ndim != 2 or ex.shape[1] != plan.d:
                raise ValueError(f"eval_set features must have {plan.d} columns, got shape {ex.shape}")
            ey = np.asarray(eval_set[1])
            if ey.shape != (ex.shape[0],) or not np.all(np.isin(ey, self.classes_)):
                raise ValueError(f"eval_set labels must be {ex.shape[0]} values among {self.classes_.tolist()}")
            eval_set = (ex, (ey == self.classes_[1]).astype(np.float64))
        seeds = spawn_seeds(self.seed, plan.n_parties + 1)  # 0: the server's; j: client j's own
        every = self.eval_every or max(1, plan.rounds // 100)
        bar, cb = _progress(plan.rounds, f"SQM-LR ({self.backend})", self.progress)
        try:
            res = lr_party.train(blocks, plan, seeds, eval_set, cb if self.progress else None, every,
                                 backend=self.backend, timeout=self.timeout)
        finally:
            bar.close()
        self.coef_ = res.weights.reshape(1, -1)
        self.intercept_ = np.zeros(1)
        self.epochs_ = self._epochs()
        self.plan_, self.report_ = plan, report
        self.clipped_, self.batches_truncated_ = res.clipped, res.truncated  # per client; batches over the cap
        self.seconds_, self.bytes_sent_, self.backend_ = res.seconds, res.bytes_sent, res.backend
        self.secure_mode_ = self.seed is None
        return self

    def decision_function(self, X) -> np.ndarray:
        """<w, x> for each row (positive: ``classes_[1]``)."""
        check_is_fitted(self)
        X = X.to_matrix() if isinstance(X, VerticalData) else X
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_[0]

    def predict_proba(self, X) -> np.ndarray:
        """(P(classes_[0]), P(classes_[1])) = (1 - sigmoid(<w, x>), sigmoid(<w, x>))."""
        p = expit(self.decision_function(X))
        return np.column_stack([1 - p, p])

    def predict_log_proba(self, X) -> np.ndarray:
        u = self.decision_function(X)
        return np.column_stack([-np.logaddexp(0, u), -np.logaddexp(0, -u)])

    def predict(self, X) -> np.ndarray:
        """Labels in the input label space: ``classes_[1]`` where <w, x> > 0, else ``classes_[0]``."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(np.int64)]


# ----- baselines -------------------------------------------------------------------------------------------
def taylor_fit(X, y, q: float, epochs: int, learning_rate: float, weight_bound: float = 1.0, seed=None
               ) -> np.ndarray:
    """The same Taylor gradient (Eq. 19), sampling, step and projection in float64, without noise or
    quantization: the cost of the approximation alone."""
    check_schedule(q, epochs, learning_rate)
    X = np.asarray(X, np.float64)
    y = check_labels(y, X.shape[0])
    rng = np.random.default_rng(seed)
    N, d = X.shape
    w = np.zeros(d)
    for _ in range(steps(q, epochs)):
        idx = np.flatnonzero(rng.random(N) < q)
        B = X[idx]
        w = lr_party.project(w - learning_rate * (B.T @ (0.5 + B @ w / 4 - y[idx])) / (q * N), weight_bound)
    return w


DPSGD_ACCOUNTANT = "prv"  # Opacus' tightest: the PRV accountant (numerical composition of privacy loss
# distributions, Gopi et al. 2021), whose epsilon is an upper bound (its error included); its RDP accountant
# needs 7-26% more noise at the settings of sqm logreg (q 0.05, R 40-200: 7.5-8.5%; q 0.001, R 5000-10000:
# 22-26%; epsilon 1, delta 1e-5)


def dpsgd_fit(X, y, epsilon: float, delta: float, q: float, epochs: int, learning_rate: float,
              weight_bound: float | None = 1.0, max_grad_norm: float = 1.0, seed=None
              ) -> tuple[np.ndarray, PrivacyReport]:
    """Centralized DPSGD (Opacus): logistic loss, Poisson sampling at rate q, R = epochs * round(1/q) steps,
    per-example clipping at ``max_grad_norm`` (||x|| <= 1 makes the gradient norm <= 1 anyway), noise
    multiplier calibrated for (epsilon, delta) with Opacus' PRV accountant (:data:`DPSGD_ACCOUNTANT`, the
    tightest it offers; add/remove-one neighbours, as SQM's accounting); optional projection ||w|| <= W after
    each step (as SQM).  Returns (weights, its privacy report: the epsilon spent at delta by the same
    accountant, <= epsilon; sigma = noise multiplier x clip norm)."""
    import warnings

    import torch
    from opacus import PrivacyEngine
    from opacus.accountants.utils import get_noise_multiplier
    from dp_accounting import dp_event
    from opacus.data_loader import DPDataLoader

    check_epsilon(epsilon)
    check_delta(delta)
    check_schedule(q, epochs, learning_rate)
    X = np.asarray(X, np.float32)
    y = check_labels(y, X.shape[0]).astype(np.float32)
    R = steps(q, epochs)
    sigma = get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=q, steps=R,
                                 accountant=DPSGD_ACCOUNTANT)
    gen = torch.Generator().manual_seed(int(np.random.default_rng(seed).integers(2 ** 62)))
    ds = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    loader = DPDataLoader(ds, sample_rate=q, generator=gen)
    model = torch.nn.Linear(X.shape[1], 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate)
    engine = PrivacyEngine(accountant=DPSGD_ACCOUNTANT, secure_mode=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                                 noise_multiplier=sigma, max_grad_norm=max_grad_norm,
                                                 poisson_sampling=False, noise_generator=gen)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        done = 0
        while done < R:
            for xb, yb in loader:
                opt.zero_grad()
                if len(xb):
                    loss_fn(model(xb).squeeze(1), yb).backward()
                else:  # an empty Poisson batch: noise only
                    for p in model.parameters():
                        p.grad_sample = torch.zeros((0, *p.shape))
                opt.step()
                if weight_bound is not None:
                    with torch.no_grad():
                        wt = model._module.weight if hasattr(model, "_module") else model.weight
                        nrm = float(wt.norm())
                        if nrm > weight_bound:
                            wt.mul_(weight_bound / nrm)
                done += 1
                if done >= R:
                    break
        eps = float(engine.get_epsilon(delta))
    wt = model._module.weight if hasattr(model, "_module") else model.weight
    step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(float(sigma)))
    report = PrivacyReport(method="DPSGD", epsilon_server=eps, epsilon_client=eps, delta=float(delta),
                           sigma=float(sigma) * max_grad_norm, l2_sensitivity=float(max_grad_norm), sampling_rate=q,
                           rounds=R, events=(dp_event.SelfComposedDpEvent(step, R),),
                           notes=f"central (a trusted curator holds every column); Opacus {DPSGD_ACCOUNTANT} "
                                 f"accountant")
    return wt.detach().numpy().astype(np.float64).reshape(-1), report


LOCAL_DP_SENSITIVITY = math.sqrt(2.0)  # L2 norm of one released record (x, y): ||x||^2 + y^2 <= 1 + 1


def local_dp_fit(X, y, epsilon: float, delta: float, seed=None):
    """VFL local-DP baseline: each party releases its columns plus iid N(0, sigma^2) noise (the label party its
    label too), and a logistic regression is trained to convergence on the released data (perturbed labels
    thresholded at 1/2).  Returns (fitted scikit-learn model, its privacy report).

    Calibration, in the convention of SQM's sensitivity and of the PCA baseline (``apps.pca.local_dp_pca``):
    neighbouring datasets differ in one record, present or absent; as record ids are public in VFL, an absent
    record is a row of zeros in the released m x (d + 1) matrix [X | y].  So the released matrix changes in one
    row, by (x, y) with ||x||_2 <= 1 (rows are clipped to the unit ball first; the data sets' encodings already
    satisfy it) and y in {0, 1}: L2 sensitivity sqrt(||x||^2 + y^2) <= sqrt(1 + 1) = sqrt(2), reached by a unit
    row labelled 1.  The parties' independent noises together are ONE Gaussian mechanism on the whole matrix,
    so sigma = :func:`sqm.calibration.gaussian_sigma` (sqrt(2), epsilon, delta), the exact single-release
    optimum (the one calibration policy of every Gaussian baseline); training on the release is
    post-processing.  (The former sqrt(5) = sqrt(2^2 + 1) bounded a change of a present record's values,
    which this neighbouring relation does not need: 1.58x the noise.)"""
    from sklearn.linear_model import LogisticRegression

    X, _ = clip_rows(np.asarray(X, np.float64), 1.0)
    y = check_labels(y, X.shape[0])
    sigma = gaussian_sigma(LOCAL_DP_SENSITIVITY, epsilon, delta)
    rng = make_rng(seed)  # the baseline's noise is secret too: AES-CTR
    Xn = X + rng.normal(0, sigma, X.shape)
    yn = (y + rng.normal(0, sigma, y.shape) > 0.5).astype(np.int64)
    if len(np.unique(yn)) < 2:
        yn[0] = 1 - yn[0]
    eps = gaussian_epsilon(sigma, LOCAL_DP_SENSITIVITY, delta)  # <= epsilon: what the release spends, exactly
    report = PrivacyReport(method="local DP", epsilon_server=eps, epsilon_client=eps, delta=float(delta),
                           sigma=sigma, l2_sensitivity=LOCAL_DP_SENSITIVITY, n_parties=None,
                           events=(events.gaussian_event(sigma, LOCAL_DP_SENSITIVITY),),
                           notes="every party perturbs its own columns (the label party its label too)")
    return LogisticRegression(max_iter=2000, fit_intercept=False).fit(Xn, yn), report


def nonprivate_fit(X, y):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=5000, fit_intercept=False).fit(np.asarray(X, np.float64), check_labels(y))


def accuracy(w, X, y) -> float:
    return float(np.mean(((np.asarray(X) @ w) > 0) == (np.asarray(y) == 1)))


# ----- datasets --------------------------------------------------------------------------------------------
DATASETS = ("breast_cancer", "adult", "credit_default")  # the data sets sqm logreg runs on
DEFAULT_Q = {"breast_cancer": 0.05, "adult": 0.001, "credit_default": 0.001}
# ||w|| <= W and learning rate per data set: with W = 1 (the paper's) every method stays at the majority-class
# rate on adult (its rows have ||x|| <= 1 and a large intercept is needed), so W = 8, lr = 0.5 there
DEFAULT_W = {"breast_cancer": 1.0, "adult": 8.0, "credit_default": 8.0}
DEFAULT_LR = {"breast_cancer": 1.0, "adult": 0.5, "credit_default": 0.5}


def unit_ball_split(name: str, data_dir: str | None = None, seed: int = 0):
    """(X_train, y_train, X_test, y_test, attributes) from :func:`apps.datasets.load_dataset` (its split:
    adult's shipped test set, else stratified 75/25 with ``seed``), every row with ||x||_2 <= 1; ``attributes``:
    each column's original attribute (public metadata, :func:`public_split`'s groups).

    adult and credit_default are encoded from public metadata only with ||x|| <= 1 by construction;
    breast_cancer (scikit-learn's bundled copy, a public demo set) is standardized with the training split's
    statistics, clipped to +-3 and divided by 3 sqrt(d)."""
    from .datasets import load_dataset

    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    ds = load_dataset(name, data_dir)
    Xtr, ytr, Xte, yte = ds.train_test(0.25, seed)
    if name == "breast_cancer":
        mu, sd = Xtr.mean(0), Xtr.std(0)
        sd[sd == 0] = 1
        f = lambda A: np.clip((A - mu) / sd, -3, 3) / (3 * math.sqrt(A.shape[1]))  # noqa: E731
        Xtr, Xte = f(Xtr), f(Xte)
    return Xtr, ytr, Xte, yte, ds.attributes


# ----- one comparison --------------------------------------------------------------------------------------
def public_split(groups: list[str], n_parties: int) -> tuple[list[int], np.ndarray]:
    """Column counts that cut only between attributes (as equal as possible) and the per-party norm bounds
    c_j = sqrt(attributes of party j / all attributes).  With rows encoded as sum over attributes of at most
    1 / (number of attributes) in squared norm (apps.datasets' encoders, breast_cancer's scaling), no
    sub-row ever exceeds its bound: nothing is clipped, and the bounds come from public metadata only."""
    d = len(groups)
    starts = [j for j in range(d) if j == 0 or groups[j] != groups[j - 1]] + [d]
    if n_parties > len(starts) - 1:
        raise ValueError(f"cannot split {len(starts) - 1} attributes among {n_parties} parties")
    cuts = [0]
    for k in range(1, n_parties):
        target = k * d / n_parties
        options = [b for b in starts[1:-1] if b > cuts[-1] and len([x for x in starts if x > b]) >= n_parties - k]
        cuts.append(min(options, key=lambda b: abs(b - target)))
    cuts.append(d)
    counts = [b - a for a, b in zip(cuts[:-1], cuts[1:])]
    n_attr = [len({groups[j] for j in range(a, b)}) for a, b in zip(cuts[:-1], cuts[1:])]
    return counts, np.sqrt(np.asarray(n_attr, np.float64) / sum(n_attr))


def compare(Xtr, ytr, Xte, yte, *, epsilon, delta, gamma, q, epochs, learning_rate, parties, backend, seed,
            weight_bound=1.0, methods=("sqm", "dpsgd", "local", "nonprivate", "taylor"), progress=False,
            groups=None, timeout: float = 3600.0) -> dict:
    """Test accuracy and privacy of SQM and each baseline for one seed (an int or None): method -> a row
    ``{"method", "accuracy", "seconds", "bytes_sent", "report": PrivacyReport, ...}``.  ``groups`` (the
    attribute of each column) makes the parties' split and norm bounds follow attributes (:func:`public_split`)."""
    rng = np.random.default_rng(seed)
    sub = [int(s) for s in rng.integers(0, 2 ** 62, size=4)] if seed is not None else [None] * 4
    out = {}

    def row(name, acc, t0, report, **extra):
        out[name] = dict(method=report.method, accuracy=float(acc), seconds=time.perf_counter() - t0,
                         bytes_sent=0, report=report, **extra)
    if "sqm" in methods:
        bounds, data = None, Xtr
        if groups is not None:
            counts, bounds = public_split(groups, parties)
            data = VerticalData(np.split(np.asarray(Xtr, np.float64), np.cumsum(counts)[:-1], axis=1))
        m = SQMLogisticRegression(epsilon, delta, gamma, q, epochs, learning_rate, backend, parties,
                                  weight_bound=weight_bound, party_bounds=bounds, seed=sub[0], progress=progress,
                                  timeout=timeout)
        t0 = time.perf_counter()
        m.fit(data, ytr, eval_set=(Xte, yte) if progress else None)
        row("sqm", m.score(Xte, yte), t0, m.report_, test_loss=logistic_loss(m.coef_[0], Xte, yte),
            training_seconds=m.seconds_, clipped=m.clipped_, batches_truncated=m.batches_truncated_,
            b_max=m.plan_.b_max, backend=m.backend_)
        out["sqm"]["bytes_sent"] = int(sum(m.bytes_sent_))
    if "dpsgd" in methods:
        t0 = time.perf_counter()
        w, rep = dpsgd_fit(Xtr, ytr, epsilon, delta, q, epochs, learning_rate, weight_bound, seed=sub[1])
        row("dpsgd", accuracy(w, Xte, yte), t0, rep)
    if "local" in methods:
        t0 = time.perf_counter()
        mdl, rep = local_dp_fit(Xtr, ytr, epsilon, delta, seed=sub[2])
        row("local", mdl.score(Xte, yte), t0, rep)
    if "nonprivate" in methods:
        t0 = time.perf_counter()
        mdl = nonprivate_fit(Xtr, ytr)
        row("nonprivate", mdl.score(Xte, yte), t0, PrivacyReport(method="non-private", epsilon_server=math.inf,
                                                                 epsilon_client=math.inf, delta=0.0))
    if "taylor" in methods:
        t0 = time.perf_counter()
        w = taylor_fit(Xtr, ytr, q, epochs, learning_rate, weight_bound, seed=sub[3])
        row("taylor", accuracy(w, Xte, yte), t0, PrivacyReport(
            method="Taylor (noiseless)", epsilon_server=math.inf, epsilon_client=math.inf, delta=0.0,
            notes="SQM's Taylor gradient, sampling and projection in float64, without noise or quantization"))
    return out


def _mean(runs: list[dict]) -> dict:
    out = {}
    for key in runs[0]:
        vals = [r[key] for r in runs]
        out[key] = dict(runs[0][key])
        out[key]["accuracy"] = float(np.mean([v["accuracy"] for v in vals]))
        out[key]["accuracy_std"] = float(np.std([v["accuracy"] for v in vals]))
        out[key]["seconds"] = float(np.mean([v["seconds"] for v in vals]))
        out[key]["runs"] = len(vals)
    return out


UTILITY_COLUMNS = [("accuracy", "accuracy", ".4f"), ("epsilon_server", "eps server"),
                   ("epsilon_client", "eps client*"), ("delta", "delta", ".3g"), ("seconds", "seconds", ".2f"),
                   ("bytes_sent", "bytes", ",")]


def utility_rows(res: dict) -> list[dict]:
    """The utility table's rows: each method's metrics with its privacy report's epsilons and delta."""
    return [{**{k: v for k, v in r.items() if k != "report"}, "epsilon_server": r["report"].epsilon_server,
             "epsilon_client": r["report"].epsilon_client, "delta": r["report"].delta} for r in res.values()]


# ----- real multi-party jobs from a job file (each party reads only its own CSV) ----------------------------
class LRJobTask:
    """The SQM-LR task for :mod:`apps.jobfile`: the label party's CSV holds the label column
    ``label_column`` (0/1) besides its features; every party builds the same public plan from the clients'
    column and record counts, the clients compare record-id digests among themselves, and the run is
    :func:`apps.lr_party.train_party`.  The server's result is the weights (in the clients' column order,
    the label excluded) and the privacy report; each client's clip count stays with that client.

    Randomness: without ``seed`` (secure mode, the default) every party draws its own from OS entropy.  A
    ``seed`` makes every party derive its seed from it, so anyone holding it (the server's operator too) can
    regenerate every client's noise: it is refused unless ``insecure_reproducible=True``, and the report then
    records ``secure_mode: False``.  The seed is never part of the public parameters the parties agree on."""

    def __init__(self, epsilon: float, delta: float = 1e-5, gamma: float = 8192.0, q: float = 0.001,
                 epochs: int | None = None, learning_rate: float = 1.0, weight_bound: float = 1.0,
                 label_column: str = "label", label_party: int | None = None, seed=None,
                 insecure_reproducible: bool = False):
        from .jobfile import seed_policy

        seed_policy(seed, insecure_reproducible, warn=False)  # a seed without the opt-in: refused
        self.estimator = SQMLogisticRegression(epsilon, delta, gamma, q, epochs, learning_rate, "mpyc",
                                               weight_bound=weight_bound, label_party=label_party, seed=seed)
        self.epochs = self.estimator._epochs()  # bad parameters refused here, before any party starts
        self.label_column, self.label_party, self.seed = label_column, label_party, seed

    @property
    def secure_mode(self) -> bool:
        return self.seed is None

    def public(self):
        e = self.estimator
        return ("sqm-logreg", float(e.epsilon), float(e.delta), float(e.gamma), float(e.sampling_rate), self.epochs,
                float(e.learning_rate), float(e.weight_bound), self.label_column, self.label_party)

    def _plan(self, meta) -> tuple[LRPlan, PrivacyReport, int]:
        """The public plan, privacy report and label party from the clients' public counts (every party alike)."""
        from mpc.party import ProtocolError

        n = meta.n_parties
        label = n - 1 if self.label_party is None else int(self.label_party)
        if not 0 <= label < n:  # every party sees the same public counts: all refuse alike
            raise ProtocolError(f"label party {label} is missing: the job has clients 0..{n - 1}; refused")
        counts = list(meta.col_counts)
        counts[label] -= 1
        if counts[label] < 1:
            raise ProtocolError(f"client {label + 1} (the label party) needs feature columns besides the label; "
                                f"refused")
        return (*self.estimator.plan(meta.n_records, counts, label), label)

    def release(self, meta) -> PrivacyReport:
        """What the job releases (for the server's privacy-budget ledger), from the public counts."""
        return self._plan(meta)[1]

    async def run(self, ctx, table, meta) -> dict:
        from mpc.party import InputRefused

        plan, report, label = self._plan(meta)
        block = None
        if table is not None:
            j = ctx.pid - 1
            cols = list(table.columns)
            if j == label:  # the label party's own input: the others learn only the reason, never a value
                if self.label_column not in cols:
                    raise InputRefused(f"its file has no label column '{self.label_column}'", table.file)
                k = cols.index(self.label_column)
                try:
                    y = check_labels(table.block[:, k])
                except ValueError as err:
                    raise InputRefused("its label column holds values other than 0 and 1",
                                       f"{table.file}: {err}") from None
                block = np.hstack([np.delete(table.block, k, axis=1), y[:, None]])
            else:
                block = table.block
        seeds = spawn_seeds(self.seed, meta.n_parties + 1)
        res = await lr_party.train_party(ctx, plan, seeds[ctx.pid], block, check_ids=True,
                                         ids_digest=None if table is None else table.ids_digest)
        if ctx.is_server:
            res.update(report=report, secure_mode=self.secure_mode, b_max=plan.b_max)
        return res


def _run_job(args) -> int:
    from .jobfile import job_command

    def make_task():
        return LRJobTask(args.epsilon, args.delta, args.gamma, args.q if args.q is not None else 0.001,
                         args.epochs, args.learning_rate if args.learning_rate is not None else 1.0,
                         args.weight_bound if args.weight_bound is not None else 1.0, args.label_column,
                         args.label_party, seed=args.seed, insecure_reproducible=args.insecure_reproducible)

    def server_summary(res) -> dict:
        rep, w = res["report"], np.asarray(res["weights"])
        print(f"server: logistic-regression weights over {w.shape[0]} features of {res['n_records']} records "
              f"(clients' columns {res['col_counts']}, label included at client "
              f"{rep.n_parties if args.label_party is None else args.label_party + 1}); {rep.rounds} rounds, batch "
              f"cap {res['b_max']}, ||w|| = {np.linalg.norm(w):.4f}")
        print(f"  clients observe {CLIENT_VIEW} during training; epsilon_client is the guarantee of the final "
              f"model only if the server shares it with them")
        return {"weights": w}

    return job_command(args, make_task, server_summary)


def run(args) -> int:
    if args.job:
        return _run_job(args)
    if args.runs < 1:
        raise ValueError(f"--runs must be >= 1, got {args.runs}")
    Xtr, ytr, Xte, yte, groups = unit_ball_split(args.dataset, args.data)
    q = args.q if args.q is not None else DEFAULT_Q[args.dataset]
    epochs = args.epochs if args.epochs is not None else paper_epochs(args.epsilon)
    lr = args.learning_rate if args.learning_rate is not None else DEFAULT_LR[args.dataset]
    W = args.weight_bound if args.weight_bound is not None else DEFAULT_W[args.dataset]
    methods = ("sqm",) if args.no_baselines else ("sqm", "dpsgd", "local", "nonprivate", "taylor")
    runs = []
    for r in range(args.runs):
        seed = None if args.seed is None else args.seed + r
        runs.append(compare(Xtr, ytr, Xte, yte, epsilon=args.epsilon, delta=args.delta, gamma=args.gamma, q=q,
                            epochs=epochs, learning_rate=lr, parties=args.parties, backend=args.backend,
                            seed=seed, weight_bound=W, methods=methods,
                            groups=groups,
                            progress=not args.quiet, timeout=args.timeout))
    res = _mean(runs)
    s, rep = res["sqm"], res["sqm"]["report"]
    print(f"logistic regression on {args.dataset}: {Xtr.shape[0]} train / {Xte.shape[0]} test records, "
          f"{Xtr.shape[1]} features, {args.parties} clients (+ server), backend {s['backend']}, {args.runs} run(s)")
    print(f"  q {q:g}  epochs {epochs}  rounds {rep.rounds}  batch cap {s['b_max']}  lr {lr:g}  "
          f"||w|| <= {W:g}  gamma {args.gamma:g}  mu {rep.mu:.4g}")
    print(f"  clipped records per client {s['clipped']}  batches truncated {s['batches_truncated']}")
    print(render_table(utility_rows(res), UTILITY_COLUMNS))
    print(f"  * SQM: {MODEL_SHARED_NOTE}")
    if args.seed is not None:
        print("  --seed: one process derives every party's seed (a local experiment, secure_mode false)")
    if args.json:
        write_json(args.json, dict(dataset=args.dataset, q=q, epochs=epochs, parties=args.parties, learning_rate=lr,
                                   weight_bound=W, secure_mode=args.seed is None, **res, per_run=runs))
    return 0


def register(sub) -> None:
    from . import options

    p = sub.add_parser("logreg", help="private logistic regression (SQM) with DPSGD, local-DP and "
                                      "non-private baselines",
                       parents=[options.privacy(epsilon_help="server-observed epsilon target"), options.runtime(),
                                options.job("job file (JSON: parties' addresses, party 0 the server, each client's "
                                            "CSV, and the dataset id the ledger charges; see apps/jobfile.py): a "
                                            "real multi-party run in which each party reads only its own file; the "
                                            "label party's CSV holds the --label-column"), options.output()],
                       description="Train logistic regression on vertically partitioned data with SQM "
                                   "(real MPyC party processes by default) and compare with DPSGD (Opacus), "
                                   "VFL local DP and non-private training at the same (epsilon, delta).")
    p.add_argument("--dataset", default="breast_cancer", choices=DATASETS,
                   help="breast_cancer (scikit-learn, default), adult (UCI files), credit_default (UCI file)")
    p.add_argument("--data", default=None,
                   help="the dataset's folder (adult) or CSV file / folder (credit_default); default "
                        "../shared/data/{adult,credit-default} next to the repository")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks (default 3); the "
                                                          "last holds the label")
    p.add_argument("--gamma", type=float, default=8192.0, help="quantization scale gamma (default 8192 = 2^13)")
    p.add_argument("--q", type=float, default=None,
                   help="Poisson sampling rate (default 0.05 for breast_cancer, 0.001 otherwise, as the paper)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs (default: the paper's 2, 5, 8, 10, 10 for epsilon 0.5, 1, 2, 4, 8)")
    p.add_argument("--learning-rate", "--lr", type=float, default=None,
                   help="learning rate for SQM, DPSGD and the Taylor reference (default 1 for breast_cancer, "
                        "0.5 otherwise)")
    p.add_argument("--weight-bound", type=float, default=None,
                   help="project ||w||_2 <= W after each step, SQM and DPSGD alike; W enters SQM's sensitivity "
                        "(default 1, the paper's, for breast_cancer; 8 for adult and credit_default, where W = 1 "
                        "leaves every method at the majority-class rate)")
    p.add_argument("--runs", type=int, default=1, help="independent runs to average (default 1)")
    p.add_argument("--no-baselines", action="store_true", help="train SQM only")
    p.add_argument("--label-column", default="label", help="with --job: the label column's name (default label)")
    p.add_argument("--label-party", type=int, default=None,
                   help="with --job: 0-based client index holding the label (default the last client)")
    p.set_defaults(func=run)
