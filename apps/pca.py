"""Multi-party PCA with SQM (section 5.1 of the SQM paper), its baselines and the ``sqm pca`` command.

- :class:`SQMPCA`: the clients quantize their columns at scale gamma, add Skellam noise shares, and the
  BGW runtime computes the noisy ``X^T X`` (the covariance polynomial, coefficients 1, no pre-processing);
  the server rescales by 1 / gamma^2 and takes the top-k eigenvectors of its symmetric part.
- :func:`central_dp_pca`: "Analyze Gauss" (Dwork, Talwar, Thakurta, Zhang 2014), a trusted curator adds
  Gaussian noise to ``X^T X``.  Both Gaussian baselines are calibrated by the one policy,
  :func:`sqm.calibration.gaussian_sigma`: the smallest sigma meeting (epsilon, delta) for one release.
- :func:`local_dp_pca`: the VFL local-DP baseline (section 3.3 / Algorithm 4): each party perturbs its
  own column block with Gaussian noise; the server computes the covariance of the noisy matrix.
- :func:`nonprivate_pca`: the optimum.

Utility (the paper's): ``||X V||_F^2`` for the found orthonormal d x k basis V, and its ratio to the
non-private optimum (the sum of the top-k eigenvalues of ``X^T X``; the ratio is <= 1 by Ky Fan's theorem).
PCA here is uncentered, as in the paper (centering would need the column means, another release).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_array, check_is_fitted

from sqm.calibration import gaussian_epsilon, gaussian_sigma
from sqm.report import PrivacyReport
from sqm.rng import make_rng, spawn_seeds
from sqm.vertical import VerticalData, clip_rows, party_norm_bounds

# ----- linear algebra and utility -------------------------------------------------------------------------


def check_components(k, n_cols: int) -> int:
    """k must be an integer in 1..n_cols."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) and not (isinstance(k, float) and k.is_integer()):
        raise ValueError(f"the number of components must be an integer, got {k!r}")
    k = int(k)
    if k < 1:
        raise ValueError(f"the number of components must be >= 1, got {k}")
    if k > n_cols:
        raise ValueError(f"cannot find {k} components in data with {n_cols} columns (need k <= columns)")
    return k


