"""``sqm pbm-vfl``: split neural training with Poisson-Binomial-quantized embeddings (PBM-VFL, Algorithm 2).

Each client holds its own feature columns and a torch party model (a 3-layer MLP ending in tanh, so its
embedding of size P lies in [-C, C], C = 1).  The server holds the labels and a fusion model (a linear layer
with cross-entropy) over the SUM of the embeddings (Eq. 1).  Per iteration, with a public shared mini-batch:

1. every client PBM-encodes its embeddings (integers in [0, b], :mod:`sqm.pbm`);
2. the sum goes through the ``mpc`` secure-sum primitive (a Job with n_vars = 0 whose clients' addends are
   their integer vectors): only the server learns it;
3. the server decodes h = C/(beta b) (q - b M / 2), computes the loss, updates its fusion model and sends
   the gradient with respect to the embedding sum to every client;
4. each client back-propagates it through its own model (d sum / d h_m is the identity).

Secure sums (``mpyc``): 'bgw' (Shamir shares on the mpc runtime) or 'masked' (the paper's Protocol 0: each pair
of clients agrees on a key by X25519 among themselves, fresh per run, and the clients' values travel masked
modulo 2^k by SHAKE-256 streams of those keys; the masks cancel in the server's sum).  Both refuse fewer than
two clients.  Randomness: each party draws its model initialisation and its noise from its OWN seed
(:func:`sqm.rng.spawn_seeds`) through AES-CTR, fresh OS entropy unless a seed is given (experiments only);
the mini-batch order is public, from a public seed (:func:`public_batch_seed`).

Backends: ``mpyc`` runs ONE long-lived MPyC process per party (:class:`PBMVFLProgram` through
:func:`mpc.launch.run_parties`); every iteration is one ``ctx.evaluate`` of the secure sum plus one message
from the server to the clients.  ``plain`` runs the same algorithm, same code path and same seeds in one
process (a SIMULATION for sweeps: the sum is :class:`mpc.backend.PlainBackend`'s; the masks of the masked
sum cancel, so it releases the same sums).

Baselines (always in one process, they are not secure protocols): NPQ (no privacy, no quantization: the
exact float sum) and LDP (each client adds Gaussian noise of variance 2 M C^2 / (b beta^2) to its embedding
before a plain sum).  Each method is evaluated on the test records through its own release mechanism (the
server never sees clean embeddings under PBM), so test metrics include the mechanism's noise.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from mpc import wire
from mpc.party import PartyProgram
from mpc.randomness import derive_seed, fresh_bytes, secure_generator
from sqm import pbm
from sqm.rng import spawn_seeds

METHODS = ("pbm", "npq", "ldp")
SECURE_SUMS = ("bgw", "masked")
FLOAT_BITS = 32


def mask_bits(b: int, M: int) -> int:
    """k with 2^k > b M: the masked sum's modulus (a sum of M values in [0, b] is recovered exactly)."""
    return int(b * M).bit_length()


def _mask_dtype(k: int):
    return np.uint8 if k <= 8 else np.uint16 if k <= 16 else np.uint32 if k <= 32 else np.uint64


def _prg(key: bytes, counter: int, size: int, k: int) -> np.ndarray:
    """``size`` pseudo-random k-bit integers from SHAKE-256(key || counter) (a cryptographic XOF): uniform
    modulo 2^k, as 2^k divides the 2^(8 bytes) values of each drawn word."""
    dt = np.dtype(_mask_dtype(k))
    raw = hashlib.shake_256(key + int(counter).to_bytes(8, "little")).digest(size * dt.itemsize)
    return (np.frombuffer(raw, dtype=dt).astype(np.int64)) & ((1 << k) - 1)


MASK_KEY_INFO = b"sqm-vfl PBM-VFL pairwise mask key v1"


