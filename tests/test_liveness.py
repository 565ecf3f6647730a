"""Liveness during a job (sqm.mpc.net.liveness): heartbeats keep a slow but alive party in the job, a stopped party
(SIGSTOP: its TCP connections stay open) is detected by the idle timeout and every other party exits naming it.

The real-process tests use a short idle timeout (3-4 s) to stay fast; the default (30 s) is the same code."""
import asyncio
import os
import signal
import struct
import threading
import time
from types import SimpleNamespace

import pytest

from sqm.mpc.net import wire
from sqm.errors import EXIT_TIMEOUT
from sqm.mpc.net.launch import MPCError, run_parties
from sqm.mpc.net.liveness import heartbeat_period
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.net.abort import ABORT_PC, HEARTBEAT_PC


# ----- in one process: the patched message exchanger and the watchdog, on fake connections ----------------
class FakeTransport:
    def __init__(self):
        self.out = bytearray()

    def write(self, data):
        self.out += data

    def writelines(self, parts):
        for p in parts:
            self.write(p)

    def is_closing(self):
        return False


def frame(pc, payload=b""):
    return struct.pack(f"<qI{len(payload)}s", pc, len(payload), payload)


def beat(step=0, computing=False, waits=()):
    """A heartbeat frame: the sender at ``step``, waiting on ``waits``."""
    from sqm.mpc.net.liveness import heartbeat_payload

    return frame(HEARTBEAT_PC, heartbeat_payload(step, computing, waits))


def frames(data):
    """(label, payload) of every frame in a byte stream written by MessageExchanger.send or a heartbeat."""
    out, data = [], bytes(data)
    while data:
        pc, n = struct.unpack_from("<qI", data)
        out.append((pc, data[12:12 + n]))
        data = data[12 + n:]
    return out


@pytest.fixture
def patched(monkeypatch):
    """install_loss_detection on MPyC's MessageExchanger, undone after the test; two fake peers (1 and 2)."""
    from mpyc import asyncoro

    from sqm.mpc.net import liveness
    from sqm.mpc.net.liveness import install_loss_detection

    monkeypatch.setattr(liveness, "_STATE", None)
    for name in ("receive", "data_received", "connection_lost"):
        monkeypatch.setattr(asyncoro.MessageExchanger, name, getattr(asyncoro.MessageExchanger, name))
    state = {"done": False, "lost": set(), "aborted": None}
    install_loss_detection(state)

    def make(loop):
        rt = SimpleNamespace(pid=0, _loop=loop, parties=[SimpleNamespace(pid=0, protocol=None)], _program_counter=[0])
        for peer in (1, 2):
            proto = asyncoro.MessageExchanger(rt, peer)
            proto.transport = FakeTransport()
            rt.parties.append(SimpleNamespace(pid=peer, protocol=proto))
        return rt
    return state, make


def test_heartbeats_and_notices_in_one_read_are_all_handled(patched):
    from sqm.mpc.net.liveness import PeerSilent

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1 = rt.parties[1].protocol
        waiting = p1.receive(7)
        t_before = time.monotonic()
        # three heartbeats, a data frame, two more heartbeats in one read: MPyC alone fails on the 2nd heartbeat
        p1.data_received(beat() * 3 + frame(5, b"abc") + beat() * 2)
        assert p1.buffers[5] == b"abc" and not waiting.done()
        assert state["seen"][1] >= t_before  # the bytes marked peer 1 alive (no upper time bound: load-proof)
        notice = wire.encode({"abort": "no message from client 2 for 30 s (stopped or partitioned?)",
                              "kind": "silent"})
        p1.data_received(frame(ABORT_PC, notice) + frame(ABORT_PC, wire.encode({"abort": "later"})) + frame(7, b"x"))
        with pytest.raises(PeerSilent, match=r"Client 1 aborted the job: no message from client 2 for 30 s"):
            await waiting
        with pytest.raises(PeerSilent, match="client 2"):  # and every later receive
            await rt.parties[2].protocol.receive(8)
        assert "later" not in state["aborted"]  # the first notice names the cause
        from sqm.mpc.net.liveness import raise_if_aborted
        with pytest.raises(PeerSilent, match="client 2"):  # an exchange whose messages all came first fails too
            raise_if_aborted()

    asyncio.run(main())


