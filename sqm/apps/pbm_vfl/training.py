"""Launching a PBM-VFL job: every party's program built from the data, run on a runner (real party processes
or in process), the server's metrics and the measured costs collected in a :class:`TrainResult`."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from sqm.apps.pbm_vfl.config import FLOAT_BITS, SECURE_SUMS, VFLConfig
from sqm.apps.pbm_vfl.seeds import party_seeds
from sqm.apps.pbm_vfl.privacy import noise_sigma
from sqm.mpc import BACKENDS
from sqm.errors import UsageError
from sqm.apps.pbm_vfl.sum_exchange import two_clients_problem


def model_bits(records: int, M: int, P: int, method: str, b: int) -> float:
    """The paper's cost model: per record and party, P values of log2(b M) bits up (PBM; F bits for NPQ/LDP)
    and P floats of F = 32 bits down: T B M P (log2(b M) + F) over training."""
    up = math.log2(b * M) if method == "pbm" else FLOAT_BITS
    return float(records) * M * P * (up + FLOAT_BITS)



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
    states: list = field(default_factory=list, repr=False)  # each party's trained model and optimizer (server first)
    trainer: object = field(default=None, repr=False)  # the .trainer.PBMVFL that trained them

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(replace(self, states=[], trainer=None)).items()
                if k not in ("states", "trainer")}


def _check_blocks(blocks_train, blocks_test, y_train, y_test):
    if len(blocks_train) != len(blocks_test) or not blocks_train:
        raise UsageError("need the same (>= 1) number of train and test column blocks")
    for j, (a, t) in enumerate(zip(blocks_train, blocks_test, strict=False)):
        a, t = np.asarray(a), np.asarray(t)
        if a.ndim != 2 or t.ndim != 2 or a.shape[1] != t.shape[1]:
            raise UsageError(f"client {j + 1}: train/test blocks must be 2-D with the same columns")
        if a.shape[0] != len(y_train) or t.shape[0] != len(y_test):
            raise UsageError(f"client {j + 1} holds {a.shape[0]}/{t.shape[0]} records, the labels "
                             f"{len(y_train)}/{len(y_test)}: records are misaligned")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(t))):
            raise UsageError(f"client {j + 1}'s data contains NaN or infinite values")


def mlp_trainer(blocks_train, blocks_test, y_train, y_test, cfg: VFLConfig, backend: str = "mpyc", seed=None,
                threads: int = 1, secure_sum: str = "bgw", batch_seed: int | None = None,
                timeout: float = 3600.0):
    """A :class:`.trainer.PBMVFL` with ``sqm pbm-vfl``'s models: each client a 3-layer MLP, the server a linear
    layer with cross-entropy, all initialised from the party's own seed and optimized by ``cfg.optimizer``."""
    from sqm.apps.pbm_vfl.modules import default_client_model, default_fusion_model, default_optimizer
    from sqm.apps.pbm_vfl.trainer import PBMVFL, Client, Server

    if secure_sum not in SECURE_SUMS:
        raise UsageError(f"secure sum must be one of {SECURE_SUMS}, got {secure_sum!r}")
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    _check_blocks(blocks_train, blocks_test, y_train, y_test)
    M = len(blocks_train)
    problem = two_clients_problem(M) if cfg.method == "pbm" else None
    if problem:  # refused before any party starts (the party program refuses too)
        raise UsageError(problem)
    seeds = party_seeds(seed, M + 1)  # each party: its own only

    def client(j):
        model = default_client_model(cfg, np.shape(blocks_train[j])[1], seeds[j + 1])
        return Client(model, np.asarray(blocks_train[j], np.float32), np.asarray(blocks_test[j], np.float32),
                      optimizer=default_optimizer(cfg, model.parameters()), device=cfg.device)

    fusion = default_fusion_model(cfg, seeds[0])
    server = Server(fusion, np.asarray(y_train, np.int64), np.asarray(y_test, np.int64),
                    optimizer=default_optimizer(cfg, fusion.parameters()), device=cfg.device)
    return PBMVFL([client(j) for j in range(M)], server, b=cfg.b, beta=cfg.beta, C=cfg.C, epochs=cfg.epochs,
                  batch_size=cfg.batch_size, delta=cfg.delta, method=cfg.method, secure_sum=secure_sum,
                  backend=backend, seed=seed, batch_seed=batch_seed, threads=threads, timeout=timeout,
                  eval_chunk=cfg.eval_chunk)