def top_eigen(C: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues, d x k eigenvectors) of the symmetric part of ``C``, largest first.

    Signs are fixed (the largest-magnitude entry of each vector is positive) so results are reproducible.
    """
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"need a square matrix, got shape {C.shape}")
    if not np.all(np.isfinite(C)):
        raise ValueError("the matrix contains NaN or infinite values")
    d = C.shape[0]
    k = check_components(k, d)
    S = (C + C.T) / 2.0
    w, V = scipy.linalg.eigh(S, subset_by_index=[d - k, d - 1])
    w, V = w[::-1], V[:, ::-1]
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(k)])
    signs[signs == 0] = 1.0
    return w.copy(), np.ascontiguousarray(V * signs)


def pca_utility(X: np.ndarray, V: np.ndarray) -> float:
    """The paper's utility ||X V||_F^2 of the subspace spanned by the orthonormal columns of V."""
    X = np.asarray(X, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[0] != X.shape[1]:
        raise ValueError(f"basis of shape {V.shape} does not fit data with {X.shape[1]} columns")
    return float(np.sum((X @ V) ** 2))


def optimal_utility(X: np.ndarray, k: int) -> float:
    """max ||X V||_F^2 over orthonormal d x k V: the sum of the top-k eigenvalues of X^T X."""
    X = np.asarray(X, dtype=np.float64)
    w, _ = top_eigen(X.T @ X, k)
    return float(np.sum(w))


def utility_ratio(X: np.ndarray, V: np.ndarray) -> float:
    """||X V||_F^2 over its non-private optimum at the same k (<= 1)."""
    return pca_utility(X, V) / optimal_utility(X, V.shape[1])


def nonprivate_pca(X: np.ndarray, k: int) -> np.ndarray:
    """The optimal d x k basis: top-k eigenvectors of X^T X (uncentered PCA)."""
    X = _as_matrix(X)
    return top_eigen(X.T @ X, k)[1]


def _as_matrix(X) -> np.ndarray:
    """A finite float64 records x columns matrix (scikit-learn's ``check_array`` checks and messages)."""
    if isinstance(X, VerticalData):
        return X.to_matrix()
    return check_array(X, dtype=np.float64, ensure_min_samples=1)


def _as_vertical(data, n_parties) -> VerticalData:
    """``data`` as the parties' column blocks: a :class:`VerticalData` as given, else a records x columns
    matrix split into ``n_parties`` near-equal column blocks (the vertical split of a local experiment)."""
    if isinstance(data, VerticalData):
        return data
    if isinstance(n_parties, bool) or not isinstance(n_parties, (int, np.integer)) or n_parties < 1:
        raise ValueError(f"n_parties must be an integer >= 1, got {n_parties!r}")
    X = _as_matrix(data)
    if X.shape[1] < n_parties:
        raise ValueError(f"cannot split {X.shape[1]} feature(s) among n_parties={n_parties} clients "
                         f"(each client holds at least one column)")
    return VerticalData.split(X, int(n_parties))


# ----- baselines --------------------------------------------------------------------------------------------


@dataclass
class BaselineResult:
    components: np.ndarray  # d x k
    report: PrivacyReport  # sigma, the achieved epsilon at delta (<= the target), the L2 sensitivity
    clipped: int
    seconds: float

    @property
    def sigma(self) -> float:
        return self.report.sigma

    @property
    def epsilon(self) -> float:
        return self.report.epsilon_server


def _gaussian_report(method: str, sigma: float, l2: float, delta: float, notes: str) -> PrivacyReport:
    from sqm.events import gaussian_event

    return PrivacyReport(method=method, epsilon_server=gaussian_epsilon(sigma, l2, delta), delta=delta, sigma=sigma,
                         l2_sensitivity=l2, events=(gaussian_event(sigma, l2),), notes=notes)


def symmetric_gaussian(d: int, sigma: float, seed=None) -> np.ndarray:
    """(G + G^T) / 2 for G with iid N(0, sigma^2) entries: variance sigma^2 on the diagonal, sigma^2 / 2 off it."""
    G = sigma * make_rng(seed).standard_normal((d, d))
    return (G + G.T) / 2.0


def central_dp_pca(X, k: int, epsilon: float, delta: float, row_norm_bound: float = 1.0,
                   seed=None) -> BaselineResult:
    """Analyze Gauss: a trusted curator releases the top-k eigenvectors of X^T X + E.

    Noise: E = (G + G^T) / 2 with G a d x d matrix of iid N(0, sigma^2).  This is the Gaussian mechanism on
    the full d x d matrix vec(X^T X) -- adding or removing a row x with ||x|| <= c changes it by x x^T, whose
    Frobenius (= L2) norm is ||x||^2 <= c^2 -- followed by taking the symmetric part (post-processing).  So
    sigma is calibrated to L2 sensitivity c^2 by the one policy for Gaussian baselines,
    :func:`sqm.calibration.gaussian_sigma` (the exact optimum for one release).  E is symmetric, with
    variance sigma^2 on the diagonal and sigma^2 / 2 off it; DTTZ's variant (iid N(0, sigma^2) on the upper triangle, mirrored) is also private at
    this sigma but adds twice the off-diagonal variance.  Ours is the same noise SQM ends up with after its
    symmetrization (Skellam of variance 2 mu per entry), so the comparison isolates quantization and
    distribution.  Rows above the bound are scaled down to norm c first (the curator holds whole rows).
    """
    t0 = time.perf_counter()
    X = _as_matrix(X)
    k = check_components(k, X.shape[1])
    c = float(row_norm_bound)
    Xc, clipped = clip_rows(X, c)
    sigma = gaussian_sigma(c * c, epsilon, delta)
    noisy = Xc.T @ Xc + symmetric_gaussian(X.shape[1], sigma, seed)
    V = top_eigen(noisy, k)[1]
    rep = _gaussian_report("central DP (Analyze Gauss)", sigma, c * c, delta, "a trusted curator holds every row")
    return BaselineResult(V, rep, clipped, time.perf_counter() - t0)


def local_dp_pca(data, k: int, epsilon: float, delta: float, row_norm_bound: float = 1.0, seed=None,
                 party_bounds=None) -> BaselineResult:
    """VFL local-DP baseline (Algorithm 4): each party releases its block plus iid N(0, sigma^2) noise.

    Each party first scales its sub-rows to its bound c_j (sum_j c_j^2 = c^2, as for SQM), so whole rows
    have ||x|| <= c.  Neighbouring datasets differ in one record; as record ids are public in VFL, a removed
    record is a row of zeros in the released m x d matrix, so the released matrix changes by x in one row:
    L2 sensitivity ||x|| <= c (this is Lemma 14's server-observed bound; a client-observed replacement
    would double it).  The concatenation of the parties' independent Gaussian noise is one Gaussian
    mechanism on the whole matrix, so sigma is calibrated to sensitivity c by
    :func:`sqm.calibration.gaussian_sigma`.  The server's X~^T X~ and its eigenvectors are post-processing.
    """
    t0 = time.perf_counter()
    data = data if isinstance(data, VerticalData) else VerticalData.split(_as_matrix(data), 1)
    k = check_components(k, data.n_cols)
    c = float(row_norm_bound)
    bounds = party_norm_bounds(c, data.col_counts, party_bounds)
    sigma = gaussian_sigma(c, epsilon, delta)
    noisy, clipped = [], 0
    for block, b, s in zip(data.blocks, bounds, spawn_seeds(seed, data.n_parties)):
        cb, n = clip_rows(block, float(b))
        clipped += n
        noisy.append(cb + sigma * make_rng(s).standard_normal(cb.shape))
    Xt = np.hstack(noisy)
    V = top_eigen(Xt.T @ Xt, k)[1]
    rep = _gaussian_report("local DP (VFL baseline)", sigma, c, delta, "each party releases its noisy block")
    return BaselineResult(V, rep, clipped, time.perf_counter() - t0)


# ----- SQM-PCA ---------------------------------------------------------------------------------------------


def components_from_covariance(raw_estimate: np.ndarray, n_cols: int, k: int, n_records: int):
    """Server post-processing: (noisy covariance, eigenvalues / m, d x k basis) from SQM's rescaled estimate."""
    C = np.asarray(raw_estimate, dtype=np.float64).reshape(n_cols, n_cols)
    w, V = top_eigen(C, k)
    return (C + C.T) / 2.0, w / float(n_records), V


class SQMPCA(TransformerMixin, BaseEstimator):
    """Differentially private PCA over vertically partitioned data with SQM (a scikit-learn transformer).

    Parameters (stored unchanged; checked in :meth:`fit`): ``n_components`` (k), ``epsilon`` (server-observed,
    at ``delta``), ``gamma`` (quantization scale), ``row_norm_bound`` (c: every record's L2 norm; each party
    clips its sub-rows to c_j = c sqrt(n_j / n) unless ``party_bounds`` gives them), ``backend`` ('mpyc': real
    party processes; 'plain': the in-process simulation of the same party programs), ``seed`` (None: OS
    entropy), ``n_parties`` (how many clients a plain matrix's columns are split among; a
    :class:`~sqm.vertical.VerticalData` brings its own split), ``backend_options``.

    After :meth:`fit`: ``components_`` (k x d, rows orthonormal, sklearn's layout), ``explained_variance_``
    (top-k eigenvalues of the noisy X^T X divided by the record count), ``covariance_`` (the noisy X^T X,
    symmetric part), ``report_`` (the :class:`sqm.mechanism.PrivacyReport`), ``n_features_in_``,
    ``seconds_``, ``bytes_sent_`` (per party, server first), ``clipped_`` (rows clipped per party),
    ``backend_``, ``raw_`` (the integers the server received).  PCA is uncentered, as in the paper.
    """

    def __init__(self, n_components=5, epsilon=1.0, delta=1e-5, gamma=4096.0, row_norm_bound=1.0,
                 backend="mpyc", seed=None, party_bounds=None, n_parties=2, backend_options=None):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.row_norm_bound = row_norm_bound
        self.backend = backend
        self.seed = seed
        self.party_bounds = party_bounds
        self.n_parties = n_parties
        self.backend_options = backend_options

    def mechanism(self, n_cols: int):
        """The SQM release of X^T X for ``n_cols`` columns (checks every privacy parameter)."""
        from sqm.mechanism import SQM
        from sqm.polynomial import covariance

        return SQM(covariance(n_cols), self.gamma, epsilon=self.epsilon, delta=self.delta,
                   row_norm_bound=self.row_norm_bound, party_bounds=self.party_bounds, backend=self.backend,
                   seed=self.seed, backend_options=self.backend_options)

    def fit(self, X, y=None) -> "SQMPCA":
        """One SQM release of X^T X over ``X`` (a VerticalData, or a matrix split among ``n_parties``)."""
        data = _as_vertical(X, self.n_parties)
        k = check_components(self.n_components, data.n_cols)
        res = self.mechanism(data.n_cols).run(data)
        self.covariance_, self.explained_variance_, V = components_from_covariance(
            res.estimate, data.n_cols, k, data.n_records)
        self.components_ = np.ascontiguousarray(V.T)
        self.n_features_in_ = data.n_cols
        self.report_ = res.report
        self.seconds_ = res.seconds
        self.bytes_sent_ = list(res.bytes_sent)
        self.clipped_ = list(res.clipped)
        self.backend_ = res.backend
        self.raw_ = res.raw
        return self

    def transform(self, X) -> np.ndarray:
        """Project records onto the components: X V (records x k)."""
        check_is_fitted(self, "components_")
        X = _as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but SQMPCA is expecting {self.n_features_in_} "
                             f"features as input")
        return X @ self.components_.T

    def fit_transform(self, X, y=None) -> np.ndarray:
        return self.fit(X).transform(X)

    def utility(self, X) -> float:
        """||X V||_F^2 on ``X``."""
        check_is_fitted(self, "components_")
        return pca_utility(_as_matrix(X), self.components_.T)

    def utility_ratio(self, X) -> float:
        check_is_fitted(self, "components_")
        return utility_ratio(_as_matrix(X), self.components_.T)


