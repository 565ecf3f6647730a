"""``sqm pbm-vfl``: split neural training with Poisson-Binomial-quantized embeddings (PBM-VFL, Algorithm 2).

Each client holds its own feature columns and a torch party model (a 3-layer MLP ending in tanh, so its
embedding of size P lies in [-C, C], C = 1).  The server holds the labels and a fusion model (a linear layer
with cross-entropy) over the SUM of the embeddings (Eq. 1).  Per iteration, with a public shared mini-batch:

1. every client PBM-encodes its embeddings (integers in [0, b], :mod:`sqm.pbm`);
2. the sum goes through a secure sum (:class:`sqm.pbm.SumExchange`): only the server learns it;
3. the server decodes h = C/(beta b) (q - b M / 2), computes the loss, updates its fusion model and sends
   the gradient with respect to the embedding sum to every client;
4. each client back-propagates it through its own model (d sum / d h_m is the identity).

ONE party program, :class:`PBMVFLProgram`, is run by every party; ``backend`` picks the runner only:
'mpyc' (default) one real MPyC process per party (:func:`mpc.launch.run_parties`), 'plain' the same programs in
one process (:func:`mpc.inprocess.run_in_process`, a SIMULATION: secure sums are computed in the clear, the
ideal functionality), so for the same seeds both release the same sums bit for bit.

Secure sums: 'bgw' (Shamir shares on the mpc runtime) or 'masked' (the paper's Protocol 0, pairwise masks of
keys the clients agree on by X25519, :mod:`mpc.masked_sum`).  Both refuse fewer than two clients.
Randomness: each party draws its model initialisation and its noise from its OWN seed
(:func:`sqm.rng.spawn_seeds`) through AES-CTR, fresh OS entropy unless a seed is given (experiments only);
the mini-batch order is public, from a public seed (:func:`public_batch_seed`).

Baselines (the same program; clients send their float embeddings to the server in the clear: they are not
secure protocols): NPQ (no privacy, no quantization), LDP as in the paper (each client adds Gaussian noise
of variance 2 M C^2 / (b beta^2): matched VARIANCE, not calibrated to any epsilon) and LDP at equal epsilon
(Gaussian calibrated by :func:`sqm.calibration.gaussian_sigma` to PBM's accounted feature-level
(epsilon, delta) over the same releases).  Each method is evaluated on the test records through its own
release mechanism (the server never sees clean embeddings under PBM), so test metrics include its noise.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from mpc.party import PartyProgram
from sqm import pbm
from sqm.rng import derive_seed, fresh_bytes, make_rng, spawn_seeds

METHODS = ("pbm", "npq", "ldp", "ldp_eq")
METHOD_LABELS = {"pbm": "PBM-VFL", "npq": "NPQ", "ldp": "LDP (paper)", "ldp_eq": "LDP (equal eps)"}
SECURE_SUMS = pbm.SECURE_SUMS
BACKENDS = ("mpyc", "plain")
FLOAT_BITS = 32


@dataclass
class VFLConfig:
    method: str = "pbm"
    b: int = 16
    beta: float = 0.15
    epochs: int = 10
    batch_size: int = 100
    lr: float = 0.01
    embedding_size: int = 16
    hidden: int = 64
    optimizer: str = "adam"
    C: float = 1.0
    n_classes: int = 2
    device: str = "cpu"
    eval_chunk: int = 4000
    delta: float = 1e-5  # of PBM's accounted guarantee, which the equal-epsilon LDP baseline matches

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {METHODS}")
        pbm.check_params(self.b, self.beta, self.C)
        for name in ("epochs", "batch_size", "embedding_size", "hidden", "eval_chunk"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name.replace('_', '-')} must be an integer >= 1, got {v!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"learning rate must be > 0, got {self.lr!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.n_classes < 2:
            raise ValueError(f"need at least 2 classes, got {self.n_classes}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")

    def public(self) -> dict:
        """What every party must agree on (the device is each party's own business)."""
        d = asdict(self)
        d.pop("device")
        return d


def ldp_sigma(b: int, beta: float, M: int, C: float = 1.0) -> float:
    """The paper's LDP baseline: per-client Gaussian noise of variance 2 M C^2 / (b beta^2) (PBM's variance
    bound per client, doubled): matched variance, NOT calibrated to an epsilon."""
    pbm.check_params(b, beta, C)
    return math.sqrt(2.0 * M * C * C / (b * beta * beta))


def ldp_sensitivity(embedding_size: int, uses: int, C: float = 1.0) -> float:
    """L2 sensitivity of one client's ``uses`` releases of its P-dim embedding in [-C, C]^P (one feature row
    replaced: 2 C sqrt(P) per release; ``uses`` Gaussian releases compose exactly as one with sensitivity
    multiplied by sqrt(uses))."""
    return 2.0 * C * math.sqrt(embedding_size * uses)


def pbm_privacy(cfg: VFLConfig, M: int):
    """PBM's accounted guarantee for this training (:func:`sqm.pbm.privacy_report`, each record used once per
    epoch)."""
    return pbm.privacy_report(cfg.b, cfg.beta, M, cfg.embedding_size, uses=cfg.epochs, delta=cfg.delta)


def ldp_sigma_equal_epsilon(cfg: VFLConfig, M: int) -> float:
    """Per-client Gaussian sigma at PBM's feature-level (epsilon, delta) over the same releases."""
    from sqm.calibration import gaussian_sigma

    eps = pbm_privacy(cfg, M).epsilon_feature
    return gaussian_sigma(ldp_sensitivity(cfg.embedding_size, cfg.epochs, cfg.C), eps, cfg.delta)


def ldp_epsilon(sigma: float, cfg: VFLConfig) -> float:
    """Feature-level epsilon (at ``cfg.delta``) of a client's Gaussian releases with this sigma over training
    (exact, :func:`sqm.calibration.gaussian_epsilon`)."""
    from sqm.calibration import gaussian_epsilon

    return gaussian_epsilon(sigma, ldp_sensitivity(cfg.embedding_size, cfg.epochs, cfg.C), cfg.delta)


def noise_sigma(cfg: VFLConfig, M: int) -> float:
    """The per-client Gaussian sigma of an LDP method (0 for PBM and NPQ)."""
    if cfg.method == "ldp":
        return ldp_sigma(cfg.b, cfg.beta, M, cfg.C)
    if cfg.method == "ldp_eq":
        return ldp_sigma_equal_epsilon(cfg, M)
    return 0.0


def model_bits(records: int, M: int, P: int, method: str, b: int) -> float:
    """The paper's cost model: per record and party, P values of log2(b M) bits up (PBM; F bits for NPQ/LDP)
    and P floats of F = 32 bits down: T B M P (log2(b M) + F) over training."""
    up = math.log2(b * M) if method == "pbm" else FLOAT_BITS
    return float(records) * M * P * (up + FLOAT_BITS)


# ----------------------------------------------------------------------------------------------------
# parties
# ----------------------------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def _seed_int(ss: np.random.SeedSequence) -> int:
    return int(ss.generate_state(1, dtype=np.uint64)[0] & ((1 << 63) - 1))


def party_streams(seed) -> tuple[int, np.random.Generator]:
    """A party's (torch seed for its model initialisation, cryptographic generator for its secret draws), both
    from the party's OWN seed only (from :func:`sqm.rng.spawn_seeds`); fresh OS entropy when ``seed`` is None."""
    if seed is None:
        return int.from_bytes(fresh_bytes(8), "little") >> 1, make_rng()
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    # the first two children of ``ss`` (as ss.spawn(2) would give them, without advancing ``ss``: the same
    # seed object always gives the same streams)
    s_model, s_secret = (np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, i), pool_size=ss.pool_size)
                         for i in range(2))
    return _seed_int(s_model), make_rng(s_secret)


