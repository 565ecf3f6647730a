"""Fault injection: what every party of a real job does when one party dies, stops, is cut off, is foreign, holds another party's certificate or finds its port taken.

    python -m bench faults                             # every case, the runtime's default timeouts
    python -m bench faults --cases kill-compute,stopped --idle-timeout 5 --json faults.json

Each case is one small SQM-PCA job from a job file (:func:`sqm.framework.spec.write_party_csvs`, 1 server + 2
clients by default) whose parties are real ``python -m sqm.mpc.net.party`` processes over loopback TCP, each in its
own session, all with the case's own ``TMPDIR``.  The faults:

- ``kill-before-connect``: client 2 is killed (SIGKILL) 0.1 s after it starts, before it can connect;
- ``kill-sharing`` / ``kill-compute`` / ``kill-server``: client 2 (the server) is killed while the others
  wait for its input shares (its degree-reduction sub-shares);
- ``stopped``: client 2 is stopped (SIGSTOP) while the others wait for its input shares; its sockets stay open;
- ``partition``: client 1's connection to client 2 runs through a loopback TCP proxy in this process (a
  connect redirect in client 1's process, installed by a ``sitecustomize`` hook on its PYTHONPATH: every
  party's job file and command line are unchanged); at the input shares the proxy stops forwarding both ways
  without closing either socket;
- ``foreign-party``: client 2 is a party of another job (another job file, other data, the same addresses);
- ``wrong-identity``: every party runs TLS (``python -m sqm.mpc.net.certs``); the server runs with client 2's
  certificate and key, its own copy of the code patched (by the same hook) to skip the check that its
  certificate names its own index: an insider holding one party's certificate acting as another;
- ``port-squatted``: another process listens on client 2's port before the job starts;
- ``huge-frame`` / ``flood`` (issue 25): an insider (client 2, with valid keys) at the input shares writes a raw
  frame header announcing 4 GiB, or 300 MiB of frames on labels no step asks for, to every peer;
- ``out-of-bounds`` / ``offset`` (issue 25): an insider (client 2) shares its values 1000x beyond its bounds, or
  offset by 100, skipping its own checks: the server's aggregate bounds check on the release
  (:mod:`sqm.mechanism.input_check`) names it before anything is released;
- ``no-noise`` (issue 25): client 2 adds no noise share in a job whose 3 clients draw robust noise (K = 1): the
  job completes, and the other two shares carry the calibrated noise (``tests/test_robust_noise.py`` measures
  it);
- ``stall`` / ``skip`` (issue 25): an insider (client 2) keeps its heartbeats going but never starts the input
  shares step, or goes past it without sending (its step counter moves on): the progress checks of
  :mod:`sqm.mpc.net.liveness` name it;
- ``malformed-garbage`` / ``-deep`` / ``-int`` / ``-shape`` (issue 25): an insider sends, instead of its input
  shares, random bytes, a header nested 100,000 deep, a 10,000-digit integer or an array claiming shape
  [0, 10^30]: each receiver refuses the frame naming the sender (:mod:`sqm.mpc.net.wire`'s limits);
- ``inconsistent-sharing`` (issue 25): client 2 deals shares of degree above t in a job that checks sharings
  (3 clients);
- ``stray-http`` / ``stray-party-999`` / ``stray-tls-hello`` (issue 25): those bytes reach client 2's port during
  its connect phase; these cases pass when the job is unaffected (every party exits 0, the server releases);
- ``readable-key`` (issue 25): client 2's private key is mode 0644; it refuses to start naming the ``chmod``, the
  others end at the connect timeout naming it;
- ``conn-flood`` (issue 43): TLS; while client 2 is in its connect phase, 3,000 unauthenticated connections
  (:mod:`bench.flood`: idle, a TLS ClientHello, garbage, a TLS handshake without a certificate; half from the
  parties' own loopback host, half from six other loopback addresses) are opened to its port and held; then the
  others start.  It passes when the job is unaffected and client 2 held at most its bounds of unidentified
  connections (``sqm.mpc.net.session.MAX_PENDING_PER_SOURCE`` per host, ``MAX_PENDING`` in all);
- ``local-impostor`` (issue 25): a co-tenant of the host starts the server's command line (job id, addresses
  and the public server program, as /proc shows them) with keys of an authority of its own, after the clients
  listen and before the real server starts; it passes when the clients drop it (it exits non-zero with nothing
  written) and the job with the real server completes.
- ``psi-duplicates`` / ``psi-twist`` / ``psi-huge-size`` (issue 43): an insider (client 2) puts the hashes of
  guessed ids twice each in its PSI list, or a point of the curve's twist, or declares 10^12 records
  (:class:`PSIAttack`): every other party refuses naming it, before the server compares anything.

A fault lands in its phase because a bench-only wrapper (:class:`bench.probe.Probe`) around the target's program
writes each exchange's step name to a marker file and, at the chosen step, waits (event loop running) until the
bench has applied the fault (at most ``bench.probe.HOLD_MAX_S``).  What is recorded, per case: every party's exit code,
the seconds from the fault to the last party's exit, the parties each party's message names (and whether
it names the culprit), whether anything was released (a result file or output on stdout), what is left in
the case's TMPDIR and which of the case's processes are still running.  A case passes when every party
that was not itself killed or stopped exits non-zero within ``--bound`` seconds (30) of the fault, each
assessed party names a culprit, nothing is released and nothing is left.  The bench stops a case
``--deadline`` seconds after the fault (kills what still runs and records it).

A party that never connects (``kill-before-connect``, ``readable-key``) cannot be told from one still starting:
the others name it at their connect timeout (60 s by default).  Those two cases therefore run every party with
``--connect-timeout`` at two thirds of the bound (20 s for the default 30 s) unless ``--connect-timeout`` is
given; the record's ``flags`` and the printed table say so.
"""  # noqa: E501 (the first line is ``python -m bench --help``'s one-line summary of this benchmark)
from __future__ import annotations

import argparse
import os
import pickle
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from bench import netsim
from bench.common import finish
from bench.flood import Flood
from bench.probe import Probe
from sqm.mpc.net.party import PartyProgram
import contextlib


