"""Logistic regression's gradient (Eq. 19) as an SQM statistic with SECRET coefficients, and its secure kernel.

:class:`LRGradient` is a :class:`sqm.mechanism.polynomial.StructuredPolynomial` whose coefficients hold the server's
weights: the server rounds them (Algorithm 3, lines 1-3) and they never leave it but as Shamir shares;
:func:`sqm.apps.logreg.kernel.secure_gradient` is the BGW evaluation with the coefficients as the server's input
(this application's protocol, built on the runtime's public primitives; this module sends no frame).  The party program
that trains with it is :class:`sqm.apps.logreg.party.LRParty`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from sqm.errors import UsageError
from sqm.mpc.shares.field import prime_for_bound
from sqm.apps.logreg.kernel import secure_gradient
from sqm.mpc.protocols.program import SumProgram

from sqm.mechanism.compensation import CompensatedPolynomial, round_scaled
from sqm.mechanism.polynomial import logreg_gradient
from sqm.mechanism.quantize import dependent_round
from sqm.mechanism.release import SQMPlan
from sqm.mechanism.rng import make_rng
from sqm.mechanism.sensitivity import BASE_RATE, Sensitivity, logreg_sensitivity, taylor_slope
from sqm.mechanism.skellam import skellam_tail_bound
from sqm.mechanism.vertical import ColumnBounds


@functools.lru_cache(maxsize=8)
def _template_program(d: int, label_index: int) -> SumProgram:
    """logreg_gradient's program with placeholder coefficients: its terms are fixed, only coefficients change."""
    poly = logreg_gradient(np.zeros(d), label_index)
    prog = poly.program([1] * len(poly.term_vars))
    # every (output, monomial) pair is distinct, so from_terms kept the terms in order, one each
    assert len(prog.coefs) == len(poly.term_vars) and np.all(prog.rows == poly.term_out)
    return prog