# ----- real multi-party jobs from a job file (each party reads only its own CSV) ----------------------------


class PCAJobTask:
    """The SQM-PCA task for :mod:`apps.jobfile`: every party plans the same public release from the clients'
    column and record counts (:meth:`sqm.mechanism.SQM.round_plan`) and runs its part of it with
    :func:`sqm.mechanism.sqm_round`, SQM's one per-party step: each client clips, quantizes and noises its own
    file's columns, with its keyed id digest so the clients refuse misaligned records; the server receives the
    noisy X^T X and computes the components.

    With ``seed=None`` (the default, ``secure_mode``) each party draws its own randomness from OS entropy.
    A ``seed`` needs ``insecure_reproducible=True`` (see :func:`apps.jobfile.seed_policy`): it is never sent
    nor part of :meth:`public`; party i takes entry i of ``spawn_seeds(seed, M)`` from its own copy, so a
    run whose parties were all given the same seed equals ``SQMPCA(..., seed=seed).fit`` on the same
    columns bit for bit (tests), and anyone who knows that seed can regenerate every party's noise.
    """

    def __init__(self, n_components: int, epsilon: float, delta: float = 1e-5, gamma: float = 4096.0,
                 row_norm_bound: float = 1.0, party_bounds=None, seed=None, insecure_reproducible: bool = False):
        from .jobfile import seed_policy

        self.secure_mode = seed_policy(seed, insecure_reproducible, warn=False)
        self.est = SQMPCA(n_components, epsilon, delta, gamma, row_norm_bound, backend="plain", seed=seed,
                          party_bounds=party_bounds)
        self.est.mechanism(1)  # check the parameters now, before any party starts
        self._plans = {}

    def __getstate__(self):
        return {**self.__dict__, "_plans": {}}  # a party plans from its own copy

    @property
    def seed(self):
        """This party's own seed from its own command line (None: OS entropy); never sent."""
        return self.est.seed

    def public(self):
        e = self.est
        pb = None if e.party_bounds is None else tuple(float(b) for b in e.party_bounds)
        return ("pca", int(e.n_components), float(e.epsilon), float(e.delta), float(e.gamma),
                float(e.row_norm_bound), pb)

    def _plan(self, meta):
        """(k, the SQM mechanism, its public plan, its privacy report) for the clients' counts; refused (before
        any share is sent) if k does not fit the columns."""
        from .jobfile import refused

        if meta not in self._plans:
            d = int(sum(meta.col_counts))
            try:
                k = check_components(self.est.n_components, d)
            except ValueError as err:
                raise refused(str(err)) from None
            mech = self.est.mechanism(d)
            self._plans[meta] = (k, mech, *mech.round_plan(meta.col_counts, meta.n_records, align_ids=True))
        return self._plans[meta]

    def release(self, meta):
        """The privacy report (events) of this job's one SQM release, from the public counts only."""
        return self._plan(meta)[3]

    def client_release(self, meta):
        """The release as one client observes it (it knows its own noise share): the client-observed event."""
        import dataclasses

        from sqm.events import client_event

        r = self.release(meta)
        return dataclasses.replace(r, method="SQM (client-observed)", epsilon_server=r.epsilon_client,
                                   events=(client_event(r.l1_sensitivity, r.l2_sensitivity, r.mu, r.n_parties),))

    async def run(self, ctx, table, meta) -> dict:
        from sqm.mechanism import sqm_round

        k, mech, plan, report = self._plan(meta)
        my_seed = spawn_seeds(self.est.seed, meta.n_parties + 1)[ctx.pid]  # this party's own entry, as SQM.run
        out = await sqm_round(ctx, mech.polynomial, None if table is None else table.block, plan,
                              make_rng(my_seed), None if table is None else table.ids_digest)
        if not ctx.is_server:
            return {"clipped": int(out.clipped), "rows": table.n_rows, "cols": table.n_cols}
        _, ev, V = components_from_covariance(out.estimate, int(sum(meta.col_counts)), k, meta.n_records)
        return {"components": np.ascontiguousarray(V.T), "explained_variance": ev, "report": report.as_dict(),
                "raw": out.raw}