class Deviate(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` in a process whose Shamir sharing is inconsistent: every share this
    party deals to the last party is off by one, so its sharings have degree above t (a deviating client)."""

    def __init__(self, inner: PartyProgram):
        self.inner = inner

    async def run(self, ctx):
        from sqm.mpc.shares import shamir

        honest = shamir.share

        def share(secret, n_parties, t, p, rng):
            out = honest(secret, n_parties, t, p, rng)
            out[-1] = (out[-1] + 1) % p
            return out

        shamir.share = share
        try:
            return await self.inner.run(ctx)
        finally:
            shamir.share = honest


class DeviateBounds(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` as a client that multiplies its clipped values by ``factor`` and adds
    ``offset`` (real units) and skips its own bounds checks: consistent sharings of values outside its bounds."""

    def __init__(self, inner: PartyProgram, factor: float = 1000.0, offset: float = 0.0):
        self.inner, self.factor, self.offset = inner, factor, offset

    async def run(self, ctx):
        import numpy as np

        from sqm.mpc.protocols.evaluation import _Feed
        from sqm.mechanism.vertical import ColumnBounds

        honest, factor, offset = ColumnBounds.clip, self.factor, self.offset

        def clip(self, block, col_counts, party):
            out, k = honest(self, block, col_counts, party)
            return out * factor + offset, k

        ColumnBounds.clip = clip
        _Feed.check_in_memory = lambda self: None
        _Feed._checked = lambda self, chunk, want: np.asarray(chunk, np.int64)
        return await self.inner.run(ctx)


class DeviateRecord(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` as a client that bends one record (``record``) and proves the bent block
    as if it were honest, skipping its own checks: ``"value"`` puts 3 times its bound in the record's first column
    (one value outside its range); ``"norm"`` sets every column of the record to its bound (each value in range, the
    record's squared norm over its group above the limit: all its energy on one record).  Its witness (whose digits
    define its shared values, :mod:`sqm.mpc.protocols.input_proof`) encodes the bent values, each value's excess
    over its range added to its lowest digit (or to its looked-up entry), and the norms capped at their limits; its
    lookups' multiplicities count the entries clipped into their tables, its inverses are those of what it shared."""

    def __init__(self, inner: PartyProgram, mode: str = "value", record: int = 0):
        if mode not in ("value", "norm"):
            raise ValueError(f"mode is 'value' or 'norm', got {mode!r}")
        self.inner, self.mode, self.record = inner, mode, record

    async def run(self, ctx):
        import numpy as np

        from sqm.mpc.protocols import input_proof, proof_exchange
        from sqm.mpc.protocols.evaluation import _Feed
        from sqm.mechanism.vertical import ColumnBounds

        honest, mode, rec = ColumnBounds.clip, self.mode, self.record
        seen = [0]  # the records clipped so far: the blocks come chunk by chunk

        def clip(self, block, col_counts, party):
            out, k = honest(self, block, col_counts, party)
            out = np.array(out, dtype=np.float64)
            bounds = [b for cols, b in self.local(col_counts, party) for _ in cols]
            cols = [j for cols, _ in self.local(col_counts, party) for j in cols]
            at, seen[0] = rec - seen[0], seen[0] + out.shape[0]
            if 0 <= at < out.shape[0]:
                if mode == "value":
                    out[at, cols[0]] = 3 * bounds[0]
                else:
                    out[at, cols] = bounds
            return out, k

        def cheat(block, claim):
            bent = np.asarray(block, np.int64)
            x = np.clip(bent, claim.lo, claim.hi)
            lo = np.array(claim.lo, dtype=np.int64)
            parts = [x[:, j:j + 1] - lo[j] if claim.lookups[j] else
                     input_proof.encode_range(x[:, j] - lo[j], claim.hi[j] - claim.lo[j]) for j in range(x.shape[1])]
            for j, part in enumerate(parts):
                if part.shape[1]:
                    part[:, 0] += bent[:, j] - x[:, j]  # the digits (or a looked-up entry) now sum to the bent value
            norms = [np.minimum(np.einsum("ij,ij->i", bent[:, list(c)], bent[:, list(c)]), lim)
                     for c, lim in claim.groups]
            parts += [s[:, None] for s in norms]
            parts += [input_proof.encode_range(lim - s, lim) for (_, lim), s in zip(claim.groups, norms, strict=True)]
            return np.hstack(parts)

        ColumnBounds.clip = clip
        proof_exchange.witness = cheat  # where the exchanges compute a client's witness
        proof_exchange.InputProofs._counts = clipped_counts
        proof_exchange.InputProofs._inverses = shared_inverses
        _Feed.check_in_memory = lambda self: None
        _Feed._checked = lambda self, chunk, want: np.asarray(chunk, np.int64)
        return await self.inner.run(ctx)


def clipped_counts(proofs, ch):
    """BENCH AND TESTS ONLY, a deviating client's ``InputProofs._counts``: the multiplicities of its looked-up
    entries clipped into their tables (they add up to the number of lookups, whatever it shared)."""
    import numpy as np

    from sqm.mpc.protocols import lookup

    claim = proofs._claim(proofs.ctx.pid)
    W = np.array(ch.own, dtype=np.int64)
    for _, wc, t in claim.looked:
        W[:, wc] = np.clip(W[:, wc], 0, claim.tables[t])
    return lookup.table_counts(W, claim)


def shared_inverses(proofs, ch):
    """BENCH AND TESTS ONLY, a deviating client's ``InputProofs._inverses``: 1 / (alpha - y) of every entry it
    shared, those outside their tables included (one inversion each)."""
    import numpy as np

    claim, p, consts = proofs._claim(proofs.ctx.pid), proofs.p, ch.consts[proofs.ctx.pid]
    nl = len(claim.looked)
    out = np.empty((ch.rows, len(consts) * nl), dtype=np.int64)
    for i, a in enumerate(consts):
        for q, (_, wc, _) in enumerate(claim.looked):
            out[:, i * nl + q] = [pow((a - int(y)) % p, -1, p) for y in ch.own[:, wc]]
    return out


class WithholdNoise(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` as a client that adds no noise share (its addend is all zeros)."""

    def __init__(self, inner: PartyProgram):
        self.inner = inner

    async def run(self, ctx):
        import numpy as np

        from sqm.mechanism.client import QuantizedRows

        QuantizedRows.addend = lambda self: np.zeros(self.n_out, dtype=np.int64)
        return await self.inner.run(ctx)


class DeviateOpening(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` with this party's share of every opened result off by one (a party
    deviating in the opening)."""

    def __init__(self, inner: PartyProgram):
        self.inner = inner

    async def run(self, ctx):
        import numpy as np

        from sqm.mpc.protocols import sharing

        honest = sharing.open_to  # this party's process: every opening it makes goes through the module's

        async def open_to(at, share, p, *args, **kw):
            if share is not None:
                share = (np.asarray(share, np.int64) + 1) % p
            return await honest(at, share, p, *args, **kw)

        sharing.open_to = open_to
        try:
            return await self.inner.run(ctx)
        finally:
            sharing.open_to = honest


# sitecustomize for one party process: its connections to some addresses go elsewhere (the proxy: bench.netsim's
# hook, SQM_NETSIM_REDIRECT); or, for an insider acting as another party, its own copy skips the check that its
# certificate names its own index
_CLAIM_HOOK = '''
if os.environ.get("SQM_FAULTS_CLAIM"):  # an insider's modified copy: no check that its own certificate is its own
    try:
        import sqm.mpc.net.certs as _certs
        _file_identity = _certs.file_identity

        def file_identity(path):
            return _file_identity(path)[0], int(os.environ["SQM_FAULTS_CLAIM"])

        _certs.file_identity = file_identity
    except (ImportError, AttributeError):
        pass
'''
_HOOK = netsim.HOOK + _CLAIM_HOOK


class Proxy(netsim.DelayProxy):
    """The partition proxy: a loopback TCP proxy to ``target`` (host, port) without delay (:class:`bench.netsim.
    DelayProxy`); :meth:`cut` stops it forwarding in both directions without closing any socket."""

    def __init__(self, target: tuple[str, int]):
        super().__init__(target, 0.0)


# ----- the cases ---------------------------------------------------------------------------------------------


def _frame(header: bytes) -> bytes:
    """A raw wire frame (:mod:`sqm.mpc.net.wire`) with this JSON header and no buffers: a malformed insider's
    message."""
    import struct

    from sqm.mpc.net import wire

    return wire.MAGIC + bytes([wire.VERSION]) + struct.pack("<I", len(header)) + header


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    target: int  # the party the fault hits (the process killed, stopped, replaced or squatted)
    action: str  # kill | stop | cut | foreign | impostor | squat | huge-frame | flood | stray | cotenant |
    # stall | skip | malformed | readable-key | bounds | offset | no-noise
    step: str | None  # the exchange at which it lands (the probe holds the target, or client 1 for a cut)
    culprits: tuple[int, ...]  # the parties the others' messages must name
    payload: bytes = b""  # stray: the bytes sent to the target's port during the connect phase; malformed: the frame
    clients: int | None = None  # clients this case needs (None: the run's)
    framed: bool = False  # malformed: ``payload`` is a JSON header, sent in a wire frame (:func:`_frame`)
    never_connects: bool = False  # the target never connects: run under a connect timeout below the bound


FAULTS = {f.name: f for f in [
    Fault("kill-before-connect", "client 2 killed before it connects", 2, "kill", None, (2,), never_connects=True),
    Fault("kill-sharing", "client 2 killed while the others wait for its input shares", 2, "kill",
          "input shares", (2,)),
    Fault("kill-compute", "client 2 killed while the others wait for its degree-reduction sub-shares", 2, "kill",
          "degree reduction", (2,)),
    Fault("kill-server", "the server killed during the degree reduction", 0, "kill", "degree reduction", (0,)),
    Fault("stopped", "client 2 stopped (SIGSTOP) while the others wait for its input shares", 2, "stop",
          "input shares", (2,)),
    Fault("partition", "client 1 <-> client 2 cut (proxy drops both ways, sockets open) at the input shares", 2,
          "cut", "input shares", (1, 2)),
    Fault("foreign-party", "client 2 is a party of another job file (other data, same addresses)", 2, "foreign",
          None, (2,)),
    Fault("wrong-identity", "TLS; the server presents client 2's certificate and key", 0, "impostor", None, (0,)),
    Fault("port-squatted", "another process listens on client 2's port before the job starts", 2, "squat", None,
          (2,)),
    Fault("huge-frame", "an insider (client 2, valid keys) announces a 4 GiB frame at the input shares", 2,
          "huge-frame", "input shares", (2,)),
    Fault("flood", "an insider (client 2) sends 300 MiB on labels no step asks for at the input shares", 2,
          "flood", "input shares", (2,)),
    Fault("inconsistent-sharing", "client 2 deals input shares of degree above t; the job checks sharings "
          "(--verify-sharing, 3 clients)", 2, "inconsistent", None, (2,), clients=3),
    Fault("stray-http", "an HTTP request reaches client 2's port during the connect phase (the job must go on)",
          2, "stray", None, (), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    Fault("stray-party-999", "two bytes claiming party 999 reach client 2's port (the job must go on)", 2,
          "stray", None, (), (999).to_bytes(2, "little")),
    Fault("stray-tls-hello", "a TLS hello reaches client 2's plain-TCP port (the job must go on)", 2, "stray",
          None, (), b"\x16\x03\x01\x00\x05hello"),
    Fault("out-of-bounds", "an insider (client 2) shares its values 1000x beyond its bounds, skipping its own "
          "checks (consistent sharings)", 2, "bounds", None, (2,)),
    Fault("offset", "an insider (client 2) adds 100 (its bound is below 1) to every value, skipping its own checks",
          2, "offset", None, (2,)),
    Fault("no-noise", "client 2 adds no noise share in a job whose clients draw robust noise (--robust-noise 1, 3 "
          "clients): the calibrated noise is still there (the job must go on)", 2, "no-noise", None, (), clients=3),
    Fault("stall", "an insider (client 2) keeps sending heartbeats but never starts the input shares step", 2,
          "stall", "input shares", (2,)),
    Fault("skip", "an insider (client 2) goes past the input shares step without sending its shares (heartbeats "
          "go on)", 2, "skip", "input shares", (2,)),
    Fault("malformed-garbage", "an insider (client 2) sends 64 random bytes instead of its input shares", 2,
          "malformed", "input shares", (2,), bytes(range(7, 71))),
    Fault("malformed-deep", "an insider (client 2) sends a frame whose header nests 100,000 lists deep", 2,
          "malformed", "input shares", (2,), b"[" * 100_000 + b"]" * 100_000, framed=True),
    Fault("malformed-int", "an insider (client 2) sends a frame holding a 10,000-digit integer", 2, "malformed",
          "input shares", (2,), b'{"v": ' + b"9" * 10_000 + b', "b": []}', framed=True),
    Fault("malformed-shape", "an insider (client 2) sends an array claiming shape [0, 10^30]", 2, "malformed",
          "input shares", (2,), b'{"v": {"$a": 0}, "b": [["<i8", [0, ' + b"1" + b"0" * 30 + b'], 0]]}', framed=True),
    Fault("readable-key", "TLS; client 2's private key is readable by every user of the host (mode 0644): it refuses "
          "to start, naming the chmod; the others end at the connect timeout naming it", 2, "readable-key", None,
          (2,), never_connects=True),
    Fault("local-impostor", "a co-tenant on the same host starts the server's command line (same job id, "
          "addresses and program) with keys of its own authority before the real server (the job must go on; "
          "the impostor gets nothing)", 0, "cotenant", None, ()),
    Fault("conn-flood", "TLS; 3,000 unauthenticated connections (idle, TLS hellos, garbage, handshakes without a "
          "certificate; half from the parties' host) held at client 2's port during its connect phase (the job "
          "must go on)", 2, "conn-flood", None, ()),
]}
UNAFFECTED = ("stray", "cotenant", "no-noise", "conn-flood")  # after these the job must complete as if unaffected
FLOOD_N = 3000  # conn-flood: connections opened
FLOOD_SOURCES = ["127.0.0.1"] * 6 + [f"127.0.0.{k}" for k in range(2, 8)]  # half from the parties' host


# ----- issue 43, attack 5: an insider's PSI (sqm.mpc.protocols.psi) ----------------------------------------------

class PSIAttack(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` as a client that deviates in the record alignment: ``"psi-duplicates"``,
    the hashes of 4 ids it guesses put twice each in its list (to learn from the answer which are held by exactly
    one other client); ``"psi-twist"``, a point of the curve's twist in place of its first id's; ``"psi-huge-size"``,
    a schema declaring 10^12 records."""

    def __init__(self, inner: PartyProgram, how: str):
        self.inner, self.how = inner, how

    async def run(self, ctx):
        import gmpy2
        import numpy as np

        from sqm.framework import alignment, party
        from sqm.mpc.protocols.psi import _A, _P, hash_ids

        if self.how == "psi-huge-size":
            honest_file = party.load_own_file

            def lying(*a, **kw):
                table, schema = honest_file(*a, **kw)
                return table, {**schema, "rows": 10 ** 12}
            party.load_own_file = lying
            return await self.inner.run(ctx)
        honest, how = alignment.hash_ids_yielding, self.how

        async def changed(ids, n=None, **kw):
            pts = np.array(await honest(ids, n, **kw))
            if how == "psi-duplicates":
                pts[:8] = np.repeat(hash_ids([f"guess-{k}" for k in range(4)]), 2, axis=0)
            else:
                u = 2
                while gmpy2.jacobi((u ** 3 + _A * u * u + u) % _P, _P) != -1:
                    u += 1
                pts[0] = np.frombuffer(u.to_bytes(32, "little"), np.uint8)
            return pts
        alignment.hash_ids_yielding = changed
        return await self.inner.run(ctx)


PSI_ATTACKS = ("psi-duplicates", "psi-twist", "psi-huge-size")
FAULTS.update({f.name: f for f in [
    Fault("psi-duplicates", "an insider (client 2) puts the hashes of guessed ids twice each in its PSI list: the "
          "first receiver finds the repeats, and every party refuses naming it before the server compares anything",
          2, "psi-duplicates", None, (2,)),
    Fault("psi-twist", "an insider (client 2) puts a point of the curve's twist in its PSI list: its receiver "
          "refuses it naming client 2", 2, "psi-twist", None, (2,)),
    Fault("psi-huge-size", "an insider (client 2) declares 10^12 records: every other party refuses naming it "
          "before any id is hashed or sent (before: the server's MemoryError named nobody)", 2, "psi-huge-size", None,
          (2,)),
]})


def party_flags() -> set[str]:
    """The long options ``python -m sqm.mpc.net.party`` accepts (from its ``--help``)."""
    out = subprocess.run([sys.executable, "-m", "sqm.mpc.net.party", "--help"], capture_output=True, text=True,
                         env=_env(None, 1), timeout=60).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out))


