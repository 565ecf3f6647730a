"""Private linear / ridge regression with SQM: ONE release of the joint Gram [X 1 y]^T [X 1 y], then the server
solves the ridge normal equations.  Baselines: central DP on the same sufficient statistics (a trusted curator
adds symmetric Gaussian noise at the same epsilon and delta, :func:`sqm.calibration.gaussian_sigma`) and
non-private ridge (scikit-learn).  ``sqm linreg`` compares them on a held-out split (R^2, RMSE), or runs one
real multi-party job from a job file (``--job``), like ``sqm pca``.

Layout: the clients hold contiguous column blocks of [X, 1, y]; the last client holds the label y (and the
constant column of the intercept).  Bounds are per column group (:class:`sqm.vertical.ColumnBounds`): each
party's feature sub-row ||x_p|| <= c_p (sum_p c_p^2 = c_x^2), the constant 1, and the label |y| <= c_y on its
own, so the label is never clipped with its party's features.
"""
from __future__ import annotations

import math
import time

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y

from sqm.polynomial import CovariancePolynomial
from sqm.sensitivity import gram_sensitivity
from sqm.vertical import ColumnBounds, VerticalData, clip_rows

from .jobfile import JobTask

# ----- the statistic: joint Gram, its proven sensitivity, the server's solve ---------------------------------


class JointGram(CovariancePolynomial):
    """f(z) = z z^T for the joint row z = [x, 1, y] ([x, y] without intercept); sum_z f(z) = [X 1 y]^T [X 1 y]
    holds every sufficient statistic of ridge regression (X^T X, X^T y, y^T y, column sums, the count).

    Proven sensitivity, adding or removing one record, with ``bounds`` from :func:`joint_bounds`.  Each client
    rounds its entries stochastically at scale gamma, z_hat_j in {floor(gamma z_j), ceil(gamma z_j)}; the other
    records' roundings do not depend on the record, so the quantized Gram changes by exactly z_hat z_hat^T:
        L2 = ||z_hat z_hat^T||_F = ||z_hat||_2^2,   L1 = ||z_hat||_1^2.
    Per party feature group (n_p columns, ||x_p|| <= c_p):  ||x_hat_p|| <= min(gamma c_p + sqrt(n_p),
    sqrt(n_p) ceil(gamma c_p)) (|x_hat_j| < gamma |x_j| + 1 and the triangle inequality; or every
    |x_hat_j| <= ceil(gamma c_p)); the constant: |1_hat| <= ceil(gamma); the label: |y_hat| <= ceil(gamma c_y).
    So  L2 <= sum_p min(...)^2 + ceil(gamma)^2 + ceil(gamma c_y)^2  (about gamma^2 (c_x^2 + 1 + c_y^2)) and
    L1 <= min(L2^2, (d + 2) L2) (integers: |v| <= v^2; Cauchy-Schwarz: ||z_hat||_1^2 <= (d + 2) ||z_hat||_2^2).
    This is :func:`sqm.sensitivity.gram_sensitivity` on those groups (tests: brute force over every rounding
    outcome of worst-case rows)."""

    def __init__(self, n_vars: int):
        super().__init__(n_vars)
        object.__setattr__(self, "name", "joint-gram")

    def sensitivity(self, gamma: float, bounds: ColumnBounds, preprocess: bool = False):
        if bounds.n_cols != self.n_vars:
            raise ValueError(f"the joint Gram has {self.n_vars} columns, the bounds cover {bounds.n_cols}")
        return gram_sensitivity(gamma, bounds)


def joint_bounds(col_counts, feature_bound: float, label_bound: float, fit_intercept: bool) -> ColumnBounds:
    """Column groups of [X 1 y] split among clients holding ``col_counts`` columns (the last ones: 1 and y)."""
    n = int(sum(col_counts))
    extra = {n - 1: float(label_bound)} | ({n - 2: 1.0} if fit_intercept else {})
    return ColumnBounds.parties(col_counts, feature_bound, separate=extra)


