"""Polynomials f: R^n -> R^d, f_t(x) = sum_l a_t[l] prod_j x[j]^B_t[l, j]  (Eq. 11 of the SQM paper).

Stored sparsely as terms (output index t, real coefficient, variables of the monomial with repetition),
so that a covariance of thousands of columns or a gradient of hundreds of weights stays small.

:class:`StructuredPolynomial` is what SQM needs of a statistic (:func:`sqm.mechanism.release.sqm_round` uses nothing
else): the program, plain evaluation, compensation, its proven sensitivity for given column bounds, the
field bound and the secure local kernel.  :class:`Polynomial` implements it for any polynomial with public
coefficients (the general triangle-inequality sensitivity, ``ctx.evaluate`` as kernel);
:class:`CovariancePolynomial` overrides the sensitivity with the covariance bound.  A statistic with secret
coefficients (logistic regression: the server's weights) sets ``public_coefficients = False`` and brings
its own kernel, which receives the server's rounded coefficients at the server and None at the clients.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sqm.errors import UsageError
from sqm.mpc.protocols.context import PartyContext
from sqm.mpc.protocols.program import SumProgram

from .sensitivity import BASE_RATE, general_sensitivity, gram_sensitivity, taylor_slope


@runtime_checkable
class StructuredPolynomial(Protocol):
    """A polynomial statistic sum_x f(x) released by SQM (see the module docstring).

    ``plan`` below is the public :class:`sqm.mechanism.release.SQMPlan` of the release (gamma, mu, column bounds,
    record bound, layout: every party holds the same); ``int_coefs`` the compensated integer coefficients
    (None for a statistic whose own coefficients are used, or at a client when they are secret)."""

    @property
    def name(self) -> str: ...

    @property
    def n_vars(self) -> int: ...

    @property
    def n_out(self) -> int: ...

    @property
    def public_coefficients(self) -> bool:
        """False: the server's rounded coefficients stay secret (its kernel shares them)."""

    @property
    def degree(self) -> int: ...

    def program(self, int_coefs=None) -> SumProgram:
        """The integer :class:`sqm.mpc.protocols.program.SumProgram` (with these coefficients)."""

    def evaluate(self, X) -> np.ndarray:
        """sum_x f(x) over real data (float64 reference, no privacy)."""

    def needs_preprocessing(self) -> bool:
        """Whether coefficients must be scaled and rounded (Algorithm 3, lines 1-3)."""

    def compensate(self, gamma: float, seed=None, preprocess: bool | str = "auto") -> Any:
        """The server's :class:`sqm.mechanism.compensation.CompensatedPolynomial` (its rounding uses ``seed``)."""

    def sensitivity(self, gamma: float, bounds, preprocess: bool = True) -> Any:
        """A proven :class:`sqm.mechanism.sensitivity.Sensitivity` of the compensated quantized sum when every record
        satisfies the column bounds ``bounds`` (:class:`sqm.mechanism.vertical.ColumnBounds`)."""

    def result_bound(self, plan, int_coefs=None) -> int:
        """A proven bound on |each output| (quantized sum plus noise): sizes the field."""

    async def kernel(self, ctx, plan, int_coefs, my_input):
        """The secure evaluation at this party: ``my_input`` is a client's (quantized rows, noise share[, ids
        digest]) and None at the server; returns the signed integers at the server, None elsewhere."""


