"""Private set intersection of the parties' record ids: ECDH (Diffie-Hellman) PSI for n clients, and the server
when it holds a table of its own, the server comparing only fully blinded values.

What it computes: each holder has a set of ids (byte strings); afterwards each holder knows, for each of ITS
OWN ids, only whether it is in the intersection of ALL holders' sets and, for each member, a rank: its position
in one order common to every holder (the order of the clients' fully blinded values, which no id determines).
Every party learns every set size (from the job's schema exchange, before the PSI) and the intersection size;
what else each role learns is the table in ``docs/explanation/record-alignment.md`` ("What each party learns").

The group: Curve25519's prime-order subgroup, x-only (X25519, RFC 7748, through libsodium's
``crypto_scalarmult`` in PyNaCl, or Intel's multi-buffer X25519 where installed, the same bytes:
:mod:`sqm.mpc.protocols.x25519`).  An id is hashed onto the curve, never its twist (whose points would give
away one bit of each id's hash, which a receiver could test a guess against), by try-and-increment
(:func:`hash_ids`: halves of SHA-512 of a domain, a counter and the id, as u-coordinates, until
u^3 + A u^2 + u is a square mod p); every key is a fresh X25519 scalar (clamped: a multiple of the
cofactor 8, so from the first blinding on every value lies in the subgroup of prime order l).  Blinding is
u -> [k]u, and blindings commute: [k_1][k_2]u = [k_2][k_1]u, so a value blinded under every client's key is the
same at whichever client it started.  Why this group and not ristretto255: PyNaCl binds no ristretto255
function, and libsodium's ristretto255 scalar multiplication is slower than its X25519 (docs/benchmarks.md,
"Figures behind design choices"): the protocol's cost is one or n such multiplications per id.  Why
not a PSI library: OpenMined's PSI (the well-kept one on PyPI) is a two-party client/server protocol on P-256;
it does not cover n parties that must not see each other's values.

The protocol with every client's key (``"alignment_keys": "all"``, and every job with t >= 2; where t = 1 the
default replaces steps 1-3: "Keys as strong as the job" below) (clients 1..n, server 0; every set size is public,
from the job's schema exchange, and each party has refused sizes beyond its own policy before this starts:
:func:`sqm.framework.alignment.check_set_sizes`):

1. each client draws a secret key k_j (32 bytes from its cryptographic generator, fresh for every job),
   hashes its ids onto the curve, SHUFFLES the list with a permutation from its own cryptographic generator,
   and blinds every value with k_j;
2. the lists travel once around the ring of clients (client j sends to client j + 1, client n to client
   1), each client blinding what it receives with its own key and passing it on, in chunks, pipelined:
   at step s client j blinds chunk s - h of the list of the client h places before it.  A list keeps its
   owner's shuffled order, so its owner can map the answer back; nobody else can map it to anything;
3. the client that adds the last key sends the fully blinded list to the server, never to a client;
4. checks (below), then one verdict exchange: every client tells every party which lists it found repeated
   values in (usually none); the server compares nothing before every client's verdict is in;
5. the server finds the values present in every client's list and sends each client, for ITS OWN list
   only, which positions are in the intersection and their ranks in the sorted order of the fully blinded
   values of the intersection.

Checks on everything received: every value must be the canonical encoding of a point of
Curve25519 (u < p, top bit clear, u^3 + A u^2 + u a square mod p: :func:`off_curve`, one Jacobi symbol per
value, a small fraction of its blinding's cost) and not of small order (its blinding would be zero), else the
receiver refuses naming the sender at once.  The values of a list must be distinct: blinding is a bijection of the
prime-order subgroup, so a repeated value (a client doubling the hash of a guessed id would otherwise learn
"held by exactly one other client" from the answer) survives every hop, and two values that differ by a point
of small order become equal at the next blinding.  So every client checks that its blinded output of each list
it received has distinct values (it keeps 16 bytes of each), and the server checks each list it receives; the
verdict exchange (step 4) puts every finding before the server's comparison, and every party blames the same
party: the sender to the first receiver, in ring order, that found repeats in a list.

Keys as strong as the job (the default; the job file's ``"alignment_keys": "threshold"``).  The secret sharing the
job runs on resists t parties (t = (M - 1) // 2 for M parties): with a server and 2 or 3 clients, t = 1, and the
server and any one client together already hold enough shares to rebuild every client's data.  Blinding every list
under every client's key (steps 1-3, n multiplications per id of every list) pays for coalitions the rest of the job
does not resist.  So where t = 1 (:func:`shared_mode`):

1'. the clients agree a key K: each client sends a fresh 32-byte contribution (its PSI key, from its cryptographic
    generator) to every other client, never to the server; K = SHA-256 of a domain and every contribution in client
    order (uniform unless every client colludes); the clients compare a digest of K among themselves
    (``ctx.check_clients``: a client that sent different contributions to different clients is refused before any
    id is sent; the server learns only the verdict);
2'. each client shuffles its list, blinds it under K (one multiplication per id) and sends it, chunk by chunk,
    straight to the server; no client receives any list;
3'. the server checks each list as it checks a fully blinded one (on the curve, distinct), one verdict exchange
    (the clients find nothing, having received nothing), then steps 5 on.

With a server table, stage 2 is the same but client 1 blinds the server's list under K r_1 and every other client
under r_j alone (V_C, from stage 1, is already under K).  What changes: every party alone learns what it learns with
every key (the server receives lists under K, which it does not hold; a client receives no list at all); but the
server together with any one client holds K and can test guessed ids against every client's list, as it can
rebuild every share of the job's data.  With t >= 2 (5 or more parties) the ring runs in both modes: no design
with one key the clients share resists a coalition of the server and a client.

The server's own set (a job where the server holds the labels, keyed by id): the server is then a holder
too, and must learn only which of ITS ids are in the intersection of all, never which client holds an id.  So
it never holds its own list in the same blinded space as any single client's list:

6. stage 1 is the clients' PSI above (steps 1-4): the server receives the clients' lists under K = k_1 ... k_n
   and finds V_C, the values common to every client's list (learning the clients' Venn counts, as without a
   table); it does NOT blind the clients' lists with a key of its own;
7. stage 2, one more pass around the ring, server -> client 1 -> ... -> client n -> server, pipelined, with two
   lists: the server's own list, shuffled, under its key k_0; and V_C, padded to the public length L = the
   smallest client set with random points (hashed random strings) at random places, under a fresh secret scalar
   s of the server.  The longer of the two goes out under k_0 s at once (one multiplication, :func:`product_key`),
   the other gets the missing key when it comes back, so both come back under k_0 s.  Client j draws a fresh
   secret scalar r_j and blinds the server's list under k_j r_j (one multiplication) and the padded V_C under r_j
   alone; then the same checks and one more verdict exchange;
8. the server now holds its list and V_C both under k_0 s K R (R = r_1 ... r_n) and compares them: it learns
   exactly which of its ids are in V_C, i.e. in the intersection of all, and their rank (their place in V_C's
   order), and nothing per client: its own list lies under the r's, which no client list carries, and V_C holds
   only values every client has.  Each client's answer then marks its ids in V_C that the server holds too,
   ranked among those.

What each party receives (the tests record every frame: ``tests/test_psi_view.py``):

- a client: chunks of the other clients' lists, each blinded under at least the key of their owner, which
  it does not hold (it cannot compute [k_owner] H(guess) for a guessed id: that is the DDH assumption), and
  each list under a different set of keys (the lists that have passed 1, 2, ... n - 1 hops), so it cannot
  compare two of them either; with a server table, the server's list under k_0 and the padded V_C under s (one
  of them under k_0 s: keys it does not hold, and no two of its lists comparable; V_C's length L is public, so it
  does not learn |V_C|); then from the server one membership bit per entry of its own list and the ranks of its
  own members;
- the server: every client's list blinded under ALL the clients' keys, of which it holds none; it cannot
  hash a guess to anything comparable.  It sees which fully blinded values coincide, so with 3 or more
  clients it learns how many ids each group of clients shares (the sizes of the Venn diagram's regions);
  with 2 clients that is the clients' intersection size.  With a table of its own, its list and V_C come back
  under the clients' r's, which it cannot remove.  Values are unlinkable across jobs (fresh keys).

Against a coalition of the server and one client (outside the runtime's model, t = 1 for up to 4 parties): with
every client's key (``"alignment_keys": "all"``) the coalition holds some keys, never all the clients', so it still
cannot test a guessed id against any value; with the threshold's keys (the default) it holds K and can.

Hiding membership (``hide_membership``): stage 1 is the same (the server holds no table); the
server then places the U values of the union of every client's list at uniformly random distinct positions of
0..S-1, S = the sum of the set sizes (a public function of the sizes; the placement from the server's own
cryptographic generator, :func:`place_union`), answers each client with the position of every id of its list,
and keeps the intersection's indicator over the S positions for the secure evaluation
(:meth:`sqm.mpc.protocols.evaluation.Evaluation._masked_rows`).  A client's positions are then a uniformly random
subset of 0..S-1 of its set's size, whatever the others hold, and it is told neither U nor m: nothing it
receives depends on which of its ids are members.  The server learns the set sizes, U, m and the Venn counts.

Cost (``python -m bench psi``): with every client's key, n scalar multiplications per id of every client (each
client blinds every list once), 32 bytes per id per hop (n - 1 hops between clients and one to the server); with
the shared key, one multiplication and one hop (to the server) per id; then a membership bit and a 4-byte rank back
(hidden membership: a 4-byte position); the checks add a Jacobi symbol per value received and a sort of 16 bytes
per value blinded.  A server table adds stage 2: the server blinds n_0 + L values and the
shorter list once more (n_0 + L + min(n_0, L)), pipelined with the clients' work; each client blinds n_0 + L
values; n_0 + L values make n + 1 hops.  Before, the server blinded n_0 values and every client's list (the sum
of the client sets), and its list made n + 1 hops.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
from dataclasses import dataclass

import numpy as np

from sqm.mpc.net import wire
from sqm.errors import RefusedError, UsageError
from sqm.mpc.net.liveness import busy
from sqm.mpc.protocols.stream import chunk_count

POINT_BYTES = 32
ALIGNMENT_STEP = "record alignment: ids blinded"  # a client's progress: ids it blinded, over every hop
CHUNK_IDS = 1 << 14  # ids per chunk on the ring: 512 KiB a chunk, about 0.7 s of blinding
DOMAIN = b"sqm-psi-v1 hash to curve25519\x00"
DUMMY_DOMAIN = b"sqm-psi-v1 padding\x00"  # the random strings the padding of V_C hashes (never an id's form)
_P = 2 ** 255 - 19
_A = 486662
_MASK = (1 << 255) - 1
_L = 2 ** 252 + 27742317777372353535851937790883648493  # the prime order of Curve25519's main subgroup
MAX_SET = (1 << 32) - 1  # ranks and positions travel as uint32: no set (nor, hiding membership, their sum) above
SEEN_BYTES = 16  # bytes of each blinded value a receiver keeps to check that a list's values are distinct


class PSIError(RefusedError):
    """A peer's value could not be blinded (a point of small order: only a deviating peer sends one)."""


