"""Vertically partitioned data: each party holds a block of columns of the same records.

Public bounds on the records are :class:`ColumnBounds`: disjoint groups of columns, each held by one party,
each with its own L2 bound (||x_G||_2 <= b_G for every record).  The default is one group per party (its
sub-row, :func:`party_norm_bounds`); a label column is its own group (|y| <= c_y), so it is never clipped
with its party's features.  The same groups serve clipping (each party clips its own groups), the field
size (|x_j| <= b_G for j in G) and the sensitivity bounds (:mod:`sqm.mechanism.sensitivity`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .validation import check_finite, check_positive
from sqm.errors import UsageError


def party_norm_bounds(row_norm_bound: float, col_counts, party_bounds=None) -> np.ndarray:
    """Per-party sub-row bounds c_j with sum c_j^2 = c^2 (default: c_j proportional to sqrt(columns))."""
    check_positive(row_norm_bound, "row_norm_bound")
    counts = np.asarray(col_counts, dtype=np.float64)
    if party_bounds is None:
        return row_norm_bound * np.sqrt(counts / counts.sum())
    b = np.asarray(party_bounds, dtype=np.float64)
    if b.shape != counts.shape or np.any(~np.isfinite(b)) or np.any(b <= 0):
        raise UsageError(f"party_bounds must be {counts.size} positive numbers, got {party_bounds!r}")
    if np.sum(b ** 2) > row_norm_bound ** 2 * (1 + 1e-12):
        raise UsageError(f"party bounds {b.tolist()} have sum of squares {np.sum(b ** 2):.6g} > c^2 = "
                         f"{row_norm_bound ** 2:.6g}: whole rows would not satisfy ||x|| <= c")
    return b


# rows whose largest magnitude exceeds this have their norms computed on the row scaled by that magnitude:
# squaring them directly could overflow float64 (1e300 squared is inf) and zero the row instead of clipping it
_SAFE_ABS = 1e150


def row_norms(block: np.ndarray) -> np.ndarray:
    """L2 norm of every row of ``block``, without overflow or underflow (exactly the plain formula,
    sqrt(sum of squares), on rows whose magnitudes are all in [1e-150, 1e150] or zero)."""
    block = np.asarray(block, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", block, block))
    big = np.abs(block).max(axis=1, initial=0.0)
    odd = (big > _SAFE_ABS) | ((big > 0) & (big < 1 / _SAFE_ABS))
    if np.any(odd):
        s = big[odd]
        u = block[odd] / s[:, None]  # entries in [-1, 1]: their squares neither overflow nor all underflow
        with np.errstate(over="ignore"):
            norms[odd] = s * np.sqrt(np.einsum("ij,ij->i", u, u))  # inf only above ~1.8e308: still "over"
    return norms


def clip_rows(block: np.ndarray, bound: float) -> tuple[np.ndarray, int]:
    """Scale down every row of ``block`` whose L2 norm exceeds ``bound``; return (clipped, count).

    Values must be finite (ValueError naming the column otherwise).  Any finite magnitude is clipped
    correctly: a row holding 1e300 becomes that row's direction times ``bound`` (its norm is computed on the
    row scaled by its largest magnitude, see :func:`row_norms`), never a row of zeros."""
    block = np.asarray(block, dtype=np.float64)
    bad = ~np.isfinite(block)
    if bad.any():
        cols = np.flatnonzero(bad.any(axis=0)).tolist()
        raise UsageError(f"cannot clip rows holding NaN or infinite values (column(s) {cols[:5]} of this block)")
    norms = row_norms(block)
    over = norms > bound
    if not np.any(over):
        return block, 0
    out = block.copy()
    rows = out[over]
    big = np.abs(rows).max(axis=1)
    huge = big > _SAFE_ABS
    rows[~huge] *= (bound / norms[over][~huge])[:, None]
    if np.any(huge):  # scale to [-1, 1] first, then by bound / (norm of the scaled row): no inf on the way
        u = rows[huge] / big[huge][:, None]
        rows[huge] = u * (bound / np.sqrt(np.einsum("ij,ij->i", u, u)))[:, None]
    # guard against float rounding leaving a norm a hair (an ulp or a few) above the bound: each step
    # lowers every nonzero entry of those rows by one ulp or so (1 - 2^-53), a handful of steps at most
    still = row_norms(rows) > bound
    for _ in range(64):
        if not np.any(still):
            break
        rows[still] *= np.nextafter(1.0, 0.0)
        still = row_norms(rows) > bound
    out[over] = rows
    return out, int(over.sum())


def block_starts(col_counts) -> list[int]:
    """Where each party's block of columns starts in the joint row, and the total last: [0, n_1, n_1 + n_2, ...]."""
    return np.concatenate([[0], np.cumsum([int(c) for c in col_counts])]).astype(int).tolist()


