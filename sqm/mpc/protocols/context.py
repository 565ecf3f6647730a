"""BGW evaluation of a :class:`~sqm.mpc.protocols.program.SumProgram` inside one MPyC party process.

MPyC carries the messages (party processes, TCP channels, program-counter-labelled asynchronous message
passing, byte counters); the heavy local share arithmetic is vectorized int64 numpy (:mod:`sqm.mpc.shares.modarith`).

Protocol, for M parties (party 0 the server, parties 1..n the clients) and threshold t = (M - 1) // 2:

1. every party checks that all others run the same public job (hash of the public parameters);
2. the clients check among themselves that they hold the same number of records (the server learns only
   whether the check passed);
3. each client Shamir-shares (degree t) its integer columns, chunk by chunk (:mod:`sqm.mpc.protocols.stream`), with the
   *workers*: the clients alone when they are at least 2t + 1 and the program has degree at most 2 (the server
   then receives no share of any record), else every party; the addends go with the last chunk;
4. each worker adds each chunk's moments to its running sums on shares, locally: column sums (degree t),
   sums of products of two columns by the inner-product trick (degree 2t, no communication whatever the
   record count), and higher degrees by elementwise products with one degree reduction per extra factor;
   no worker holds more than one chunk of shares;
5. each worker combines moments into the outputs with the public integer coefficients and adds the addend
   shares; if the outputs have degree 2t, one degree reduction (resharing, [GRR98], from the 2t + 1 or more
   workers' points) gives every party a degree-t share, so after the input phase only O(outputs) field
   elements per party travel;
6. every party sends its output shares to the server (and to the clients if asked), which reconstructs
   and decodes the signed result.  Nothing else is ever opened.
"""
from __future__ import annotations

import asyncio
import hashlib
import time

import numpy as np

from sqm.mpc.protocols import compare
from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.net import wire
from sqm.mpc.net.abort import InputRefused, ProtocolError, abort_notice, party_label, public_digest
from sqm.errors import BadDataError, RefusedError, UsageError
from sqm.mpc.shares.field import from_signed, prime_for_bound, to_signed
from sqm.mpc.net.liveness import raise_if_aborted, send_abort
from sqm.mpc.shares.randomness import secure_generator
from sqm.mpc.protocols.stream import ArrayInput, as_input, chunk_count, chunk_rows


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
            rt._send_message(pid, data)
    pending = [outgoing[pid] if pid == rt.pid else rt._receive_message(pid) for pid in senders]
    got = list(await asyncio.gather(*(p if isinstance(p, asyncio.Future) else _done(p) for p in pending)))
    raise_if_aborted()
    return got


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