def test_watchdog_names_the_silent_peer_and_tells_the_others(patched):
    from sqm.mpc.net.liveness import PeerSilent, keep_alive

    state, make = patched
    idle = 0.6

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1, f2 = p1.receive(3), p2.receive(3)
        watchdog = asyncio.ensure_future(keep_alive(rt, state, idle))
        t0 = time.monotonic()
        for _ in range(100_000):  # peer 1 keeps sending heartbeats, peer 2 sends nothing (a hang guard, not a clock)
            if f2.done():
                break
            p1.data_received(beat())
            await asyncio.sleep(0.05)
        assert f2.done(), "the silent peer was not detected"
        assert time.monotonic() - t0 > idle  # not before the idle timeout (a lower bound no load can break)
        await watchdog
        with pytest.raises(PeerSilent, match=r"^no message from client 2 for 0.6 s \(stopped or partitioned\?\)"):
            f2.result()
        with pytest.raises(PeerSilent, match="client 2"):
            f1.result()
        sent1, sent2 = frames(p1.transport.out), frames(p2.transport.out)
        from sqm.mpc.net.liveness import read_heartbeat
        for sent in (sent1, sent2):  # heartbeats to both: this party at step 0, waiting on both
            assert (0, False, {1, 2}, False) in [read_heartbeat(p, 3) for pc, p in sent if pc == HEARTBEAT_PC]
        notice = {"abort": "no message from client 2 for 0.6 s (stopped or partitioned?)", "kind": "silent", "party": 2}
        for sent in (sent1, sent2):  # the silent one too (if only its loop was blocked, it learns why)
            assert [wire.decode(p) for pc, p in sent if pc == ABORT_PC] == [notice]

    asyncio.run(main())


def test_a_party_named_silent_because_its_own_loop_was_blocked_is_told_so(patched):
    from sqm.mpc.net.liveness import PeerSilent

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        state["idle_timeout"], state["tick_at"] = 4.0, time.monotonic() - 9.0  # our watchdog last ran 9 s ago
        waiting = rt.parties[1].protocol.receive(3)
        notice = {"abort": "no message from the server (party 0) for 4 s (stopped or partitioned?)", "kind": "silent",
                  "party": 0}
        rt.parties[1].protocol.data_received(frame(ABORT_PC, wire.encode(notice)))
        with pytest.raises(PeerSilent, match=r"for 4 s \(stopped or partitioned\?\) \(this party's own event loop "
                                             r"was blocked for 9 s by local computation"):
            await waiting

    asyncio.run(main())


def test_watchdog_keeps_live_peers(patched):
    from sqm.mpc.net.liveness import keep_alive

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1, f2 = p1.receive(3), p2.receive(3)
        watchdog = asyncio.ensure_future(keep_alive(rt, state, 0.6))
        for _ in range(30):  # 1.5 s, 2.5 idle timeouts: both peers send heartbeats
            p1.data_received(beat())
            p2.data_received(beat())
            await asyncio.sleep(0.05)
        time.sleep(1.0)  # this party's own loop blocked beyond the idle timeout: the peers' bytes are waiting
        p1.data_received(beat())  # (what asyncio reads first on waking)
        p2.data_received(beat())
        await asyncio.sleep(0.3)
        assert not f1.done() and not f2.done() and state["aborted"] is None
        assert state["max_stall_s"] > 0.7  # the blocked second was measured
        state["done"] = True
        await watchdog

    asyncio.run(main())


# ----- progress: a peer that heartbeats but does not send what the step expects (issue 25) -------------------


def _watch(state, rt, idle=0.6, progress=1.0):
    from sqm.mpc.net.liveness import keep_alive

    state["progress_timeout"] = progress
    return asyncio.ensure_future(keep_alive(rt, state, idle))


def _notices(proto):
    return [wire.decode(p) for pc, p in frames(proto.transport.out) if pc == ABORT_PC]


def test_a_peer_past_the_step_without_its_message_is_named_at_once(patched):
    """Its heartbeat reports the awaited step: its message of that step would have come first (TCP keeps
    order), so it skipped it.  No timer is involved."""
    from sqm.mpc.net.abort import PartyAborted

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1 = p1.receive(3)
        p1.data_received(beat(step=2, waits=[2]))  # behind: nothing to say yet
        assert not f1.done()
        p1.data_received(beat(step=3))
        with pytest.raises(PartyAborted, match=r"^client 1 went past step 3 without sending this party its message "
                                               r"there \(its heartbeat reports step 3\)"):
            await f1
        assert _notices(p2) == [{"abort": "client 1 went past step 3 without sending this party its message there "
                                          "(its heartbeat reports step 3)", "kind": "refused", "party": 1}]

    asyncio.run(main())


