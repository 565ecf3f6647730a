"""Starting a party's session: connecting to every other party of the job, then binding it to one job.

Our own connect phase in place of MPyC's ``mpc.start()`` (whose listening side trusted the party id a peer
claims, bound all interfaces and retried every 0.1 s forever):

- party i listens, on its own job address only, for parties < i and connects to parties > i, as MPyC does;
- a connecting party sends its id (2 bytes, little endian, as MPyC); the listening party checks it (a party
  that should connect here, not yet connected) and, over TLS, that the peer's certificate names exactly
  that party of the same job (:func:`sqm.mpc.net.certs.check_peer`) and, where the job pins that party's key, holds
  that key (:meth:`sqm.mpc.net.certs.TLSIdentity.check`); it answers one byte ``OK``, or ``NO`` and its
  reason, so the connecting side learns why it was refused.  The connecting side checks the listener's
  certificate the same way before sending anything;
- refused connections are retried with exponential back-off (20 ms doubling to 1 s), and so are connections
  closed during the TLS handshake and connections the listener answers ``BUSY``; a TLS handshake failure, an
  identity mismatch, a listener that completed the handshake (or, without TLS, accepted) but never says ``OK``,
  one that accepted and answered nothing to a TLS handshake for :data:`SQUATTER_FACTOR` handshake timeouts (a
  party answers as soon as it accepts, and closes what it holds unidentified at its handshake timeout: this is
  another program on that port) or a port this party cannot listen on abort the connect phase at once
  (:class:`ConnectError`, naming the peer);
- until it has every connection, a party sends every peer it has reached, every ``heartbeat`` seconds, a
  heartbeat saying it is still connecting (:func:`sqm.mpc.net.liveness.heartbeat_payload`: the job's heartbeat
  frame, flagged, with the parties not yet connected), so that a peer whose own connect phase is over waits for
  it up to that peer's connect timeout instead of naming it silent at the idle timeout
  (:func:`sqm.mpc.net.liveness.start_keep_alive`); heartbeats received during the connect phase are dropped;
- unauthenticated noise never aborts the connect phase: a connection that fails the TLS handshake or names no
  party that connects here is dropped and noted.  A listener holds at most :data:`MAX_PENDING_PER_SOURCE`
  connections not yet identified per source host and :data:`MAX_PENDING` in all, each for at most the handshake
  timeout; a new connection beyond a bound takes the place of the oldest unidentified one (of its host, else of
  the host holding most; told ``BUSY`` if it got past TLS) once that one was held :data:`MIN_HOLD` s, and is
  closed unread while every one held is younger, so that a real party, which identifies in milliseconds, is not
  shut out by connections that never will (known peers first: identified parties are never counted);
- after ``connect_timeout`` seconds the error names the parties not yet connected, with their addresses;
- only when every peer is connected are the connections handed to MPyC's message exchangers (any bytes that
  arrived early are passed on), and the listening socket is closed.

:func:`agree_job` is then the first exchange: every party sends its job description (job id, job name,
party addresses in order, the program's public description, the pinned key fingerprints); any difference is
refused naming the party and the field, before anything else is sent.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
import errno
import ipaddress
import os
import re
import ssl
import struct
import time

from sqm.mpc.net import wire
from sqm.mpc.net.certs import IdentityError
from sqm.errors import UsageError
from sqm.mpc.net.abort import (ABORT_PC, HEARTBEAT_PC, ProtocolError, abort_notice, party_label, printable,
                               public_digest, read_abort_notice)

OK, NO, BUSY = b"\x01", b"\x00", b"\x02"  # BUSY: closed to make room for newer connections; try again
BACKOFF_START, BACKOFF_CAP = 0.02, 1.0
HANDSHAKE_TIMEOUT = 10.0  # seconds for a TLS handshake and the listener's OK (an idle party answers in ms); a
# listener closes a connection that has not named a party by then
LINGER = 3.0  # seconds a party that gave up keeps dialling unreached parties to hand them its notice
LOSS_GRACE = 0.5  # seconds between a connected peer leaving during the connect phase and reporting it
MAX_EARLY = 1 << 24  # bytes buffered from one peer before the hand-over (the first exchange is small)
# connections not yet identified, from one host and from all (Session.admit: beyond, the oldest makes room); over
# TLS each holds asyncio's 256 KiB read buffer and a handshake's state, so MAX_PENDING bounds that memory
MAX_PENDING_PER_SOURCE = 64
MAX_PENDING = 128
MIN_HOLD = 1.0  # seconds an unidentified connection is held before a newer one may take its place (a real party
# identifies in milliseconds); while every one held is younger, new ones beyond the bounds are closed unread
SQUATTER_FACTOR = 1.5  # a dialled TLS handshake silent this many handshake timeouts: another program on that port
MAX_NOTES = 64  # notes kept about dropped connections (the timeout message shows the first few)
JOB_ID_RE = re.compile(r"[0-9a-f]{32}")


class ConnectError(ProtocolError):
    """The connect phase was refused: a peer's identity, a TLS handshake, or this party's own address."""


def split_address(a: str) -> tuple[str, int]:
    host, _, port = a.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"invalid party address {a!r} (need host:port, port 1..65535)")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for loopback IP addresses and ``localhost``; any other name counts as another host (no lookup)."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plaintext_refusal(addresses) -> str:
    """Why plain TCP is refused for these addresses: between hosts anyone on the path reads the shares; over
    loopback any local user who reads the command lines (the job id and addresses are there) can connect as
    a party, or listen first at a party's address and act as it (loopback has no peer check)."""
    remote = [a for a in addresses if not is_loopback(split_address(a)[0])]
    if remote:
        return (f"party addresses {', '.join(remote)} are not loopback: parties on other hosts must use TLS (keys "
                f"made with sqm keys, --ssl-dir DIR); plain TCP would let anyone on the path read the "
                f"shares.  Pass --insecure-plaintext to run without TLS anyway (a trusted, isolated network only)")
    return ("parties started one by one authenticate each other with TLS even over loopback (keys made with sqm "
            "keys, --ssl-dir DIR; sqm's local launchers make per-job keys themselves): plain loopback TCP has "
            "no peer check, so another user of this host who reads the command lines could connect as a party or "
            "listen first at a party's address and act as it.  Pass --insecure-plaintext to run without TLS anyway "
            "(a host no one else uses only)")


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not JOB_ID_RE.fullmatch(job_id):
        raise UsageError(f"job id {job_id!r} is not 32 lowercase hex digits (a random 128-bit id, e.g. "
                         f"python -c 'import secrets; print(secrets.token_hex(16))')")
    return job_id


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        return e.reason.lower().replace("_", " ") if e.reason else str(e)
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno)
    return str(e) or type(e).__name__