def mask_keypair():
    """A fresh X25519 key pair for one job (private key from OS entropy, never from a seed) and its 32-byte
    raw public key."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    sk = X25519PrivateKey.generate()
    return sk, sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def mask_key(private_key, me: int, my_public: bytes, other: int, their_public: bytes) -> bytes:
    """The 32-byte mask key of clients ``me`` and ``other`` (Bonawitz et al.'s pairwise agreement):
    HKDF-SHA256 over their X25519 shared secret, with an info string binding both party indices and both
    public keys (lower index first), so both ends derive the same key and it is bound to this pair."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from mpc.protocol import ProtocolError

    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(bytes(their_public)))
    except ValueError:
        raise ProtocolError(f"client {me}: client {other}'s X25519 public key is invalid (a low-order point); "
                            f"refused before any masked value was sent") from None
    (lo, pk_lo), (hi, pk_hi) = sorted([(int(me), bytes(my_public)), (int(other), bytes(their_public))])
    info = MASK_KEY_INFO + f" clients {lo},{hi} ".encode() + pk_lo + pk_hi
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def two_clients_problem(M: int) -> str | None:
    """Why a secure sum over ``M`` clients is refused (None if it is not): with one client its "masked"
    value, or its BGW share at threshold t = 0, is its data in the clear."""
    if M < 2:
        return (f"PBM-VFL's secure sum needs at least two clients, got {M}: with one client the server would "
                f"receive that client's data in the clear (its masked value has no other client's mask to "
                f"cancel; its BGW share at threshold t = 0 is the value itself); refused")
    return None


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


def ldp_sigma(b: int, beta: float, M: int, C: float = 1.0) -> float:
    """Standard deviation of the LDP baseline's per-client Gaussian noise: variance 2 M C^2 / (b beta^2)."""
    pbm.check_params(b, beta, C)
    return math.sqrt(2.0 * M * C * C / (b * beta * beta))


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
        return int.from_bytes(fresh_bytes(8), "little") >> 1, secure_generator()
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    # the first two children of ``ss`` (as ss.spawn(2) would give them, without advancing ``ss``: the same
    # seed object always gives the same streams)
    s_model, s_secret = (np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, i), pool_size=ss.pool_size)
                         for i in range(2))
    return _seed_int(s_model), secure_generator(s_secret)


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


class ClientParty:
    """A client: its feature columns, its party model and its private noise generator (AES-CTR, from its own
    seed or OS entropy)."""

    def __init__(self, cfg: VFLConfig, M: int, X_train, X_test, seed, batch_seed: int):
        torch = _torch()
        self.cfg, self.M, self.batch_seed = cfg, M, int(batch_seed)
        self.data = {}
        for split, X in (("train", X_train), ("test", X_test)):
            X = np.asarray(X, dtype=np.float32)
            if X.ndim != 2 or not np.all(np.isfinite(X)):
                raise ValueError(f"a client's {split} block must be a finite 2-D array, got shape {X.shape}")
            self.data[split] = torch.as_tensor(X, device=cfg.device)
        torch_seed, self.rng = party_streams(seed)
        self.model = _make_mlp(X_train.shape[1], cfg.hidden, cfg.embedding_size, torch_seed).to(cfg.device)
        self.opt = _optimizer(cfg, self.model.parameters())
        self.sigma = ldp_sigma(cfg.b, cfg.beta, M, cfg.C)
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
        if self.cfg.method == "ldp":
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

    def __init__(self, cfg: VFLConfig, M: int, y_train, y_test, seed, batch_seed: int):
        torch = _torch()
        self.cfg, self.M, self.batch_seed = cfg, M, int(batch_seed)
        self.y = {"train": np.asarray(y_train, dtype=np.int64), "test": np.asarray(y_test, dtype=np.int64)}
        for split, y in self.y.items():
            if y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= cfg.n_classes)):
                raise ValueError(f"{split} labels must be a 1-D array of classes 0..{cfg.n_classes - 1}")
        torch_seed, _ = party_streams(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch_seed)
            self.fusion = torch.nn.Linear(cfg.embedding_size, cfg.n_classes).to(cfg.device)
        self.opt = _optimizer(cfg, self.fusion.parameters())
        self.hash = hashlib.sha256()
        self._probs = {"train": [], "test": []}
        self._idx = {"train": [], "test": []}
        self.loss_sum, self.loss_n = 0.0, 0

    def decode(self, total, n: int) -> np.ndarray:
        P = self.cfg.embedding_size
        if self.cfg.method == "pbm":
            q = np.asarray(total, dtype=object).astype(np.int64).reshape(n, P)
            self.hash.update(q.tobytes())
            return pbm.decode(q, self.cfg.b, self.cfg.beta, self.M, self.cfg.C)
        return np.asarray(total, dtype=np.float64).reshape(n, P)

    def train_step(self, total, idx: np.ndarray) -> np.ndarray:
        torch = _torch()
        h = torch.as_tensor(self.decode(total, len(idx)), dtype=torch.float32, device=self.cfg.device)
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
        h = torch.as_tensor(self.decode(total, len(idx)), dtype=torch.float32, device=self.cfg.device)
        with torch.no_grad():
            self._probs[split].append(torch.softmax(self.fusion(h), 1).cpu().numpy())
        self._idx[split].append(idx)

    def epoch_metrics(self, epoch: int) -> dict:
        from sklearn.metrics import average_precision_score

        out = {"epoch": epoch, "train_loss": self.loss_sum / max(self.loss_n, 1)}
        for split, tag in (("train", "train_running"), ("test", "test")):
            if not self._probs[split]:
                continue
            probs = np.concatenate(self._probs[split])
            y = self.y[split][np.concatenate(self._idx[split])]
            out[f"{tag}_accuracy"] = float(np.mean(probs.argmax(1) == y))
            if self.cfg.n_classes == 2:
                out[f"{tag}_auprc"] = float(average_precision_score(y, probs[:, 1]))
            self._probs[split], self._idx[split] = [], []
        self.loss_sum, self.loss_n = 0.0, 0
        return out


