"""Liveness inside a party process: lost peers, abort notices, heartbeats and idle timeouts (patches of MPyC's
message exchanger).

- A peer whose connection drops before the job is done fails every pending and future receive
  (:class:`PartyLost`).
- An abort notice (a frame on the reserved label ``ABORT_PC``) fails every pending receive with the sender's
  reason (:class:`~mpc.protocol.PartyAborted`, or :class:`PeerSilent` when it aborted on a silent peer).
- Liveness during the job (:func:`keep_alive`): every party sends a 12-byte heartbeat frame (label
  ``HEARTBEAT_PC``, empty payload) to every peer every ``heartbeat`` seconds, and any bytes received from a
  peer mark it alive.  A receive pending on a peer from which nothing at all arrived for ``idle_timeout``
  seconds fails with :class:`PeerSilent` ("no message from client 2 for 25 s (stopped or partitioned?)"):
  the detecting party first sends an abort notice naming the silent peer, so parties not waiting on it
  (e.g. waiting on the server, which waits on it) stop too.  A stopped process (SIGSTOP) or a partition
  keeps its TCP connection open, so only this timeout can see it.

Heartbeats come from an asyncio task, so a party whose event loop is blocked by a long local computation
(numpy on the loop's thread) sends none meanwhile: ``idle_timeout`` must exceed the longest blocking local
phase of any party.  Each party records its longest loop stall (``state["max_stall_s"]``, in its result
record as ``max_loop_stall_s``, resolution 0.25 s).  At the KDDCUP shape (``sqm bench bgw-cost --rows 195666
--cols 117``, 3 parties on a 2-core machine under load) the longest is a client's input sharing (Shamir shares
of its 195,666 x 58 block, their encoding and first writes: 2.2-3.7 s), the server's 1.2-1.5 s: far below the
25 s default.  A party that was named silent only because its own loop was blocked is told so (its message
suggests a longer ``--idle-timeout``).  A party whose own loop was blocked does not blame its peers for that time: on waking, the
bytes that arrived meanwhile are read before the watchdog looks (asyncio runs I/O callbacks before due
timers), and a watchdog round that woke late skips its check once.
"""
from __future__ import annotations

import asyncio
import time

MAX_FRAME_BYTES = 256 << 20  # one frame's announced payload (the protocols send chunks of about 4 MiB)
MAX_BUFFERED_BYTES = 256 << 20  # bytes from one peer received but not yet asked for by a protocol step
IDLE_TIMEOUT_S = 25.0  # default: a stopped or partitioned peer is detected within this (plus one tick), under 30 s
HEARTBEAT_MAX_S = 5.0  # heartbeats every min(this, idle_timeout / 6) seconds


class PartyLost(RuntimeError):
    """A peer's connection dropped before the job was done."""


class PeerSilent(TimeoutError):
    """Nothing at all arrived from a peer for the idle timeout while a message from it was awaited (a stopped
    or partitioned party), or another party aborted the job for that reason.  Exit code EXIT_TIMEOUT."""


def _label(pid: int) -> str:
    from .protocol import party_label
    return party_label(pid)


def _fail_pending(proto, exc_factory) -> None:
    """Fail (and drop) every receive pending on one peer connection: a frame arriving later for the same label
    is then buffered, never handed to a finished future."""
    for pc, fut in list(proto.buffers.items()):
        if isinstance(fut, asyncio.Future):
            del proto.buffers[pc]
            if not fut.done():
                fut.set_exception(exc_factory())


def _connected(rt):
    """The protocol objects of the peers this party is connected to."""
    for peer in rt.parties:
        proto = peer.protocol
        if peer.pid != rt.pid and proto is not None and not isinstance(proto, asyncio.Future):
            yield peer.pid, proto


class _Inbox:
    """Stands in ``MessageExchanger.buffers`` under a reserved label.  MPyC hands a frame to whatever waits
    under its label (``buffers.pop(pc).set_result(payload)``): the inbox handles the frame and puts itself
    back, so any number of heartbeats or notices in one read are all handled."""

    __slots__ = ("proto", "label", "handle")

    def __init__(self, proto, label, handle):
        self.proto, self.label, self.handle = proto, label, handle

    def set_result(self, payload):
        self.proto.buffers[self.label] = self
        self.handle(self.proto, payload)


_STATE: dict | None = None  # this process's liveness state, once install_loss_detection ran (party processes)


