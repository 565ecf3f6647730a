"""The sharing primitives of the BGW protocol over a party's transport (:class:`sqm.mpc.net.transport.PartyTransport`),
public for secure kernels of their own (an application's) as for the evaluation (:mod:`sqm.mpc.protocols.evaluation`):

- :func:`input_shares`: each client Shamir-shares (degree t) its arrays with the workers, who add the summands;
- :func:`reshare`: degree reduction, a degree-2t sharing back to degree t ([GRR98]);
- :func:`open_to`: parties send their shares to receivers, which reconstruct (and check the degree);
- :class:`SharingCheck`: every client's input sharing checked to have degree <= t before anything is opened.

Every party calls each primitive at the same point of its sequence of exchanges (each is one exchange).  The
phase timer (:meth:`sqm.mpc.net.transport.PartyTransport.phase`) and the output-share mark
(:meth:`sqm.mpc.net.transport.PartyTransport.output_shares_next`) are the transport's.
"""
from __future__ import annotations

import hashlib

import numpy as np

from sqm.mpc.net import wire
from sqm.mpc.net.abort import ProtocolError, party_label
from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.shares.randomness import field_stream


async def input_shares(ctx, payload, p: int, widths=None, rows: int | None = None, summands=(),
                       workers=None, per_client=(), output: bool = False) -> tuple[np.ndarray | None,
                                                                                  list[np.ndarray]]:
    """Each client Shamir-shares (degree t) its field arrays ``payload = [block, *summands]`` with the
    ``workers`` (default: every party; the server passes None).  Returns, at every worker, its shares of
    the clients' blocks side by side (records x all columns) and, for each summand, its share of the
    clients' sum; (None, []) at a party that is no worker (it takes part in the exchange with nothing).

    What arrives is checked: client j's block share must be int64 of shape (``rows``, ``widths[j-1]``)
    and each summand share of the shape in ``summands``, every entry in [0, p) (None: any length).
    When the server is a worker it sends every client an empty frame too, and every worker waits for every
    other: no client runs more than one chunk ahead of the server, so no buffer grows with the records.
    ``output``: these shares complete the outputs' inputs
    (:meth:`~sqm.mpc.net.transport.PartyTransport.output_shares_next`)."""
    ctx.require_threshold()
    workers = list(range(ctx.M)) if workers is None else list(workers)
    outgoing: dict[int, object]
    if ctx.is_server:  # an empty frame to every client: the clients' pace (see above)
        outgoing = {j: None for j in range(ctx.M)} if 0 in workers else {}
    else:
        shares = [shamir.share(x, ctx.M, ctx.t, p, ctx.rng) for x in payload]
        ctx.phase("share inputs (local)")
        outgoing = {j: [s[j] for s in shares] for j in workers}
    expect = {0: wire.nothing}
    for k, c in enumerate(ctx.clients):
        parts = [wire.shares((rows, None if widths is None else widths[k]), p)]
        parts += [wire.shares(tuple(s), p) for s in summands]
        parts += [wire.shares(tuple(s), p) for s in per_client]
        expect[c] = wire.list_of(parts, "input shares")
    senders = workers if ctx.pid in workers else []  # a worker hears from every worker (the server's: pace)
    if output and payload is not None:
        ctx.output_shares_next()
    got = await ctx.send_recv(outgoing, senders, expect, "input shares")
    ctx.phase("exchange input shares")
    if ctx.pid not in workers:
        return None, []
    got = [g for j, g in zip(senders, got, strict=False) if j != 0]
    sums = []
    for k in range(1, 1 + len(summands)):
        acc = got[0][k]
        for g in got[1:]:
            acc = modarith.add_mod(acc, g[k], p)
        sums.append(acc)
    if per_client:  # not summed: each client's own parts (one list per client, client order), appended last
        sums.append([g[1 + len(summands):] for g in got])
    return np.hstack([g[0] for g in got]), sums


