"""``sqm pbm-vfl``: split neural training with Poisson-Binomial-quantized embeddings (PBM-VFL, Algorithm 2).

Each client holds its own feature columns and its own torch party model: any ``nn.Module`` whose output is the
embedding, of size P, clipped to [-C, C] (``sqm pbm-vfl``'s default is a 3-layer MLP ending in tanh).  The
server holds the labels, a fusion model over the SUM of the embeddings (Eq. 1) and its loss (default: a linear
layer with cross-entropy).  Per iteration, with a public shared mini-batch:

1. every client PBM-encodes its embeddings on their device (:class:`.encoding.PBMRelease`, integers in [0, b]);
2. the sum goes through a secure sum (:class:`sqm.apps.pbm_vfl.sum_exchange.SumExchange`): only the server learns it;
3. the server decodes h = C/(beta b) (q - b M / 2) on its device, computes the loss, updates its fusion model and
   sends the gradient with respect to the embedding sum to every client;
4. each client back-propagates it through its own model (``h.backward``; d sum / d h_m is the identity).

ONE party program, :class:`PBMVFLProgram`, is run by every party; ``backend`` picks the runner only:
'mpyc' (default) one real MPyC process per party (:func:`sqm.mpc.net.launch.run_parties`), 'plain' the same programs in
one process (:func:`sqm.mpc.protocols.inprocess.run_in_process`, a SIMULATION: secure sums are computed in the clear,
the ideal functionality), so for the same seeds both release the same sums bit for bit.  A program carries its
party's model, optimizer and loss; the launcher serializes them with cloudpickle for its own party processes,
so classes defined in a user's script travel too.  Nothing a peer sends is unpickled.

Secure sums: 'bgw' (Shamir shares on the mpc runtime) or 'masked' (the paper's Protocol 0, pairwise masks of
keys the clients agree on by X25519, :mod:`sqm.mpc.protocols.masked_sum`).  Both refuse fewer than two clients.
Randomness: each party draws its secret noise from its OWN seed (:func:`sqm.mechanism.rng.spawn_seeds`) through AES-CTR,
one stream per epoch (:func:`party_stream`), and re-seeds torch's generator for each step's forward pass
(dropout; :func:`torch_step_seed`).  The seed is fresh OS entropy unless one is given (experiments only).
Because every stream is a function of (seed, epoch, step), training stopped after an epoch and resumed from a
checkpoint continues exactly as an uninterrupted run.  The mini-batch order is public, from a public seed
(:func:`public_batch_seed`).

Baselines (the same program; clients send their float embeddings to the server in the clear: they are not
secure protocols): NPQ (no privacy, no quantization), LDP as in the paper (each client adds Gaussian noise
of variance 2 M C^2 / (b beta^2): matched VARIANCE, not calibrated to any epsilon) and LDP at equal epsilon
(Gaussian calibrated by :func:`sqm.mechanism.calibration.gaussian_sigma` to PBM's accounted feature-level
(epsilon, delta) over the same releases).  Each method is evaluated on the test records through its own
release mechanism (the server never sees clean embeddings under PBM), so test metrics include its noise.
"""
from __future__ import annotations

import hashlib
import json
import time
import typing

import numpy as np

from sqm.mechanism import pbm
from sqm.apps.pbm_vfl.config import VFLConfig
from sqm.apps.pbm_vfl.seeds import party_stream, torch_step_seed
from sqm.apps.pbm_vfl.privacy import noise_sigma
from sqm.errors import UsageError
from sqm.mpc.net.party import PartyProgram
from sqm.apps.pbm_vfl.sum_exchange import SumExchange
from sqm.framework.progress import report_progress


def _modules():
    from sqm.apps.pbm_vfl import modules
    return modules


def _torch():
    import torch
    return torch


def epoch_order(batch_seed: int, epoch: int, n: int) -> np.ndarray:
    """The public record order of an epoch (every party derives it from the shared PUBLIC batch seed, see
    :func:`public_batch_seed`; a statistical generator is fine for a public permutation)."""
    return np.random.default_rng([int(batch_seed), int(epoch)]).permutation(n)


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()


