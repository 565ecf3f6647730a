"""Liveness inside a party process: lost peers, abort notices, heartbeats and idle timeouts (patches of MPyC's
message exchanger).

- A peer whose connection drops before the job is done fails every pending and future receive
  (:class:`PartyLost`).
- An abort notice (a frame on the reserved label ``ABORT_PC``) fails every pending receive with the sender's
  reason (:class:`~sqm.mpc.net.abort.PartyAborted`, or :class:`PeerSilent` when it aborted on a silent peer
  or at its connect timeout).
- Liveness during the job (:func:`keep_alive`): every party sends a 12-byte heartbeat frame (label
  ``HEARTBEAT_PC``, empty payload) to every peer every ``heartbeat`` seconds, and any bytes received from a
  peer mark it alive.  A receive pending on a peer from which nothing at all arrived for ``idle_timeout``
  seconds fails with :class:`PeerSilent` ("no message from client 2 for 25 s (stopped or partitioned?)"):
  the detecting party first sends an abort notice naming the silent peer, so parties not waiting on it
  (e.g. waiting on the server, which waits on it) stop too.  A stopped process (SIGSTOP) or a partition
  keeps its TCP connection open, so only this timeout can see it.

The connect phase: a party still connecting sends the peers it has reached heartbeats flagged
"connecting" (step 0; ``waits``: the parties not yet connected to it; :mod:`sqm.mpc.net.session`), so a party
whose own connect phase is over sees it alive: it is waited for until this party's connect timeout plus
:data:`CONNECT_GRACE_S` after this party's connect phase ended (it connected to this party before then, so an
honest one has given up its own connect phase by then, and its notice names whom it could not reach), then named.
The progress checks skip it (it is at no step).  One that stops heartbeating is named at the idle timeout; one
that sends a connecting heartbeat after one of the job's is refused.

Progress: a peer that keeps sending heartbeats but not what the step expects.  Each heartbeat
carries its sender's step (MPyC's program counter, which labels every message:
:func:`sqm.mpc.protocols.context._exchange` advances it and sends that step's messages in one synchronous block),
whether it is computing off its receive path (:func:`busy`: PSI's hashing and intersection) and the peers it is waiting
on (:func:`heartbeat_payload`).  A party waiting on peer p for a message of step k names p and aborts the job when:

- p's heartbeat reports step >= k: p went past step k without sending it (TCP keeps order, so a message p had
  sent would have arrived before that heartbeat) -- at once, exact;
- p's heartbeats are fresh, p is at an earlier step, waits on no peer, is not computing, its step has not
  moved and no message from it has arrived for ``progress_timeout`` seconds (default :data:`PROGRESS_TIMEOUT_S`);
- p says it waits on a peer q that is at or past p's step (q has sent p its message), its heartbeats fresh all
  along, for ``progress_timeout`` plus the time the largest frame (:data:`MAX_FRAME_BYTES`) takes at
  :data:`MIN_FRAME_RATE` (q's message may still be arriving at p: only p sees that link);
- a frame from p is in transit for longer than ``progress_timeout`` plus its announced size at
  :data:`MIN_FRAME_RATE` (a trickle).

Honest parties never meet these conditions: an honest party waits on q only while q is behind it, so the
wait-for chains of honest parties strictly descend in step and end at a party that is computing (its loop
blocked: no heartbeats, the idle timeout's case, or :func:`busy`) or at the deviating one.  Not detected: a
party that claims to be computing (:func:`busy`) is waited for up to the whole job's ``--timeout``.

Heartbeats come from an asyncio task, so a party whose event loop is blocked by a long local computation
(numpy on the loop's thread) sends none meanwhile: ``idle_timeout`` must exceed the longest blocking local
phase of any party.  Each party records its longest loop stall (``state["max_stall_s"]``, in its result
record as ``max_loop_stall_s``, resolution 0.25 s); the longest measured stalls, far below the default idle
timeout, are in docs/benchmarks.md ("Figures behind design choices").  A party that was named silent only because its
own loop was blocked is told so (its message suggests a longer ``--idle-timeout``).  A party whose own loop was blocked
does not blame its peers for that time: on waking, the bytes that arrived meanwhile are read before the watchdog looks
(asyncio runs I/O callbacks before due timers), and a watchdog round that woke late skips its check once.
"""
from __future__ import annotations

