"""One reader of a user's table: a job's party file and ``--data FILE`` (CSV, or Parquet by its extension).

:func:`read_table` returns a :class:`PartyTable` (the numeric feature block, its column names and, if the
table has an id column, the ids as text).  Problems raise :class:`PartyFileError` in the user's words, naming
the file, the row and the column: a blank, ``NA``, ``NaN``, ``null`` or ``None`` cell is *missing* (how many,
and the first), an infinite value is *infinite*, a column holding text is named with its first text cell, a
missing id column lists the columns found and names ``--id-column``, a repeated id names its first repeat.
An Excel UTF-8 byte-order mark is ignored and a ``;``, tab or ``|`` separator is detected from the header
line.  ``str(error)`` is the full detail for the file's own operator; ``error.public`` is a short category
naming no path, column or value (the only part a job party sends its peers).
"""
from __future__ import annotations

import csv
import os
import re
import unicodedata
from dataclasses import dataclass, field

import numpy as np

from sqm.errors import BadDataError

# The largest magnitude a table may hold: squares (row norms, Gram entries) of values up to 1e150 stay far
# inside float64 (max about 1.8e308); larger values are refused naming the column, never silently zeroed.
MAX_ABS_VALUE = 1e150

MISSING = frozenset({"", "na", "n/a", "nan", "null", "none"})  # cells read as missing (case-insensitive)
SEPARATORS = ",;\t|"
PARQUET_EXTENSIONS = (".parquet", ".pq")
_INTEGER = re.compile(r"[+-]?[0-9]+")
MAX_INTEGER_ID_DIGITS = 1000  # a longer run of digits is an id of text (Python's int() refuses above 4300)


def canonical_id(raw) -> str:
    """The one form of a record id that every client compares: the cell as text, surrounding white space
    removed, Unicode NFC; an integer (optional sign, decimal digits only) becomes its value in decimal, so
    ``007``, ``+7``, `` 7`` and a Parquet integer 7 are one id, ``7``, and ``-0`` is ``0``.  Anything else is
    compared as exact text: ``7.0``, ``7e0`` and ``0x7`` are not ``7``, and ``A7`` is not ``a7``."""
    s = unicodedata.normalize("NFC", str(raw).strip())
    if len(s) <= MAX_INTEGER_ID_DIGITS and _INTEGER.fullmatch(s):
        return str(int(s))
    return s


def id_order_key(i: str) -> tuple:
    """The canonical order of canonical ids, the same total order at every client whatever else it holds:
    integers by value first, then every other id by its text."""
    if len(i) <= MAX_INTEGER_ID_DIGITS + 1 and _INTEGER.fullmatch(i):
        return (0, int(i), "")
    return (1, 0, i)


class PartyFileError(BadDataError, ValueError):
    """A table is unusable (exit BAD_DATA).  ``str(e)``: the full detail (path, row, column), for that file's own
    operator; ``e.public``: a short category naming no path, header or value, the only part sent to peers."""

    def __init__(self, detail: str, public: str):
        super().__init__(detail, None, public)


@dataclass
class PartyTable:
    file: str
    columns: list[str]
    block: np.ndarray  # records x columns, float64
    ids: list[str] = field(repr=False)  # canonical ids (:func:`canonical_id`); [] when the table has no id column
    ids_digest: bytes | None = field(default=None, repr=False)  # the record order's digest, set by the alignment
    held: np.ndarray | None = field(default=None, repr=False)  # membership hidden: the rows that are this party's
    # own records (its positions in the union; every other row is zeros), None: every row is

    @property
    def n_rows(self) -> int:
        return self.block.shape[0]

    @property
    def n_cols(self) -> int:
        return self.block.shape[1]

    def select(self, keep) -> PartyTable:
        """The same table with only the feature columns at indices ``keep``."""
        return PartyTable(self.file, [self.columns[j] for j in keep], self.block[:, list(keep)], self.ids)

    def iter_ids(self):
        return iter(self.ids)

    def restricted(self, keep) -> PartyTable:
        """The same table with only the records where ``keep`` (a boolean mask) is true, in the same order."""
        idx = np.flatnonzero(np.asarray(keep, dtype=bool))
        return PartyTable(self.file, self.columns, self.block[idx], [self.ids[i] for i in idx] if self.ids else [])

    def reordered(self, order) -> PartyTable:
        """The same table with its rows in ``order`` (indices)."""
        order = np.asarray(order, dtype=np.intp)
        ids = [self.ids[i] for i in order] if self.ids else []
        return PartyTable(self.file, self.columns, self.block[order], ids)