def _clean(text: str, n: int = 300) -> str:
    return printable(text, n)


class _Conn(asyncio.Protocol):
    """One connection during the connect phase, until it is handed to MPyC (buffers early bytes)."""

    transport: asyncio.Transport  # set by connection_made, which asyncio calls before any other callback

    def __init__(self, session: Session, pid: int | None):
        self.s, self.pid, self.buf = session, pid, bytearray()
        self.ready = False  # identity checked: the hand-over may take place
        self.lost = False
        self.noted = False  # dropped and noted already (drop)
        self.peer = "?"

    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    def data_received(self, data):
        self.buf += data
        if len(self.buf) > MAX_EARLY and isinstance(self, _Accept) and not self.ready:  # unauthenticated: dropped
            self.drop(f"a connection from {self.peer} sent {len(self.buf)} bytes without naming a "
                      f"party; dropped")
            self.settle()
            self.transport.abort()
        elif len(self.buf) > MAX_EARLY:
            self.s.fail(f"{self.name()} sent {len(self.buf)} bytes before the connect phase ended; refused")
            self.transport.abort()
        elif self.ready:
            self.scan_for_abort()
        else:
            self.on_data()

    def scan_for_abort(self):
        """A connected peer that gives up the connect phase sends an abort notice (MPyC's frame on the reserved
        label ABORT_PC) before closing: fail at once with its reason, which names the cause.  Heartbeats (a peer
        still connecting, or one in the job) only say it is alive: dropped here (this party's own liveness checks
        start at the hand-over).  Other frames (the first exchange, sent by a peer that finished connecting) stay
        buffered for the hand-over."""
        off = 0
        while len(self.buf) >= off + 12:
            pc, size = struct.unpack_from("<qI", self.buf, off)
            if len(self.buf) < off + 12 + size:
                return
            if pc == ABORT_PC:
                assert self.pid is not None  # called only once ready: the peer's party id is known
                notice = read_abort_notice(bytes(self.buf[off + 12:off + 12 + size]))
                self.s.fail(f"{party_label(self.pid)} gave up the connect phase: {notice['abort']}", notify=False,
                            timed_out=notice["kind"] == "timeout")
                return
            if pc == HEARTBEAT_PC:
                del self.buf[off:off + 12 + size]
                continue
            off += 12 + size

    def on_data(self):  # pragma: no cover - overridden
        pass

    def settle(self) -> None:  # pragma: no cover - overridden
        pass

    def name(self) -> str:
        return self.s.name(self.pid) if self.pid is not None else f"a party connecting from {self.peer}"

    def drop(self, note: str | None, telling: bool = False) -> None:
        """Note this unauthenticated connection as dropped (once; :meth:`Session.drop`)."""
        if not self.noted:
            self.noted = True
            if note is not None:
                self.s.drop(note, telling)

    def connection_lost(self, exc):
        self.lost = True
        self.settle()
        if self.s.done.done():
            return
        if isinstance(self, _Accept) and not self.ready:
            self.drop(f"a connection from {self.peer} closed before naming an expected party")
            return
        if isinstance(self, _Dial) and self.busy:  # the listener made room for newer connections: dialled again
            return
        if isinstance(self, _Dial) and isinstance(exc, ssl.SSLError):
            self.s.fail(f"TLS handshake with {self.name()} failed: it rejected this party's certificate "
                        f"({_reason(exc)})")
        elif isinstance(self, _Dial) and not self.ready:  # the same grace: the peer may have refused a party
            # that is also at this party's door (an impostor), and that refusal is the cause worth reporting
            tls = " (over TLS: it may have rejected this party's certificate)" if self.s.tls is not None else ""
            self.s.loop.call_later(LOSS_GRACE, self.s.fail, f"{self.name()} closed the connection before "
                                   f"accepting this party{tls}; see its own message")
        elif self.ready:  # a moment's grace: a refusal met here too (the likely cause) is the one to report
            why = f" ({_reason(exc)})" if exc else ""
            self.s.loop.call_later(LOSS_GRACE, self.s.fail, f"{self.name()} closed its connection during the "
                                   f"connect phase{why}: it refused a party or stopped (see its own message)")