import asyncio
import contextlib
import struct
import time
import typing

from sqm.errors import PeerLostError, TimedOutError
from sqm.errors import UsageError

MAX_FRAME_BYTES = 256 << 20  # one frame's announced payload (the protocols send chunks of about 4 MiB)
MAX_BUFFERED_BYTES = 256 << 20  # bytes from one peer received but not yet asked for by a protocol step
IDLE_TIMEOUT_S = 25.0  # default: a stopped or partitioned peer is detected within this (plus one tick), under 30 s
HEARTBEAT_MAX_S = 5.0  # heartbeats every min(this, idle_timeout / 6) seconds
PROGRESS_TIMEOUT_S = 20.0  # default: a peer that heartbeats but does not send what the step expects is named
MIN_FRAME_RATE = 1 << 20  # bytes/s: a frame in transit must arrive within the progress timeout + size / this
_HB_HEAD = struct.Struct("<qB")  # heartbeat payload: the sender's step, its flags, then u16 pids
COMPUTING, CONNECTING = 1, 2  # a heartbeat's flags: computing off its receive path (busy); still connecting
CONNECT_GRACE_S = 5.0  # seconds beyond the connect timeout a peer still connecting is waited for (its notice's way)


def heartbeat_payload(step: int, computing: bool, waits, connecting: bool = False) -> bytes:
    """A heartbeat's payload: the sender's step, whether it is computing (:func:`busy`) or still in its connect
    phase (step 0; ``waits``: the parties not yet connected to it), the peers it waits on."""
    flags = (COMPUTING if computing else 0) | (CONNECTING if connecting else 0)
    return _HB_HEAD.pack(step, flags) + b"".join(struct.pack("<H", w) for w in sorted(waits))


def heartbeat_frame(payload: bytes) -> bytes:
    """A heartbeat as sent: an MPyC frame on the reserved label ``HEARTBEAT_PC``."""
    from sqm.mpc.net.abort import HEARTBEAT_PC

    return struct.pack("<qI", HEARTBEAT_PC, len(payload)) + payload


def read_heartbeat(payload, n_parties: int) -> tuple[int, bool, frozenset, bool]:
    """(step, computing, waits, connecting) of a heartbeat payload; ValueError naming what is wrong with a
    malformed one."""
    payload = bytes(payload)
    if len(payload) < _HB_HEAD.size or (len(payload) - _HB_HEAD.size) % 2 or \
            len(payload) > _HB_HEAD.size + 2 * n_parties:
        raise UsageError(f"a heartbeat of {len(payload)} bytes")
    step, flags = _HB_HEAD.unpack_from(payload)
    waits = frozenset(struct.unpack_from(f"<{(len(payload) - _HB_HEAD.size) // 2}H", payload, _HB_HEAD.size))
    if flags > COMPUTING | CONNECTING or flags == COMPUTING | CONNECTING or step < 0 or \
            any(w >= n_parties for w in waits) or flags & CONNECTING and step:
        raise UsageError(f"a heartbeat with flags {flags}, step {step}, waits {sorted(waits)}")
    return step, bool(flags & COMPUTING), waits, bool(flags & CONNECTING)


@contextlib.contextmanager
def busy():
    """Within this block this party computes off its receive path with its event loop free (a worker thread,
    or batches with a turn for the loop between them): its heartbeats say so, and peers waiting on it do not
    take the silence of its messages for a stall (they wait up to the job's timeout)."""
    st = _STATE
    if st is not None:
        st["busy"] = st.get("busy", 0) + 1
    try:
        yield
    finally:
        if st is not None:
            st["busy"] -= 1


class PartyLost(PeerLostError):
    """A peer's connection dropped before the job was done."""


class PeerSilent(TimedOutError):
    """Nothing at all arrived from a peer for the idle timeout while a message from it was awaited (a stopped
    or partitioned party), one stalls (the progress checks) or is still connecting past the connect deadline, or
    another party aborted the job for such a reason or at its connect timeout.  Exit code EXIT_TIMEOUT."""


def _label(pid: int) -> str:
    from sqm.mpc.net.abort import party_label
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