@dataclass(frozen=True)
class Polynomial:
    n_vars: int
    n_out: int
    term_out: np.ndarray  # (L,) output index of each term
    term_coef: np.ndarray  # (L,) real coefficient
    term_vars: tuple[tuple[int, ...], ...]  # (L,) sorted variables of each monomial, with repetition
    name: str = "polynomial"

    public_coefficients = True  # the compensated coefficients are public (sent to every party)
    chunked_input = True  # its kernel is ctx.evaluate, which takes a client's records chunk by chunk

    # ----- construction -------------------------------------------------------------------------
    @classmethod
    def from_exponents(cls, coefficients, exponents, name: str = "polynomial") -> Polynomial:
        """Eq. 11: ``coefficients[t]`` is the vector a_t (length v_t), ``exponents[t]`` the matrix B_t (v_t x n)."""
        if len(coefficients) != len(exponents):
            raise UsageError(f"{len(coefficients)} coefficient vectors but {len(exponents)} exponent matrices")
        if not coefficients:
            raise UsageError("a polynomial needs at least one output dimension")
        n_vars = None
        outs, coefs, vars_ = [], [], []
        for t, (a, B) in enumerate(zip(coefficients, exponents, strict=False)):
            a = np.atleast_1d(np.asarray(a, dtype=np.float64))
            B = np.atleast_2d(np.asarray(B))
            if not np.all(np.isfinite(a)):
                raise UsageError(f"coefficients of output {t} contain NaN or inf")
            if B.shape[0] != a.shape[0]:
                raise UsageError(f"output {t}: {a.shape[0]} coefficients but {B.shape[0]} exponent rows")
            if not np.issubdtype(B.dtype, np.integer):
                if not np.all(np.isfinite(B)) or not np.all(np.round(B) == B):
                    raise UsageError(f"output {t}: exponents must be integers")
                B = B.astype(np.int64)
            if np.any(B < 0):
                raise UsageError(f"output {t}: negative exponents are not polynomial")
            if n_vars is None:
                n_vars = B.shape[1]
            elif B.shape[1] != n_vars:
                raise UsageError(f"output {t}: exponent matrix has {B.shape[1]} columns, expected {n_vars}")
            for coef, row in zip(a, B, strict=False):
                outs.append(t)
                coefs.append(coef)
                vars_.append(tuple(int(j) for j in np.repeat(np.arange(n_vars), row)))
        assert n_vars is not None  # set by the first output: coefficients is not empty
        return cls(n_vars=int(n_vars), n_out=len(coefficients), term_out=np.array(outs, np.int64),
                   term_coef=np.array(coefs, np.float64), term_vars=tuple(vars_), name=name)

    # ----- structure -----------------------------------------------------------------------------
    @property
    def term_degrees(self) -> np.ndarray:
        return np.array([len(v) for v in self.term_vars], dtype=np.int64)

    @property
    def degree(self) -> int:
        """lambda: the largest degree of any monomial in any output."""
        return int(self.term_degrees.max(initial=0))

    def check_data(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X)
        if X.ndim != 2:
            raise UsageError(f"data must be a 2-D array (records x columns), got shape {X.shape}")
        if X.shape[1] != self.n_vars:
            raise UsageError(f"the {self.name} polynomial has {self.n_vars} variables but the data has "
                             f"{X.shape[1]} columns")
        return X

    # ----- evaluation ----------------------------------------------------------------------------
    def evaluate(self, X) -> np.ndarray:
        """sum_x f(x) over the rows of real data ``X`` (float64 reference)."""
        X = self.check_data(np.asarray(X, dtype=np.float64))
        y = np.zeros(self.n_out)
        cache: dict[tuple[int, ...], float] = {}
        for t, a, mono in zip(self.term_out, self.term_coef, self.term_vars, strict=False):
            if mono not in cache:
                prod = np.ones(X.shape[0])
                for j in mono:
                    prod = prod * X[:, j]
                cache[mono] = float(prod.sum())
            y[t] += a * cache[mono]
        return y

    def evaluate_rows(self, X) -> np.ndarray:
        """f(x) for each row: (records x n_out)."""
        X = self.check_data(np.asarray(X, dtype=np.float64))
        out = np.zeros((X.shape[0], self.n_out))
        for t, a, mono in zip(self.term_out, self.term_coef, self.term_vars, strict=False):
            prod = np.full(X.shape[0], a)
            for j in mono:
                prod = prod * X[:, j]
            out[:, t] += prod
        return out

    def program(self, int_coefs=None) -> SumProgram:
        """The integer program computing this polynomial with integer coefficients ``int_coefs``.

        Without ``int_coefs`` the polynomial's own coefficients must be integers.
        """
        if int_coefs is None:
            if not np.all(self.term_coef == np.round(self.term_coef)):
                raise UsageError("coefficients are not integers: compensate them first (sqm.mechanism.compensation)")
            int_coefs = [int(c) for c in self.term_coef]
        return SumProgram.from_terms(self.n_vars, self.n_out, self.term_vars, self.term_out, int_coefs)

    def evaluate_integer(self, X_int, int_coefs=None) -> np.ndarray:
        """Exact sum_x f(x) over integer data with integer coefficients (object array of Python ints)."""
        return self.program(int_coefs).evaluate(self.check_data(np.asarray(X_int)))

    # ----- what SQM needs (StructuredPolynomial) ---------------------------------------------------
    def needs_preprocessing(self) -> bool:
        """False only if every coefficient is an integer and every monomial has degree lambda."""
        return not (np.all(self.term_degrees == self.degree) and np.all(self.term_coef == np.round(self.term_coef)))

    def compensate(self, gamma: float, seed=None, preprocess: bool | str = "auto"):
        from .compensation import compensate

        return compensate(self, gamma, seed, preprocess)

    def sensitivity(self, gamma: float, bounds, preprocess: bool = True):
        """The triangle-inequality bound of :func:`sqm.mechanism.sensitivity.general_sensitivity` at |x_j| <= b_j."""
        return general_sensitivity(self, gamma, bounds.column_bounds(), preprocess=preprocess)

    def result_bound(self, plan, int_coefs=None) -> int:
        return plan.job(self.program(int_coefs)).result_bound()

    async def kernel(self, ctx, plan, int_coefs, my_input):
        """The BGW evaluation of :meth:`program` with public coefficients (``ctx.evaluate``; a bare transport
        evaluates without options: :meth:`sqm.mpc.protocols.context.PartyContext.of`)."""
        return await PartyContext.of(ctx).evaluate(plan.job(self.program(int_coefs)), my_input)


