"""BGW evaluation of a :class:`~mpc.program.SumProgram` inside one MPyC party process.

MPyC carries the messages (party processes, TCP channels, program-counter-labelled asynchronous message
passing, byte counters); the heavy local share arithmetic is vectorized int64 numpy (:mod:`mpc.modarith`).

Protocol, for M parties (party 0 the server, parties 1..n the clients) and threshold t = (M - 1) // 2:

1. every party checks that all others run the same public job (hash of the public parameters);
2. the clients check among themselves that they hold the same number of records (the server learns only
   whether the check passed);
3. each client Shamir-shares (degree t) its integer columns and its addend with every party;
4. each party computes shares of the moments locally: column sums (degree t), sums of products of two
   columns by the inner-product trick (degree 2t, no communication whatever the record count), and
   higher degrees by elementwise products with one degree reduction per extra factor;
5. each party combines moments into the outputs with the public integer coefficients and adds the addend
   shares; if the outputs have degree 2t, one degree reduction (resharing, [GRR98]) brings them to degree t,
   so after the input phase only O(outputs) field elements per party travel;
6. every party sends its output shares to the server (and to the clients if asked), which reconstructs
   and decodes the signed result.  Nothing else is ever opened.
"""
from __future__ import annotations

import asyncio
import hashlib
import time

import numpy as np

from . import modarith, shamir, wire
from .field import from_signed, prime_for_bound, to_signed
from .randomness import secure_generator


class ProtocolError(RuntimeError):
    """A party refused the job (mismatched configuration or inputs); nothing was released.

    ``public`` (optional): what the abort notice to every peer says instead of ``str(e)``, where this party
    may know more than some peer may learn (a client knows which client's ids differ; the server must not)."""

    def __init__(self, message: str = "", public: str | None = None):
        super().__init__(message)
        self.public = public


class InputRefused(ProtocolError):
    """This party refuses its OWN input (its file, values or labels are unusable): the party exits BAD_DATA
    (:mod:`mpc.exitcodes`) and the others REFUSED.  ``str(e)`` is a short reason holding no data (no value,
    path or header), e.g. "its label column holds values other than 0 and 1": it is sent to every peer, which
    shows "client 2 refused: <reason>".  ``detail`` (optional) is for this party's own operator only."""

    def __init__(self, reason: str, detail: str | None = None):
        super().__init__(reason)
        self.detail = detail


async def _exchange(outgoing: dict, senders: list) -> list:
    """Send ``outgoing[pid]`` (bytes) to each pid; receive one message from each of ``senders`` (in order).

    Messages are labelled with MPyC's program counter, advanced once per exchange; every party runs the
    same sequence of exchanges, so labels match.  A plain coroutine rather than an ``mpc_coro``: MPyC
    coroutines hand a failed task's exception to the event loop's handler and leave their result pending,
    so a lost peer would hang the party instead of aborting it.  An exchange whose messages had all arrived
    when a silent-peer abort notice was read after them still fails (:func:`mpc.liveness.raise_if_aborted`).
    """
    from mpyc import asyncoro  # here, not at import: importing MPyC parses sys.argv (see mpc.party)

    from .liveness import raise_if_aborted

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


ABORT_PC = -(1 << 62)  # the message label of an abort notice (MPyC labels are non-negative program counters)
HEARTBEAT_PC = ABORT_PC + 1  # the label of a heartbeat frame (empty payload; see mpc.liveness)


def printable(text: str, n: int) -> str:
    """At most ``n`` characters of a peer's text, control characters replaced (it is printed to a terminal)."""
    return "".join(c if c.isprintable() else "?" for c in str(text))[:n]


def abort_notice(reason: str, kind: str = "refused", **extra) -> bytes:
    """The frame of an abort notice (sent on the label ABORT_PC): the reason (no data), its kind ("refused",
    "timeout", "silent") and public extras (``party``: the silent peer)."""
    return wire.encode({"abort": printable(reason, 500), "kind": kind, **extra})


def read_abort_notice(payload) -> dict:
    """A peer's abort notice as {"abort": printable reason, "kind": ..., "party": ...}; a malformed notice is
    still an abort (its reason says it was unreadable)."""
    try:
        notice = wire.decode(payload)
        return {"abort": printable(notice["abort"], 500), "kind": notice.get("kind"), "party": notice.get("party")}
    except Exception:  # noqa: BLE001
        return {"abort": "(an unreadable abort notice)", "kind": None, "party": None}


def party_label(pid: int) -> str:
    return "the server (party 0)" if pid == 0 else f"client {pid}"


class PartyAborted(ProtocolError):
    """Another party aborted the job and said why (its notice is a frame holding one short string)."""


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.all(a == b))
    return type(a) is type(b) and a == b


def _list_of(validators, what: str):
    """A list of exactly ``len(validators)`` items, item k checked by ``validators[k]``."""
    def check(x):
        if not isinstance(x, list) or len(x) != len(validators):
            raise wire.WireError(f"expected {what}: a list of {len(validators)} arrays")
        return [v(item) for v, item in zip(validators, x)]
    return check


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