# ----- comparison of the four methods (the `sqm pca` table) ------------------------------------------------


def compare(X, n_parties: int, k: int, epsilon: float, delta: float, gamma: float, row_norm_bound: float = 1.0,
            backend: str = "mpyc", runs: int = 1, seed=None, progress: bool = True, backend_options=None) -> dict:
    """Utility of SQM, central DP, local DP and non-private PCA on ``X`` split among ``n_parties``, averaged."""
    from tqdm import tqdm

    X = _as_matrix(X)
    k = check_components(k, X.shape[1])
    if int(runs) != runs or runs < 1:
        raise ValueError(f"runs must be an integer >= 1, got {runs!r}")
    data = VerticalData.split(X, n_parties)
    # Utilities are measured on X itself (the paper's ||X V||_F^2 on the input data).  SQM and the local
    # baseline clip sub-rows per party inside (each party enforces its own bound; on digits and CiteSeer
    # this costs < 1e-4 of the optimum); the central curator clips whole rows only.
    opt = optimal_utility(X, k)
    t0 = time.perf_counter()
    Vn = nonprivate_pca(X, k)
    nonpriv_s = time.perf_counter() - t0
    u = {"sqm": [], "central": [], "local": []}
    secs = {"sqm": [], "central": [], "local": []}
    bytes_sent, rep, clipped, central, local = [], None, None, None, None
    for s in tqdm(spawn_seeds(seed, runs), desc=f"pca runs ({backend})", disable=not progress or runs == 1):
        s_sqm, s_c, s_l = s.spawn(3)
        m = SQMPCA(k, epsilon, delta, gamma, row_norm_bound, backend=backend, seed=s_sqm,
                   backend_options=backend_options).fit(data)
        u["sqm"].append(m.utility(X)), secs["sqm"].append(m.seconds_)
        bytes_sent.append(m.bytes_sent_)
        rep, clipped = m.report_, m.clipped_
        central = central_dp_pca(X, k, epsilon, delta, row_norm_bound, seed=s_c)
        u["central"].append(pca_utility(X, central.components)), secs["central"].append(central.seconds)
        local = local_dp_pca(data, k, epsilon, delta, row_norm_bound, seed=s_l)
        u["local"].append(pca_utility(X, local.components)), secs["local"].append(local.seconds)

    def summary(name, report):
        vals = np.array(u[name])
        return {"utility": float(vals.mean()), "utility_ratio": float(vals.mean() / opt),
                "utility_std": float(vals.std()), "utilities": vals.tolist(),
                "seconds": float(np.mean(secs[name])), "report": report}

    per_party = np.mean(np.array(bytes_sent, dtype=np.float64), axis=0)
    nonpriv = PrivacyReport(method="non-private", epsilon_server=math.inf, delta=0.0)
    sqm = summary("sqm", rep)
    sqm.update(epsilon_server=rep.epsilon_server, epsilon_client=rep.epsilon_client, mu=rep.mu,
               l2_sensitivity=rep.l2_sensitivity, clipped=clipped)
    return {
        "shape": list(X.shape), "parties": n_parties, "components": k, "runs": int(runs), "backend": backend,
        "row_norm_bound": row_norm_bound, "sqm": sqm,
        "central": {**summary("central", central.report), "sigma": central.sigma, "epsilon": central.epsilon},
        "local": {**summary("local", local.report), "sigma": local.sigma, "epsilon": local.epsilon},
        "nonprivate": {"utility": opt, "utility_ratio": 1.0, "seconds": nonpriv_s,
                       "check_utility": pca_utility(X, Vn), "report": nonpriv},
        "epsilon_server": rep.epsilon_server, "epsilon_client": rep.epsilon_client, "delta": delta,
        "gamma": gamma, "seconds": float(np.mean(secs["sqm"])), "bytes_sent": float(per_party.sum()),
        "bytes_sent_per_party": per_party.tolist(),
        "secure_mode": seed is None,  # seeded: every party's noise follows from the seed (experiments only)
    }