# ----------------------------------------------------------------------------------------------------
# transports: the same loop, all parties in one process (plain) or one party per MPyC process
# ----------------------------------------------------------------------------------------------------
class PlainIO:
    """All parties in one process; PBM sums through :class:`mpc.backend.PlainBackend` (SIMULATION)."""

    name = "plain"

    def __init__(self, cfg: VFLConfig, M: int):
        self.cfg, self.M = cfg, M
        self.bytes = {"sum": 0, "grad": 0, "control": 0}

    async def agree(self, digests: list, what: str) -> None:
        if len(set(digests)) > 1:
            bad = [i for i, d in enumerate(digests) if d != digests[0]]
            raise ValueError(f"parties disagree on the {what} (parties {bad} differ from the server); refused")

    async def sum(self, msgs: list, size: int):
        if self.cfg.method == "pbm":
            from mpc.secure_sum import secure_sum

            return secure_sum([np.asarray(m, np.int64).reshape(-1) for m in msgs], self.cfg.b * self.M,
                              "plain").values
        return np.sum([np.asarray(m, np.float64).reshape(-1) for m in msgs], axis=0)

    async def to_clients(self, grad, n_clients: int) -> list:
        return [grad] * n_clients


class PartyIO:
    """One party of a long-running MPyC program: secure sums by ``ctx.evaluate``, gradients by messages."""

    name = "mpyc"

    def __init__(self, ctx, cfg: VFLConfig, M: int, secure_sum: str = "bgw"):
        if secure_sum not in SECURE_SUMS:
            raise ValueError(f"secure sum must be one of {SECURE_SUMS}, got {secure_sum!r}")
        problem = two_clients_problem(M)
        if problem:
            from mpc.protocol import ProtocolError

            raise ProtocolError(f"party {ctx.pid}: {problem}")
        self.ctx, self.cfg, self.M, self.mode = ctx, cfg, M, secure_sum
        self.bytes = {"sum": 0, "grad": 0, "control": 0}
        self.k = mask_bits(cfg.b, M)
        self.keys: dict = {}
        self.counter = 0
        self.grad_check = wire.array(np.float32, (None, cfg.embedding_size), what="embedding gradient")

    async def setup(self) -> None:
        """Masked sums: pairwise X25519 key agreement among the clients only (Bonawitz et al.).  Each client
        makes a fresh key pair (OS entropy, never a seed), sends its 32-byte public key to the other clients,
        and derives one mask key per other client (:func:`mask_key`).  The server sends and receives nothing,
        but makes the same exchange (MPyC labels messages by a per-exchange counter)."""
        if self.mode != "masked":
            return
        b0 = self._sent()
        if self.ctx.is_server:
            await self.ctx.send_recv({}, [], None, "mask public keys")
        else:
            pid = self.ctx.pid
            others = [j for j in self.ctx.clients if j != pid]
            sk, pk = mask_keypair()
            got = await self.ctx.send_recv({j: pk for j in others}, others, wire.digest(32), "mask public keys")
            self.keys = {j: mask_key(sk, pid, pk, j, pk_j) for j, pk_j in zip(others, got)}
        self.bytes["control"] += self._sent() - b0

    def _sent(self) -> int:
        rt = self.ctx.rt
        return int(sum(p.protocol.nbytes_sent for p in rt.parties if p.pid != rt.pid and p.protocol is not None))

    async def agree(self, digests: list, what: str) -> None:
        b0 = self._sent()
        await self.ctx.agree(digests[0], what)
        self.bytes["control"] += self._sent() - b0

    async def sum(self, msgs: list, size: int):
        """Secure sum of the clients' PBM vectors (``size`` = records x P, public); the server gets it."""
        from mpc.secure_sum import sum_job

        b0 = self._sent()
        if self.mode == "masked":
            res = await self._masked_sum(msgs, size)
            self.bytes["sum"] += self._sent() - b0
            return res
        job = sum_job([], size, self.cfg.b * self.M)
        my_input = None if self.ctx.is_server else (np.zeros((0, 0), np.int64),
                                                     np.asarray(msgs[0], np.int64).reshape(-1))
        res = await self.ctx.evaluate(job, my_input)
        self.bytes["sum"] += self._sent() - b0
        return res

    async def _masked_sum(self, msgs: list, size: int):
        """Protocol 0 (Bonawitz et al.): y_m = q_m + sum_{m'>m} u_{m,m'} - sum_{m'<m} u_{m',m} mod 2^k, with
        2^k > b M; the masks cancel in the server's sum, which is the exact sum of the q_m.  Each value
        travels in ceil(k / 8) bytes."""
        self.counter += 1
        mod = 1 << self.k
        dtype = _mask_dtype(self.k)
        if self.ctx.is_server:
            got = await self.ctx.send_recv({}, self.ctx.clients, wire.array(dtype, (size,), 0, mod - 1,
                                                                            what="masked values"), "masked sum")
            tot = np.zeros(size, dtype=np.int64)
            for g in got:
                tot += g.astype(np.int64)
            return tot % mod
        v = np.asarray(msgs[0], np.int64).reshape(-1)
        if v.size != size:
            raise ValueError(f"client {self.ctx.pid} holds {v.size} values, the batch needs {size}")
        y = v.copy()
        for j, key in self.keys.items():
            u = _prg(key, self.counter, size, self.k)
            y += u if j > self.ctx.pid else -u
        await self.ctx.send_recv({0: (y % mod).astype(dtype)}, [], None, "masked sum")
        return None

    async def to_clients(self, grad, n_clients: int) -> list:
        b0 = self._sent()
        if self.ctx.is_server:
            await self.ctx.send_recv({c: grad for c in self.ctx.clients}, [], None, "embedding gradient")
            out = []
        else:
            out = await self.ctx.send_recv({}, [0], self.grad_check, "embedding gradient")
        self.bytes["grad"] += self._sent() - b0
        return out