BATCH_ORDER_LABEL = "sqm-vfl PBM-VFL public mini-batch order"


def public_batch_seed(seed=None) -> int:
    """The PUBLIC seed of the mini-batch order (every party derives the same order from it).

    Fresh OS entropy when ``seed`` is None; for a seeded experiment, a one-way function of the seed (HMAC-SHA256
    under a label of its own, :func:`mpc.randomness.derive_seed`): it is a separate value, public, from which
    no party's seed can be recovered (parties' seeds are other HMAC outputs of the root)."""
    if seed is None:
        return int.from_bytes(fresh_bytes(8), "little") >> 1
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    root = int.from_bytes(ss.generate_state(8, np.uint32).astype("<u4").tobytes(), "little")
    return derive_seed(root, BATCH_ORDER_LABEL) >> 193  # 63 bits


def _make_mlp(in_dim: int, hidden: int, P: int, seed: int):
    torch = _torch()
    nn = torch.nn
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                             nn.Linear(hidden, P), nn.Tanh())


def _optimizer(cfg: VFLConfig, params):
    torch = _torch()
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr)
    return torch.optim.SGD(params, lr=cfg.lr)


def epoch_order(batch_seed: int, epoch: int, n: int) -> np.ndarray:
    """The public record order of an epoch (every party derives it from the shared PUBLIC batch seed, see
    :func:`public_batch_seed`; a statistical generator is fine for a public permutation)."""
    return np.random.default_rng([int(batch_seed), int(epoch)]).permutation(n)


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()


def _state(module) -> dict:
    """A torch module's parameters as numpy arrays (what a party program returns)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def _load(module, state) -> None:
    if state is not None:
        torch = _torch()
        module.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in state.items()})


class ClientParty:
    """A client: its feature columns, its party model and its private noise generator (AES-CTR, from its own
    seed or OS entropy)."""

    def __init__(self, cfg: VFLConfig, M: int, X_train, X_test, seed, batch_seed: int, state=None):
        torch = _torch()
        self.cfg, self.M, self.batch_seed = cfg, M, int(batch_seed)
        self.data = {}
        for split, X in (("train", X_train), ("test", X_test)):
            X = np.asarray(X, dtype=np.float32)
            if X.ndim != 2 or not np.all(np.isfinite(X)):
                raise ValueError(f"a client's {split} block must be a finite 2-D array, got shape {X.shape}")
            self.data[split] = torch.as_tensor(X, device=cfg.device)
        torch_seed, self.rng = party_streams(seed)
        self.model = _make_mlp(self.data["train"].shape[1], cfg.hidden, cfg.embedding_size, torch_seed)
        _load(self.model, state)
        self.model = self.model.to(cfg.device)
        self.opt = _optimizer(cfg, self.model.parameters())
        self.sigma = noise_sigma(cfg, M)
        self.clipped = 0
        self._emb = None

    def message(self, split: str, idx: np.ndarray, train: bool = True) -> np.ndarray:
        """This client's contribution for records ``idx``: PBM integers, or floats (NPQ, LDP)."""
        torch = _torch()
        x = self.data[split][torch.as_tensor(idx, device=self.cfg.device)]
        if train:
            self.model.train()
            emb = self.model(x)
            self._emb = emb
        else:
            with torch.no_grad():
                emb = self.model(x)
        h = emb.detach().to("cpu", torch.float64).numpy() * self.cfg.C  # tanh in [-1, 1] -> [-C, C]
        if self.cfg.method == "pbm":
            enc = pbm.encode(h, self.cfg.b, self.cfg.beta, self.cfg.C, self.rng)
            self.clipped += enc.clipped
            return enc.q
        if not np.all(np.isfinite(h)):
            raise ValueError("a party model produced NaN or infinite embeddings")
        if self.sigma > 0:
            return h + self.rng.normal(0.0, self.sigma, size=h.shape)
        return h

    def backward(self, grad: np.ndarray) -> None:
        torch = _torch()
        if self._emb is None:
            raise RuntimeError("backward before a training forward pass")
        g = torch.as_tensor(np.asarray(grad, dtype=np.float32), device=self.cfg.device)
        if g.shape != self._emb.shape:
            raise ValueError(f"gradient of shape {tuple(g.shape)} for embeddings of shape {tuple(self._emb.shape)}")
        self.opt.zero_grad()
        self._emb.backward(g * self.cfg.C)
        self.opt.step()
        self._emb = None