def test_a_peer_that_heartbeats_but_sends_nothing_is_named(patched):
    """Client 1 stays at step 2, waits on nobody and does not compute, heartbeating; client 2 (at step 3,
    waiting on client 1, which is behind it: honest) is not blamed."""
    from sqm.mpc.net.liveness import PeerSilent

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        rt._program_counter[0] = 3
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1 = p1.receive(3)  # (nothing from client 2: at step 3 it has sent its message of step 3)
        watchdog = _watch(state, rt)
        t0 = time.monotonic()
        for _ in range(100_000):  # a hang guard, not a clock
            if f1.done():
                break
            p1.data_received(beat(step=2))
            p2.data_received(beat(step=3, waits=[1]))
            await asyncio.sleep(0.05)
        await watchdog
        assert time.monotonic() - t0 > 1.0  # not before the progress timeout
        with pytest.raises(PeerSilent, match=r"^client 1 has sent heartbeats but no message for 1 s: it is at step 2, "
                                             r"waits on no party and is not computing; job aborted"):
            f1.result()
        assert [n["party"] for n in _notices(p2)] == [1]

    asyncio.run(main())


def test_a_computing_peer_and_a_frame_arriving_are_waited_for(patched):
    """A peer that says it computes (sqm.mpc.net.liveness.busy), and one whose frame keeps arriving at a good rate, are
    not taken for stalling for several progress timeouts."""
    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1, f2 = p1.receive(3), p2.receive(3)
        watchdog = _watch(state, rt, progress=0.5)
        p2.data_received(struct.pack("<qI", 3, 4 << 20))  # a 4 MiB frame: allowed 0.5 + 4 s
        for _ in range(40):  # 2 s: four progress timeouts
            p1.data_received(beat(step=2, computing=True))
            p2.data_received(b"\0" * 1000)
            await asyncio.sleep(0.05)
        assert not f1.done() and not f2.done() and state["aborted"] is None
        state["done"] = True
        await watchdog

    asyncio.run(main())


def test_a_trickled_frame_and_a_false_wait_are_named(patched, monkeypatch):
    from sqm.mpc.net import liveness
    from sqm.mpc.net.liveness import PeerSilent
    from sqm.mpc.net.abort import PartyAborted

    state, make = patched
    monkeypatch.setattr(liveness, "MAX_FRAME_BYTES", 1 << 19)  # a false wait is named after 0.5 + 0.5 s here

    async def main():  # client 2 trickles a 1,000-byte frame one byte at a time
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f2 = p2.receive(3)
        watchdog = _watch(state, rt, progress=0.5)
        p2.data_received(struct.pack("<qI", 3, 1000))
        for _ in range(100_000):
            if f2.done():
                break
            p2.data_received(b"\0")
            p1.data_received(beat(step=3))
            await asyncio.sleep(0.05)
        await watchdog
        with pytest.raises(PeerSilent, match=r"^client 2 has been sending a frame of 1,000 bytes for \d+ s"):
            f2.result()

    asyncio.run(main())
    state.update(aborted=None, peers={}, moved={}, transit={})

    async def lying():  # client 1 says it waits on client 2, which is past client 1's step
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1 = p1.receive(3)
        watchdog = _watch(state, rt, progress=0.5)
        for _ in range(100_000):
            if f1.done():
                break
            p1.data_received(beat(step=2, waits=[2]))
            p2.data_received(beat(step=4))
            await asyncio.sleep(0.05)
        await watchdog
        with pytest.raises(PartyAborted, match=r"^client 1 has said for \d+ s that it waits on client 2, which is "
                                               r"past that step"):
            f1.result()

    asyncio.run(lying())


def test_heartbeat_payloads_round_trip_and_malformed_ones_are_refused():
    from sqm.mpc.net.liveness import heartbeat_payload, read_heartbeat

    assert read_heartbeat(heartbeat_payload(7, True, [2, 0]), 3) == (7, True, frozenset({0, 2}), False)
    for bad in (b"", b"\0" * 8, heartbeat_payload(1, False, [5]), heartbeat_payload(1, False, [0]) + b"\0",
                heartbeat_payload(-1, False, []), heartbeat_payload(1, False, [0, 1, 2, 0])[:9] + b"\x02" * 8):
        with pytest.raises(ValueError, match="a heartbeat"):
            read_heartbeat(bad, 3)


