"""SQM logistic regression (Section 5.2): the per-iteration steps and THE party program, :class:`LRParty`.
It runs as real MPyC party processes or, as a simulation, in one process
(:func:`sqm.mpc.protocols.inprocess.run_in_process`): the same program, so both compute bit for bit the same weights for
the same seeds (:func:`train`).

Parties: the server (party 0, no data) and n clients; client ``label_party`` holds the label column as the
last column of its block.  Variables of the gradient polynomial (Eq. 19) are the clients' columns in client
order, so the label sits at ``label_index``; the d outputs are the feature coordinates in that order.

Every iteration is one SQM release (:func:`sqm.mechanism.release.sqm_round`) of the statistic
:class:`sqm.apps.logreg.gradient.LRGradient`, a structured polynomial whose coefficients are secret (the weights w never
leave the server):
1. the server stochastically rounds the coefficients of Eq. 19 (1/2 at scale gamma^2, w_k/4 and -1 at
   scale gamma: Algorithm 3, lines 1-3) with its own generator and Shamir-shares them (degree t) as its
   own input: the clients receive only shares;
2. the clients draw the batch from randomness they share and the server does not know (Poisson sampling
   at rate q over the N records); each client quantizes its columns of the batch rows at scale gamma and
   draws its Skellam share Sk(mu / n) of the d outputs (:func:`sqm.mechanism.client.client_input`), pads the rows with
   zero rows to the public size ``b_max`` (a zero row adds nothing: every monomial of Eq. 19 has degree >= 1)
   and Shamir-shares both (the kernel, :func:`sqm.apps.logreg.kernel.secure_gradient`);
3. on shares, the parties form the batch moments (column sums s, Gram G = F^T F and h = F^T Y: about d^2
   values whatever the batch size), reduce G and h to degree t (not needed when M > 3t), multiply them by
   the coefficient shares (y_t = a_half_t s_t + sum_k A_tk G_tk + a_y_t h_t + sum_j Z_jt), add the clients'
   random mask of degree M - 1 and constant 0, and open y to the server only.  Per iteration: 2 exchanges
   when M > 3t (3 clients), else 3, and 2 one-way delays on the critical path either way (the minimum: the
   server's coefficients depend on the previous output; :func:`sqm.apps.logreg.kernel.secure_gradient` says why);
4. the server divides by gamma^3, steps w <- w - lr * g / (q N) and projects ||w||_2 <= W.

What a client receives during training: Shamir shares (uniform in F_p), the digest of the public plan, the
other clients' record counts and verdicts of the checks, and the other clients' contributions to the shared
sampling seed (never sent to the server).  So clients observe nothing of the noisy gradients or of w; the
client-observed epsilon (Eq. 21) is the guarantee of a final model the server chooses to share with them.

Batch-size cap: the batch size is Binomial(N, q); ``b_max`` is the smallest size with
R * P(Binomial(N, q) > b_max) <= 2^-40 = eta over the R rounds.  If a batch is nevertheless larger, the clients
keep a uniformly random subset of b_max of its records (shared randomness) and count the event (the count
stays with the clients).  The output differs from the uncapped mechanism's only on that event, so the run is
(epsilon, delta_mu + (1 + e^epsilon) eta)-DP; mu is calibrated at delta_mu = delta minus that, so the total is
the requested delta (:meth:`sqm.apps.logreg.SQMLogisticRegression.plan`).

Membership hidden (``plan.union`` = S > 0, the job file's ``"hide_membership"``): the clients'
blocks are their rows placed at their positions among the S positions the union of their ids is placed over (S the
sum of the set sizes, public; zeros elsewhere; :mod:`sqm.framework.alignment`) and the server holds the 0/1
indicator of the intersection over those positions (``ctx.membership``).  The job plans from S (``n_records`` =
``union`` = S, the default schedule too): nothing a client holds depends on m.
1. once, after the plan: the server Shamir-shares (degree t) the indicator with the clients; the clients hold
   shares of it, the server keeps nothing of the sharing it needs later;
2. the clients Poisson-sample union positions at rate q with their shared sampler (the server still never learns
   a batch): every member of the intersection is in a batch independently with probability q, exactly the
   sampling of the revealing mode over its m records; the cap b_max is that of Binomial(S, q);
3. in the secure gradient each client reshares its indicator shares at the batch's rows to every party, and
   each row's features are multiplied by the row's membership inside the protocol
   (:func:`sqm.apps.logreg.kernel.secure_gradient`, ``masked``): a row outside the intersection adds zero;
4. the server steps by the released sum over the batch's members divided by q m, m the intersection size, which
   it alone knows (``members``; the number of members in a batch stays secret, as with the revealing mode's
   Poisson batches).
Accounting: Poisson subsampling at rate q of the m members and the same per-record sensitivity: the revealing
mode's report, with eta from Binomial(S, q).  What each party learns: the set sizes and S; the server also U and m
and the noisy gradients; a client's frames are shares only (tests/test_membership_lr.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass, field

import numpy as np

from sqm.framework.progress import follow_progress, report_progress
from sqm.apps.logreg.gradient import BatchMembership, LRGradient
from sqm.mechanism.release import SQMPlan, sqm_round
from sqm.mechanism.rng import make_rng
from sqm.mechanism.sensitivity import BASE_RATE
from sqm.mechanism.vertical import ColumnBounds
from sqm.mpc import BACKENDS as MPC_BACKENDS
from sqm.mpc import runner
from sqm.errors import UsageError
from sqm.apps.logreg.kernel import deal_indicator
from sqm.mpc.net.launch import private_folder
from sqm.mpc.net.party import PartyProgram, ProtocolError
from sqm.mpc.net.party import messages as wire

OVERFLOW_LOG2 = -40.0  # total probability over all rounds that a Poisson batch exceeds b_max


def batch_cap(n_records: int, q: float, rounds: int, log2_failure: float = OVERFLOW_LOG2) -> tuple[int, float]:
    """(b_max, total overflow probability): smallest b_max with rounds * P(Bin(N, q) > b_max) <= 2^log2_failure."""
    from scipy.stats import binom  # here: a party process (which never plans) skips scipy.stats' import

    target = 2.0 ** log2_failure / rounds
    lo, hi = 0, int(n_records)
    while lo < hi:  # binom.sf is decreasing in b
        mid = (lo + hi) // 2
        if binom.sf(mid, n_records, q) <= target:
            hi = mid
        else:
            lo = mid + 1
    return max(lo, 1), float(rounds * binom.sf(lo, n_records, q))


@dataclass(frozen=True)
class LRPlan:
    """Public parameters of one training run (every party holds the same plan): the schedule and, through
    :meth:`release`, the :class:`sqm.mechanism.release.SQMPlan` of every round's SQM release."""

    n_records: int
    col_counts: tuple[int, ...]  # feature columns per client (the label party's label not counted)
    label_party: int  # 0-based client index holding the label
    gamma: float
    mu: float  # aggregate Skellam parameter (0: noise off, for tests and the noiseless reference)
    q: float
    rounds: int
    b_max: int
    learning_rate: float
    weight_bound: float
    party_bounds: tuple[float, ...]  # per-client bound on the norm of its feature sub-row
    intercept: float = 0.0  # the intercept column's public constant c (0: no intercept)
    # every round checks each client's input sharing (sqm.mpc.protocols.sharing.SharingCheck)
    verify_sharing: bool = False
    union: int = 0  # membership hidden: the S positions the blocks are placed over (0: membership revealed)
    base_rate: float = BASE_RATE  # p0: the gradient's expansion point sigma(b0) (logreg_gradient; 1/2: Eq. 19)

    @property
    def positions(self) -> int:
        """The rows of every client's block, which the batches are sampled from: S, or N when membership is revealed."""
        return int(self.union) if self.union else int(self.n_records)

    @property
    def n_parties(self) -> int:
        return len(self.col_counts)

    @property
    def has_intercept(self) -> bool:
        return self.intercept != 0

    @property
    def d(self) -> int:
        """Weights: the clients' feature columns and, with an intercept, its constant column."""
        return int(sum(self.col_counts)) + int(self.has_intercept)

    @property
    def input_widths(self) -> list[int]:
        """Each client's block as it gives it: its features (the label party's label last)."""
        return [c + (1 if j == self.label_party else 0) for j, c in enumerate(self.col_counts)]

    @property
    def block_widths(self) -> list[int]:
        """Each client's block in the protocol: the label party's holds the constant column before its label."""
        return [w + (int(self.has_intercept) if j == self.label_party else 0)
                for j, w in enumerate(self.input_widths)]

    @property
    def label_index(self) -> int:
        return int(sum(self.col_counts[: self.label_party + 1])) + int(self.has_intercept)

    @property
    def intercept_index(self) -> int | None:
        """The constant column's variable (and weight) index: just before the label; None without intercept."""
        return self.label_index - 1 if self.has_intercept else None

    def with_constant(self, block: np.ndarray) -> np.ndarray:
        """The label party's block [features, label] with the public constant column inserted before the label."""
        if not self.has_intercept:
            return block
        return np.insert(block, block.shape[1] - 1, float(self.intercept), axis=1)

    @property
    def scale(self) -> float:
        return float(self.gamma) ** 3

    def column_bounds(self) -> ColumnBounds:
        """Each client's feature sub-row ||x_j|| <= c_j; the label column its own group, |y| <= 1; the intercept's
        constant column its own group, |x| <= c (its value: never clipped).  So a record's feature row, the
        constant included, has ||x||^2 <= sum_j c_j^2 + c^2: the sensitivity (:meth:`LRGradient.sensitivity`
        over these groups) counts the constant column as the feature it is."""
        separate = {self.label_index: 1.0}
        if self.has_intercept:
            assert self.intercept_index is not None  # set with an intercept
            separate[self.intercept_index] = abs(float(self.intercept))
        return ColumnBounds.parties(self.block_widths, 1.0, self.party_bounds, separate=separate)

    def release(self) -> SQMPlan:
        """Every round's SQM release: the gradient sum over a batch padded to b_max rows, output scale gamma^3."""
        return SQMPlan(float(self.gamma), float(self.mu), self.column_bounds(), tuple(self.block_widths),
                       int(self.b_max), True, self.scale, self.d, verify_sharing=bool(self.verify_sharing))

    def statistic(self, w=None, membership=None) -> LRGradient:
        return LRGradient(self.d, self.label_index, float(self.weight_bound), self.n_parties, w, membership,
                          float(self.base_rate))

    def result_bound(self) -> int:
        return self.statistic().result_bound(self.release())