class _Accept(_Conn):
    """Listening side: the peer's first 2 bytes are the party id it claims; checked before anything else.

    Until then the connection is unidentified: counted by :meth:`Session.admit` (which may close the oldest
    unidentified one to make room for it) and closed after the handshake timeout."""

    raw: asyncio.Transport  # the connection before TLS (set by connection_made)
    born: float  # the loop's time at connection_made

    def __init__(self, session):
        super().__init__(session, None)
        self.upgraded = session.tls is None
        self.host = "?"
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False  # among the session's unidentified connections (Session.admit, Session.forget)
        self.closed_here = False  # this party closed it unidentified (to make room, or at its timeout)

    def connection_made(self, transport):
        super().connection_made(transport)
        self.raw, self.host, self.born = transport, self.peer.rpartition(":")[0] or self.peer, self.s.loop.time()
        if not self.s.admit(self):
            self.closed_here = True
            transport.abort()
            return
        self.timer = self.s.loop.call_later(self.s.handshake_timeout, self.expire)
        if not self.upgraded:
            transport.pause_reading()  # start_tls takes over the raw stream
            self.s.spawn(self.upgrade(transport))

    def settle(self) -> None:
        """No longer unidentified (identified, dropped or closed): uncounted, its timer stopped."""
        self.s.forget(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def expire(self) -> None:
        self.timer = None
        if self.pid is None and not self.lost:
            self.close_unidentified(f"a connection from {self.peer} named no party within "
                                    f"{self.s.handshake_timeout:g} s; closed")

    def close_unidentified(self, note: str | None, busy: bool = False) -> None:
        """Close this connection before it named a party, noting why (``note``; None: not noted).  ``busy``: a
        connection past the TLS handshake (a party of this job, over TLS) is told ``BUSY`` first, so that it dials
        again."""
        if self.closed_here:
            return
        self.closed_here = True
        self.settle()
        self.drop(note)
        if self.upgraded and not self.transport.is_closing():
            if busy:
                self.transport.write(BUSY)
            self.transport.close()
        else:
            self.raw.abort()  # during the TLS handshake: start_tls ends (upgrade returns)

    async def upgrade(self, raw):
        assert self.s.server_context is not None  # connection_made starts an upgrade only over TLS
        try:
            tls = await self.s.loop.start_tls(raw, self, self.s.server_context, server_side=True,
                                              ssl_handshake_timeout=self.s.handshake_timeout + 1)
        except (TimeoutError, ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError) as e:
            self.settle()
            self.drop(f"a connection from {self.peer} ended during the TLS handshake ({_reason(e)})")
            raw.close()
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001  (ssl.SSLError and the like: no certificate, wrong keys, not TLS)
            # unauthenticated: dropped and noted, the job goes on (a stray packet must not abort it); a party with
            # wrong keys fails its own side of the handshake and says so, and this note is in the timeout message
            # (ahead of the others: a certificate that does not verify is the likely mark of a real party)
            self.settle()
            self.drop(f"a connection from {self.peer} failed the TLS handshake ({_reason(e)}; "
                      f"expected: {self.s.expected_from_below()}); dropped",
                      telling=isinstance(e, ssl.SSLCertVerificationError))
            raw.close()
            return
        if self.closed_here or tls is None:  # closed to make room, or at its timeout, during the handshake
            self.settle()
            raw.close()
            return
        self.transport, self.upgraded = tls, True
        self.on_data()

    def on_data(self):
        if not self.upgraded or len(self.buf) < 2 or self.pid is not None or self.closed_here:
            return
        claimed = int.from_bytes(self.buf[:2], "little")
        s = self.s
        if s.tls is None and self.buf[:2] == b"\x16\x03" or not 0 <= claimed < s.pid:
            # identifies as no party that connects here: dropped and noted, the job goes on
            tls_hello = s.tls is None and self.buf[:2] == b"\x16\x03"
            what = ("a TLS connection (this party runs without TLS: give every party the same TLS setting)"
                    if tls_hello else
                    f"party {claimed}" if claimed < len(s.addrs) else f"an unknown party id {claimed}")
            self.settle()
            self.transport.write(NO + _clean(f"{what} cannot connect here: only parties 0..{s.pid - 1} connect to "
                                             f"this party; refused").encode())
            self.transport.close()
            self.drop(f"{what} tried to connect from {self.peer}: only parties 0..{s.pid - 1} connect "
                      f"to this party; dropped", telling=tls_hello)
            return
        self.settle()
        try:
            del self.buf[:2]
            if claimed in s.conns:
                raise IdentityError(f"a second connection claiming to be {party_label(claimed)} ({s.name(claimed)} is "
                                    f"already connected)")
            if s.tls is not None:
                s.tls.check(self.transport, claimed)
        except IdentityError as e:
            self.transport.write(NO + _clean(f"{e}; refused").encode())
            self.transport.close()
            s.fail(f"{e} (connecting from {self.peer}); refused")
            return
        self.pid, self.ready = claimed, True
        self.transport.write(OK)
        s.connected(claimed, self)
        self.scan_for_abort()


class _Dial(_Conn):
    """Connecting side: checks the listener's certificate, sends this party's id, waits for its OK (or NO and
    its reason, or BUSY: dial again).  ``settled`` is True once the connection was accepted or a failure was
    reported, False when the listener answered BUSY."""

    pid: int  # the party dialled: known from the start

    def __init__(self, session: Session, pid: int):
        super().__init__(session, pid)
        self.busy = False
        self.settled = session.loop.create_future()

    def settle(self, final: bool = True) -> None:
        if not self.settled.done():
            self.settled.set_result(final)

    def connection_made(self, transport):
        super().connection_made(transport)
        s = self.s
        transport.write(s.pid.to_bytes(2, "little"))  # public; sent first so that both sides check and report
        if s.tls is not None:
            try:
                s.tls.check(transport, self.pid)
            except IdentityError as e:
                s.fail(f"{e} (listening on {s.addrs[self.pid]}); refused")
                transport.close()
                self.settle()
                return
        s.answering[self.pid] = transport.get_extra_info("peername")
        s.dialed[self.pid] = self  # a notice sent here is read once the listener has checked this party
        if s.notice is not None:  # this party already gave up: this connection only carries its notice
            transport.write(s.notice)
            self.settle()
            return
        s.loop.call_later(s.handshake_timeout, self.no_answer)

    def no_answer(self):
        if not self.ready and not self.s.done.done() and not self.transport.is_closing():
            self.s.fail(f"{self.name()}: the program listening on {self.s.addrs[self.pid]} accepted the connection "
                        f"but did not answer as a party of this job within {self.s.handshake_timeout:g} s (another "
                        f"program on that port, or a party without TLS?)")
            self.transport.close()
            self.settle()

    def on_data(self):
        if self.buf[:1] == OK:
            del self.buf[:1]
            self.ready = True
            self.s.connected(self.pid, self)
            self.settle()
            self.scan_for_abort()
        elif self.buf[:1] == BUSY:  # the listener closed this connection to make room: dial again
            self.busy = True
            self.s.answering.pop(self.pid, None)
            if self.s.dialed.get(self.pid) is self:
                del self.s.dialed[self.pid]
            self.transport.close()
            self.settle(False)
        elif self.buf[:1] == NO:
            self.s.fail(f"{self.name()} refused this party: {_clean(self.buf[1:].decode('utf-8', 'replace'))}")
            self.transport.close()
            self.settle()
        else:
            self.s.fail(f"{self.name()}: the program listening on {self.s.addrs[self.pid]} is not a party of this "
                        f"protocol (it sent {len(self.buf)} unexpected bytes)")
            self.transport.close()
            self.settle()


class Session:
    """The connect phase of party ``pid`` among ``addresses`` (``host:port`` in index order).

    ``tls``: this party's :class:`sqm.mpc.net.certs.TLSIdentity`, or None for plain TCP."""

    loop: asyncio.AbstractEventLoop  # the running loop (set by connect)
    done: asyncio.Future[None]  # every peer connected, or the connect phase failed (set by connect)

    def __init__(self, rt, addresses, tls=None, connect_timeout: float = 60.0,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT, heartbeat: float | None = None):
        self.rt, self.pid, self.addrs = rt, rt.pid, [a.strip() for a in addresses]
        self.hosts = [split_address(a) for a in self.addrs]
        self.tls, self.connect_timeout, self.heartbeat = tls, connect_timeout, heartbeat
        # one listening context for every connection (loading keys and authority per connection was 2/3 of
        # what each unauthenticated connection cost)
        self.server_context = tls.server_context() if tls is not None else None
        self.handshake_timeout = min(handshake_timeout, max(connect_timeout / 2, 0.5))
        # a dialled listener's TLS handshake: a party answers once it accepts, and closes what it holds unidentified
        # at its handshake timeout, so silence this long is another program on that port (SQUATTER_FACTOR)
        self.dial_handshake_timeout = SQUATTER_FACTOR * self.handshake_timeout
        self.conns: dict[int, _Conn] = {}
        self.last_error: dict[int, str] = {}
        self.answering: dict[int, object] = {}  # peers connected to but not yet answered OK
        self.dialed: dict[int, _Conn] = {}  # connections this party made whose identity it checked
        self.notice: bytes | None = None  # this party's abort notice, once it gave up
        self.notes: list[str] = []  # why connections were dropped: the telling ones (a real party's?) first
        self.noise: list[str] = []  # the first notes about the others
        self.dropped = 0  # unidentified connections dropped in all
        self.unidentified: dict[str, dict[_Accept, None]] = {}  # open, not identified: per host, oldest first
        self.n_unidentified = 0
        self.tasks: set[asyncio.Task] = set()

    def name(self, pid: int) -> str:
        return f"{party_label(pid)} ({self.addrs[pid]})"

    def expected_from_below(self) -> str:
        missing = [self.name(j) for j in range(self.pid) if j not in self.conns]
        return ", ".join(missing) or "no further party"

    def spawn(self, coro) -> None:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def fail(self, message: str, notify: bool = True, timed_out: bool = False) -> None:
        """End the connect phase with ``message``; unless the failure came from a peer's own notice, tell every
        peer connected so far why (an abort notice), so that it names the cause at once instead of this
        party's closing connection, or waiting for its own connect timeout."""
        if not self.done.done():
            self.done.set_exception(TimeoutError(message) if timed_out else ConnectError(message))
            if notify:
                self.notify(message)

    def notify(self, reason: str, kind: str = "refused") -> None:
        frame = abort_notice(reason, kind)
        packet = self.notice = struct.pack("<qI", ABORT_PC, len(frame)) + frame
        for conn in {id(c): c for c in [*self.conns.values(), *self.dialed.values()]}.values():
            if (conn.ready or isinstance(conn, _Dial)) and not conn.transport.is_closing():
                with contextlib.suppress(Exception):  # a closed connection: that peer is gone anyway
                    conn.transport.write(packet)

    def drop(self, note: str, telling: bool = False) -> None:
        """A connection that failed the handshake or named no party that connects here: noted, never fatal.  The
        connect timeout's message shows the first notes, ``telling`` ones first (a certificate that does not
        verify, TLS against a party without TLS: the marks of a real party misconfigured), then the count of the
        others; at most :data:`MAX_NOTES` of each kind are kept."""
        self.dropped += 1
        kept = self.notes if telling else self.noise
        if len(kept) < MAX_NOTES:
            kept.append(note)

    def admit(self, conn: _Accept) -> bool:
        """Count a new unidentified connection (True), or refuse it (False: the caller closes it unread).

        Within the bounds it is admitted.  If its host already holds :data:`MAX_PENDING_PER_SOURCE`, or
        :data:`MAX_PENDING` are held in all, the oldest unidentified connection of that host (else of the host
        holding most) makes room for it if it was held :data:`MIN_HOLD` s or more (known peers first: a real party
        identifies within milliseconds, so connections that have not are the flood's); if even that one is
        younger, the new connection is refused.  A refused or closed real party dials again (BUSY, or its
        handshake cut).  So each unidentified connection costs at most one TLS handshake and one read and lives
        at most the handshake timeout, and a real party is shut out only while a flood opens more than the bound
        every :data:`MIN_HOLD` s."""
        mine = self.unidentified.setdefault(conn.host, {})
        why: str | None
        victims: dict[_Accept, None] | None
        if len(mine) >= MAX_PENDING_PER_SOURCE:
            why, victims = f"more than {MAX_PENDING_PER_SOURCE} unidentified connections from {conn.host}", mine
        elif self.n_unidentified >= MAX_PENDING:
            why = f"more than {MAX_PENDING} unidentified connections"
            victims = max(self.unidentified.values(), key=len)
        else:
            why, victims = None, None
        if victims:
            old = next(iter(victims))
            if self.loop.time() - old.born < MIN_HOLD:
                if not mine:
                    del self.unidentified[conn.host]
                conn.drop(f"{why}, each held less than {MIN_HOLD:g} s: a connection from {conn.peer} closed unread")
                return False
            old.close_unidentified(f"{why}: the oldest, from {old.peer}, closed", busy=True)
        self.unidentified.setdefault(conn.host, {})[conn] = None
        conn.counted = True
        self.n_unidentified += 1
        return True

    def forget(self, conn: _Accept) -> None:
        if conn.counted:
            conn.counted = False
            mine = self.unidentified[conn.host]
            del mine[conn]
            if not mine:
                del self.unidentified[conn.host]
            self.n_unidentified -= 1

    async def beat(self) -> None:
        """Every heartbeat period, a heartbeat saying "still connecting" (step 0, the parties not yet connected:
        :func:`sqm.mpc.net.liveness.heartbeat_payload`) to every peer connected so far: a peer that has finished its own
        connect phase and waits for this party's first message knows it is alive (the module docstring)."""
        from sqm.mpc.net.liveness import heartbeat_frame, heartbeat_payload

        assert self.heartbeat is not None  # connect spawns beat only with a heartbeat period
        while not self.done.done():
            await asyncio.sleep(self.heartbeat)
            if self.done.done():
                return
            missing = [j for j in range(len(self.addrs)) if j != self.pid and j not in self.conns]
            frame = heartbeat_frame(heartbeat_payload(0, False, missing, connecting=True))
            for conn in list(self.conns.values()):
                if conn.ready and not conn.lost and not conn.transport.is_closing():
                    conn.transport.write(frame)

    def connected(self, pid: int, conn: _Conn) -> None:
        self.conns[pid] = conn
        if len(self.conns) == len(self.addrs) - 1 and not self.done.done():
            self.done.set_result(None)

    async def dial(self, j: int) -> None:
        try:
            await self._dial(j)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            self.fail(f"connecting to {self.name(j)} failed: {type(e).__name__}: {e}")

    async def _dial(self, j: int) -> None:
        host, port = self.hosts[j]
        ctx = self.tls.client_context() if self.tls is not None else None
        delay = BACKOFF_START
        while True:
            try:
                _, conn = await self.loop.create_connection(
                    lambda: _Dial(self, j), host, port, ssl=ctx,
                    server_hostname=f"party-{j}.{self.tls.job}.sqm" if ctx else None,
                    ssl_handshake_timeout=self.dial_handshake_timeout if ctx else None)
                return
            except ConnectionAbortedError as e:
                if e.errno or ctx is None:  # the system's ECONNABORTED: dialled again
                    self.last_error[j] = _reason(e)
                else:  # asyncio's TLS handshake timeout: the listener accepted and then said nothing
                    self.fail(f"{self.name(j)}: the program listening on {self.addrs[j]} accepted the connection but "
                              f"did not complete a TLS handshake within {self.dial_handshake_timeout:g} s (a party "
                              f"answers at once, and closes a connection it holds unidentified within "
                              f"{self.handshake_timeout:g} s): another program on that port?")
                    return
            except (ssl.SSLError, ssl.CertificateError) as e:
                if isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
                    self.last_error[j] = f"the connection closed during the TLS handshake ({_reason(e)})"
                else:
                    self.fail(f"TLS handshake with {self.name(j)} failed: {_reason(e)}")
                    return
            except OSError as e:
                self.last_error[j] = _reason(e)
            else:
                if await conn.settled:  # accepted, or the failure was reported
                    return
                self.last_error[j] = ("the listener closed the connection to make room for newer ones (it held "
                                      "too many unidentified connections: a flood?)")
            await asyncio.sleep(delay)
            delay = min(2 * delay, BACKOFF_CAP)

    async def linger(self) -> None:
        """After giving up, keep dialling the parties above this one that were not reached yet, for a few
        seconds, only to hand them this party's notice: a party that heard of the failure from nobody would
        otherwise wait out its whole connect timeout."""
        deadline = self.loop.time() + LINGER
        pending = lambda: [j for j in range(self.pid + 1, len(self.addrs)) if j not in self.dialed]  # noqa: E731
        while self.notice is not None and pending() and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)  # let the notices leave before the process exits

    def missing(self) -> str:
        out = []
        for j in range(len(self.addrs)):
            if j == self.pid or j in self.conns:
                continue
            if j < self.pid:
                out.append(f"{self.name(j)} never connected to this party (listening on {self.addrs[self.pid]})")
            elif j in self.answering:
                out.append(f"{self.name(j)}: the program listening there accepted the connection but has not "
                           f"answered as a party of this job (another program on that port?)")
            else:
                last = self.last_error.get(j)
                out.append(f"{self.name(j)} could not be reached" + (f" (last attempt: {last})" if last else ""))
        shown = (self.notes + self.noise)[:3]
        notes = f"; meanwhile {'; '.join(shown)}" if shown else ""
        if self.dropped > len(shown):
            notes += f" ({self.dropped} unidentified connections dropped in all)"
        return "; ".join(out) + notes

    async def connect(self) -> None:
        rt = self.rt
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()
        for peer in rt.parties:
            peer.protocol = asyncio.Future(loop=self.loop) if peer.pid == self.pid else None
        server = None
        t0 = time.monotonic()
        try:
            if self.pid > 0:
                host, port = self.hosts[self.pid]
                try:
                    server = await self.loop.create_server(lambda: _Accept(self), host=host, port=port)
                except OSError as e:
                    whats: dict[int | None, str] = {
                        errno.EADDRINUSE: "address in use (another process holds this port)",
                        errno.EADDRNOTAVAIL: "address not available on this host (is this the host of "
                                             f"{party_label(self.pid)} in the job?)"}
                    what = whats.get(e.errno, _reason(e))
                    raise ConnectError(f"cannot listen on {self.addrs[self.pid]}: {what}") from None
            for j in range(self.pid + 1, len(self.addrs)):
                self.spawn(self.dial(j))
            if self.heartbeat:
                self.spawn(self.beat())
            try:
                await asyncio.wait_for(asyncio.shield(self.done), self.connect_timeout)
            except TimeoutError:
                message = f"connect phase: not connected within {self.connect_timeout:g} s: {self.missing()}"
                if not self.done.done():  # (a peer's timeout notice may have come first)
                    self.done.set_exception(TimeoutError(message))
                    self.notify(message, "timeout")
                await asyncio.sleep(0.05)  # let the notices leave before the process exits
                failure = self.done.exception()
                assert failure is not None  # failed just above, or by a peer's notice that came first
                raise failure from None
            except ConnectError:  # (a TimeoutError is handled just above)
                await self.linger()
                raise
        finally:
            if server is not None:
                server.close()
            for task in list(self.tasks):
                task.cancel()
            for conns in list(self.unidentified.values()):  # none is kept past the connect phase
                for conn in list(conns):
                    conn.close_unidentified(None)
        self.seconds = time.monotonic() - t0
        self._hand_over()

    def _hand_over(self) -> None:
        """Give every checked connection to an MPyC message exchanger, with the bytes that came early."""
        from mpyc import asyncoro

        rt = self.rt
        for pid, conn in sorted(self.conns.items()):
            if conn.lost or conn.transport.is_closing():
                raise ConnectError(f"{self.name(pid)} closed its connection at the end of the connect phase")
        for pid, conn in sorted(self.conns.items()):
            link = asyncoro.MessageExchanger(rt)
            conn.transport.set_protocol(link)
            link.connection_made(conn.transport)  # peer_pid None: stores the transport, sends nothing
            link.peer_pid = pid
            rt.set_protocol(pid, link)
            if conn.buf:
                link.data_received(bytes(conn.buf))