def _name(s: str) -> str:
    return s if len(s) <= 40 else s[:37] + "..."


def _sniff_separator(header_line: str) -> str:
    """The header line's separator among ``,;<tab>|`` (comma when the line has a single field)."""
    counts = {s: header_line.count(s) for s in SEPARATORS}
    if not any(counts.values()):
        return ","
    try:
        return csv.Sniffer().sniff(header_line, delimiters=SEPARATORS).delimiter
    except csv.Error:
        return max(SEPARATORS, key=lambda s: counts[s])


def _read_csv(path: str) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, rows of cells (stripped) and each row's line number; a BOM is dropped, the separator sniffed."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        text = fh.read()
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    sep = _sniff_separator(first)
    rows, lines = [], []
    for n, r in enumerate(csv.reader(text.splitlines(), delimiter=sep), start=1):
        if r and any(c.strip() for c in r):
            rows.append([c.strip() for c in r])
            lines.append(n)
    if not rows:
        raise PartyFileError(f"table {path} is empty (no header, no records)", "its party file is empty")
    return rows[0], rows[1:], lines[1:]


def _read_parquet(path: str) -> tuple[list[str], dict, int]:
    """Column names, {name: pyarrow column}, row count."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PartyFileError(f"table {path} is a Parquet file: reading it needs pyarrow "
                             f"(pip install pyarrow, or save the table as CSV)", "its file could not be read") from None
    t = pq.read_table(path)
    return list(t.column_names), {n: t.column(n) for n in t.column_names}, t.num_rows


def read_header(path, id_column: str = "id") -> list[str] | None:
    """A table's column names but the id column, read cheaply (a CSV file's first line, a Parquet file's
    schema), for checks that need no data; None where that cannot be read here (the party reading the whole file
    then says why)."""
    path = str(path)
    try:
        if path.lower().endswith(PARQUET_EXTENSIONS):
            import pyarrow.parquet as pq

            names = list(pq.read_schema(path).names)
        else:
            with open(path, newline="", encoding="utf-8-sig") as fh:
                first = next((ln.rstrip("\r\n") for ln in fh if ln.strip()), "")
            if not first:
                return None
            names = [c.strip() for c in next(csv.reader([first], delimiter=_sniff_separator(first)))]
    except (ImportError, OSError, UnicodeDecodeError, ValueError):
        return None
    return [c for c in names if c != id_column]


def _where(r: int, lines) -> str:
    return f"row {r + 1}" + (f" (line {lines[r]})" if lines is not None else "")


def read_table(path, id_column: str | None = "id", require_id: bool = True, what: str = "party file") -> PartyTable:
    """Load and check a table: the id column ``id_column`` (required with ``require_id``; optional otherwise:
    used when present) plus numeric feature columns.  Errors (:class:`PartyFileError`) name the file, row
    and column in the user's words; values must be finite numbers of magnitude at most :data:`MAX_ABS_VALUE`."""
    path = str(path)
    if not os.path.exists(path):
        raise PartyFileError(f"{what} {path} does not exist: put the table (an '{id_column}' column plus its "
                             f"feature columns) there, or fix the path", "its party file does not exist")
    if not os.path.isfile(path):
        raise PartyFileError(f"{what} {path} is not a file", "its party file is not a regular file")
    if path.lower().endswith(PARQUET_EXTENSIONS):
        header, pcols, n_rows = _read_parquet(path)
        return arrow_table(path, header, pcols, n_rows, id_column, require_id, what)
    header, body, lines = _read_csv(path)
    return _checked(path, header, body, len(body), lines, id_column, require_id, what, parquet=False)


def arrow_table(path: str, header: list[str], pcols: dict, n_rows: int, id_column: str | None = "id",
                require_id: bool = True, what: str = "party file") -> PartyTable:
    """A table read as pyarrow columns (``{name: column}`` in ``header`` order; a Parquet file's, or a
    database query's: :mod:`sqm.framework.sql_tables`) checked as :func:`read_table` checks it; ``path`` is how
    the messages name the table."""
    return _checked(path, header, pcols, n_rows, None, id_column, require_id, what, parquet=True)