async def reshare(ctx, y2t: np.ndarray | None, p: int, workers=None, shape=None,
                  receivers=None, output: bool = False) -> np.ndarray | None:
    """Degree reduction: each of the ``workers`` (default: every party; at least 2t + 1 of them) shares its
    degree-2t share with a fresh degree-t polynomial; every party combines what the workers sent with the
    Lagrange coefficients of the workers' points.  A party that is no worker passes None and the
    ``shape`` of the shares; it receives its degree-t share all the same.  ``receivers`` (default: every
    party): the parties that get a degree-t share (None elsewhere).  ``output``: the outputs' own reduction
    (:meth:`~sqm.mpc.net.transport.PartyTransport.output_shares_next`)."""
    workers = list(range(ctx.M)) if workers is None else list(workers)
    receivers = list(range(ctx.M)) if receivers is None else list(receivers)
    shape = y2t.shape if y2t is not None else tuple(shape)
    out = {}
    if ctx.pid in workers:
        sub = shamir.share(y2t, ctx.M, ctx.t, p, ctx.rng)
        out = {j: sub[j] for j in receivers}
        if output:
            ctx.output_shares_next()
    got = await ctx.send_recv(out, workers if ctx.pid in receivers else [], wire.shares(shape, p),
                              "degree reduction")
    if ctx.pid not in receivers:
        return None
    return shamir.combine_subshares(np.stack(got), [w + 1 for w in workers], p)


async def open_to(ctx, share: np.ndarray | None, p: int, receivers, senders=None, shape=None,
                  degree: int | None = None, output: bool = False) -> np.ndarray | None:
    """Send my degree-t shares to ``receivers`` (from the ``senders``, default every party: each holding a
    share; a party that is no sender passes None and the ``shape``); they reconstruct (with the senders'
    points) and decode.  ``degree``: the sharing's degree, when known; with at least degree + 2 senders the
    receivers check that every entry's shares lie on one polynomial of that degree (ProtocolError
    otherwise: a party deviated in an input sharing of a sum that is not reduced, the degree reduction or the
    opening; nothing is released).  ``output``: an output's opening
    (:meth:`~sqm.mpc.net.transport.PartyTransport.output_shares_next`)."""
    receivers = list(receivers)
    shape = share.shape if share is not None else tuple(shape)
    senders = list(range(ctx.M)) if senders is None else list(senders)
    out = {r: share for r in receivers} if ctx.pid in senders else {}
    if output and out:
        ctx.output_shares_next()
    got = await ctx.send_recv(out, senders if ctx.pid in receivers else [],
                              wire.shares(shape, p), "open result")
    if ctx.pid not in receivers:
        return None
    xs = [s + 1 for s in senders]
    if degree is not None and len(xs) >= degree + 2 and not shamir.consistent(got, xs, degree, p):
        raise ProtocolError(f"party {ctx.pid}: the shares opened to it are inconsistent (they do not lie on one "
                            f"polynomial of degree <= {degree}): a party deviated in its input sharing (of a sum "
                            f"that is not reduced), the degree reduction or the opening; job aborted, nothing "
                            f"released")
    return shamir.reconstruct(np.stack(got), xs, p)


def require_checkable(ctx) -> None:
    """:class:`SharingCheck` needs t + 2 points besides each client (at least 3 clients)."""
    if ctx.t + 2 > ctx.M - 1:
        raise ProtocolError(f"party {ctx.pid}: checking the clients' sharings needs at least t + 2 = "
                            f"{ctx.t + 2} parties besides each client (this job has {ctx.M}: at least 3 "
                            f"clients); refused before any share was sent")