def _symbols(rows: np.ndarray) -> np.ndarray:
    """The Legendre symbol of u^3 + A u^2 + u mod p for the u-coordinate of each row of ``rows`` ((N, 32) uint8,
    little endian, top bit clear): an int8 array, 1 on Curve25519, -1 on its twist, 0 at u = 0 (and u = p).  One
    symbol per row (gmpy2), over the rows at once."""
    import gmpy2

    b, from_bytes, mpz = rows.tobytes(), int.from_bytes, gmpy2.mpz
    p, a = mpz(_P), mpz(_A)
    us = [mpz(from_bytes(b[r:r + POINT_BYTES], "little")) for r in range(0, len(b), POINT_BYTES)]
    rhs = [u * (u * (u + a) + 1) % p for u in us]
    return np.fromiter(map(gmpy2.legendre, rhs, itertools.repeat(p, len(rhs))), dtype=np.int8, count=len(rhs))


def _not_below_p(rows: np.ndarray) -> np.ndarray:
    """Which rows of ``rows`` ((N, 32) uint8, top bit clear) hold a u-coordinate of p or more."""
    return (rows[:, 31] == 0x7F) & np.all(rows[:, 1:31] == 0xFF, axis=1) & (rows[:, 0] >= 0xED)


def _hash_batch(ids: list[bytes]) -> np.ndarray:
    """:func:`hash_ids` of a list of byte strings."""
    out = np.empty((len(ids), POINT_BYTES), dtype=np.uint8)
    todo = np.arange(len(ids))  # the ids not yet on the curve
    sha512 = hashlib.sha512
    for c in range(256):
        if not todo.size:
            break
        pre = DOMAIN + bytes([c])
        digests = np.frombuffer(b"".join([sha512(pre + ids[i]).digest() for i in todo.tolist()]),
                                dtype=np.uint8).reshape(-1, 2, POINT_BYTES).copy()
        for half in (0, 1):  # the first half, then the second half of the ids whose first half failed
            u = digests[:, half]
            u[:, 31] &= 0x7F
            ok = (_symbols(u) == 1) & ~_not_below_p(u)
            out[todo[ok]] = u[ok]
            todo, digests = todo[~ok], digests[~ok]
    if todo.size:  # pragma: no cover - probability 2^-512 per id
        raise PSIError("an id could not be hashed onto the curve")
    return out