class CovariancePolynomial(Polynomial):
    """f(x) = x^T x (the n x n outer product, flattened row-major): degree 2, coefficients 1.

    Kept implicit, so a covariance over thousands of columns costs nothing to describe.
    """

    def __init__(self, n_vars: int):
        if n_vars < 1:
            raise UsageError(f"the covariance needs at least one column, got {n_vars}")
        object.__setattr__(self, "n_vars", int(n_vars))
        object.__setattr__(self, "n_out", int(n_vars) ** 2)
        object.__setattr__(self, "name", "covariance")

    @property
    def term_out(self):  # pragma: no cover - materialised only on demand
        return np.arange(self.n_out, dtype=np.int64)

    @property
    def term_coef(self):
        return np.ones(self.n_out)

    @property
    def term_vars(self):
        n = self.n_vars
        return tuple(tuple(sorted((a, b))) for a in range(n) for b in range(n))

    @property
    def term_degrees(self):
        return np.full(self.n_out, 2, dtype=np.int64)

    @property
    def degree(self) -> int:
        return 2

    def needs_preprocessing(self) -> bool:
        return False  # coefficients 1, every monomial of degree 2: output scale gamma^2

    def sensitivity(self, gamma: float, bounds, preprocess: bool = False):
        """||x_hat x_hat^T||_F = ||x_hat||^2 <= sum over column groups of N_G^2
        (:func:`sqm.mechanism.sensitivity.gram_sensitivity`)."""
        return gram_sensitivity(gamma, bounds)

    def evaluate(self, X) -> np.ndarray:
        X = self.check_data(np.asarray(X, dtype=np.float64))
        return (X.T @ X).reshape(-1)

    def evaluate_rows(self, X) -> np.ndarray:
        X = self.check_data(np.asarray(X, dtype=np.float64))
        return np.einsum("ia,ib->iab", X, X).reshape(X.shape[0], -1)

    def program(self, int_coefs=None) -> SumProgram:
        if int_coefs is not None and any(int(c) != 1 for c in int_coefs):
            raise UsageError("the covariance program has coefficients 1")
        return SumProgram.gram_program(self.n_vars)


def covariance(n_vars: int) -> CovariancePolynomial:
    """The PCA polynomial x^T x (coefficients 1; SQM does not pre-process them, output scale gamma^2)."""
    return CovariancePolynomial(n_vars)


def logreg_gradient(w, label_index: int | None = None, base_rate: float = BASE_RATE) -> Polynomial:
    """Eq. 19: f(w, (x, y)) = x/2 + <w/4, x> x - y x, the first-order Taylor logistic-regression gradient; with a
    ``base_rate`` p0 other than 1/2, the same expansion taken at the intercept-only model sigma(b0) = p0
    (b0 = logit p0, added to the fitted intercept): sigma(b0 + <w, x>) ~ p0 + p0 (1 - p0) <w, x>, so
    f = p0 x + p0 (1 - p0) <w, x> x - y x.

    Variables are the d features followed by the label (``label_index`` defaults to d); the d outputs are
    the gradient coordinates.  Coefficients: p0 (degree 1), p0 (1 - p0) w_k and -1 (degree 2).
    """
    slope = taylor_slope(base_rate)
    p0 = float(base_rate)
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(w)):
        raise UsageError("weights contain NaN or inf")
    d = w.shape[0]
    if d < 1:
        raise UsageError("logistic regression needs at least one feature")
    label = d if label_index is None else int(label_index)
    if not 0 <= label <= d:
        raise UsageError(f"label_index must lie in 0..{d}, got {label_index}")
    feats = [j for j in range(d + 1) if j != label]
    outs: list[int] = []
    coefs: list[float] = []
    vars_: list[tuple[int, ...]] = []
    for t, j in enumerate(feats):
        outs.append(t)
        coefs.append(p0)
        vars_.append((j,))
        for k_pos, k in enumerate(feats):
            outs.append(t)
            coefs.append(w[k_pos] * slope)
            vars_.append(tuple(sorted((k, j))))
        outs.append(t)
        coefs.append(-1.0)
        vars_.append(tuple(sorted((label, j))))
    return Polynomial(n_vars=d + 1, n_out=d, term_out=np.array(outs, np.int64),
                      term_coef=np.array(coefs, np.float64), term_vars=tuple(vars_), name="logreg-gradient")
