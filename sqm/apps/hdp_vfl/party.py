"""HDP-VFL's two parties (Wang et al., Algorithm 1): their local state, their steps, and the two-process program.

The active party holds the labels and its feature columns, the passive party its feature columns of the same
records.  Each step of Algorithm 1:

1. passive: ``Sec[IR_B] = X_B[s] w_B + N(0, sigma_passive^2 I)`` -> active;
2. active: ``IR_A = (sigmoid(y (X_A[s] w_A + Sec[IR_B])) - 1) y`` (the logistic loss's derivative in theta),
   ``Sec[IR_A] = IR_A + N(0, sigma_active^2 I)`` -> passive;
3. active: ``g_A = IR_A^T X_A[s] / b``; passive: ``g_B = clip(Sec[IR_A], -1, 1)^T X_B[s] / b``;
4. both: ``w <- w - lr (g + l2 w)``, then ``w <- w / max(1, ||w|| / k)``.

The clip in step 3 is ours, not the paper's: Lemma 3 (the passive party's sensitivity) bounds each step's weight
change by assuming the residual the passive party multiplies by has |r| <= L = 1, which holds for the noise-free
``IR_A`` but not for the noisy ``Sec[IR_A]`` that Algorithm 1 hands it.  Without the clip, a residual history with
large entries (which the noise produces) moves the passive weights by more than Lemma 2 allows, and the IR_B
sequence of two neighbouring data sets then differs by up to several times Lemma 3's sensitivity (the tests show
a history that does); with it, Lemma 2's per-step bound 2 eta L / b holds for every received history, so Lemma 3
(and Theorem 1's guarantee for the passive party) holds.  The clip is post-processing of what the passive party
received, applied at that party, so it costs the active party's guarantee nothing.

The mini-batches: each epoch the active party draws a permutation of the records and sends it to the passive
party (record indices are public: both parties know the common entities after entity resolution); the epoch is
cut into ``r = n // b`` batches of exactly ``b`` records (the ``n - r b`` left over that epoch are skipped), so
every record is used at most once per epoch and every batch has size ``b``, as the sensitivity lemmas assume.

Runtime roles: party 0 of the ``sqm.mpc`` runtime is the ACTIVE party and party 1 the PASSIVE party (the runtime
names party 0 "server"; HDP-VFL has no server and uses no secret sharing: the messages are the differentially
private outputs themselves).  :class:`HDPParty` is the one party program: run as two processes by
:func:`sqm.mpc.net.launch.run_parties`, or as the labelled SIMULATION by
:func:`sqm.mpc.protocols.inprocess.run_in_process` (the same programs on one event loop), which gives bit for bit the
same model for the same seeds.

Randomness: each party draws its noise and (the active party) the batch order from its OWN generator, AES-CTR
(:func:`sqm.mechanism.rng.make_rng`) keyed from fresh OS entropy, or from the party's own seed in a seeded
experiment (one entry of :func:`sqm.mechanism.rng.spawn_seeds`, which reveals nothing about the other party's).  The
permutation the active party sends is public; AES-CTR outputs reveal nothing about its other outputs (noise).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import expit

from sqm.mechanism.rng import make_rng
from sqm.mechanism.vertical import clip_rows
from sqm.errors import UsageError
from sqm.mpc.net.party import InputRefused, PartyProgram, ProtocolError
from sqm.mpc.net.party import messages as wire

ACTIVE, PASSIVE = 0, 1  # runtime party ids


@dataclass(frozen=True)
class HDPConfig:
    """The public parameters both parties agree on before anything is exchanged."""

    n_records: int
    active_features: int
    passive_features: int
    batch_size: int  # effective b (<= n_records)
    epochs: int
    k: float  # weight norm bound
    l2: float  # lambda
    learning_rate: float
    sigma_active: float  # noise on Sec[IR_A] (Lemma 4's sensitivity)
    sigma_passive: float  # noise on Sec[IR_B] (Lemma 3's sensitivity)
    intercept: float = 0.0  # value u of a constant column the active party prepends (0: no intercept)

    @property
    def batches_per_epoch(self) -> int:
        return self.n_records // self.batch_size

    @property
    def iterations(self) -> int:
        return self.epochs * self.batches_per_epoch

    def row_bounds(self) -> tuple[float, float]:
        """Bounds c_A, c_B on the parties' feature sub-rows with u^2 + c_A^2 + c_B^2 = 1 (u: the intercept
        column's value), split in proportion to the column counts, so whole rows have ||x|| <= 1."""
        d = self.active_features + self.passive_features
        r = math.sqrt(1.0 - self.intercept ** 2)
        return r * math.sqrt(self.active_features / d), r * math.sqrt(self.passive_features / d)

    def public(self) -> tuple:
        return tuple(sorted(asdict(self).items()))


