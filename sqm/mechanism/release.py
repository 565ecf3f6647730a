"""The Skellam Quantization Mechanism (Algorithm 3) as ONE party program, run for real or in process.

1. the server stochastically rounds the compensated coefficients (public ones are sent to every client,
   which checks that each is a rounding; secret ones stay with the statistic's own kernel);
2. each client clips its column groups (:class:`sqm.mechanism.vertical.ColumnBounds`), quantizes its columns at scale
   gamma and draws Sk(mu / n);
3. the statistic's kernel (``ctx.evaluate`` by default) computes sum_x f_hat(x_hat) + sum_j Z_j exactly;
   only the server receives it;
4. the server divides by the output scale (gamma^(lambda+1), or gamma^lambda without pre-processing).

:func:`sqm_round` is one release at one party: a long-lived party program awaits it every round.
:class:`SQMParty` is the program of a single release and :meth:`SQM.run` runs its M copies as real MPyC
processes (backend "mpyc", :func:`sqm.mpc.net.launch.run_parties`) or as the in-process simulation (backend "plain",
:func:`sqm.mpc.protocols.inprocess.run_in_process`): the same program, so the same seeds give the same integers.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from sqm.mpc import runner
from sqm.mpc.net import wire
from sqm.mpc.protocols.backend import Backend, Job
from sqm.mpc.protocols.secure_sum import get_backend
from sqm.errors import UsageError
from sqm.mpc.net.party import PartyProgram, public_digest
from sqm.mpc.protocols.stream import ArrayInput

from .client import QuantizedRows
from .compensation import check_rounding
from .params import CHUNK_ROWS, ROBUST_NOISE, ROW_NORM_BOUND, Integer, Param
from .polynomial import CovariancePolynomial, Polynomial, StructuredPolynomial
from .report import DeferredEvents, PrivacyReport
from .rng import party_rng, spawn_seeds
from .sensitivity import Sensitivity, quantized_norm_bound_sq, row_checked_gram_sensitivity, row_limit_sq
from .skellam import SkellamAddend, skellam_tail_bound
from .validation import check_delta, check_epsilon, check_gamma, check_mu
from .vertical import ColumnBounds, VerticalData


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


# ----- one release at one party ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SQMPlan:
    """The public parameters of one release (every party holds the same; no seed, no data)."""

    gamma: float
    mu: float
    bounds: ColumnBounds
    col_counts: tuple[int, ...]  # columns per client, in client order
    n_records: int  # public bound on the record count
    preprocess: bool
    scale: float  # the server divides the integer result by this
    n_out: int
    align_ids: bool = False  # clients pass (x_hat, noise, ids digest) and compare digests before sharing
    # records per input chunk (None: sqm.mpc.protocols.stream.chunk_rows); never changes the result
    chunk_rows: int | None = None
    noise_withheld: int = 0  # robust noise: the calibrated mu holds even if this many clients add no noise
    # the parties check every client's input sharing (sqm.mpc.protocols.sharing.SharingCheck)
    verify_sharing: bool = False
    row_limit: int | None = None  # the secure row norm check: only records with ||x_hat||^2 <= row_limit count
    verify_inputs: bool = False  # every client proves its values and group norms within bounds (input_proof)

    @property
    def n_parties(self) -> int:
        return len(self.col_counts)

    @property
    def noise_share_mu(self) -> float:
        """Each client's noise parameter: mu / (n - k), so that any n - k clients' shares sum to Sk(mu) (k =
        ``noise_withheld``; 0: mu / n, the paper's split)."""
        return self.mu / (self.n_parties - self.noise_withheld)

    @property
    def total_noise_mu(self) -> float:
        """The noise parameter when every client adds its share: n mu / (n - k) >= mu."""
        return self.noise_share_mu * self.n_parties

    @property
    def owner(self) -> list[int]:
        return [p for p, c in enumerate(self.col_counts) for _ in range(c)]

    def int_col_bounds(self) -> list[int]:
        """|x_hat_j| <= ceil(gamma b_j): the public bounds that size the field."""
        return [math.ceil(self.gamma * float(b)) for b in self.bounds.column_bounds()]

    def addend_bound(self) -> int:
        return skellam_tail_bound(self.total_noise_mu, self.n_out)

    def input_limits(self) -> list[tuple[tuple[int, ...], int]] | None:
        """With ``verify_inputs``, the (columns, limit) every client proves of each record: per column group of
        several columns, floor of its N_G^2 (:func:`sqm.mechanism.sensitivity.quantized_norm_bound_sq`, the bound
        the sensitivity sums); a group of one column is within its column bound already (proved too)."""
        if not self.verify_inputs:
            return None
        out = []
        for cols, b in zip(self.bounds.groups, self.bounds.bounds, strict=True):
            if len(cols) > 1:
                out.append((tuple(cols), math.floor(quantized_norm_bound_sq(self.gamma, [b], [len(cols)]))))
        return out

    def job(self, program) -> Job:
        """The public :class:`sqm.mpc.protocols.backend.Job` evaluating ``program`` on this plan's inputs."""
        return Job(program=program, clients=[], col_bounds=self.int_col_bounds(), n_records=int(self.n_records),
                   addend_bound=self.addend_bound(), var_owner=self.owner, align_ids=self.align_ids,
                   chunk_rows=self.chunk_rows, verify_sharing=self.verify_sharing, row_limit=self.row_limit,
                   input_limits=self.input_limits(),
                   addend_law=SkellamAddend(self.noise_share_mu, self.n_out) if self.verify_inputs else None)

    def public(self) -> tuple:
        return dataclasses.astuple(self)


@dataclass
class RoundOutput:
    """One party's part of a release: the server's estimate and integers, or a client's clip count."""

    estimate: np.ndarray | None = None
    raw: np.ndarray | None = None
    scale: float = 1.0
    field_bits: int | None = None
    clipped: int | None = None


async def sqm_round(ctx, statistic: StructuredPolynomial, block, plan: SQMPlan, rng: np.random.Generator,
                    ids_digest: bytes | None = None) -> RoundOutput:
    """This party's share of one SQM release, inside any party program (``ctx``: the party's transport, real or in
    process, or a :class:`sqm.mpc.protocols.context.PartyContext` over it).  ``block``: a client's real columns (None at
    the server); ``rng``: this party's own generator (the server's rounds the coefficients; a client's rounds
    its data, then draws its noise).  ``block`` may also be a source of rows read chunk by chunk (``n_rows``,
    ``n_cols``, ``chunks(rows)``: a party file too large to hold); a statistic whose kernel is
    ``ctx.evaluate`` (``chunked_input``) then takes the records chunk by chunk, the same integers as whole.
    Every party makes the same exchanges."""
    from sqm.mpc.shares.field import prime_for_bound
    from sqm.mpc.net.abort import InputRefused, ProtocolError

    if plan.n_parties + 1 != ctx.M:
        raise ProtocolError(f"party {ctx.pid}: the plan has {plan.n_parties} clients but {ctx.M - 1} joined; refused")
    coefs = None
    if ctx.is_server:
        comp = statistic.compensate(plan.gamma, rng, plan.preprocess)
        coefs = comp.int_coefs
    if statistic.public_coefficients and plan.preprocess:
        coefs = await ctx.broadcast(None if coefs is None else list(coefs),
                                    wire.value(list, "the compensated coefficients",
                                               lambda c: all(type(v) is int for v in c)),
                                    step="compensated coefficients")
        if not ctx.is_server:
            if not isinstance(statistic, Polynomial):  # its terms say which roundings are possible
                raise UsageError(f"a statistic with public coefficients is a Polynomial, got {type(statistic)}")
            try:
                check_rounding(statistic, plan.gamma, coefs)
            except ValueError as e:
                raise ProtocolError(f"party {ctx.pid}: the server's {e}; refused before any share was sent") from None
    my_input: object = None
    if not ctx.is_server:
        j = ctx.pid - 1
        source = block if hasattr(block, "chunks") else None  # rows read chunk by chunk (a party file)
        if source is None:
            block = np.asarray(block, np.float64)
            if block.ndim != 2:
                raise InputRefused(f"its data has shape {block.shape}, a records x columns table was expected")
            source = ArrayInput(block)
        if source.n_cols != plan.col_counts[j]:
            raise InputRefused(f"it holds {source.n_cols} columns, the plan expects {plan.col_counts[j]}")

        # a picklable object, not a closure: a shard worker of this party gets its part of the input pickled
        clip = plan.bounds.own(plan.col_counts, j)

        digest = ids_digest if plan.align_ids else None
        rows = QuantizedRows(source, clip, plan.gamma, plan.noise_share_mu, plan.n_out, rng, digest)
        my_input = rows
        if not getattr(statistic, "chunked_input", False):  # a kernel of its own takes the block whole
            x_hat = rows.whole()
            my_input = (x_hat, rows.addend()) + ((digest,) if plan.align_ids else ())
    raw = await statistic.kernel(ctx, plan, coefs, my_input)
    if isinstance(statistic, CovariancePolynomial):  # a client far outside its bounds: refused, nothing released
        await _bounds_verdict(ctx, plan, raw)
    if not ctx.is_server:
        return RoundOutput(scale=plan.scale, clipped=int(rows.clipped))
    bits = prime_for_bound(statistic.result_bound(plan, coefs), ctx.M).bit_length()
    return RoundOutput(np.array([float(v) for v in raw]) / plan.scale, raw, plan.scale, bits)


def _server_events(l1: float, l2: float, mu: float, q: float, rounds: int) -> tuple:
    """The events of one SQM release as the server observes it (:func:`sqm.mechanism.events.server_event`)."""
    from .events import server_event

    return (server_event(l1, l2, mu, q, rounds),)


def _server_events_json(l1: float, l2: float, mu: float, q: float, rounds: int) -> list:
    """:func:`_server_events` as :func:`sqm.mechanism.events.event_to_json` writes them, without building them
    (so without dp-accounting): tests/test_report.py checks they are the same dicts."""
    ev = {"type": "SkellamDpEvent", "l1_sensitivity": float(l1), "l2_sensitivity": float(l2), "mu": float(mu)}
    if q < 1:
        ev = {"type": "PoissonSampledDpEvent", "sampling_probability": float(q), "event": ev}
    if rounds != 1:
        ev = {"type": "SelfComposedDpEvent", "event": ev, "count": int(rounds)}
    return [ev]


async def _bounds_verdict(ctx, plan: SQMPlan, raw) -> None:
    """The server checks the covariance release against the clients' public bounds (:mod:`sqm.mechanism.input_check`)
    and tells every client the verdict (an empty string, or which client deviates: never a released figure); on a
    refusal every party raises, and nothing is released."""
    from sqm.mpc.net.abort import ProtocolError

    from .input_check import InputBoundsError, check_input_energy

    refusal = None
    if ctx.is_server:
        try:
            check_input_energy(plan, raw)
        except InputBoundsError as e:
            refusal = e
    verdict = await ctx.broadcast("" if refusal is None else refusal.public,
                                  wire.value(str, "the server's verdict on the inputs' bounds",
                                             lambda v: len(v) <= 500),
                                  step="input bounds check")
    if refusal is not None:
        raise refusal
    if verdict:
        raise ProtocolError(f"party {ctx.pid}: the server refused the release: {verdict}")


class SQMParty(PartyProgram):
    """One party of a single SQM release: the server (``block`` None) or a client with its own columns;
    ``seed`` is this party's own (None: OS entropy).  ``insecure_pcg64``: BENCHMARK ONLY (as
    :class:`sqm.mechanism.client.QuantizingClient`'s): numpy's PCG64 in place of the AES-CTR stream."""

    def __init__(self, statistic: StructuredPolynomial, plan: SQMPlan, seed=None, block=None,
                 insecure_pcg64: bool = False):
        self.statistic, self.plan, self.seed, self.block = statistic, plan, seed, block
        self.insecure_pcg64 = insecure_pcg64

    def describe(self) -> str:
        return f"SQMParty {self.statistic.name} (plan {public_digest(self.plan.public())[:16]})"

    async def run(self, ctx):
        rng = party_rng(self.seed, self.insecure_pcg64)
        return await sqm_round(ctx, self.statistic, self.block, self.plan, rng)


def run_programs(programs: list, backend: Backend, timeout: float | None = None) -> list[dict]:
    """Run party programs with ``backend``'s runner: "mpyc" real processes, "plain" in process (SIMULATION).
    A backend with ``insecure_share_rng = "pcg64"`` (BENCHMARK ONLY) also gets the parties' PCG64 shares."""
    if backend.name == "mpyc":
        extra = ["--insecure-pcg64-shares"] if _pcg64(backend) else None
        return runner("mpyc")(programs, timeout=timeout or getattr(backend, "timeout", None),
                              ssl_dir=getattr(backend, "ssl_dir", None),
                              extra_args=extra, min_clients=2)
    return runner(backend.name)(programs, timeout=timeout or 3600.0)


def _pcg64(backend) -> bool:
    return getattr(backend, "insecure_share_rng", None) == "pcg64"


# ----- the mechanism -------------------------------------------------------------------------------------


def robust_noise_cost(n_clients: int, k: int) -> float:
    """The noise variance of robust noise (each of n clients adds Sk(mu / (n - k))) when every client adds its
    share, relative to the calibrated Sk(mu): n / (n - k)."""
    return n_clients / (n_clients - k)


def verified_noise_left(mu: float, n_clients: int, k: int) -> float:
    """With verified noise, the noise a coalition of the server and one client does not know: the n - 2 shares
    Sk(mu / (n - k)) other than its own and the one it verifies (:mod:`sqm.mpc.protocols.addend_check`)."""
    return mu * (n_clients - 2) / (n_clients - k)


class SQM:
    """Noisy ``sum_x f(x)`` of a polynomial over vertically partitioned data, with its privacy report.

    Give either ``mu`` or a target ``epsilon`` (server-observed, at ``delta``) to calibrate it.  ``q`` and
    ``rounds`` only affect accounting (a caller running many subsampled rounds, e.g. logistic regression).
    Records are bounded by ``column_bounds`` (a :class:`~sqm.mechanism.vertical.ColumnBounds`, or one bound |x_j| <= b_j
    per column), by default by ``row_norm_bound`` c split into one group per party (``party_bounds``, or
    c sqrt(n_p / n)).  ``seed=None`` keys every party's AES-CTR stream from fresh OS entropy; a seed
    (experiments only) is turned into per-party seeds by :func:`sqm.mechanism.rng.spawn_seeds`, none of which reveals
    another's.  ``chunk_rows``: records per input chunk of the secure evaluation (default
    :func:`sqm.mpc.protocols.stream.chunk_rows`: about 4 MiB of shares per chunk); it bounds every party's memory and
    never changes the result.  ``robust_noise`` k (default 0): each client draws Sk(mu / (n - k)) instead of Sk(mu / n),
    so the calibrated mu, and the reported epsilons, hold even if up to k clients add no noise (a deviating
    client's saving); when all add theirs the noise is n / (n - k) times the variance (:func:`robust_noise_cost`).
    ``verify_sharing``: before any output is opened the parties check that every client's input sharing has
    degree <= t, naming a client whose sharing does not (:class:`sqm.mpc.protocols.sharing.SharingCheck`; at least 3
    clients).  ``verify_inputs``: every client proves, without revealing them, that its quantized values are within
    their column bounds and each record's squared norm within its column group's N_G^2 (what the sensitivity sums;
    :meth:`SQMPlan.input_limits`, :mod:`sqm.mpc.protocols.input_proof`); a client whose proof fails is named.
    With it each client's noise share is also verified: drawn exactly from a seed committed before joint coins and
    checked on shares by the next client (:mod:`sqm.mpc.protocols.addend_check`), so a client that skips or shrinks
    its noise is named; the checker learns that share, which the client-observed epsilon accounts for
    (:func:`verified_noise_left`).
    ``row_norm_check`` (the covariance only): each client clips its sub-row to the whole bound c, not to its share of
    it, and the secure evaluation keeps only the records whose quantized squared norm over all clients' columns
    is within the row limit B (:func:`sqm.mechanism.sensitivity.row_limit_sq`; a secure comparison per record,
    :mod:`sqm.mpc.protocols.compare`), as a curator holding whole rows would clip them; every record with ||x|| <= c is
    kept, and the sensitivity is B.  Without it, each client clips its sub-row to c sqrt(n_p / n), which cuts
    sub-rows that whole rows within c need not lose.
    """

    def __init__(self, polynomial: StructuredPolynomial, gamma: float, *, epsilon: float | None = None,
                 delta: float = 1e-5, mu: float | None = None, row_norm_bound: float = 1.0,
                 party_bounds=None, column_bounds=None, backend: str | Backend = "plain", seed=None,
                 sensitivity: Sensitivity | None = None, preprocess: bool | str = "auto",
                 q: float = 1.0, rounds: int = 1, max_records: int | None = None, backend_options=None,
                 chunk_rows: int | None = None, robust_noise: int = 0, verify_sharing: bool = False,
                 row_norm_check: bool = False, verify_inputs: bool = False):
        check_gamma(gamma)
        check_delta(delta)
        ROBUST_NOISE.check(robust_noise, "robust_noise")
        self.robust_noise = int(robust_noise)
        self.verify_sharing = bool(verify_sharing)
        self.verify_inputs = bool(verify_inputs)
        if mu is None and epsilon is None:
            raise UsageError("give either mu or a target epsilon")
        if mu is not None:
            check_mu(mu)
        if epsilon is not None:
            check_epsilon(epsilon)
        if not 0 < q <= 1:
            raise UsageError(f"sampling rate q must lie in (0, 1], got {q!r}")
        Param(rule=Integer(1)).check(rounds, "rounds")
        ROW_NORM_BOUND.check(row_norm_bound, "row_norm_bound")
        if column_bounds is not None and party_bounds is not None:
            raise UsageError("give column_bounds or party_bounds, not both")
        if column_bounds is not None and not isinstance(column_bounds, ColumnBounds):
            column_bounds = ColumnBounds.per_column(column_bounds)
        self.row_norm_check = bool(row_norm_check)
        if self.row_norm_check:
            if not isinstance(polynomial, CovariancePolynomial):
                raise UsageError(f"the row norm check applies to the covariance (PCA) only, not to the "
                                 f"{polynomial.name} polynomial")
            if column_bounds is not None or party_bounds is not None:
                raise UsageError("the row norm check bounds whole rows by row_norm_bound: give no column_bounds or "
                                 "party_bounds with it")
            if sensitivity is not None:
                raise UsageError("the row norm check sets the sensitivity (the row limit): give no sensitivity")
        self.polynomial = polynomial
        self.gamma = float(gamma)
        self.epsilon, self.delta, self.mu = epsilon, delta, mu
        self.row_norm_bound = float(row_norm_bound)
        self.party_bounds = party_bounds
        self.column_bounds = column_bounds
        self.backend = get_backend(backend, **(backend_options or {}))
        self.seed = seed
        self.sensitivity = sensitivity
        self.preprocess = polynomial.needs_preprocessing() if preprocess == "auto" else bool(preprocess)
        self.q, self.rounds = float(q), int(rounds)
        self.max_records = max_records
        CHUNK_ROWS.check(chunk_rows, "chunk_rows")
        self.chunk_rows = None if chunk_rows is None else int(chunk_rows)

    # ----- planning (no randomness) --------------------------------------------------------------
    def bounds_for(self, col_counts) -> ColumnBounds:
        """The column groups and bounds of a release over parties holding ``col_counts`` columns (checked)."""
        if self.row_norm_check:  # each party's sub-row within c: whole rows are checked in the secure evaluation
            cb = ColumnBounds.blocks(col_counts, [self.row_norm_bound] * len(col_counts))
        else:
            cb = self.column_bounds or ColumnBounds.parties(col_counts, self.row_norm_bound, self.party_bounds)
        for p in range(len(col_counts)):
            cb.local(col_counts, p)  # every group inside one party's block, all columns covered
        return cb

    def row_limit(self, col_counts) -> int | None:
        """The row limit B of the secure row norm check (None without it)."""
        if not self.row_norm_check:
            return None
        return row_limit_sq(self.gamma, self.row_norm_bound, sum(int(c) for c in col_counts), len(col_counts))

    def sensitivity_for(self, data: VerticalData) -> Sensitivity:
        if self.sensitivity is not None:
            return self.sensitivity
        if self.row_norm_check:
            return row_checked_gram_sensitivity(self.gamma, self.row_norm_bound, data.n_cols, data.n_parties)
        return self.polynomial.sensitivity(self.gamma, self.bounds_for(data.col_counts), self.preprocess)

    def plan(self, data: VerticalData) -> tuple[Sensitivity, PrivacyReport]:
        """Validate the job and account for it, before any randomness is drawn."""
        from . import accounting  # here: a party process running a planned release skips dp-accounting

        if not isinstance(data, VerticalData):
            raise UsageError("data must be a VerticalData (columns split among parties)")
        if data.n_cols != self.polynomial.n_vars:
            raise UsageError(f"the {self.polynomial.name} polynomial has {self.polynomial.n_vars} variables "
                             f"but the parties hold {data.n_cols} columns")
        sens = self.sensitivity_for(data)
        n = data.n_parties
        k = self.robust_noise
        if k >= n:
            raise UsageError(f"robust_noise {k}: with {n} clients at least one must add noise (k <= {n - 1})")
        if self.mu is None:
            assert self.epsilon is not None  # the constructor takes mu or a target epsilon
            cal = accounting.calibrate_mu_cached(float(self.epsilon), float(self.delta), float(sens.l1),
                                                 float(sens.l2), q=float(self.q), rounds=int(self.rounds),
                                                 n_parties=n if n >= 2 else None)
            mu = cal.mu
        else:
            mu = self.mu
        # a client knows its own share mu / (n - k); with k others withholding, mu (n - k - 1) / (n - k) is left:
        # the client-observed event of n - k parties with noise mu (None when no other honest share is left)
        eps_s, eps_c, conversion = accounting.privacy_conversion(mu, self.delta, sens.l1, sens.l2, q=self.q,
                                                                 rounds=self.rounds,
                                                                 n_parties=n - k if n - k >= 2 else None)
        if self.verify_inputs:  # verified noise: a skip is caught, but each client knows the share it verifies
            left = verified_noise_left(mu, n, k)
            eps_c = None if left == 0 else accounting.client_epsilon(2 * left, self.delta, sens.l1, sens.l2, 2,
                                                                      self.rounds)
        lam = self.polynomial.degree
        scale = self.gamma ** (lam + 1) if self.preprocess else self.gamma ** lam
        # built on first use: dp-accounting's events import it and SciPy, after the parties have started
        evs = DeferredEvents(functools.partial(_server_events, sens.l1, sens.l2, mu, self.q, self.rounds),
                             functools.partial(_server_events_json, sens.l1, sens.l2, mu, self.q, self.rounds))
        report = PrivacyReport(epsilon_server=float(eps_s), epsilon_client=None if eps_c is None else float(eps_c),
                               delta=self.delta, mu=float(mu), l2_sensitivity=sens.l2, l1_sensitivity=sens.l1,
                               gamma=self.gamma, scale=scale, n_parties=n, sampling_rate=self.q, rounds=self.rounds,
                               events=evs, conversion=conversion, notes=self._notes(n, k, data.col_counts))
        return sens, report

    def _notes(self, n: int, k: int, col_counts) -> str:
        notes = []
        if k:
            notes.append(f"robust noise: each client adds Sk(mu / {n - k}), so these epsilons hold even if up to {k} "
                         f"client(s) add no noise; with every share the noise variance is "
                         f"{robust_noise_cost(n, k):.4g}x the calibrated one")
        if self.verify_inputs:
            notes.append("verified inputs: every client proved, on shares, its quantized values within their column "
                         "bounds and each record's squared group norms within the bounds the sensitivity sums (a "
                         "false proof passes a chunk's check with probability under 3/p + 64/(p - 65))")
            left = verified_noise_left(1.0, n, k)
            notes.append("verified noise: each client's noise share is the exact Skellam draw from a seed it "
                         "committed to before the parties' joint coins, checked on shares by the next client, which "
                         "learns that share (a skipped or altered share passes with probability 1/p; chosen over "
                         "robust noise by default because it names a skipping client and keeps an honest job's "
                         "noise as calibrated); so the client-observed epsilon is for the server with one client "
                         "knowing two noise shares, "
                         + (f"{left:.4g} of mu left" if left else
                            "none left with 2 clients: no client-observed guarantee (a client colluding with the "
                            "server knows every noise share)")
                         + (" (robust noise K = 1 makes it robust noise's own figure)" if left and not k else ""))
        if self.row_norm_check:
            notes.append(f"row norm check: only records whose quantized squared norm over all clients' columns is at "
                         f"most {self.row_limit(col_counts)} count (checked in secret; "
                         f"every record with ||x|| <= {self.row_norm_bound:g} does); no sub-row clipped to a share "
                         f"of the bound")
        return "; ".join(notes)

    def round_plan(self, col_counts, n_records: int, align_ids: bool = False) -> tuple[SQMPlan, PrivacyReport]:
        """The public plan of a release over parties holding ``col_counts`` columns of ``n_records`` records,
        and its privacy report: what a party program needs for :func:`sqm_round` (counts only, no data)."""
        shape = VerticalData([np.zeros((1, int(c))) for c in col_counts])  # plan() checks the shape only
        _, report = self.plan(shape)
        return self._release_plan(report, col_counts, n_records, align_ids), report

    def _release_plan(self, report: PrivacyReport, col_counts, n_records: int, align_ids: bool = False) -> SQMPlan:
        """The public plan of a release whose accounting is ``report`` (its calibrated mu and scale)."""
        assert report.mu is not None and report.scale is not None  # a release's report holds both
        return SQMPlan(self.gamma, report.mu, self.bounds_for(col_counts), tuple(int(c) for c in col_counts),
                       int(self.max_records or n_records), self.preprocess, report.scale, self.polynomial.n_out,
                       align_ids, self.chunk_rows, self.robust_noise, self.verify_sharing, self.row_limit(col_counts),
                       self.verify_inputs)

    # ----- running -------------------------------------------------------------------------------
    def programs(self, data: VerticalData) -> tuple[list[SQMParty], PrivacyReport]:
        """The M party programs of this release over ``data`` (server first; each client its own block and
        seed), and its privacy report."""
        _, report = self.plan(data)  # mu calibrated once, from the shapes only
        plan = self._release_plan(report, data.col_counts, data.n_records)
        seeds = spawn_seeds(self.seed, data.n_parties + 1)  # 0: the server's coefficient rounding; j: client j
        pcg = _pcg64(self.backend)
        # the server's program holds a seed only where it rounds coefficients (nothing else is random there)
        programs = [SQMParty(self.polynomial, plan, seeds[0] if plan.preprocess else None, None, pcg)]
        programs += [SQMParty(self.polynomial, plan, s, b, pcg) for s, b in zip(seeds[1:], data.blocks, strict=False)]
        return programs, report

    def run(self, data: VerticalData) -> SQMResult:
        t0 = time.perf_counter()
        programs, report = self.programs(data)
        records = run_programs(programs, self.backend)
        out = records[0]["result"]
        return SQMResult(estimate=out.estimate, raw=out.raw, scale=out.scale, report=report,
                         clipped=[int(r["result"].clipped) for r in records[1:]],
                         seconds=time.perf_counter() - t0,
                         bytes_sent=[int(r.get("bytes_sent", 0)) for r in records], field_bits=out.field_bits,
                         backend=self.backend.name, max_rss_bytes=[int(r.get("max_rss_bytes", 0)) for r in records])
