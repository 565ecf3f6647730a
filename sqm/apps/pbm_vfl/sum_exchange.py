"""One party's side of split training's per-round exchanges (PBM-VFL, :mod:`sqm.apps.pbm_vfl`): the clients' vectors
up through a secure sum, the server's gradient down: the application's own exchanges, on the runtime's public
ones (the transport's messages and agreement, the secure sum's evaluation); PBM's encoding and accounting are the
mechanism's (:mod:`sqm.mechanism.pbm`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sqm.mpc.net import wire
from sqm.mpc.protocols.api import Transport
from sqm.mpc.protocols.context import PartyContext

from sqm.mpc import SECURE_SUMS  # noqa: F401 (re-exported; defined with the runtime's other choices)
from sqm.errors import UsageError

if TYPE_CHECKING:
    from sqm.mpc.protocols.masked_sum import MaskedSum


class SumExchange:
    """One party's side of split training's per-round exchanges: the clients' vectors up, summed, only the
    server learns the sum; the server's gradient down to every client.

    ``mode`` 'bgw': integer vectors in [0, bound] (PBM encodings) summed by ``ctx.evaluate`` of the secure-sum
    job (:func:`sqm.mpc.protocols.secure_sum.sum_job`, Shamir shares); 'masked': the same by the pairwise-masked sum
    (:class:`sqm.mpc.protocols.masked_sum.MaskedSum`, the paper's Protocol 0); 'clear': float vectors sent to the
    server as they are (the NPQ and LDP baselines: they are not secure protocols, and say so).  Secure modes refuse
    fewer than two clients.  ``bytes`` counts what this party sent per kind ('sum', 'grad', 'control')
    through real processes (an in-process run has no transport to measure: zeros).
    """

    def __init__(self, ctx: Transport, mode: str, width: int, bound: int | None = None):
        if mode not in SECURE_SUMS + ("clear",):
            raise UsageError(f"secure sum must be one of {SECURE_SUMS}, got {mode!r}")
        if mode != "clear" and len(ctx.clients) < 2:
            from sqm.mpc.net.abort import ProtocolError

            raise ProtocolError(f"party {ctx.pid}: {two_clients_problem(len(ctx.clients))}")
        self.ctx, self.mode, self.width, self.bound = ctx, mode, int(width), bound
        self.bytes = {"sum": 0, "grad": 0, "control": 0}
        self._masked: MaskedSum | None = None  # made by setup() in 'masked' mode

    def _sent(self) -> int:
        return self.ctx.bytes_sent()

    async def _count(self, kind: str, coro):
        b0 = self._sent()
        out = await coro
        self.bytes[kind] += self._sent() - b0
        return out

    async def setup(self) -> None:
        """Masked sums: the clients' pairwise key agreement (the server takes part in the exchange only)."""
        if self.mode == "masked":
            from sqm.mpc.protocols.masked_sum import MaskedSum

            assert self.bound is not None  # the secure modes are given the encodings' bound
            self._masked = MaskedSum(self.ctx, self.bound)
            await self._count("control", self._masked.setup())

    async def agree(self, public, what: str) -> None:
        """Every party checks that every other holds the same public value (e.g. a mini-batch order)."""
        await self._count("control", self.ctx.agree(public, what))

    async def sum(self, vector, rows: int):
        """Clients pass their (rows, width) array, the server None; the server gets the sum, as (rows, width)
        int64 (secure modes) or float64 ('clear'); the clients get None."""
        return await self._count("sum", self._sum(vector, rows * self.width))

    async def _sum(self, vector, size: int):
        ctx = self.ctx
        mine = None if ctx.is_server else np.asarray(vector).reshape(-1)
        if mine is not None and mine.size != size:
            raise UsageError(f"client {ctx.pid} holds {mine.size} values, the sum needs {size}")
        if self.mode == "masked":
            assert self._masked is not None  # setup() runs before the first sum
            out = await self._masked.sum(mine, size)
        elif self.mode == "bgw":
            from sqm.mpc.protocols.secure_sum import sum_job

            assert self.bound is not None  # the secure modes are given the encodings' bound
            my_input = None if mine is None else (np.zeros((0, 0), np.int64), mine.astype(np.int64))
            out = await PartyContext.of(ctx).evaluate(sum_job([], size, self.bound), my_input)
            out = None if out is None else np.asarray(out, dtype=object).astype(np.int64)
        else:
            if ctx.is_server:
                got = await ctx.send_recv({}, ctx.clients, wire.array(np.float64, (size,), what="embeddings"),
                                          "clear sum")
                out = np.sum(got, axis=0)
            else:
                assert mine is not None  # a client holds its vector
                ctx.output_shares_next()  # the value itself
                await ctx.send_recv({0: mine.astype(np.float64)}, [], None, "clear sum")
                out = None
        return None if out is None else out.reshape(-1, self.width)

    async def gradient(self, grad=None):
        """The server passes the (rows, width) gradient with respect to the sum; every client receives it."""
        ctx = self.ctx
        if ctx.is_server:
            g = np.asarray(grad, dtype=np.float32)
            return await self._count("grad", ctx.send_recv({c: g for c in ctx.clients}, [], None, "gradient"))
        check = wire.array(np.float32, (None, self.width), what="embedding gradient")
        got = await self._count("grad", ctx.send_recv({}, [0], check, "gradient"))
        return got[0]


def two_clients_problem(n_clients: int) -> str | None:
    """Why a secure sum over ``n_clients`` clients is refused (None if it is not): with one client its masked
    value, or its BGW share at threshold t = 0, is its data in the clear."""
    if n_clients < 2:
        return (f"PBM-VFL's secure sum needs at least two clients, got {n_clients}: with one client the server "
                f"would receive that client's data in the clear (its masked value has no other client's mask to "
                f"cancel; its BGW share at threshold t = 0 is the value itself); refused")
    return None