class SharingCheck:
    """Detects a client whose input sharing is inconsistent (degree above t), before any output is opened, and
    names it (``verify_sharing`` jobs: every party is then a worker, so the M - 1 parties other than a client hold
    its shares, at least t + 2 points):

    1. before any input the server draws a 16-byte seed per client (OS entropy) and sends client c's seed to every
       party but c (``sharing-check seeds``): c never learns it;
    2. every party j accumulates, for each client c != j, lambda_c = sum over chunks k of <r_ck, S_ck>, r_ck
       uniform in F_p from AES-CTR keyed by (seed_c, k), over its shares S_ck of c's chunk, plus its share of
       c's mask, a uniform value c shares with its last chunk (so that lambda_c reveals nothing of c's data);
    3. one exchange (``sharing check``): every party sends every party its lambdas; each party checks that, for
       every client c, the M - 1 values of the parties other than c lie on one polynomial of degree <= t.  If c's
       sharing of any entry has degree above t at those points, the combination does too except with
       probability 1/p, since r was unknown to c when it shared (a ProtocolError naming c; nothing is opened).

    Cost: one exchange of M - 1 field elements per party, one multiplication per share, and the server's shares
    of every input (it is a worker).  Not covered: a client sharing consistent values outside its bounds or
    offset (only range proofs would see those), a server that colludes with the client (it chose the seeds), a
    party that lies about its own lambdas (it can make an honest client look inconsistent: the check trusts
    the checkers, as semi-honest parties)."""

    def __init__(self, ctx, p: int, widths):
        self.ctx, self.p = ctx, p
        self.widths = list(widths)  # the clients' column counts (evaluate refuses a job without owners)
        self.seeds: dict[int, bytes] = {}
        self.lam = {c: 0 for c in ctx.clients if c != ctx.pid}

    async def agree_seeds(self) -> None:
        """Step 1 (one exchange, ``sharing-check seeds``): the server's seeds, each client's to every other party."""
        import secrets

        ctx = self.ctx
        others = lambda j: [c for c in ctx.clients if c != j]  # noqa: E731
        if ctx.is_server:
            self.seeds = {c: secrets.token_bytes(16) for c in ctx.clients}
            outgoing = {j: [self.seeds[c] for c in others(j)] for j in ctx.clients}
        else:
            outgoing = {}
        expect = wire.list_of([wire.digest(16)] * (len(ctx.clients) - 1), "sharing-check seeds")
        got = await ctx.send_recv(outgoing, [] if ctx.is_server else [0], expect, "sharing-check seeds")
        if not ctx.is_server:
            self.seeds = dict(zip(others(ctx.pid), got[0], strict=False))

    def _r(self, c: int, k: int, shape) -> np.ndarray:
        key = hashlib.sha256(self.seeds[c] + int(k).to_bytes(8, "little")).digest()
        return field_stream(key, shape, self.p)

    def add_chunk(self, k: int, S: np.ndarray, widths=None) -> None:
        """Add this party's shares ``S`` of the clients' k-th chunk (their columns side by side, ``widths`` per
        client, default the check's); ``k`` must differ between the calls of one check."""
        if S is None:
            return
        start = 0
        for c, w in zip(self.ctx.clients, self.widths if widths is None else widths, strict=False):
            if c in self.lam and S.shape[0] and w:
                block = S[:, start:start + w]
                prod = modarith.mul_mod(self._r(c, k, block.shape), block, self.p)
                self.lam[c] = (self.lam[c] + int(modarith.sum_mod(prod.reshape(-1), 0, self.p))) % self.p
            start += w

    def add_masks(self, per_client) -> None:
        """Add this party's shares of the clients' masks (per client, client order: the mask's share first)."""
        for c, parts in zip(self.ctx.clients, per_client, strict=False):
            if c in self.lam:
                self.lam[c] = (self.lam[c] + int(parts[0][0])) % self.p

    async def verify(self) -> None:
        """Step 3 (one exchange, ``sharing check``): raises ProtocolError naming every inconsistent client."""
        ctx, p = self.ctx, self.p
        mine = np.array([self.lam.get(c, 0) for c in ctx.clients], dtype=np.int64)
        got = await ctx.send_recv({j: mine for j in range(ctx.M) if j != ctx.pid}, [j for j in range(ctx.M)
                                  if j != ctx.pid], wire.shares((len(ctx.clients),), p), "sharing check")
        vals = dict(zip([j for j in range(ctx.M) if j != ctx.pid], got, strict=False))
        vals[ctx.pid] = mine
        bad = []
        for i, c in enumerate(ctx.clients):
            others = [j for j in range(ctx.M) if j != c]
            if not shamir.consistent([vals[j][i] for j in others], [j + 1 for j in others], ctx.t, p):
                bad.append(c)
        if bad:
            who = ", ".join(party_label(c) for c in bad)
            raise ProtocolError(f"party {ctx.pid}: the input sharing of {who} is inconsistent (its shares do not "
                                f"lie on one polynomial of degree <= {ctx.t}): a deviating client; job aborted, "
                                f"nothing released")

