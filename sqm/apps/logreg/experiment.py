"""The experiment behind ``sqm logreg`` and the SQM-LR benchmarks: the data splits, SQM-LR against its baselines,
and the table's rows."""
from __future__ import annotations

import dataclasses
import math
import time
from typing import TYPE_CHECKING
from sqm.errors import UsageError

if TYPE_CHECKING:
    import numpy as np


CLIENT_VIEW = "nothing (only Shamir shares)"  # what a client observes during SQM-LR training


# ----- datasets --------------------------------------------------------------------------------------------
DATASETS = ("breast_cancer", "adult", "credit_default")  # the data sets sqm logreg runs on


def unit_ball_split(name: str, data_dir: str | None = None, seed: int = 0):
    """(X_train, y_train, X_test, y_test, attributes) from :func:`sqm.data.datasets.load_dataset` (its split:
    adult's shipped test set, else stratified 75/25 with ``seed``), every row with ||x||_2 <= 1; ``attributes``:
    each column's original attribute (public metadata, :func:`public_split`'s groups).

    adult and credit_default are encoded from public metadata only with ||x|| <= 1 by construction;
    breast_cancer (scikit-learn's bundled copy, a public demo set) is standardized with the training split's
    statistics, clipped to +-3 and divided by 3 sqrt(d)."""
    from sqm.data.datasets import load_dataset

    if name not in DATASETS:
        raise UsageError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    ds = load_dataset(name, data_dir)
    Xtr, ytr, Xte, yte = ds.train_test(0.25, seed)
    if name == "breast_cancer":
        Xtr, Xte = standardized_unit_rows(Xtr, Xte)
    return Xtr, ytr, Xte, yte, ds.attributes


def standardized_unit_rows(Xtr, Xte) -> tuple[np.ndarray, np.ndarray]:
    """Both splits standardized with the training split's statistics, clipped to +-3 and divided by 3 sqrt(d),
    so every row has ||x||_2 <= 1 (a local comparison's preprocessing: data-derived, outside the accounting)."""
    import numpy as np

    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1
    f = lambda A: np.clip((A - mu) / sd, -3, 3) / (3 * math.sqrt(A.shape[1]))  # noqa: E731
    return f(Xtr), f(Xte)