class ServerParty:
    """The server: labels, the fusion model over the embedding sum, the decoder, the metrics."""

    def __init__(self, cfg: VFLConfig, M: int, y_train, y_test, seed, batch_seed: int, state=None):
        torch = _torch()
        self.cfg, self.M, self.batch_seed = cfg, M, int(batch_seed)
        self.y = {"train": np.asarray(y_train, dtype=np.int64),
                  "test": None if y_test is None else np.asarray(y_test, dtype=np.int64)}
        for split, y in self.y.items():
            if y is not None and (y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= cfg.n_classes))):
                raise ValueError(f"{split} labels must be a 1-D array of classes 0..{cfg.n_classes - 1}")
        torch_seed, _ = party_streams(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch_seed)
            self.fusion = torch.nn.Linear(cfg.embedding_size, cfg.n_classes)
        _load(self.fusion, state)
        self.fusion = self.fusion.to(cfg.device)
        self.opt = _optimizer(cfg, self.fusion.parameters())
        self.hash = hashlib.sha256()
        self._probs = {"train": [], "test": []}
        self._idx = {"train": [], "test": []}
        self.loss_sum, self.loss_n = 0.0, 0

    def decode(self, total) -> np.ndarray:
        if self.cfg.method == "pbm":
            q = np.asarray(total, dtype=np.int64)
            self.hash.update(q.tobytes())
            return pbm.decode(q, self.cfg.b, self.cfg.beta, self.M, self.cfg.C)
        return np.asarray(total, dtype=np.float64)

    def train_step(self, total, idx: np.ndarray) -> np.ndarray:
        torch = _torch()
        h = torch.as_tensor(self.decode(total), dtype=torch.float32, device=self.cfg.device)
        h.requires_grad_(True)
        self.fusion.train()
        logits = self.fusion(h)
        y = torch.as_tensor(self.y["train"][idx], device=self.cfg.device)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.loss_sum += float(loss.detach()) * len(idx)
        self.loss_n += len(idx)
        self._probs["train"].append(torch.softmax(logits.detach(), 1).cpu().numpy())
        self._idx["train"].append(idx)
        return h.grad.detach().cpu().numpy()

    def predict(self, total, idx: np.ndarray, split: str = "test") -> None:
        torch = _torch()
        h = torch.as_tensor(self.decode(total), dtype=torch.float32, device=self.cfg.device)
        with torch.no_grad():
            self._probs[split].append(torch.softmax(self.fusion(h), 1).cpu().numpy())
        self._idx[split].append(idx)

    def probabilities(self, split: str = "test") -> np.ndarray:
        probs = np.concatenate(self._probs[split]) if self._probs[split] else np.zeros((0, self.cfg.n_classes))
        self._probs[split], self._idx[split] = [], []
        return probs

    def epoch_metrics(self, epoch: int) -> dict:
        from sklearn.metrics import average_precision_score

        out = {"epoch": epoch, "train_loss": self.loss_sum / max(self.loss_n, 1)}
        for split, tag in (("train", "train_running"), ("test", "test")):
            if not self._probs[split] or self.y[split] is None:
                continue
            y = self.y[split][np.concatenate(self._idx[split])]
            probs = self.probabilities(split)
            out[f"{tag}_accuracy"] = float(np.mean(probs.argmax(1) == y))
            if self.cfg.n_classes == 2:
                out[f"{tag}_auprc"] = float(average_precision_score(y, probs[:, 1]))
        self.loss_sum, self.loss_n = 0.0, 0
        return out


async def _evaluate(cfg: VFLConfig, link, server, client, n: int) -> None:
    """One pass over the test records through the method's release (chunks of ``cfg.eval_chunk``)."""
    for start in range(0, n, cfg.eval_chunk):
        idx = np.arange(start, min(n, start + cfg.eval_chunk))
        total = await link.sum(None if client is None else client.message("test", idx, train=False), len(idx))
        if server is not None:
            server.predict(total, idx, "test")


