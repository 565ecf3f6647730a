"""Logistic regression's gradient (Eq. 19) as an SQM statistic with SECRET coefficients, and its secure kernel.

:class:`LRGradient` is a :class:`sqm.mechanism.polynomial.StructuredPolynomial` whose coefficients hold the server's
weights: the server rounds them (Algorithm 3, lines 1-3) and they never leave it but as Shamir shares;
:func:`sqm.runtime.gradient_kernel.secure_gradient` is the BGW evaluation with the coefficients as the server's input
(a protocol: it lives with the runtime, and this module sends no frame).  The party program
that trains with it is :class:`sqm.methods.logreg.party.LRParty`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from sqm.runtime.errors import UsageError
from sqm.runtime.field import prime_for_bound
from sqm.runtime.gradient_kernel import secure_gradient
from sqm.runtime.program import SumProgram

from .compensation import CompensatedPolynomial, round_scaled
from .polynomial import logreg_gradient
from .release import SQMPlan
from .rng import make_rng
from .sensitivity import Sensitivity, logreg_sensitivity
from .skellam import skellam_tail_bound
from .vertical import ColumnBounds


@functools.lru_cache(maxsize=8)
def _template_program(d: int, label_index: int) -> SumProgram:
    """logreg_gradient's program with placeholder coefficients: its terms are fixed, only coefficients change."""
    poly = logreg_gradient(np.zeros(d), label_index)
    prog = poly.program([1] * len(poly.term_vars))
    # every (output, monomial) pair is distinct, so from_terms kept the terms in order, one each
    assert len(prog.coefs) == len(poly.term_vars) and np.all(prog.rows == poly.term_out)
    return prog


