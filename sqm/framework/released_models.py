"""A released model as public numbers: what a training job's server sends every client at its end, what each
client's ledger records, and what a scoring job checks against it.

A model is ``{"kind", "columns", "weights", "intercepts"}``: its kind (:data:`KINDS`), the raw columns it
weighs (names), the weights (columns x outputs, float64) and the intercepts (outputs).  :func:`model_digest` is
SHA-256 of one canonical encoding (the kind and columns as JSON, then the weights and intercepts as
little-endian float64 bytes), so the same model always has the same digest, whoever computes it: the server
from its result (the training task's ``released_model``), a client from the frame it received, ``sqm score``
from the training job's ``--json`` (:func:`sqm.apps.inference.model.load_model`).
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from sqm.errors import UsageError

KINDS = ("logistic", "linear", "projection")  # a probability and a score; a prediction; k projections
MAX_COLUMNS, MAX_OUTPUTS = 100_000, 1000


def model_numbers(kind: str, columns, weights, intercepts) -> dict:
    """The model as its wire form (float64 arrays), checked: a UsageError names what is wrong."""
    W = np.asarray(weights, dtype=np.float64)
    b = np.asarray(intercepts, dtype=np.float64).reshape(-1)
    columns = list(columns)
    if kind not in KINDS:
        raise UsageError(f"a released model is one of {KINDS}, got {kind!r}")
    if W.ndim != 2 or W.shape[0] != len(columns) or W.shape[1] != b.size or b.size < 1:
        raise UsageError(f"a released model needs one weight per column and output: {W.shape} weights for "
                         f"{len(columns)} columns and {b.size} outputs")
    if len(columns) > MAX_COLUMNS or b.size > MAX_OUTPUTS:
        raise UsageError(f"a released model has at most {MAX_COLUMNS} columns and {MAX_OUTPUTS} outputs")
    if len(set(columns)) != len(columns) or not all(isinstance(c, str) and len(c) <= 1000 for c in columns):
        raise UsageError("a released model's columns must be distinct names")
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(b))):
        raise UsageError("a released model's weights must be finite")
    return {"kind": kind, "columns": columns, "weights": W, "intercepts": b}


def frame_ok(m) -> bool:
    """The form of a model frame (checked on arrival, before :func:`model_numbers` checks its content)."""
    return (isinstance(m, dict) and set(m) == {"kind", "columns", "weights", "intercepts"}
            and isinstance(m["kind"], str) and isinstance(m["columns"], list)
            and isinstance(m["weights"], np.ndarray) and isinstance(m["intercepts"], np.ndarray)
            and m["weights"].ndim == 2 and m["intercepts"].ndim == 1
            and len(m["columns"]) <= MAX_COLUMNS and m["weights"].shape[1] <= MAX_OUTPUTS)


def from_frame(m: dict) -> dict:
    """A received model frame's numbers, checked (UsageError naming what is wrong)."""
    return model_numbers(m["kind"], m["columns"], m["weights"], m["intercepts"])


def model_digest(m: dict) -> str:
    """SHA-256 (hex) of the model's canonical encoding (see the module docstring)."""
    head = json.dumps({"kind": m["kind"], "columns": list(m["columns"]),
                       "shape": list(np.shape(m["weights"]))}, sort_keys=True, separators=(",", ":"))
    h = hashlib.sha256(head.encode("utf-8") + b"\0")
    h.update(np.ascontiguousarray(m["weights"], dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(m["intercepts"], dtype="<f8").tobytes())
    return h.hexdigest()


def to_json(m: dict) -> str:
    """The model's numbers as JSON (exact: Python writes every float64 so that it reads back the same)."""
    return json.dumps({"kind": m["kind"], "columns": list(m["columns"]),
                       "weights": np.asarray(m["weights"]).tolist(),
                       "intercepts": np.asarray(m["intercepts"]).tolist()},
                      allow_nan=False)


def from_json(text: str) -> dict:
    d = json.loads(text)
    return model_numbers(d["kind"], d["columns"], np.array(d["weights"], dtype=np.float64).reshape(
        len(d["columns"]), len(d["intercepts"])), d["intercepts"])


def linear_model(kind: str, weights: dict, intercept: float) -> dict:
    """A one-output model (``kind`` 'logistic' or 'linear') from {column: weight} and its intercept."""
    if not math.isfinite(float(intercept)):
        raise UsageError("a released model's intercept must be finite")
    cols = list(weights)
    return model_numbers(kind, cols, np.array([[float(weights[c])] for c in cols]), np.array([float(intercept)]))


def projection_model(components: list[dict]) -> dict:
    """A projection (PCA) from one {column: weight} per component (all on the same columns)."""
    if not components or not all(isinstance(c, dict) for c in components):
        raise UsageError("a projection needs one {column: weight} per component")
    cols = list(components[0])
    if any(list(c) != cols for c in components):
        raise UsageError("a projection's components name different columns")
    return model_numbers("projection", cols, np.array([[float(c[k]) for c in components] for k in cols]),
                         np.zeros(len(components)))