# ----- the clients' shared sampling -----------------------------------------------------------------------
SEED_BYTES = 32  # each client's contribution to the shared sampling seed


def party_generator(seed) -> np.random.Generator:
    """A party's own generator (rounding, noise, seed contribution): AES-128-CTR keyed from OS entropy when
    ``seed`` is None, else from the party's own seed (:func:`sqm.mechanism.rng.spawn_seeds` gives each party its
    own)."""
    return make_rng(seed)


def client_seed_contribution(rng: np.random.Generator) -> bytes:
    """256 bits from a client's own (cryptographic) generator towards the clients' shared sampling key."""
    return rng.bytes(SEED_BYTES)


def shared_sampler(key: bytes) -> np.random.Generator:
    """The clients' shared batch sampler: AES-128-CTR keyed from the clients' key (agreed among the clients only
    by ``ctx.clients_key``: unpredictable to anyone missing one honest client's contribution)."""
    if not isinstance(key, bytes) or len(key) != 32:
        raise UsageError("the clients' key must be 32 bytes")
    return make_rng(int.from_bytes(hashlib.sha256(b"sqm-lr batch sampler\0" + key).digest(), "big"))


def sample_batch(shared: np.random.Generator, n_records: int, q: float, b_max: int) -> tuple[np.ndarray, bool]:
    """Poisson sampling at rate q; if more than b_max records are drawn, a uniform subset of b_max is kept."""
    idx = np.flatnonzero(shared.random(n_records) < q)
    if idx.size > b_max:
        return np.sort(shared.choice(idx, size=b_max, replace=False)), True
    return idx, False