def check_labels(y) -> np.ndarray:
    """Labels as float +-1; {0, 1} is converted (0 -> -1); anything else is refused."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise UsageError(f"labels must be a 1-D array, got shape {y.shape}")
    if y.size == 0:
        raise UsageError("labels are empty")
    try:
        yf = y.astype(np.float64)
    except (TypeError, ValueError):
        raise UsageError(f"labels must be numbers in {{-1, +1}} or {{0, 1}}, got dtype {y.dtype}") from None
    vals = set(np.unique(yf).tolist())
    if vals <= {-1.0, 1.0}:
        return yf
    if vals <= {0.0, 1.0}:
        return 2.0 * yf - 1.0
    shown = sorted(vals)[:6]
    raise UsageError(f"labels must lie in {{-1, +1}} or {{0, 1}}; got values {shown}"
                     f"{' ...' if len(vals) > 6 else ''}")


def _check_block(X, name: str, features: int | None = None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise UsageError(f"{name} must be 2-D (records x features), got shape {X.shape}")
    if X.shape[1] == 0:
        raise UsageError(f"{name} holds no features")
    if not np.all(np.isfinite(X)):
        raise UsageError(f"{name} contains NaN or infinite values")
    if features is not None and X.shape[1] != features:
        raise UsageError(f"{name} has {X.shape[1]} features; the agreed configuration says {features}")
    return X


def _project(w: np.ndarray, k: float) -> np.ndarray:
    """Algorithm 1 line 12: w / max(1, ||w|| / k)."""
    return w / max(1.0, float(np.linalg.norm(w)) / k)


class _Party:
    def __init__(self, cfg: HDPConfig, X, bound: float, name: str, features: int, seed):
        X = _check_block(X, f"{name}'s features", features)
        self.cfg = cfg
        # Algorithm 1 line 2: rows normalized; each party scales its own sub-rows to norm <= its bound
        self.X, self.clipped = clip_rows(X, bound)
        self.rng = make_rng(seed)  # AES-CTR from this party's own seed, OS entropy when None
        self.w = np.zeros(X.shape[1])

    def _update(self, g: np.ndarray) -> None:
        c = self.cfg
        self.w = _project(self.w - c.learning_rate * (g + c.l2 * self.w), c.k)


class ActiveParty(_Party):
    """Labels and the active features; draws the batch order and the noise on its intermediate results."""

    def __init__(self, cfg: HDPConfig, X_active, y, seed=None):
        y = check_labels(y)
        super().__init__(cfg, X_active, cfg.row_bounds()[0], "active party", cfg.active_features, seed)
        if y.shape[0] != self.X.shape[0]:
            raise UsageError(f"active party holds {self.X.shape[0]} feature rows but {y.shape[0]} labels")
        self.y = y
        if cfg.intercept:  # the intercept is the active party's weight on a constant column
            self.X = np.hstack([np.full((self.X.shape[0], 1), cfg.intercept), self.X])
            self.w = np.zeros(self.X.shape[1])

    def permutation(self) -> np.ndarray:
        return self.rng.permutation(self.X.shape[0])

    def step(self, idx: np.ndarray, sec_ir_passive: np.ndarray) -> np.ndarray:
        """Algorithm 1 lines 8, 9, 11, 12 at the active party; returns Sec[IR_A] for the passive party."""
        Xs, ys = self.X[idx], self.y[idx]
        theta = Xs @ self.w + sec_ir_passive
        ir = (expit(ys * theta) - 1.0) * ys
        sec = ir + self.rng.normal(0.0, self.cfg.sigma_active, ir.shape[0])
        self._update(ir @ Xs / idx.shape[0])
        return sec


class PassiveParty(_Party):
    """The passive features; draws the noise on its intermediate results."""

    # |r| <= L = 1 for the residual it multiplies by: Lemma 3's assumption (module doc); math.inf turns it off
    residual_bound = 1.0

    def __init__(self, cfg: HDPConfig, X_passive, seed=None):
        super().__init__(cfg, X_passive, cfg.row_bounds()[1], "passive party", cfg.passive_features, seed)

    def intermediate(self, idx: np.ndarray) -> np.ndarray:
        """Algorithm 1 line 7: Sec[IR_B] for the active party."""
        ir = self.X[idx] @ self.w
        return ir + self.rng.normal(0.0, self.cfg.sigma_passive, ir.shape[0])

    def update(self, idx: np.ndarray, sec_ir_active: np.ndarray) -> None:
        """Algorithm 1 lines 10, 11, 12 at the passive party, with the received residual clipped to
        [-1, 1] (post-processing; the range Lemma 3 assumes)."""
        r = np.clip(sec_ir_active, -self.residual_bound, self.residual_bound)
        self._update(r @ self.X[idx] / idx.shape[0])


def batches(cfg: HDPConfig, perm: np.ndarray):
    b = cfg.batch_size
    for j in range(cfg.batches_per_epoch):
        yield perm[j * b:(j + 1) * b]


def record_count_problem(n_active: int, n_passive: int, n_config: int) -> str | None:
    if n_active != n_passive:
        return (f"the active party holds {n_active} records and the passive party {n_passive}: records are "
                f"not aligned; refused before any intermediate result was sent")
    if n_active != n_config:
        return f"the parties hold {n_active} records, the agreed configuration says {n_config}; refused"
    return None


class HDPParty(PartyProgram):
    """HDP-VFL's one party program: party 0 = active (labels), party 1 = passive.  Real run: these programs
    with :func:`sqm.mpc.net.launch.run_parties`; simulation: the same programs with
    :func:`sqm.mpc.protocols.inprocess.run_in_process`.  ``on_epoch`` (in-process runs only, e.g. a progress bar's
    update) is called after each epoch."""

    def __init__(self, role: int, cfg: HDPConfig, X, y=None, seed=None, on_epoch=None):
        if role not in (ACTIVE, PASSIVE):
            raise UsageError(f"role must be {ACTIVE} (active) or {PASSIVE} (passive), got {role!r}")
        self.role, self.cfg, self.X, self.y, self.seed, self.on_epoch = role, cfg, X, y, seed, on_epoch

    def _state(self):
        """This party's state; its own unusable input is refused (the reason, without data, goes to the peer)."""
        try:
            if self.role == ACTIVE:
                return ActiveParty(self.cfg, self.X, self.y, self.seed)
            return PassiveParty(self.cfg, self.X, self.seed)
        except ValueError as e:
            raise InputRefused("its features or labels are unusable", detail=str(e)) from None

    async def run(self, ctx):
        if ctx.M != 2:
            raise ProtocolError(f"HDP-VFL runs with exactly 2 parties (active, passive), got {ctx.M}")
        if ctx.pid != self.role:
            raise ProtocolError(f"party {ctx.pid} was given the program of party {self.role}")
        cfg = self.cfg
        other = PASSIVE if self.role == ACTIVE else ACTIVE
        await ctx.agree(cfg.public(), "HDP-VFL")
        # record counts: each party sends its count; both check the same pair, so both refuse together
        n_mine = int(np.shape(self.X)[0]) if np.ndim(self.X) == 2 else -1
        got = await ctx.send_recv({other: n_mine}, [other], wire.value(int, "a record count"), "record count")
        n_active, n_passive = (n_mine, got[0]) if self.role == ACTIVE else (got[0], n_mine)
        problem = record_count_problem(n_active, n_passive, cfg.n_records)
        if problem:
            raise ProtocolError(problem)
        me = self._state()
        ir = lambda what: wire.array(np.float64, (cfg.batch_size,), what=what)  # noqa: E731
        for _ in range(cfg.epochs):
            if self.role == ACTIVE:
                perm = me.permutation()
                await ctx.send_recv({PASSIVE: perm}, [], None, "batch order")
                for idx in batches(cfg, perm):
                    (sec_b,) = await ctx.send_recv({}, [PASSIVE], ir("Sec[IR_B]"), "Sec[IR_B]")
                    sec_a = me.step(idx, _check_message(sec_b, idx.shape[0], "Sec[IR_B]"))
                    await ctx.send_recv({PASSIVE: sec_a}, [], None, "Sec[IR_A]")
            else:
                order = wire.array(np.int64, (cfg.n_records,), 0, cfg.n_records - 1, "a batch order")
                (perm,) = await ctx.send_recv({}, [ACTIVE], order, "batch order")
                perm = np.asarray(perm)
                if sorted(perm.tolist()) != list(range(cfg.n_records)):
                    raise ProtocolError("the active party's batch order is not a permutation of the records")
                for idx in batches(cfg, perm):
                    await ctx.send_recv({ACTIVE: me.intermediate(idx)}, [], None, "Sec[IR_B]")
                    (sec_a,) = await ctx.send_recv({}, [ACTIVE], ir("Sec[IR_A]"), "Sec[IR_A]")
                    me.update(idx, _check_message(sec_a, idx.shape[0], "Sec[IR_A]"))
            if self.on_epoch is not None:
                self.on_epoch()
        return {"role": "active" if self.role == ACTIVE else "passive", "w": me.w.copy(), "clipped": me.clipped}


def _check_message(v, size: int, what: str) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (size,) or not np.all(np.isfinite(v)):
        raise ProtocolError(f"received a malformed {what}: shape {v.shape}, expected ({size},) finite values")
    return v
