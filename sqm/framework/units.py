"""Released models in the units of the data owners' raw columns.

A client with declared column ranges multiplies each such column by a public factor before the release
(:func:`sqm.framework.party.declared_scales`: the column clamped to its range, then scaled into its share of the
row norm bound); the server's job result carries the factors (``column_scales``, 1 for an undeclared column).  A
model fitted on the scaled columns is then the same model on the raw columns with each weight multiplied by its
column's factor: w . (s * x) = (w * s) . x, for every record inside the declared ranges (a value outside is
clamped by the client, and a user scoring new records clamps it the same way).  Nothing here is secret: the
factors follow from the job file and the public counts, and the model is the released one.
"""
from __future__ import annotations

import numpy as np

from sqm.errors import UsageError

RAW_UNITS_NOTE = ("weight: on the owners' raw columns (each declared range's scaling undone; clamp a new record's "
                  "values to the declared ranges first); weight (scaled): on the columns as the clients released them")


def feature_columns(columns, col_counts, label_index: int | None = None, label_column: str | None = None) -> list:
    """The released features' columns in the order of the model's weights: every client's columns in client
    order (the public schema), the label party's (``label_index``, 0-based client) without ``label_column``."""
    cols = list(columns)
    if label_index is None:
        return cols
    start = sum(col_counts[:label_index])
    own = cols[start:start + col_counts[label_index]]
    return cols[:start] + [c for c in own if c != label_column] + cols[start + len(own):]


def raw_linear_model(coef, columns, scales: dict, intercept: float = 0.0,
                     label_scale: float = 1.0) -> tuple[dict[str, float], float]:
    """({column: weight}, intercept) of a linear model ``coef . x_scaled + intercept`` (predicting a label
    scaled by ``label_scale``) on the raw columns: weight_c = coef_c * s_c / label_scale, intercept /
    label_scale."""
    coef = np.asarray(coef, dtype=np.float64).ravel()
    if len(coef) != len(columns):
        raise UsageError(f"{len(coef)} weights for {len(columns)} columns")
    ls = float(label_scale)
    return ({c: float(w) * float(scales.get(c, 1.0)) / ls for c, w in zip(columns, coef, strict=False)},
            float(intercept) / ls)


def raw_projection(components, columns, scales: dict) -> list[dict[str, float]]:
    """Per component, {column: weight} such that a raw record's projection on the released component is
    sum_c weight_c x_c (the component's loading times its column's factor)."""
    V = np.atleast_2d(np.asarray(components, dtype=np.float64))
    s = np.array([float(scales.get(c, 1.0)) for c in columns])
    return [{c: float(v) for c, v in zip(columns, row * s, strict=False)} for row in V]


def is_scaled(scales: dict | None) -> bool:
    """Whether any column was scaled (a declared range): the raw-unit model then differs from the released one."""
    return bool(scales and any(float(v) != 1.0 for v in scales.values()))
