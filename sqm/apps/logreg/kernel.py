"""The secure kernel of SQM logistic regression's per-batch gradient (:class:`sqm.apps.logreg.gradient.LRGradient`):
a BGW evaluation of the compensated Eq. 19 gradient sum with the coefficients secret (the server's input) and the
batch secret (the clients' inputs); the statistic, its coefficients and its sensitivity are
:mod:`sqm.apps.logreg.gradient`'s.  The application's own protocol, built on the runtime's public primitives
(:mod:`sqm.mpc.protocols.sharing`: the sharing check, degree reduction, opening to a party; the transport's
exchanges and phase timer, :class:`sqm.mpc.protocols.api.Transport`)."""
from __future__ import annotations

import numpy as np

from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.net import wire
from sqm.mpc.protocols import sharing
from sqm.mpc.protocols.api import Transport
from sqm.mpc.shares.field import from_signed, to_signed


async def secure_gradient(ctx: Transport, d: int, label_index: int, col_counts, n_records: int, int_coefs, my_input,
                          p: int, verify_sharing: bool = False, masked: bool = False):
    """BGW evaluation of the compensated Eq. 19 gradient sum plus the clients' noise, with the coefficients
    secret (the server's input) and the batch secret (the clients' inputs):

        y_t = a_half_t s_t + sum_k A_tk G_tk + a_y_t h_t + sum_j Z_jt,
        s = sum_i F_i,  G = F^T F,  h = F^T Y  (F: the batch's feature rows, Y: its labels)

    Exchanges (every party makes the same sequence; with ``verify_sharing`` the server first sends the
    sharing-check seeds, each client adds a uniform degree-t mask to its input shares, and one exchange checks
    every client's block and noise sharings before the opening: :class:`sqm.mpc.protocols.sharing.SharingCheck`):

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

    Membership hidden (``masked``; :mod:`sqm.apps.logreg.party`, "Membership hidden"): the batch rows are
    positions of the union, and each row counts times its secret membership I_i of the intersection, so
    s = sum_i I_i F_i, G = sum_i I_i F_i F_i^T, h = sum_i I_i F_i y_i.  A client's input (``my_input``'s third
    entry) then also holds its degree-t shares of I at the batch's rows (the server dealt them to the clients
    once; it never learns which rows a batch holds).  In exchange 1 each client reshares them (degree t, to
    every party); every party combines them with the Lagrange coefficients of the clients' points into a
    degree-t share of I_i (the server receives uniform values only: one point of fresh degree-t polynomials),
    and multiplies it into its shares of the features: Y = I o F, degree 2t.  Then:

    - M > 3t: s = sum Y (2t), G = Y^T F and h = Y^T y (3t < M) are reduced together with the server's
      coefficient shares (exchange 2) and the masked opening follows (3 exchanges, as the M <= 3t path
      without membership);
    - M <= 3t: Y is reduced first (exchange 2: b_max x d values), then the moments as above with the
      coefficient shares (exchange 3), then the opening (4 exchanges).

    With ``verify_sharing`` the clients' resharings of their indicator shares are checked too (one more chunk).

    Returns the signed integer result (object array) at the server, None at the clients.
    """
    M, t = ctx.M, ctx.t
    ctx.require_threshold()
    direct = 3 * t < M and not masked  # products with the coefficients have degree 3t < M: no moment reduction
    deep = masked and 3 * t < M  # the masked moments have degree 3t < M: reduced at once, the rows not first
    widths, n_rows, n_coefs = [int(c) for c in col_counts], int(n_records), d * (d + 2)
    check = None
    if verify_sharing:  # every party holds shares of every input here: the check needs nothing else
        sharing.require_checkable(ctx)
        check = sharing.SharingCheck(ctx, p, widths)
        await check.agree_seeds()
    # ---- 1. input shares (and, when direct, the server's coefficient shares) ----
    outgoing = {}
    if ctx.is_server:
        if direct:
            coef_sub = shamir.share(from_signed(np.asarray(int_coefs, np.int64), p), M, t, p, ctx.rng)
            outgoing = {j: [coef_sub[j]] for j in range(M)}
    else:
        block, addend = my_input[:2]
        block_sub = shamir.share(from_signed(block, p), M, t, p, ctx.rng)
        noise_sub = shamir.share(from_signed(np.asarray(addend, dtype=object), p), M, t, p, ctx.rng)
        mask_sub = shamir.share(np.zeros(d, np.int64), M, M - 1, p, ctx.rng)  # degree M - 1, R_j(0) = 0
        outgoing = {j: [block_sub[j], noise_sub[j], mask_sub[j]] for j in range(M)}
        if masked:  # this client's shares of the batch rows' membership, reshared to every party
            ind_sub = shamir.share(np.asarray(my_input[2], np.int64), M, t, p, ctx.rng)
            for j in range(M):
                outgoing[j].append(ind_sub[j])
        if check is not None:  # the sharing check's mask: uniform, degree t (so the check reveals nothing)
            check_sub = shamir.share(ctx.rng.integers(0, p, size=1, dtype=np.int64), M, t, p, ctx.rng)
            for j in range(M):
                outgoing[j].append(check_sub[j])
    ctx.phase("share inputs (local)")
    extra = [wire.shares((d,), p), wire.shares((d,), p)] + ([wire.shares((n_rows,), p)] if masked else []) \
        + ([wire.shares((1,), p)] if check is not None else [])
    expect = {c: wire.list_of([wire.shares((n_rows, widths[c - 1]), p)] + extra, "input shares")
              for c in ctx.clients}
    senders = list(ctx.clients)
    if direct:
        expect[0] = wire.list_of([wire.shares((n_coefs,), p)], "coefficient shares")
        senders = [0] + senders
    replies = await ctx.send_recv(outgoing, senders, expect,
                                  "input and coefficient shares" if direct else "input shares")
    ctx.phase("exchange input shares")
    got = dict(zip(senders, replies, strict=False))
    S = np.hstack([got[c][0] for c in ctx.clients])
    z, mask = got[ctx.clients[0]][1], got[ctx.clients[0]][2]
    for c in ctx.clients[1:]:
        z, mask = modarith.add_mod(z, got[c][1], p), modarith.add_mod(mask, got[c][2], p)
    n_cl = len(ctx.clients)
    if check is not None:  # the blocks (chunk 0), the noise shares (chunk 1), the resharings (chunk 2); the masks
        check.add_chunk(0, S)
        check.add_chunk(1, np.hstack([got[c][1].reshape(1, d) for c in ctx.clients]), [d] * n_cl)
        if masked:
            check.add_chunk(2, np.stack([got[c][3] for c in ctx.clients], axis=1), [1] * n_cl)
        check.add_masks([[got[c][3 + masked]] for c in ctx.clients])
    label = int(label_index)
    feats = np.array([j for j in range(d + 1) if j != label], dtype=np.int64)
    if masked:  # ---- the rows times their membership (module docstring) ----
        # the dealt sharing, rebuilt from the clients' points: each one's resharing weighted by its Lagrange coefficient
        ind = shamir.reconstruct(np.stack([got[c][3] for c in ctx.clients]), [c + 1 for c in ctx.clients], p)
        F = np.ascontiguousarray(S[:, feats])
        Y = modarith.mul_mod(F, np.broadcast_to(ind[:, None], F.shape), p)  # degree 2t
        ctx.phase("membership (local)")
        if not deep:  # ---- 2. M <= 3t: the masked rows back to degree t first ----
            Y_reduced = await sharing.reshare(ctx, Y, p)
            assert Y_reduced is not None  # every party reshares and receives (the default workers and receivers)
            Y = Y_reduced
            ctx.phase("membership reduction")
        YT = np.ascontiguousarray(Y.T)
        s = modarith.sum_mod(Y, 0, p)
        G = modarith.matmul_mod(YT, F, p)  # degree 3t (deep) or 2t; its shares need not be symmetric
        h = modarith.matmul_mod(YT, np.ascontiguousarray(S[:, [label]]), p).reshape(-1)
    else:
        s = modarith.sum_mod(S[:, feats], 0, p)
        K = modarith.gram_mod(S, p)  # (d + 1) x (d + 1), degree 2t
        G, h = K[np.ix_(feats, feats)], K[feats, label]
    if direct:
        C = got[0][0]
    else:  # ---- 2. (3. when the rows were reduced) degree reduction of the moments, with the coefficients ----
        upper = np.triu_indices(d)  # G is symmetric: its upper triangle's reduced shares rebuild it
        m = len(upper[0])
        sub = shamir.share(np.concatenate([G[upper], h] + ([s] if deep else [])), M, t, p, ctx.rng)
        outgoing = {j: [sub[j]] for j in range(M)}
        if ctx.is_server:
            coef_sub = shamir.share(from_signed(np.asarray(int_coefs, np.int64), p), M, t, p, ctx.rng)
            for j in range(M):
                outgoing[j].append(coef_sub[j])
        width = m + d + (d if deep else 0)
        expect = {j: wire.list_of([wire.shares((width,), p)], "degree-reduction sub-shares") for j in ctx.clients}
        expect[0] = wire.list_of([wire.shares((width,), p), wire.shares((n_coefs,), p)],
                                 "degree-reduction sub-shares and coefficient shares")
        ctx.phase("local moments")
        reduced = await ctx.send_recv(outgoing, range(M), expect, "degree reduction and coefficient shares")
        red = shamir.combine_subshares(np.stack([g[0] for g in reduced]), ctx.points, p)
        C = reduced[0][1]
        G = np.empty((d, d), dtype=np.int64)
        G[upper] = red[:m]
        G[upper[1], upper[0]] = red[:m]
        h = red[m:m + d]
        if deep:
            s = red[m + d:]
        ctx.phase("degree reduction")
    C = C.reshape(d, d + 2)
    if check is not None:  # before anything is opened
        await check.verify()
        ctx.phase("sharing check")
    # ---- 3. the masked opening, to the server only ----
    y = modarith.mul_mod(C[:, 0], s, p)
    y = modarith.add_mod(y, modarith.rowdot_mod(C[:, 1:d + 1], G, p), p)
    y = modarith.add_mod(y, modarith.mul_mod(C[:, d + 1], h, p), p)
    y = modarith.add_mod(modarith.add_mod(y, z, p), mask, p)  # degree <= M - 1, masked
    ctx.phase("local products")
    res = await sharing.open_to(ctx, y, p, [0], output=True)  # masked by degree M - 1: every party's share is needed
    ctx.phase("open result")
    return None if res is None else to_signed(res, p).astype(object)


async def deal_indicator(ctx: Transport, indicator: np.ndarray | None, size: int, p: int) -> np.ndarray | None:
    """Membership hidden, once per training run (before the first :func:`secure_gradient` with ``masked``): the
    server Shamir-shares (degree t, field p) the intersection's 0/1 ``indicator`` over the union's ``size``
    positions with the clients (its own share is not kept: the clients reshare theirs at each batch's rows).
    Returns a client's ``size`` shares, None at the server.  A client learns nothing from its shares (t >= 1);
    t + 1 clients together would learn the indicator (the threat model says so)."""
    out = {}
    if ctx.is_server:
        sub = shamir.share(np.asarray(indicator, dtype=np.int64), ctx.M, ctx.t, p, ctx.rng)
        out = {c: sub[c] for c in ctx.clients}
    got = await ctx.send_recv(out, [] if ctx.is_server else [0], wire.shares((int(size),), p), "membership indicator")
    return None if ctx.is_server else got[0]