def _checked(path: str, header: list[str], cells_by, n_rows: int, lines, id_column: str | None, require_id: bool,
             what: str, parquet: bool) -> PartyTable:
    """The checks of :func:`read_table` on a table already read: ``cells_by`` is a CSV's rows of cells, or
    (``parquet``) ``{name: pyarrow column}``."""
    pcols, body = (cells_by, []) if parquet else ({}, cells_by)
    if len(set(header)) != len(header):
        rep = next(h for h in header if header.count(h) > 1)
        raise PartyFileError(f"{what} {path} repeats the column name '{_name(rep)}' in its header",
                             "its file repeats a column name in its header")
    has_id = id_column is not None and id_column in header
    if require_id and not has_id:  # the first line may be a record: the public part never echoes it
        found = ", ".join(f"'{_name(h)}'" for h in header[:12]) + (" ..." if len(header) > 12 else "")
        raise PartyFileError(f"{what} {path} has no id column '{id_column}' in its header line; columns found: "
                             f"{found}.  Name the id column with --id-column NAME (job files: \"id_column\"), "
                             f"or add a header line naming the id column and the feature columns",
                             f"its file has no id column '{id_column}' in a header line")
    columns = [h for h in header if not (has_id and h == id_column)]
    if not columns:
        raise PartyFileError(f"{what} {path} holds no feature columns (only '{id_column}'): an empty party",
                             f"its file holds no feature columns (only '{id_column}'): an empty party")
    if n_rows == 0:
        raise PartyFileError(f"{what} {path} holds no records: an empty party",
                             "its file holds no records: an empty party")
    if parquet:
        if has_id:
            assert id_column is not None  # has_id
            _check_parquet_id_type(pcols[id_column].type, id_column, path, what)
        ids = [canonical_id(v) if v is not None else "" for v in pcols[id_column].to_pylist()] if has_id else []
        cells = {c: pcols[c] for c in columns}
    else:
        for r, row in enumerate(body):
            if len(row) != len(header):
                raise PartyFileError(f"{what} {path}, {_where(r, lines)}: {len(row)} fields, the header has "
                                     f"{len(header)}",
                                     "its file has a line whose field count differs from the header's")
        at = {h: j for j, h in enumerate(header)}
        ids = [canonical_id(row[at[id_column]]) for row in body] if has_id and id_column is not None else []
        cells = {c: [row[at[c]] for row in body] for c in columns}
    block = np.empty((n_rows, len(columns)), dtype=np.float64)
    missing = np.zeros((n_rows, len(columns)), dtype=bool)
    for t, c in enumerate(columns):
        block[:, t], missing[:, t] = (_parquet_column if parquet else _csv_column)(cells[c], c, path, what, lines)
    if missing.any():
        r, t = map(int, np.argwhere(missing)[0])
        cols = [columns[k] for k in np.flatnonzero(missing.any(axis=0))]
        raise PartyFileError(f"{what} {path} has {int(missing.sum())} missing value(s) (blank, NA, NaN or null) "
                             f"in {len(cols)} column(s) {[_name(c) for c in cols[:5]]}{' ...' if len(cols) > 5 else ''}"
                             f"; the first at {_where(r, lines)}, column '{_name(columns[t])}': impute them or "
                             f"drop those rows first", "its file has missing values")
    inf = np.isinf(block)
    if inf.any():
        r, t = map(int, np.argwhere(inf)[0])
        raise PartyFileError(f"{what} {path} has {int(inf.sum())} infinite value(s); the first at "
                             f"{_where(r, lines)}, column '{_name(columns[t])}': replace them with finite numbers",
                             "its file has infinite values")
    huge = np.abs(block) > MAX_ABS_VALUE
    if huge.any():
        cols = [columns[k] for k in np.flatnonzero(huge.any(axis=0))]
        raise PartyFileError(f"{what} {path} holds {int(huge.sum())} value(s) of magnitude above "
                             f"{MAX_ABS_VALUE:g} (columns {cols[:5]}{' ...' if len(cols) > 5 else ''}): their "
                             f"squares would overflow float64; rescale those columns first",
                             f"its file holds values of magnitude above {MAX_ABS_VALUE:g}")
    if has_id:
        assert id_column is not None  # has_id
        _check_ids(ids, id_column, path, what, lines)
    return PartyTable(path, columns, block, ids)