async def start(mpc, addresses, tls=None, connect_timeout: float = 60.0, heartbeat: float | None = None) -> Session:
    """Connect party ``mpc.pid`` to every other party (see the module docstring); return the session.
    ``heartbeat``: seconds between this party's "still connecting" heartbeats (None: none)."""
    session = Session(mpc, addresses, tls, connect_timeout, heartbeat=heartbeat)
    await session.connect()
    return session


# ----- one job per session ----------------------------------------------------------------------------------
FIELDS = ("job_id", "n_parties", "parties", "job_name", "program", "pins")


def job_description(job_id: str, addresses, job_name: str | None, program: str,
                    pins: dict[int, str] | None = None) -> dict:
    """What every party of a job must agree on first; ``pins``: the key fingerprints the job pins, by party
    (``""`` for a party without a pin), so that a party given other pins is refused."""
    return {"job_id": job_id, "n_parties": len(addresses), "parties": [a.strip() for a in addresses],
            "job_name": job_name or "", "program": str(program)[:2000],
            "pins": [(pins or {}).get(i, "") for i in range(len(addresses))]}


def _description_ok(d) -> bool:
    return (list(d) == list(FIELDS) and isinstance(d["job_id"], str) and len(d["job_id"]) <= 64
            and type(d["n_parties"]) is int and isinstance(d["parties"], list) and len(d["parties"]) <= 10000
            and all(isinstance(a, str) and len(a) <= 300 for a in d["parties"])
            and isinstance(d["job_name"], str) and len(d["job_name"]) <= 64
            and isinstance(d["program"], str) and len(d["program"]) <= 2000
            and isinstance(d["pins"], list) and len(d["pins"]) <= 10000
            and all(isinstance(x, str) and len(x) <= 80 for x in d["pins"]))