def train_vfl(blocks_train, blocks_test, y_train, y_test, cfg: VFLConfig, backend: str = "mpyc", seed=None,
              batch_seeds=None, threads: int = 1,
              secure_sum: str = "bgw", batch_seed: int | None = None, timeout: float = 3600.0) -> TrainResult:
    """Train PBM-VFL (or a baseline) with ``sqm pbm-vfl``'s models (:func:`mlp_trainer`) on vertically split
    data; return the test metrics by epoch and costs.

    ``backend``: 'mpyc' (real party processes) or 'plain' (the same party programs in this process, a
    simulation).  ``seed``: None (default) gives every party fresh OS entropy.  A seed (an int, a sequence of
    ints or a SeedSequence) is for reproducible EXPERIMENTS: each party is handed only its own seed
    (:func:`sqm.mechanism.rng.spawn_seeds`, entry 0 the server's, j client j's), from which it draws its model
    initialisation and its secret noise (AES-CTR); whoever knows the root seed can regenerate them all.
    Masked-sum keys never come from a seed (fresh X25519 pairs).  ``batch_seed``: the PUBLIC seed of the
    mini-batch order (default :func:`public_batch_seed` of ``seed``: fresh, or a one-way function of the seed).
    ``batch_seeds``: override each party's batch seed (server first) -- for tests of
    parties that disagree on the mini-batches.  ``threads``: torch CPU threads per party (1 by default: the
    models are small, and one thread makes the in-process run bit-identical to the party processes').
    ``secure_sum``: 'bgw' (Shamir shares through ``ctx.evaluate``) or 'masked' (the paper's Protocol 0,
    pairwise masks modulo 2^k with 2^k > b M).  ``timeout``: seconds before the whole job is abandoned.
    The result's ``history`` holds the test metrics of each epoch (``sqm pbm-vfl`` prints them).
    """
    vfl = mlp_trainer(blocks_train, blocks_test, y_train, y_test, cfg, backend, seed, threads, secure_sum,
                      batch_seed, timeout)
    M = len(vfl.clients)
    if batch_seeds is not None:
        if len(batch_seeds) != M + 1:
            raise UsageError(f"batch_seeds needs {M + 1} entries (server first)")
        vfl.party_batch_seeds = list(batch_seeds)
    vfl.fit()
    res = vfl.last_run.records
    out = res[0]["result"]
    if backend == "mpyc":
        bytes_sent = int(sum(r.get("bytes_sent", 0) for r in res))
        detail: dict[str, Any] = {k: int(sum(r["result"]["bytes"][k] for r in res)) for k in ("sum", "grad", "control")}
        detail["per_party"] = [int(r.get("bytes_sent", 0)) for r in res]
    else:
        bytes_sent, detail = None, {}
    hist = out["history"]
    last = hist[-1] if hist else {}
    st = out["stats"]
    return TrainResult(method=cfg.method, backend=backend, history=hist,
                       accuracy=float(last.get("test_accuracy", float("nan"))), auprc=last.get("test_auprc"),
                       seconds=vfl.last_run.seconds, iterations=st["iterations"], records=st["records"],
                       sum_seconds=st["sum_seconds"], iter_seconds=st["iter_seconds"],
                       bits_model=model_bits(st["records"], M, cfg.embedding_size, cfg.method, cfg.b),
                       bytes_sent=bytes_sent, bytes_detail=detail,
                       clipped=int(sum(r["result"]["clipped"] for r in res[1:])),
                       sum_digest=out.get("sum_digest"), sigma=noise_sigma(cfg, M),
                       states=[r["result"]["state"] for r in res], trainer=vfl)