TABLE_COLUMNS = [("utility", "utility", ".4f"), ("utility_ratio", "ratio", ".4f"),
                 ("epsilon_server", "eps server", ".4f"), ("epsilon_client", "eps client", ".4f"),
                 ("sigma", "sigma", ".4g"), ("seconds", "seconds", ".3f"), ("bytes", "bytes", ",.0f")]


def table_rows(r: dict) -> list[dict]:
    """One row per method of :func:`compare`'s result: its utility and its :class:`PrivacyReport`'s figures."""
    rows = []
    for key, label in (("sqm", f"SQM ({r['backend']})"), ("central", None), ("local", None), ("nonprivate", None)):
        m = r[key]
        rep = m["report"]
        rows.append({"method": label or rep.method, "utility": m["utility"], "utility_ratio": m["utility_ratio"],
                     "epsilon_server": rep.epsilon_server, "epsilon_client": rep.epsilon_client,
                     "sigma": getattr(rep, "sigma", None), "seconds": m["seconds"],
                     "bytes": r["bytes_sent"] if key == "sqm" and r["backend"] != "plain" else None})
    return rows


def print_table(r: dict, dataset: str = "") -> None:
    from sqm.report import render_table

    print(f"PCA of {dataset} {r['shape'][0]} x {r['shape'][1]}, {r['parties']} clients, k = {r['components']}, "
          f"epsilon {r['sqm']['epsilon_server']:.4g}, delta {r['delta']:g}, gamma {r['gamma']:g}, "
          f"{r['runs']} run(s)")
    print(render_table(table_rows(r), TABLE_COLUMNS))
    if r["backend"] == "plain":
        print("(plain backend: in-process SIMULATION of the parties' programs; bytes are not measured)")