def raise_if_job_over() -> None:
    """Raise what a pending receive would raise now: a peer's abort notice has arrived, or a peer's connection
    dropped.  For a party that waits on something other than its peers' messages (its own shard workers,
    :mod:`sqm.mpc.protocols.shards`), so that it stops with the job."""
    st = _STATE
    if st is None or st["done"]:
        return
    if st["aborted"] is not None:
        raise st["abort_exc"](st["aborted"])
    if st["lost"]:
        peer = min(st["lost"])
        raise PartyLost(f"lost party {peer} ({_label(peer)})")


def install_loss_detection(state: dict) -> None:
    """Patch MPyC's MessageExchanger for this process: lost peers, abort notices, heartbeats, last-seen times.

    ``state`` (shared with :mod:`sqm.mpc.net.party`): ``done`` (the result is complete), ``lost`` (peers whose
    connection dropped), ``aborted`` (the first abort's message); added here: ``seen`` (peer -> monotonic
    time of the last bytes from it), ``abort_exc`` (the exception class the abort raises), ``max_stall_s``."""
    from mpyc import asyncoro

    from sqm.mpc.net.abort import ABORT_PC, HEARTBEAT_PC, PartyAborted, read_abort_notice

    global _STATE
    _STATE = state
    state.setdefault("seen", {})
    state.setdefault("abort_exc", PartyAborted)
    state.setdefault("max_stall_s", 0.0)
    state.setdefault("flooded", {})  # peers over the caps (_over_caps): their further bytes are dropped unread
    state.setdefault("peers", {})  # peer -> what its last heartbeat said (step, since, computing, waits, at)
    state.setdefault("moved", {})  # peer -> monotonic time its last whole frame other than a heartbeat arrived
    state.setdefault("transit", {})  # peer -> (announced size, since) of the frame from it now arriving
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
        fut: asyncio.Future[typing.Any]
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
        if kind == "stalled":
            abort_all(self.runtime, f"{message}; nothing released", PeerSilent)
        elif kind == "timeout":  # a peer still in its connect phase reached its connect timeout: its reason names
            # the parties it could not reach (this party was waiting for it: connect-phase heartbeats)
            abort_all(self.runtime, f"{_label(self.peer_pid)} gave up the connect phase: {reason}; nothing released",
                      PeerSilent)
        elif kind == "silent":
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
        # data_received has marked the peer alive (any bytes do); the payload says where it stands
        peer, now = self.peer_pid, time.monotonic()
        state["hb_bytes"] = state.get("hb_bytes", 0) + 12 + len(payload)
        if peer is None or state["aborted"] is not None:
            return
        try:
            step, computing, waits, connecting = read_heartbeat(payload, len(self.runtime.parties))
        except ValueError as e:
            stalled(self.runtime, peer, f"sent a malformed heartbeat ({e})", PartyAborted)
            return
        info = state["peers"].setdefault(peer, {"step": None, "claims": {}})
        if connecting:  # still in its connect phase (sqm.mpc.net.session): alive, at no step yet; waited for up to
            # the connect deadline (keep_alive).  It cannot go back there once in the job: a lie, refused
            if info["step"] is not None or peer in state["moved"]:
                stalled(self.runtime, peer, "sent a connect-phase heartbeat after its first message of the job",
                        PartyAborted)
                return
            info.update(computing=False, waits=waits, at=now, connecting=True)
            return
        info["connecting"] = False
        if info["step"] != step:
            info["step"], info["since"] = step, now
        info.update(computing=computing, waits=waits, at=now)
        skipped = [k for k, f in self.buffers.items()
                   if isinstance(f, asyncio.Future) and not f.done() and 0 <= k <= step]
        if skipped:  # its message of that step would have arrived before this heartbeat: it was never sent
            stalled(self.runtime, peer, f"went past step {min(skipped)} without sending this party its message "
                                        f"there (its heartbeat reports step {step})", PartyAborted)

    def stalled(rt, peer, why, exc_class):
        from sqm.mpc.net.abort import abort_notice

        reason = f"{_label(peer)} {why}"
        send_abort(rt, abort_notice(reason, "stalled" if exc_class is PeerSilent else "refused", party=peer))
        abort_all(rt, f"{reason}; job aborted, nothing released", exc_class)

    def data_received(self, data):
        if ABORT_PC not in self.buffers:
            self.buffers[ABORT_PC] = _Inbox(self, ABORT_PC, on_abort)
            self.buffers[HEARTBEAT_PC] = _Inbox(self, HEARTBEAT_PC, on_heartbeat)
        if self.peer_pid is not None and state["flooded"].get(self.peer_pid):
            return  # a peer over the caps: the job is aborted, its further bytes are dropped unread
        before, hb = len(self.bytes) + len(data), state.get("hb_bytes", 0)
        orig_data_received(self, data)
        if self.peer_pid is not None:
            now = state["seen"][self.peer_pid] = time.monotonic()
            consumed = before - len(self.bytes)  # whole frames handed on in this call
            if consumed > state.get("hb_bytes", 0) - hb:  # one that was no heartbeat: a message (or notice)
                state["moved"][self.peer_pid] = now
            if len(self.bytes) < 12:
                state["transit"].pop(self.peer_pid, None)
            elif consumed or self.peer_pid not in state["transit"]:  # a frame started arriving in this call
                state["transit"][self.peer_pid] = (struct.unpack_from("<qI", self.bytes)[1], now)
            over = _over_caps(self)
            if over is not None:
                state["flooded"][self.peer_pid] = True
                self.bytes = bytearray()
                for pc in [pc for pc, v in self.buffers.items() if isinstance(v, bytes)]:
                    del self.buffers[pc]
                from sqm.mpc.net.abort import abort_notice

                reason = f"{_label(self.peer_pid)} {over}"
                send_abort(self.runtime, abort_notice(reason))
                abort_all(self.runtime, f"{reason}; job aborted, nothing released", PartyAborted)

    state["abort_all"] = abort_all
    state["stalled"] = stalled
    asyncoro.MessageExchanger.connection_lost = connection_lost
    asyncoro.MessageExchanger.receive = receive
    asyncoro.MessageExchanger.data_received = data_received