def raise_if_aborted() -> None:
    """Raise a silent-peer abort (before this party's result is complete) even for an exchange whose messages
    all arrived before the notice: the aborting party gave up waiting (maybe on this party, whose own loop
    was blocked), so no party may go on to a result.  (After a refusal the refusing party sends nothing
    more, so no party gets past it; the others still finish their own checks and name what they find.)"""
    st = _STATE
    if st is not None and st["abort_exc"] is PeerSilent and st["aborted"] is not None and not st["done"]:
        raise PeerSilent(st["aborted"])


def install_loss_detection(state: dict) -> None:
    """Patch MPyC's MessageExchanger for this process: lost peers, abort notices, heartbeats, last-seen times.

    ``state`` (shared with :mod:`mpc.party`): ``done`` (the result is complete), ``lost`` (peers whose
    connection dropped), ``aborted`` (the first abort's message); added here: ``seen`` (peer -> monotonic
    time of the last bytes from it), ``abort_exc`` (the exception class the abort raises), ``max_stall_s``."""
    from mpyc import asyncoro

    from .protocol import ABORT_PC, HEARTBEAT_PC, PartyAborted, read_abort_notice

    global _STATE
    _STATE = state
    state.setdefault("seen", {})
    state.setdefault("abort_exc", PartyAborted)
    state.setdefault("max_stall_s", 0.0)
    state.setdefault("flooded", {})  # peers over the caps (_over_caps): their further bytes are dropped unread
    orig_receive = asyncoro.MessageExchanger.receive
    orig_data_received = asyncoro.MessageExchanger.data_received

    def lost(peer):
        return PartyLost(f"lost party {peer} ({'server' if peer == 0 else f'client {peer}'})")

    def connection_lost(self, exc):
        peer = self.peer_pid
        if not state["done"]:
            state["lost"].add(peer)
            _fail_pending(self, lambda: lost(peer))
            return
        self.runtime.unset_protocol(peer)

    def receive(self, pc):
        if state["aborted"] is not None:
            fut = asyncio.Future(loop=self.runtime._loop)
            fut.set_exception(state["abort_exc"](state["aborted"]))
            return fut
        if self.peer_pid in state["lost"]:
            fut = asyncio.Future(loop=self.runtime._loop)
            fut.set_exception(lost(self.peer_pid))
            return fut
        return orig_receive(self, pc)

    def on_abort(self, payload):
        if state["aborted"] is not None:
            return
        notice = read_abort_notice(payload)
        reason, kind, silent = notice["abort"], notice["kind"], notice["party"]
        message = f"{_label(self.peer_pid).capitalize()} aborted the job: {reason}"
        if kind == "silent":
            blocked = time.monotonic() - state.get("tick_at", time.monotonic())
            if silent == self.runtime.pid and blocked > state.get("idle_timeout", IDLE_TIMEOUT_S) / 2:
                message += (f" (this party's own event loop was blocked for {blocked:.0f} s by local computation: "
                            f"with a longer --idle-timeout it would have been waited for)")
            abort_all(self.runtime, f"{message}; nothing released", PeerSilent)
        else:
            abort_all(self.runtime, message, PartyAborted)

    def abort_all(rt, message, exc_class):
        state["aborted"], state["abort_exc"] = message, exc_class
        for _, proto in _connected(rt):  # every pending receive fails: the job is over
            _fail_pending(proto, lambda: exc_class(message))

    def on_heartbeat(self, payload):
        pass  # data_received has marked the peer alive: any bytes do

    def data_received(self, data):
        if ABORT_PC not in self.buffers:
            self.buffers[ABORT_PC] = _Inbox(self, ABORT_PC, on_abort)
            self.buffers[HEARTBEAT_PC] = _Inbox(self, HEARTBEAT_PC, on_heartbeat)
        if self.peer_pid is not None and state["flooded"].get(self.peer_pid):
            return  # a peer over the caps: the job is aborted, its further bytes are dropped unread
        orig_data_received(self, data)
        if self.peer_pid is not None:
            state["seen"][self.peer_pid] = time.monotonic()
            over = _over_caps(self)
            if over is not None:
                state["flooded"][self.peer_pid] = True
                self.bytes = bytearray()
                for pc in [pc for pc, v in self.buffers.items() if isinstance(v, bytes)]:
                    del self.buffers[pc]
                from .protocol import abort_notice

                reason = f"{_label(self.peer_pid)} {over}"
                send_abort(self.runtime, abort_notice(reason))
                abort_all(self.runtime, f"{reason}; job aborted, nothing released", PartyAborted)

    state["abort_all"] = abort_all
    asyncoro.MessageExchanger.connection_lost = connection_lost
    asyncoro.MessageExchanger.receive = receive
    asyncoro.MessageExchanger.data_received = data_received