@dataclass(frozen=True, eq=False)
class BatchMembership:
    """One batch's membership of the intersection when the records were aligned hiding it (``hide_membership``;
    :mod:`sqm.apps.logreg.party`, "Membership hidden"): the batch rows are positions of the union and each
    counts times its secret 0/1 membership.  The server holds ``indicator`` over the whole union (it never
    learns the batch); a client holds ``shares``, its degree-t shares of the indicator at the batch's rows (the
    server dealt them once), and ``positions``, the batch's union positions (which the in-process ideal
    functionality uses in place of the shares)."""

    indicator: np.ndarray | None = None
    shares: np.ndarray | None = None
    positions: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class LRGradient:
    """Eq. 19's gradient sum as an SQM statistic (:class:`sqm.mechanism.polynomial.StructuredPolynomial`) whose
    coefficients are SECRET: they hold the server's weights ``w`` (None at the clients), so the server's rounded
    coefficients never leave it but as Shamir shares (:meth:`kernel`: :func:`secure_gradient`).

    Terms in :func:`sqm.mechanism.polynomial.logreg_gradient`'s order: for each output t, x_t / 2 (degree 1), then
    (w_k / 4) x_k x_t for the features k, then -y x_t (with a ``base_rate`` p0: p0 x_t and p0 (1 - p0) w_k x_k x_t).
    Labels are 0/1 (the sensitivity assumes it)."""

    d: int
    label_index: int
    weight_bound: float
    n_parties: int
    w: np.ndarray | None = None
    membership: BatchMembership | None = None  # membership hidden: every party holds one (its own part)
    base_rate: float = BASE_RATE  # p0: the expansion point sigma(b0) (logreg_gradient); 1/2 is Eq. 19

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
        return logreg_gradient(self.w, self.label_index, self.base_rate).evaluate(X)

    def needs_preprocessing(self) -> bool:
        return True

    def compensate(self, gamma: float, seed=None, preprocess: bool | str = True) -> CompensatedPolynomial:
        """Algorithm 3 lines 1-3 at the server: the terms' coefficients (1/2, w_k/4, -1; with a base rate p0:
        p0, p0 (1 - p0) w_k, -1) scaled by gamma^2,
        gamma, gamma and rounded, each to floor or ceil with the exact mean, as
        :func:`sqm.mechanism.compensation.compensate` rounds them, in the terms' order (output by output).  Each
        output's d weight coefficients gamma w_k / 4 are one group of :func:`sqm.mechanism.quantize.dependent_round`,
        so their norm stays within about gamma ||w|| / 4 + 1 instead of gamma ||w|| / 4 + sqrt(d)
        (:func:`sqm.mechanism.sensitivity.logreg_sensitivity` counts on it); the others by
        :func:`sqm.mechanism.compensation.round_scaled`."""
        if self.w is None:
            raise UsageError("only the server, which holds the weights, rounds the gradient's coefficients")
        w = np.asarray(self.w, np.float64)
        d, g = self.d, float(gamma)
        rng = make_rng(seed)
        weights = dependent_round(np.broadcast_to(w * taylor_slope(self.base_rate), (d, d)), g, [np.arange(d)], rng)
        ends = round_scaled(np.tile([float(self.base_rate), -1.0], d), np.tile([g * g, g], d), rng)  # gamma^2: p0
        ints = np.empty((d, d + 2), dtype=object)
        ints[:, 0], ints[:, 1:d + 1], ints[:, d + 1] = ends[0::2], weights.astype(object), ends[1::2]
        return CompensatedPolynomial(self, g, tuple(int(v) for v in ints.reshape(-1)), g ** 3, True)

    def sensitivity(self, gamma: float, bounds: ColumnBounds, preprocess: bool = True) -> Sensitivity:
        """:func:`sqm.mechanism.sensitivity.logreg_sensitivity` over the feature groups (the label's group left out:
        y in {0, 1} enters the bound itself) for ||w|| <= ``weight_bound``."""
        groups = [(len(g), b) for g, b in zip(bounds.groups, bounds.bounds, strict=False) if self.label_index not in g]
        cols, bs = [g for g, _ in groups], [b for _, b in groups]
        return logreg_sensitivity(float(gamma), self.d, math.sqrt(sum(b * b for b in bs)), self.weight_bound,
                                  bs, cols, self.base_rate)

    def result_bound(self, plan: SQMPlan, int_coefs=None) -> int:
        """Proven bound on max_t |y_t| for ANY coefficients the server can round (||w||_inf <= ||w||_2 <= W:
        |a_half| <= ceil(gamma^2/2), |a_k| <= ceil(gamma W / 4), |a_y| <= ceil(gamma)), summed over b_max rows
        at the column bounds, plus the Skellam tail bound (and n for the parties' shares).  The field is sized
        with it; it also bounds every other value shared, reduced or reconstructed (the coefficients and the
        batch moments s, G, h <= b_max max_j b_j^2: the max below), although only y is ever reconstructed.
        The clients, which do not know the coefficients, compute the same bound.  With membership hidden
        (``membership``) the sum runs over the batch rows that are members, a subset of the b_max rows, so the same
        bound holds; the masked rows I x are 0 or x, and the masked moments reduced at degree 3t are s, G, h of
        those rows (bounded as above): the field needs nothing more."""
        gamma, b = float(plan.gamma), plan.int_col_bounds()
        bf, by = [b[j] for j in self.feats], b[self.label_index]
        p0 = float(self.base_rate)
        a_half = math.ceil(p0 * (gamma * gamma))  # the float product the server rounds (compensate)
        a_k, a_y = math.ceil(gamma * self.weight_bound * taylor_slope(p0)), math.ceil(gamma)
        per_row = max(bt * (a_half + a_k * sum(bf) + a_y * by) for bt in bf)
        addend = int(skellam_tail_bound(plan.mu, self.d)) + self.n_parties if plan.mu > 0 else 0
        moments = int(plan.n_records * max(b) ** 2)
        return int(max(plan.n_records * per_row + addend, moments, a_half, a_k, a_y))

    async def kernel(self, ctx, plan: SQMPlan, int_coefs, my_input):
        """:func:`secure_gradient`, a client's quantized batch padded with zero rows to the public b_max (a zero
        row adds nothing: every monomial of Eq. 19 has degree >= 1).  In an in-process SIMULATION whose context
        computes secure evaluations ideally (:class:`sqm.mpc.protocols.inprocess.InProcessTransport` ``ideal``, its
        default), the ideal functionality instead: the clients hand their rows and noise to the server, which computes
        the exact integers the protocol reconstructs (so the same weights); with membership hidden the clients
        also hand it the batch's positions, and it keeps the rows its indicator marks."""
        mem = self.membership
        if getattr(ctx, "ideal", False):
            mine = None
            if my_input is not None:
                mine = tuple(my_input[:2]) + ((np.asarray(mem.positions, np.int64),) if mem is not None else ())
            got = await ctx.ideal_inputs(mine, [0])
            if not ctx.is_server:
                return None
            X = np.hstack([np.asarray(g[0], np.int64) for g in got])
            if mem is not None:  # the batch's members only (every client gave the same positions)
                X = X[np.asarray(mem.indicator, dtype=bool)[np.asarray(got[0][2], np.int64)]]
            y = self.program(int_coefs).evaluate(X)
            return y + sum(np.asarray(g[1]).astype(object) for g in got)
        if my_input is not None:
            x_hat, z = my_input[:2]
            padded = np.zeros((plan.n_records, x_hat.shape[1]), dtype=np.int64)
            padded[: x_hat.shape[0]] = x_hat
            my_input = (padded, z)
            if mem is not None:  # a padding row's share: 0 (the row is zeros: it adds nothing anyway)
                assert mem.shares is not None  # a client (it has an input) holds its shares of the indicator
                ind = np.zeros(plan.n_records, dtype=np.int64)
                ind[: x_hat.shape[0]] = mem.shares
                my_input += (ind,)
        return await secure_gradient(ctx, self.d, self.label_index, plan.col_counts, plan.n_records, int_coefs,
                                     my_input, self.prime(plan, ctx.M), plan.verify_sharing, mem is not None)

    def prime(self, plan: SQMPlan, n_parties: int) -> int:
        """The field of every round's evaluation (and of the dealt membership indicator)."""
        return prime_for_bound(self.result_bound(plan), n_parties)