def solve_ridge(A, alpha: float, noise_std: float = 0.0, fit_intercept: bool = True):
    """(coef, intercept) from the (noisy) joint Gram ``A``: (Z^T Z + alpha I') w = Z^T y, Z = [X 1], I' not
    penalizing the intercept (as scikit-learn's Ridge).  Noise can make Z^T Z indefinite: its symmetric part's
    eigenvalues are floored at 2 sqrt(p) noise_std, about the spectral norm of a p x p symmetric noise matrix
    with entries of std ``noise_std`` (directions below it are noise); post-processing, no privacy cost."""
    S = (np.asarray(A, np.float64) + np.asarray(A, np.float64).T) / 2.0
    p = S.shape[0] - 1
    lam, V = np.linalg.eigh(S[:p, :p])
    M = (V * np.maximum(lam, 2.0 * math.sqrt(p) * noise_std)) @ V.T + alpha * np.diag([1.0] * (p - 1) + [
        0.0 if fit_intercept else 1.0])
    w = np.linalg.lstsq(M, S[:p, p], rcond=None)[0]
    return (w[:-1], float(w[-1])) if fit_intercept else (w, 0.0)


# ----- the estimator ------------------------------------------------------------------------------------------


def joint_matrix(X, y, fit_intercept: bool) -> np.ndarray:
    X = np.asarray(X, np.float64)
    return np.hstack([X] + ([np.ones((X.shape[0], 1))] if fit_intercept else []) + [np.asarray(y, float)[:, None]])


class SQMLinearRegression(RegressorMixin, BaseEstimator):
    """Differentially private ridge regression over vertically partitioned data with SQM (a scikit-learn
    regressor): one SQM release of [X 1 y]^T [X 1 y], then the server solves (:func:`solve_ridge`).

    Parameters (stored unchanged; checked in :meth:`fit`): ``alpha`` (ridge penalty, on the record-sum scale
    like :class:`sklearn.linear_model.Ridge`), ``epsilon`` (server-observed, at ``delta``), ``gamma``,
    ``feature_bound`` c_x (every record's ||x||; each party clips its feature sub-row to c_x sqrt(n_p / d)),
    ``label_bound`` c_y (|y| <= c_y, clipped on its own), ``fit_intercept``, ``n_parties`` (clients among whom
    the columns of [X 1 y] are split, the last holding y), ``backend`` ('mpyc' real party processes, 'plain' the
    in-process simulation of the same programs), ``seed`` (None: OS entropy), ``backend_options``.

    After :meth:`fit`: ``coef_``, ``intercept_``, ``gram_`` (the noisy joint Gram), ``report_``
    (:class:`sqm.report.PrivacyReport`), ``clipped_`` (rows clipped per client), ``seconds_``, ``bytes_sent_``,
    ``backend_``, ``raw_``, ``n_features_in_``."""

    def __init__(self, alpha=1.0, epsilon=1.0, delta=1e-5, gamma=4096.0, feature_bound=1.0, label_bound=1.0,
                 fit_intercept=True, n_parties=2, backend="mpyc", seed=None, backend_options=None):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.feature_bound = feature_bound
        self.label_bound = label_bound
        self.fit_intercept = fit_intercept
        self.n_parties = n_parties
        self.backend = backend
        self.seed = seed
        self.backend_options = backend_options

    def mechanism(self, col_counts):
        """The SQM release of the joint Gram over clients holding ``col_counts`` columns of [X 1 y]."""
        from sqm.mechanism import SQM

        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")
        bounds = joint_bounds(col_counts, self.feature_bound, self.label_bound, bool(self.fit_intercept))
        return SQM(JointGram(int(sum(col_counts))), self.gamma, epsilon=self.epsilon, delta=self.delta,
                   column_bounds=bounds, backend=self.backend, seed=self.seed, backend_options=self.backend_options)

    def fit(self, X, y):
        X, y = check_X_y(X, y, dtype=np.float64, y_numeric=True)
        Z = joint_matrix(X, y, bool(self.fit_intercept))
        n = self.n_parties
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= Z.shape[1]:
            raise ValueError(f"n_parties must be an integer in 1..{Z.shape[1]} (the columns of [X 1 y]), got {n!r}")
        data = VerticalData.split(Z, int(n))
        res = self.mechanism(data.col_counts).run(data)
        self.gram_ = res.estimate.reshape(Z.shape[1], Z.shape[1])
        std = math.sqrt(2.0 * res.report.mu) / res.scale
        self.coef_, self.intercept_ = solve_ridge(self.gram_, float(self.alpha), std, bool(self.fit_intercept))
        self.n_features_in_ = X.shape[1]
        self.report_, self.clipped_, self.seconds_ = res.report, list(res.clipped), res.seconds
        self.bytes_sent_, self.backend_, self.raw_ = list(res.bytes_sent), res.backend, res.raw
        return self

    def predict(self, X) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = check_array(X, dtype=np.float64)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but SQMLinearRegression is expecting "
                             f"{self.n_features_in_} features as input")
        return X @ self.coef_ + self.intercept_


