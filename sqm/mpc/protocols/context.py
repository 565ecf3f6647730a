"""What a party program works with: its transport and an evaluation over it, in one object.

A party program receives its :class:`sqm.mpc.net.transport.PartyTransport` (messages, agreement, the phase
timer).  Where it evaluates jobs securely it wraps it in a :class:`PartyContext`, whose evaluation's options
(shard workers, the membership-hiding alignment, a progress callback per chunk) are the constructor's arguments:
the party program that knows them passes them, and what it hands on (an application's task) evaluates with
them.  Everything else a context reads is its transport's; nothing is set on a context from outside.
:mod:`sqm.mpc.protocols.api` names what applications may call.
"""
from __future__ import annotations

from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols.evaluation import Evaluation


class PartyContext:
    """``transport`` (a :class:`sqm.mpc.net.transport.PartyTransport`, or a :class:`PartyContext` whose transport
    and options it takes, these arguments replacing those given) with an :class:`Evaluation` over it.

    ``shards``: this party's shard workers (:class:`sqm.mpc.protocols.shards.ShardRunner`); ``membership``: the
    membership-hiding alignment (:class:`sqm.mpc.protocols.psi.Union`); ``on_chunk``: callback(chunks done,
    chunks due) of an evaluation in chunks.  Reading any other attribute reads the transport's (its pid, M, t,
    clients, rng, send_recv, agree, phase, ...), so a wrapper that replaced one of the transport's (a test's
    recorder) is seen by the evaluation as by the program."""

    def __init__(self, transport, *, shards=None, membership=None, on_chunk=None):
        if isinstance(transport, PartyContext):
            given = transport.evaluation
            shards = given.shards if shards is None else shards
            membership = given.membership if membership is None else membership
            on_chunk = given.on_chunk if on_chunk is None else on_chunk
            transport = transport.transport
        object.__setattr__(self, "transport", transport)
        object.__setattr__(self, "evaluation", Evaluation(transport, shards=shards, membership=membership,
                                                          on_chunk=on_chunk))

    @classmethod
    def of(cls, ctx) -> PartyContext:
        """``ctx`` itself if it is a context, else a context over the transport ``ctx`` without options."""
        return ctx if isinstance(ctx, cls) else cls(ctx)

    @property
    def membership(self):
        """The membership-hiding alignment this context's evaluations count records by (None: every record)."""
        return self.evaluation.membership

    def __getattr__(self, name: str):
        return getattr(object.__getattribute__(self, "transport"), name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a party context is not changed from outside ({name!r}): pass an evaluation option "
                             f"to PartyContext, or set the transport's own attribute on its transport")

    async def evaluate(self, job, my_input=None, outputs_to_clients: bool = False, outputs_to=None):
        """:meth:`Evaluation.evaluate` of ``job`` with this context's options."""
        return await self.evaluation.evaluate(job, my_input, outputs_to_clients, outputs_to)


class EvaluateJob(PartyProgram):
    """Evaluate one :class:`sqm.mpc.protocols.backend.Job` (public part) with this party's input program (None at the
    server)."""

    def __init__(self, job, client=None, outputs_to_clients: bool = False):
        self.job, self.client, self.outputs_to_clients = job, client, outputs_to_clients

    async def run(self, ctx):
        my_input = self.client() if self.client is not None else None
        return await PartyContext.of(ctx).evaluate(self.job, my_input, self.outputs_to_clients)


__all__ = ["EvaluateJob", "PartyContext"]
