"""PBM-VFL as a torch library: each client brings its own ``nn.Module`` and optimizer, the server its fusion model
and loss, and :class:`PBMVFL` trains them through the party programs (real MPyC processes by default).

    clients = [Client(QuadrantCNN(), x_train=a_tr, x_test=a_te), Client(mlp, x_train=b_tr, x_test=b_te)]
    server = Server(nn.Linear(16, 10), y_train=y_tr, y_test=y_te, loss=nn.CrossEntropyLoss())
    vfl = PBMVFL(clients, server, b=16, beta=0.15, epochs=3, seed=0)
    vfl.fit()                   # trains; clients[j].module and server.module are now the trained models
    vfl.save("ckpt.pt")         # every party's model and optimizer, the accountant, the epoch
    ...
    vfl = PBMVFL(clients, server, ...); vfl.load("ckpt.pt"); vfl.fit(1)  # resumes where it stopped

A client's module maps its rows (float32, shape (n, d_j)) to the embedding (n, P); the embedding is clipped to
[-C, C] before encoding (``tanh`` as the last layer keeps it there).  The server's module maps the decoded sum of
the embeddings (n, P) to class scores (n, K); its loss takes (scores, labels).  Labels are classes 0..K-1.

Where the work happens: this object (the launcher) holds every party's module and data, as
:func:`.training.train_vfl` does; each party PROCESS receives only its own (:class:`.party.PBMVFLProgram`) and
sees of the others only what the protocol sends.  A checkpoint holds every party's model and optimizer state,
and no seed or key: the noise after a resume comes from the same per-epoch streams (:func:`.party.party_stream`)
as an uninterrupted run's, so a seeded run resumed from a checkpoint gives the same models.  Each party's entry
is that party's own business.  In a deployment across organisations, each keeps its own.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from sqm.apps.pbm_vfl.config import METHODS, SECURE_SUMS, VFLConfig
from sqm.apps.pbm_vfl.party import PBMVFLProgram, to_cpu
from sqm.apps.pbm_vfl.seeds import party_seeds, public_batch_seed
from sqm.apps.pbm_vfl.privacy import VFLAccountant
from sqm.apps.pbm_vfl.runs import run_programs
from sqm.mpc import BACKENDS
from sqm.errors import UsageError
from sqm.apps.pbm_vfl.sum_exchange import two_clients_problem

CHECKPOINT_FORMAT = "sqm-vfl PBM-VFL checkpoint 1"


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    """``device`` if torch can use it; ValueError naming it otherwise (e.g. 'cuda' on a machine without a GPU)."""
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"device {device!r} requested but torch sees no CUDA GPU; use --device cpu")
    torch.device(device)  # raises on a malformed name
    return str(device)


def _rows(x, who: str, what: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise UsageError(f"{who}: {what} must be a 2-D array (records x columns), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise UsageError(f"{who}: {what} contains NaN or infinite values")
    return x


@dataclass
class Client:
    """A client: its party model (any ``nn.Module`` from its rows to the embedding), its optimizer (default
    Adam, learning rate 0.01), its train rows and optionally test rows (aligned with the server's labels), and its
    torch device."""

    module: nn.Module
    x_train: np.ndarray
    x_test: np.ndarray | None = None
    optimizer: torch.optim.Optimizer | None = None
    device: str = "cpu"

    def __post_init__(self):
        if self.optimizer is None:
            self.optimizer = torch.optim.Adam(self.module.parameters(), lr=0.01)


@dataclass
class Server:
    """The server: its fusion model (from the embedding sum to class scores), its loss (default cross-entropy),
    its optimizer (default Adam, learning rate 0.01), the labels (train, optionally test) and its device."""

    module: nn.Module
    y_train: np.ndarray
    y_test: np.ndarray | None = None
    loss: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    device: str = "cpu"

    def __post_init__(self):
        if self.optimizer is None:
            self.optimizer = torch.optim.Adam(self.module.parameters(), lr=0.01)
        if self.loss is None:
            self.loss = nn.CrossEntropyLoss()


def _probe(module: nn.Module, x: torch.Tensor) -> tuple:
    """The output shape of ``module`` on ``x`` (one record), in eval mode without gradients or side effects on
    torch's generator (the module's train/eval mode is restored)."""
    params = list(module.parameters())
    if params:
        x = x.to(params[0].device)
    was = module.training
    module.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            return tuple(module(x).shape)
    finally:
        module.train(was)


@dataclass
class FitRun:
    """What one :meth:`PBMVFL.fit` measured: the parties' records (stats, bytes) and the wall time."""

    records: list = field(repr=False)
    seconds: float
    backend: str