# ----- the server's step -----------------------------------------------------------------------------------
def server_update(w: np.ndarray, gradient: np.ndarray, plan: LRPlan, members: int | None = None) -> np.ndarray:
    """w - lr * (noisy gradient sum, already divided by gamma^3) / (q N), projected onto ||w||_2 <= W.  N: the
    plan's record count, or with membership hidden ``members``, the intersection size only the server knows (the
    plan, which every party holds, then counts the S positions; at least 1)."""
    n = plan.n_records if members is None else max(1, int(members))
    w = w - plan.learning_rate * np.asarray(gradient, np.float64) / (plan.q * n)
    return project(w, plan.weight_bound)


def project(w: np.ndarray, bound: float) -> np.ndarray:
    """Clip ||w||_2 <= bound (a float-rounding excess is removed too: the sensitivity bound relies on it)."""
    nrm = float(np.linalg.norm(w))
    if nrm <= bound:
        return w
    w = w * (bound / nrm)
    while float(np.linalg.norm(w)) > bound:
        w = w * np.nextafter(1.0, 0.0)
    return w


def logistic_loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    u = X @ w
    return float(np.mean(np.logaddexp(0.0, u) - y * u))


# ----- whole runs ------------------------------------------------------------------------------------------
@dataclass
class TrainResult:
    weights: np.ndarray
    clipped: list[int]  # records clipped per client
    truncated: int  # batches that exceeded b_max (known to the clients only)
    seconds: float  # training loop, at the server
    bytes_sent: list[int] = field(default_factory=list)  # per party, server first
    backend: str = "mpyc"  # "mpyc": real party processes; "in-process": the same programs in one process
    party_results: list[dict] = field(default_factory=list)  # each party's own result dict
    history: np.ndarray | None = None  # (rounds, d): the server's weights after each round (``history=True``)


