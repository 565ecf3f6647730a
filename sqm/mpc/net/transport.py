"""One party's transport and agreement: typed messages to and from the other parties, and what they agree on.

A party program receives a :class:`PartyTransport` (built by the party process, :mod:`sqm.mpc.net.party`, over
MPyC's channels; by the in-process simulation over in-memory mailboxes).  It carries:

- the party's place in the job: its index ``pid``, the party count ``M``, the threshold t = (M - 1) // 2, the
  clients, its share generator ``rng``;
- exchanges of typed frames (:mod:`sqm.mpc.net.wire`): :meth:`PartyTransport.send_recv`, a broadcast, and
  MPyC's program counter advanced once per exchange, so every party's sequence of exchanges labels the same
  messages alike;
- agreement: every party runs the same public job (:meth:`PartyTransport.agree`), the clients compare private
  values among themselves with verdicts the server may learn (:meth:`PartyTransport.check_clients`), the
  clients' common key (:meth:`PartyTransport.clients_key`);
- accounting: a public phase timer (:meth:`PartyTransport.phase`), the exchanges made and awaited, the bytes
  sent, and when this party first gave its shares of an output (:meth:`PartyTransport.output_shares_next`).

What is computed on shares is the protocols' (:mod:`sqm.mpc.protocols.sharing`, :mod:`sqm.mpc.protocols.evaluation`),
each given this transport.
"""
from __future__ import annotations

import asyncio
import hashlib
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sqm.mpc.net import wire
from sqm.mpc.net.abort import InputRefused, ProtocolError, abort_notice, party_label, public_digest
from sqm.errors import UsageError

if TYPE_CHECKING:
    from sqm.mpc.net.session import SessionSettings
from sqm.mpc.net.liveness import raise_if_aborted, send_abort
from sqm.mpc.shares.randomness import secure_generator

async def _exchange(outgoing: dict, senders: list) -> list:
    """Send ``outgoing[pid]`` (bytes) to each pid; receive one message from each of ``senders`` (in order).

    Messages are labelled with MPyC's program counter, advanced once per exchange; every party runs the
    same sequence of exchanges, so labels match.  A plain coroutine rather than an ``mpc_coro``: MPyC
    coroutines hand a failed task's exception to the event loop's handler and leave their result pending,
    so a lost peer would hang the party instead of aborting it.  An exchange whose messages had all arrived
    when a silent-peer abort notice was read after them still fails (:func:`sqm.mpc.net.liveness.raise_if_aborted`).
    """
    from mpyc import asyncoro  # here, not at import: importing MPyC parses sys.argv (see sqm.mpc.net.party)


    rt = asyncoro.runtime
    rt._program_counter[0] += 1
    for pid, data in outgoing.items():
        if pid != rt.pid:
            send_frame(rt.parties[pid].protocol, rt._program_counter[0], data)
    pending = [outgoing[pid] if pid == rt.pid else rt._receive_message(pid) for pid in senders]
    got = list(await asyncio.gather(*(p if isinstance(p, asyncio.Future) else _done(p) for p in pending)))
    raise_if_aborted()
    return got


_MPYC_HEAD = struct.Struct("<qI")  # MPyC's message head: program counter, payload length


def send_frame(protocol, pc: int, frame: bytes) -> None:
    """What MPyC's ``MessageExchanger.send(pc, frame)`` sends (head, then the frame) and counts, without its copy
    of the frame into one packed string: the head and the frame go to the connection as two buffers."""
    protocol.transport.writelines((_MPYC_HEAD.pack(pc, len(frame)), frame))
    protocol.nbytes_sent += _MPYC_HEAD.size + len(frame)


async def _done(value):
    return value


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.all(a == b))
    return type(a) is type(b) and a == b


def _names(clients) -> str:
    return ("client " if len(clients) == 1 else "clients ") + ", ".join(str(c) for c in clients)


def _client_verdicts(values: dict, what: str) -> tuple[str, str]:
    """The verdicts of a clients' comparison from every client's value (client -> value or {"refused": ...}):
    (for the clients: "ok" or naming the refusing or disagreeing clients, for the server: "ok", the
    refusals, or only "clients disagree on <what>").  Deterministic: every client computes the same."""
    refusals = [f"client {c} refused: {v['refused']}" for c, v in values.items() if isinstance(v, dict)]
    if refusals:
        return "; ".join(refusals), "; ".join(refusals)
    groups: list[list[int]] = []  # clients holding equal values, in order of their lowest client
    for c, v in values.items():
        for g in groups:
            if _same(values[g[0]], v):
                g.append(c)
                break
        else:
            groups.append([c])
    if len(groups) == 1:
        return "ok", "ok"
    ref = max(groups, key=len)  # the largest group; ties: the one holding the lowest client
    odd = sorted(c for g in groups if g is not ref for c in g)
    verb = "differs" if len(odd) == 1 else "differ"
    return f"clients disagree on {what}: {_names(odd)} {verb} from {_names(ref)}", f"clients disagree on {what}"