async def train_loop(cfg: VFLConfig, io, server: ServerParty | None, clients: list, n_train: int, n_test: int,
                     on_epoch=None) -> dict:
    """Algorithm 2; every party runs this same sequence of exchanges (one agree per epoch, one secure sum
    and one gradient message per iteration, one secure sum per evaluation chunk)."""
    local = ([server] if server is not None else []) + list(clients)
    B, P = cfg.batch_size, cfg.embedding_size
    history, stats = [], {"iterations": 0, "records": 0, "sum_seconds": 0.0, "iter_seconds": 0.0,
                          "eval_seconds": 0.0}
    for epoch in range(1, cfg.epochs + 1):
        orders = [epoch_order(p.batch_seed, epoch, n_train) for p in local]
        await io.agree([_digest(o) for o in orders], f"mini-batch order of epoch {epoch}")
        order = orders[0]
        for start in range(0, n_train, B):
            idx = order[start:start + B]
            t0 = time.perf_counter()
            msgs = [c.message("train", idx) for c in clients]
            ts = time.perf_counter()
            total = await io.sum(msgs, len(idx) * P)
            stats["sum_seconds"] += time.perf_counter() - ts
            grad = server.train_step(total, idx) if server is not None else None
            grads = await io.to_clients(grad, len(clients))
            for c, g in zip(clients, grads):
                c.backward(g)
            stats["iter_seconds"] += time.perf_counter() - t0
            stats["iterations"] += 1
            stats["records"] += len(idx)
        t0 = time.perf_counter()
        for start in range(0, n_test, cfg.eval_chunk):
            idx = np.arange(start, min(n_test, start + cfg.eval_chunk))
            msgs = [c.message("test", idx, train=False) for c in clients]
            total = await io.sum(msgs, len(idx) * P)
            if server is not None:
                server.predict(total, idx, "test")
        stats["eval_seconds"] += time.perf_counter() - t0
        if server is not None:
            m = server.epoch_metrics(epoch)
            history.append(m)
            if on_epoch is not None:
                on_epoch(m)
    out = {"history": history, "stats": stats, "bytes": dict(io.bytes),
           "clipped": int(sum(c.clipped for c in clients))}
    if server is not None:
        out["sum_digest"] = server.hash.hexdigest()
    return out