# ----- one comparison --------------------------------------------------------------------------------------
def public_split(groups: list[str], n_parties: int) -> tuple[list[int], np.ndarray]:
    """Column counts that cut only between attributes (as equal as possible) and the per-party norm bounds
    c_j = sqrt(attributes of party j / all attributes).  With rows encoded as sum over attributes of at most
    1 / (number of attributes) in squared norm (sqm.data.datasets' encoders, breast_cancer's scaling), no
    sub-row ever exceeds its bound: nothing is clipped, and the bounds come from public metadata only."""
    import numpy as np

    d = len(groups)
    starts = [j for j in range(d) if j == 0 or groups[j] != groups[j - 1]] + [d]
    if n_parties > len(starts) - 1:
        raise UsageError(f"cannot split {len(starts) - 1} attributes among {n_parties} parties")
    cuts = [0]
    for k in range(1, n_parties):
        target = k * d / n_parties
        options = [b for b in starts[1:-1] if b > cuts[-1] and len([x for x in starts if x > b]) >= n_parties - k]
        cuts.append(min(options, key=lambda b: abs(b - target)))
    cuts.append(d)
    counts = [b - a for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
    n_attr = [len({groups[j] for j in range(a, b)}) for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
    return counts, np.sqrt(np.asarray(n_attr, np.float64) / sum(n_attr))


def compare(Xtr, ytr, Xte, yte, *, epsilon, delta, gamma, parties, backend, seed, q=None, epochs=None,
            learning_rate=None, weight_bound=None, methods=("sqm", "dpsgd", "local", "nonprivate", "taylor"),
            progress=False, groups=None, timeout: float = 3600.0, fit_intercept: bool = True,
            solver: str = "moments", robust_noise: int = 0, verify_sharing: bool = False,
            verify_inputs: bool = False, base_rate: float | None = None) -> dict:
    """Test accuracy and privacy of SQM and each baseline for one seed (an int or None): method -> a row
    ``{"method", "accuracy", "seconds", "bytes_sent", "report": PrivacyReport, ...}``.  ``groups`` (the
    attribute of each column) makes the parties' split and norm bounds follow attributes (:func:`public_split`).
    The schedule (q, epochs, learning rate, ||w|| bound) left None is
    :func:`sqm.apps.logreg.estimator.default_schedule`'s for the training records, the same for SQM, DPSGD and the
    Taylor reference; with ``fit_intercept`` every method fits an intercept (DPSGD and Taylor on the rows with SQM's
    constant column, clipped at their norm bound sqrt(1 + 1)).  ``base_rate``: SQM's only (its sgd solver's
    expansion point, refused by the estimator with another solver)."""
    import numpy as np

    from sqm.mechanism.report import PrivacyReport
    from sqm.mechanism.vertical import VerticalData

    from sqm.apps.logreg.baselines import (dpsgd_fit, local_dp_fit, nonprivate_fit, roc_auc, taylor_fit,
                                           with_intercept_column)
    from sqm.apps.logreg.estimator import SQMLogisticRegression, resolve_schedule
    from sqm.apps.logreg.party import logistic_loss

    sched = resolve_schedule(len(Xtr), epsilon, q, epochs, learning_rate, weight_bound)
    q, epochs, learning_rate, weight_bound = sched.q, sched.epochs, sched.learning_rate, sched.weight_bound
    c = 1.0 if fit_intercept else 0.0
    Xtr_c, Xte_c = with_intercept_column(Xtr, c), with_intercept_column(Xte, c)
    rng = np.random.default_rng(seed)
    sub = [int(s) for s in rng.integers(0, 2 ** 62, size=4)] if seed is not None else [None] * 4
    out = {}

    def row(name, scores, t0, report, **extra):
        """``scores``: the method's decision values on the test split (positive: class 1)."""
        scores = np.asarray(scores, np.float64)
        out[name] = dict(method=report.method, accuracy=float(np.mean((scores > 0) == (np.asarray(yte) == 1))),
                         auc=roc_auc(yte, scores), seconds=time.perf_counter() - t0, bytes_sent=0, report=report,
                         **extra)
    if "sqm" in methods:
        bounds, data = None, Xtr
        if groups is not None:
            counts, bounds = public_split(groups, parties)
            data = VerticalData(np.split(np.asarray(Xtr, np.float64), np.cumsum(counts)[:-1], axis=1))
        sgd = solver == "sgd"  # the schedule is the sgd solver's (and the baselines'); moments has none
        m = SQMLogisticRegression(epsilon, delta, gamma, q if sgd else None, epochs if sgd else None,
                                  learning_rate if sgd else None, backend, parties,
                                  weight_bound=weight_bound if sgd else None, party_bounds=bounds, seed=sub[0],
                                  progress=progress, timeout=timeout, fit_intercept=fit_intercept,
                                  intercept_scaling=1.0, solver=solver, robust_noise=robust_noise,
                                  verify_sharing=verify_sharing, verify_inputs=verify_inputs, base_rate=base_rate)
        t0 = time.perf_counter()
        m.fit(data, ytr, eval_set=(Xte, yte) if progress and sgd else None)
        row("sqm", m.decision_function(Xte), t0, m.report_,
            test_loss=logistic_loss(np.r_[m.coef_[0], m.intercept_ / c] if c else m.coef_[0], Xte_c, yte),
            training_seconds=m.seconds_, clipped=m.clipped_, batches_truncated=m.batches_truncated_,
            b_max=m.plan_.b_max if m.plan_ is not None else None, backend=m.backend_, solver=m.solver_,
            solver_reason=m.solver_reason_, schedule=None if m.schedule_ is None else dataclasses.asdict(m.schedule_))
        out["sqm"]["bytes_sent"] = int(sum(m.bytes_sent_))
    if "dpsgd" in methods:
        t0 = time.perf_counter()
        w, rep = dpsgd_fit(Xtr_c, ytr, epsilon, delta, q, epochs, learning_rate, weight_bound,
                           max_grad_norm=math.sqrt(1.0 + c * c), seed=sub[1])
        row("dpsgd", Xte_c @ w, t0, rep)
    if "local" in methods:
        t0 = time.perf_counter()
        mdl, rep = local_dp_fit(Xtr, ytr, epsilon, delta, seed=sub[2], fit_intercept=fit_intercept)
        row("local", mdl.decision_function(Xte), t0, rep)
    if "nonprivate" in methods:
        t0 = time.perf_counter()
        mdl = nonprivate_fit(Xtr, ytr, fit_intercept=fit_intercept)
        row("nonprivate", mdl.decision_function(Xte), t0, PrivacyReport(method="non-private", epsilon_server=math.inf,
                                                                 epsilon_client=math.inf, delta=0.0,
                                                                 neighbouring="none"))
    if "taylor" in methods:
        t0 = time.perf_counter()
        w = taylor_fit(Xtr_c, ytr, q, epochs, learning_rate, weight_bound, seed=sub[3])
        row("taylor", Xte_c @ w, t0, PrivacyReport(
            method="Taylor (noiseless)", epsilon_server=math.inf, epsilon_client=math.inf, delta=0.0,
            neighbouring="none",
            notes="SQM's Taylor gradient, sampling and projection in float64, without noise or quantization"))
    return out


def _mean(runs: list[dict]) -> dict:
    import numpy as np

    out = {}
    for key in runs[0]:
        vals = [r[key] for r in runs]
        out[key] = dict(runs[0][key])
        out[key]["accuracy"] = float(np.mean([v["accuracy"] for v in vals]))
        out[key]["accuracy_std"] = float(np.std([v["accuracy"] for v in vals]))
        out[key]["auc"] = float(np.mean([v["auc"] for v in vals]))
        out[key]["auc_std"] = float(np.std([v["auc"] for v in vals]))
        out[key]["seconds"] = float(np.mean([v["seconds"] for v in vals]))
        out[key]["runs"] = len(vals)
    return out


UTILITY_COLUMNS = [("accuracy", "accuracy", ".4f"), ("auc", "AUC", ".4f"), ("epsilon_server", "eps server"),
                   ("epsilon_client", "eps client*"), ("delta", "delta", ".3g"), ("seconds", "seconds", ".2f"),
                   ("bytes_sent", "bytes", ",")]


def utility_rows(res: dict) -> list[dict]:
    """The utility table's rows: each method's metrics with its privacy report's epsilons and delta."""
    return [{**{k: v for k, v in r.items() if k != "report"}, "epsilon_server": r["report"].epsilon_server,
             "epsilon_client": r["report"].epsilon_client, "delta": r["report"].delta} for r in res.values()]