async def train_loop(cfg: VFLConfig, link, server: ServerParty | None, client: ClientParty | None, n_train: int,
                     n_test: int) -> dict:
    """Algorithm 2 at one party (the server or one client); every party makes the same sequence of exchanges:
    one agreement per epoch, one secure sum and one gradient message per iteration, one secure sum per
    evaluation chunk of the test records (if any)."""
    me = server if server is not None else client
    B = cfg.batch_size
    history, stats = [], {"iterations": 0, "records": 0, "sum_seconds": 0.0, "iter_seconds": 0.0,
                          "eval_seconds": 0.0}
    for epoch in range(1, cfg.epochs + 1):
        order = epoch_order(me.batch_seed, epoch, n_train)
        await link.agree(_digest(order), f"mini-batch order of epoch {epoch}")
        for start in range(0, n_train, B):
            idx = order[start:start + B]
            t0 = time.perf_counter()
            msg = None if client is None else client.message("train", idx)
            ts = time.perf_counter()
            total = await link.sum(msg, len(idx))
            stats["sum_seconds"] += time.perf_counter() - ts
            grad = await link.gradient(server.train_step(total, idx) if server is not None else None)
            if client is not None:
                client.backward(grad)
            stats["iter_seconds"] += time.perf_counter() - t0
            stats["iterations"] += 1
            stats["records"] += len(idx)
        t0 = time.perf_counter()
        await _evaluate(cfg, link, server, client, n_test)
        stats["eval_seconds"] += time.perf_counter() - t0
        if server is not None:
            history.append(server.epoch_metrics(epoch))
    return {"history": history, "stats": stats}


class PBMVFLProgram(PartyProgram):
    """One party of PBM-VFL (party 0: the server, with the labels; j >= 1: client j, with its columns), the
    same program on either runner.  Training (``predict=False``): Algorithm 2 for ``cfg.epochs`` epochs, each
    followed by an evaluation of the ``n_test`` test records when there are any; the result holds this party's
    trained model (``state``).  Prediction (``predict=True``): the parties' models (``state``) release the
    ``n_test`` records' embedding sums once; the server's result holds the class probabilities."""

    def __init__(self, cfg: VFLConfig, M: int, n_train: int, n_test: int, seed, batch_seed: int,
                 X_train=None, X_test=None, y_train=None, y_test=None, threads: int = 1,
                 secure_sum: str = "bgw", state=None, predict: bool = False):
        self.cfg, self.M, self.n_train, self.n_test = cfg, M, n_train, n_test
        self.secure_sum, self.predict = secure_sum, predict
        self.seed, self.batch_seed = seed, batch_seed
        self.X_train, self.X_test, self.y_train, self.y_test = X_train, X_test, y_train, y_test
        self.threads, self.state = threads, state

    def describe(self) -> str:
        return json.dumps({"program": "PBM-VFL", "config": self.cfg.public(), "clients": self.M,
                           "n_train": self.n_train, "n_test": self.n_test, "predict": self.predict,
                           "secure_sum": self.secure_sum if self.cfg.method == "pbm" else "clear"}, sort_keys=True)

    async def run(self, ctx):
        torch = _torch()
        torch.set_num_threads(self.threads)
        if ctx.M != self.M + 1:
            raise ValueError(f"program built for {self.M} clients, runtime has {ctx.M - 1}")
        cfg = self.cfg
        mode = self.secure_sum if cfg.method == "pbm" else "clear"
        link = pbm.SumExchange(ctx, mode, cfg.embedding_size, cfg.b * self.M)
        await link.setup()
        server = client = None
        if ctx.is_server:
            server = ServerParty(cfg, self.M, self.y_train, self.y_test, self.seed, self.batch_seed, self.state)
        else:
            X_train = self.X_train if self.X_train is not None else np.zeros((0, self.X_test.shape[1]), np.float32)
            client = ClientParty(cfg, self.M, X_train, self.X_test, self.seed, self.batch_seed, self.state)
        if self.predict:
            await _evaluate(cfg, link, server, client, self.n_test)
            return {"probabilities": server.probabilities() if server is not None else None,
                    "clipped": client.clipped if client is not None else 0}
        out = await train_loop(cfg, link, server, client, self.n_train, self.n_test)
        out.update(bytes=dict(link.bytes), clipped=client.clipped if client is not None else 0,
                   state=_state(server.fusion if server is not None else client.model))
        if server is not None:
            out["sum_digest"] = server.hash.hexdigest()
        return out


# ----------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------
@dataclass
class TrainResult:
    method: str
    backend: str
    history: list
    accuracy: float
    auprc: float | None
    seconds: float
    iterations: int
    records: int
    sum_seconds: float
    iter_seconds: float
    bits_model: float
    bytes_sent: int | None  # measured by the runtime (mpyc); None for in-process runs
    bytes_detail: dict = field(default_factory=dict)
    clipped: int = 0
    sum_digest: str | None = None
    sigma: float = 0.0  # per-client Gaussian noise (LDP methods)
    states: list = field(default_factory=list, repr=False)  # each party's trained model (server first)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("states")
        return d


def _check_blocks(blocks_train, blocks_test, y_train, y_test):
    if len(blocks_train) != len(blocks_test) or not blocks_train:
        raise ValueError("need the same (>= 1) number of train and test column blocks")
    for j, (a, t) in enumerate(zip(blocks_train, blocks_test)):
        a, t = np.asarray(a), np.asarray(t)
        if a.ndim != 2 or t.ndim != 2 or a.shape[1] != t.shape[1]:
            raise ValueError(f"client {j + 1}: train/test blocks must be 2-D with the same columns")
        if a.shape[0] != len(y_train) or t.shape[0] != len(y_test):
            raise ValueError(f"client {j + 1} holds {a.shape[0]}/{t.shape[0]} records, the labels "
                             f"{len(y_train)}/{len(y_test)}: records are misaligned")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(t))):
            raise ValueError(f"client {j + 1}'s data contains NaN or infinite values")


def run_programs(programs: list, backend: str, timeout: float = 3600.0, threads: int = 1) -> list[dict]:
    """The parties' records: real MPyC processes ('mpyc') or the same programs in this process ('plain')."""
    if backend == "mpyc":
        from mpc.launch import run_parties

        return run_parties(programs, timeout=timeout)
    if backend != "plain":
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    from mpc.inprocess import run_in_process

    torch = _torch()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return run_in_process(programs, timeout=timeout)
    finally:
        torch.set_num_threads(old)