def _text_error(c: str, value, r: int, path: str, what: str, lines) -> PartyFileError:
    return PartyFileError(f"{what} {path}: column '{_name(c)}' holds text ('{_name(str(value))}' at "
                          f"{_where(r, lines)}): encode it as numbers or drop it", "its file has a column holding text")


def _csv_column(vals: list[str], c: str, path: str, what: str, lines) -> tuple[np.ndarray, np.ndarray]:
    miss = np.fromiter((v.lower() in MISSING for v in vals), dtype=bool, count=len(vals))
    out = np.zeros(len(vals), dtype=np.float64)
    present = [v for v, m in zip(vals, miss, strict=False) if not m]
    try:
        out[~miss] = np.asarray(present, dtype=np.float64)
    except ValueError:
        for r, v in enumerate(vals):
            if not miss[r]:
                try:
                    float(v)
                except ValueError:
                    raise _text_error(c, v, r, path, what, lines) from None
        raise
    return out, miss


def _parquet_column(col, c: str, path: str, what: str, lines) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow as pa

    typ = col.type
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)
            or pa.types.is_decimal(typ)):
        vals = col.to_pylist()
        r = next((i for i, v in enumerate(vals) if v is not None), 0)
        raise _text_error(c, vals[r], r, path, what, lines)
    vals = np.array([np.nan if v is None else float(v) for v in col.to_pylist()], dtype=np.float64)
    return np.nan_to_num(vals, nan=0.0, posinf=np.inf, neginf=-np.inf), np.isnan(vals)


def _check_parquet_id_type(typ, id_column: str, path: str, what: str) -> None:
    """A Parquet id column holds integers or text: a floating-point id (``7.0``) would not match the same id
    written as an integer elsewhere, and float64 loses digits above 2^53."""
    import pyarrow as pa

    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        raise PartyFileError(f"{what} {path}: its id column '{id_column}' holds floating-point numbers ({typ}); "
                             f"ids must be integers or text (store the column as int64 or string)",
                             f"its id column '{id_column}' holds floating-point numbers, not integers or text")


def _check_ids(ids: list[str], id_column: str, path: str, what: str, lines) -> None:
    """Refuse missing and repeated ids (after :func:`canonical_id`: ``007`` repeats ``7``).  No message names
    an id: they may be sensitive, and the operator finds the row by its number."""
    blank = [r for r, i in enumerate(ids) if i.lower() in MISSING]
    if blank:
        raise PartyFileError(f"{what} {path} has {len(blank)} missing id(s) in column '{id_column}'; the first at "
                             f"{_where(blank[0], lines)}", f"its file has an empty '{id_column}' value")
    seen: dict[str, int] = {}
    for r, i in enumerate(ids):
        if i in seen:
            raise PartyFileError(f"{what} {path} repeats an id in column '{id_column}' ({_where(seen[i], lines)} and "
                                 f"{_where(r, lines)} hold the same id, compared as the ids' canonical form: "
                                 f"white space trimmed, leading zeros of integers dropped): every record needs its "
                                 f"own id", "its file repeats ids")
        seen[i] = r


def _outward(v: float, up: bool) -> float:
    """``v`` rounded outward (up: toward +inf, else toward -inf) to 2 significant digits."""
    if v == 0 or not np.isfinite(v):
        return 0.0
    e = int(np.floor(np.log10(abs(v)))) - 1
    k = float((np.ceil if up else np.floor)(v / 10.0 ** e))
    return k * 10.0 ** e if e >= 0 else k / 10.0 ** -e  # a division by 10^|e|: -33 / 10 is -3.3 exactly


def propose_ranges(table: PartyTable) -> dict[str, list[float]]:
    """Per column, a range [lo, hi] holding the table's values, rounded outward to 2 significant digits (lo is
    0 for a column without negative values).  DATA-DERIVED, hence NOT private: for an operator to review and
    replace by public knowledge before declaring them in a job file."""
    out = {}
    for j, c in enumerate(table.columns):
        lo, hi = float(table.block[:, j].min()), float(table.block[:, j].max())
        lo = 0.0 if lo >= 0 else _outward(lo, up=False)
        hi = _outward(hi, up=True) if hi > 0 else 0.0
        if hi <= lo:
            hi = lo + 1.0
        out[c] = [lo, hi]
    return out