def _short_id(x: str) -> str:
    return _clean(x, 8) + "..."


def differences(mine: dict, theirs: dict, label: str) -> list[str]:
    """What in ``theirs`` (party ``label``'s job description) differs from ``mine``, most telling first."""
    if theirs["job_id"] != mine["job_id"]:
        return [f"{label} runs job {_short_id(theirs['job_id'])} (this party runs {_short_id(mine['job_id'])})"]
    out = []
    if theirs["n_parties"] != mine["n_parties"]:
        out.append(f"{label} expects {theirs['n_parties']} parties (this party: {mine['n_parties']})")
    elif theirs["parties"] != mine["parties"]:
        k = next(i for i, (a, b) in enumerate(zip(theirs["parties"], mine["parties"], strict=False)) if a != b)
        out.append(f"{label} lists different party addresses (party {k}: {_clean(theirs['parties'][k], 80)}; this "
                   f"party lists {mine['parties'][k]})")
    if theirs["job_name"] != mine["job_name"]:
        out.append(f"{label} runs job name {_clean(theirs['job_name'], 64)!r} (this party: {mine['job_name']!r})")
    if theirs["pins"] != mine["pins"] and len(theirs["pins"]) == len(mine["pins"]):
        k = next(i for i, (a, b) in enumerate(zip(theirs["pins"], mine["pins"], strict=False)) if a != b)
        out.append(f"{label} pins {_clean(theirs['pins'][k], 80) or 'no key'} for {party_label(k)} (this party pins "
                   f"{mine['pins'][k] or 'no key'})")
    if theirs["program"] != mine["program"]:
        out.append(f"{label} runs a different program: {_clean(theirs['program'], 200)} (this party: "
                   f"{mine['program'][:200]})")
    return out


async def agree_job(ctx, description: dict) -> str:
    """The first exchange of a session: every party sends its job description to every other; any party
    whose description differs is refused (ProtocolError naming it and what differs).  Returns the digest of
    the agreed description."""
    others = [p for p in range(ctx.M) if p != ctx.pid]
    got = await ctx.send_recv({p: description for p in others}, others,
                              wire.value(dict, "a job description", _description_ok), "job agreement")
    problems = []
    for p, theirs in zip(others, got, strict=False):
        problems += differences(description, theirs, party_label(p))
    if problems:
        raise ProtocolError("refused before anything else: " + "; ".join(problems))
    return public_digest(description)


@dataclass(frozen=True)
class SessionSettings:
    """How this party's own session was started (:func:`sqm.mpc.net.party.main`): its shard sessions start the
    same way (the same TLS keys, job name and timeouts)."""

    job_id: str
    job_name: str | None
    ssl_dir: str | None
    insecure_plaintext: bool
    connect_timeout: float
    timeout: float
    idle_timeout: float
    progress_timeout: float
    pins: str | None = None  # the job's pinned key fingerprints, as the party's --pins option