class PBMVFLProgram(PartyProgram):
    """One party of PBM-VFL training in a long-lived MPyC process (party 0: server; j >= 1: client j)."""

    def __init__(self, cfg: VFLConfig, M: int, n_train: int, n_test: int, seed, batch_seed: int,
                 X_train=None, X_test=None, y_train=None, y_test=None, threads: int = 1,
                 secure_sum: str = "bgw"):
        self.cfg, self.M, self.n_train, self.n_test = cfg, M, n_train, n_test
        self.secure_sum = secure_sum
        self.seed, self.batch_seed = seed, batch_seed
        self.X_train, self.X_test, self.y_train, self.y_test = X_train, X_test, y_train, y_test
        self.threads = threads

    async def run(self, ctx):
        torch = _torch()
        torch.set_num_threads(self.threads)
        if ctx.M != self.M + 1:
            raise ValueError(f"program built for {self.M} clients, runtime has {ctx.M - 1}")
        io = PartyIO(ctx, self.cfg, self.M, getattr(self, "secure_sum", "bgw"))
        await io.setup()
        if ctx.is_server:
            server = ServerParty(self.cfg, self.M, self.y_train, self.y_test, self.seed, self.batch_seed)
            return await train_loop(self.cfg, io, server, [], self.n_train, self.n_test)
        client = ClientParty(self.cfg, self.M, self.X_train, self.X_test, self.seed, self.batch_seed)
        return await train_loop(self.cfg, io, None, [client], self.n_train, self.n_test)


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

    def as_dict(self) -> dict:
        return asdict(self)


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