class _Eval:
    """The server's running figure every ``every`` iterations: the loss on an evaluation set the server (the
    analyst) holds, or without one the norm of the released noisy mean gradient (smoothed over about 10
    rounds): the training loss needs the features and labels, which the server never sees, while the noisy
    gradient is the release itself (post-processing costs no privacy)."""

    def __init__(self, eval_set, every: int, callback):
        self.X: np.ndarray | None
        self.y: np.ndarray | None
        self.X, self.y = eval_set if eval_set is not None else (None, None)
        self.every, self.callback = max(1, int(every)), callback
        self.grad: float | None = None

    def __call__(self, it: int, w: np.ndarray, rounds: int, gradient: np.ndarray) -> None:
        g = float(np.linalg.norm(gradient))
        self.grad = g if self.grad is None else 0.9 * self.grad + 0.1 * g
        if self.callback is None or ((it + 1) % self.every and it + 1 != rounds):
            return
        self.callback(it + 1, logistic_loss(w, self.X, self.y) if self.X is not None and self.y is not None
                      else self.grad)


class LRParty(PartyProgram):
    """One party of a whole training run (R secure evaluations): THE program of SQM-LR, run as real MPyC party
    processes (:func:`train` with ``backend="mpyc"``) or, as a simulation, in one process
    (``backend="in-process"``, :func:`sqm.mpc.protocols.inprocess.run_in_process`): the same code either way.

    Every party makes the same sequence of exchanges: one seed exchange among the clients (the server takes
    part with nothing to send or receive), a record-count check, the plan agreement, then per round the
    exchanges of :func:`sqm.apps.logreg.kernel.secure_gradient`.  ``history`` (the server): also return the weights
    after every round.
    """

    def __init__(self, plan: LRPlan, seed, block=None, eval_set=None, progress_path=None, every: int = 50,
                 history: bool = False):
        self.plan, self.seed, self.block = plan, seed, block
        self.eval_set, self.progress_path, self.every, self.history = eval_set, progress_path, every, history

    async def run(self, ctx):
        return await train_party(ctx, self.plan, self.seed, self.block, self.eval_set, self.progress_path,
                                 self.every, history=self.history)


ROUNDS_STEP = "training rounds"  # a party's progress in SQM-LR's rounds (sqm.mpc.net.transport.PartyTransport.progress)