def hash_ids(ids, n: int | None = None) -> np.ndarray:
    """The ids (an iterable of str or bytes) hashed onto Curve25519 (not its twist): an (N, 32) uint8 array of
    u-coordinates, little endian.  Try-and-increment: SHA-512 of :data:`DOMAIN`, a counter byte and the id's
    UTF-8 bytes; each 32-byte half in turn, its top bit cleared, is u if u < p and u^3 + A u^2 + u is a
    non-zero square mod p (a half fails with probability 1/2: 1.3 hashes per id on average; no id needs all
    256 counters but with probability 2^-512).  Batches of ids go through each step together (the hashes, then
    the Legendre symbols of those still off the curve).  ``n``: the number of ids, when known (checked)."""
    chunks: list[np.ndarray] = []  # blocks of 2^17 ids (4 MiB): no copy of the whole list is ever made twice
    it = iter(ids)
    while True:
        batch = [x.encode() if isinstance(x, str) else bytes(x) for x in itertools.islice(it, 1 << 17)]
        chunks.append(_hash_batch(batch))
        if len(batch) < 1 << 17:
            break
    got = sum(c.shape[0] for c in chunks)
    if n is not None and got != n:
        raise UsageError(f"{got} ids hashed, {n} expected")
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


async def hash_ids_yielding(ids, n: int | None = None, batch: int = CHUNK_IDS) -> np.ndarray:
    """:func:`hash_ids` in batches of ``batch`` ids, giving the event loop a turn between batches: a
    party hashing millions of ids keeps sending its heartbeats, so its peers, waiting for its
    first chunk, do not take it for silent (``sqm.mpc.net.liveness``)."""
    import asyncio

    pool = _pooled(n)
    if pool is not None:  # on this party's own local processes, the loop free meanwhile
        with busy():
            return await pool.hash_ids(hash_ids, ids, n, batch)
    it, parts = iter(ids), []
    with busy():  # computing, loop free: its peers wait for its first chunk (sqm.mpc.net.liveness)
        while True:
            part = hash_ids(itertools.islice(it, batch))
            parts.append(part)
            if part.shape[0] < batch:
                break
            await asyncio.sleep(0)
    got = sum(p.shape[0] for p in parts)
    if n is not None and got != n:
        raise UsageError(f"{got} ids hashed, {n} expected")
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _pooled(n: int | None):
    """This party's local processes for ``n`` values (None: a count not known yet) where it has some
    (:mod:`sqm.mpc.protocols.psi_pool`, a job with workers), or None: this process does the work."""
    from sqm.mpc.protocols.psi_pool import active

    return active(n)


def blind(key: bytes, points: np.ndarray) -> np.ndarray:
    """Every u-coordinate in ``points`` ((N, 32) uint8) multiplied by the scalar ``key`` (X25519, many points a
    call where Intel's multi-buffer library is installed: :mod:`sqm.mpc.protocols.x25519`)."""
    from sqm.mpc.protocols.x25519 import SmallOrderError, scalarmult

    pool = _pooled(points.shape[0])
    if pool is not None:  # contiguous parts on this party's own local processes, in order (a refusal raised here)
        return np.concatenate([v for _, v in pool.parts(functools.partial(blind, key), points)])
    try:
        return scalarmult(key, points)
    except SmallOrderError:
        raise PSIError("a value is a point of small order (blinding it gives zero)") from None


def off_curve(points: np.ndarray) -> int | None:
    """The index of the first value of ``points`` ((N, 32) uint8) that is not the canonical encoding of a point of
    Curve25519: its top bit set, u >= p, or u^3 + A u^2 + u not a square mod p (a point of the twist); None if
    every value is one.  One Legendre symbol per value (gmpy2), over the values at once."""
    if points.shape[0] == 0:
        return None
    pool = _pooled(points.shape[0])
    if pool is not None:  # contiguous parts on this party's own local processes: the first bad value of the first
        return next((a + g for a, g in pool.parts(off_curve, points) if g is not None), None)  # part holding one
    bad = np.flatnonzero((points[:, 31] & 0x80).astype(bool) | _not_below_p(points))
    limit = int(bad[0]) if bad.size else points.shape[0]
    symbols = _symbols(points[:limit])  # 0 only at u = 0, a point of small order (refused by blind)
    twist = np.flatnonzero(symbols < 0)
    if twist.size:
        return int(twist[0])
    return None if limit == points.shape[0] else limit


def clamp(key: bytes) -> int:
    """The scalar X25519 multiplies by for the 32-byte ``key`` (RFC 7748's clamping)."""
    e = int.from_bytes(key, "little")
    return (e & ~7 & ((1 << 255) - 1)) | (1 << 254)


