"""SQM-LR's baselines at the same (epsilon, delta): centralized DPSGD (Opacus, PRV accountant), VFL local DP
(Gaussian on the released columns, :func:`sqm.mechanism.calibration.gaussian_sigma`), non-private scikit-learn, and the
noiseless Taylor gradient (the cost of SQM's approximation alone)."""
from __future__ import annotations

import functools
import math

import numpy as np

from sqm.framework.extras import require
from sqm.mechanism import events
from sqm.mechanism.calibration import gaussian_epsilon, gaussian_sigma
from sqm.mechanism.report import PrivacyReport
from sqm.mechanism.rng import make_rng
from sqm.mechanism.validation import check_delta, check_epsilon
from sqm.mechanism.vertical import clip_rows
from sqm.apps.logreg.estimator import check_labels, check_schedule, steps
from sqm.apps.logreg.party import project


def with_intercept_column(X, constant: float) -> np.ndarray:
    """X with the intercept's constant column appended (``constant`` 0: X unchanged), as SQM's label party
    appends it (:meth:`sqm.apps.logreg.party.LRPlan.with_constant`): the baselines fit the same model on the same
    rows, the constant inside the row norm (sqrt(||x||^2 + c^2)) and so inside DPSGD's clipping."""
    X = np.asarray(X, np.float64)
    return X if not constant else np.hstack([X, np.full((X.shape[0], 1), float(constant))])


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
        w = project(w - learning_rate * (B.T @ (0.5 + B @ w / 4 - y[idx])) / (q * N), weight_bound)
    return w


DPSGD_ACCOUNTANT = "prv"  # Opacus' tightest: the PRV accountant (numerical composition of privacy loss
# distributions, Gopi et al. 2021), whose epsilon is an upper bound (its error included); its RDP accountant
# needs 7-26% more noise at the settings of sqm logreg (q 0.05, R 40-200: 7.5-8.5%; q 0.001, R 5000-10000:
# 22-26%; epsilon 1, delta 1e-5)


@functools.lru_cache(maxsize=256)
def _noise_multiplier(epsilon: float, delta: float, q: float, R: int) -> float:
    """Opacus' noise multiplier for R Poisson steps at rate q reaching (epsilon, delta) under
    :data:`DPSGD_ACCOUNTANT`: a function of public schedule quantities only, so cached (a grid search asks for the
    same schedule many times, and the accountant's search costs more than the training)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=q, steps=R,
                                      accountant=DPSGD_ACCOUNTANT))


@functools.lru_cache(maxsize=256)
def _spent_epsilon(sigma: float, q: float, R: int, delta: float) -> float:
    """The epsilon at ``delta`` of R Poisson steps at rate q with noise multiplier sigma (same accountant)."""
    from opacus.accountants import create_accountant

    acc = create_accountant(DPSGD_ACCOUNTANT)
    acc.history = [(sigma, q, R)]
    return float(acc.get_epsilon(delta))


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


    require("vfl", "the DPSGD baseline")
    import torch
    from dp_accounting import dp_event
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    check_epsilon(epsilon)
    check_delta(delta)
    check_schedule(q, epochs, learning_rate)
    X = np.asarray(X, np.float32)
    y = check_labels(y, X.shape[0]).astype(np.float32)
    R = steps(q, epochs)
    sigma = _noise_multiplier(float(epsilon), float(delta), float(q), int(R))
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
    # the epsilon of what ran: R Poisson steps at rate q (the engine's own accountant books 1 / len(loader) as
    # the rate, e.g. 1/9 for q = 0.1067, and so over-reports: 1.038 for a 0.994 run)
    eps = _spent_epsilon(float(sigma), float(q), int(R), float(delta))
    wt = model._module.weight if hasattr(model, "_module") else model.weight
    step = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(float(sigma)))
    report = PrivacyReport(method="DPSGD", epsilon_server=eps, epsilon_client=eps, delta=float(delta),
                           sigma=float(sigma) * max_grad_norm, l2_sensitivity=float(max_grad_norm), sampling_rate=q,
                           rounds=R, events=(dp_event.SelfComposedDpEvent(step, R),),
                           notes=f"central (a trusted curator holds every column); Opacus {DPSGD_ACCOUNTANT} "
                                 f"accountant")
    return wt.detach().numpy().astype(np.float64).reshape(-1), report


LOCAL_DP_SENSITIVITY = math.sqrt(2.0)  # L2 norm of one released record (x, y): ||x||^2 + y^2 <= 1 + 1


def local_dp_fit(X, y, epsilon: float, delta: float, seed=None, fit_intercept: bool = True):
    """VFL local-DP baseline: each party releases its columns plus iid N(0, sigma^2) noise (the label party its
    label too), and a logistic regression is trained to convergence on the released data (perturbed labels
    thresholded at 1/2).  Returns (fitted scikit-learn model, its privacy report).

    Calibration, in the convention of SQM's sensitivity and of the PCA baseline (``sqm.apps.pca.local_dp_pca``):
    neighbouring datasets differ in one record, present or absent; as record ids are public in VFL, an absent
    record is a row of zeros in the released m x (d + 1) matrix [X | y].  So the released matrix changes in one
    row, by (x, y) with ||x||_2 <= 1 (rows are clipped to the unit ball first; the data sets' encodings already
    satisfy it) and y in {0, 1}: L2 sensitivity sqrt(||x||^2 + y^2) <= sqrt(1 + 1) = sqrt(2), reached by a unit
    row labelled 1.  The parties' independent noises together are ONE Gaussian mechanism on the whole matrix,
    so sigma = :func:`sqm.mechanism.calibration.gaussian_sigma` (sqrt(2), epsilon, delta), the exact single-release
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
    return LogisticRegression(max_iter=2000, fit_intercept=fit_intercept).fit(Xn, yn), report


def nonprivate_fit(X, y, fit_intercept: bool = True):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=5000, fit_intercept=fit_intercept).fit(np.asarray(X, np.float64),
                                                                               check_labels(y))


def accuracy(w, X, y) -> float:
    return float(np.mean(((np.asarray(X) @ w) > 0) == (np.asarray(y) == 1)))


def roc_auc(y, scores) -> float:
    """The area under the ROC curve of ``scores`` for labels ``y`` (scikit-learn's; NaN when the test labels
    hold one class only)."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(y) == 1
    if y.all() or not y.any():
        return math.nan
    return float(roc_auc_score(y, np.asarray(scores, np.float64)))