def _over_caps(proto) -> str | None:
    """Why one peer's connection is over the caps (None when it is not): a frame announcing more than
    :data:`MAX_FRAME_BYTES`, or more than :data:`MAX_BUFFERED_BYTES` received and not yet asked for."""
    import struct

    if len(proto.bytes) >= 12:
        _, size = struct.unpack_from("<qI", proto.bytes)
        if size > MAX_FRAME_BYTES:
            return f"announced a frame of {size:,} bytes (the cap is {MAX_FRAME_BYTES:,})"
    buffered = len(proto.bytes) + sum(len(v) for v in proto.buffers.values() if isinstance(v, bytes))
    if buffered > MAX_BUFFERED_BYTES:
        return (f"sent {buffered:,} bytes that no step has asked for (the cap is {MAX_BUFFERED_BYTES:,}): a "
                f"flood")
    return None


def heartbeat_period(idle_timeout: float) -> float:
    return min(HEARTBEAT_MAX_S, idle_timeout / 6)


def start_keep_alive(rt, state: dict, idle_timeout: float = IDLE_TIMEOUT_S) -> asyncio.Task | None:
    """Start the heartbeat and idle-timeout task (after connecting; it stops by itself once ``state['done']``).
    ``idle_timeout`` <= 0 or None disables it (receives then wait for the whole-job timeout)."""
    if not idle_timeout or idle_timeout <= 0:
        return None
    return asyncio.ensure_future(keep_alive(rt, state, float(idle_timeout)))


async def keep_alive(rt, state: dict, idle_timeout: float) -> None:
    from .protocol import HEARTBEAT_PC

    import struct
    beat = struct.pack("<qI", HEARTBEAT_PC, 0)  # MPyC's frame header with an empty payload
    period = heartbeat_period(idle_timeout)
    tick = min(0.25, period)  # also the resolution of max_stall_s
    now = time.monotonic()
    for pid, _ in _connected(rt):
        state["seen"].setdefault(pid, now)
    last_beat = -float("inf")
    wake, skipped = now, False
    state["idle_timeout"] = idle_timeout
    while not state["done"] and state["aborted"] is None:
        now = state["tick_at"] = time.monotonic()
        stall = now - wake  # how late this round is: this party's loop was blocked that long
        state["max_stall_s"] = max(state["max_stall_s"], stall)
        if now - last_beat >= period:
            last_beat = now
            for _, proto in _connected(rt):
                tr = proto.transport
                if tr is not None and not tr.is_closing():
                    tr.write(beat)  # not counted in nbytes_sent: protocol byte figures stay the protocol's
        skipped = stall >= tick and not skipped  # a round that woke late skips its check once: our own loop
        if not skipped:  # was blocked, and the bytes that arrived meanwhile are read before the next round
            for pid, proto in list(_connected(rt)):
                waiting = any(isinstance(f, asyncio.Future) and not f.done() for f in proto.buffers.values())
                silence = now - state["seen"].get(pid, now)
                if waiting and silence > idle_timeout:
                    declare_silent(rt, state, pid, idle_timeout)
                    return
        wake = time.monotonic() + tick
        await asyncio.sleep(tick)


def declare_silent(rt, state: dict, pid: int, idle_timeout: float) -> None:
    """Abort the job on a silent peer: tell every connected peer why, then fail every pending receive."""
    from .protocol import abort_notice

    reason = f"no message from {_label(pid)} for {idle_timeout:g} s (stopped or partitioned?)"
    # every connected peer, the silent one too: if only its loop was blocked, it learns why
    send_abort(rt, abort_notice(reason, "silent", party=pid))
    state["abort_all"](rt, f"{reason}; job aborted, nothing released", PeerSilent)


def send_abort(rt, frame: bytes) -> None:
    """Send an abort notice (:func:`mpc.protocol.abort_notice`) to every connected peer."""
    from .protocol import ABORT_PC

    for _, proto in _connected(rt):
        if proto.transport is not None and not proto.transport.is_closing():
            try:
                proto.send(ABORT_PC, frame)
            except Exception:  # noqa: BLE001  (a closed connection: that peer is gone anyway)
                pass