def product_key(key: bytes, rng: np.random.Generator) -> tuple[bytes, bytes]:
    """(r, e): a fresh secret scalar r (32 bytes from ``rng``) and one X25519 key e with [e]P = [key][r]P for every
    point P of the curve, so that a list is blinded under key and r by one multiplication.  e is key * r mod l and
    0 mod 8 (by the Chinese remainder theorem: a multiple of the cofactor, so a point's small-order part goes as
    it does under two clamped keys); it must also be a clamped scalar (2^254 <= e < 2^255) for libsodium to use it
    as it is, which holds for about half of the r: r is drawn again until it does (2 draws on average)."""
    k = clamp(key)
    inv = pow(_L, -1, 8)
    while True:
        r = rng.bytes(32)
        a = k * clamp(r) % _L
        e = a + ((-a * inv) % 8) * _L
        if 1 << 254 <= e < 1 << 255:
            return r, e.to_bytes(32, "little")


def _progress(ctx, step: str, done: int, due: int) -> None:
    """This party's progress (:meth:`sqm.mpc.net.transport.PartyTransport.progress`), where its transport has one."""
    report = getattr(ctx, "progress", None)
    if report is not None:
        report(step, done, due)


def ring_next(j: int, n: int) -> int:
    """The client after client ``j`` (1..n) on the ring."""
    return j % n + 1


def _owner(i: int, h: int, n: int) -> int:
    """Whose list client ``i`` blinds as the h-th hop (h = 0: its own)."""
    return (i - 1 - h) % n + 1


def schedule(i: int, s: int, sizes: dict[int, int], chunk: int) -> list[tuple[int, int, int]]:
    """What client ``i`` blinds at step ``s``: (hop h, owner o, chunk index k) for each list o whose chunk
    k = s - h exists, h = 0..n-1 (h = n - 1: the last key, then the chunk goes to the server)."""
    n = len(sizes)
    out = []
    for h in range(n):
        o = _owner(i, h, n)
        k = s - h
        if 0 <= k < chunk_count(sizes[o], chunk):
            out.append((h, o, k))
    return out


def _chunk_len(size: int, k: int, chunk: int) -> int:
    return min(chunk, size - k * chunk)


def n_steps(sizes: dict[int, int], chunk: int) -> int:
    """Steps of the clients' ring: the longest client list's chunks plus n - 1 hops."""
    return max(chunk_count(s, chunk) for s in sizes.values()) + len(sizes) - 1


def _points(rows: int) -> wire.Validator:
    """A chunk of ``rows`` blinded ids: exactly an (rows, 32) uint8 array."""
    return wire.array(np.uint8, (rows, POINT_BYTES), what="blinded ids")


@dataclass(frozen=True)
class Intersection:
    """A holder's result: ``member[r]`` whether its r-th id (in the order it gave them) is in the
    intersection, and ``rank[r]`` (members only; -1 elsewhere) its position in the common order."""

    member: np.ndarray
    rank: np.ndarray
    size: int

    def order_digest(self) -> bytes:
        """SHA-256 of the members' ranks in this client's own order of them: equal at two clients exactly
        when they hold the intersection's records in the same order (compared among clients only)."""
        r = self.rank[self.member].astype("<u4")
        return hashlib.sha256(b"sqm-psi record order\x00" + r.tobytes()).digest()


@dataclass(frozen=True)
class Union:
    """A party's result of the membership-hiding variant (``hide_membership``): the union of every client's ids
    placed at random distinct positions of 0..``size``-1, ``size`` S the sum of the set sizes (public).  At a client,
    ``position[r]``: where its r-th id (in the order it gave them) lies; a uniformly random subset of 0..S-1
    whatever the others hold; ``intersection`` and ``union`` None (a client is told neither).  At the server,
    ``indicator[u]``: whether position u holds an id in every client's set (``intersection`` m of them), and
    ``union`` U, the positions that hold an id at all."""

    size: int
    intersection: int | None = None
    position: np.ndarray | None = None
    indicator: np.ndarray | None = None
    union: int | None = None


async def intersect(ctx, sizes: dict[int, int], points: np.ndarray | None = None, key: bytes | None = None,
                    rng: np.random.Generator | None = None, chunk: int = CHUNK_IDS,
                    hide_membership: bool = False, all_keys: bool = False) -> Intersection | Union | int:
    """Run the PSI (module docstring) in party ``ctx``: a client gives its ids hashed onto the curve
    (``points``, :func:`hash_ids`), its secret ``key`` and a cryptographic generator ``rng`` (its shuffle and, with
    a server table, its r), and gets its :class:`Intersection`; the server gives nothing and gets the intersection
    size.  ``sizes``: every client's set size (public, the same at every party, already within every party's size
    policy).  ``rng`` at the server: its cryptographic generator (None: one keyed from OS entropy).

    With ``sizes[0]`` too, the server holds a set of its own (e.g. the labels of a job that trains a model) and takes
    part as a holder: it gives its points, key and generator like a client and gets its :class:`Intersection`
    (see "The server's own set" in the module docstring).

    ``hide_membership``: the server answers each client with the positions of its ids in the union placed over
    S = the sum of the set sizes instead, and keeps the intersection's indicator over those positions; every party
    gets a :class:`Union`.  Not with a server set of its own.

    ``all_keys``: every list blinded under every client's key (the ring), whatever the runtime's threshold; else
    keys as strong as the job (:func:`shared_mode`: with threshold t = 1, one key the clients share; every party
    must pass the same value)."""
    from sqm.mpc.shares.randomness import secure_generator

    sizes = {int(c): int(v) for c, v in sizes.items()}
    own = sizes.pop(0, None)
    if hide_membership and own is not None:
        raise UsageError("membership-hiding alignment is for the clients' sets only (the server holds none)")
    n = len(sizes)
    if sorted(sizes) != list(range(1, n + 1)) or n < 2 or min(sizes.values()) < 1 or (own is not None and own < 1):
        raise UsageError(f"PSI needs the set sizes of clients 1..n (n >= 2, each >= 1), and the server's if it "
                         f"holds one (>= 1), got {sizes if own is None else {0: own, **sizes}}")
    if max(sizes.values()) > MAX_SET or (own or 0) > MAX_SET or (hide_membership and sum(sizes.values()) > MAX_SET):
        raise UsageError(f"PSI sets (and, hiding membership, their sum) are limited to {MAX_SET:,} ids (positions "
                         f"and ranks are 32-bit), got {sizes if own is None else {0: own, **sizes}}")
    shared = shared_mode(ctx, all_keys)
    if ctx.is_server:
        rng = secure_generator() if rng is None else rng
        holder = None
        if own is not None:
            assert points is not None and key is not None  # a server holding a set gives its points and key
            holder = _Own(points, key, rng, own)
        if shared:
            await client_key(ctx, None)
        return await _server(ctx, sizes, chunk, holder, hide_membership, rng, shared)
    i = ctx.pid
    if points is None or points.shape != (sizes[i], POINT_BYTES):
        raise UsageError(f"client {i}: {sizes[i]} hashed ids expected")
    assert key is not None and rng is not None  # a client gives its key and generator (the docstring)
    perm = rng.permutation(sizes[i])
    mine = points[perm]  # shuffled before anything leaves this client
    del points  # the caller passes the only other reference: one copy of the points is held
    if shared:  # the clients' shared key K: each blinds its own list under it, straight to the server
        key = await client_key(ctx, key)
        assert key is not None  # a client gets K
        await _client_direct(ctx, sizes, mine, key, chunk)
        await _verdicts(ctx, [], _direct_sender, "the clients' lists")
    else:
        await _verdicts(ctx, await _client_ring(ctx, sizes, mine, key, chunk), _ring_sender(n), "the clients' lists")
    del mine
    if own is not None:  # stage 2: the server's list under k_j r_j (shared: K r_1, then r_j), the padded V_C under r_j
        r, e = product_key(key, rng)
        found = await _server_pass(ctx, [own, min(sizes.values())], chunk, keys=[e if i == 1 or not shared else r, r])
        await _verdicts(ctx, found, _pass_sender(n), "the server's lists")
    if hide_membership:
        S = sum(sizes.values())
        answer = (await ctx.send_recv({}, [0], _positions(sizes[i], S), "PSI: the union"))[0]
        position = np.empty(sizes[i], dtype=np.int64)
        position[perm] = answer["position"]
        return Union(S, position=position)
    answer = (await ctx.send_recv({}, [0], _answer(sizes[i]), "PSI: the intersection"))[0]
    return _unshuffled(ctx, perm, answer["member"], answer["rank"], sizes[i], 0)