def _env(tmp: str | None, local_parties: int, hook: str | None = None, hook_vars: dict | None = None) -> dict:
    from sqm.mpc.net.launch import party_env

    env = party_env(local_parties=local_parties, blas_threads=1)
    if tmp is not None:
        env["TMPDIR"] = tmp
    if hook is not None:
        env["PYTHONPATH"] = hook + os.pathsep + env["PYTHONPATH"]
        env.update(hook_vars or {})
    return env


def _data(seed: int, rows: int = 60, cols: int = 4):
    import numpy as np

    X = np.random.default_rng(seed).normal(size=(rows, cols))
    return X / (1.01 * np.linalg.norm(X, axis=1, keepdims=True))


def _certs(out: str, M: int) -> None:
    res = subprocess.run([sys.executable, "-m", "sqm.mpc.net.certs", "--parties", str(M), "--out", out],
                         capture_output=True, text=True, env=_env(None, 1), timeout=120)
    if res.returncode:
        raise RuntimeError(f"python -m sqm.mpc.net.certs failed: {res.stderr.strip()}")


def _party_dir(certs: str, dest: str, index: int, as_party: int) -> str:
    """Party ``index``'s TLS folder holding ``as_party``'s certificate and key under its own file names."""
    os.makedirs(dest)
    shutil.copy(os.path.join(certs, "mpyc_ca.crt"), dest)
    for ext in ("crt", "key"):
        shutil.copy(os.path.join(certs, f"party_{as_party}.{ext}"), os.path.join(dest, f"party_{index}.{ext}"))
    return dest