def _over_caps(proto) -> str | None:
    """Why one peer's connection is over the caps (None when it is not): a frame announcing more than
    :data:`MAX_FRAME_BYTES`, or more than :data:`MAX_BUFFERED_BYTES` received and not yet asked for."""
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


def start_keep_alive(rt, state: dict, idle_timeout: float = IDLE_TIMEOUT_S,
                     progress_timeout: float = PROGRESS_TIMEOUT_S,
                     connect_timeout: float | None = None) -> asyncio.Task | None:
    """Start the heartbeat, idle-timeout and progress task (right after this party's connect phase; it stops by
    itself once ``state['done']``).  ``idle_timeout`` <= 0 or None disables it (receives then wait for the
    whole-job timeout); ``progress_timeout`` <= 0 or None disables the progress checks alone.  A peer whose
    heartbeats say it is still connecting is waited for until ``connect_timeout`` (this party's) plus
    :data:`CONNECT_GRACE_S` from now: it connected to this party before now, so an honest one gives up its own
    connect phase, and says so, before then (None: up to the job's timeout)."""
    if not idle_timeout or idle_timeout <= 0:
        return None
    state["progress_timeout"] = float(progress_timeout) if progress_timeout and progress_timeout > 0 else None
    state["connect_timeout"] = float(connect_timeout) if connect_timeout and connect_timeout > 0 else None
    state["connect_deadline"] = (time.monotonic() + state["connect_timeout"] + CONNECT_GRACE_S
                                 if state["connect_timeout"] else float("inf"))
    return asyncio.ensure_future(keep_alive(rt, state, float(idle_timeout)))


def _waiting(proto) -> bool:
    return any(isinstance(f, asyncio.Future) and not f.done() for f in proto.buffers.values())