class PBMVFL:
    """Trains clients' party modules and the server's fusion model by PBM-VFL (Algorithm 2).

    ``b``, ``beta``, ``C``: PBM's trials, bias and clipping bound.  ``epochs``: the planned total (what
    :meth:`fit` runs by default; the equal-epsilon LDP baseline calibrates to it).  ``batch_size``: the public
    mini-batch size.  ``method``: 'pbm', or a baseline ('npq', 'ldp', 'ldp_eq': not secure protocols).
    ``secure_sum``: 'bgw' (Shamir shares) or 'masked' (pairwise masks).  ``backend``: 'mpyc' (one real MPyC
    process per party) or 'plain' (the same programs in this process: a SIMULATION, bit-identical).  ``seed``:
    None (default) for fresh OS entropy at every party; an int for a reproducible EXPERIMENT (whoever knows it can
    regenerate every party's noise).  ``batch_seed``: the public seed of the mini-batch order (default: fresh,
    or derived one way from ``seed``).  ``threads``: torch CPU threads per party.  ``delta``: of the reported
    (epsilon, delta).

    After :meth:`fit`, ``clients[j].module`` / ``.optimizer`` and ``server.module`` / ``.optimizer`` hold the
    trained state; ``history`` the server's metrics per epoch; ``accountant`` the privacy spent so far."""

    def __init__(self, clients: list[Client], server: Server, *, b: int = 16, beta: float = 0.15, C: float = 1.0,
                 epochs: int = 10, batch_size: int = 100, delta: float = 1e-5, method: str = "pbm",
                 secure_sum: str = "bgw", backend: str = "mpyc", seed=None, batch_seed: int | None = None,
                 threads: int = 1, timeout: float = 3600.0, eval_chunk: int = 4000):
        if secure_sum not in SECURE_SUMS:
            raise UsageError(f"secure sum must be one of {SECURE_SUMS}, got {secure_sum!r}")
        if backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
        if method not in METHODS:
            raise UsageError(f"unknown method {method!r}; choose one of {METHODS}")
        self.clients, self.server = list(clients), server
        M = len(self.clients)
        if not all(isinstance(c, Client) for c in self.clients) or not isinstance(server, Server):
            raise TypeError("PBMVFL needs a list of Client objects and a Server object")
        problem = two_clients_problem(M) if method == "pbm" else (None if M else "need at least one client")
        if problem:
            raise UsageError(problem)
        self._check_data()
        P = self._embedding_size()
        K = self._classes(P)
        self.cfg = VFLConfig(method=method, b=b, beta=beta, epochs=epochs, batch_size=batch_size, embedding_size=P,
                             C=C, n_classes=K, eval_chunk=eval_chunk, delta=delta)
        for who, party in [("server", server)] + [(f"client {j + 1}", c) for j, c in enumerate(self.clients)]:
            try:
                check_device(party.device)
            except (ValueError, RuntimeError) as e:
                raise UsageError(f"{who}: {e}") from None
        self.secure_sum, self.backend, self.seed = secure_sum, backend, seed
        self.batch_seed = int(batch_seed) if batch_seed is not None else public_batch_seed(self.seed)
        self.threads, self.timeout = threads, timeout
        self.epoch = 0
        self.history: list[dict] = []
        self.accountant = VFLAccountant(self.cfg, M)
        self.last_run: FitRun | None = None
        self.party_batch_seeds = None  # tests only: each party's batch seed (server first), to make them disagree

    # ---------------------------------------------------------------------------------------------- checks
    def _check_data(self) -> None:
        s = self.server
        s.y_train = np.asarray(s.y_train.cpu() if isinstance(s.y_train, torch.Tensor) else s.y_train)
        if s.y_test is not None:
            s.y_test = np.asarray(s.y_test.cpu() if isinstance(s.y_test, torch.Tensor) else s.y_test)
        for name in ("y_train", "y_test"):
            y = getattr(s, name)
            if y is not None and (y.ndim != 1 or y.dtype.kind not in "iu"):
                raise UsageError(f"server: {name} must be a 1-D array of integer class labels, got "
                                 f"{y.dtype} of shape {y.shape}")
        n_train, n_test = len(s.y_train), None if s.y_test is None else len(s.y_test)
        for j, c in enumerate(self.clients):
            who = f"client {j + 1}"
            c.x_train = _rows(c.x_train, who, "x_train")
            if (c.x_test is None) != (n_test is None):
                raise UsageError(f"{who}: test rows and the server's test labels must be given together")
            if c.x_test is not None:
                c.x_test = _rows(c.x_test, who, "x_test")
                if c.x_test.shape[1] != c.x_train.shape[1]:
                    raise UsageError(f"{who}: x_test has {c.x_test.shape[1]} columns, x_train {c.x_train.shape[1]}")
            if len(c.x_train) != n_train or (n_test is not None and c.x_test is not None and len(c.x_test) != n_test):
                raise UsageError(f"{who} holds {len(c.x_train)}/{'-' if c.x_test is None else len(c.x_test)} "
                                 f"records, the labels {n_train}/{'-' if n_test is None else n_test}: records are "
                                 f"misaligned")

    def _embedding_size(self) -> int:
        sizes = []
        for j, c in enumerate(self.clients):
            one = c.x_train[:1] if len(c.x_train) else np.zeros((1, c.x_train.shape[1]), np.float32)
            shape = _probe(c.module, torch.as_tensor(one))
            if len(shape) != 2 or shape[0] != 1:
                raise UsageError(f"client {j + 1}: its module maps a (1, {c.x_train.shape[1]}) batch to shape "
                                 f"{shape}; it must give an embedding (records x P)")
            sizes.append(shape[1])
        if len(set(sizes)) != 1:
            raise UsageError(f"the clients' modules give embeddings of sizes {sizes}; the sum needs one size P")
        return sizes[0]

    def _classes(self, P: int) -> int:
        shape = _probe(self.server.module, torch.zeros(1, P))
        if len(shape) != 2 or shape[1] < 2:
            raise UsageError(f"server: the fusion module maps the (1, {P}) embedding sum to shape {shape}; it must "
                             f"give scores for K >= 2 classes (records x K)")
        K = shape[1]
        top = max(int(y.max()) for y in (self.server.y_train, self.server.y_test) if y is not None and y.size)
        if top >= K or min(int(y.min()) for y in (self.server.y_train, self.server.y_test)
                           if y is not None and y.size) < 0:
            raise UsageError(f"server: labels must be classes 0..{K - 1} (the fusion module's {K} outputs), got "
                             f"labels up to {top}")
        return K

    # ---------------------------------------------------------------------------------------------- training
    def _programs(self, n_train: int, n_test: int, x_train: list, x_test: list, y_train, y_test, batch_seeds: list,
                  **mode) -> list:
        """Every party's program, server first: its own seed, module, optimizer (and loss), device and rows only;
        ``mode``: :class:`PBMVFLProgram`'s training or prediction options."""
        M = len(self.clients)
        seeds = party_seeds(self.seed, M + 1)
        s = self.server
        common = dict(threads=self.threads, secure_sum=self.secure_sum, **mode)
        progs = [PBMVFLProgram(self.cfg, M, n_train, n_test, seeds[0], batch_seeds[0], y_train=y_train, y_test=y_test,
                               model=s.module, optimizer=s.optimizer, loss=s.loss, device=s.device, **common)]
        progs += [PBMVFLProgram(self.cfg, M, n_train, n_test, seeds[j + 1], batch_seeds[j + 1], X_train=x_train[j],
                                X_test=x_test[j], model=c.module, optimizer=c.optimizer, device=c.device, **common)
                  for j, c in enumerate(self.clients)]
        return progs

    def _fit_programs(self, epochs: int) -> list:
        s, M = self.server, len(self.clients)
        return self._programs(len(s.y_train), 0 if s.y_test is None else len(s.y_test),
                              [c.x_train for c in self.clients], [c.x_test for c in self.clients], s.y_train,
                              s.y_test, self.party_batch_seeds or [self.batch_seed] * (M + 1), epochs=epochs,
                              first_epoch=self.epoch + 1)

    def _parties(self) -> list:
        return [self.server] + self.clients

    def fit(self, epochs: int | None = None, progress: bool = False) -> list[dict]:
        """Train ``epochs`` more epochs (default: up to the planned total) in one job; return their metrics.  On
        success every party's module and optimizer hold the trained state; if the job fails, nothing changes."""
        n = self.cfg.epochs - self.epoch if epochs is None else epochs
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise UsageError(f"epochs to train must be an integer >= 1, got {n!r}"
                             + (" (the planned epochs are done)" if epochs is None else ""))
        t0 = time.perf_counter()
        steps = int(n) * math.ceil(len(self.server.y_train) / self.cfg.batch_size)
        records = run_programs(self._fit_programs(int(n)), self.backend, self.timeout, self.threads,
                               progress=steps if progress else None)
        for party, rec in zip(self._parties(), records, strict=False):
            _load_party(party, rec["result"]["state"])
        new = records[0]["result"]["history"]
        self.epoch += int(n)
        self.history.extend(new)
        self.accountant.record(int(n))
        self.last_run = FitRun(records=records, seconds=time.perf_counter() - t0, backend=self.backend)
        return new

    def predict_proba(self, blocks) -> np.ndarray:
        """Class probabilities of records whose columns the clients hold (``blocks[j]``: client j's rows): each
        client releases the records' embeddings once through the method's mechanism (accounted as one more use)
        and the server applies its fusion model."""
        M = len(self.clients)
        if len(blocks) != M:
            raise UsageError(f"predict_proba needs one block of rows per client ({M}), got {len(blocks)}")
        xs = [_rows(b, f"client {j + 1}", "rows to predict") for j, b in enumerate(blocks)]
        if len({len(x) for x in xs}) != 1:
            raise UsageError(f"the clients' rows to predict are misaligned: {[len(x) for x in xs]} records")
        progs = self._programs(0, len(xs[0]), [None] * M, xs, np.zeros(0, np.int64), None, [0] * (M + 1),
                               predict=True)
        out = run_programs(progs, self.backend, self.timeout, self.threads)[0]["result"]["probabilities"]
        self.accountant.record(1)
        return out

    # ---------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """Every party's model and optimizer state (CPU tensors), the epochs done, the metrics, the accountant and
        the public batch seed: plain types and tensors, loadable with ``torch.load(..., weights_only=True)``."""
        def party(p):
            return {"module": to_cpu(p.module.state_dict()), "optimizer": to_cpu(p.optimizer.state_dict())}

        return {"format": CHECKPOINT_FORMAT, "epoch": self.epoch, "batch_seed": self.batch_seed,
                "history": [dict(h) for h in self.history], "accountant": self.accountant.state_dict(),
                "server": party(self.server), "clients": [party(c) for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (the same parties, modules of the same shapes, the same mechanism)."""
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise UsageError(f"not a PBM-VFL checkpoint (format {CHECKPOINT_FORMAT!r})")
        if len(state["clients"]) != len(self.clients):
            raise UsageError(f"the checkpoint has {len(state['clients'])} clients, this trainer {len(self.clients)}")
        backup = self.state_dict()
        try:
            self.accountant.load_state_dict(state["accountant"])  # refuses another mechanism's
            for who, party, st in [("server", self.server, state["server"])] + [
                    (f"client {j + 1}", c, s)
                    for j, (c, s) in enumerate(zip(self.clients, state["clients"], strict=False))]:
                try:
                    _load_party(party, st)
                except (RuntimeError, ValueError, KeyError) as e:
                    raise UsageError(f"{who}: the checkpoint does not fit its module or optimizer: {e}") from None
        except Exception:  # nothing half-loaded: every party back as it was
            for party, st in zip(self._parties(), [backup["server"]] + backup["clients"], strict=False):
                _load_party(party, st)
            raise
        self.epoch, self.batch_seed = int(state["epoch"]), int(state["batch_seed"])
        self.history = [dict(h) for h in state["history"]]

    def save(self, path) -> None:
        torch.save(self.state_dict(), path)

    def load(self, path) -> None:
        """:meth:`load_state_dict` of a file written by :meth:`save`, read with ``weights_only=True`` (tensors and
        plain types only: nothing in the file is executed)."""
        self.load_state_dict(torch.load(path, weights_only=True))


def _load_party(party, state: dict) -> None:
    party.module.load_state_dict(state["module"])
    party.optimizer.load_state_dict(state["optimizer"])