async def train_party(ctx, plan: LRPlan, seed, block=None, eval_set=None, progress_path=None, every: int = 50,
                      ids_digest: bytes | None = None, check_ids: bool = False, history: bool = False,
                      members: int | None = None) -> dict:
    """This party's whole training run (see :class:`LRParty`); ``seed`` is this party's own seed (None: OS
    entropy); with ``check_ids`` the clients also compare the digests of their record ids among themselves
    (the server learns only pass/fail).  A client whose block does not have the plan's shape refuses its own
    input at the record-count check (every party learns only that it refused).  The weights stay at the
    server: it returns them, the clients return their clip and truncation counts."""
    if plan.n_parties + 1 != ctx.M:
        raise ProtocolError(f"party {ctx.pid}: the plan has {plan.n_parties} clients but {ctx.M - 1} client "
                            f"parties joined; refused")
    if ctx.t < 1:
        raise ProtocolError(f"party {ctx.pid}: a job with {ctx.M - 1} client(s) has threshold t = 0, so every "
                            f"party's share would be the secret itself (the server's coefficients at the "
                            f"client); at least two clients are needed; refused")
    union = _membership(ctx, plan)
    rng = party_generator(seed)
    if ctx.is_server:
        await ctx.clients_key(None)  # the clients' sampling key: the server takes part with nothing
        await ctx.check_clients(None, "record count", None)
        if check_ids:
            await ctx.check_clients(None, "record ids", None)
        # not a with block: the report callback writes to it through every round; closed after the rounds loop
        progress = open(progress_path, "w", buffering=1) if progress_path else None  # noqa: SIM115
        report = _Eval(eval_set, every, (lambda i, loss: progress.write(f"{i} {loss!r}\n")) if progress else None)
    else:
        block = np.asarray(block, np.float64)
        shape = (plan.positions, plan.input_widths[ctx.pid - 1])
        problem = None if block.shape == shape else (f"its block has shape {block.shape}, the public plan "
                                                     f"expects {shape}")
        shared = shared_sampler(await ctx.clients_key(client_seed_contribution(rng)))
        await ctx.check_clients(int(block.shape[0]), "record count", wire.value(int, "a record count"),
                                problem=problem)
        if check_ids:
            assert ids_digest is not None  # the caller checking ids gives their digest
            await ctx.check_clients(bytes(ids_digest), "record ids (different ids or a different order)",
                                    wire.digest(32))
        if ctx.pid - 1 == plan.label_party and problem is None:
            block = plan.with_constant(block)  # the intercept's public constant column
        block, clipped = plan.column_bounds().clip(block, plan.block_widths, ctx.pid - 1)  # once, counted
    await ctx.agree(dataclasses.astuple(plan), "logistic-regression plan")
    release, stat = plan.release(), plan.statistic()
    shares = None
    if plan.union:
        shares = await deal_indicator(ctx, union.indicator if ctx.is_server else None, plan.union,
                                      stat.prime(release, ctx.M))
    server_mem = BatchMembership(indicator=union.indicator) if plan.union and ctx.is_server else None
    w = np.zeros(plan.d)
    trace = []
    truncated = 0
    t0 = time.perf_counter()
    for it in range(plan.rounds):
        batch = None
        if ctx.is_server:  # the server's secret coefficients hold w
            stat = plan.statistic(w, server_mem)
        else:
            idx, tr = sample_batch(shared, plan.positions, plan.q, plan.b_max)
            truncated += tr
            batch = block[idx]
            if plan.union:
                assert shares is not None  # dealt above for a union
                stat = plan.statistic(membership=BatchMembership(shares=shares[idx], positions=idx))
        out = await sqm_round(ctx, stat, batch, release, rng)
        if ctx.is_server:
            assert out.estimate is not None  # the server's part of a release
            w = server_update(w, out.estimate, plan, members)
            report(it, w, plan.rounds, np.asarray(out.estimate, np.float64)
                   / (plan.q * (plan.n_records if members is None else max(1, int(members)))))
            if history:
                trace.append(w)
        report_progress(ctx, ROUNDS_STEP, it + 1, plan.rounds)  # every party: one round done (a bar at its command)
    seconds = time.perf_counter() - t0
    if ctx.is_server:
        if progress:
            progress.close()
        result = {"weights": w, "seconds": seconds}
        if history:
            result["history"] = np.array(trace).reshape(plan.rounds, plan.d)
        return result
    return {"clipped": clipped, "truncated": truncated, "seconds": seconds}