# ----- a peer still in its connect phase (issue 43, after its item 6) -----------------------------------------
def connecting(waits=()):
    """A heartbeat of a peer still in its connect phase (sqm.mpc.net.session), not yet connected to ``waits``."""
    from sqm.mpc.net.liveness import heartbeat_payload

    return frame(HEARTBEAT_PC, heartbeat_payload(0, False, waits, connecting=True))


def test_connecting_heartbeats_round_trip_and_malformed_ones_are_refused():
    from sqm.mpc.net.liveness import heartbeat_payload, read_heartbeat

    assert read_heartbeat(heartbeat_payload(0, False, [2], connecting=True), 3) == (0, False, frozenset({2}), True)
    for bad in (heartbeat_payload(1, False, [], connecting=True),  # still connecting, yet at step 1
                heartbeat_payload(0, True, [], connecting=True),  # computing while connecting
                heartbeat_payload(0, False, [])[:8] + b"\x04"):  # an unknown flag
        with pytest.raises(ValueError, match="a heartbeat with flags"):
            read_heartbeat(bad, 3)


def test_a_peer_still_connecting_is_waited_for_up_to_the_connect_deadline(patched, monkeypatch):
    """Client 1 and client 2 are still in their connect phase (each not yet connected to the other) and say so in
    their heartbeats, while this party, whose connect phase is over, awaits their first message: neither the idle
    timeout (0.6 s) nor the progress timeout (1 s) names them; past this party's connect timeout (2 s here) plus
    the grace (0.5 s here) the first is named, the others told."""
    from sqm.mpc.net import liveness
    from sqm.mpc.net.liveness import PeerSilent, start_keep_alive

    state, make = patched
    monkeypatch.setattr(liveness, "CONNECT_GRACE_S", 0.5)

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1, f2 = p1.receive(1), p2.receive(1)
        t0 = time.monotonic()
        watchdog = start_keep_alive(rt, state, 0.6, 1.0, connect_timeout=2.0)
        for _ in range(100_000):  # a hang guard, not a clock
            if f1.done():
                break
            p1.data_received(connecting(waits=[2]))
            p2.data_received(connecting(waits=[1]))
            await asyncio.sleep(0.05)
        await watchdog
        assert time.monotonic() - t0 > 2.5  # not before the connect deadline (a lower bound no load can break)
        with pytest.raises(PeerSilent, match=r"^client 1 still says it is connecting \(not yet connected to client 2\) "
                                             r"2.5 s after this party connected to it, past the connect timeout \(2 s "
                                             r"at this party\); job aborted, nothing released"):
            f1.result()
        with pytest.raises(PeerSilent, match="client 1 still says it is connecting"):
            f2.result()
        assert [(n["kind"], n["party"]) for n in _notices(p2)] == [("stalled", 1)]

    asyncio.run(main())


def test_a_peer_still_connecting_that_stops_heartbeating_is_named_at_the_idle_timeout(patched):
    """Connecting heartbeats keep a peer alive, not its silence: client 1 says it is still connecting, then stops
    (a stopped process), and is named silent at the idle timeout (0.6 s), long before the connect deadline."""
    from sqm.mpc.net.liveness import PeerSilent, start_keep_alive

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        f1 = p1.receive(1)
        watchdog = start_keep_alive(rt, state, 0.6, 1.0, connect_timeout=60.0)
        for _ in range(20):  # 1 s of connecting heartbeats: alive
            p1.data_received(connecting(waits=[2]))
            p2.data_received(connecting(waits=[1]))
            await asyncio.sleep(0.05)
        assert not f1.done()
        for _ in range(100_000):  # then client 1 stops; client 2 goes on (a hang guard, not a clock)
            if f1.done():
                break
            p2.data_received(connecting(waits=[1]))
            await asyncio.sleep(0.05)
        await watchdog
        with pytest.raises(PeerSilent, match=r"^no message from client 1 for 0.6 s \(stopped or partitioned\?\)"):
            f1.result()

    asyncio.run(main())