def no_progress(rt, state: dict, pid: int, now: float, limit: float, fresh: float) -> tuple[str, type] | None:
    """Why peer ``pid``, whose message this party awaits, is stalling (a reason and the exception class), or None
    (see the module docstring).  ``fresh``: the age beyond which a heartbeat no longer says where the peer is."""
    from sqm.mpc.net.abort import PartyAborted

    transit = state["transit"].get(pid)
    if transit is not None:
        size, since = transit
        allowed = limit + size / MIN_FRAME_RATE
        if now - since > allowed:
            return (f"has been sending a frame of {size:,} bytes for {now - since:.0f} s (allowed {allowed:.0f} s at "
                    f"{MIN_FRAME_RATE >> 20} MiB/s after {limit:g} s)", PeerSilent)
        return None  # its heartbeats are behind that frame
    info = state["peers"].get(pid)
    if info is None or info["step"] is None or now - info["at"] > fresh or info["computing"] \
            or now - state["moved"].get(pid, info["since"]) <= limit:
        if info is not None:
            info["claims"].clear()
        return None
    if not info["waits"] and now - info["since"] > limit:
        return (f"has sent heartbeats but no message for {limit:g} s: it is at step {info['step']}, waits on no party "
                f"and is not computing", PeerSilent)
    for q in info["waits"]:
        q_step = rt._program_counter[0] if q == rt.pid else state["peers"].get(q, {}).get("step")
        if q_step is None or q_step < info["step"]:
            info["claims"].pop(q, None)
            continue
        first = info["claims"].setdefault(q, now)
        if now - first > limit + MAX_FRAME_BYTES / MIN_FRAME_RATE:  # q's message may be a frame still in transit
            return (f"has said for {now - first:.0f} s that it waits on {_label(q)}, which is past that step (step "
                    f"{q_step}, its message to it sent): it does not go on", PartyAborted)
    return None


async def keep_alive(rt, state: dict, idle_timeout: float) -> None:
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
            peers = list(_connected(rt))
            beat = heartbeat_frame(heartbeat_payload(rt._program_counter[0], state.get("busy", 0) > 0,
                                                     [pid for pid, proto in peers if _waiting(proto)]))
            for _, proto in peers:
                tr = proto.transport
                if tr is not None and not tr.is_closing():
                    tr.write(beat)  # not counted in nbytes_sent: protocol byte figures stay the protocol's
        skipped = stall >= tick and not skipped  # a round that woke late skips its check once: our own loop
        if not skipped:  # was blocked, and the bytes that arrived meanwhile are read before the next round
            limit = state.get("progress_timeout")
            for pid, proto in list(_connected(rt)):
                waiting = _waiting(proto)
                silence = now - state["seen"].get(pid, now)
                if waiting and silence > idle_timeout:
                    declare_silent(rt, state, pid, idle_timeout)
                    return
                late = still_connecting(state, pid, now) if waiting else None
                if late is not None:
                    state["stalled"](rt, pid, late, PeerSilent)
                    return
                stalling = no_progress(rt, state, pid, now, limit, 2 * period + 2 * tick) if waiting and limit else None
                if stalling is not None:
                    state["stalled"](rt, pid, *stalling)
                    return
        wake = time.monotonic() + tick
        await asyncio.sleep(tick)


def still_connecting(state: dict, pid: int, now: float) -> str | None:
    """Why peer ``pid``, whose message this party awaits, is named for being still in its connect phase (None: it
    is not, or its connect deadline has not passed; see :func:`start_keep_alive`)."""
    info = state["peers"].get(pid)
    if info is None or not info.get("connecting") or now <= state.get("connect_deadline", float("inf")):
        return None
    waits = ", ".join(_label(q) for q in sorted(info["waits"])) or "no party"
    waited = state["connect_timeout"] + CONNECT_GRACE_S
    return (f"still says it is connecting (not yet connected to {waits}) {waited:g} s after this party connected "
            f"to it, past the connect timeout ({state['connect_timeout']:g} s at this party)")


def declare_silent(rt, state: dict, pid: int, idle_timeout: float) -> None:
    """Abort the job on a silent peer: tell every connected peer why, then fail every pending receive."""
    from sqm.mpc.net.abort import abort_notice

    reason = f"no message from {_label(pid)} for {idle_timeout:g} s (stopped or partitioned?)"
    # every connected peer, the silent one too: if only its loop was blocked, it learns why
    send_abort(rt, abort_notice(reason, "silent", party=pid))
    state["abort_all"](rt, f"{reason}; job aborted, nothing released", PeerSilent)


def send_abort(rt, frame: bytes) -> None:
    """Send an abort notice (:func:`sqm.mpc.net.abort.abort_notice`) to every connected peer."""
    from sqm.mpc.net.abort import ABORT_PC

    for _, proto in _connected(rt):
        if proto.transport is not None and not proto.transport.is_closing():
            with contextlib.suppress(Exception):  # a closed connection: that peer is gone anyway
                proto.send(ABORT_PC, frame)