def to_cpu(obj):
    """A state dict (nested dicts and lists of tensors) with every tensor copied to the host."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def load_module_state(module, state) -> None:
    """Load a module's state dict (tensors or numpy arrays) into ``module``."""
    if state is not None:
        torch = _torch()
        module.load_state_dict({k: torch.as_tensor(np.asarray(v) if not isinstance(v, torch.Tensor) else v)
                                for k, v in state.items()})


class _Party:
    """What a client and the server share: the model, its optimizer on the party's device, the seed."""

    def __init__(self, cfg: VFLConfig, M: int, model, optimizer, seed, batch_seed: int, device: str | None):
        self.cfg, self.M, self.batch_seed, self.seed = cfg, M, int(batch_seed), seed
        self.device = device or cfg.device
        self.model = model.to(self.device)
        if optimizer is None:
            optimizer = _modules().default_optimizer(cfg, self.model.parameters())
        else:  # a state it carries (resumed training) moves to the parameters' device
            optimizer.load_state_dict(optimizer.state_dict())
        self.opt = optimizer

    def forward(self, x, epoch: int, step: int, train: bool):
        torch = _torch()
        self.model.train(train)
        dev = torch.device(self.device)
        cuda = [] if dev.type != "cuda" else [dev.index if dev.index is not None else torch.cuda.current_device()]
        with torch.random.fork_rng(devices=cuda):
            seed = torch_step_seed(self.seed, epoch, step, train)
            torch.default_generator.manual_seed(seed)  # the generators this forward can use (torch.manual_seed
            for i in cuda:  # would seed every device type: 0.3 ms a step)
                torch.cuda.default_generators[i].manual_seed(seed)
            if train:
                return self.model(x)
            with torch.no_grad():
                return self.model(x)

    def state(self) -> dict:
        return {"module": to_cpu(self.model.state_dict()), "optimizer": to_cpu(self.opt.state_dict())}


class ClientParty(_Party):
    """A client: its feature columns and its party model on its device, and its private noise (AES-CTR, one stream
    per epoch from its own seed or OS entropy, :func:`party_stream`)."""

    def __init__(self, cfg: VFLConfig, M: int, model, optimizer, X_train, X_test, seed, batch_seed: int,
                 device: str | None = None):
        torch = _torch()
        super().__init__(cfg, M, model, optimizer, seed, batch_seed, device)
        self.data = {}
        for split, X in (("train", X_train), ("test", X_test)):
            X = np.asarray(X, dtype=np.float32)
            if X.ndim != 2 or not np.all(np.isfinite(X)):
                raise UsageError(f"a client's {split} block must be a finite 2-D array, got shape {X.shape}")
            self.data[split] = torch.as_tensor(X, device=self.device)
        self.sigma = noise_sigma(cfg, M)
        self.clipped = 0
        self.rng: np.random.Generator | None = None
        self._h = None

    def begin(self, epoch: int) -> None:
        """Start ``epoch``'s noise stream (epoch 0: a prediction run)."""
        self.rng = party_stream(self.seed, epoch)

    def message(self, split: str, idx: np.ndarray, epoch: int, step: int, train: bool = True) -> np.ndarray:
        """This client's contribution for records ``idx``: PBM integers, or floats (NPQ, LDP)."""
        from sqm.apps.pbm_vfl.encoding import release

        torch = _torch()
        emb = self.forward(self.data[split][torch.as_tensor(idx, device=self.device)], epoch, step, train)
        want = (len(idx), self.cfg.embedding_size)
        if tuple(emb.shape) != want:
            raise UsageError(f"the party model's output has shape {tuple(emb.shape)}, the embedding needs {want}")
        cfg = self.cfg
        h, msg, clipped = release(emb, cfg.method, cfg.b, cfg.beta, cfg.C, self.rng, self.sigma)
        self.clipped += clipped
        self._h = h if train else None
        return msg

    def backward(self, grad: np.ndarray) -> None:
        """Back-propagate the server's gradient with respect to the embedding sum through this client's model."""
        torch = _torch()
        if self._h is None:
            raise RuntimeError("backward before a training forward pass")
        g = torch.as_tensor(np.asarray(grad, dtype=np.float32), device=self.device).to(self._h.dtype)
        if g.shape != self._h.shape:
            raise UsageError(f"gradient of shape {tuple(g.shape)} for embeddings of shape {tuple(self._h.shape)}")
        self.opt.zero_grad()
        self._h.backward(g)
        self.opt.step()
        self._h = None