_RUNTIME_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")  # MPyC's log lines (no result in them)
_SELF = re.compile(r"^sqm\.runtime\.party (?:server|client \d+):\s*")
_WHO = re.compile(r"\bserver\b|\b(?:client|party) (\d+)|\bparties \[?(\d+(?:(?:, | and |,)\d+)*)\]?",
                  re.IGNORECASE)


def message(stderr: str) -> str:
    """A party's message: its last line starting ``sqm.mpc.net.party`` (else its last line)."""
    from sqm.mpc.net.logs import strip_role

    lines = [strip_role(ln.strip()) for ln in stderr.splitlines() if ln.strip()]
    mine = [ln for ln in lines if ln.startswith("sqm.mpc.net.party")]
    return (mine or lines or [""])[-1]


def named(msg: str, index: int) -> list[int]:
    """The parties a message of party ``index`` names (its own prefix and itself left out)."""
    msg = _SELF.sub("", msg).replace(f"party {index}:", "")
    out = set()
    for m in _WHO.finditer(msg):
        if m.group(0).lower() == "server":
            out.add(0)
        elif m.group(1):
            out.add(int(m.group(1)))
        else:
            out.update(int(x) for x in re.findall(r"\d+", m.group(2)))
    out.discard(index)
    return sorted(out)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _processes_under(path: str) -> list[int]:
    """Live processes whose command line mentions ``path`` (this case's folder)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if path in cmd and _alive(int(d)):
                out.append(int(d))
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _listing(folder: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(folder):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(root, n), folder))
    return sorted(out)


SQUATTER = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16); print('listening', flush=True); "
            "conns = [s.accept()[0] for _ in range(16)]; time.sleep(3600)")


def run_case(name: str, clients: int = 2, flags: list[str] = (), bound: float = 30.0, deadline: float = 90.0,
             seed: int = 0, supported: set[str] | None = None) -> dict:
    """Run one fault case (see the module docstring); return what was observed."""
    from sqm.framework.party import party_program
    from sqm.framework.spec import load_job, write_party_csvs
    from sqm.apps.pca import PCAJobTask

    fault = FAULTS[name]
    clients = fault_clients = FAULTS[name].clients or clients
    M = fault_clients + 1
    load = os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix=f"sqm-faults-{name}-")
    tmp, logs, marks = (os.path.join(work, d) for d in ("tmp", "logs", "marks"))
    for d in (tmp, logs, marks):
        os.makedirs(d)
    go = os.path.join(marks, "go")
    procs: dict[int, subprocess.Popen] = {}
    extra: list[subprocess.Popen] = []
    proxy = flood = None
    supported = supported or party_flags()
    if fault.never_connects and "--connect-timeout" not in flags and "--connect-timeout" in supported:
        flags = [*flags, "--connect-timeout", f"{bound * 2 / 3:g}"]  # see the module docstring
    rec = {"case": name, "what": fault.what, "parties": M, "flags": list(flags), "load_before": round(load, 2)}
    try:
        spec = load_job(write_party_csvs(_data(seed), os.path.join(work, "job"), n_parties=clients, min_intersection=1))
        task = PCAJobTask(1, 1.0, verify_sharing=fault.action == "inconsistent",
                          robust_noise=1 if fault.action == "no-noise" else 0)
        programs = [party_program(spec, i, task) for i in range(M)]
        if fault.action == "inconsistent":
            programs[fault.target] = Deviate(programs[fault.target])
        if fault.action in PSI_ATTACKS:
            programs[fault.target] = PSIAttack(programs[fault.target], fault.action)
        if fault.action == "no-noise":
            programs[fault.target] = WithholdNoise(programs[fault.target])
        if fault.action in ("bounds", "offset"):
            programs[fault.target] = DeviateBounds(programs[fault.target], *((1000.0, 0.0) if fault.action == "bounds"
                                                                             else (1.0, 100.0)))
        if fault.action == "foreign":
            other = load_job(write_party_csvs(_data(seed + 1), os.path.join(work, "other"), n_parties=clients,
                                              addresses=spec.addresses, min_intersection=1))
            programs[fault.target] = party_program(other, fault.target, task)
        holder = 1 if fault.action == "cut" else fault.target
        ssl_dirs = [None] * M
        if fault.action in ("cotenant", "readable-key", "impostor", "conn-flood"):  # TLS: the job's keys, a folder each
            certs = os.path.join(work, "certs")
            _certs(certs, M)
            ssl_dirs = [_party_dir(certs, os.path.join(work, f"tls{i}"), i, i) for i in range(M)]
        if fault.action == "cotenant":  # the co-tenant has its own authority's keys
            _certs(os.path.join(work, "cotenant-certs"), M)
            rec["impostor"] = {}
        if fault.action == "readable-key":
            os.chmod(os.path.join(ssl_dirs[fault.target], f"party_{fault.target}.key"), 0o644)
        if fault.action == "impostor":
            shutil.rmtree(ssl_dirs[fault.target])
            ssl_dirs[fault.target] = _party_dir(certs, os.path.join(work, f"tls{fault.target}"), fault.target,
                                                M - 1 if fault.target != M - 1 else 1)
        hook = os.path.join(work, "hook")
        os.makedirs(hook)
        with open(os.path.join(hook, "sitecustomize.py"), "w") as f:
            f.write(_HOOK)
        hooked = {}  # party -> the hook's environment variables for it
        if fault.action == "cut":
            host, port = spec.addresses[2].rsplit(":", 1)
            proxy = Proxy((host, int(port)))
            hooked[1] = {netsim.REDIRECT_ENV: f"{spec.addresses[2]}=127.0.0.1:{proxy.start()}"}
        if fault.action == "impostor":
            hooked[fault.target] = {"SQM_FAULTS_CLAIM": str(fault.target)}
        if fault.action == "squat":
            port = spec.addresses[fault.target].rsplit(":", 1)[1]
            sq = subprocess.Popen([sys.executable, "-c", SQUATTER, port, work], stdout=subprocess.PIPE, text=True,
                                  start_new_session=True)
            extra.append(sq)
            sq.stdout.readline()
            sq.stdout.close()
        addrs = ",".join(spec.addresses)
        job_ids = {}
        t_start = time.monotonic()
        order = list(range(M))
        if fault.action in ("stray", "cotenant", "conn-flood"):  # the target first (stray, conn-flood: the bytes
            order = [fault.target] + [i for i in range(M) if i != fault.target]  # reach it in its connect phase)
        if fault.action == "cotenant":  # the clients listen; the co-tenant comes first, the real server last
            order = [i for i in range(M) if i != fault.target] + [fault.target]
        for i in order:
            if fault.action == "cotenant" and i == fault.target:
                rec["impostor"] = _cotenant(programs[i], work, addrs, spec, os.path.join(work, "cotenant-certs"),
                                            i, flags, supported, deadline)
            pf = os.path.join(work, f"party{i}.program")
            step = fault.step if i == holder else None
            bad = fault.action if fault.action in ("huge-frame", "flood", "stall", "skip", "malformed") \
                and i == holder else None
            with open(pf, "wb") as f:
                raw = _frame(fault.payload) if fault.framed else fault.payload
                pickle.dump(Probe(programs[i], os.path.join(marks, f"party{i}"), step, go, bad, raw), f, protocol=5)
            job = other if fault.action == "foreign" and i == fault.target else spec
            # each party the id in its own job file (another job's for a foreign party)
            cmd = _party_cmd(pf, i, addrs, os.path.join(work, f"party{i}.result"), flags, supported,
                             getattr(job, "job_id", None) or job_ids.setdefault(job.path, secrets.token_hex(16)),
                             ssl_dirs[i])
            env = _env(tmp, M, hook if i in hooked else None, hooked.get(i))
            with open(os.path.join(logs, f"party{i}.out"), "w") as out, \
                    open(os.path.join(logs, f"party{i}.err"), "w") as err:
                procs[i] = subprocess.Popen(cmd, env=env, start_new_session=True, cwd=work, stdout=out, stderr=err)
            if fault.action == "stray" and i == fault.target:
                rec["stray_delivered"] = send_stray(spec.addresses[i], fault.payload, deadline)
            if fault.action == "conn-flood" and i == fault.target:  # every connection opened before the others start
                flood = Flood(spec.addresses[i], FLOOD_N, deadline, FLOOD_SOURCES)
                rec["flood_opened"] = flood.wait()
        # ---- the fault ----
        t_fault, applied = None, None
        marker = os.path.join(marks, f"party{holder}")
        while t_fault is None:
            if fault.step is None:
                if fault.action == "kill":
                    time.sleep(0.1)
                    os.kill(procs[fault.target].pid, signal.SIGKILL)
                t_fault, applied = time.monotonic(), True
                break
            if os.path.exists(marker) and f"HOLD {fault.step}" in _read(marker):
                if fault.action == "kill":
                    os.kill(procs[fault.target].pid, signal.SIGKILL)
                elif fault.action == "stop":
                    os.kill(procs[fault.target].pid, signal.SIGSTOP)
                elif fault.action == "cut":
                    proxy.cut()
                t_fault, applied = time.monotonic(), True
                open(go, "w").close()
                break
            if all(p.poll() is not None for p in procs.values()) or time.monotonic() - t_start > deadline:
                t_fault, applied = time.monotonic(), False  # the target never reached the step
                break
            time.sleep(0.01)
        if fault.action in ("foreign", "impostor", "squat", "stray", "inconsistent", "cotenant", "readable-key",
                            "bounds", "offset", "no-noise", "conn-flood") or fault.action in PSI_ATTACKS:
            t_fault = t_start  # the fault is there from the start
        # ---- wait for the others ----
        hit = {fault.target} if fault.action in ("kill", "stop") else set()
        waiting = [i for i in range(M) if i not in hit]
        exit_at: dict[int, float] = {}
        while True:
            now = time.monotonic()
            for i in range(M):
                if i not in exit_at and procs[i].poll() is not None:
                    exit_at[i] = now
            if all(i in exit_at for i in waiting) or now - t_fault > deadline:
                break
            time.sleep(0.02)
        time.sleep(0.3)  # what a party leaves behind right after the last exit
        if flood is not None:
            rec["flood"], flood = flood.stop(), None
        running = [i for i in waiting if i not in exit_at]
        ours = {p.pid for p in list(procs.values()) + extra}  # the parties themselves: see all_exited
        leftover_procs = [pid for pid in _processes_under(work) if pid not in ours]
        # the bench's own clean-up: the stopped or unfinished parties, the squatter, anything left over
        for pid in set(leftover_procs) | {p.pid for p in list(procs.values()) + extra}:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for p in list(procs.values()) + extra:
            p.wait()
        leftovers = _listing(tmp)
        per_party = []
        for i in range(M):
            err, out = _read(os.path.join(logs, f"party{i}.err")), _read(os.path.join(logs, f"party{i}.out"))
            msg = message(err)
            printed = [ln for ln in out.splitlines() if ln.strip() and not _RUNTIME_LOG.match(ln)]
            released = any(os.path.exists(os.path.join(work, f"party{i}.result{x}")) for x in ("", ".tmp")) \
                or bool(printed)
            per_party.append({
                "party": i, "role": "server" if i == 0 else f"client {i}",
                "fault": (fault.action if i in hit or i == fault.target else None),
                "exit": None if i in running else procs[i].returncode,
                "exited_by_itself": i in exit_at and i not in hit,
                "seconds_after_fault": round(exit_at[i] - t_fault, 3) if i in exit_at and i not in hit else None,
                "message": msg[:400], "names": named(msg, i), "released": released, "stdout": out[:300],
                "steps": _read(os.path.join(marks, f"party{i}")).split("\n")[:-1],
            })
        rec.update(_verdict(fault, per_party, hit, running, t_fault, exit_at, waiting, bound, rec.get("impostor") or {},
                            rec.get("flood")))
        rec.update(applied=applied, per_party=per_party, tmp_leftovers=leftovers,
                   leftover_processes=len(leftover_procs), proxy_dropped_bytes=proxy.dropped if proxy else None)
        rec["passed"] = bool(applied) and passed(rec)
        return rec
    finally:
        for p in list(procs.values()) + extra:
            if p.poll() is None:
                p.kill()
                p.wait()
        if proxy is not None:
            proxy.close()
        if flood is not None:
            flood.stop()
        shutil.rmtree(work, ignore_errors=True)


def _party_cmd(program: str, index: int, addrs: str, result: str, flags, supported: set[str], job_id: str,
               ssl_dir: str | None) -> list[str]:
    """A ``python -m sqm.mpc.net.party`` command line of a case (the options that party's runtime has): TLS with
    ``ssl_dir``'s keys, or plain loopback TCP without."""
    cmd = [sys.executable, "-m", "sqm.mpc.net.party", "--program", program, "--index", str(index), "--parties", addrs,
           "--result", result, *flags]
    if "--job-id" in supported:
        cmd += ["--job-id", job_id]
    if ssl_dir is not None:
        cmd += ["--ssl", "--ssl-dir", ssl_dir]
    elif "--insecure-plaintext" in supported:  # the cases without keys run plain loopback TCP
        cmd.append("--insecure-plaintext")
    return cmd


def _cotenant(program, work: str, addrs: str, spec, own_certs: str, index: int, flags, supported,
              deadline: float) -> dict:
    """Another user of this host runs party ``index``'s command line (read from /proc: job id, addresses;
    the program is public for the server) with keys of an authority of its own; waits until it exits (at most
    ``deadline`` s).  Returns its exit code, last message and whether it wrote a result."""
    d = os.path.join(work, "cotenant")
    os.makedirs(d)
    tls = _party_dir(own_certs, os.path.join(d, "tls"), index, index)
    pf, rf = os.path.join(d, "program"), os.path.join(d, "result")
    with open(pf, "wb") as f:
        pickle.dump(program, f, protocol=5)
    cmd = _party_cmd(pf, index, addrs, rf, flags, supported, spec.job_id, tls)
    with open(os.path.join(d, "err"), "w") as err:
        p = subprocess.Popen(cmd, env=_env(os.path.join(work, "tmp"), 3), start_new_session=True, cwd=d,
                             stdout=subprocess.DEVNULL, stderr=err)
    try:
        code = p.wait(deadline)
    except subprocess.TimeoutExpired:
        p.kill()
        code = p.wait()
    return {"exit": code, "message": message(_read(os.path.join(d, "err")))[:400],
            "released": os.path.exists(rf) or os.path.exists(rf + ".tmp")}


def send_stray(addr: str, payload: bytes, deadline: float = 30.0) -> bool:
    """Connect to ``addr`` once it listens and send ``payload`` (read any answer); True if it was delivered."""
    import socket

    host, port = addr.rsplit(":", 1)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with socket.create_connection((host, int(port)), timeout=2) as sock:
                sock.sendall(payload)
                with contextlib.suppress(OSError):
                    sock.recv(256)
                return True
        except OSError:
            time.sleep(0.02)
    return False


def _verdict(fault, per_party, hit, running, t_fault, exit_at, waiting, bound, impostor=None, flood=None) -> dict:
    """The acceptance criteria of issue 12 (issue 25's for the cases that must leave the job unaffected), each
    observed separately."""
    if fault.action in UNAFFECTED:
        last = max((exit_at[i] for i in waiting if i in exit_at), default=None)
        seconds = None if running or last is None else round(last - t_fault, 3)
        crit = {"all_exited": not running, "zero_exit": all(per_party[i]["exit"] == 0 for i in waiting),
                "released_by_the_server": bool(per_party[0]["released"])}
        if fault.action == "cotenant":
            crit["impostor_refused"] = impostor.get("exit") not in (None, 0) and not impostor.get("released")
        if fault.action == "conn-flood":  # every connection attempted, and the target held no more than its bounds
            from sqm.mpc.net.session import MAX_PENDING, MAX_PENDING_PER_SOURCE

            flood = flood or {}
            crit["flood_delivered"] = flood.get("opened", 0) + flood.get("connect_failed", 0) == FLOOD_N
            crit["flood_bounded"] = (flood.get("held", MAX_PENDING + 1) <= MAX_PENDING and all(
                n <= MAX_PENDING_PER_SOURCE for n in flood.get("held_per_source", {}).values()))
        return {"seconds_to_last_exit": seconds, "still_running_at_deadline": running, "assessed": list(waiting),
                "names_ok": {}, "criteria": crit}
    assessed = [i for i in waiting if i != fault.target or fault.action == "cut"]
    last = max((exit_at[i] for i in waiting if i in exit_at), default=None)
    seconds = None if running or last is None else round(last - t_fault, 3)
    names_ok = {}
    for i in assessed:
        ok_names = set(fault.culprits) - {i}
        names_ok[i] = bool(ok_names & set(per_party[i]["names"]))
    crit = {
        "all_exited": not running,
        "within_bound": seconds is not None and seconds <= bound,
        "nonzero_exit": all(per_party[i]["exit"] not in (None, 0) for i in waiting),
        "names_culprit": all(names_ok.values()),
        "nothing_released": not any(p["released"] for p in per_party),
    }
    return {"seconds_to_last_exit": seconds, "still_running_at_deadline": running, "assessed": assessed,
            "names_ok": {str(k): v for k, v in names_ok.items()}, "criteria": crit}


def passed(rec: dict) -> bool:
    return all(rec["criteria"].values()) and not rec["tmp_leftovers"] and not rec["leftover_processes"]


# ----- command line -------------------------------------------------------------------------------------------


def run(cases=None, clients: int = 2, idle_timeout=None, connect_timeout=None, bound: float = 30.0,
        deadline: float = 90.0, seed: int = 0, progress: bool = True) -> dict:
    from bench.attacks import ATTACKS, run_attack

    cases = list(FAULTS) + list(ATTACKS) if not cases else list(cases)
    unknown = [c for c in cases if c not in FAULTS and c not in ATTACKS]
    if unknown:
        raise ValueError(f"unknown fault case(s) {unknown}; choose from {list(FAULTS) + list(ATTACKS)}")
    attacks = [c for c in cases if c in ATTACKS]
    cases = [c for c in cases if c in FAULTS]
    supported = party_flags()
    flags, notes = [], []
    for opt, val in (("--idle-timeout", idle_timeout), ("--connect-timeout", connect_timeout)):
        if val is None:
            continue
        if opt in supported:
            flags += [opt, f"{val:g}"]
        else:
            notes.append(f"{opt} not supported by python -m sqm.mpc.net.party: not passed (runtime default used)")
    rep = {"cpus": os.cpu_count(), "bound_s": bound, "deadline_s": deadline, "flags": flags, "notes": notes,
           "runtime_flags": sorted(f for f in supported if "timeout" in f or f == "--ssl"), "cases": []}
    loads = []
    for c in cases:
        loads.append(os.getloadavg()[0])
        if progress:
            print(f"faults: {c} ...", file=sys.stderr, flush=True)
        rec = run_case(c, clients, flags, bound, deadline, seed, supported)
        rep["cases"].append(rec)
    rep["attacks"] = []
    for c in attacks:  # issue 43's trust attacks (bench.attacks)
        loads.append(os.getloadavg()[0])
        if progress:
            print(f"faults: {c} ...", file=sys.stderr, flush=True)
        rep["attacks"].append(run_attack(c, seed))
    rep["load_range"] = [round(min(loads), 2), round(max(loads), 2)] if loads else None
    rep["idle"] = bool(loads) and max(loads) < 0.5  # nothing else running: the 1-minute load stayed under 0.5
    return rep


def print_table(rep: dict) -> None:
    from bench.attacks import print_attacks

    if rep["cases"]:
        _print_faults(rep)
    print_attacks(rep.get("attacks", []))


def _print_faults(rep: dict) -> None:
    print(f"Fault injection: {rep['cases'][0]['parties'] if rep['cases'] else '?'} real MPyC party processes per "
          f"case on {rep['cpus']} cores; pass = every party that was not itself killed or stopped exits non-zero "
          f"within {rep['bound_s']:g} s of the fault naming the culprit, nothing released, nothing left (stray-*, "
          f"local-impostor, no-noise, conn-flood: every party exits 0 and the server releases, the job unaffected)")
    for n in rep["notes"]:
        print(f"  note: {n}")
    print(f"  flags passed to every party: {' '.join(rep['flags']) or '(none: the runtime defaults)'}")
    for r in rep["cases"]:
        if r["flags"] != rep["flags"]:
            print(f"  {r['case']}: every party ran with {' '.join(r['flags'])} (a party that never connects is named "
                  f"at the others' connect timeout)")
    head = f"{'case':20s} {'exit codes':18s} {'time s':>7s}  {'names (party->named)':26s} {'released':8s} " \
           f"{'left in TMPDIR / procs':24s} {'load':>5s}  result"
    print(head)
    print("-" * len(head))
    for r in rep["cases"]:
        codes = " ".join(f"{p['party']}:" + ("K" if p["fault"] == "kill" else "S" if p["fault"] == "stop" else
                                             "-" if p["exit"] is None else str(p["exit"])) for p in r["per_party"])
        secs = "-" if r["seconds_to_last_exit"] is None else f"{r['seconds_to_last_exit']:.2f}"
        if r["still_running_at_deadline"]:
            secs = f">{rep['deadline_s']:g}"
        names = " ".join(f"{i}->{','.join(map(str, r['per_party'][int(i)]['names'])) or '?'}"
                         f"{'' if ok else '!'}" for i, ok in r["names_ok"].items())
        if "nothing_released" in r["criteria"]:
            rel = "YES" if not r["criteria"]["nothing_released"] else "no"
        else:  # a case that must leave the job unaffected: the server's release is expected
            rel = "yes (ok)" if r["criteria"]["released_by_the_server"] else "NONE"
        left = f"{len(r['tmp_leftovers'])} files / {r['leftover_processes']}"
        if r["tmp_leftovers"]:
            left += f" ({r['tmp_leftovers'][0].split(os.sep)[0]})"
        failed = [k for k, v in r["criteria"].items() if not v]
        if r["tmp_leftovers"] or r["leftover_processes"]:
            failed.append("nothing_left")
        if not r["applied"]:
            failed.append("fault_not_applied")
        print(f"{r['case']:20s} {codes:18s} {secs:>7s}  {names:26s} {rel:8s} {left:24s} {r['load_before']:5.2f}  "
              f"{'PASS' if r['passed'] else 'FAIL: ' + ', '.join(failed)}")
    print("exit codes: party:code (K = killed by the fault, S = stopped by the fault, - = still running at the "
          "deadline, killed by the bench); names: '!' = the message does not name the culprit; "
          "load = 1-minute load average before the case")
    if rep.get("load_range"):
        lo, hi = rep["load_range"]
        print(f"machine: {rep['cpus']} cores, 1-minute load average {lo:.2f}-{hi:.2f} before the cases "
              f"({'idle' if rep['idle'] else 'NOT idle: other work was running'})")
    for r in rep["cases"]:
        for p in r["per_party"]:
            if p["message"]:
                print(f"  {r['case']} party {p['party']}: {p['message'][:160]}")
        if r.get("flood"):
            f = r["flood"]
            print(f"  {r['case']}: {f.get('opened', 0)} connections opened in {f.get('flood_s', '?')} s "
                  f"({f.get('connect_failed', 0)} cut during the connect or TLS), {f.get('held', '?')} still held by "
                  f"party {FAULTS[r['case']].target} after the flood ({f.get('held_per_source', {})})")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    from bench.attacks import ATTACKS

    ap.add_argument("--cases", help=f"comma-separated cases (default: all): {', '.join(FAULTS)}; issue 43's trust "
                                    f"attacks: {', '.join(ATTACKS)}")
    ap.add_argument("--clients", type=int, default=2, help="clients per job (default 2; parties = clients + 1)")
    ap.add_argument("--idle-timeout", type=float, help="passed to every party when python -m sqm.mpc.net.party has it "
                                                       "(default: the runtime's)")
    ap.add_argument("--connect-timeout", type=float, help="passed to every party (default: the runtime's; the cases "
                                                          "whose target never connects, kill-before-connect and "
                                                          "readable-key: two thirds of --bound)")
    ap.add_argument("--bound", type=float, default=30.0, help="seconds within which every party must exit "
                                                              "(default 30, issue 12)")
    ap.add_argument("--deadline", type=float, default=90.0, help="seconds after the fault when the bench kills "
                                                                 "what still runs (default 90)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (default 0)")
    ap.add_argument("--check", action="store_true", help="exit 1 if any case fails")
    ap.add_argument("--json", help="write the observations to this JSON file")


def cli(args) -> int:
    cases = [c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None
    rep = run(cases, args.clients, args.idle_timeout, args.connect_timeout, args.bound, args.deadline, args.seed)
    finish(rep, args, print_table)
    return 1 if args.check and not all(r["passed"] for r in rep["cases"] + rep.get("attacks", [])) else 0



class SkipVerifiedNoise(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` as a client that, under verified addends
    (:mod:`sqm.mpc.protocols.addend_check`), adds no noise (shares zeros for its addend, ``"skip"``), reveals no seed
    to its verifier (``"withhold"``) or a seed other than the one it committed to (``"wrong-seed"``)."""

    def __init__(self, inner: PartyProgram, mode: str = "skip"):
        if mode not in ("skip", "withhold", "wrong-seed"):
            raise ValueError(f"mode is 'skip', 'withhold' or 'wrong-seed', got {mode!r}")
        self.inner, self.mode = inner, mode

    async def run(self, ctx):
        import os

        import numpy as np

        from sqm.mpc.protocols.addend_check import AddendCheck

        if self.mode == "skip":
            AddendCheck.own_addend = lambda self, key: np.zeros(self.size, dtype=np.int64)
        elif self.mode == "withhold":
            AddendCheck.seed_for_verifier = lambda self, seed: b""
        else:
            AddendCheck.seed_for_verifier = lambda self, seed: os.urandom(len(seed))
        return await self.inner.run(ctx)


class RecordNoise(PartyProgram):
    """BENCH AND TESTS ONLY: runs ``inner`` as a client that also writes the noise share it adds to ``path``
    (``numpy.save``): its own draw (:class:`sqm.mechanism.client.QuantizedRows`), or under verified addends the
    checked one."""

    def __init__(self, inner: PartyProgram, path: str):
        self.inner, self.path = inner, path

    async def run(self, ctx):
        import numpy as np

        from sqm.mechanism.client import QuantizedRows
        from sqm.mpc.protocols.addend_check import AddendCheck

        path, own, drawn = self.path, AddendCheck.own_addend, QuantizedRows.addend

        def own_addend(self, key):
            z = own(self, key)
            np.save(path, z)
            return z

        def addend(self):
            z = drawn(self)
            np.save(path, z)
            return z

        AddendCheck.own_addend = own_addend
        QuantizedRows.addend = addend
        return await self.inner.run(ctx)
