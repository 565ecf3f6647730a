"""A released model as weights on the owners' raw columns: what a scoring job evaluates.

A model file is the ``--json`` document of a training job (``sqm logreg|linreg|pca --job ... --json FILE``,
:mod:`sqm.cli.output`): its ``columns`` and ``released`` weights, in raw units (:mod:`sqm.framework.units`).  The
model is differentially private (it is the job's release), so every party of a scoring job may hold all of it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from sqm.framework.released_models import KINDS, linear_model, model_digest, model_numbers, projection_model
from sqm.errors import UsageError

__all__ = ["KINDS", "ReleasedModel", "load_model"]


@dataclass(frozen=True)
class ReleasedModel:
    """``weights`` (columns x outputs, raw units) and ``intercepts`` (outputs) of ``kind``: 'logistic' (one
    output, the log-odds; its probability is the logistic function of it), 'linear' (one output, the
    prediction) or 'projection' (one output per principal component).  Checked by
    :func:`sqm.framework.released_models.model_numbers`; :attr:`digest` is its canonical digest, the one a client's
    ledger records at the end of the training job that released it."""

    kind: str
    columns: tuple
    weights: np.ndarray
    intercepts: np.ndarray

    def __post_init__(self):
        m = model_numbers(self.kind, self.columns, self.weights, self.intercepts)
        object.__setattr__(self, "columns", tuple(m["columns"]))
        object.__setattr__(self, "weights", m["weights"])
        object.__setattr__(self, "intercepts", m["intercepts"])

    @property
    def digest(self) -> str:
        """SHA-256 of the model's canonical encoding (:func:`sqm.framework.released_models.model_digest`)."""
        return model_digest(self.to_wire())

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
    def from_wire(cls, obj: dict) -> ReleasedModel:
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
    try:
        if command in ("logreg", "linreg") and isinstance(rel.get("coef"), dict):
            b = rel.get("intercept", 0.0)
            if not isinstance(b, (int, float)) or isinstance(b, bool):
                raise UsageError("its intercept must be a finite number")
            m = linear_model("logistic" if command == "logreg" else "linear", rel["coef"], b)
            return ReleasedModel(m["kind"], tuple(m["columns"]), m["weights"], m["intercepts"])
        if command == "pca":
            comps = rel.get("projection_raw") or rel.get("components")
            if isinstance(comps, list) and comps and all(isinstance(c, dict) for c in comps):
                m = projection_model(comps)
                return ReleasedModel(m["kind"], tuple(m["columns"]), m["weights"], m["intercepts"])
    except (UsageError, TypeError, ValueError) as e:
        raise UsageError(f"model file {path}: {e}") from None
    raise UsageError(f"model file {path} is not the --json of sqm logreg, linreg or pca with weights by column")