def train_vfl(blocks_train, blocks_test, y_train, y_test, cfg: VFLConfig, backend: str = "plain", seed=None,
              batch_seeds=None, progress: bool = False, desc: str | None = None, threads: int = 1,
              secure_sum: str = "bgw", batch_seed: int | None = None, timeout: float = 3600.0) -> TrainResult:
    """Train PBM-VFL (or a baseline) on vertically split data; return the test metrics by epoch and costs.

    ``seed``: None (default) gives every party fresh OS entropy.  A seed (an int, a sequence of ints or a
    SeedSequence) is for reproducible EXPERIMENTS: each party is handed only its own seed
    (:func:`sqm.rng.spawn_seeds`, entry 0 the server's, j client j's), from which it draws its model
    initialisation and its secret noise (AES-CTR); whoever knows the root seed can regenerate them all.
    Masked-sum keys never come from a seed (fresh X25519 pairs).  ``batch_seed``: the PUBLIC seed of the
    mini-batch order (default :func:`public_batch_seed` of ``seed``: fresh, or a one-way function of the seed).
    ``batch_seeds``: override each party's batch seed (server first) -- for tests of
    parties that disagree on the mini-batches.  ``threads``: torch CPU threads per party (1 by default: the
    models are small, and one thread makes the in-process run bit-identical to the party processes').
    ``secure_sum`` (mpyc backend): 'bgw' (Shamir shares through ``ctx.evaluate``) or 'masked' (the paper's
    Protocol 0, pairwise masks modulo 2^k with 2^k > b M: ceil(k / 8) bytes per value).  ``timeout`` (mpyc
    backend): seconds before the whole job is abandoned (a stopped or partitioned party is detected much sooner,
    see :mod:`mpc.liveness`).
    """
    if secure_sum not in SECURE_SUMS:
        raise ValueError(f"secure sum must be one of {SECURE_SUMS}, got {secure_sum!r}")
    cfg.validate()
    _check_blocks(blocks_train, blocks_test, y_train, y_test)
    M = len(blocks_train)
    problem = two_clients_problem(M) if cfg.method == "pbm" else None
    if problem:  # the plain backend simulates the same protocol, so it refuses the same jobs
        raise ValueError(problem)
    n_train, n_test = len(y_train), len(y_test)
    if isinstance(seed, (list, tuple)):
        seed = np.random.SeedSequence([int(x) for x in seed])
    seeds = spawn_seeds(seed, M + 1) if seed is not None else [None] * (M + 1)  # each party: its own only
    public = int(batch_seed) if batch_seed is not None else public_batch_seed(seed)
    bseeds = list(batch_seeds) if batch_seeds is not None else [public] * (M + 1)
    if len(bseeds) != M + 1:
        raise ValueError(f"batch_seeds needs {M + 1} entries (server first)")
    t0 = time.perf_counter()
    if backend == "plain":
        from tqdm import tqdm

        bar = tqdm(total=cfg.epochs, desc=desc or cfg.method, disable=not progress, leave=False)

        def on_epoch(m):
            bar.update(1)
            bar.set_postfix(test_acc=f"{m.get('test_accuracy', float('nan')):.3f}")

        server = ServerParty(cfg, M, y_train, y_test, seeds[0], bseeds[0])
        clients = [ClientParty(cfg, M, blocks_train[j], blocks_test[j], seeds[j + 1], bseeds[j + 1])
                   for j in range(M)]
        torch = _torch()
        old_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            out = asyncio.run(train_loop(cfg, PlainIO(cfg, M), server, clients, n_train, n_test, on_epoch))
        finally:
            torch.set_num_threads(old_threads)
            bar.close()
        bytes_sent, detail, clipped = None, {}, out["clipped"]
    elif backend == "mpyc":
        if cfg.method != "pbm":
            raise ValueError("the mpyc backend runs PBM-VFL only; the NPQ and LDP baselines run in one process")
        from mpc.launch import run_parties

        programs = [PBMVFLProgram(cfg, M, n_train, n_test, seeds[0], bseeds[0],
                                  y_train=np.asarray(y_train), y_test=np.asarray(y_test), threads=threads,
                                  secure_sum=secure_sum)]
        programs += [PBMVFLProgram(cfg, M, n_train, n_test, seeds[j + 1], bseeds[j + 1],
                                   X_train=np.asarray(blocks_train[j], np.float32),
                                   X_test=np.asarray(blocks_test[j], np.float32), threads=threads,
                                   secure_sum=secure_sum) for j in range(M)]
        res = run_parties(programs, timeout=timeout)
        out = res[0]["result"]
        bytes_sent = int(sum(r.get("bytes_sent", 0) for r in res))
        detail = {k: int(sum(r["result"]["bytes"][k] for r in res)) for k in ("sum", "grad", "control")}
        detail["per_party"] = [int(r.get("bytes_sent", 0)) for r in res]
        clipped = int(sum(r["result"]["clipped"] for r in res[1:]))
        if progress:
            for m in out["history"]:
                print(f"  epoch {m['epoch']}: test accuracy {m.get('test_accuracy', float('nan')):.4f}")
    else:
        raise ValueError(f"unknown backend {backend!r}; choose 'plain' or 'mpyc'")
    hist = out["history"]
    last = hist[-1] if hist else {}
    st = out["stats"]
    return TrainResult(method=cfg.method, backend=backend, history=hist,
                       accuracy=float(last.get("test_accuracy", float("nan"))), auprc=last.get("test_auprc"),
                       seconds=time.perf_counter() - t0, iterations=st["iterations"], records=st["records"],
                       sum_seconds=st["sum_seconds"], iter_seconds=st["iter_seconds"],
                       bits_model=model_bits(st["records"], M, cfg.embedding_size, cfg.method, cfg.b),
                       bytes_sent=bytes_sent, bytes_detail=detail, clipped=clipped,
                       sum_digest=out.get("sum_digest"))


# ----------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------
def digits_quadrants(X: np.ndarray) -> list[np.ndarray]:
    """The 8x8 digits images cut into 4 quadrants of 16 pixels (one per party)."""
    img = np.asarray(X).reshape(-1, 8, 8)
    return [np.ascontiguousarray(img[:, r:r + 4, c:c + 4].reshape(-1, 16)) for r in (0, 4) for c in (0, 4)]