def _check_points(ctx, sender: int, values: np.ndarray) -> None:
    """Refuse, naming ``sender``, a chunk holding a value that is not a point of Curve25519 (canonical)."""
    bad = off_curve(values)
    if bad is not None:
        raise _bad_peer(ctx, sender, "a value that is not the canonical encoding of a point of Curve25519 (a point "
                                     "of its twist, or u >= p)")


def _repeats(parts: list[np.ndarray]) -> bool:
    """Whether the rows of ``parts`` ((k, w) uint8 arrays: one list's values, or their first w bytes) repeat."""
    if not parts:
        return False
    v = np.ascontiguousarray(np.concatenate(parts))
    v = v.view(f"S{v.shape[1]}").ravel()
    return np.unique(v).shape[0] != v.shape[0]


async def _client_ring(ctx, sizes: dict[int, int], mine: np.ndarray, key: bytes, chunk: int) -> list[list[int]]:
    """Client ``ctx.pid``'s part of the clients' ring (steps 1-3): returns [owner, hop] of each list whose values it
    found repeated after blinding (its own list excepted: its file's ids are checked distinct)."""
    i, n = ctx.pid, len(sizes)
    nxt, prv = ring_next(i, n), _owner(i, 1, n)
    held: dict[tuple[int, int], np.ndarray] = {}  # chunks received, blinded at the next step
    seen: dict[int, list[np.ndarray]] = {}  # owner -> the first bytes of this client's blinded values of its list
    blinded, due = 0, sum(sizes.values())  # this client blinds every client's list once, hop by hop
    for s in range(n_steps(sizes, chunk)):
        to_next: list[np.ndarray] = []
        to_server: list[np.ndarray] = []
        for h, o, k in schedule(i, s, sizes, chunk):
            data = mine[k * chunk:(k + 1) * chunk] if h == 0 else held.pop((o, k))
            try:
                out = blind(key, data)
            except PSIError as e:
                raise _bad_peer(ctx, prv, str(e)) from None
            blinded += len(data)
            _progress(ctx, ALIGNMENT_STEP, blinded, due)
            if h:
                seen.setdefault(o, []).append(out[:, :SEEN_BYTES].copy())
            (to_next if h < n - 1 else to_server).append(out)
        incoming = [(o, k) for h, o, k in schedule(prv, s, sizes, chunk) if h < n - 1]
        outgoing: dict[int, list[np.ndarray] | np.ndarray] = {}  # the next client: chunks; the server: one
        if to_next:
            outgoing[nxt] = to_next
        if to_server:
            outgoing[0] = to_server[0]
        expect = wire.list_of([_points(_chunk_len(sizes[o], k, chunk)) for o, k in incoming], "blinded id chunks")
        got = await ctx.send_recv(outgoing, [prv] if incoming else [], expect, RING_STEP)
        for (o, k), g in zip(incoming, got[0] if incoming else [], strict=False):
            _check_points(ctx, prv, g)
            held[(o, k)] = g
    return [[o, (i - o) % n] for o, parts in sorted(seen.items()) if _repeats(parts)]


RING_STEP = "PSI: blinding around the ring"
DIRECT_STEP = "PSI: each client's list under the clients' key"  # (no "share" in a PSI step's name)
KEY_STEP = "PSI: the clients' key contributions"  # each client's fresh random contribution to K, to every other client
KEY_CHECK = "the alignment's client key"  # what the clients compare (a digest of K) through ctx.check_clients
KEY_STEPS = (KEY_STEP, f"compare {KEY_CHECK}")  # the exchanges whose values are fresh random bytes of every job
SHARED_KEY_DOMAIN = b"sqm-psi-v1 the clients' shared key\x00"