# ----- baselines ----------------------------------------------------------------------------------------------


def central_dp_linreg(X, y, alpha: float, epsilon: float, delta: float, feature_bound: float = 1.0,
                      label_bound: float = 1.0, fit_intercept: bool = True, seed=None) -> dict:
    """A trusted curator clips rows (||x|| <= c_x, |y| <= c_y) and releases [X 1 y]^T [X 1 y] + (G + G^T) / 2,
    G iid N(0, sigma^2): the Gaussian mechanism on the full Gram, whose change when a record z = [x, 1, y] is
    added or removed is z z^T with ||z z^T||_F = ||z||^2 <= c_x^2 + 1 + c_y^2 (its L2 sensitivity; the
    symmetric part is post-processing, as for SQM's noise).  sigma from :func:`sqm.calibration.gaussian_sigma`."""
    from sqm.calibration import gaussian_sigma

    from .pca import symmetric_gaussian

    t0 = time.perf_counter()
    Xc, clipped = clip_rows(np.asarray(X, np.float64), feature_bound)
    Z = joint_matrix(Xc, np.clip(y, -label_bound, label_bound), fit_intercept)
    l2 = feature_bound ** 2 + label_bound ** 2 + (1.0 if fit_intercept else 0.0)
    sigma = gaussian_sigma(l2, epsilon, delta)
    A = Z.T @ Z + symmetric_gaussian(Z.shape[1], sigma, seed)
    coef, intercept = solve_ridge(A, alpha, sigma, fit_intercept)
    return {"coef": coef, "intercept": intercept, "sigma": sigma, "l2_sensitivity": l2, "clipped": clipped,
            "seconds": time.perf_counter() - t0}


def scores(coef, intercept, X, y, y_scale: float = 1.0) -> dict:
    """R^2 and RMSE (in the label's original units: times ``y_scale``) of a linear model on (X, y)."""
    pred = np.asarray(X) @ coef + intercept
    resid = np.asarray(y) - pred
    r2 = 1.0 - float(resid @ resid) / float(np.sum((y - np.mean(y)) ** 2))
    return {"r2": r2, "rmse": float(np.sqrt(np.mean(resid ** 2))) * y_scale}


# ----- data and the comparison (the `sqm linreg` table) -------------------------------------------------------

TARGETS = {"diabetes": None, "breast_cancer": "mean radius", "adult": "hours-per-week"}


def regression_data(name: str, path=None, feature_bound: float = 1.0, label_bound: float = 1.0):
    """(X, y, y_scale): ``name``'s features scaled so the largest row norm is c_x and its target (the dataset's
    own for diabetes; a column moved out of the features otherwise: :data:`TARGETS`) so max |y| = c_y (the
    experiments' preprocessing, as ``sqm pca``'s); y_scale maps y back to the original units."""
    from .datasets import load_dataset, scale_rows

    if name not in TARGETS:
        raise ValueError(f"no regression target known for {name!r}; choose one of {', '.join(TARGETS)}")
    ds = load_dataset(name, path)
    X, y = ds.X, np.asarray(ds.y, np.float64)
    if TARGETS[name] is not None:
        k = list(ds.feature_names).index(TARGETS[name])
        X, y = np.delete(X, k, axis=1), X[:, k]
    y_scale = float(np.max(np.abs(y))) / label_bound
    return scale_rows(X, feature_bound), y / y_scale, y_scale