def load_split(dataset: str, parties: int, data_path: str | None = None, test_fraction: float = 0.2,
               split_seed: int = 0):
    """(blocks_train, blocks_test, y_train, y_test, n_classes) for 'digits' or 'phishing'."""
    from sklearn.model_selection import train_test_split

    from sqm.vertical import VerticalData

    if dataset == "digits":
        from apps.datasets import load_bundled

        X, y = load_bundled("digits")
        X = X / 16.0
        blocks = digits_quadrants(X) if parties == 4 else VerticalData.split(X, parties).blocks
    elif dataset == "phishing":
        from apps.datasets import load_phishing

        X, y = load_phishing(data_path or "../shared/data/phishing")
        blocks = VerticalData.split(X, parties).blocks
    else:
        raise ValueError(f"unknown dataset {dataset!r}; choose 'digits' or 'phishing'")
    y = np.asarray(y, dtype=np.int64)
    idx_tr, idx_te = train_test_split(np.arange(len(y)), test_size=test_fraction, random_state=split_seed,
                                      stratify=y)
    return ([b[idx_tr] for b in blocks], [b[idx_te] for b in blocks], y[idx_tr], y[idx_te],
            int(y.max()) + 1)


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


def run(args) -> int:
    device = check_device(args.device or default_device())
    btr, bte, ytr, yte, n_classes = load_split(args.dataset, args.parties, args.data, split_seed=args.split_seed)
    base = VFLConfig(method="pbm", b=args.b, beta=args.beta, epochs=args.epochs, batch_size=args.batch_size,
                     lr=args.lr, embedding_size=args.embedding_size, hidden=args.hidden,
                     optimizer=args.optimizer, n_classes=n_classes, device=device)
    base.validate()
    if not 0 < args.delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {args.delta!r}")
    M = len(btr)
    secure_mode = args.seed is None
    s_pbm, s_npq, s_ldp = np.random.SeedSequence(args.seed).spawn(3) if args.seed is not None else (None,) * 3
    print(f"PBM-VFL on {args.dataset}: {len(ytr)} train / {len(yte)} test records, {M} clients "
          f"({', '.join(str(b.shape[1]) for b in btr)} features), P = {args.embedding_size}, b = {args.b}, "
          f"beta = {args.beta}, batch {args.batch_size}, {args.epochs} epochs, {args.optimizer} lr {args.lr}, "
          f"device {device}, backend {args.backend}"
          + (f" ({'BGW secure sum' if args.secure_sum == 'bgw' else 'pairwise-masked sum mod 2^k'})"
             if args.backend == "mpyc" else ""))
    if not secure_mode:
        print(SEEDED_WARNING)
    results = {}
    methods = [("pbm", args.backend, s_pbm)] + ([] if args.no_baselines else
                                                [("npq", "plain", s_npq), ("ldp", "plain", s_ldp)])
    for method, backend, s in methods:
        cfg = replace(base, method=method)
        r = train_vfl(btr, bte, ytr, yte, cfg, backend=backend, seed=s, progress=True,
                      desc=f"{method} ({backend})", secure_sum=args.secure_sum,
                      batch_seed=getattr(args, "batch_seed", None), timeout=getattr(args, "timeout", 3600.0))
        results[method] = r
        accs = " ".join(f"{m['test_accuracy']:.3f}" for m in r.history)
        print(f"  {method.upper():4s} test accuracy by epoch: {accs}")
    rep = pbm.privacy_report(args.b, args.beta, M, args.embedding_size, uses=args.epochs, delta=args.delta)
    r = results["pbm"]
    print(f"final test accuracy: " + ", ".join(f"{k.upper()} {v.accuracy:.4f}" for k, v in results.items()))
    if n_classes == 2:
        print(f"final test AUPRC:    " + ", ".join(f"{k.upper()} {v.auprc:.4f}" for k, v in results.items()))
    print(f"privacy (delta {args.delta:g}), each record released {rep.uses} times ({rep.note}):")
    print(f"  feature epsilon {rep.epsilon_feature:.4g} (one release: {rep.epsilon_feature_per_release:.4g}); "
          f"sample epsilon {rep.epsilon_sample:.4g} (one release: {rep.epsilon_sample_per_release:.4g})")
    print(f"  LDP baseline: Gaussian sigma {ldp_sigma(args.b, args.beta, M):.4g} per client coordinate")
    print(f"communication of PBM-VFL training ({r.iterations} iterations, {r.records} record-uses): "
          f"model T B M P (log2(bM) + 32) = {r.bits_model:.4g} bits ({r.bits_model / 8e6:.4g} MB)"
          + (f"; NPQ model {results['npq'].bits_model:.4g} bits" if "npq" in results else ""))
    if r.bytes_sent is not None:
        d = r.bytes_detail
        print(f"  measured by the runtime (all parties, incl. test evaluation): {r.bytes_sent} bytes "
              f"(secure sums {d['sum']}, gradients {d['grad']}, batch checks and setup {d['control']}); "
              f"training sums + gradients = {8 * (d['sum'] + d['grad']) / r.bits_model:.2f} x the model")
    else:
        print("  measured bytes: n/a (plain backend is a one-process simulation; use --backend mpyc)")
    print(f"  time {r.seconds:.2f} s, {1e3 * r.iter_seconds / max(r.iterations, 1):.2f} ms per iteration, "
          f"{100 * r.sum_seconds / max(r.iter_seconds, 1e-12):.1f}% in the secure sum; clipped entries {r.clipped}")
    if args.json:
        obj = {k: v.as_dict() for k, v in results.items()}
        obj.update(secure_mode=secure_mode, dataset=args.dataset, parties=M, b=args.b, beta=args.beta,
                   epochs=args.epochs, embedding_size=args.embedding_size, backend=args.backend, device=device,
                   epsilon_feature=rep.epsilon_feature, epsilon_sample=rep.epsilon_sample, delta=args.delta,
                   privacy=rep.as_dict(), bits_model=r.bits_model, bytes_sent=r.bytes_sent, seconds=r.seconds)
        with open(args.json, "w") as f:
            json.dump(obj, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for k, v in results.items():
            ax.plot([m["epoch"] for m in v.history], [m["test_accuracy"] for m in v.history], marker="o",
                    label=f"{k.upper()}" + (f" (b={args.b}, beta={args.beta})" if k != "npq" else ""))
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{args.dataset}, {M} parties")
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
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default: 0.01)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"], help="optimizer (default: adam)")
    p.add_argument("--embedding-size", type=int, default=16, help="embedding size P (default: 16)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width of the party MLPs (default: 64)")
    p.add_argument("--device", default=None,
                   help="torch device for the models (default: cuda when available, else cpu)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for reproducible EXPERIMENTS: not secure (whoever knows it regenerates every party's "
                        "randomness), recorded as secure_mode false in the JSON (default: OS entropy)")


