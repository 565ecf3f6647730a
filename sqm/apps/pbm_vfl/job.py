"""PBM-VFL as a job-file task (:mod:`sqm.framework.spec`): each organisation runs its own party on its own host,
with its own data file and its own torch model code, from one job file.

- The server holds the labels: its own table (the job file's party 0 ``"file"``: the id column and the label
  column, classes 0..K-1), aligned with the clients' records by the private set intersection in which it is a
  holder too (:mod:`sqm.mpc.protocols.psi`, "The server's own set").  It holds the fusion model and the loss.
- Each party's model comes from its own code: ``"model": "file.py:factory"`` in its job-file entry, or
  ``--model FILE:FACTORY`` on its own command line; the file is loaded at that party only
  (:func:`sqm.framework.user_code.load_factory`), never sent.  A client's factory is called as
  ``factory(n_features, embedding_size)``, the server's as ``factory(embedding_size, n_classes)``; each returns an
  ``nn.Module``, or a dict ``{"module": ..., "optimizer": ..., "loss": ...}`` (the loss at the server only; what it
  leaves out is the default: Adam at the learning rate, cross-entropy).  Without code a party uses
  ``sqm pbm-vfl``'s default models (:mod:`.modules`).  The torch generator is seeded from the party's own seed
  (:func:`.seeds.model_seed`) while the factory runs.
- The records in common are split in public: a permutation of their positions (the canonical id order, the same
  at every party) from the public ``split_seed`` puts ``test_fraction`` of them in the test split, the rest in
  training.  The mini-batch order comes from the public ``batch_seed`` (by default derived from the job id, so
  fresh for every job and the same at every party).
- The run is :class:`.party.PBMVFLProgram`'s, the local launcher's program, fed with the aligned rows: for the same
  seeds and models it releases the same sums and trains the same models bit for bit (tests/test_pbm_vfl_job.py).
- Each party writes a checkpoint of ITS OWN model and optimizer only (``checkpoint_dir``, on its own disk:
  ``pbm-vfl-party{I}.pt``, torch format with tensors and plain types only); a prediction job
  (``predict=True``; the server holds no table then) loads each party's own checkpoint from there and releases
  the embedding sums of the records every client holds once; the server computes the class probabilities and
  sends them to the requesting client (``requester``), which writes them next to its ids (``scores_path``).
  What a prediction reveals: the server learns the noisy embedding sums and the probabilities of the aligned
  records (not which records they are); the requester the probabilities of its own records; the others
  nothing but the count.

Privacy: what is accounted is PBM's feature-level guarantee against the server (the embeddings taken as given,
:data:`.privacy.EMBEDDING_NOTE`), charged to the job's dataset in every ledger under the statistic
"pbm-vfl (feature-level)", so that it is never added up with record-level entries unawares.  A prediction
releases each scored record's embeddings once (one more use, on the scored records).
"""
from __future__ import annotations

import copy
import dataclasses
import os

import numpy as np

from sqm.framework.jobtask import JobTask, switches_of
from sqm.framework.party import seed_policy
from sqm.mpc.net.abort import refused
from sqm.framework.user_code import load_factory
from sqm.mechanism.rng import derive_seed, spawn_seeds
from sqm.apps.pbm_vfl.config import PBMJobParams, VFLConfig
from sqm.apps.pbm_vfl.party import PBMVFLProgram, to_cpu
from sqm.apps.pbm_vfl.seeds import model_seed
from sqm.apps.pbm_vfl.privacy import method_privacy
from sqm.errors import UsageError
from sqm.mpc.net.party import InputRefused
from sqm.mpc.net.party import messages as wire
from sqm.mpc.net.abort import party_label

CHECKPOINT_FORMAT = "sqm-vfl PBM-VFL party checkpoint 1"
BATCH_SEED_LABEL = "sqm-vfl PBM-VFL job's public mini-batch order"


def job_batch_seed(job_id: str) -> int:
    """The public mini-batch seed of a job: a one-way function of its public, fresh ``job_id``."""
    return derive_seed(int(job_id, 16), BATCH_SEED_LABEL) >> 193


def checkpoint_path(directory: str, index: int) -> str:
    """Party ``index``'s own checkpoint file in ``directory``."""
    return os.path.join(directory, f"pbm-vfl-party{int(index)}.pt")