class ServerParty(_Party):
    """The server: labels, the fusion model over the embedding sum and its loss, the decoder, the metrics."""

    def __init__(self, cfg: VFLConfig, M: int, model, optimizer, loss, y_train, y_test, seed, batch_seed: int,
                 device: str | None = None):
        torch = _torch()
        super().__init__(cfg, M, model, optimizer, seed, batch_seed, device)
        self.loss = loss if loss is not None else torch.nn.CrossEntropyLoss()
        self.y = {"train": None if y_train is None else np.asarray(y_train, dtype=np.int64),
                  "test": None if y_test is None else np.asarray(y_test, dtype=np.int64)}
        k = cfg.n_classes
        assert k is not None  # a server's config names its classes (a job derives them from its labels)
        for split, y in self.y.items():
            if y is not None and (y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= k))):
                raise UsageError(f"{split} labels must be a 1-D array of classes 0..{k - 1}")
        self.hash = hashlib.sha256()
        self._probs: dict[str, list[np.ndarray]] = {"train": [], "test": []}
        self._idx: dict[str, list[np.ndarray]] = {"train": [], "test": []}
        self.loss_sum, self.loss_n = 0.0, 0
        self.progress: typing.IO[str] | None = None
        self.iterations = 0

    def decode(self, total):
        """The embedding sum, on this party's device, as float32."""
        torch = _torch()
        if self.cfg.method == "pbm":
            q = np.asarray(total, dtype=np.int64)
            self.hash.update(q.tobytes())
            h = pbm.decode(torch.as_tensor(q, device=self.device), self.cfg.b, self.cfg.beta, self.M, self.cfg.C)
        else:
            h = torch.as_tensor(np.asarray(total, dtype=np.float64), device=self.device)
        return h.to(torch.float32)

    def train_step(self, total, idx: np.ndarray, epoch: int, step: int) -> np.ndarray:
        torch = _torch()
        h = self.decode(total)
        h.requires_grad_(True)
        logits = self.forward(h, epoch, step, train=True)
        labels = self.y["train"]
        assert labels is not None  # a training server holds the training labels
        y = torch.as_tensor(labels[idx], device=self.device)
        loss = self.loss(logits, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.loss_sum += float(loss.detach()) * len(idx)
        self.loss_n += len(idx)
        self._probs["train"].append(torch.softmax(logits.detach(), 1).cpu().numpy())
        self._idx["train"].append(idx)
        self.iterations += 1
        if self.progress is not None:
            self.progress.write(f"{self.iterations} {float(loss.detach()):.6g}\n")
            self.progress.flush()
        return h.grad.detach().cpu().numpy()

    def predict(self, total, idx: np.ndarray, split: str = "test") -> None:
        torch = _torch()
        logits = self.forward(self.decode(total), 0, 0, train=False)
        self._probs[split].append(torch.softmax(logits, 1).cpu().numpy())
        self._idx[split].append(idx)

    def probabilities(self, split: str = "test") -> np.ndarray:
        probs = (np.concatenate(self._probs[split]) if self._probs[split]
                 else np.zeros((0, int(self.cfg.n_classes or 0))))
        self._probs[split], self._idx[split] = [], []
        return probs

    def epoch_metrics(self, epoch: int) -> dict:
        out = {"epoch": epoch, "train_loss": self.loss_sum / max(self.loss_n, 1)}
        for split, tag in (("train", "train_running"), ("test", "test")):
            labels = self.y[split]
            if not self._probs[split] or labels is None:
                continue
            y = labels[np.concatenate(self._idx[split])]
            probs = self.probabilities(split)
            out[f"{tag}_accuracy"] = float(np.mean(probs.argmax(1) == y))
            if self.cfg.n_classes == 2:  # scikit-learn only then: a party process does not import it otherwise
                from sklearn.metrics import average_precision_score

                out[f"{tag}_auprc"] = float(average_precision_score(y, probs[:, 1]))
        self.loss_sum, self.loss_n = 0.0, 0
        return out


ITERATIONS_STEP = "training iterations"  # a party's progress (sqm.mpc.net.transport.PartyTransport.progress)


async def _evaluate(cfg: VFLConfig, link, server, client, n: int, epoch: int) -> None:
    """One pass over the test records through the method's release (chunks of ``cfg.eval_chunk``)."""
    for step, start in enumerate(range(0, n, cfg.eval_chunk)):
        idx = np.arange(start, min(n, start + cfg.eval_chunk))
        msg = None if client is None else client.message("test", idx, epoch, step, train=False)
        total = await link.sum(msg, len(idx))
        if server is not None:
            server.predict(total, idx, "test")


async def train_loop(cfg: VFLConfig, link, server: ServerParty | None, client: ClientParty | None, n_train: int,
                     n_test: int, epochs, ctx=None) -> dict:
    """Algorithm 2 at one party (the server or one client) for ``epochs`` (their numbers: the public batch order,
    the noise streams and the torch seeds are functions of the epoch); every party makes the same sequence of
    exchanges: one agreement per epoch, one secure sum and one gradient message per iteration, one secure sum
    per evaluation chunk of the test records (if any).  ``ctx``: this party's transport, told each iteration done
    (its progress)."""
    me = server if server is not None else client
    assert me is not None  # this party is the server or a client
    B = cfg.batch_size
    history, stats = [], {"iterations": 0, "records": 0, "sum_seconds": 0.0, "iter_seconds": 0.0,
                          "eval_seconds": 0.0}
    for epoch in epochs:
        order = epoch_order(me.batch_seed, epoch, n_train)
        await link.agree(_digest(order), f"mini-batch order of epoch {epoch}")
        if client is not None:
            client.begin(epoch)
        for step, start in enumerate(range(0, n_train, B)):
            idx = order[start:start + B]
            t0 = time.perf_counter()
            msg = None if client is None else client.message("train", idx, epoch, step)
            ts = time.perf_counter()
            total = await link.sum(msg, len(idx))
            stats["sum_seconds"] += time.perf_counter() - ts
            grad = await link.gradient(server.train_step(total, idx, epoch, step) if server is not None else None)
            if client is not None:
                client.backward(grad)
            stats["iter_seconds"] += time.perf_counter() - t0
            stats["iterations"] += 1
            stats["records"] += len(idx)
            report_progress(ctx, ITERATIONS_STEP, int(stats["iterations"]), len(epochs) * -(-n_train // B))
        t0 = time.perf_counter()
        await _evaluate(cfg, link, server, client, n_test, epoch)
        stats["eval_seconds"] += time.perf_counter() - t0
        if server is not None:
            history.append(server.epoch_metrics(epoch))
    return {"history": history, "stats": stats}


TORCH_OBJECTS = ("model", "optimizer", "loss")


class PBMVFLProgram(PartyProgram):
    """One party of PBM-VFL (party 0: the server, with the labels; j >= 1: client j, with its columns), the
    same program on either runner.

    ``model``, ``optimizer`` (and at the server ``loss``): this party's torch objects (default:
    :mod:`.modules`' defaults, from the party's seed,
    cross-entropy); ``state``: a module state dict to load into the model.  ``device``: this party's torch device
    (default ``cfg.device``).  Training (``predict=False``): Algorithm 2 for ``epochs`` epochs (default
    ``cfg.epochs``) numbered from ``first_epoch``, each followed by an evaluation of the ``n_test`` test records
    when there are any; the result holds this party's trained model and optimizer (``state``: CPU tensors).
    ``cfg.epochs`` is the planned total, which the equal-epsilon LDP baseline calibrates to.  Prediction
    (``predict=True``): the parties' models release the ``n_test`` records' embedding sums once; the server's
    result holds the class probabilities."""

    def __init__(self, cfg: VFLConfig, M: int, n_train: int, n_test: int, seed, batch_seed: int,
                 X_train=None, X_test=None, y_train=None, y_test=None, threads: int = 1,
                 secure_sum: str = "bgw", state=None, predict: bool = False, model=None, optimizer=None,
                 loss=None, device: str | None = None, epochs: int | None = None, first_epoch: int = 1,
                 progress_path: str | None = None):
        self.cfg, self.M, self.n_train, self.n_test = cfg, M, n_train, n_test
        self.secure_sum, self.predict = secure_sum, predict
        self.seed, self.batch_seed = seed, batch_seed
        self.X_train, self.X_test, self.y_train, self.y_test = X_train, X_test, y_train, y_test
        self.threads, self.state, self.device = threads, state, device
        self.model, self.optimizer, self.loss = model, optimizer, loss
        self.epochs = cfg.epochs if epochs is None else int(epochs)
        self.first_epoch = int(first_epoch)
        self.progress_path = progress_path  # the server appends "iterations loss" lines (a local file; not public)

    def __getstate__(self):
        """The party's torch objects go as one cloudpickle payload (by value, so a class defined in the user's
        script reaches the party process; one payload, so the optimizer keeps pointing at the model's
        parameters).  Only this launcher's own party processes read it."""
        d = dict(self.__dict__)
        objs = tuple(d.pop(k) for k in TORCH_OBJECTS)
        if any(o is not None for o in objs):
            import cloudpickle

            d["_torch_payload"] = cloudpickle.dumps(objs)
        return d

    def __setstate__(self, d):
        payload = d.pop("_torch_payload", None)
        self.__dict__.update(d)
        if payload is None:
            objs = (None,) * len(TORCH_OBJECTS)
        else:
            import pickle

            objs = pickle.loads(payload)
        for k, o in zip(TORCH_OBJECTS, objs, strict=False):
            setattr(self, k, o)

    def describe(self) -> str:
        return json.dumps({"program": "PBM-VFL", "config": self.cfg.public(), "clients": self.M,
                           "n_train": self.n_train, "n_test": self.n_test, "predict": self.predict,
                           "epochs": self.epochs, "first_epoch": self.first_epoch,
                           "secure_sum": self.secure_sum if self.cfg.method == "pbm" else "clear"}, sort_keys=True)

    def parties(self, ctx):
        """(server, None) at the server, (None, client) at a client: this party's model, optimizer and data."""
        cfg = self.cfg
        if ctx.is_server:
            model = self.model if self.model is not None else _modules().default_fusion_model(cfg, self.seed)
            load_module_state(model, self.state)
            return ServerParty(cfg, self.M, model, self.optimizer, self.loss, self.y_train, self.y_test, self.seed,
                               self.batch_seed, self.device), None
        X_test = self.X_test if self.X_test is not None else np.zeros((0, np.shape(self.X_train)[1]), np.float32)
        X_train = self.X_train if self.X_train is not None else np.zeros((0, np.shape(X_test)[1]), np.float32)
        model = (self.model if self.model is not None
                 else _modules().default_client_model(cfg, np.shape(X_train)[1], self.seed))
        load_module_state(model, self.state)
        return None, ClientParty(cfg, self.M, model, self.optimizer, X_train, X_test, self.seed, self.batch_seed,
                                 self.device)

    async def run(self, ctx):
        return await self.run_as(ctx, *self.parties(ctx))

    async def run_as(self, ctx, server: ServerParty | None, client: ClientParty | None):
        """:meth:`run` with this party already built by :meth:`parties` (a job checks its model first)."""
        torch = _torch()
        torch.set_num_threads(self.threads)
        if ctx.M != self.M + 1:
            raise UsageError(f"program built for {self.M} clients, runtime has {ctx.M - 1}")
        cfg = self.cfg
        mode = self.secure_sum if cfg.method == "pbm" else "clear"
        link = SumExchange(ctx, mode, cfg.embedding_size, cfg.b * self.M)
        await link.setup()
        if self.predict:
            if client is not None:
                client.begin(0)
            await _evaluate(cfg, link, server, client, self.n_test, 0)
            return {"probabilities": server.probabilities() if server is not None else None,
                    "clipped": client.clipped if client is not None else 0}
        epochs = range(self.first_epoch, self.first_epoch + self.epochs)
        if server is not None and self.progress_path:
            # not a with block: the server writes to it on every step of train_loop; closed once that returns
            server.progress = open(self.progress_path, "a")  # noqa: SIM115
        out = await train_loop(cfg, link, server, client, self.n_train, self.n_test, epochs, ctx)
        if server is not None and server.progress is not None:
            server.progress.close()
        me = server if server is not None else client
        assert me is not None  # this party is the server or a client
        out.update(bytes=dict(link.bytes), clipped=client.clipped if client is not None else 0, state=me.state())
        if server is not None:
            out["sum_digest"] = server.hash.hexdigest()
        return out
