"""The fault benches' probe, inside a party process: :class:`Probe` wraps the target's program, writes the step
name of each exchange to a marker file and, at the chosen step, holds the party (event loop running) until the
bench has applied its fault, or applies an insider's deviation itself (:func:`misbehave`).

Shared by the fault-injection cases (:mod:`bench.faults`), the trust attacks (:mod:`bench.attacks`) and the
tests that hold a party at one step; it imports neither bench module.  A party process unpickles the probe, so this
module imports only what a party needs.
"""
from __future__ import annotations

import asyncio
import os
import time

from sqm.mpc.net.party import PartyProgram

HOLD_MAX_S = 30.0  # the probe lets the target go on after this long even if the bench never acted


class Probe(PartyProgram):
    """BENCH ONLY: runs ``inner`` and appends the step name of each exchange to ``marker``; at the first
    exchange named ``hold_step`` it writes ``HOLD <step>`` and waits until the file ``go`` exists (or
    ``HOLD_MAX_S``), so the bench can apply a fault while this party is at that step."""

    def __init__(self, inner: PartyProgram, marker: str, hold_step: str | None = None, go: str | None = None,
                 misbehave: str | None = None, raw: bytes = b""):
        self.inner, self.marker, self.hold_step, self.go = inner, marker, hold_step, go
        self.misbehave = misbehave  # an insider's deviation at hold_step (see bench.faults.FAULTS and misbehave)
        self.raw = raw  # "malformed": the frame it sends instead of its message

    async def run(self, ctx):
        send_recv, held = ctx.send_recv, []

        async def probed(outgoing, senders, expect, step="message"):
            with open(self.marker, "a") as f:
                f.write(step + "\n")
            if step == self.hold_step and not held:
                held.append(step)
                with open(self.marker, "a") as f:
                    f.write(f"HOLD {step}\n")
                t0 = time.monotonic()
                while not os.path.exists(self.go) and time.monotonic() - t0 < HOLD_MAX_S:
                    await asyncio.sleep(0.01)
                if self.misbehave in ("huge-frame", "flood"):
                    misbehave(ctx, self.misbehave)
                elif self.misbehave in ("stall", "skip", "malformed"):
                    # heartbeats go on (the loop is free); "stall": it never starts the step; "skip": it starts it
                    # (its step counter moves on) but sends nothing; "malformed": it sends a bad frame instead
                    if self.misbehave == "malformed":
                        await ctx._transport({k: self.raw for k in outgoing if k != ctx.pid}, [])
                    elif self.misbehave == "skip":
                        ctx.rt._program_counter[0] += 1
                    from sqm.mpc.net import liveness

                    st = liveness._STATE  # until the others abort the job (or leave): then this party fails too
                    while st is not None and st["aborted"] is None and not st["lost"]:
                        await asyncio.sleep(0.05)
                    if st is not None and st["aborted"] is not None:
                        raise st["abort_exc"](st["aborted"])
                    raise liveness.PartyLost("the others left")
            return await send_recv(outgoing, senders, expect, step)

        ctx.send_recv = probed
        return await self.inner.run(ctx)


def misbehave(ctx, how: str) -> None:
    """BENCH ONLY: an insider (a party with valid keys) writes raw MPyC frames to every peer: a header
    announcing a 4 GiB frame ("huge-frame"), or 300 MiB of 4 MiB frames on labels no step asks for ("flood")."""
    import struct

    for party in ctx.rt.parties:
        proto = getattr(party, "protocol", None)
        if party.pid == ctx.pid or proto is None or proto.transport is None:
            continue
        if how == "huge-frame":
            proto.transport.write(struct.pack("<qI", 987_654_321, 0xFFFFFFFF) + b"\0" * 64)
        elif how == "flood":
            chunk = b"\0" * (4 << 20)
            for k in range(75):
                proto.transport.write(struct.pack("<qI", 987_000_000 + k, len(chunk)) + chunk)