def test_a_peer_giving_up_its_connect_phase_is_reported_with_its_reason(patched):
    """A peer still connecting reaches its own connect timeout and says whom it could not reach (a "timeout"
    notice): this party, which waited for it, ends with that reason (a timeout, exit 5), not blaming it."""
    from sqm.mpc.net.liveness import PeerSilent

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1 = rt.parties[1].protocol
        f1 = p1.receive(1)
        p1.data_received(connecting(waits=[2]))
        reason = "connect phase: not connected within 60 s: client 2 (10.0.0.2:5002) could not be reached"
        p1.data_received(frame(ABORT_PC, wire.encode({"abort": reason, "kind": "timeout"})))
        with pytest.raises(PeerSilent, match=r"^client 1 gave up the connect phase: connect phase: not connected "
                                             r"within 60 s: client 2 \(10.0.0.2:5002\) could not be reached; nothing "
                                             r"released$"):
            await f1

    asyncio.run(main())


def test_a_connecting_heartbeat_after_the_job_started_is_refused(patched):
    """A party cannot go back to its connect phase: a "still connecting" heartbeat after a heartbeat of the job (a
    peer playing for time) is refused naming it."""
    from sqm.mpc.net.abort import PartyAborted

    state, make = patched

    async def main():
        rt = make(asyncio.get_running_loop())
        p1 = rt.parties[1].protocol
        f1 = p1.receive(2)
        p1.data_received(beat(step=1) + connecting())
        with pytest.raises(PartyAborted, match=r"^client 1 sent a connect-phase heartbeat after its first message of "
                                               r"the job"):
            await f1

    asyncio.run(main())


# ----- real party processes ---------------------------------------------------------------------------------
class Hold(PartyProgram):
    """Two exchanges: clients -> server, then server -> clients.  Client ``who`` first writes ``marker`` and
    waits ``hold_s`` on the event loop (slow but alive: its heartbeats flow); the server first blocks its own
    loop for ``server_block_s`` (time.sleep, no heartbeats) while no party waits on it."""

    def __init__(self, marker: str, hold_s: float, who: int = 2, client_wait_s: float = 0.0,
                 server_block_s: float = 0.0):
        self.marker, self.hold_s, self.who = marker, hold_s, who
        self.client_wait_s, self.server_block_s = client_wait_s, server_block_s

    async def run(self, ctx):
        if ctx.pid == 0:
            time.sleep(self.server_block_s)
        elif ctx.pid == self.who:
            open(self.marker, "w").close()
            await asyncio.sleep(self.hold_s)
        else:
            await asyncio.sleep(self.client_wait_s)
        index = wire.value(int, "an index")
        got = await ctx.send_recv({0: ctx.pid} if ctx.pid else {}, ctx.clients if ctx.pid == 0 else [], index,
                                  "clients to the server")
        back = await ctx.send_recv({c: 0 for c in ctx.clients} if ctx.pid == 0 else {}, [] if ctx.pid == 0 else [0],
                                   index, "server to the clients")
        return got + back


def test_slow_but_alive_parties_are_not_killed(tmp_path):
    # idle timeout 3 s: client 2 holds 8 s while the server waits on it from ~4 s on (heartbeats keep it in the
    # job); the server's own loop is blocked 4 s (> 3 s) while the clients' heartbeats queue up, and it does not
    # blame them when it wakes
    marker = str(tmp_path / "holding")
    progs = [Hold(marker, 8.0, client_wait_s=5.0, server_block_s=4.0) for _ in range(3)]
    t0 = time.monotonic()
    res = run_parties(progs, idle_timeout=3.0, timeout=60)
    assert time.monotonic() - t0 > 8.0
    assert res[0]["result"] == [1, 2] and res[1]["result"] == [0] and res[2]["result"] == [0]
    assert res[0]["max_loop_stall_s"] > 3.0  # the server's blocked stretch, measured