def train_vfl(blocks_train, blocks_test, y_train, y_test, cfg: VFLConfig, backend: str = "mpyc", seed=None,
              batch_seeds=None, progress: bool = False, desc: str | None = None, threads: int = 1,
              secure_sum: str = "bgw", batch_seed: int | None = None, timeout: float = 3600.0) -> TrainResult:
    """Train PBM-VFL (or a baseline) on vertically split data; return the test metrics by epoch and costs.

    ``backend``: 'mpyc' (real party processes) or 'plain' (the same party programs in this process, a
    simulation).  ``seed``: None (default) gives every party fresh OS entropy.  A seed (an int, a sequence of
    ints or a SeedSequence) is for reproducible EXPERIMENTS: each party is handed only its own seed
    (:func:`sqm.rng.spawn_seeds`, entry 0 the server's, j client j's), from which it draws its model
    initialisation and its secret noise (AES-CTR); whoever knows the root seed can regenerate them all.
    Masked-sum keys never come from a seed (fresh X25519 pairs).  ``batch_seed``: the PUBLIC seed of the
    mini-batch order (default :func:`public_batch_seed` of ``seed``: fresh, or a one-way function of the seed).
    ``batch_seeds``: override each party's batch seed (server first) -- for tests of
    parties that disagree on the mini-batches.  ``threads``: torch CPU threads per party (1 by default: the
    models are small, and one thread makes the in-process run bit-identical to the party processes').
    ``secure_sum``: 'bgw' (Shamir shares through ``ctx.evaluate``) or 'masked' (the paper's Protocol 0,
    pairwise masks modulo 2^k with 2^k > b M).  ``timeout``: seconds before the whole job is abandoned.
    ``progress``: print the test accuracy of each epoch when the job ends.
    """
    if secure_sum not in SECURE_SUMS:
        raise ValueError(f"secure sum must be one of {SECURE_SUMS}, got {secure_sum!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    cfg.validate()
    _check_blocks(blocks_train, blocks_test, y_train, y_test)
    M = len(blocks_train)
    problem = pbm.two_clients_problem(M) if cfg.method == "pbm" else None
    if problem:  # refused before any party starts (the party program refuses too)
        raise ValueError(problem)
    n_train, n_test = len(y_train), len(y_test)
    if isinstance(seed, (list, tuple)):
        seed = np.random.SeedSequence([int(x) for x in seed])
    seeds = spawn_seeds(seed, M + 1) if seed is not None else [None] * (M + 1)  # each party: its own only
    public = int(batch_seed) if batch_seed is not None else public_batch_seed(seed)
    bseeds = list(batch_seeds) if batch_seeds is not None else [public] * (M + 1)
    if len(bseeds) != M + 1:
        raise ValueError(f"batch_seeds needs {M + 1} entries (server first)")
    common = dict(threads=threads, secure_sum=secure_sum)
    programs = [PBMVFLProgram(cfg, M, n_train, n_test, seeds[0], bseeds[0], y_train=np.asarray(y_train),
                              y_test=np.asarray(y_test), **common)]
    programs += [PBMVFLProgram(cfg, M, n_train, n_test, seeds[j + 1], bseeds[j + 1],
                               X_train=np.asarray(blocks_train[j], np.float32),
                               X_test=np.asarray(blocks_test[j], np.float32), **common) for j in range(M)]
    t0 = time.perf_counter()
    res = run_programs(programs, backend, timeout, threads)
    out = res[0]["result"]
    if backend == "mpyc":
        bytes_sent = int(sum(r.get("bytes_sent", 0) for r in res))
        detail = {k: int(sum(r["result"]["bytes"][k] for r in res)) for k in ("sum", "grad", "control")}
        detail["per_party"] = [int(r.get("bytes_sent", 0)) for r in res]
    else:
        bytes_sent, detail = None, {}
    if progress:
        for m in out["history"]:
            print(f"  {desc or cfg.method} epoch {m['epoch']}: test accuracy {m.get('test_accuracy', float('nan')):.4f}")
    hist = out["history"]
    last = hist[-1] if hist else {}
    st = out["stats"]
    return TrainResult(method=cfg.method, backend=backend, history=hist,
                       accuracy=float(last.get("test_accuracy", float("nan"))), auprc=last.get("test_auprc"),
                       seconds=time.perf_counter() - t0, iterations=st["iterations"], records=st["records"],
                       sum_seconds=st["sum_seconds"], iter_seconds=st["iter_seconds"],
                       bits_model=model_bits(st["records"], M, cfg.embedding_size, cfg.method, cfg.b),
                       bytes_sent=bytes_sent, bytes_detail=detail,
                       clipped=int(sum(r["result"]["clipped"] for r in res[1:])),
                       sum_digest=out.get("sum_digest"), sigma=noise_sigma(cfg, M),
                       states=[r["result"]["state"] for r in res])


# ----------------------------------------------------------------------------------------------------
# scikit-learn estimator
# ----------------------------------------------------------------------------------------------------
try:
    from sklearn.base import BaseEstimator, ClassifierMixin
except ImportError:  # pragma: no cover - scikit-learn is a dependency
    BaseEstimator, ClassifierMixin = object, object


class PBMVFLClassifier(ClassifierMixin, BaseEstimator):
    """PBM-VFL as a scikit-learn classifier (a thin estimator over :func:`train_vfl`).

    The columns of ``X`` are split among ``n_parties`` clients (``feature_blocks``: one list of column indices
    per client; default: contiguous near-equal blocks) and the server holds ``y``.  ``fit`` trains by the party
    programs on ``backend`` ('mpyc': real processes; 'plain': the same programs in this process);
    ``predict_proba`` has the clients release the records' embedding sums once through the same mechanism
    (``method``'s noise included: under PBM the server never sees a clean embedding) and applies the server's
    fusion model.  This object holds every party's data and trained model (it is where the job is launched);
    the parties themselves see only what the protocol sends them.  ``seed``: None for OS entropy, an int for
    reproducible experiments (then fit and each predict are deterministic).  Fitted: ``classes_``,
    ``n_features_in_``, ``feature_blocks_``, ``history_``, ``result_`` (:class:`TrainResult`), ``states_`` (each
    party's model, server first) and ``privacy_`` (its releases' :func:`method_privacy`).
    """

    def __init__(self, n_parties=2, feature_blocks=None, method="pbm", b=16, beta=0.15, epochs=10,
                 batch_size=100, lr=0.01, embedding_size=16, hidden=64, optimizer="adam", C=1.0, delta=1e-5,
                 secure_sum="bgw", backend="mpyc", seed=None, device="cpu", timeout=3600.0):
        self.n_parties = n_parties
        self.feature_blocks = feature_blocks
        self.method = method
        self.b = b
        self.beta = beta
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.embedding_size = embedding_size
        self.hidden = hidden
        self.optimizer = optimizer
        self.C = C
        self.delta = delta
        self.secure_sum = secure_sum
        self.backend = backend
        self.seed = seed
        self.device = device
        self.timeout = timeout

    def _config(self, n_classes: int) -> VFLConfig:
        cfg = VFLConfig(method=self.method, b=self.b, beta=self.beta, epochs=self.epochs,
                        batch_size=self.batch_size, lr=self.lr, embedding_size=self.embedding_size,
                        hidden=self.hidden, optimizer=self.optimizer, C=self.C, n_classes=n_classes,
                        device=self.device, delta=self.delta)
        cfg.validate()
        return cfg

    def _blocks(self, d: int) -> list[np.ndarray]:
        if self.feature_blocks is None:
            n = self.n_parties
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= d:
                raise ValueError(f"cannot split n_features = {d} columns among n_parties={n!r} clients")
            return np.array_split(np.arange(d), n)
        blocks = [np.asarray(b, dtype=np.int64).reshape(-1) for b in self.feature_blocks]
        cols = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        if not blocks or any(b.size == 0 for b in blocks) or cols.min() < 0 or cols.max() >= d \
                or np.unique(cols).size != cols.size:
            raise ValueError(f"feature_blocks must give each client a non-empty set of distinct columns of the "
                             f"{d} columns, got {self.feature_blocks!r}")
        return blocks

    def _seeds(self):
        if self.seed is None:
            return None, None
        return np.random.SeedSequence(self.seed).spawn(2)

    def fit(self, X, y):
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import validate_data

        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"PBMVFLClassifier needs at least 2 classes in y, got {len(self.classes_)} class")
        cfg = self._config(len(self.classes_))
        self.feature_blocks_ = self._blocks(X.shape[1])
        blocks = [X[:, c] for c in self.feature_blocks_]
        self.result_ = train_vfl(blocks, [b[:0] for b in blocks], y_enc, y_enc[:0], cfg, backend=self.backend,
                                 seed=self._seeds()[0], secure_sum=self.secure_sum, timeout=self.timeout)
        self.history_ = self.result_.history
        self.states_ = self.result_.states
        self.privacy_ = method_privacy(cfg, len(blocks))
        return self

    def predict_proba(self, X):
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        cfg = self._config(len(self.classes_))
        M = len(self.feature_blocks_)
        s = self._seeds()[1]
        seeds = spawn_seeds(s, M + 1) if s is not None else [None] * (M + 1)
        common = dict(secure_sum=self.secure_sum, predict=True)
        programs = [PBMVFLProgram(cfg, M, 0, len(X), seeds[0], 0, y_train=np.zeros(0, np.int64),
                                  state=self.states_[0], **common)]
        programs += [PBMVFLProgram(cfg, M, 0, len(X), seeds[j + 1], 0, X_test=X[:, c].astype(np.float32),
                                   state=self.states_[j + 1], **common)
                     for j, c in enumerate(self.feature_blocks_)]
        return run_programs(programs, self.backend, self.timeout)[0]["result"]["probabilities"]

    def predict(self, X):
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