class PartyContext:
    """What a party program can do: exchange messages and evaluate programs securely."""

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
        self.on_chunk = None  # optional callback(chunks done, chunks due) of an evaluation in chunks (progress)
        self.shards = None  # this party's shard workers (sqm.mpc.protocols.shards.ShardRunner), or None: one process
        self.membership = None  # membership-hiding alignment (sqm.mpc.protocols.psi.Union): records over the union
        self.row_limit = None  # the evaluation's row limit (sqm.mpc.protocols.backend.Job.row_limit), while it runs
        self.job_digest = ""  # the agreed job description's digest (sqm.mpc.net.session.agree_job), once known
        self.session = None  # how this party's session was started (sqm.mpc.net.session.SessionSettings), if known
        self.output_shares_sent = False  # this party has sent its shares of an output (output_shares_next)
        self.before_output_shares = None  # optional callable, run once just before those are first sent
        self._output_next = False
        self._clock = time.perf_counter()
        self.points = list(range(1, self.M + 1))

    @property
    def is_server(self) -> bool:
        return self.pid == 0

    def _lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._clock
        self._clock = now

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
        for s, g in zip(senders, got):
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
          outputs (:meth:`reshare`, ``output=True``).  Before them no honest party finishes the reduction (each
          combines every worker's sub-shares), so none holds a degree-t share of an output or sends one to be
          opened.  A coalition of at most t parties then holds its own degree-2t shares (at most t points of a
          polynomial of degree 2t: the outputs need 2t + 1) and t points of each honest party's sub-share
          polynomial (degree t: they reveal nothing of that party's share), so no output can be opened.  Once
          they are sent, the other M - 1 >= t + 1 parties can finish the reduction and open the outputs
          without this party (its own opening share is not needed: t + 1 shares open an output);
        - a program without one (a sum: degree <= 1): its input shares that complete its input (the last
          chunk, with its summands: :meth:`input_shares`, ``output=True``); the other M - 1 >= t + 1 parties
          then hold degree-t shares of the outputs;
        - an opening (:meth:`open_to`, ``output=True``): its own share, where no reduction came before or the
          opened value carries a mask of degree M - 1 that needs every party's share (a kernel with a secret server input);
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
            named, generic = _client_verdicts(dict(zip(self.clients, others)), what)
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

    # ----- sharing ---------------------------------------------------------------------------------
    async def input_shares(self, payload, p: int, widths=None, rows: int | None = None, summands=(),
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
        ``output``: these shares complete the outputs' inputs (:meth:`output_shares_next`)."""
        self.require_threshold()
        workers = list(range(self.M)) if workers is None else list(workers)
        if self.is_server:  # an empty frame to every client: the clients' pace (see above)
            outgoing = {j: None for j in range(self.M)} if 0 in workers else {}
        else:
            shares = [shamir.share(x, self.M, self.t, p, self.rng) for x in payload]
            self._lap("share inputs (local)")
            outgoing = {j: [s[j] for s in shares] for j in workers}
        expect = {0: wire.nothing}
        for k, c in enumerate(self.clients):
            parts = [wire.shares((rows, None if widths is None else widths[k]), p)]
            parts += [wire.shares(tuple(s), p) for s in summands]
            parts += [wire.shares(tuple(s), p) for s in per_client]
            expect[c] = wire.list_of(parts, "input shares")
        senders = workers if self.pid in workers else []  # a worker hears from every worker (the server's: pace)
        if output and payload is not None:
            self.output_shares_next()
        got = await self.send_recv(outgoing, senders, expect, "input shares")
        self._lap("exchange input shares")
        if self.pid not in workers:
            return None, []
        got = [g for j, g in zip(senders, got) if j != 0]
        sums = []
        for k in range(1, 1 + len(summands)):
            acc = got[0][k]
            for g in got[1:]:
                acc = modarith.add_mod(acc, g[k], p)
            sums.append(acc)
        if per_client:  # not summed: each client's own parts (one list per client, client order), appended last
            sums.append([g[1 + len(summands):] for g in got])
        return np.hstack([g[0] for g in got]), sums

    def require_checkable(self) -> None:
        """:class:`_SharingCheck` needs t + 2 points besides each client (at least 3 clients)."""
        if self.M - 1 < self.t + 2:
            raise ProtocolError(f"party {self.pid}: checking the clients' sharings needs at least t + 2 = "
                                f"{self.t + 2} parties besides each client (this job has {self.M}: at least 3 "
                                f"clients); refused before any share was sent")

    def require_threshold(self) -> None:
        """Refuse (ProtocolError) a job whose threshold is t = 0, i.e. with fewer than two clients."""
        if self.t < 1:
            raise ProtocolError(f"party {self.pid}: a job with {self.M - 1} client(s) has threshold t = 0, so "
                                f"every party's share would be a client's data in the clear; at least two "
                                f"clients are needed; refused")

    async def reshare(self, y2t: np.ndarray | None, p: int, workers=None, shape=None,
                      receivers=None, output: bool = False) -> np.ndarray | None:
        """Degree reduction: each of the ``workers`` (default: every party; at least 2t + 1 of them) shares its
        degree-2t share with a fresh degree-t polynomial; every party combines what the workers sent with the
        Lagrange coefficients of the workers' points.  A party that is no worker passes None and the
        ``shape`` of the shares; it receives its degree-t share all the same.  ``receivers`` (default: every
        party): the parties that get a degree-t share (None elsewhere).  ``output``: the outputs' own reduction
        (:meth:`output_shares_next`)."""
        workers = list(range(self.M)) if workers is None else list(workers)
        receivers = list(range(self.M)) if receivers is None else list(receivers)
        shape = y2t.shape if y2t is not None else tuple(shape)
        out = {}
        if self.pid in workers:
            sub = shamir.share(y2t, self.M, self.t, p, self.rng)
            out = {j: sub[j] for j in receivers}
            if output:
                self.output_shares_next()
        got = await self.send_recv(out, workers if self.pid in receivers else [], wire.shares(shape, p),
                                   "degree reduction")
        if self.pid not in receivers:
            return None
        return shamir.combine_subshares(np.stack(got), [w + 1 for w in workers], p)

    async def open_to(self, share: np.ndarray | None, p: int, receivers, senders=None, shape=None,
                      degree: int | None = None, output: bool = False) -> np.ndarray | None:
        """Send my degree-t shares to ``receivers`` (from the ``senders``, default every party: each holding a
        share; a party that is no sender passes None and the ``shape``); they reconstruct (with the senders'
        points) and decode.  ``degree``: the sharing's degree, when known; with at least degree + 2 senders the
        receivers check that every entry's shares lie on one polynomial of that degree (ProtocolError
        otherwise: a party deviated in an input sharing of a sum that is not reduced, the degree reduction or the
        opening; nothing is released).  ``output``: an output's opening (:meth:`output_shares_next`)."""
        receivers = list(receivers)
        shape = share.shape if share is not None else tuple(shape)
        senders = list(range(self.M)) if senders is None else list(senders)
        out = {r: share for r in receivers} if self.pid in senders else {}
        if output and out:
            self.output_shares_next()
        got = await self.send_recv(out, senders if self.pid in receivers else [],
                                   wire.shares(shape, p), "open result")
        if self.pid not in receivers:
            return None
        xs = [s + 1 for s in senders]
        if degree is not None and len(xs) >= degree + 2 and not shamir.consistent(got, xs, degree, p):
            raise ProtocolError(f"party {self.pid}: the shares opened to it are inconsistent (they do not lie on one "
                                f"polynomial of degree <= {degree}): a party deviated in its input sharing (of a sum "
                                f"that is not reduced), the degree reduction or the opening; job aborted, nothing "
                                f"released")
        return shamir.reconstruct(np.stack(got), xs, p)

    # ----- secure evaluation -----------------------------------------------------------------------
    async def evaluate(self, job, my_input=None, outputs_to_clients: bool = False,
                       outputs_to=None) -> np.ndarray | None:
        """Securely evaluate ``job`` (a :class:`sqm.mpc.protocols.backend.Job` stripped of client programs).

        ``my_input`` is this client's :class:`sqm.mpc.protocols.stream.ChunkedInput` or ``(block, addend[, ids digest])``;
        None at the server.  The records go through in chunks of ``job.chunk_rows`` (public; default
        :func:`sqm.mpc.protocols.stream.chunk_rows`): every party accumulates its shares of the moments chunk by chunk, so
        no party holds more than one chunk of shares, and the result is the same integers whatever the chunk
        size.  Returns the signed integer result (object array) at the receivers, None elsewhere: the server
        (and the clients, ``outputs_to_clients``), or the parties ``outputs_to`` names (e.g. one client alone).
        """
        prog = job.program
        bound = job.result_bound()
        p = prime_for_bound(bound, self.M)
        col_bounds = [int(b) for b in job.col_bounds]
        owner = list(job.var_owner) if job.var_owner is not None else None
        n_rows = int(job.n_records)
        mask = self.membership
        positions = n_rows if mask is None else int(mask.size)  # the records the clients input (union: all)
        rows_per_chunk = int(chunk_rows(prog.n_vars) if job.chunk_rows is None else job.chunk_rows)
        if rows_per_chunk < 1:
            raise UsageError(f"a chunk holds at least one record, got {rows_per_chunk}")
        if prog.n_vars == 0 or positions == 0:
            rows_per_chunk = max(1, positions)  # nothing per record: one exchange
        await self.agree((prog.n_vars, prog.n_out, prog.gram, prog.monomials, prog.rows.tobytes(),
                          prog.cols.tobytes(), tuple(int(c) for c in prog.coefs), col_bounds, owner,
                          n_rows, int(job.addend_bound), bool(job.align_ids), p, self.M, self.t, rows_per_chunk)
                         + ((("verify_sharing", True),) if getattr(job, "verify_sharing", False) else ())
                         + ((("shards", self.shards.public()),) if self.shards is not None else ())
                         + ((("hide_membership", positions),) if mask is not None else ())
                         + ((("row_limit", int(job.row_limit)),) if job.row_limit is not None else ()))
        if mask is not None:
            self._check_membership(prog, n_rows)
        self.row_limit = None if job.row_limit is None else int(job.row_limit)
        if self.row_limit is not None:
            self._check_row_limit(prog)
        verify = bool(getattr(job, "verify_sharing", False))
        if verify and owner is None:
            raise ProtocolError(f"party {self.pid}: checking the clients' sharings needs the job's column owners "
                                f"(var_owner); refused before any share was sent")
        if verify:
            self.require_checkable()
        if owner is not None and sorted(set(owner)) != list(range(self.M - 1)) and prog.n_vars:
            raise ProtocolError(f"party {self.pid}: the job's columns belong to clients "
                                f"{sorted(set(o + 1 for o in owner))} but {self.M - 1} clients joined; refused "
                                f"before any share was sent")
        needs_count = any(len(m) == 0 for m in prog.monomials)
        self._lap("agree")
        # ---- input phase ----
        feed = None
        if self.is_server:
            await self.check_clients(None, "record count", None)
            if job.align_ids:
                await self.check_clients(None, "record ids", None)
        else:
            inp = as_input(my_input)
            mine = [j for j, o in enumerate(owner or []) if o == self.pid - 1]
            feed = _Feed(inp, positions, None if owner is None else [col_bounds[j] for j in mine], prog.n_out,
                         needs_count, self.pid == 1, count=None if mask is None else 0)
            problem = None  # this client's own input does not fit the public job: a short reason, no data
            if owner is not None and inp.n_cols != len(mine):
                problem = f"it holds {inp.n_cols} columns, the job expects {len(mine)}"
            elif inp.n_rows > positions:
                problem = f"it holds more records than the job's bound {positions}"
            else:
                problem = feed.check_in_memory()
            await self.check_clients(int(inp.n_rows), "record count", wire.value(int, "a record count"),
                                     problem=problem)
            if job.align_ids:  # digests of the records' order (the record alignment's), among clients only
                await self.check_clients(inp.ids_digest or b"", "record ids (different ids or a "
                                         "different order)", wire.one_of(wire.digest(32), wire.digest(0)))
            self._lap("client checks")
        widths = None if owner is None else [owner.count(j) for j in range(self.M - 1)]
        receivers = ([0] + (self.clients if outputs_to_clients else []) if outputs_to is None
                     else sorted({int(r) for r in outputs_to}))
        if not receivers or not all(0 <= r < self.M for r in receivers):
            raise UsageError(f"the result goes to parties 0..{self.M - 1}, got {outputs_to!r}")
        res = await self._secure_outputs(prog, p, positions, rows_per_chunk, widths, needs_count, feed, receivers,
                                         verify)
        return None if res is None else to_signed(res, p).astype(object)

    async def _secure_outputs(self, prog, p: int, n_rows: int, rows_per_chunk: int, widths, needs_count: bool,
                              feed: "_Feed | None", receivers, verify: bool = False):
        """BGW on the clients' chunks: share each chunk, add its moments (on shares) to the running sums; with
        the last chunk the clients also share their summands (addend; record count); combine, reduce the
        degree once, open to ``receivers`` (field elements there, None elsewhere).  ``feed``: this client's
        :class:`_Feed`, None at the server.  With shards (``self.shards``, :mod:`sqm.mpc.protocols.shards`) the
        records go through the parties' shard workers instead, and the summands in one exchange of their own."""
        summands = [(prog.n_out,)] + ([(1,)] if needs_count else [])
        workers = list(range(self.M)) if verify else self._workers(prog)
        if self.shards is not None:
            check = None
            if verify:  # the seeds in this session; every shard worker adds its chunks; verified here
                check = _SharingCheck(self, p, widths)
                await check.agree_seeds()
            moments = await self.shards.moments(self, prog, p, n_rows, rows_per_chunk, widths, feed, workers, check)
            payload = None  # the summands alone, with a block of no records
            if feed is not None:
                payload = [np.zeros((0, feed.inp.n_cols), np.int64)] + [from_signed(v, p) for v in feed.summands()]
                if check is not None:  # the client's mask for the check
                    payload.append(self.rng.integers(0, p, size=1, dtype=np.int64))
            _, sums = await self.input_shares(payload, p, widths, 0, summands, workers,
                                              ((1,),) if check is not None else (), output=prog.degree < 2)
            self._lap("exchange summands")
            if check is not None:  # before anything is reduced or opened
                check.add_masks(sums.pop())
                await check.verify()
                self._lap("sharing check")
        else:
            moments, sums = await self._input_loop(prog, p, n_rows, rows_per_chunk, widths, feed, workers,
                                                   summands, verify, output=prog.degree < 2)
        y = None
        if self.pid in workers:
            if moments is None:  # no record at all (a job of zero records): the moments are zero
                moments = np.zeros(prog.n_vars ** 2 if prog.gram else len(prog.monomials), dtype=np.int64)
            y = modarith.add_mod(self._combine(prog, moments, sums[1] if needs_count else None, p), sums[0], p)
        if prog.degree >= 2:  # the moments have degree 2t: one reduction
            y = await self.reshare(y, p, workers, (prog.n_out,), output=True)
            self._lap("degree reduction")
            workers = list(range(self.M))  # every party now holds a degree-t share
        res = await self.open_to(y, p, receivers, workers, (prog.n_out,), degree=self.t, output=True)
        self._lap("open result")
        return res

    async def _input_loop(self, prog, p: int, n_rows: int, rows_per_chunk: int, widths, feed: "_Feed | None",
                          workers, summands=(), verify: bool = False, check=None, chunk_base: int = 0,
                          output: bool = False):
        """The input phase: each chunk shared and its moments added to this worker's running sums (None at a
        party that is no worker); the summands (shapes ``summands``; none: not sent) go with the last chunk.
        Returns (moments, summand sums).  ``check``: a shard worker's part of the sharing
        check (seeds agreed by its party's session, which also verifies): its chunks are added to it, labelled
        ``chunk_base + k``.  ``output``: the last chunk's shares complete the outputs' inputs (a program
        without a degree reduction: :meth:`output_shares_next`)."""
        n_chunks = chunk_count(n_rows, rows_per_chunk)
        blocks = None if feed is None else feed.blocks(rows_per_chunk)
        moments, sums = None, []
        own_check = check is None and verify
        if own_check:
            check = _SharingCheck(self, p, widths)
            await check.agree_seeds()
        for k in range(n_chunks):
            last = k == n_chunks - 1
            payload = None
            if feed is not None:
                payload = [from_signed(next(blocks), p)]
                if last and summands:
                    payload += [from_signed(v, p) for v in feed.summands()]
                    if own_check:  # the client's mask for the check: uniform, shared with the last chunk
                        payload.append(self.rng.integers(0, p, size=1, dtype=np.int64))
            rows_k = min(rows_per_chunk, n_rows - k * rows_per_chunk) if n_rows else 0
            extra = ((1,),) if own_check and last else ()
            S, sums = await self.input_shares(payload, p, widths, rows_k, summands if last else (), workers, extra,
                                              output=output and last)
            if check is not None:
                check.add_chunk(chunk_base + k, S)
                if last and own_check:
                    check.add_masks(sums.pop())
            Y = bits = None
            if self.membership is not None or self.row_limit is not None:  # each record's row times its secret bit
                bits = await self._row_bits(S, k * rows_per_chunk, rows_k, p, workers)
                Y = await self._masked_rows(S, bits, rows_k, prog.n_vars, p, workers)
            if S is not None:
                m = await self._moments(prog, S, p, Y, bits)
                moments = m if moments is None else modarith.add_mod(moments, m, p)
            del S, payload
            self._lap("local moments")
            if self.on_chunk is not None:
                self.on_chunk(k + 1, n_chunks)
        if own_check:  # before anything is reduced or opened
            await check.verify()
            self._lap("sharing check")
        return moments, sums

    async def shard_moments(self, work) -> dict:
        """Inside shard worker ``work.shard``'s session (:mod:`sqm.mpc.protocols.shards`): its records' input phase, as
        :meth:`_input_loop` runs it for the whole job, without summands.  Returns this party's shares of the
        moments (None at a party that is no worker) and what its input part counted."""
        feed = None
        if work.part is not None:
            feed = _Feed(work.part, work.stop - work.start, work.bounds, work.n_out, False, False)
        check = None
        if work.seeds is not None:  # the sharing check: its seeds came from the party's own session
            check = _SharingCheck(self, work.p, work.widths)
            check.seeds = dict(work.seeds)
        moments, _ = await self._input_loop(work.program, work.p, work.stop - work.start, work.rows_per_chunk,
                                            work.widths, feed, work.workers, check=check,
                                            chunk_base=int(work.shard) << 32)
        return {"moments": moments, "counts": {} if feed is None else feed.inp.counts(),
                "lam": {} if check is None else {c: int(v) for c, v in check.lam.items()}}

    def _workers(self, prog) -> list[int]:
        """The parties that hold input shares and compute on them: the clients alone when they are at least
        2t + 1 (enough for the degree reduction of products) and the program has degree at most 2; else every
        party.  The server then receives no input share at all, and computes nothing until the reduction."""
        if len(self.clients) >= 2 * self.t + 1 and prog.degree <= 2:
            return list(self.clients)
        return list(range(self.M))

    def _check_membership(self, prog, n_rows: int) -> None:
        """What a membership-hiding evaluation needs (refused before any share otherwise).  The job's record count
        is a public bound on the members (the field is sized by it): a client, which is not told the intersection
        size, cannot check it; the server does."""
        mask = self.membership
        why = None
        if prog.degree > 2:
            why = "programs of degree 2 at most (one more multiplication by the membership)"
        elif self.is_server and (mask.indicator is None or mask.indicator.shape != (int(mask.size),)):
            why = "the server's indicator of the intersection over the union"
        elif self.is_server and int(mask.indicator.sum()) > n_rows:
            why = f"a record bound of at least the {int(mask.indicator.sum())} members, not {n_rows}"
        if why is not None:
            raise ProtocolError(f"party {self.pid}: a membership-hiding evaluation needs {why}; refused before any "
                                f"share was sent")

    def _check_row_limit(self, prog) -> None:
        """What an evaluation with a row limit needs (refused before any share otherwise)."""
        why = None
        if prog.degree > 2:
            why = "programs of degree 2 at most (one more multiplication by each record's bit)"
        elif any(len(m) == 0 for m in prog.monomials):
            why = "programs without a constant monomial (the record count would count the records left out)"
        if why is not None:
            raise ProtocolError(f"party {self.pid}: an evaluation with a row limit needs {why}; refused before any "
                                f"share was sent")

    async def _row_bits(self, S, start: int, rows: int, p: int, workers):
        """This worker's shares of each record's bit to keep (None at a party that is no worker): its
        membership of the intersection (:meth:`_membership_bits`), [sum_j x_ij^2 <= row_limit]
        (:func:`sqm.mpc.protocols.compare.row_norm_within`), or their product when the job has both."""
        bits = None
        if self.membership is not None:
            bits = await self._membership_bits(start, rows, p, workers)
        if self.row_limit is not None:
            within = await compare.row_norm_within(self, S, self.row_limit, p, workers, rows)
            self._lap("row limit (secure comparison)")
            bits = within if self.membership is None else await compare.mul(self, bits, within, p, workers, (rows,))
        return bits

    async def _membership_bits(self, start: int, rows: int, p: int, workers):
        """Membership-hiding alignment (:mod:`sqm.mpc.protocols.psi`, ``hide_membership``): the server, which knows which
        positions of the union are in the intersection (never which ids), Shamir-shares the 0/1 indicator of this
        chunk's positions with the workers (their shares returned, None elsewhere)."""
        out = {}
        if self.is_server:
            ind = self.membership.indicator[start:start + rows].astype(np.int64)
            shares = shamir.share(ind, self.M, self.t, p, self.rng)
            out = {j: shares[j] for j in workers}
        got = await self.send_recv(out, [0] if self.pid in workers else [], wire.shares((rows,), p),
                                   "membership indicator")
        return got[0] if self.pid in workers else None

    async def _masked_rows(self, S, bits, rows: int, width: int, p: int, workers):
        """Each worker multiplies its shares of every row by its share of the row's bit (degree 2t) and one degree
        reduction among the workers brings it back to degree t.  Returns this worker's shares of I * X (None at
        a party that is no worker); since I^2 = I, the moments of (I X)^T X are those of the kept records alone."""
        Y = await compare.mul(self, S, None if bits is None else bits[:, None], p, workers, (rows, width))
        self._lap("masking rows")
        return Y

    async def _moments(self, prog, S: np.ndarray, p: int, Y: np.ndarray | None = None,
                       bits: np.ndarray | None = None) -> np.ndarray:
        """This party's shares of the program's moments over the records of ``S`` (its shares of one chunk),
        mod p: vec(S^T S) for a Gram program; else one per monomial (0 for the constant monomial, whose sum
        is the record count, added by :meth:`_combine`).  Degree > 2 monomials take one degree reduction
        per extra factor.  With a monomial of degree >= 2 (``prog.degree >= 2``) the moments have degree 2t.
        ``Y``: the shares of the rows times their membership (:meth:`_masked_rows`), which then stand for each
        monomial's first factor (degree 2 at most)."""
        if Y is not None:
            return self._masked_moments(prog, Y, S, p, bits)
        if prog.gram:
            return modarith.gram_mod(S, p).reshape(-1)
        monos = prog.monomials
        moments = np.zeros(len(monos), dtype=np.int64)
        deg2 = [k for k, mono in enumerate(monos) if len(mono) == 2]
        if any(len(mono) == 1 for mono in monos):
            colsum = modarith.sum_mod(S, 0, p)
        if len(deg2) > S.shape[1]:
            G = modarith.gram_mod(S, p)
        high = [k for k, mono in enumerate(monos) if len(mono) > 2]
        prefix = {}
        if high:  # elementwise products with degree reduction, one round per extra factor
            depth = max(len(monos[k]) for k in high)
            for level in range(2, depth):
                need = sorted({monos[k][:level] for k in high if len(monos[k]) > level})
                prods = []
                for pre in need:
                    base = S[:, pre[0]] if level == 2 else prefix[pre[:-1]]
                    prods.append(modarith.mul_mod(base, S[:, pre[level - 1]], p))
                if prods:
                    reduced = await self.reshare(np.stack(prods), p)
                    for pre, r in zip(need, reduced):
                        prefix[pre] = r
        for k, mono in enumerate(monos):
            if len(mono) == 1:
                moments[k] = colsum[mono[0]]
            elif len(mono) == 2:
                a, b = mono
                moments[k] = G[a, b] if len(deg2) > S.shape[1] else \
                    modarith.sum_mod(modarith.mul_mod(S[:, a], S[:, b], p), 0, p)
            elif len(mono) > 2:
                moments[k] = modarith.sum_mod(modarith.mul_mod(prefix[mono[:-1]], S[:, mono[-1]], p), 0, p)
        return moments

    @staticmethod
    def _masked_moments(prog, Y: np.ndarray, S: np.ndarray, p: int, bits: np.ndarray | None = None) -> np.ndarray:
        """The moments over the members only: sum of y_a (degree 1) and of y_a x_b (degree 2), y = I x; the
        constant monomial's, the members' count: the sum of the bits I (membership hidden, no client knows it and
        client 1 contributes 0 to the count summand: :meth:`_combine` adds it)."""
        if prog.gram:
            return modarith.matmul_mod(np.ascontiguousarray(Y.T), S, p).reshape(-1)
        monos = prog.monomials
        moments = np.zeros(len(monos), dtype=np.int64)
        if any(len(mono) == 1 for mono in monos):
            colsum = modarith.sum_mod(Y, 0, p)
        if any(len(mono) == 2 for mono in monos):
            G = modarith.matmul_mod(np.ascontiguousarray(Y.T), S, p)
        for k, mono in enumerate(monos):
            if len(mono) == 0 and bits is not None:
                moments[k] = modarith.sum_mod(bits, 0, p)
            elif len(mono) == 1:
                moments[k] = colsum[mono[0]]
            elif len(mono) == 2:
                moments[k] = G[mono[0], mono[1]]
        return moments

    @staticmethod
    def _combine(prog, moments: np.ndarray, count, p: int) -> np.ndarray:
        """The outputs' shares from the moments' (the constant monomial's moment plus the shared count: 0 plus
        client 1's record count, or with membership hidden the members' bits summed plus client 1's 0)."""
        if prog.gram:
            return moments
        moments = moments.copy()
        for k, mono in enumerate(prog.monomials):
            if len(mono) == 0:
                moments[k] = (int(moments[k]) + int(count[0])) % p
        coefs = from_signed(prog.coefs.astype(object), p)
        terms = modarith.mul_mod(coefs, moments[prog.cols], p)
        return _segment_sum_mod(terms, prog.rows, prog.n_out, p)


class _SharingCheck:
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
            self.seeds = dict(zip(others(ctx.pid), got[0]))

    def _r(self, c: int, k: int, shape) -> np.ndarray:
        key = hashlib.sha256(self.seeds[c] + int(k).to_bytes(8, "little")).digest()
        return secure_generator(int.from_bytes(key, "little")).integers(0, self.p, size=shape, dtype=np.int64)

    def add_chunk(self, k: int, S: np.ndarray, widths=None) -> None:
        """Add this party's shares ``S`` of the clients' k-th chunk (their columns side by side, ``widths`` per
        client, default the check's); ``k`` must differ between the calls of one check."""
        if S is None:
            return
        start = 0
        for c, w in zip(self.ctx.clients, self.widths if widths is None else widths):
            if c in self.lam and S.shape[0] and w:
                block = S[:, start:start + w]
                prod = modarith.mul_mod(self._r(c, k, block.shape), block, self.p)
                self.lam[c] = (self.lam[c] + int(modarith.sum_mod(prod.reshape(-1), 0, self.p))) % self.p
            start += w

    def add_masks(self, per_client) -> None:
        for c, parts in zip(self.ctx.clients, per_client):
            if c in self.lam:
                self.lam[c] = (self.lam[c] + int(parts[0][0])) % self.p

    async def verify(self) -> None:
        ctx, p = self.ctx, self.p
        mine = np.array([self.lam.get(c, 0) for c in ctx.clients], dtype=np.int64)
        got = await ctx.send_recv({j: mine for j in range(ctx.M) if j != ctx.pid}, [j for j in range(ctx.M)
                                  if j != ctx.pid], wire.shares((len(ctx.clients),), p), "sharing check")
        vals = dict(zip([j for j in range(ctx.M) if j != ctx.pid], got))
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


class _Feed:
    """A client's input to one evaluation, checked against the public job: its records in chunks, padded with
    zero records up to the job's record bound, each chunk checked (int64, its columns, inside the public
    column bounds) before any share of it is made; then its summands (addend; the record count, which
    client 1 alone contributes).  A stream that breaks its own declared counts is this client's bad input
    (:class:`InputRefused`)."""

    def __init__(self, inp, n_rows: int, bounds, n_out: int, needs_count: bool, first_client: bool,
                 count: int | None = None):
        self.inp, self.n_rows, self.n_out = inp, int(n_rows), int(n_out)
        self.count = count  # the record count client 1 contributes (None: its own rows; membership hiding: m)
        self.needs_count, self.first_client = needs_count, first_client
        self.bounds = None if bounds is None else np.array(bounds, dtype=np.int64)
        self.checked_whole = False  # a block in memory, checked whole: its chunks need no second bounds check

    def check_in_memory(self) -> str | None:
        """A block held in memory is checked whole before anything is sent (a short reason, or None)."""
        if not isinstance(self.inp, ArrayInput):
            return None
        block, addend = self.inp.block, np.asarray(self.inp.addend())
        if block.size and self.bounds is not None and np.any(np.abs(block) > self.bounds):
            return "its integer data exceeds the public column bounds"
        if addend.shape != (self.n_out,):
            return f"its addend has shape {addend.shape}, the job expects ({self.n_out},)"
        self.checked_whole = True
        return None

    def _checked(self, chunk, want: int) -> np.ndarray:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape != (want, self.inp.n_cols):
            raise InputRefused(f"its input produced a chunk of shape {chunk.shape} where ({want}, "
                               f"{self.inp.n_cols}) was due")
        if chunk.size and not np.issubdtype(chunk.dtype, np.integer):
            raise InputRefused("its input produced non-integer values")
        if chunk.size and self.bounds is not None and not self.checked_whole and np.any(np.abs(chunk) > self.bounds):
            raise InputRefused("its integer data exceeds the public column bounds")
        return chunk.astype(np.int64, copy=False)

    def blocks(self, rows: int):
        """Chunks of ``rows`` records (the last: what is left of the bound), zero records after this client's."""
        own = self.inp.n_rows
        source = iter(self.inp.chunks(rows))
        for s in range(0, max(self.n_rows, 1), rows):
            want = min(rows, self.n_rows - s) if self.n_rows else 0
            mine = max(0, min(want, own - s))
            block = self._checked(next(source, np.zeros((0, self.inp.n_cols), np.int64)), mine) if mine else \
                np.zeros((0, self.inp.n_cols), np.int64)
            if mine == want:
                yield block
            else:
                padded = np.zeros((want, self.inp.n_cols), dtype=np.int64)
                padded[:mine] = block
                yield padded
        if next(source, None) is not None:
            raise InputRefused(f"its input produced more than the {own} records it declared")

    def summands(self) -> list:
        """[addend] (plus, where the program has a constant monomial, the record count: client 1's, 0 at the
        others) as object arrays of signed integers."""
        addend = np.asarray(self.inp.addend())
        if addend.shape != (self.n_out,):
            raise InputRefused(f"its addend has shape {addend.shape}, the job expects ({self.n_out},)")
        out = [addend.astype(object)]
        if self.needs_count:
            mine = self.inp.n_rows if self.count is None else self.count
            out.append(np.array([mine if self.first_client else 0], dtype=object))
        return out


def _segment_sum_mod(values: np.ndarray, rows: np.ndarray, n: int, p: int) -> np.ndarray:
    """out[r] = sum of values[rows == r] mod p, exact (31-bit halves accumulate without overflow)."""
    lo = values & ((1 << 31) - 1)
    hi = values >> 31
    acc_lo = np.zeros(n, dtype=np.int64)
    acc_hi = np.zeros(n, dtype=np.int64)
    np.add.at(acc_lo, rows, lo)
    np.add.at(acc_hi, rows, hi)
    return modarith.add_mod(acc_lo % p, modarith.scalar_mul_mod(acc_hi % p, 1 << 31, p), p)
