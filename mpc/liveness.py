"""Detecting lost and aborting peers inside a party process (patches of MPyC's message exchanger)."""
from __future__ import annotations

import asyncio


class PartyLost(RuntimeError):
    """A peer's connection dropped before the job was done."""


def install_loss_detection(state: dict) -> None:
    """A peer whose connection drops before the job is done fails every pending and future receive."""
    from mpyc import asyncoro

    from . import wire
    from .protocol import ABORT_PC, PartyAborted, party_label

    orig_receive = asyncoro.MessageExchanger.receive

    def fail(fut, peer):
        if not fut.done():
            fut.set_exception(PartyLost(f"lost party {peer} ({'server' if peer == 0 else f'client {peer}'})"))

    def connection_lost(self, exc):
        peer = self.peer_pid
        if not state["done"]:
            state["lost"].add(peer)
            for fut in list(self.buffers.values()):
                if isinstance(fut, asyncio.Future):
                    fail(fut, peer)
            return
        self.runtime.unset_protocol(peer)

    def receive(self, pc):
        if state["aborted"] is not None:
            fut = asyncio.Future(loop=self.runtime._loop)
            fut.set_exception(PartyAborted(state["aborted"]))
            return fut
        if self.peer_pid in state["lost"]:
            fut = asyncio.Future(loop=self.runtime._loop)
            fail(fut, self.peer_pid)
            return fut
        return orig_receive(self, pc)

    def data_received(self, data):
        orig_data_received(self, data)
        notice = self.buffers.pop(ABORT_PC, None)
        if notice is None or state["aborted"] is not None:
            return
        try:
            reason = wire.decode(notice)["abort"]
            reason = "".join(c if c.isprintable() else "?" for c in str(reason))[:500]
        except Exception:  # noqa: BLE001  (a malformed notice is still an abort)
            reason = "(an unreadable abort notice)"
        state["aborted"] = f"{party_label(self.peer_pid).capitalize()} aborted the job: {reason}"
        for peer in self.runtime.parties:  # every pending receive fails: the job is over
            proto = peer.protocol
            if proto is not None and not isinstance(proto, asyncio.Future):
                for fut in list(proto.buffers.values()):
                    if isinstance(fut, asyncio.Future) and not fut.done():
                        fut.set_exception(PartyAborted(state["aborted"]))

    orig_data_received = asyncoro.MessageExchanger.data_received
    asyncoro.MessageExchanger.connection_lost = connection_lost
    asyncoro.MessageExchanger.receive = receive
    asyncoro.MessageExchanger.data_received = data_received
