"""The face's text tables: :func:`render_table` prints rows of dicts (a ``"method"`` column first, then metric
columns) as an aligned text table, :func:`fmt_value` writes one cell, and the lines a command prints under an
epsilon column (:data:`NEIGHBOURING_LINE`, :func:`conversion_line`).  The reports themselves, and their JSON
form, are the mechanism's (:mod:`sqm.mechanism.report`)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from sqm.mechanism.report import CONVERSIONS

NEIGHBOURING_LINE = ("every epsilon above is under zero-out neighbours: one record's values replaced by zeros, the "
                     "record count public (sqm.mechanism.report.NEIGHBOURING)")


def conversion_line(conversion: str) -> str | None:
    """The line a command prints under its table for an SQM report's ``conversion`` (None for "")."""
    return f"SQM's server-observed epsilon: {CONVERSIONS[conversion]} (conversion {conversion})" if conversion else None


def fmt_value(v: Any, spec: str | Callable[[Any], str] | None = None) -> str:
    """One table cell: None as "-", non-finite floats as "inf" / "-inf" / "nan", floats with ``spec``
    (default ".4g"), anything else with str (or ``spec`` when it is a callable or applies)."""
    if callable(spec):
        return spec(v)
    if v is None:
        return "-"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return format(v, spec or ".4g")
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return format(int(v), spec or "d")
    return format(str(v), spec) if spec else str(v)


def render_table(rows: Iterable[dict], columns: Iterable | None = None) -> str:
    """Rows of dicts as an aligned text table.

    ``columns``: keys, ``(key, header)`` or ``(key, header, fmt)`` (``fmt`` a format spec such as ".4f" or
    a callable returning the cell text; see :func:`fmt_value`); default: every key in order of first
    appearance.  A ``"method"`` column comes first whenever a row has one, whether or not it is listed; the
    first column is left-aligned, the others right-aligned.  A missing value prints as "-"."""
    rows = list(rows)
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    cols = []
    for c in columns:
        key, header, spec = (c, c, None) if isinstance(c, str) else (tuple(c) + (None, None))[:3]
        cols.append((key, header if header is not None else key, spec))
    if any("method" in r for r in rows) and all(k != "method" for k, _, _ in cols):
        cols.insert(0, ("method", "method", None))
    cells = [[str(h) for _, h, _ in cols]] + [[fmt_value(r.get(k), s) for k, _, s in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    left = [i == 0 for i in range(len(cols))]

    def line(items):
        cells = zip(items, widths, left, strict=False)
        return "  ".join(x.ljust(w) if lft else x.rjust(w) for x, w, lft in cells).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(c) for c in cells[1:]]
    return "\n".join(out)