# ----------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------
def digits_quadrants(X: np.ndarray) -> list[np.ndarray]:
    """The 8x8 digits images cut into 4 quadrants of 16 pixels (one per party)."""
    img = np.asarray(X).reshape(-1, 8, 8)
    return [np.ascontiguousarray(img[:, r:r + 4, c:c + 4].reshape(-1, 16)) for r in (0, 4) for c in (0, 4)]


def load_split(dataset: str, parties: int, data_path: str | None = None, test_fraction: float = 0.2,
               split_seed: int = 0):
    """(blocks_train, blocks_test, y_train, y_test, n_classes) for 'digits' (pixels scaled to [0, 1]; with 4
    parties the image quadrants) or 'phishing' (:func:`apps.datasets.load_dataset`, a stratified split)."""
    from apps.datasets import load_dataset
    from sqm.vertical import VerticalData

    if dataset not in ("digits", "phishing"):
        raise ValueError(f"unknown dataset {dataset!r}; choose 'digits' or 'phishing'")
    Xtr, ytr, Xte, yte = load_dataset(dataset, data_path).train_test(test_fraction, split_seed)
    if dataset == "digits":
        Xtr, Xte = Xtr / 16.0, Xte / 16.0

    def blocks(X):
        return digits_quadrants(X) if dataset == "digits" and parties == 4 else VerticalData.split(X, parties).blocks

    ytr, yte = np.asarray(ytr, dtype=np.int64), np.asarray(yte, dtype=np.int64)
    return blocks(Xtr), blocks(Xte), ytr, yte, int(max(ytr.max(), yte.max())) + 1


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------
def default_device() -> str:
    try:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001
        return "cpu"