def combine_key_contributions(contributions) -> bytes:
    """The clients' key from their 32-byte contributions in client order: SHA-256 of their concatenation."""
    return hashlib.sha256(b"".join(contributions)).digest()


class PartyTransport:
    """One party's transport and agreement (module docstring): what every party program receives.

    Its attributes are the party's own; those a caller may set are declared here (a name not declared is
    refused, so an option meant for an evaluation is never set on the transport and silently ignored)."""

    def __init__(self, rt, rng: np.random.Generator | None = None):
        self.rt = rt
        self._setup(rt.pid, len(rt.parties), rt.threshold, rng)

    def _setup(self, pid: int, M: int, t: int, rng: np.random.Generator | None) -> None:
        self.pid = pid
        self.M = M
        self.t = t
        self.clients = list(range(1, self.M))
        self.rng = rng or secure_generator()  # share randomness: AES-CTR keyed from OS entropy
        self.phases: dict[str, float] = {}  # seconds spent per protocol phase, summed over evaluations
        self.exchanges = 0  # send_recv steps made (every party makes the same sequence)
        self.waits = 0  # of them, those where this party awaited a message from another party (latency shows)
        self.job_digest = ""  # the agreed job description's digest (sqm.mpc.net.session.agree_job), once known
        # how this party's session was started (sqm.mpc.net.session.SessionSettings), if known
        self.session: SessionSettings | None = None
        self.worker_records: list[dict] | None = None  # this party's worker processes' records, once they ran
        self.alignment_worker_records: list[dict] | None = None  # those of its workers' alignment buckets
        self.output_shares_sent = False  # this party has sent its shares of an output (output_shares_next)
        # optional callable, run once just before those are first sent
        self.before_output_shares: Callable[[], object] | None = None
        self._output_next = False
        # optional callable(step, done, total): this party's progress in its long steps (see progress)
        self.on_progress: Callable[[str, int, int | None], object] | None = None
        self._clock = time.perf_counter()
        self.points = list(range(1, self.M + 1))  # the parties' evaluation points, in party order
        self._sealed = True

    def __setattr__(self, name: str, value) -> None:
        if getattr(self, "_sealed", False) and not hasattr(self, name):
            raise AttributeError(f"a party transport has no attribute {name!r} to set (evaluation options are "
                                 f"arguments of sqm.mpc.protocols.context.PartyContext)")
        object.__setattr__(self, name, value)

    @property
    def is_server(self) -> bool:
        return self.pid == 0

    def phase(self, name: str) -> None:
        """Close the current phase of this party's work: the seconds since the last call are added to
        ``phases[name]`` (public timings: every party's record lists them)."""
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self._clock
        self._clock = now

    def progress(self, step: str, done: int, total: int | None = None) -> None:
        """This party has done ``done`` of the ``total`` units (None: unknown) of a long ``step`` (ids blinded in
        the record alignment, chunks of an evaluation, training rounds): passed to ``on_progress``, which the
        program that launched this party's job may set (a progress bar at its command); nothing otherwise."""
        if self.on_progress is not None:
            self.on_progress(step, int(done), None if total is None else int(total))

    def bytes_sent(self) -> int:
        """The bytes this party has sent to the others so far (0 where the transport does not count them)."""
        rt = self.rt
        if rt is None:
            return 0
        return int(sum(p.protocol.nbytes_sent for p in rt.parties if p.pid != rt.pid and p.protocol is not None))

    # ----- plain messages --------------------------------------------------------------------------
    async def send_recv(self, outgoing: dict, senders, expect, step: str = "message") -> list:
        """Send ``outgoing[pid]`` to each pid and receive one message from each of ``senders``.

        Every message is a typed frame (:mod:`sqm.mpc.net.wire`), never a pickle.  ``expect`` checks what arrives:
        one validator for every sender, or a dict sender -> validator.  A malformed or unexpected frame
        raises :class:`ProtocolError` naming the sender and the step (the party then aborts the job)."""
        senders = list(senders)
        self.exchanges += 1
        self.waits += any(s != self.pid for s in senders)
        frames = {k: wire.encode(v) for k, v in outgoing.items()}
        if self._output_next:  # this exchange carries this party's shares of an output (output_shares_next)
            self._output_next = False
            if any(k != self.pid for k in frames):
                self.mark_output_shares()
        got = await self._transport(frames, senders)
        out = []
        for s, g in zip(senders, got, strict=False):
            check = expect.get(s) if isinstance(expect, dict) else expect
            try:
                if check is None:
                    raise wire.WireError("no message was expected from this party")
                out.append(check(wire.decode(g)))
            except wire.WireError as e:
                raise ProtocolError(f"party {self.pid}: malformed message from {party_label(s)} at step "
                                    f"'{step}': {e}; job aborted, nothing released") from None
        return out

    # ----- output shares: what a party has given towards an opening ------------------------------------
    def output_shares_next(self) -> None:
        """The next :meth:`send_recv` of this party carries its shares of an output: :attr:`output_shares_sent`
        is set (and :attr:`before_output_shares` run, once) just before its frames go to the transport, after
        every wrapper of ``send_recv`` (a party killed before that point has sent none of them).

        The point, per evaluation, is this party's first message from which, with what the other parties
        hold or send without any further message of this party, an output can be opened:

        - a program with a degree reduction (degree >= 2): this party's sub-shares in the reduction of the
          outputs (:func:`sqm.mpc.protocols.sharing.reshare`, ``output=True``).  Before them no honest party
          finishes the reduction (each combines every worker's sub-shares), so none holds a degree-t share of an
          output or sends one to be opened.  A coalition of at most t parties then holds its own degree-2t
          shares (at most t points of a polynomial of degree 2t: the outputs need 2t + 1) and t points of each
          honest party's sub-share polynomial (degree t: they reveal nothing of that party's share), so no output
          can be opened.  Once they are sent, the other M - 1 >= t + 1 parties can finish the reduction and open
          the outputs without this party (its own opening share is not needed: t + 1 shares open an output);
        - a program without one (a sum: degree <= 1): its input shares that complete its input (the last
          chunk, with its summands: :func:`sqm.mpc.protocols.sharing.input_shares`, ``output=True``); the other
          M - 1 >= t + 1 parties then hold degree-t shares of the outputs;
        - an opening (:func:`sqm.mpc.protocols.sharing.open_to`, ``output=True``): its own share, where no
          reduction came before or the opened value carries a mask of degree M - 1 that needs every party's
          share (a kernel with a secret server input);
        - kernels that sum masked or clear values (:mod:`sqm.mpc.protocols.masked_sum`, and applications' own)
          call this before the value itself is sent.

        Everything a party sends before that point is a degree-t share of its inputs (any t of them uniform),
        a value masked by a uniform degree-t sharing (the sharing check), an opened uniform or public value
        (the secure comparison's redraws), or a public message (digests, verdicts, counts, blinded ids).
        Intermediate reductions (the membership or row-limit masking, higher-degree monomials) come before
        the outputs' own, which still needs this party's sub-shares, so they are not the point.  A caller that
        cannot tell may mark earlier: that only makes the flag conservative."""
        self._output_next = True

    def mark_output_shares(self) -> None:
        """Set :attr:`output_shares_sent` now (running :attr:`before_output_shares` the first time)."""
        if not self.output_shares_sent:
            if self.before_output_shares is not None:
                self.before_output_shares()
            self.output_shares_sent = True

    async def _transport(self, outgoing: dict, senders: list) -> list:
        """Move encoded frames (MPyC's channels here; in-memory mailboxes in :mod:`sqm.mpc.protocols.inprocess`)."""
        return await _exchange(outgoing, senders)

    async def broadcast(self, obj, expect, sender: int = 0, receivers=None, step: str = "broadcast") -> object:
        """``sender`` sends a public object to ``receivers`` (default: everyone); returns it everywhere."""
        receivers = list(range(self.M)) if receivers is None else list(receivers)
        out = {r: obj for r in receivers} if self.pid == sender else {}
        senders = [sender] if self.pid in receivers else []
        got = await self.send_recv(out, senders, expect, step)
        return got[0] if got else None

    async def agree(self, public, what: str = "job") -> None:
        """Every party checks that every other party runs the same public parameters."""
        digest = public_digest(public)
        got = await self.send_recv({p: digest for p in range(self.M)}, range(self.M),
                                   wire.value(str, "a hex digest", lambda s: len(s) == 64), f"agree on {what}")
        bad = [p for p, d in enumerate(got) if d != digest]
        if bad:
            raise ProtocolError(f"party {self.pid}: parties {bad} run a different {what} configuration; refused")

    async def check_clients(self, value, what: str, expect, problem: str | None = None) -> None:
        """Clients compare a private ``value`` among themselves; the server learns only that the check failed.

        Each client sends ``value`` (checked on arrival by ``expect``; never a dict) to the other clients, or,
        with ``problem`` (a short reason holding no data), ``{"refused": problem}`` instead: it refuses its own
        input.  Every client sees every client's value, so every client names the same disagreeing clients
        ("clients disagree on record ids: client 3 differs from clients 1, 2": the odd ones against the
        largest group of equal values, ties to the lowest client) and refuses at once; its abort notice, which
        also reaches the server, says only "clients disagree on <what>", never which client.  A client's own
        refusal reaches every party, the server included, as "client j refused: <problem>".  If all agree,
        the clients send the server their verdict "ok" (its pass/fail).  On any failure every party raises:
        :class:`InputRefused` at the refusing client, else :class:`ProtocolError`."""
        # Every party makes the same sequence of exchanges: MPyC labels messages by a program counter that
        # each exchange advances, so a party skipping one would wait on messages labelled for another.
        verdict_ok = wire.value(str, "a verdict", lambda s: len(s) < 1000)
        if self.is_server:
            await self.send_recv({}, [], None, f"compare {what}")
            verdicts = await self.send_recv({}, self.clients, verdict_ok, f"verdict on {what}")
        else:
            def check(x):
                if isinstance(x, dict):
                    if set(x) != {"refused"} or not isinstance(x["refused"], str) or len(x["refused"]) >= 500:
                        raise wire.WireError("expected a refusal: {'refused': a short reason}")
                    return x
                return expect(x)

            if problem is not None:  # tell the other clients why, then refuse without waiting for anyone
                await self.send_recv({c: {"refused": str(problem)} for c in self.clients}, [], None,
                                     f"compare {what}")
                raise InputRefused(str(problem))
            others = await self.send_recv({c: value for c in self.clients}, self.clients, check, f"compare {what}")
            named, generic = _client_verdicts(dict(zip(self.clients, others, strict=False)), what)
            if named != "ok":  # every client found the same: refuse now, naming the clients to clients only
                raise ProtocolError(f"party {self.pid}: refused before any share was sent: {named}",
                                    public=f"refused before any share was sent: {generic}")
            verdicts = await self.send_recv({p: "ok" for p in range(self.M)}, self.clients, verdict_ok,
                                            f"verdict on {what}")
        bad = [v for v in verdicts if v != "ok"]
        if bad:
            raise ProtocolError(f"party {self.pid}: refused before any share was sent: {bad[0]}")

    async def clients_key(self, contribution: bytes | None) -> bytes | None:
        """A fresh 32-byte key known to the clients only: each client sends its 32-byte ``contribution`` (random
        bytes from its own cryptographic generator) to the other clients, never to the server; the key is
        :func:`combine_key_contributions` of them in client order.  The server takes part in the exchange with
        nothing to send or receive (every party makes the same sequence of exchanges) and gets None.  One honest
        client's random contribution makes the key unpredictable to everyone else."""
        if self.is_server:
            await self.send_recv({}, [], None, "clients' key")
            return None
        if not isinstance(contribution, bytes) or len(contribution) != 32:
            raise UsageError("a client's key contribution must be 32 bytes")
        got = await self.send_recv({c: contribution for c in self.clients}, self.clients, wire.digest(32),
                                   "clients' key")
        return combine_key_contributions(got)

    async def abort(self, reason: str) -> None:
        """Tell every connected peer that this party aborts the job, and why (no data in ``reason``)."""
        send_abort(self.rt, abort_notice(reason))
        await asyncio.sleep(0.05)  # let the transports flush before the process exits

    async def close(self) -> None:
        """Closing barrier, then close the connections (MPyC's own shutdown unpickles what peers send)."""
        rt = self.rt
        # before the barrier, as MPyC's shutdown does: a lower party may close its connection as soon as its
        # barrier completes, and a Future set after that loss would never be resolved (a 10 s stall)
        rt.parties[self.pid].protocol = asyncio.Future()
        await self.send_recv({p: None for p in range(self.M)}, range(self.M), wire.nothing, "closing barrier")
        for peer in rt.parties[self.pid + 1:]:
            peer.protocol.close_connection()
        await rt.parties[self.pid].protocol

    def require_threshold(self) -> None:
        """Refuse (ProtocolError) a job whose threshold is t = 0, i.e. with fewer than two clients."""
        if self.t < 1:
            raise ProtocolError(f"party {self.pid}: a job with {self.M - 1} client(s) has threshold t = 0, so "
                                f"every party's share would be a client's data in the clear; at least two "
                                f"clients are needed; refused")