# ----- the `sqm pca` command --------------------------------------------------------------------------------


def _run_cli(args) -> int:
    from sqm.report import write_json

    from .options import runtime_options

    if args.job:
        return _run_job(args)
    if args.data_file is not None:
        raise ValueError("--data-file replaces one client's file of a job: use it with --job and --index")
    from .datasets import load_dataset, scale_rows

    X = scale_rows(load_dataset(args.dataset, args.data).X, args.row_norm_bound)
    r = compare(X, args.parties, args.components, args.epsilon, args.delta, args.gamma, args.row_norm_bound,
                args.backend, args.runs, args.seed, progress=not args.quiet, backend_options=runtime_options(args))
    r["dataset"] = args.dataset
    print_table(r, args.dataset)
    if not r["secure_mode"]:
        print(f"secure_mode: false (--seed {args.seed}: a reproducible local experiment; whoever knows the seed "
              f"can regenerate every party's noise)")
    if args.json:
        write_json(args.json, r)
    return 0


def _run_job(args) -> int:
    from .jobfile import job_command

    def task():
        return PCAJobTask(args.components, args.epsilon, args.delta, args.gamma, args.row_norm_bound,
                          seed=args.seed, insecure_reproducible=args.insecure_reproducible)

    def server(res) -> dict:
        print(f"server: {len(res['components'])} components of {res['n_records']} records x "
              f"{sum(res['col_counts'])} columns (clients' columns {res['col_counts']})")
        print("  explained variance (per record): " + ", ".join(f"{v:.4g}" for v in res["explained_variance"]))
        return {"components": np.asarray(res["components"]), "explained_variance": res["explained_variance"],
                "gamma": args.gamma, "delta": args.delta}

    return job_command(args, task, server)