def _membership(ctx, plan: LRPlan):
    """The party's :class:`sqm.mpc.protocols.psi.Union` when the plan hides membership (refused if it does not fit):
    its context's (:attr:`sqm.mpc.protocols.context.PartyContext.membership`; a bare transport has none)."""
    union = getattr(ctx, "membership", None)
    if not plan.union:
        if union is not None:
            raise ProtocolError(f"party {ctx.pid}: the records were aligned hiding membership but the plan does not "
                                f"say so (its union size is 0); refused")
        return None
    why = None
    if union is None:
        why = "the records were not aligned over the union"
    elif int(union.size) != plan.union:
        why = f"the alignment gave a union of {union.size} positions, the plan says {plan.union}"
    elif ctx.is_server and (union.indicator is None or union.indicator.shape != (plan.union,)):
        why = "the server lacks the intersection's indicator over the union"
    if why is not None:
        raise ProtocolError(f"party {ctx.pid}: a membership-hiding training run: {why}; refused before any share "
                            f"was sent")
    return union


BACKENDS = (*MPC_BACKENDS, "in-process")  # "in-process": another name of "plain", the simulation


def train(blocks, plan: LRPlan, seeds, eval_set=None, callback=None, every: int = 50, backend: str = "mpyc",
          timeout: float = 3600.0, wrap=None, history: bool = False) -> TrainResult:
    """Train with the parties' :class:`LRParty` programs (1 server + n clients; each client gets only its block
    and its own seed): ``backend="mpyc"`` runs them as real MPyC party processes over loopback TCP
    (:func:`sqm.mpc.net.launch.run_parties`), ``"in-process"`` (SIMULATION) on one event loop
    (:func:`sqm.mpc.protocols.inprocess.run_in_process`); for the same seeds both give bit for bit the same weights.
    ``callback(i, value)``: the server's running figure every ``every`` rounds (:class:`_Eval`: the loss on
    ``eval_set``, else the noisy gradient's norm).  ``wrap`` (tests
    and benchmarks): each party's program is replaced by ``wrap(program)``, a picklable
    :class:`sqm.mpc.net.party.PartyProgram` returning the wrapped program's result dict (extra keys are kept in
    ``TrainResult.party_results``).  ``history``: also return the server's weights after every round."""
    from threadpoolctl import threadpool_limits


    if backend not in BACKENDS:
        raise UsageError(f"backend must be one of {BACKENDS}, got {backend!r}")
    backend = "in-process" if backend == "plain" else backend
    with private_folder("sqm-lr-") as tmp:  # removed however this process ends (sqm.mpc.net.launch.Launch)
        path = os.path.join(tmp, "progress")
        programs = [LRParty(plan, seeds[0], None, eval_set, path if callback else None, every, history)]
        programs += [LRParty(plan, s, np.asarray(b, np.float64)) for s, b in zip(seeds[1:], blocks, strict=False)]
        if wrap is not None:
            programs = [wrap(prog) for prog in programs]
        with follow_progress(path, callback) if callback else contextlib.nullcontext():
            if backend == "mpyc":  # small BLAS products: threads only add overhead (50x here)
                res = runner("mpyc")(programs, timeout=timeout, blas_threads=1, min_clients=2)
            else:
                with threadpool_limits(1, user_api="blas"):
                    res = runner("plain")(programs, timeout=timeout, min_clients=2)
    server = res[0]["result"]
    return TrainResult(np.asarray(server["weights"]), [int(r["result"]["clipped"]) for r in res[1:]],
                       int(res[1]["result"]["truncated"]), float(server["seconds"]),
                       [int(r.get("bytes_sent", 0)) for r in res], backend, [r["result"] for r in res],
                       server.get("history"))