def check_device(device: str) -> str:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but torch sees no CUDA GPU; use --device cpu")
    torch.device(device)  # raises on a malformed name
    return device


def method_privacy(cfg: VFLConfig, M: int):
    """The privacy of ``cfg.method``'s releases over training, as a :class:`sqm.report.PrivacyReport`.

    PBM: feature-level (one client's embedding changes) epsilon against the server, RDP composed over the
    ``cfg.epochs`` releases of each record (its sample-level epsilon in the notes).  LDP: the same feature-level
    epsilon of each client's Gaussian releases (which the server sees directly): for the paper's sigma it is
    much smaller than PBM's (that noise matches PBM's variance, not its privacy); the equal-epsilon baseline is
    calibrated to PBM's.  NPQ: no privacy."""
    from dp_accounting.dp_event import SelfComposedDpEvent

    from sqm.events import PBMDpEvent, gaussian_event
    from sqm.report import PrivacyReport

    common = dict(method=METHOD_LABELS[cfg.method], n_parties=M, rounds=cfg.epochs)
    if cfg.method == "npq":
        return PrivacyReport(epsilon_server=math.inf, delta=0.0, notes="no privacy, no quantization", **common)
    rep = pbm_privacy(cfg, M)
    if cfg.method == "pbm":
        event = PBMDpEvent(cfg.b, cfg.beta, M, cfg.embedding_size, "feature")
        return PrivacyReport(epsilon_server=rep.epsilon_feature, delta=cfg.delta,
                             events=(SelfComposedDpEvent(event, cfg.epochs),),
                             notes=f"feature-level, b={cfg.b}, beta={cfg.beta:g}, P={cfg.embedding_size}; "
                                   f"sample-level epsilon {rep.epsilon_sample:.4g}", **common)
    sigma = noise_sigma(cfg, M)
    eps = rep.epsilon_feature if cfg.method == "ldp_eq" else ldp_epsilon(sigma, cfg)
    how = ("Gaussian calibrated to PBM's epsilon" if cfg.method == "ldp_eq" else
           "the paper's sigma^2 = 2 M C^2 / (b beta^2): matched variance, not calibrated to epsilon")
    event = gaussian_event(sigma, ldp_sensitivity(cfg.embedding_size, 1, cfg.C))
    return PrivacyReport(epsilon_server=eps, epsilon_client=eps, delta=cfg.delta, sigma=sigma,
                         l2_sensitivity=ldp_sensitivity(cfg.embedding_size, cfg.epochs, cfg.C),
                         events=(SelfComposedDpEvent(event, cfg.epochs),),
                         notes=f"feature-level, per client; exact Gaussian epsilon (the events' RDP composition "
                               f"is looser); {how}", **common)


def privacy_reports(cfg: VFLConfig, M: int) -> dict:
    """:func:`method_privacy` of every method, keyed by method."""
    return {m: method_privacy(replace(cfg, method=m), M) for m in METHODS}


