"""The Skellam Quantization Mechanism (Algorithm 3) on any :mod:`mpc` backend.

1. the server stochastically rounds the compensated coefficients (public);
2. each client clips its sub-rows, quantizes its columns at scale gamma and draws Sk(mu / n);
3. the backend evaluates sum_x f_hat(x_hat) + sum_j Z_j exactly; only the server receives it;
4. the server divides by the output scale (gamma^(lambda+1), or gamma^lambda without pre-processing).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from mpc.backend import Backend, Job, get_backend

from . import accounting
from .client import QuantizingClient
from .compensation import CompensatedPolynomial, compensate, needs_preprocessing
from .polynomial import CovariancePolynomial, Polynomial
from .rng import make_rng, spawn_seeds
from .sensitivity import Sensitivity, covariance_sensitivity, general_sensitivity
from .skellam import skellam_tail_bound
from .validation import check_delta, check_epsilon, check_gamma, check_mu
from .vertical import VerticalData, party_norm_bounds


@dataclass
class PrivacyReport:
    epsilon_server: float
    epsilon_client: float | None  # None with a single client (it knows all the noise)
    delta: float
    mu: float
    l2_sensitivity: float
    l1_sensitivity: float
    gamma: float
    scale: float
    n_parties: int
    sampling_rate: float = 1.0
    rounds: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SQMResult:
    estimate: np.ndarray  # float64: the noisy sum_x f(x)
    raw: np.ndarray  # object array: the integers the server received
    scale: float
    report: PrivacyReport
    clipped: list[int]
    seconds: float
    bytes_sent: list[int] = field(default_factory=list)
    field_bits: int | None = None
    backend: str = "plain"
    max_rss_bytes: list[int] = field(default_factory=list)


class SQM:
    """Noisy ``sum_x f(x)`` of a polynomial over vertically partitioned data, with its privacy report.

    Give either ``mu`` or a target ``epsilon`` (server-observed, at ``delta``) to calibrate it.  ``q`` and
    ``rounds`` only affect accounting (a caller running many subsampled rounds, e.g. logistic regression).
    ``seed=None`` keys every party's AES-CTR stream from fresh OS entropy; a seed (experiments only) is
    turned into per-party seeds by :func:`sqm.rng.spawn_seeds`, none of which reveals another's.
    """

    def __init__(self, polynomial: Polynomial, gamma: float, *, epsilon: float | None = None,
                 delta: float = 1e-5, mu: float | None = None, row_norm_bound: float = 1.0,
                 party_bounds=None, backend: str | Backend = "plain", seed=None,
                 sensitivity: Sensitivity | None = None, preprocess: bool | str = "auto",
                 q: float = 1.0, rounds: int = 1, max_records: int | None = None, backend_options=None):
        check_gamma(gamma)
        check_delta(delta)
        if mu is None and epsilon is None:
            raise ValueError("give either mu or a target epsilon")
        if mu is not None:
            check_mu(mu)
        if epsilon is not None:
            check_epsilon(epsilon)
        if not 0 < q <= 1:
            raise ValueError(f"sampling rate q must lie in (0, 1], got {q!r}")
        if int(rounds) != rounds or rounds < 1:
            raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
        if row_norm_bound <= 0 or not math.isfinite(row_norm_bound):
            raise ValueError(f"row_norm_bound must be > 0, got {row_norm_bound!r}")
        self.polynomial = polynomial
        self.gamma = float(gamma)
        self.epsilon, self.delta, self.mu = epsilon, delta, mu
        self.row_norm_bound = float(row_norm_bound)
        self.party_bounds = party_bounds
        self.backend = get_backend(backend, **(backend_options or {}))
        self.seed = seed
        self.sensitivity = sensitivity
        self.preprocess = needs_preprocessing(polynomial) if preprocess == "auto" else bool(preprocess)
        self.q, self.rounds = float(q), int(rounds)
        self.max_records = max_records

    # ----- planning (no randomness) --------------------------------------------------------------
    def sensitivity_for(self, data: VerticalData) -> Sensitivity:
        if self.sensitivity is not None:
            return self.sensitivity
        bounds = party_norm_bounds(self.row_norm_bound, data.col_counts, self.party_bounds)
        if isinstance(self.polynomial, CovariancePolynomial):
            return covariance_sensitivity(self.gamma, self.row_norm_bound, data.n_cols, bounds, data.col_counts)
        return general_sensitivity(self.polynomial, self.gamma, bounds[data.owner()], preprocess=self.preprocess)

    def plan(self, data: VerticalData) -> tuple[Sensitivity, PrivacyReport]:
        """Validate the job and account for it, before any randomness is drawn."""
        if not isinstance(data, VerticalData):
            raise ValueError("data must be a VerticalData (columns split among parties)")
        if data.n_cols != self.polynomial.n_vars:
            raise ValueError(f"the {self.polynomial.name} polynomial has {self.polynomial.n_vars} variables "
                             f"but the parties hold {data.n_cols} columns")
        sens = self.sensitivity_for(data)
        n = data.n_parties
        if self.mu is None:
            cal = accounting.calibrate_mu(self.epsilon, self.delta, sens.l1, sens.l2, q=self.q,
                                          rounds=self.rounds, n_parties=n if n >= 2 else None)
            mu = cal.mu
        else:
            mu = self.mu
        eps_s, eps_c = accounting.privacy_report(mu, self.delta, sens.l1, sens.l2, q=self.q, rounds=self.rounds,
                                                 n_parties=n if n >= 2 else None)
        lam = self.polynomial.degree
        scale = self.gamma ** (lam + 1) if self.preprocess else self.gamma ** lam
        report = PrivacyReport(epsilon_server=float(eps_s), epsilon_client=None if eps_c is None else float(eps_c),
                               delta=self.delta, mu=float(mu), l2_sensitivity=sens.l2, l1_sensitivity=sens.l1,
                               gamma=self.gamma, scale=scale, n_parties=n, sampling_rate=self.q, rounds=self.rounds)
        return sens, report

    # ----- running -------------------------------------------------------------------------------
    def run(self, data: VerticalData) -> SQMResult:
        t0 = time.perf_counter()
        _, report = self.plan(data)
        n = data.n_parties
        seeds = spawn_seeds(self.seed, n + 1)  # seeds[0]: the server's coefficient rounding; j: client j's own
        comp = compensate(self.polynomial, self.gamma, make_rng(seeds[0]), self.preprocess)
        bounds = party_norm_bounds(self.row_norm_bound, data.col_counts, self.party_bounds)
        _, clipped = data.clip(self.row_norm_bound, self.party_bounds)
        clients = [QuantizingClient(block, self.gamma, float(c), report.mu / n, self.polynomial.n_out, s)
                   for block, c, s in zip(data.blocks, bounds, seeds[1:])]
        job = self.job(comp, clients, bounds[data.owner()], data.n_records, report.mu, data.owner())
        res = self.backend.run(job)
        estimate = np.array([float(v) for v in res.values]) / comp.scale
        return SQMResult(estimate=estimate, raw=res.values, scale=comp.scale, report=report, clipped=clipped,
                         seconds=time.perf_counter() - t0, bytes_sent=res.bytes_sent, field_bits=res.field_bits,
                         backend=res.backend, max_rss_bytes=res.max_rss_bytes)

    def job(self, comp: CompensatedPolynomial, clients, col_real_bounds, n_records: int, mu: float,
            owner=None) -> Job:
        """The backend job: program, client programs and the public bounds that size the field."""
        col_bounds = [math.ceil(self.gamma * float(b)) for b in col_real_bounds]
        return Job(program=comp.program(), clients=clients, col_bounds=col_bounds,
                   n_records=int(self.max_records or n_records),
                   addend_bound=skellam_tail_bound(mu, self.polynomial.n_out),
                   var_owner=None if owner is None else [int(o) for o in owner])
