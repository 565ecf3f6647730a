"""PBM-VFL's public configuration: the methods (PBM-VFL and its baselines), runners and hyperparameters
every party must agree on."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from sqm.apps.pbm_vfl.sum_exchange import SECURE_SUMS  # noqa: F401 (re-exported: the choices of --secure-sum)
from sqm.mechanism import pbm
from sqm.mechanism.validation import check_delta
from sqm.errors import UsageError

METHODS = ("pbm", "npq", "ldp", "ldp_eq")
METHOD_LABELS = {"pbm": "PBM-VFL", "npq": "NPQ", "ldp": "LDP (paper)", "ldp_eq": "LDP (equal eps)"}
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
            raise UsageError(f"unknown method {self.method!r}; choose one of {METHODS}")
        pbm.check_params(self.b, self.beta, self.C)
        for name in ("epochs", "batch_size", "embedding_size", "hidden", "eval_chunk"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise UsageError(f"{name.replace('_', '-')} must be an integer >= 1, got {v!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"learning rate must be > 0, got {self.lr!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise UsageError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.n_classes is not None and self.n_classes < 2:  # None: the server derives K (job mode)
            raise UsageError(f"need at least 2 classes, got {self.n_classes}")
        check_delta(self.delta)

    def public(self) -> dict:
        """What every party must agree on (the device is each party's own business)."""
        d = asdict(self)
        d.pop("device")
        return d

