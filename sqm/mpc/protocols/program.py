"""What a job computes: the sum over records of an integer polynomial map.

A :class:`SumProgram` writes each output as an integer combination of *moments*: the sums over the
records of monomials in the (integer) columns,

    y[t] = sum_l  coef[l] * M[mono[l]],   M[(a, b, ...)] = sum_i x[i, a] * x[i, b] * ...,

plus, per client, an integer addend vector.  Every backend computes exactly these integers: the plain
backend in one process, the MPyC backend on secret shares (linear moments locally, degree-two moments by
the inner-product trick with one resharing per output, higher degrees by elementwise products).
The runtime knows nothing about where the integers come from (quantized data, DP noise): that is the
business of :mod:`sqm`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sqm.mpc.shares.exact import exact_colsum, exact_gram, exact_monomial_sum
from sqm.errors import UsageError


@dataclass(frozen=True)
class SumProgram:
    n_vars: int
    n_out: int
    monomials: tuple[tuple[int, ...], ...] = ()
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cols: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    coefs: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    gram: bool = False  # outputs are vec(X^T X) row-major, coefficient 1 each

    @classmethod
    def gram_program(cls, n_vars: int) -> SumProgram:
        """y = vec(X^T X): the n_vars^2 degree-two moments with coefficient 1."""
        return cls(n_vars=n_vars, n_out=n_vars * n_vars, gram=True)

    @classmethod
    def from_terms(cls, n_vars: int, n_out: int, term_vars, term_out, term_coef) -> SumProgram:
        """Build from terms (variables of the monomial with repetition, output index, integer coefficient)."""
        index: dict[tuple[int, ...], int] = {}
        acc: dict[tuple[int, int], int] = {}
        for vars_, t, c in zip(term_vars, term_out, term_coef, strict=False):
            key = tuple(sorted(int(v) for v in vars_))
            if any(v < 0 or v >= n_vars for v in key):
                raise UsageError(f"monomial {key} refers to a variable outside 0..{n_vars - 1}")
            if not 0 <= int(t) < n_out:
                raise UsageError(f"output index {t} outside 0..{n_out - 1}")
            k = index.setdefault(key, len(index))
            acc[(int(t), k)] = acc.get((int(t), k), 0) + int(c)
        items = [(t, k, c) for (t, k), c in acc.items() if c != 0]
        rows = np.array([t for t, _, _ in items], dtype=np.int64)
        cols = np.array([k for _, k, _ in items], dtype=np.int64)
        coefs = np.empty(len(items), dtype=object)
        coefs[:] = [c for _, _, c in items]
        monos: list[tuple[int, ...]] = [()] * len(index)  # every slot is set below: index holds 0..len - 1
        for key, k in index.items():
            monos[k] = key
        return cls(n_vars=n_vars, n_out=n_out, monomials=tuple(monos), rows=rows, cols=cols, coefs=coefs)

    @property
    def degree(self) -> int:
        if self.gram:
            return 2
        return max((len(m) for m in self.monomials), default=0)

    def output_bound(self, col_bounds, n_records: int) -> int:
        """A proven bound on max_t |y[t]| (without addends) when |x[i, j]| <= col_bounds[j] for every record."""
        b = [int(v) for v in col_bounds]
        if len(b) != self.n_vars:
            raise UsageError(f"need {self.n_vars} column bounds, got {len(b)}")
        if self.gram:
            top = max(b, default=0)
            return n_records * top * top
        mono_bound = []
        for mono in self.monomials:
            v = 1
            for j in mono:
                v *= b[j]
            mono_bound.append(v)
        per_out = [0] * self.n_out
        for t, k, c in zip(self.rows, self.cols, self.coefs, strict=False):
            per_out[int(t)] += abs(int(c)) * mono_bound[int(k)]
        return n_records * max(per_out, default=0)

    def moments(self, X: np.ndarray) -> np.ndarray:
        """Exact moments (object array of Python ints) of an integer matrix ``X`` (records x n_vars)."""
        if self.gram:
            return exact_gram(X).reshape(-1)
        m = X.shape[0]
        out = np.empty(len(self.monomials), dtype=object)
        deg1 = [k for k, mono in enumerate(self.monomials) if len(mono) == 1]
        deg2 = [k for k, mono in enumerate(self.monomials) if len(mono) == 2]
        if deg1:
            s = exact_colsum(X)
            for k in deg1:
                out[k] = s[self.monomials[k][0]]
        if len(deg2) > self.n_vars:
            G = exact_gram(X)
            for k in deg2:
                a, b = self.monomials[k]
                out[k] = G[a, b]
        else:
            for k in deg2:
                out[k] = exact_monomial_sum(X, self.monomials[k])
        for k, mono in enumerate(self.monomials):
            if len(mono) == 0:
                out[k] = int(m)
            elif len(mono) > 2:
                out[k] = exact_monomial_sum(X, mono)
        return out

    def combine(self, moments: np.ndarray) -> np.ndarray:
        """y = sum of coefficient * moment per output: exact Python integers (object array)."""
        if self.gram:
            return moments.astype(object)
        y = np.zeros(self.n_out, dtype=object)
        y[:] = 0
        if len(self.rows):
            np.add.at(y, self.rows, self.coefs * moments[self.cols])
        return y

    def evaluate(self, X: np.ndarray) -> np.ndarray:
        """Exact y for integer data ``X`` (no addends)."""
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_vars:
            raise UsageError(f"program has {self.n_vars} variables, data has shape {X.shape}")
        return self.combine(self.moments(X))