def run(args) -> int:
    from sqm.report import render_table, write_json

    device = check_device(args.device or default_device())
    btr, bte, ytr, yte, n_classes = load_split(args.dataset, args.parties, args.data, split_seed=args.split_seed)
    base = VFLConfig(method="pbm", b=args.b, beta=args.beta, epochs=args.epochs, batch_size=args.batch_size,
                     lr=args.learning_rate, embedding_size=args.embedding_size, hidden=args.hidden,
                     optimizer=args.optimizer, n_classes=n_classes, device=device, delta=args.delta)
    base.validate()
    M = len(btr)
    secure_mode = args.seed is None
    seeds = np.random.SeedSequence(args.seed).spawn(len(METHODS)) if args.seed is not None else [None] * 4
    print(f"PBM-VFL on {args.dataset}: {len(ytr)} train / {len(yte)} test records, {M} clients "
          f"({', '.join(str(b.shape[1]) for b in btr)} features), P = {args.embedding_size}, b = {args.b}, "
          f"beta = {args.beta}, batch {args.batch_size}, {args.epochs} epochs, {args.optimizer} lr "
          f"{args.learning_rate}, device {device}, PBM-VFL on backend {args.backend} "
          f"({'BGW secure sum' if args.secure_sum == 'bgw' else 'pairwise-masked sum mod 2^k'}"
          f"{'; in-process SIMULATION' if args.backend == 'plain' else ''}); baselines in process")
    if not secure_mode:
        print(SEEDED_WARNING)
    privacy = privacy_reports(base, M)
    results = {}
    for method, s in zip(METHODS, seeds):
        if method != "pbm" and args.no_baselines:
            continue
        backend = args.backend if method == "pbm" else "plain"  # the baselines are not secure protocols
        results[method] = train_vfl(btr, bte, ytr, yte, replace(base, method=method), backend=backend, seed=s,
                                    progress=not args.quiet, desc=METHOD_LABELS[method],
                                    secure_sum=args.secure_sum, batch_seed=args.batch_seed, timeout=args.timeout)
    rows = []
    for method, r in results.items():
        p = privacy[method]
        where = "real processes" if r.backend == "mpyc" else "in process"
        row = {"method": f"{p.method} ({where})", "test accuracy": round(r.accuracy, 4)}
        if n_classes == 2:
            row["test AUPRC"] = round(r.auprc, 4)
        row.update({"epsilon (feature)": round(p.epsilon_server, 4), "delta": p.delta,
                    "sigma": None if p.sigma is None else round(p.sigma, 4)})
        rows.append(row)
    print(render_table(rows, list(rows[0])))
    rep = pbm_privacy(base, M)
    print(f"privacy: each record released {args.epochs} times ({rep.note}); PBM sample-level epsilon "
          f"{rep.epsilon_sample:.4g}; the paper's LDP sigma is {privacy['ldp'].sigma / privacy['ldp_eq'].sigma:.2f}x "
          f"the sigma PBM's epsilon needs")
    r = results["pbm"]
    print(f"communication of PBM-VFL training ({r.iterations} iterations, {r.records} record-uses): "
          f"model T B M P (log2(bM) + 32) = {r.bits_model:.4g} bits ({r.bits_model / 8e6:.4g} MB)")
    if r.bytes_sent is not None:
        d = r.bytes_detail
        print(f"  measured by the runtime (all parties, incl. test evaluation): {r.bytes_sent} bytes "
              f"(secure sums {d['sum']}, gradients {d['grad']}, batch checks and setup {d['control']}); "
              f"training sums + gradients = {8 * (d['sum'] + d['grad']) / r.bits_model:.2f} x the model")
    else:
        print("  measured bytes: n/a (in-process SIMULATION; use --backend mpyc)")
    print(f"  time {r.seconds:.2f} s, {1e3 * r.iter_seconds / max(r.iterations, 1):.2f} ms per iteration, "
          f"{100 * r.sum_seconds / max(r.iter_seconds, 1e-12):.1f}% in the secure sum; clipped entries {r.clipped}")
    if args.json:
        obj = {"secure_mode": secure_mode, "dataset": args.dataset, "parties": M, "b": args.b, "beta": args.beta,
               "epochs": args.epochs, "embedding_size": args.embedding_size, "backend": args.backend,
               "device": device, "delta": args.delta, "methods": {k: v.as_dict() for k, v in results.items()},
               "privacy": {k: v.as_dict() for k, v in privacy.items()}, "pbm_accounting": rep.as_dict(),
               "table": rows}
        write_json(args.json, obj, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for k, v in results.items():
            ax.plot([m["epoch"] for m in v.history], [m["test_accuracy"] for m in v.history], marker="o",
                    label=METHOD_LABELS[k])
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{args.dataset}, {M} parties, b={args.b}, beta={args.beta}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    return 0


SEEDED_WARNING = ("warning: --seed given: this run is an EXPERIMENT (secure_mode false): whoever knows the seed can "
                  "regenerate every party's randomness (model initialisation and noise); omit --seed for a "
                  "private run")


def add_training_arguments(p) -> None:
    p.add_argument("--epochs", type=int, default=10, help="training epochs (default: 10)")
    p.add_argument("--batch-size", type=int, default=100, help="mini-batch size B (default: 100)")
    p.add_argument("--learning-rate", type=float, default=0.01, help="learning rate (default: 0.01)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"], help="optimizer (default: adam)")
    p.add_argument("--embedding-size", type=int, default=16, help="embedding size P (default: 16)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width of the party MLPs (default: 64)")
    p.add_argument("--device", default=None,
                   help="torch device for the models (default: cuda when available, else cpu)")


def register(sub) -> None:
    from apps import options

    p = sub.add_parser("pbm-vfl", help="PBM-VFL: split neural training with Poisson-Binomial-quantized embeddings",
                       parents=[options.runtime(), options.output()],
                       description="Split neural training with Poisson-Binomial-quantized embeddings "
                                   "(PBM-VFL, Algorithm 2): PBM-VFL through real MPyC party processes (or "
                                   "--backend plain, the in-process simulation of the same programs), compared "
                                   "with NPQ (no privacy, no quantization), the paper's LDP (matched variance) and "
                                   "LDP at PBM's epsilon; prints feature and sample epsilon and communication.")
    p.add_argument("--dataset", default="digits", choices=["digits", "phishing"], help="dataset (default: digits)")
    p.add_argument("--data", default=None, help="phishing: directory or CSV/ARFF file "
                                                "(default: ../shared/data/phishing)")
    p.add_argument("--parties", type=int, default=4,
                   help="number of clients; digits with 4 clients uses image quadrants (default: 4)")
    p.add_argument("--b", type=int, default=16, help="PBM trials b >= 1 (default: 16)")
    p.add_argument("--beta", type=float, default=0.15, help="PBM beta in (0, 1/4] (default: 0.15)")
    add_training_arguments(p)
    p.add_argument("--delta", type=float, default=1e-5, help="delta for (epsilon, delta) (default: 1e-5)")
    p.add_argument("--secure-sum", default="bgw", choices=list(SECURE_SUMS),
                   help="'bgw' (default) Shamir-shared sum on the mpc runtime; 'masked' the paper's Protocol 0, "
                        "pairwise masks modulo 2^k > b M (k bits per value), SHAKE-256 streams of keys the clients "
                        "agree on by X25519 (fresh per run)")
    p.add_argument("--split-seed", type=int, default=0, help="public train/test split seed (default: 0)")
    p.add_argument("--batch-seed", type=int, default=None,
                   help="PUBLIC seed of the mini-batch order (default: fresh; with --seed, derived one way from it)")
    p.add_argument("--no-baselines", action="store_true", help="skip the NPQ and LDP baselines")
    p.add_argument("--plot", default=None, help="write test accuracy by epoch (PNG) to FILE")
    p.set_defaults(func=run)