def shared_mode(ctx, all_keys: bool = False) -> bool:
    """Whether this job's alignment blinds under one key the clients share (the default where the runtime's
    threshold is t = 1: no party alone holds the key and sees a list under it; module docstring, "Keys as strong as
    the job") rather than under every client's key (``all_keys``, or t >= 2, where a coalition of t parties may
    hold a client and the server)."""
    return not all_keys and int(getattr(ctx, "t", (ctx.M - 1) // 2)) <= 1


async def client_key(ctx, contribution: bytes | None) -> bytes | None:
    """The clients' shared key K (None at the server, which takes part in the same exchanges and sees none of it):
    each client sends its 32-byte ``contribution`` (fresh from its own cryptographic generator) to every other
    client, never to the server; K = SHA-256 of a domain and every client's contribution in client order, uniform
    unless every client colludes.  The clients then compare a digest of K among themselves (a client that sent
    different contributions to different clients is refused before any id is sent; the server learns only the
    verdict)."""
    others = [c for c in ctx.clients if c != ctx.pid]
    check = wire.digest(POINT_BYTES)
    step = KEY_STEP
    if ctx.is_server:
        await ctx.send_recv({}, [], None, step)
        await ctx.check_clients(None, KEY_CHECK, check)
        return None
    assert contribution is not None and len(contribution) == POINT_BYTES  # a client's own 32 random bytes
    got = dict(zip(others, await ctx.send_recv({c: contribution for c in others}, others, check, step), strict=True))
    got[ctx.pid] = contribution
    key = hashlib.sha256(SHARED_KEY_DOMAIN + b"".join(got[c] for c in sorted(got))).digest()
    await ctx.check_clients(hashlib.sha256(SHARED_KEY_DOMAIN + b"digest\x00" + key).digest(),
                            KEY_CHECK, check)
    return key


async def _client_direct(ctx, sizes: dict[int, int], mine: np.ndarray, key: bytes, chunk: int) -> None:
    """Client ``ctx.pid``'s part with the shared key: its own (shuffled) list blinded under K, chunk by chunk, straight
    to the server (one multiplication per id); it receives no list."""
    i = ctx.pid
    steps = max(chunk_count(v, chunk) for v in sizes.values())
    for s in range(steps):
        out = {}
        if s < chunk_count(sizes[i], chunk):
            try:
                out[0] = blind(key, mine[s * chunk:(s + 1) * chunk])
            except PSIError as e:  # pragma: no cover - its own hashed ids are on the curve
                raise _bad_peer(ctx, i, str(e)) from None
            _progress(ctx, ALIGNMENT_STEP, min((s + 1) * chunk, sizes[i]), sizes[i])
        await ctx.send_recv(out, [], None, DIRECT_STEP)


def _direct_sender(o: int, h: int) -> int:
    """With the shared key: who sent list ``o`` to the server (its owner)."""
    return o


def _ring_sender(n: int):
    """Stage 1: who sent list ``o`` to its receiver at hop ``h`` (1..n-1 a client, n the server)."""
    return lambda o, h: (o - 1 + h - 1) % n + 1


def _pass_sender(n: int):
    """Stage 2: who sent list ``q`` to its receiver at hop ``h`` (client h, or the server at h = n + 1)."""
    return lambda q, h: h - 1


_LISTS = {"the clients' lists": "client {}'s list of blinded ids",
          "the server's lists": ("the server's list of blinded ids", "the server's list of the clients' common ids")}


def _list_name(stage: str, lst: int) -> str:
    names = _LISTS[stage]
    return names.format(lst) if isinstance(names, str) else names[lst]


async def _verdicts(ctx, found: list, sender_of, stage: str) -> None:
    """One exchange after a pass (step 4): every client sends every party the [list, hop] of each list whose values
    it found repeated (``found``; at the server, its own findings, which it adds); every party then blames the same
    party, the sender to the first receiver in ring order that found repeats (the smallest hop, then list), and
    refuses before any value is compared."""
    from sqm.mpc.net.abort import ProtocolError, party_label

    n = len(ctx.clients)

    def ok(v) -> bool:
        return (isinstance(v, list) and len(v) <= 2 * n and all(
            isinstance(c, list) and len(c) == 2 and all(type(x) is int and 0 <= x <= n + 1 for x in c) for c in v))
    check = wire.value(list, "the lists in which a party found repeated values", ok)
    step = f"PSI: verdict on {stage}"
    if ctx.is_server:
        got = await ctx.send_recv({}, ctx.clients, check, step)
    else:
        got = await ctx.send_recv({p: found for p in range(ctx.M)}, ctx.clients, check, step)
        found = []
    complaints = [tuple(c) for g in got for c in g] + [tuple(c) for c in found]
    if complaints:
        lst, hop = min(complaints, key=lambda c: (c[1], c[0]))
        culprit = party_label(sender_of(lst, hop))
        raise ProtocolError(f"party {ctx.pid}: refused before any value was compared: {culprit} sent repeated "
                            f"values in {_list_name(stage, lst)} (PSI): the values of a list must be distinct; "
                            f"nothing released")


async def _server_pass(ctx, lengths: list[int], chunk: int, lists: list | None = None, keys: list | None = None,
                       back_keys: list | None = None):
    """Stage 2's pass around the ring (module docstring, step 7), pipelined like the clients' ring: the server
    blinds chunk k of each of ``lists`` (``lengths`` long) under ``keys[q]`` and sends it to client 1 at step k;
    client i blinds it under its ``keys[q]`` at step k + i and sends it on; client n sends it back to the server,
    which blinds it under ``back_keys[q]`` (None: not at all) as it arrives.  So the server's own work goes on
    while the clients blind.  Returns the lists as they come back at the server, and at a client the [list, hop]
    of each list whose values it found repeated after blinding."""
    n = len(ctx.clients)
    counts = [chunk_count(L, chunk) for L in lengths]

    def at(k: int) -> list[tuple[int, int]]:
        return [(q, k) for q in range(len(lengths)) if 0 <= k < counts[q]]

    def expect(k: int):
        return wire.list_of([_points(_chunk_len(lengths[q], kk, chunk)) for q, kk in at(k)], "blinded id chunks")
    step = "PSI: the server's lists around the ring"
    steps = max(counts) + n
    assert keys is not None  # every party blinds under its keys
    if ctx.is_server:
        assert lists is not None and back_keys is not None  # the server sends its lists, blinds them coming back
        back = [np.empty((L, POINT_BYTES), dtype=np.uint8) for L in lengths]
        for s in range(steps):
            out = [blind(keys[q], lists[q][k * chunk:(k + 1) * chunk]) for q, k in at(s)]
            inc = at(s - n)
            got = await ctx.send_recv({1: out} if out else {}, [n] if inc else [], expect(s - n), step)
            for (q, k), v in zip(inc, got[0] if inc else [], strict=False):
                _check_points(ctx, n, v)
                if back_keys[q] is not None:
                    try:
                        v = blind(back_keys[q], v)
                    except PSIError as e:
                        raise _bad_peer(ctx, n, str(e)) from None
                back[q][k * chunk:k * chunk + v.shape[0]] = v
        return back
    i = ctx.pid
    prv, nxt = i - 1, (i + 1 if i < n else 0)
    held: dict[tuple[int, int], np.ndarray] = {}
    seen: dict[int, list[np.ndarray]] = {q: [] for q in range(len(lengths))}
    blinded, due = 0, sum(lengths)
    for s in range(steps):
        out = []
        for q, k in at(s - i):
            try:
                v = blind(keys[q], held.pop((q, k)))
            except PSIError as e:
                raise _bad_peer(ctx, prv, str(e)) from None
            blinded += len(v)
            _progress(ctx, ALIGNMENT_STEP + " (the server's lists)", blinded, due)
            seen[q].append(v[:, :SEEN_BYTES].copy())
            out.append(v)
        inc = at(s - prv)
        got = await ctx.send_recv({nxt: out} if out else {}, [prv] if inc else [], expect(s - prv), step)
        for (q, k), g in zip(inc, got[0] if inc else [], strict=False):
            _check_points(ctx, prv, g)
            held[(q, k)] = g
    return [[q, i] for q in sorted(seen) if _repeats(seen[q])]


def _positions(size: int, S: int) -> wire.Validator:
    pos_ok = wire.array(np.uint32, (size,), what="union positions")

    def check(x):
        if not isinstance(x, dict) or set(x) != {"position"}:
            raise wire.WireError("expected the positions: {'position': positions}")
        pos = pos_ok(x["position"])
        if size and (int(pos.max()) >= S or np.unique(pos).shape[0] != size):
            raise wire.WireError(f"positions repeated or beyond the {S:,} positions of the union")
        return {"position": pos.astype(np.int64)}
    return check


def _unshuffled(ctx, perm: np.ndarray, member_bits: np.ndarray, ranks: np.ndarray, size: int,
                sender: int) -> Intersection:
    """A holder's :class:`Intersection` in the order it gave its ids, from the answer about its shuffled list."""
    member_shuffled = np.unpackbits(member_bits, count=size).astype(bool)
    m = int(member_shuffled.sum())
    if ranks.shape[0] != m or (m and (int(ranks.max()) >= m or np.unique(ranks).shape[0] != m)):
        raise _bad_peer(ctx, sender, f"{ranks.shape[0]} ranks for {m} members")
    member = np.zeros(size, dtype=bool)
    member[perm] = member_shuffled
    rank = np.full(size, -1, dtype=np.int64)
    rank[perm[member_shuffled]] = ranks
    return Intersection(member, rank, m)


@dataclass
class _Own:
    """The server's own set, when it holds one: its hashed ids, key and shuffle generator, and their count."""

    points: np.ndarray
    key: bytes
    rng: np.random.Generator
    size: int
    result: Intersection | None = None  # set by stage 2


def _answer(size: int) -> wire.Validator:
    member_ok = wire.array(np.uint8, ((size + 7) // 8,), what="membership bits")
    rank_ok = wire.array(np.uint32, (None,), what="ranks")

    def check(x):
        if not isinstance(x, dict) or set(x) != {"member", "rank"}:
            raise wire.WireError("expected the intersection: {'member': bits, 'rank': ranks}")
        return {"member": member_ok(x["member"]), "rank": rank_ok(x["rank"])}
    return check


def _bad_peer(ctx, peer: int, what: str) -> Exception:
    from sqm.mpc.net.abort import ProtocolError, party_label

    return ProtocolError(f"party {ctx.pid}: malformed message from {party_label(peer)} in the PSI: {what}; job "
                         f"aborted, nothing released")


async def _server(ctx, sizes: dict[int, int], chunk: int, own: _Own | None, hide: bool, rng: np.random.Generator,
                  shared: bool = False):
    """The server's side: collect each client's fully blinded list (from the last client on its ring; ``shared``:
    from its owner) into one array, check it, hear every client's verdict, then find the values in every list and
    answer each client about its own list; returns the intersection size.  With ``own``, stage 2 first (module
    docstring, steps 6-8), and returns its own :class:`Intersection`.  ``hide``: the answer is the positions of the
    union placed over S."""
    import asyncio

    n = len(sizes)
    start = dict(zip(sizes, np.cumsum([0] + list(sizes.values()))[:-1].tolist(), strict=False))
    values = np.empty((sum(sizes.values()), POINT_BYTES), dtype=np.uint8)  # the lists, owner after owner
    steps = max(chunk_count(v, chunk) for v in sizes.values()) if shared else n_steps(sizes, chunk)
    for s in range(steps):
        senders, expect, where = [], {}, []
        for c in sizes:
            if shared:  # client c sends chunk s of its own list
                last = [(c, s)] if s < chunk_count(sizes[c], chunk) else []
            else:  # client c sends the chunk it blinds last: list next(c), chunk s - (n - 1)
                last = [(o, k) for h, o, k in schedule(c, s, sizes, chunk) if h == n - 1]
            if last:
                senders.append(c)
                expect[c] = _points(_chunk_len(sizes[last[0][0]], last[0][1], chunk))
                where.append(last[0])
        got = await ctx.send_recv({}, senders, expect, DIRECT_STEP if shared else RING_STEP)
        for c, (o, k), v in zip(senders, where, got, strict=False):
            _check_points(ctx, c, v)
            at = start[o] + k * chunk
            values[at:at + v.shape[0]] = v
    found = [[o, n] for o in sizes if _repeats([values[start[o]:start[o] + sizes[o]]])]
    await _verdicts(ctx, found, _direct_sender if shared else _ring_sender(n), "the clients' lists")
    loop = asyncio.get_running_loop()
    # in a worker thread: numpy's sort releases the GIL (the event loop ran within 0.3 s throughout 3 x 10^6
    # values, 2 s of sorting), so the server's heartbeats go on while the clients await its answer
    if hide:
        with busy():
            position, indicator = await loop.run_in_executor(None, union_positions, values, sizes)
        del values
        S = sum(sizes.values())
        place = place_union(indicator, S, rng)
        held = np.zeros(S, dtype=bool)
        held[place[indicator]] = True
        await ctx.send_recv({o: {"position": place[position[o]].astype(np.uint32)} for o in sizes}, [], None,
                            "PSI: the union")
        return Union(S, int(indicator.sum()), indicator=held, union=int(indicator.shape[0]))
    with busy():
        position, common, uniq = await loop.run_in_executor(None, _union, values, sizes)
    del values
    if own is not None:  # stage 2: which of V_C (the clients' common values) the server holds too
        common = await _stage_two(ctx, own, uniq[common], common, sizes, chunk)
    del uniq
    rank_of = np.cumsum(common) - 1
    member = {o: common[pos] for o, pos in position.items()}
    await ctx.send_recv({o: {"member": np.packbits(member[o]), "rank": rank_of[pos][member[o]].astype(np.uint32)}
                         for o, pos in position.items()}, [], None, "PSI: the intersection")
    if own is None:
        return int(common.sum())
    return own.result


async def _stage_two(ctx, own: _Own, vc: np.ndarray, common: np.ndarray, sizes: dict[int, int], chunk: int):
    """Steps 7-8 at the server: returns ``common`` (the union's values in every client's list) narrowed to those
    the server holds too, and sets ``own.result`` (its :class:`Intersection`)."""
    import asyncio

    loop = asyncio.get_running_loop()

    async def off_loop(fn, *args):  # in a worker thread, the event loop free (heartbeats go on)
        with busy():
            return await loop.run_in_executor(None, fn, *args)
    n = len(sizes)
    perm = own.rng.permutation(own.size)
    L = min(sizes.values())  # V_C padded to the smallest client set: a client learns nothing of |V_C|
    place = own.rng.choice(L, size=vc.shape[0], replace=False)
    padded = np.array(await off_loop(hash_ids, [DUMMY_DOMAIN + own.rng.bytes(16) for _ in range(L)]))
    padded[place] = vc
    s, e = product_key(own.key, own.rng)  # a fresh secret s, and e = k_0 s: one multiplication by both
    # Both lists must end under k_0 s K R: the longer goes out under e and comes back as it is, the other goes out
    # under k_0 (its list) or s (V_C) and gets the other key when it comes back (n_0 + 2 L or 2 n_0 + L blindings).
    keys, back_keys = ([e, s], [None, own.key]) if own.size >= L else ([own.key, e], [s, None])
    back = await _server_pass(ctx, [own.size, L], chunk, lists=[own.points[perm], padded], keys=keys,
                              back_keys=back_keys)
    del padded
    found = [[q, n + 1] for q, v in enumerate(back) if _repeats([v])]
    await _verdicts(ctx, found, _pass_sender(n), "the server's lists")
    theirs = back[1][place].view(f"S{POINT_BYTES}").ravel()  # V_C under k_0 s K R, in V_C's order
    ours = back[0].view(f"S{POINT_BYTES}").ravel()  # its list under k_0 s K R, in its shuffled order
    order = np.argsort(theirs, kind="stable")
    at = np.clip(np.searchsorted(theirs[order], ours), 0, max(0, theirs.shape[0] - 1))
    hit = theirs.shape[0] > 0
    mine_in = (theirs[order][at] == ours) if hit else np.zeros(own.size, dtype=bool)
    held = np.zeros(vc.shape[0], dtype=bool)  # which of V_C the server holds
    held[order[at[mine_in]]] = True
    rank_q = np.cumsum(held) - 1
    own.result = _unshuffled(ctx, perm, np.packbits(mine_in), rank_q[order[at[mine_in]]].astype(np.uint32),
                             own.size, 0)
    narrowed = common.copy()
    narrowed[np.flatnonzero(common)[~held]] = False
    return narrowed


def place_union(indicator: np.ndarray, S: int, rng: np.random.Generator) -> np.ndarray:
    """Membership hidden: the position in 0..S-1 of each of the union's U values (``indicator``: which are in
    every list; unused here, a test replaces this function by one that uses it), uniformly random and distinct,
    from the server's cryptographic generator ``rng``."""
    return rng.choice(S, size=int(indicator.shape[0]), replace=False)


def common_values(values: np.ndarray, sizes: dict[int, int]) -> tuple[dict, dict]:
    """``values``: the lists of ``sizes`` (owner -> length, in that order) one after another, (N, 32) uint8, values
    distinct within a list.  For each list: which entries are in every list, and, for those, their rank among the
    common values in sorted byte order."""
    position, common = union_positions(values, sizes)
    rank_of = np.cumsum(common) - 1
    member = {o: common[pos] for o, pos in position.items()}
    rank = {o: rank_of[pos][member[o]] for o, pos in position.items()}
    return member, rank


def union_positions(values: np.ndarray, sizes: dict[int, int]) -> tuple[dict, np.ndarray]:
    """``values`` as in :func:`common_values`.  For each list: the position of each entry in the union of all
    lists in sorted byte order; and the union's indicator of the values present in every list."""
    position, common, _ = _union(values, sizes)
    return position, common


def _union(values: np.ndarray, sizes: dict[int, int]) -> tuple[dict, np.ndarray, np.ndarray]:
    """:func:`union_positions`, and the union's values in sorted order ((U, 32) uint8)."""
    uniq, inv, counts = np.unique(values.view(f"S{POINT_BYTES}").ravel(), return_inverse=True, return_counts=True)
    indicator = counts == len(sizes)
    position, start = {}, 0
    for o, size in sizes.items():
        position[o] = inv[start:start + size]
        start += size
    return position, indicator, uniq.view(np.uint8).reshape(-1, POINT_BYTES)