@dataclass(frozen=True, eq=False)
class LRGradient:
    """Eq. 19's gradient sum as an SQM statistic (:class:`sqm.mechanism.polynomial.StructuredPolynomial`) whose
    coefficients are SECRET: they hold the server's weights ``w`` (None at the clients), so the server's rounded
    coefficients never leave it but as Shamir shares (:meth:`kernel`: :func:`secure_gradient`).

    Terms in :func:`sqm.mechanism.polynomial.logreg_gradient`'s order: for each output t, x_t / 2 (degree 1), then
    (w_k / 4) x_k x_t for the features k, then -y x_t.  Labels are 0/1 (the sensitivity assumes it)."""

    d: int
    label_index: int
    weight_bound: float
    n_parties: int
    w: np.ndarray | None = None

    name = "logreg-gradient"
    public_coefficients = False
    degree = 2

    @property
    def n_vars(self) -> int:
        return self.d + 1

    @property
    def n_out(self) -> int:
        return self.d

    @property
    def feats(self) -> np.ndarray:
        return np.array([j for j in range(self.d + 1) if j != self.label_index], dtype=np.int64)

    def program(self, int_coefs=None) -> SumProgram:
        """The compensated program with these integer coefficients (the reference; the parties never build it)."""
        if int_coefs is None:
            raise UsageError("the gradient's coefficients are the server's secret: give its rounded coefficients")
        tmpl = _template_program(self.d, self.label_index)
        coefs = np.empty(len(tmpl.coefs), dtype=object)
        coefs[:] = [int(c) for c in int_coefs]
        return dataclasses.replace(tmpl, coefs=coefs)

    def evaluate(self, X) -> np.ndarray:
        return logreg_gradient(self.w, self.label_index).evaluate(X)

    def needs_preprocessing(self) -> bool:
        return True

    def compensate(self, gamma: float, seed=None, preprocess: bool | str = True) -> CompensatedPolynomial:
        """Algorithm 3 lines 1-3 at the server: the terms' coefficients (1/2, w_k/4, -1) scaled by gamma^2,
        gamma, gamma and rounded by :func:`sqm.mechanism.compensation.round_scaled`, built as one (d, d + 2) array
        (the same draws as :func:`sqm.mechanism.compensation.compensate` of the generic polynomial, tested)."""
        if self.w is None:
            raise UsageError("only the server, which holds the weights, rounds the gradient's coefficients")
        w = np.asarray(self.w, np.float64)
        C = np.empty((self.d, self.d + 2))
        C[:, 0], C[:, 1:self.d + 1], C[:, self.d + 1] = 0.5, w[None, :] / 4.0, -1.0
        scales = np.full(C.shape, float(gamma))
        scales[:, 0] = float(gamma) ** 2  # the degree-1 term: gamma^(1 + 2 - 1)
        ints = round_scaled(C.reshape(-1), scales.reshape(-1), make_rng(seed))
        return CompensatedPolynomial(self, float(gamma), ints, float(gamma) ** 3, True)

    def sensitivity(self, gamma: float, bounds: ColumnBounds, preprocess: bool = True) -> Sensitivity:
        """:func:`sqm.mechanism.sensitivity.logreg_sensitivity` over the feature groups (the label's group left out:
        y in {0, 1} enters the bound itself) for ||w|| <= ``weight_bound``."""
        groups = [(len(g), b) for g, b in zip(bounds.groups, bounds.bounds) if self.label_index not in g]
        cols, bs = [g for g, _ in groups], [b for _, b in groups]
        return logreg_sensitivity(float(gamma), self.d, math.sqrt(sum(b * b for b in bs)), self.weight_bound,
                                  bs, cols)

    def result_bound(self, plan: SQMPlan, int_coefs=None) -> int:
        """Proven bound on max_t |y_t| for ANY coefficients the server can round (||w||_inf <= ||w||_2 <= W:
        |a_half| <= ceil(gamma^2/2), |a_k| <= ceil(gamma W / 4), |a_y| <= ceil(gamma)), summed over b_max rows
        at the column bounds, plus the Skellam tail bound (and n for the parties' shares).  The field is sized
        with it; it also bounds every other value shared, reduced or reconstructed (the coefficients and the
        batch moments s, G, h <= b_max max_j b_j^2: the max below), although only y is ever reconstructed.
        The clients, which do not know the coefficients, compute the same bound."""
        gamma, b = float(plan.gamma), plan.int_col_bounds()
        bf, by = [b[j] for j in self.feats], b[self.label_index]
        a_half, a_k, a_y = math.ceil(gamma ** 2 / 2), math.ceil(gamma * self.weight_bound / 4), math.ceil(gamma)
        per_row = max(bt * (a_half + a_k * sum(bf) + a_y * by) for bt in bf)
        addend = int(skellam_tail_bound(plan.mu, self.d)) + self.n_parties if plan.mu > 0 else 0
        moments = int(plan.n_records * max(b) ** 2)
        return int(max(plan.n_records * per_row + addend, moments, a_half, a_k, a_y))

    async def kernel(self, ctx, plan: SQMPlan, int_coefs, my_input):
        """:func:`secure_gradient`, a client's quantized batch padded with zero rows to the public b_max (a zero
        row adds nothing: every monomial of Eq. 19 has degree >= 1).  In an in-process SIMULATION whose context
        computes secure evaluations ideally (:class:`sqm.runtime.inprocess.InProcessContext` ``ideal``, its default),
        the ideal functionality instead: the clients hand their rows and noise to the server, which computes
        the exact integers the protocol reconstructs (so the same weights)."""
        if getattr(ctx, "ideal", False):
            got = await ctx.ideal_inputs(None if my_input is None else tuple(my_input[:2]), [0])
            if not ctx.is_server:
                return None
            y = self.program(int_coefs).evaluate(np.hstack([np.asarray(x, np.int64) for x, _ in got]))
            return y + sum(np.asarray(z).astype(object) for _, z in got)
        if my_input is not None:
            x_hat, z = my_input[:2]
            padded = np.zeros((plan.n_records, x_hat.shape[1]), dtype=np.int64)
            padded[: x_hat.shape[0]] = x_hat
            my_input = (padded, z)
        return await secure_gradient(ctx, self.d, self.label_index, plan.col_counts, plan.n_records, int_coefs,
                                     my_input, prime_for_bound(self.result_bound(plan), ctx.M),
                                     plan.verify_sharing)