def compare(X, y, n_parties: int, alpha: float, epsilon: float, delta: float, gamma: float,
            feature_bound: float = 1.0, label_bound: float = 1.0, backend: str = "mpyc", runs: int = 1, seed=None,
            test_size: float = 0.25, y_scale: float = 1.0, split_seed: int = 0) -> dict:
    """SQM, central DP and non-private ridge on a held-out split, averaged over ``runs``."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import train_test_split

    from sqm.rng import spawn_seeds

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, random_state=split_seed)
    rows = {"SQM": [], "central DP": []}
    rep = None
    for s in spawn_seeds(seed, int(runs)):
        s_sqm, s_c = s.spawn(2)
        m = SQMLinearRegression(alpha, epsilon, delta, gamma, feature_bound, label_bound, True, n_parties, backend,
                                s_sqm).fit(Xtr, ytr)
        rep = m.report_
        rows["SQM"].append({**scores(m.coef_, m.intercept_, Xte, yte, y_scale), "seconds": m.seconds_,
                            "bytes": float(sum(m.bytes_sent_))})
        c = central_dp_linreg(Xtr, ytr, alpha, epsilon, delta, feature_bound, label_bound, True, s_c)
        rows["central DP"].append({**scores(c["coef"], c["intercept"], Xte, yte, y_scale), "seconds": c["seconds"],
                                   "sigma": c["sigma"]})
    t0 = time.perf_counter()
    ridge = Ridge(alpha=alpha).fit(Xtr, ytr)
    nonpriv = {"method": "non-private (Ridge)", **scores(ridge.coef_, ridge.intercept_, Xte, yte, y_scale),
               "epsilon": math.inf, "seconds": time.perf_counter() - t0}
    table = [{"method": f"SQM ({backend})", "epsilon": rep.epsilon_server,
              **{k: float(np.mean([r[k] for r in rows["SQM"]])) for k in rows["SQM"][0]}},
             {"method": "central DP (Gauss)", "epsilon": epsilon,
              **{k: float(np.mean([r[k] for r in rows["central DP"]])) for k in rows["central DP"][0]}}, nonpriv]
    return {"rows": table, "report": rep.as_dict(), "shape": list(X.shape), "train": len(ytr), "test": len(yte),
            "parties": n_parties, "alpha": alpha, "gamma": gamma, "delta": delta, "runs": int(runs),
            "secure_mode": seed is None}


# ----- real multi-party jobs from a job file ------------------------------------------------------------------


class LinRegJobTask(JobTask):
    """The SQM linear-regression task for :mod:`apps.jobfile`: the last client's CSV holds the label column
    ``label_column`` besides its features; every party plans the same release from the clients' column and
    record counts and runs :func:`sqm.mechanism.sqm_round`; the server solves.  Seeds as in
    :class:`apps.pca.PCAJobTask` (never sent; a seeded job equals ``SQMLinearRegression(seed=...).fit``)."""

    def __init__(self, estimator: SQMLinearRegression, label_column: str = "label",
                 insecure_reproducible: bool = False):
        from .jobfile import seed_policy

        self.secure_mode = seed_policy(estimator.seed, insecure_reproducible, warn=False)
        self.est, self.label_column, self.seed = estimator, label_column, estimator.seed
        self.est.mechanism([1, 2])  # bad parameters refused here, before any party starts

    def public(self):
        e = self.est
        return ("linreg", float(e.alpha), float(e.epsilon), float(e.delta), float(e.gamma), float(e.feature_bound),
                float(e.label_bound), bool(e.fit_intercept), self.label_column)

    def _plan(self, meta):
        counts = list(meta.col_counts)
        counts[-1] += int(bool(self.est.fit_intercept))  # the label party adds the constant column
        mech = self.est.mechanism(counts)
        return (counts, mech, *mech.round_plan(counts, meta.n_records, align_ids=True))

    def release(self, meta):
        """The privacy report (events) of the job's one SQM release, from the public counts only."""
        return self._plan(meta)[3]

    async def run(self, ctx, table, meta) -> dict:
        from mpc.party import InputRefused
        from sqm.mechanism import sqm_round
        from sqm.rng import make_rng, spawn_seeds

        counts, mech, plan, report = self._plan(meta)
        block = None if table is None else table.block
        if table is not None and ctx.pid == meta.n_parties:  # the label party: [features, 1, y]
            if self.label_column not in table.columns:
                raise InputRefused(f"its file has no label column '{self.label_column}'", table.file)
            k = list(table.columns).index(self.label_column)
            block = joint_matrix(np.delete(table.block, k, axis=1), table.block[:, k], bool(self.est.fit_intercept))
        rng = make_rng(spawn_seeds(self.seed, meta.n_parties + 1)[ctx.pid])
        out = await sqm_round(ctx, mech.polynomial, block, plan, rng,
                              ids_digest=None if table is None else table.ids_digest)
        if not ctx.is_server:
            return {"clipped": out.clipped, "rows": table.n_rows, "cols": table.n_cols}
        gram = out.estimate.reshape(sum(counts), sum(counts))
        coef, intercept = solve_ridge(gram, float(self.est.alpha), math.sqrt(2 * report.mu) / out.scale,
                                      bool(self.est.fit_intercept))
        return {"coef": coef, "intercept": intercept, "report": report.as_dict(), "raw": out.raw}


