"""Launching a PBM-VFL job: every party's program built from the data, run on a runner (real party processes
or in process), the server's metrics and the measured costs collected in a :class:`TrainResult`."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from mpc import BACKENDS, runner
from sqm import pbm
from sqm.rng import spawn_seeds

from .config import FLOAT_BITS, SECURE_SUMS, VFLConfig
from .party import PBMVFLProgram, public_batch_seed
from .privacy import noise_sigma


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
    run = runner(backend)
    if backend == "mpyc":
        return run(programs, timeout=timeout)
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return run(programs, timeout=timeout)
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