@dataclass(frozen=True)
class ColumnBounds:
    """Public per-column bounds: the columns ``groups[g]`` (global indices) satisfy ||x_G||_2 <= ``bounds[g]``.

    Groups are disjoint, cover every column, and each lies within one party's block (a party clips only its
    own columns).  A group of one column is the bound |x_j| <= b_j."""

    groups: tuple[tuple[int, ...], ...]
    bounds: tuple[float, ...]

    def __post_init__(self):
        groups = tuple(tuple(int(j) for j in g) for g in self.groups)
        bounds = tuple(float(b) for b in self.bounds)
        if len(groups) != len(bounds) or not groups:
            raise UsageError(f"need one bound per column group: {len(groups)} groups, {len(bounds)} bounds")
        cols = sorted(j for g in groups for j in g)
        if any(not g for g in groups) or cols != list(range(len(cols))):
            raise UsageError(f"column groups must be non-empty, disjoint and cover columns 0..n-1, got {groups}")
        bad = [b for b in bounds if not (np.isfinite(b) and b > 0)]
        if bad:
            raise UsageError(f"column bounds must be finite and > 0, got {bad[0]!r}")
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "bounds", bounds)

    @classmethod
    def per_column(cls, bounds) -> ColumnBounds:
        """|x_j| <= bounds[j] for every column j (each column its own group)."""
        b = np.asarray(bounds, dtype=np.float64).reshape(-1)
        return cls(tuple((j,) for j in range(b.size)), tuple(b.tolist()))

    @classmethod
    def blocks(cls, col_counts, bounds) -> ColumnBounds:
        """One group per party, its whole block of columns, with bound ``bounds[p]`` (||x_p||_2 <= bounds[p])."""
        starts = block_starts(col_counts)
        return cls(tuple(tuple(range(starts[p], starts[p + 1])) for p in range(len(starts) - 1)),
                   tuple(float(b) for b in bounds))

    @classmethod
    def parties(cls, col_counts, row_norm_bound: float = 1.0, party_bounds=None, separate=None) -> ColumnBounds:
        """One group per party (its sub-row, bounds from :func:`party_norm_bounds` over the columns left in it),
        except the columns in ``separate`` ({global column: bound}), each its own group: e.g. a label column."""
        counts = [int(c) for c in col_counts]
        separate = {int(j): float(b) for j, b in (separate or {}).items()}
        starts = block_starts(counts)
        rest = [[j for j in range(starts[p], starts[p + 1]) if j not in separate] for p in range(len(counts))]
        held = [p for p, r in enumerate(rest) if r]
        pb = None if party_bounds is None else [party_bounds[p] for p in held]
        b = party_norm_bounds(row_norm_bound, [len(rest[p]) for p in held], pb).tolist() if held else []
        groups = [tuple(rest[p]) for p in held] + [(j,) for j in sorted(separate)]
        return cls(tuple(groups), tuple(b + [separate[j] for j in sorted(separate)]))

    @property
    def n_cols(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def sizes(self) -> list[int]:
        return [len(g) for g in self.groups]

    def column_bounds(self) -> np.ndarray:
        """b_j: the bound of the group holding column j (|x_j| <= ||x_G|| <= b_G)."""
        out = np.empty(self.n_cols)
        for g, b in zip(self.groups, self.bounds, strict=False):
            out[list(g)] = b
        return out

    def local(self, col_counts, party: int) -> list[tuple[np.ndarray, float]]:
        """Party ``party``'s (0-based) groups as (its local column indices, bound); checks the layout."""
        counts = [int(c) for c in col_counts]
        starts = block_starts(counts)
        if starts[-1] != self.n_cols:
            raise UsageError(f"column bounds cover {self.n_cols} columns but the parties hold {starts[-1]}")
        owner = np.repeat(np.arange(len(counts)), counts)
        out = []
        for g, b in zip(self.groups, self.bounds, strict=False):
            owners = sorted(set(owner[list(g)].tolist()))
            if len(owners) != 1:
                raise UsageError(f"column group {list(g)} spans parties {[o + 1 for o in owners]}: each group "
                                 f"must lie in one party's block (a party clips only its own columns)")
            if owners[0] == party:
                out.append((np.asarray(g, dtype=np.int64) - starts[party], b))
        return out

    def own(self, col_counts, party: int) -> OwnGroups:
        """Party ``party``'s (0-based) view: its groups' local columns and bounds, to clip and round by."""
        return OwnGroups(self, tuple(int(c) for c in col_counts), int(party))

    def clip(self, block: np.ndarray, col_counts, party: int) -> tuple[np.ndarray, int]:
        """Party ``party``'s block with each of its groups clipped to its bound, and how many rows changed."""
        block = np.asarray(block, dtype=np.float64)
        if block.ndim != 2 or block.shape[1] != int(col_counts[party]):
            raise UsageError(f"party {party + 1}'s block has shape {block.shape}, the column bounds expect "
                             f"{int(col_counts[party])} columns")
        out, changed = block, np.zeros(block.shape[0], dtype=bool)
        for cols, b in self.local(col_counts, party):
            sub, k = clip_rows(block[:, cols], b)
            if k:
                out = out.copy() if out is block else out
                changed |= np.any(sub != block[:, cols], axis=1)
                out[:, cols] = sub
        return out, int(changed.sum())


@dataclass(frozen=True)
class OwnGroups:
    """One client's column groups (picklable, for its shard workers too): ``clip(block)`` clips each group to
    its bound (:meth:`ColumnBounds.clip`); ``groups`` are the groups' local column indices, which the client's
    rounding keeps apart (:func:`sqm.mechanism.quantize.dependent_round`), as the sensitivity bounds them."""

    bounds: ColumnBounds
    col_counts: tuple[int, ...]
    party: int

    @property
    def groups(self) -> list[np.ndarray]:
        return [cols for cols, _ in self.bounds.local(self.col_counts, self.party)]

    def clip(self, block: np.ndarray) -> tuple[np.ndarray, int]:
        return self.bounds.clip(block, self.col_counts, self.party)


@dataclass
class VerticalData:
    """Columns of the same ``m`` records split among parties (party j holds ``blocks[j]``)."""

    blocks: list[np.ndarray]
    names: list[str] = field(default_factory=list)

    def __post_init__(self):
        if len(self.blocks) < 1:
            raise UsageError("vertical data needs at least one party")
        blocks = []
        for j, b in enumerate(self.blocks):
            b = np.asarray(b, dtype=np.float64)
            if b.ndim != 2:
                raise UsageError(f"party {j + 1}'s block must be 2-D (records x columns), got shape {b.shape}")
            if b.shape[1] == 0:
                raise UsageError(f"party {j + 1} holds no columns")
            check_finite(b, f"party {j + 1}'s data")
            blocks.append(b)
        rows = [b.shape[0] for b in blocks]
        if len(set(rows)) != 1:
            raise UsageError(f"parties hold different record counts: {rows}")
        if rows[0] == 0:
            raise UsageError("the data has no records")
        self.blocks = blocks
        if not self.names:
            self.names = [f"client{j + 1}" for j in range(len(blocks))]

    @classmethod
    def split(cls, X, n_parties: int) -> VerticalData:
        """Split the columns of ``X`` into ``n_parties`` contiguous, near-equal blocks."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise UsageError(f"data must be 2-D, got shape {X.shape}")
        if not 1 <= n_parties <= X.shape[1]:
            raise UsageError(f"cannot split {X.shape[1]} columns among {n_parties} parties")
        return cls([np.ascontiguousarray(b) for b in np.array_split(X, n_parties, axis=1)])

    @property
    def n_parties(self) -> int:
        return len(self.blocks)

    @property
    def n_records(self) -> int:
        return self.blocks[0].shape[0]

    @property
    def col_counts(self) -> list[int]:
        return [b.shape[1] for b in self.blocks]

    @property
    def n_cols(self) -> int:
        return sum(self.col_counts)

    def owner(self) -> np.ndarray:
        """Index of the party holding each column."""
        return np.repeat(np.arange(self.n_parties), self.col_counts)

    def to_matrix(self) -> np.ndarray:
        return np.hstack(self.blocks)

    def clip(self, row_norm_bound: float = 1.0, party_bounds=None, column_bounds: ColumnBounds | None = None
             ) -> tuple[VerticalData, list[int]]:
        """Each party clips its own column groups (default: its sub-row, so whole rows satisfy ||x||_2 <= c);
        returns the data and the number of rows clipped per party."""
        cb = column_bounds or ColumnBounds.parties(self.col_counts, row_norm_bound, party_bounds)
        out = [cb.clip(b, self.col_counts, p) for p, b in enumerate(self.blocks)]
        return VerticalData([b for b, _ in out], list(self.names)), [k for _, k in out]