@pytest.mark.slow
def test_stopped_client_makes_every_party_exit_naming_it(tmp_path):
    # the server waits on client 2 (stopped), client 1 waits on the server (alive, sending heartbeats): the
    # server detects the silence, client 1 learns it from the server's abort notice
    idle = 4.0
    marker = tmp_path / "holding"
    progs = [Hold(str(marker), 120.0) for _ in range(3)]
    times = {}

    def stop_client_2(procs):
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the server now waits on client 2, client 1 on the server
        os.kill(procs[2].pid, signal.SIGSTOP)
        times["stop"] = time.monotonic()

        def watch():
            while any(i not in times for i in (0, 1)) and time.monotonic() - times["stop"] < 60:
                for i in (0, 1):
                    if i not in times and procs[i].poll() is not None:
                        times[i] = time.monotonic()
                time.sleep(0.05)
        threading.Thread(target=watch, daemon=True).start()

    with pytest.raises(MPCError) as err:
        run_parties(progs, idle_timeout=idle, timeout=300, on_start=stop_client_2)
    for i in (0, 1):  # silence counts from client 2's last heartbeat, at most one period before the stop (no upper
        # bound: a loaded machine can delay an exit by any amount; the behaviour is the lower bound and the message)
        assert idle - heartbeat_period(idle) < times[i] - times["stop"], times
    e = err.value
    assert e.codes[0] == EXIT_TIMEOUT and e.codes[1] == EXIT_TIMEOUT and e.exit_code == EXIT_TIMEOUT
    assert e.messages[0].endswith("sqm.mpc.net.party server: timeout: no message from client 2 for 4 s "
                                  "(stopped or partitioned?); job aborted, nothing released")
    assert e.messages[1].endswith("sqm.mpc.net.party client 1: timeout: The server (party 0) aborted the job: "
                                  "no message from client 2 for 4 s (stopped or partitioned?); nothing released")
    # the first line names the server's own finding; client 1's echo of it is not repeated
    assert e.headline == "server: timed out: no message from client 2 for 4 s (stopped or partitioned?)"
    assert "client 1 (party 1) exited 5 (timed out): on server's notice" in e.details


def test_a_huge_frame_or_a_flood_from_a_peer_aborts_the_job_naming_it(patched, monkeypatch):
    """Issue 25: a peer that announces a 4 GiB frame, or sends more than the cap of bytes no step asked for, is
    named and the job aborts at once (its further bytes are dropped unread): memory stays bounded."""
    from sqm.mpc.net import liveness
    from sqm.mpc.net.abort import PartyAborted

    state, make = patched
    monkeypatch.setattr(liveness, "MAX_BUFFERED_BYTES", 1 << 20)

    async def main():
        rt = make(asyncio.get_running_loop())
        p1, p2 = rt.parties[1].protocol, rt.parties[2].protocol
        waiting = p2.receive(3)
        p1.data_received(struct.pack("<qI", 9, 0xFFFFFFFF) + b"x" * 100)  # announces 4 GiB
        with pytest.raises(PartyAborted, match=r"client 1 announced a frame of 4,294,967,295 bytes \(the cap is "):
            await waiting
        assert any(pc == ABORT_PC and b"announced a frame" in payload for pc, payload in frames(p2.transport.out))
        assert len(p1.bytes) == 0
        p1.data_received(frame(11, b"y" * 1000))  # dropped unread
        assert len(p1.bytes) == 0 and 11 not in p1.buffers

    asyncio.run(main())


def test_a_flood_of_unrequested_frames_is_capped(patched, monkeypatch):
    from sqm.mpc.net import liveness
    from sqm.mpc.net.abort import PartyAborted

    state, make = patched
    monkeypatch.setattr(liveness, "MAX_BUFFERED_BYTES", 1 << 20)

    async def main():
        rt = make(asyncio.get_running_loop())
        p1 = rt.parties[1].protocol
        waiting = p1.receive(3)
        for pc in range(100, 140):  # 40 x 64 KiB on labels no step asked for: over the 1 MiB cap
            p1.data_received(frame(pc, b"z" * (64 << 10)))
        with pytest.raises(PartyAborted, match=r"client 1 sent [0-9,]+ bytes that no step has asked for"):
            await waiting
        assert sum(len(v) for v in p1.buffers.values() if isinstance(v, bytes)) == 0

    asyncio.run(main())


def test_send_frame_writes_and_counts_what_mpycs_send_does():
    """The transport's sender (head and frame as two buffers) puts on the wire the same bytes as MPyC's
    MessageExchanger.send and counts the same bytes sent."""
    from mpyc import asyncoro

    from sqm.mpc.net.transport import send_frame

    rt = SimpleNamespace(pid=0, parties=[])
    ours, theirs = asyncoro.MessageExchanger(rt, 1), asyncoro.MessageExchanger(rt, 1)
    ours.transport, theirs.transport = FakeTransport(), FakeTransport()
    for pc, payload in ((7, b"frame"), (-3, b""), (2 ** 40, bytes(range(256)) * 9)):
        send_frame(ours, pc, payload)
        theirs.send(pc, payload)
    assert bytes(ours.transport.out) == bytes(theirs.transport.out)
    assert frames(ours.transport.out)[0] == (7, b"frame")
    assert ours.nbytes_sent == theirs.nbytes_sent == 3 * 12 + 5 + 256 * 9