def public_digest(public) -> str:
    """SHA-256 of a public parameter tree in the wire encoding (typed, so equal digests mean equal values)."""
    return hashlib.sha256(wire.encode(public)).hexdigest()


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

        Every message is a typed frame (:mod:`mpc.wire`), never a pickle.  ``expect`` checks what arrives:
        one validator for every sender, or a dict sender -> validator.  A malformed or unexpected frame
        raises :class:`ProtocolError` naming the sender and the step (the party then aborts the job)."""
        senders = list(senders)
        self.exchanges += 1
        self.waits += any(s != self.pid for s in senders)
        got = await self._transport({k: wire.encode(v) for k, v in outgoing.items()}, senders)
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

    async def _transport(self, outgoing: dict, senders: list) -> list:
        """Move encoded frames (MPyC's channels here; in-memory mailboxes in :mod:`mpc.inprocess`)."""
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
            raise ValueError("a client's key contribution must be 32 bytes")
        got = await self.send_recv({c: contribution for c in self.clients}, self.clients, wire.digest(32),
                                   "clients' key")
        return combine_key_contributions(got)

    async def abort(self, reason: str) -> None:
        """Tell every connected peer that this party aborts the job, and why (no data in ``reason``)."""
        from .liveness import send_abort

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
    async def input_shares(self, payload, p: int, widths=None, rows: int | None = None, summands=()
                           ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each client Shamir-shares (degree t) its field arrays ``payload = [block, *summands]`` with every
        party (the server passes None).  Returns, at every party, its shares of the clients' blocks side by
        side (records x all columns) and, for each summand, its share of the clients' sum.

        What arrives is checked: client j's block share must be int64 of shape (``rows``, ``widths[j-1]``)
        and each summand share of the shape in ``summands``, every entry in [0, p) (None: any length)."""
        if self.t < 1:
            raise ProtocolError(f"party {self.pid}: a job with {self.M - 1} client(s) has threshold t = 0, so "
                                f"every party's share would be a client's data in the clear; at least two "
                                f"clients are needed; refused")
        outgoing = {}
        if not self.is_server:
            shares = [shamir.share(x, self.M, self.t, p, self.rng) for x in payload]
            self._lap("share inputs (local)")
            outgoing = {j: [s[j] for s in shares] for j in range(self.M)}
        expect = {}
        for k, c in enumerate(self.clients):
            parts = [wire.shares((rows, None if widths is None else widths[k]), p)]
            parts += [wire.shares(tuple(s), p) for s in summands]
            expect[c] = _list_of(parts, "input shares")
        got = await self.send_recv(outgoing, self.clients, expect, "input shares")
        self._lap("exchange input shares")
        sums = []
        for k in range(1, len(got[0])):
            acc = got[0][k]
            for g in got[1:]:
                acc = modarith.add_mod(acc, g[k], p)
            sums.append(acc)
        return np.hstack([g[0] for g in got]), sums

    async def reshare(self, y2t: np.ndarray, p: int) -> np.ndarray:
        """Degree reduction: share my degree-2t share with fresh degree-t polynomials, combine (Lagrange)."""
        sub = shamir.share(y2t, self.M, self.t, p, self.rng)
        got = await self.send_recv({j: sub[j] for j in range(self.M)}, range(self.M),
                                   wire.shares(y2t.shape, p), "degree reduction")
        return shamir.combine_subshares(np.stack(got), self.points, p)

    async def open_to(self, share: np.ndarray, p: int, receivers) -> np.ndarray | None:
        """Send my degree-t shares to ``receivers``; they reconstruct (with all M points) and decode."""
        receivers = list(receivers)
        got = await self.send_recv({r: share for r in receivers}, range(self.M) if self.pid in receivers else [],
                                   wire.shares(share.shape, p), "open result")
        if self.pid not in receivers:
            return None
        return shamir.reconstruct(np.stack(got), self.points, p)

    # ----- secure evaluation -----------------------------------------------------------------------
    async def evaluate(self, job, my_input=None, outputs_to_clients: bool = False) -> np.ndarray | None:
        """Securely evaluate ``job`` (a :class:`mpc.backend.Job` stripped of client programs).

        ``my_input`` is this client's ``(block, addend)``; None at the server.  Returns the signed integer
        result (object array) at the receivers, None elsewhere.
        """
        prog = job.program
        bound = job.result_bound()
        p = prime_for_bound(bound, self.M)
        col_bounds = [int(b) for b in job.col_bounds]
        owner = list(job.var_owner) if job.var_owner is not None else None
        await self.agree((prog.n_vars, prog.n_out, prog.gram, prog.monomials, prog.rows.tobytes(),
                          prog.cols.tobytes(), tuple(int(c) for c in prog.coefs), col_bounds, owner,
                          int(job.n_records), int(job.addend_bound), bool(job.align_ids), p, self.M, self.t))
        if owner is not None and sorted(set(owner)) != list(range(self.M - 1)) and prog.n_vars:
            raise ProtocolError(f"party {self.pid}: the job's columns belong to clients "
                                f"{sorted(set(o + 1 for o in owner))} but {self.M - 1} clients joined; refused "
                                f"before any share was sent")
        n_rows = int(job.n_records)
        needs_count = any(len(m) == 0 for m in prog.monomials)
        self._lap("agree")
        # ---- input phase ----
        if self.is_server:
            await self.check_clients(None, "record count", None)
            if job.align_ids:
                await self.check_clients(None, "record ids", None)
        else:
            block, addend, *rest = my_input
            block = np.asarray(block)
            addend = np.asarray(addend)
            problem = None  # this client's own input does not fit the public job: a short reason, no data
            mine = [j for j, o in enumerate(owner or []) if o == self.pid - 1]
            if owner is not None and block.shape[1] != len(mine):
                problem = f"it holds {block.shape[1]} columns, the job expects {len(mine)}"
            elif block.shape[0] > n_rows:
                problem = f"it holds more records than the job's bound {n_rows}"
            elif block.size and owner is not None and np.any(np.abs(block) > np.array([col_bounds[j] for j in mine])):
                problem = "its integer data exceeds the public column bounds"
            elif addend.shape != (prog.n_out,):
                problem = f"its addend has shape {addend.shape}, the job expects ({prog.n_out},)"
            await self.check_clients(int(block.shape[0]), "record count", wire.value(int, "a record count"),
                                     problem=problem)
            if job.align_ids:  # keyed digests of the id columns, compared among clients only
                await self.check_clients(bytes(rest[0]) if rest else b"", "record ids (different ids or a "
                                         "different order)", wire.one_of(wire.digest(32), wire.digest(0)))
            m = block.shape[0]
            padded = np.zeros((n_rows, block.shape[1]), dtype=np.int64)
            padded[:m] = block
            payload = [from_signed(padded, p), from_signed(addend.astype(object), p)]
            if needs_count:
                payload.append(from_signed(np.array([m if self.pid == 1 else 0], dtype=object), p))
            self._lap("client checks")
        widths = None if owner is None else [owner.count(j) for j in range(self.M - 1)]
        receivers = [0] + (self.clients if outputs_to_clients else [])
        res = await self._secure_outputs(prog, p, n_rows, widths, needs_count,
                                         None if self.is_server else (payload, block, addend), receivers)
        return None if res is None else to_signed(res, p).astype(object)

    async def _secure_outputs(self, prog, p: int, n_rows: int, widths, needs_count: bool, mine, receivers):
        """BGW: share the clients' field payloads, compute the outputs on shares, open them to ``receivers``
        (field elements there, None elsewhere).  ``mine``: this client's (field payload, block, addend)."""
        summands = [(prog.n_out,)] + ([(1,)] if needs_count else [])
        S, sums = await self.input_shares(None if mine is None else mine[0], p, widths, n_rows, summands)
        z, count = sums[0], (sums[1] if needs_count else None)
        # ---- local moments ----
        y, degree2 = await self._outputs(prog, S, count, p)
        y = modarith.add_mod(y, z, p)
        if degree2:
            self._lap("local moments")
            y = await self.reshare(y, p)
            self._lap("degree reduction")
        res = await self.open_to(y, p, receivers)
        self._lap("open result")
        return res

    async def _outputs(self, prog, S: np.ndarray, count, p: int) -> tuple[np.ndarray, bool]:
        if prog.gram:
            return modarith.gram_mod(S, p).reshape(-1), True
        monos = prog.monomials
        moments = np.zeros(len(monos), dtype=np.int64)
        degree2 = False
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
            if len(mono) == 0:
                moments[k] = count[0]
            elif len(mono) == 1:
                moments[k] = colsum[mono[0]]
            elif len(mono) == 2:
                degree2 = True
                a, b = mono
                moments[k] = G[a, b] if len(deg2) > S.shape[1] else \
                    modarith.sum_mod(modarith.mul_mod(S[:, a], S[:, b], p), 0, p)
            else:
                degree2 = True
                last = prefix[mono[:-1]] if len(mono) > 2 else None
                moments[k] = modarith.sum_mod(modarith.mul_mod(last, S[:, mono[-1]], p), 0, p)
        coefs = from_signed(prog.coefs.astype(object), p)
        terms = modarith.mul_mod(coefs, moments[prog.cols], p)
        return _segment_sum_mod(terms, prog.rows, prog.n_out, p), degree2


def _segment_sum_mod(values: np.ndarray, rows: np.ndarray, n: int, p: int) -> np.ndarray:
    """out[r] = sum of values[rows == r] mod p, exact (31-bit halves accumulate without overflow)."""
    lo = values & ((1 << 31) - 1)
    hi = values >> 31
    acc_lo = np.zeros(n, dtype=np.int64)
    acc_hi = np.zeros(n, dtype=np.int64)
    np.add.at(acc_lo, rows, lo)
    np.add.at(acc_hi, rows, hi)
    return modarith.add_mod(acc_lo % p, modarith.scalar_mul_mod(acc_hi % p, 1 << 31, p), p)
