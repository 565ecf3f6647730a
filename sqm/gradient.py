"""Logistic regression's gradient (Eq. 19) as an SQM statistic with SECRET coefficients, and its secure kernel.

:class:`LRGradient` is a :class:`sqm.polynomial.StructuredPolynomial` whose coefficients hold the server's
weights: the server rounds them (Algorithm 3, lines 1-3) and they never leave it but as Shamir shares;
:func:`secure_gradient` is the BGW evaluation with the coefficients as the server's input.  The party program
that trains with it is :class:`apps.logreg.party.LRParty`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from mpc import modarith, shamir, wire
from mpc.field import from_signed, prime_for_bound, to_signed
from mpc.program import SumProgram

from .compensation import CompensatedPolynomial, round_scaled
from .mechanism import SQMPlan
from .polynomial import logreg_gradient
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
    """Eq. 19's gradient sum as an SQM statistic (:class:`sqm.polynomial.StructuredPolynomial`) whose
    coefficients are SECRET: they hold the server's weights ``w`` (None at the clients), so the server's rounded
    coefficients never leave it but as Shamir shares (:meth:`kernel`: :func:`secure_gradient`).

    Terms in :func:`sqm.polynomial.logreg_gradient`'s order: for each output t, x_t / 2 (degree 1), then
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
            raise ValueError("the gradient's coefficients are the server's secret: give its rounded coefficients")
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
        gamma, gamma and rounded by :func:`sqm.compensation.round_scaled`, built as one (d, d + 2) array
        (the same draws as :func:`sqm.compensation.compensate` of the generic polynomial, tested)."""
        if self.w is None:
            raise ValueError("only the server, which holds the weights, rounds the gradient's coefficients")
        w = np.asarray(self.w, np.float64)
        C = np.empty((self.d, self.d + 2))
        C[:, 0], C[:, 1:self.d + 1], C[:, self.d + 1] = 0.5, w[None, :] / 4.0, -1.0
        scales = np.full(C.shape, float(gamma))
        scales[:, 0] = float(gamma) ** 2  # the degree-1 term: gamma^(1 + 2 - 1)
        ints = round_scaled(C.reshape(-1), scales.reshape(-1), make_rng(seed))
        return CompensatedPolynomial(self, float(gamma), ints, float(gamma) ** 3, True)

    def sensitivity(self, gamma: float, bounds: ColumnBounds, preprocess: bool = True) -> Sensitivity:
        """:func:`sqm.sensitivity.logreg_sensitivity` over the feature groups (the label's group left out:
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
        computes secure evaluations ideally (:class:`mpc.inprocess.InProcessContext` ``ideal``, its default),
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
        return await secure_gradient(ctx, self, plan, int_coefs, my_input,
                                     prime_for_bound(self.result_bound(plan), ctx.M))


async def secure_gradient(ctx, stat: LRGradient, plan: SQMPlan, int_coefs, my_input, p: int):
    """BGW evaluation of the compensated Eq. 19 gradient sum plus the clients' noise, with the coefficients
    secret (the server's input) and the batch secret (the clients' inputs):

        y_t = a_half_t s_t + sum_k A_tk G_tk + a_y_t h_t + sum_j Z_jt,
        s = sum_i F_i,  G = F^T F,  h = F^T Y  (F: the batch's feature rows, Y: its labels)

    Exchanges (every party makes the same sequence; with ``plan.verify_sharing`` the server first sends the
    sharing-check seeds, each client adds a uniform degree-t mask to its input shares, and one exchange checks
    every client's block and noise sharings before the opening: :class:`mpc.protocol._SharingCheck`):

    1. ``input shares``: each client Shamir-shares (degree t) its padded quantized block and its noise share,
       and sends every party a share of a random polynomial of degree M - 1 whose constant term is 0 (its
       part of the output mask); when M > 3t the server also shares (degree t) its rounded coefficients
       ``int_coefs`` here (``input and coefficient shares``);
    2. only when M <= 3t (``degree reduction and coefficient shares``): locally s (degree t) and the Gram
       matrix of [F, Y] by the inner-product trick (degree 2t, d^2 values whatever the batch size); every
       party reshares its degree-2t shares of G's upper triangle and h with fresh degree-t polynomials
       ([GRR98]: symmetry rebuilds G), and the server sends its coefficient shares in the same exchange;
    3. ``open result``: locally y (degree 2t, or 3t < M when the moments were not reduced), plus the sum of
       the clients' mask shares; every party sends it to the server, which interpolates over all M points.

    Why the masked opening replaces the former reduction of y then opening (one exchange less): y's shares
    alone are not uniform (a product polynomial; the server knows its own coefficient polynomial), so they are
    never sent bare.  The mask R = sum_j R_j, R_j random of degree M - 1 with R_j(0) = 0, is uniform over such
    polynomials as soon as one client is honest, and a coalition of at most t parties holds at most t
    clients (M - 1 >= 2t > t); y + R then has degree <= M - 1 (M points determine it) and, given y(0) and the
    coalition's own t points, its other values are uniform: the server learns y(0) only, as from a
    degree-t reduction followed by an opening.  Every value a client receives is a share.

    Why this is the minimum: the server's coefficients of round k hold the weights it computes from round
    k - 1's output, and the clients' rows never reach the server, so each round's information must go from the
    server to the clients and back: 2 one-way delays on the critical path, whatever M.  With M > 3t that is
    all there is (2 exchanges).  With M <= 3t (2 clients, or 4+ clients) the products of the coefficients
    (degree t) with the moments (degree 2t) would have degree 3t >= M, so the moments are reduced first; the
    clients' input shares do not depend on the server, so a client sends them as soon as it has sent its
    previous output share (exchange 1 is off the critical path), and the server's coefficient shares ride
    on the reduction: still 2 one-way delays per round on the critical path, in 3 exchanges.
    (The former protocol: coefficient shares, then input shares, then one or two degree reductions, then the
    opening: 4 or 5 exchanges and 4 or 5 one-way delays per round.)

    Returns the signed integer result (object array) at the server, None at the clients.
    """
    d, M, t = stat.d, ctx.M, ctx.t
    ctx.require_threshold()
    direct = M > 3 * t  # products with the coefficients have degree 3t < M: no reduction of the moments
    widths, n_rows, n_coefs = list(plan.col_counts), plan.n_records, d * (d + 2)
    check = None
    if plan.verify_sharing:  # every party holds shares of every input here: the check needs nothing else
        from mpc.protocol import _SharingCheck

        ctx.require_checkable()
        check = _SharingCheck(ctx, p, widths)
        await check.agree_seeds()
    # ---- 1. input shares (and, when direct, the server's coefficient shares) ----
    outgoing = {}
    if ctx.is_server:
        if direct:
            coef_sub = shamir.share(from_signed(np.asarray(int_coefs, np.int64), p), M, t, p, ctx.rng)
            outgoing = {j: [coef_sub[j]] for j in range(M)}
    else:
        block, addend = my_input
        block_sub = shamir.share(from_signed(block, p), M, t, p, ctx.rng)
        noise_sub = shamir.share(from_signed(np.asarray(addend, dtype=object), p), M, t, p, ctx.rng)
        mask_sub = shamir.share(np.zeros(d, np.int64), M, M - 1, p, ctx.rng)  # degree M - 1, R_j(0) = 0
        outgoing = {j: [block_sub[j], noise_sub[j], mask_sub[j]] for j in range(M)}
        if check is not None:  # the sharing check's mask: uniform, degree t (so the check reveals nothing)
            check_sub = shamir.share(ctx.rng.integers(0, p, size=1, dtype=np.int64), M, t, p, ctx.rng)
            for j in range(M):
                outgoing[j].append(check_sub[j])
    ctx._lap("share inputs (local)")
    extra = [wire.shares((d,), p), wire.shares((d,), p)] + ([wire.shares((1,), p)] if check is not None else [])
    expect = {c: wire.list_of([wire.shares((n_rows, widths[c - 1]), p)] + extra, "input shares")
              for c in ctx.clients}
    senders = list(ctx.clients)
    if direct:
        expect[0] = wire.list_of([wire.shares((n_coefs,), p)], "coefficient shares")
        senders = [0] + senders
    got = await ctx.send_recv(outgoing, senders, expect, "input and coefficient shares" if direct else "input shares")
    ctx._lap("exchange input shares")
    got = dict(zip(senders, got))
    S = np.hstack([got[c][0] for c in ctx.clients])
    z, mask = got[ctx.clients[0]][1], got[ctx.clients[0]][2]
    for c in ctx.clients[1:]:
        z, mask = modarith.add_mod(z, got[c][1], p), modarith.add_mod(mask, got[c][2], p)
    if check is not None:  # the blocks (chunk 0) and the noise shares (chunk 1), then the masks
        check.add_chunk(0, S)
        check.add_chunk(1, np.hstack([got[c][1].reshape(1, d) for c in ctx.clients]), [d] * len(ctx.clients))
        check.add_masks([[got[c][3]] for c in ctx.clients])
    feats, label = stat.feats, stat.label_index
    s = modarith.sum_mod(S[:, feats], 0, p)
    K = modarith.gram_mod(S, p)  # (d + 1) x (d + 1), degree 2t
    G, h = K[np.ix_(feats, feats)], K[feats, label]
    if direct:
        C = got[0][0]
    else:  # ---- 2. degree reduction of the moments, with the server's coefficient shares ----
        upper = np.triu_indices(d)
        m = len(upper[0])
        sub = shamir.share(np.concatenate([G[upper], h]), M, t, p, ctx.rng)
        coef_sub = shamir.share(from_signed(np.asarray(int_coefs, np.int64), p), M, t, p, ctx.rng) \
            if ctx.is_server else None
        outgoing = {j: [sub[j]] + ([coef_sub[j]] if ctx.is_server else []) for j in range(M)}
        expect = {j: wire.list_of([wire.shares((m + d,), p)], "degree-reduction sub-shares") for j in ctx.clients}
        expect[0] = wire.list_of([wire.shares((m + d,), p), wire.shares((n_coefs,), p)],
                                 "degree-reduction sub-shares and coefficient shares")
        ctx._lap("local moments")
        got = await ctx.send_recv(outgoing, range(M), expect, "degree reduction and coefficient shares")
        red = shamir.combine_subshares(np.stack([g[0] for g in got]), ctx.points, p)
        C = got[0][1]
        G = np.empty((d, d), dtype=np.int64)
        G[upper] = red[:m]
        G[upper[1], upper[0]] = red[:m]
        h = red[m:]
        ctx._lap("degree reduction")
    C = C.reshape(d, d + 2)
    if check is not None:  # before anything is opened
        await check.verify()
        ctx._lap("sharing check")
    # ---- 3. the masked opening, to the server only ----
    y = modarith.mul_mod(C[:, 0], s, p)
    y = modarith.add_mod(y, modarith.rowdot_mod(C[:, 1:d + 1], G, p), p)
    y = modarith.add_mod(y, modarith.mul_mod(C[:, d + 1], h, p), p)
    y = modarith.add_mod(modarith.add_mod(y, z, p), mask, p)  # degree <= M - 1, masked
    ctx._lap("local products")
    res = await ctx.open_to(y, p, [0])
    ctx._lap("open result")
    return None if res is None else to_signed(res, p).astype(object)