# ----- the `sqm linreg` command -------------------------------------------------------------------------------


def _run_cli(args) -> int:
    from sqm.report import render_table, write_json

    if args.job:
        return _run_job(args)
    X, y, y_scale = regression_data(args.dataset, args.data, args.feature_bound, args.label_bound)
    r = compare(X, y, args.parties, args.alpha, args.epsilon, args.delta, args.gamma, args.feature_bound,
                args.label_bound, args.backend, args.runs, args.seed, args.test_size, y_scale)
    r["dataset"] = args.dataset
    print(f"ridge regression on {args.dataset} {r['shape'][0]} x {r['shape'][1]} ({r['train']} train, {r['test']} "
          f"held out), {args.parties} clients, alpha {args.alpha:g}, delta {args.delta:g}, gamma {args.gamma:g}, "
          f"{r['runs']} run(s)")
    print(render_table(r["rows"], [("epsilon", "eps server", ".4f"), ("r2", "R^2", ".4f"), ("rmse", "RMSE", ".4g"),
                                   ("seconds", "seconds", ".3f"), ("bytes", "bytes", ",.0f")]))
    if args.backend == "plain":
        print("(plain backend: the in-process SIMULATION of the parties' programs; bytes are not measured)")
    if args.json:
        write_json(args.json, r)
    return 0


def _run_job(args) -> int:
    from .jobfile import job_command

    def task():
        est = SQMLinearRegression(args.alpha, args.epsilon, args.delta, args.gamma, args.feature_bound,
                                  args.label_bound, seed=args.seed)
        return LinRegJobTask(est, args.label_column, args.insecure_reproducible)

    def server(res) -> dict:
        print(f"server: ridge coefficients over {len(res['coef'])} features of {res['n_records']} records "
              f"(clients' columns {res['col_counts']}, label at client {len(res['col_counts'])}); intercept "
              f"{res['intercept']:.4g}")
        return {"coef": np.asarray(res["coef"]), "intercept": res["intercept"]}

    return job_command(args, task, server)


def register(sub) -> None:
    from . import options

    p = sub.add_parser(
        "linreg", parents=[options.privacy(), options.runtime(), options.job(), options.output()],
        help="differentially private ridge regression over vertically partitioned data (SQM vs central DP)",
        description="Private ridge regression with SQM: one release of the joint Gram [X 1 y]^T [X 1 y] computed by "
                    "MPyC party processes, solved by the server.  Without --job: split a dataset's columns among "
                    "--parties clients and compare SQM, central DP and non-private ridge on a held-out split "
                    "(R^2, RMSE).  With --job: a real multi-party job, the last client's CSV holding the label.")
    p.add_argument("--dataset", default="diabetes", choices=sorted(TARGETS),
                   help="diabetes (default; its target), breast_cancer (target: mean radius), adult (target: "
                        "hours-per-week, read from ../shared/data/adult)")
    p.add_argument("--data", default=None, help="path of a file-based dataset's folder (adult)")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks of [X 1 y] (default 3)")
    p.add_argument("--alpha", type=float, default=1.0, help="ridge penalty on the record-sum scale (default 1)")
    p.add_argument("--gamma", type=float, default=4096.0, help="quantization scale gamma >= 1 (default 4096)")
    p.add_argument("--feature-bound", type=float, default=1.0, help="c_x: every record's ||x|| (default 1)")
    p.add_argument("--label-bound", type=float, default=1.0, help="c_y: every record's |y| (default 1)")
    p.add_argument("--test-size", type=float, default=0.25, help="held-out fraction (default 0.25)")
    p.add_argument("--runs", type=int, default=1, help="average over this many runs (default 1)")
    p.add_argument("--label-column", default="label", help="with --job: the label column of the last client's CSV")
    p.set_defaults(func=_run_cli)
