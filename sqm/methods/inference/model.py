"""A released model as weights on the owners' raw columns: what a scoring job evaluates.

A model file is the ``--json`` document of a training job (``sqm logreg|linreg|pca --job ... --json FILE``,
:mod:`sqm.cli.output`): its ``columns`` and ``released`` weights, in raw units (:mod:`sqm.framework.units`).  The
model is differentially private (it is the job's release), so every party of a scoring job may hold all of it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from sqm.runtime.errors import UsageError

KINDS = ("logistic", "linear", "projection")  # a probability and a score; a prediction; k projections


@dataclass(frozen=True)
class ReleasedModel:
    """``weights`` (columns x outputs, raw units) and ``intercepts`` (outputs) of ``kind``: 'logistic' (one
    output, the log-odds; its probability is the logistic function of it), 'linear' (one output, the
    prediction) or 'projection' (one output per principal component)."""

    kind: str
    columns: tuple
    weights: np.ndarray
    intercepts: np.ndarray

    def __post_init__(self):
        W = np.asarray(self.weights, dtype=np.float64)
        b = np.asarray(self.intercepts, dtype=np.float64).reshape(-1)
        if self.kind not in KINDS:
            raise UsageError(f"a released model is one of {KINDS}, got {self.kind!r}")
        if W.ndim != 2 or W.shape[0] != len(self.columns) or W.shape[1] != b.size or b.size < 1:
            raise UsageError(f"a released model needs one weight per column and output: {W.shape} weights for "
                             f"{len(self.columns)} columns and {b.size} outputs")
        if len(set(self.columns)) != len(self.columns) or not all(isinstance(c, str) for c in self.columns):
            raise UsageError("a released model's columns must be distinct names")
        if not (np.all(np.isfinite(W)) and np.all(np.isfinite(b))):
            raise UsageError("a released model's weights must be finite")
        object.__setattr__(self, "weights", W)
        object.__setattr__(self, "intercepts", b)

    @property
    def outputs(self) -> list[str]:
        if self.kind == "projection":
            return [f"PC{k + 1}" for k in range(self.weights.shape[1])]
        return ["log_odds"] if self.kind == "logistic" else ["prediction"]

    def plain_scores(self, X: np.ndarray) -> np.ndarray:
        """The scores of records ``X`` (records x ``columns``, raw units) computed in the clear: the reference
        the secure path is tested against."""
        return np.asarray(X, dtype=np.float64) @ self.weights + self.intercepts

    def to_wire(self) -> dict:
        return {"kind": self.kind, "columns": list(self.columns), "weights": self.weights,
                "intercepts": self.intercepts}

    @classmethod
    def from_wire(cls, obj: dict) -> "ReleasedModel":
        return cls(obj["kind"], tuple(obj["columns"]), obj["weights"], obj["intercepts"])


def load_model(path) -> ReleasedModel:
    """The released model in a training job's ``--json`` file (logistic or linear regression: ``released.coef``
    by column and ``released.intercept``; PCA: ``released.projection_raw``, else ``released.components``)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"model file {path}: {e}") from None
    rel = doc.get("released") if isinstance(doc, dict) else None
    command = doc.get("command") if isinstance(doc, dict) else None
    if not isinstance(rel, dict):
        raise UsageError(f"model file {path} holds no released model (a training job's --json output is one)")
    if command in ("logreg", "linreg") and isinstance(rel.get("coef"), dict):
        cols = tuple(rel["coef"])
        b = rel.get("intercept", 0.0)
        if not isinstance(b, (int, float)) or not math.isfinite(b):
            raise UsageError(f"model file {path}: its intercept must be a finite number")
        return ReleasedModel("logistic" if command == "logreg" else "linear", cols,
                             np.array([[float(rel["coef"][c])] for c in cols]), np.array([float(b)]))
    if command == "pca":
        comps = rel.get("projection_raw") or rel.get("components")
        if isinstance(comps, list) and comps and all(isinstance(c, dict) for c in comps):
            cols = tuple(comps[0])
            if any(tuple(c) != cols for c in comps):
                raise UsageError(f"model file {path}: its components name different columns")
            return ReleasedModel("projection", cols, np.array([[float(c[k]) for c in comps] for k in cols]),
                                 np.zeros(len(comps)))
    raise UsageError(f"model file {path} is not the --json of sqm logreg, linreg or pca with weights by column")