def register(sub) -> None:
    from . import options

    p = sub.add_parser(
        "pca", help="differentially private PCA over vertically partitioned data (SQM vs central/local DP)",
        parents=[options.privacy(), options.runtime(),
                 options.job("job file (JSON: parties' addresses, party 0 the server, each client's CSV, and the "
                             "dataset id the ledger charges); see apps/jobfile.py"), options.output()],
        description="Private PCA with SQM: the clients' noisy X^T X is computed by real MPyC party processes and "
                    "the server takes its top-k eigenvectors.  Without --job: split a dataset's columns among "
                    "--parties clients on this machine and compare SQM with central DP (Analyze Gauss), the "
                    "local-DP VFL baseline and non-private PCA.  With --job: a real multi-party job in which "
                    "each party reads only its own CSV file.")
    p.add_argument("--dataset", default="digits",
                   help="digits (default), breast_cancer, iris, wine, diabetes (scikit-learn bundled) or citeseer")
    p.add_argument("--data", default=None,
                   help="path of a real dataset's file or folder (citeseer: default ../shared/data/citeseer/)")
    p.add_argument("--parties", type=int, default=3, help="clients holding column blocks (default 3)")
    p.add_argument("--components", type=int, default=5, help="principal components k (default 5)")
    p.add_argument("--gamma", type=float, default=4096.0, help="quantization scale gamma >= 1 (default 4096)")
    p.add_argument("--row-norm-bound", type=float, default=1.0,
                   help="c: rows are scaled so the largest norm is c, and each party clips its sub-rows to "
                        "c sqrt(its columns / all columns) (default 1)")
    p.add_argument("--runs", type=int, default=1, help="average utilities over this many runs (default 1)")
    p.set_defaults(func=_run_cli)