def register(sub) -> None:
    p = sub.add_parser("pbm-vfl", help="PBM-VFL: split neural training with Poisson-Binomial-quantized embeddings",
                       description="Split neural training with Poisson-Binomial-quantized embeddings "
                                   "(PBM-VFL, Algorithm 2) on the secure-sum primitive.  Compares PBM-VFL with NPQ "
                                   "(no privacy, no quantization) and LDP (local Gaussian noise), prints "
                                   "feature and sample epsilon and communication.")
    p.add_argument("--dataset", default="digits", choices=["digits", "phishing"], help="dataset (default: digits)")
    p.add_argument("--data", default=None, help="phishing: directory or CSV/ARFF file "
                                                "(default: ../shared/data/phishing)")
    p.add_argument("--parties", type=int, default=4,
                   help="number of clients; digits with 4 clients uses image quadrants (default: 4)")
    p.add_argument("--b", type=int, default=16, help="PBM trials b >= 1 (default: 16)")
    p.add_argument("--beta", type=float, default=0.15, help="PBM beta in (0, 1/4] (default: 0.15)")
    add_training_arguments(p)
    p.add_argument("--delta", type=float, default=1e-5, help="delta for (epsilon, delta) (default: 1e-5)")
    p.add_argument("--backend", default="plain", choices=["plain", "mpyc"],
                   help="PBM-VFL secure sums: 'plain' (default) one-process simulation; 'mpyc' one real MPyC "
                        "process per party over loopback (baselines always run in one process)")
    p.add_argument("--secure-sum", default="bgw", choices=list(SECURE_SUMS),
                   help="with --backend mpyc: 'bgw' (default) Shamir-shared sum on the mpc runtime; 'masked' the "
                        "paper's Protocol 0, pairwise masks modulo 2^k > b M (k bits per value), SHAKE-256 streams "
                        "of keys the clients agree on by X25519 (fresh per run)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="with --backend mpyc: seconds before the whole job is abandoned (default: 3600)")
    p.add_argument("--split-seed", type=int, default=0, help="public train/test split seed (default: 0)")
    p.add_argument("--batch-seed", type=int, default=None,
                   help="PUBLIC seed of the mini-batch order (default: fresh; with --seed, derived one way from it)")
    p.add_argument("--no-baselines", action="store_true", help="skip the NPQ and LDP baselines")
    p.add_argument("--json", default=None, help="write results as JSON to FILE")
    p.add_argument("--plot", default=None, help="write test accuracy by epoch (PNG) to FILE")
    p.set_defaults(func=run)