def public_split(m: int, test_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, test positions) of the ``m`` records in common, each sorted: a public permutation of
    the positions (the parties' shared canonical order) from ``split_seed``; ``round(test_fraction m)`` of them
    test records."""
    n_test = int(round(float(test_fraction) * m))
    perm = np.random.default_rng([int(split_seed), int(m)]).permutation(m)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def _built(obj, who: str, with_loss: bool) -> dict:
    """A factory's return value as {"module", "optimizer", "loss"} (None where left out)."""
    from torch import nn

    if isinstance(obj, nn.Module):
        return {"module": obj, "optimizer": None, "loss": None}
    keys = {"module", "optimizer"} | ({"loss"} if with_loss else set())
    if not isinstance(obj, dict) or not isinstance(obj.get("module"), nn.Module) or set(obj) - keys:
        raise UsageError(f"{who}: its model factory must return an nn.Module or a dict with \"module\" (and "
                         f"optionally {sorted(keys - {'module'})}), got {type(obj).__name__}")
    return {"module": obj["module"], "optimizer": obj.get("optimizer"), "loss": obj.get("loss")}


class PBMVFLJobTask(JobTask):
    """PBM-VFL training (or, with ``predict``, prediction) as a job (module docstring).

    ``cfg``: the public configuration (``method`` must be 'pbm': the baselines are not secure protocols;
    ``n_classes`` is the server's business: None derives K from its labels (max + 1), and its model decides);
    ``secure_sum``: 'bgw' or 'masked'; ``test_fraction`` and ``split_seed``: the public split;
    ``batch_seed``: the public mini-batch seed (see :func:`job_batch_seed`); ``label_column``: the server's label
    column (None: its table's only column); ``seed``: this party's experiment seed (refused without
    ``insecure_reproducible``); ``model``: this party's own code "FILE:FACTORY" (set per party by
    :meth:`for_party`); ``checkpoint_dir``: where this party writes (training) or reads (prediction) its own
    checkpoint; ``requester``: the client that learns a prediction's probabilities; ``device``, ``threads``:
    this party's torch device and CPU threads; ``progress_path``: the server's progress file (local)."""

    party_models = True
    neighbouring = "embedding"  # feature-level, as its report (sqm.apps.pbm_vfl.privacy.method_privacy)

    def __init__(self, cfg: VFLConfig, secure_sum: str = "bgw", test_fraction: float = 0.2, split_seed: int = 0,
                 batch_seed: int = 0, label_column: str | None = None, seed=None,
                 insecure_reproducible: bool = False, model: str | None = None, checkpoint_dir: str | None = None,
                 predict: bool = False, requester: int | None = None, device: str | None = None, threads: int = 1,
                 progress_path: str | None = None, scores_path: str | None = None):
        seed_policy(seed, insecure_reproducible, warn=False)
        if cfg.method != "pbm":
            raise UsageError(f"a PBM-VFL job runs the secure protocol (method 'pbm'); {cfg.method!r} is a baseline "
                             f"that sends embeddings in the clear: run it locally (sqm pbm-vfl without --job)")
        self.params = PBMJobParams(secure_sum, test_fraction, split_seed, int(batch_seed))
        if predict and checkpoint_dir is None:
            raise UsageError("a prediction job needs each party's trained model: --checkpoints DIR (where that "
                             "party's training job wrote it)")
        _, self.secure_sum, self.test_fraction, self.split_seed, self.batch_seed = self.params.public()
        self.cfg = cfg
        self.label_column, self.seed, self.model = label_column, seed, model
        self.checkpoint_dir, self.predict, self.requester = checkpoint_dir, bool(predict), requester
        self.device, self.threads, self.progress_path = device, int(threads), progress_path
        self.scores_path = scores_path  # the requester's own output file (local, not public)

    @property
    def server_table(self) -> bool:
        """Training: the server holds the labels (its own table, aligned with the clients'); prediction: no table."""
        return not self.predict

    def switches(self) -> dict[str, object]:
        return switches_of(self.cfg.public() | self.params.as_dict(), self.seed is None)

    def public(self):
        cfg = {k: v for k, v in self.cfg.public().items() if k != "n_classes"}  # K: the server's business
        statistic, *knobs = self.params.public()  # the secure sum, the split and the mini-batch seed
        return [statistic, cfg, *knobs, ("predict", self.predict, self.requester)]

    def for_party(self, index: int, party) -> PBMVFLJobTask:
        task = copy.copy(self)
        task.model = party.model
        return task

    def release(self, meta):
        uses = 1 if self.predict else self.cfg.epochs
        rep = method_privacy(dataclasses.replace(self.cfg, epochs=uses), meta.n_parties)
        what = ("one release of each scored record's embeddings (prediction)" if self.predict else
                f"{uses} releases of each training record's embeddings (one per epoch)")
        return dataclasses.replace(rep, notes=f"{what}; {rep.notes}")

    # ------------------------------------------------------------------------------------------------ a party
    def _labels(self, table) -> tuple[np.ndarray, int]:
        """The server's labels (classes 0..K-1) and K; refused (its own input) naming no value."""
        cols = list(table.columns)
        if self.label_column is None and len(cols) != 1:
            raise InputRefused("the server's table must hold one label column besides the ids (or name it: "
                               f"--label-column); it has {len(cols)} columns",
                               "its label table has several columns and none is named")
        name = self.label_column if self.label_column is not None else cols[0]
        if name not in cols:
            raise InputRefused(f"the server's table has no label column {name!r} (its columns: {cols})",
                               "its label table lacks the label column")
        y = np.asarray(table.block[:, cols.index(name)], dtype=np.float64)
        if y.size and (np.any(y != np.round(y)) or y.min() < 0):
            raise InputRefused(f"the server's labels in column {name!r} must be classes 0, 1, ..., K-1 (integers)",
                               "its labels are not classes 0..K-1")
        y = y.astype(np.int64)
        K = self.cfg.n_classes if self.cfg.n_classes else max(2, int(y.max()) + 1 if y.size else 2)
        if y.size and int(y.max()) >= K:
            raise InputRefused(f"the server's labels go up to {int(y.max())}, the job has K = {K} classes",
                               "its labels exceed the job's classes")
        return y, K

    def _models(self, ctx, my_seed, n_features: int | None, K: int) -> dict:
        """This party's model, optimizer (and loss) from its own code; {} for the defaults."""
        if self.model is None:
            return {}
        import torch

        who = party_label(ctx.pid)
        factory = load_factory(self.model, who)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(model_seed(my_seed))
            built = (factory(self.cfg.embedding_size, K) if ctx.is_server
                     else factory(n_features, self.cfg.embedding_size))
        return _built(built, who, ctx.is_server)

    def _probe(self, ctx, module, n_features: int | None, K: int) -> None:
        """Refuse, before any share, a model whose output does not fit the job (no record goes through it)."""
        import torch

        from sqm.apps.pbm_vfl.trainer import _probe

        if ctx.is_server:
            width = self.cfg.embedding_size
        else:
            assert n_features is not None  # a client passes its column count
            width = n_features
        x = torch.zeros(1, width)
        try:
            shape = _probe(module, x)
        except Exception as e:
            raise refused(f"{party_label(ctx.pid)}'s model fails on a batch of shape {tuple(x.shape)}: "
                          f"{type(e).__name__}") from None
        want = (1, K) if ctx.is_server else (1, self.cfg.embedding_size)
        if shape != want:
            raise refused(f"{party_label(ctx.pid)}'s model maps a {tuple(x.shape)} batch to {shape}, the job "
                          f"needs {want}")

    def _checkpoint(self, ctx) -> dict | None:
        if not self.predict:
            return None
        import torch

        assert self.checkpoint_dir is not None  # a prediction job without one is refused when it is made
        path = checkpoint_path(self.checkpoint_dir, ctx.pid)
        try:
            state = torch.load(path, weights_only=True)
        except FileNotFoundError:
            raise UsageError(f"{party_label(ctx.pid)}: no checkpoint {path} (its training job writes it with "
                             f"--checkpoints DIR)") from None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or state.get("party") != ctx.pid:
            raise UsageError(f"{party_label(ctx.pid)}: {path} is not this party's PBM-VFL checkpoint")
        return state

    async def run(self, ctx, table, meta) -> dict:
        M, m = meta.n_parties, meta.n_records
        if self.predict and not 1 <= (self.requester or M) <= M:
            raise UsageError(f"--requester must be a client, 1..{M}, got {self.requester}")
        my_seed = None if self.seed is None else spawn_seeds(self.seed, M + 1)[ctx.pid]
        train, test = (np.arange(0), np.arange(m)) if self.predict else public_split(m, self.test_fraction,
                                                                                      self.split_seed)
        X = y = None
        saved = self._checkpoint(ctx)
        if ctx.is_server:  # K: from its labels, or from its trained model's checkpoint
            if self.predict:
                assert saved is not None  # _checkpoint loads it for a prediction
                y, K = None, int(saved["n_classes"])
            else:
                y, K = self._labels(table)
        else:
            X = np.asarray(table.block, dtype=np.float32)
            K = 2  # a client does not use it
        cfg = dataclasses.replace(self.cfg, n_classes=K, device=self.device or self.cfg.device)
        objs = self._models(ctx, my_seed, None if X is None else X.shape[1], K)
        state = None if saved is None else saved["module"]
        prog = PBMVFLProgram(
            cfg, M, len(train), len(test), my_seed, self.batch_seed,
            X_train=None if X is None else X[train], X_test=None if X is None else X[test],
            y_train=None if y is None else y[train], y_test=None if y is None or not len(test) else y[test],
            threads=self.threads, secure_sum=self.secure_sum, state=state, predict=self.predict,
            model=objs.get("module"), optimizer=objs.get("optimizer"), loss=objs.get("loss"),
            device=cfg.device, epochs=cfg.epochs, progress_path=self.progress_path if ctx.is_server else None)
        server, client = prog.parties(ctx)
        self._probe(ctx, (server or client).model, None if X is None else X.shape[1], K)
        out = await prog.run_as(ctx, server, client)
        if self.predict:
            return await self._deliver(ctx, out, table, meta)
        written = None
        if self.checkpoint_dir is not None:
            written = self._save(ctx, self.checkpoint_dir, out.pop("state"), cfg)
        else:
            out.pop("state")
        res = {"n_train": len(train), "n_test": len(test), "clipped": int(out["clipped"]),
               "bytes_sum": int(out["bytes"].get("sum", 0)), "checkpoint": written}
        if ctx.is_server:
            res.update(report=self.release(meta), history=out["history"], sum_digest=out["sum_digest"],
                       n_classes=K, stats=out["stats"])
        return res

    def _save(self, ctx, directory: str, state: dict, cfg: VFLConfig) -> str:
        """This party's own model and optimizer, to its own checkpoint file in ``directory`` (nothing of any
        other party's)."""
        import torch

        os.makedirs(directory, exist_ok=True)
        path = checkpoint_path(directory, ctx.pid)
        torch.save({"format": CHECKPOINT_FORMAT, "party": int(ctx.pid), "epochs": int(cfg.epochs),
                    "n_classes": cfg.n_classes, "embedding_size": int(cfg.embedding_size),
                    "module": to_cpu(state["module"]), "optimizer": to_cpu(state["optimizer"])}, path)
        return path

    async def _deliver(self, ctx, out: dict, table, meta) -> dict:
        """The server sends the probabilities to the requesting client, which keeps them with its ids."""
        req = self.requester if self.requester is not None else ctx.M - 1
        m, probs = meta.n_records, np.asarray(out["probabilities"], dtype=np.float32)
        got = await ctx.send_recv({req: probs} if ctx.is_server else {}, [0] if ctx.pid == req else [],
                                  wire.array(np.float32, (m, None), what="class probabilities"),
                                  "PBM-VFL: the predictions to the requester")
        res = {"scored": m, "requester": req, "clipped": int(out["clipped"])}
        if ctx.is_server:
            res["report"] = self.release(meta)
        if ctx.pid == req:
            res["classes"] = int(got[0].shape[1])
            if self.scores_path:
                write_scores(self.scores_path, table.ids, got[0])
                res["scores_file"] = self.scores_path
        return res


def write_scores(path: str, ids, probs: np.ndarray) -> None:
    """The requester's scores: one row per record (its id), the probability of each class (exact floats)."""
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id"] + [f"p{k}" for k in range(probs.shape[1])])
        w.writerows([i, *[repr(float(v)) for v in row]] for i, row in zip(ids, probs, strict=False))

