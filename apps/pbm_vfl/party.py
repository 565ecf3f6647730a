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
import time

import numpy as np

from mpc.party import PartyProgram
from sqm import pbm
from sqm.rng import derive_seed, fresh_bytes, make_rng

from .config import VFLConfig
from .privacy import noise_sigma


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
        out = {"epoch": epoch, "train_loss": self.loss_sum / max(self.loss_n, 1)}
        for split, tag in (("train", "train_running"), ("test", "test")):
            if not self._probs[split] or self.y[split] is None:
                continue
            y = self.y[split][np.concatenate(self._idx[split])]
            probs = self.probabilities(split)
            out[f"{tag}_accuracy"] = float(np.mean(probs.argmax(1) == y))
            if self.cfg.n_classes == 2:  # scikit-learn only then: a party process does not import it otherwise
                from sklearn.metrics import average_precision_score

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

