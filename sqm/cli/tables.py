"""The face's text tables: :func:`render_table` prints rows of dicts (a ``"method"`` column first, then metric
columns) as an aligned text table, :func:`fmt_value` writes one cell, and the lines a command prints under an
epsilon column (:func:`relation_line`, :func:`conversion_line`).  The reports themselves, and their JSON
form, are the mechanism's (:mod:`sqm.mechanism.report`)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from sqm.mechanism.report import CONVERSIONS, ZERO_OUT, relation_phrase


def relation_line(reports: Iterable) -> str:
    """The line a command prints under a table with an epsilon column: the neighbouring relation of each row's
    epsilon in words (:func:`sqm.mechanism.report.relation_phrase`).  ``reports``: the rows' privacy reports
    (:class:`sqm.mechanism.report.PrivacyReport` or their dicts), or ``(label, relation)`` pairs.  One relation for
    every finite epsilon is said once; otherwise each relation names its rows; rows without privacy (relation
    "none", epsilon inf) are named apart."""
    groups: dict[str, list[str]] = {}
    for r in reports:
        if isinstance(r, tuple):
            label, relation = r
        else:
            get = r.get if isinstance(r, dict) else lambda k, d=None, r=r: getattr(r, k, d)
            label, relation = get("method", "SQM"), get("neighbouring", ZERO_OUT)
        groups.setdefault(relation, []).append(str(label))
    private = [k for k in groups if k != "none"]
    if len(private) == 1:
        parts = [f"every epsilon above: {relation_phrase(private[0])}"]
    else:
        parts = [f"epsilon of {', '.join(groups[k])}: {relation_phrase(k)}" for k in private]
    if "none" in groups:
        parts.append(f"inf ({', '.join(groups['none'])}): {relation_phrase('none')}")
    return "; ".join(parts)


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
