"""Private set intersection of the clients' record ids: ECDH (Diffie-Hellman) PSI for n clients, the server
comparing only fully blinded values.

What it computes: each client holds a set of ids (byte strings); afterwards each client knows which of ITS
OWN ids are in the intersection of all clients' sets, and, for each of them, a rank: the position of that
record in one order common to all clients (the order of the fully blinded values, which no id determines).
Every party learns the set sizes and the intersection size.

The group: Curve25519's prime-order subgroup, x-only (X25519, RFC 7748, through libsodium's
``crypto_scalarmult`` in PyNaCl).  An id is hashed onto the curve, never its twist (whose points would give
away one bit of each id's hash, which a receiver could test a guess against), by try-and-increment
(:func:`hash_ids`: halves of SHA-512 of a domain, a counter and the id, as u-coordinates, until
u^3 + A u^2 + u is a square mod p); every key is a fresh X25519 scalar (clamped: a multiple of the
cofactor 8, so from the first blinding on every value lies in the subgroup of prime order l).  Blinding is u -> [k]u, and blindings
commute: [k_1][k_2]u = [k_2][k_1]u, so a value blinded under every client's key is the same at whichever
client it started.  Why this group and not ristretto255: PyNaCl binds no ristretto255 function, and
libsodium's ristretto255 scalar multiplication took 60 us here against 42 us for X25519 (2-core AMD EPYC,
idle; OpenSSL's own X25519 is 42 us too): the protocol's cost is n such multiplications per id.  Why not
a PSI library: OpenMined's PSI (the well-kept one on PyPI) is a two-party client/server protocol on P-256;
it does not cover n parties that must not see each other's values.

The protocol (clients 1..n, server 0; every client's set size is public, from the job's schema exchange):

1. each client draws a secret key k_j (32 bytes from the operating system's CSPRNG, fresh for every job),
   hashes its ids onto the curve, SHUFFLES the list with a permutation from its own cryptographic
   generator, and blinds every value with k_j;
2. the lists travel once around the ring of clients (client j sends to client j + 1, client n to client
   1), each client blinding what it receives with its own key and passing it on, in chunks, pipelined:
   at step s client j blinds chunk s - h of the list of the client h places before it.  A list keeps its
   owner's shuffled order, so its owner can map the answer back; nobody else can map it to anything;
3. the client that adds the last key sends the fully blinded list to the server, never to a client;
4. the server finds the values present in every client's list and sends each client, for ITS OWN list
   only, which positions are in the intersection and their ranks in the sorted order of the fully blinded
   values of the intersection.

The server's own set (a PBM-VFL job, where the server holds the labels, keyed by id): the server is then a
holder too.  It draws a key k_0 and a shuffle like a client, blinds its shuffled list under k_0 and sends it
around the ring from client 1 to client n, each blinding it once more (one hop per step, pipelined like the
clients' lists), and client n sends it back to the server; every client's list, arriving fully blinded under
the clients' keys, gets k_0 at the server.  All lists then lie under all n + 1 keys, and the server answers each
client about its list and finds its own members through its own shuffle.  A client receives the server's list
only under k_0, which it does not hold; the server holds one key of n + 1, never all, so it can test a guessed
id against nothing (the argument for a coalition of the server and one client, below, again).  Each holder
learns which of its own ids are in the intersection of every holder's set; the server also learns the sizes
of the Venn regions of all n + 1 sets.  Cost: the server blinds its own list once and every client's list once
(one multiplication per id of every list), and its list makes n + 1 hops.

Hiding membership (``hide_membership``, issue 29): the ring is the same; the server then answers each client
with the position of every id of its list in the union of all lists, in the sorted order of the fully blinded
values (pseudo-random, so a client's positions are a uniformly random subset of the union whichever of its ids
the others hold), and keeps the intersection's indicator over the union for the secure evaluation
(:meth:`sqm.runtime.protocol.PartyContext._masked_rows`).  Nobody learns which of its ids are in the
intersection; everyone learns the set sizes, the union size and the intersection size.

What each party receives (the tests record every frame: ``tests/test_psi_view.py``):

- a client: chunks of the other clients' lists, each blinded under at least the key of their owner, which
  it does not hold (it cannot compute [k_owner] H(guess) for a guessed id: that is the DDH assumption), and
  each list under a different set of keys (the lists that have passed 1, 2, ... n - 1 hops), so it cannot
  compare two of them either;
  then from the server one membership bit per entry of its own list and the ranks of its own members;
- the server: every client's list blinded under ALL the clients' keys, of which it holds none; it cannot
  hash a guess to anything comparable.  It sees which fully blinded values coincide, so with 3 or more
  clients it learns how many ids each group of clients shares (the sizes of the Venn diagram's regions);
  with 2 clients that is the intersection size.  Values are unlinkable across jobs (fresh keys).

Against a coalition of the server and one client (outside the runtime's model, t = 1 for up to 4 parties):
the coalition holds one key, never all, so it still cannot test a guessed id against any value.

Cost: n scalar multiplications per id of every client (each client blinds every list once), 32 bytes per
id per hop (n - 1 hops between clients and one to the server), and a membership bit and a 4-byte rank back.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from . import wire
from .errors import RefusedError, UsageError
from .liveness import busy
from .stream import chunk_count

POINT_BYTES = 32
CHUNK_IDS = 1 << 14  # ids per chunk on the ring: 512 KiB a chunk, about 0.7 s of blinding
DOMAIN = b"sqm-psi-v1 hash to curve25519\x00"
_P = 2 ** 255 - 19
_A = 486662
_MASK = (1 << 255) - 1


class PSIError(RefusedError):
    """A peer's value could not be blinded (a point of small order: only a deviating peer sends one)."""


def hash_ids(ids, n: int | None = None) -> np.ndarray:
    """The ids (an iterable of str or bytes) hashed onto Curve25519 (not its twist): an (N, 32) uint8 array of
    u-coordinates, little endian.  Try-and-increment: SHA-512 of :data:`DOMAIN`, a counter byte and the id's
    UTF-8 bytes; each 32-byte half in turn, its top bit cleared, is u if u < p and u^3 + A u^2 + u is a
    non-zero square mod p (a half fails with probability 1/2: 1.3 hashes per id on average; no id needs all
    256 counters but with probability 2^-512).  ``n``: the number of ids, when known (checked)."""
    import gmpy2

    p, a, jacobi, mpz = gmpy2.mpz(_P), gmpy2.mpz(_A), gmpy2.jacobi, gmpy2.mpz
    sha512, from_bytes = hashlib.sha512, int.from_bytes
    prefixes = [DOMAIN + bytes([c]) for c in range(256)]
    chunks: list[np.ndarray] = []  # blocks of about 4 MiB: no copy of the whole list is ever made twice
    out = bytearray()
    for x in ids:
        b = x.encode() if isinstance(x, str) else bytes(x)
        for pre in prefixes:
            h = sha512(pre + b).digest()
            u = mpz(from_bytes(h[:32], "little") & _MASK)
            if u < p and jacobi(u * (u * (u + a) + 1) % p, p) == 1:
                out += h[:31]
                out.append(h[31] & 0x7F)
                break
            u = mpz(from_bytes(h[32:], "little") & _MASK)
            if u < p and jacobi(u * (u * (u + a) + 1) % p, p) == 1:
                out += h[32:63]
                out.append(h[63] & 0x7F)
                break
        else:  # pragma: no cover - probability 2^-512
            raise PSIError("an id could not be hashed onto the curve")
        if len(out) >= 1 << 22:
            chunks.append(np.frombuffer(bytes(out), dtype=np.uint8).reshape(-1, POINT_BYTES))
            out = bytearray()
    chunks.append(np.frombuffer(bytes(out), dtype=np.uint8).reshape(-1, POINT_BYTES))
    got = sum(c.shape[0] for c in chunks)
    if n is not None and got != n:
        raise UsageError(f"{got} ids hashed, {n} expected")
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


async def hash_ids_yielding(ids, n: int | None = None, batch: int = CHUNK_IDS) -> np.ndarray:
    """:func:`hash_ids` in batches of ``batch`` ids, giving the event loop a turn between batches (0.2 s of
    hashing each): a party hashing 10^6 ids (11 s) keeps sending its heartbeats, so its peers, waiting for its
    first chunk, do not take it for silent (``sqm.runtime.liveness``)."""
    import asyncio
    import itertools


    it, parts = iter(ids), []
    with busy():  # computing, loop free: its peers wait for its first chunk (sqm.runtime.liveness)
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


def blind(key: bytes, points: np.ndarray) -> np.ndarray:
    """Every u-coordinate in ``points`` ((N, 32) uint8) multiplied by the scalar ``key`` (X25519)."""
    from nacl.bindings import crypto_scalarmult
    from nacl.exceptions import RuntimeError as NaclError

    b = points.tobytes()
    try:
        out = b"".join([crypto_scalarmult(key, b[i:i + POINT_BYTES]) for i in range(0, len(b), POINT_BYTES)])
    except NaclError:
        raise PSIError("a value is a point of small order (blinding it gives zero)") from None
    return np.frombuffer(out, dtype=np.uint8).reshape(-1, POINT_BYTES)


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


def n_steps(sizes: dict[int, int], chunk: int, own: int | None = None) -> int:
    """Steps of the ring: the longest client list's chunks plus n - 1 hops; the server's own list (``own``
    ids), when it holds one, n hops after its last chunk leaves the server."""
    steps = max(chunk_count(s, chunk) for s in sizes.values()) + len(sizes) - 1
    return steps if own is None else max(steps, chunk_count(own, chunk) + len(sizes))


def _points(rows: int) -> wire.Validator:
    """A chunk of ``rows`` blinded ids: exactly an (rows, 32) uint8 array."""
    return wire.array(np.uint8, (rows, POINT_BYTES), what="blinded ids")


@dataclass(frozen=True)
class Intersection:
    """A client's result: ``member[r]`` whether its r-th id (in the order it gave them) is in the
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
    in the order of their fully blinded values, ``size`` U of them, ``intersection`` m of them in every set.
    At a client, ``position[r]``: where its r-th id (in the order it gave them) lies in that order; the
    positions of its own ids are a uniformly random subset of 0..U-1 whichever of them the others hold (the
    order is that of pseudo-random values).  At the server, ``indicator[u]``: whether position u is in every
    client's set (``position`` None)."""

    size: int
    intersection: int
    position: np.ndarray | None = None
    indicator: np.ndarray | None = None


async def intersect(ctx, sizes: dict[int, int], points: np.ndarray | None = None, key: bytes | None = None,
                    rng: np.random.Generator | None = None, chunk: int = CHUNK_IDS,
                    hide_membership: bool = False) -> Intersection | Union | int:
    """Run the PSI (module docstring) in party ``ctx``: a client gives its ids hashed onto the curve
    (``points``, :func:`hash_ids`), its secret ``key`` and a cryptographic generator ``rng`` for the
    shuffle, and gets its :class:`Intersection`; the server gives nothing and gets the intersection size.
    ``sizes``: every client's set size (public, the same at every party).

    With ``sizes[0]`` too, the server holds a set of its own (e.g. the labels of a PBM-VFL job) and takes part
    as a holder: it gives its points, key and generator like a client and gets its :class:`Intersection`
    (see "The server's own set" in the module docstring).

    ``hide_membership``: the server answers each client with the positions of its ids in the union instead
    (membership-hiding alignment, "Hiding membership" in the module docstring) and keeps the intersection's
    indicator over the union; every party gets a :class:`Union`.  Not with a server set of its own."""
    sizes = {int(c): int(v) for c, v in sizes.items()}
    own = sizes.pop(0, None)
    if hide_membership and own is not None:
        raise UsageError("membership-hiding alignment is for the clients' sets only (the server holds none)")
    n = len(sizes)
    if sorted(sizes) != list(range(1, n + 1)) or n < 2 or min(sizes.values()) < 1 or (own is not None and own < 1):
        raise UsageError(f"PSI needs the set sizes of clients 1..n (n >= 2, each >= 1), and the server's if it "
                         f"holds one (>= 1), got {sizes if own is None else {0: own, **sizes}}")
    steps = n_steps(sizes, chunk, own)
    if ctx.is_server:
        if own is None:
            return await _server(ctx, sizes, chunk, steps, hide=hide_membership)
        return await _server(ctx, sizes, chunk, steps, _Own(points, key, rng, own))
    i = ctx.pid
    if points is None or points.shape != (sizes[i], POINT_BYTES):
        raise UsageError(f"client {i}: {sizes[i]} hashed ids expected")
    perm = rng.permutation(sizes[i])
    mine = points[perm]  # shuffled before anything leaves this client
    del points  # the caller passes the only other reference: one copy of the points is held
    held: dict[tuple[int, int], np.ndarray] = {}  # chunks received, blinded at the next step
    nxt, prv = ring_next(i, n), _owner(i, 1, n)
    for s in range(steps):
        to_next, to_server = [], []
        for h, o, k in schedule(i, s, sizes, chunk):
            data = mine[k * chunk:(k + 1) * chunk] if h == 0 else held.pop((o, k))
            try:
                out = blind(key, data)
            except PSIError as e:
                raise _bad_peer(ctx, prv, str(e)) from None
            (to_next if h < n - 1 else to_server).append(out)
        k0 = server_hop(i, s, own, chunk)
        if k0 is not None:  # the server's list, one hop further (the last client's hop goes back to the server)
            try:
                out = blind(key, held.pop((0, k0)))
            except PSIError as e:
                raise _bad_peer(ctx, 0 if i == 1 else prv, str(e)) from None
            (to_next if i < n else to_server).append(out)
        incoming = [(o, k) for h, o, k in schedule(prv, s, sizes, chunk) if h < n - 1]
        forwarded = server_hop(prv, s, own, chunk) if prv < i else None  # client 1 gets it from the server
        if forwarded is not None:
            incoming.append((0, forwarded))
        outgoing = {}
        if to_next:
            outgoing[nxt] = to_next
        if to_server:
            outgoing[0] = to_server if own is not None else to_server[0]
        senders, expect = [prv] if incoming else [], {}
        expect[prv] = wire.list_of([_points(_chunk_len(_size(sizes, own, o), k, chunk)) for o, k in incoming],
                                   "blinded id chunks")
        first = server_hop(i, s + 1, own, chunk) if i == 1 else None  # the server's chunk client 1 blinds next
        if first is not None:
            senders.append(0)
            expect[0] = _points(_chunk_len(own, first, chunk))
        got = await ctx.send_recv(outgoing, senders, expect, "PSI: blinding around the ring")
        if incoming:
            held.update(zip(incoming, got[0]))
        if first is not None:
            held[(0, first)] = got[-1]
    if hide_membership:
        answer = (await ctx.send_recv({}, [0], _positions(sizes[i]), "PSI: the union"))[0]
        return _union_positions(ctx, perm, answer, sizes)
    answer = (await ctx.send_recv({}, [0], _answer(sizes[i]), "PSI: the intersection"))[0]
    return _unshuffled(ctx, perm, answer["member"], answer["rank"], sizes[i], 0)


def _positions(size: int) -> wire.Validator:
    pos_ok = wire.array(np.uint32, (size,), what="union positions")

    def check(x):
        if not isinstance(x, dict) or set(x) != {"position", "union", "intersection"} or \
                not all(type(x[k]) is int and x[k] >= 0 for k in ("union", "intersection")):
            raise wire.WireError("expected the union: {'position': positions, 'union': U, 'intersection': m}")
        return {"position": pos_ok(x["position"]), "union": x["union"], "intersection": x["intersection"]}
    return check


def _union_positions(ctx, perm: np.ndarray, answer: dict, sizes: dict[int, int]) -> Union:
    """A client's :class:`Union` in the order it gave its ids, from the answer about its shuffled list; refused if
    the server's answer cannot be the union of these sets (positions repeated or beyond the union, a union
    smaller than the largest set or larger than all sets together, an intersection larger than any set)."""
    pos, U, m = answer["position"].astype(np.int64), answer["union"], answer["intersection"]
    n_i = sizes[ctx.pid]
    if not max(sizes.values()) <= U <= sum(sizes.values()) or m > min(sizes.values()) or \
            (n_i and (int(pos.max()) >= U or np.unique(pos).shape[0] != n_i)):
        raise _bad_peer(ctx, 0, f"union positions that do not fit a union of {U} ids with {m} in common")
    position = np.empty(n_i, dtype=np.int64)
    position[perm] = pos
    return Union(U, m, position=position)


def _size(sizes: dict[int, int], own: int | None, o: int) -> int:
    return own if o == 0 else sizes[o]


def server_hop(i: int, s: int, own: int | None, chunk: int) -> int | None:
    """The chunk of the server's own list that client ``i`` blinds at step ``s`` (None: none).  The server blinds
    chunk k at step k and sends it to client 1; client i blinds it at step k + i, client n last."""
    if own is None:
        return None
    k = s - i
    return k if 0 <= k < chunk_count(own, chunk) else None


def _unshuffled(ctx, perm: np.ndarray, member_bits: np.ndarray, ranks: np.ndarray, size: int,
                sender: int) -> Intersection:
    """A holder's :class:`Intersection` in the order it gave its ids, from the answer about its shuffled list."""
    member_shuffled = np.unpackbits(member_bits, count=size).astype(bool)
    m = int(member_shuffled.sum())
    if ranks.shape[0] != m or (m and int(ranks.max()) >= m):
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


def _answer(size: int) -> wire.Validator:
    member_ok = wire.array(np.uint8, ((size + 7) // 8,), what="membership bits")
    rank_ok = wire.array(np.uint32, (None,), what="ranks")

    def check(x):
        if not isinstance(x, dict) or set(x) != {"member", "rank"}:
            raise wire.WireError("expected the intersection: {'member': bits, 'rank': ranks}")
        return {"member": member_ok(x["member"]), "rank": rank_ok(x["rank"])}
    return check


def _bad_peer(ctx, peer: int, what: str) -> Exception:
    from .protocol import ProtocolError, party_label

    return ProtocolError(f"party {ctx.pid}: malformed message from {party_label(peer)} in the PSI: {what}; job "
                         f"aborted, nothing released")


async def _server(ctx, sizes: dict[int, int], chunk: int, steps: int, own: _Own | None = None,
                  hide: bool = False):
    """The server's side: collect each client's fully blinded list (from the client before it on the ring) into
    one array, find the values in every list, answer each client about its own list; returns the intersection
    size.  With ``own``, the server also sends its own list around the ring (shuffled, blinded under its key),
    blinds every client's list under its key as it arrives, and returns its own :class:`Intersection`."""
    import asyncio

    n = len(sizes)
    lists = dict(sizes) if own is None else {0: own.size, **sizes}
    start = dict(zip(lists, np.cumsum([0] + list(lists.values()))[:-1].tolist()))
    values = np.empty((sum(lists.values()), POINT_BYTES), dtype=np.uint8)  # the lists, owner after owner
    mine = perm = None
    if own is not None:
        perm = own.rng.permutation(own.size)
        with busy():
            mine = blind(own.key, own.points[perm])  # shuffled and blinded before anything leaves the server
    for s in range(steps):
        senders, expect, where = [], {}, []
        for c in sizes:  # client c sends the chunk it blinds last: list next(c), chunk s - (n - 1)
            last = [(o, k) for h, o, k in schedule(c, s, sizes, chunk) if h == n - 1]
            back = server_hop(c, s, own.size, chunk) if own is not None and c == n else None
            if back is not None:  # the server's own list, blinded by every client
                last.append((0, back))
            if last:
                senders.append(c)
                chunks = [_points(_chunk_len(lists[o], k, chunk)) for o, k in last]
                expect[c] = chunks[0] if own is None else wire.list_of(chunks, "blinded id chunks")
                where.append(last)
        outgoing = {}
        if own is not None and s < chunk_count(own.size, chunk):
            outgoing[1] = mine[s * chunk:(s + 1) * chunk]
        got = await ctx.send_recv(outgoing, senders, expect, "PSI: blinding around the ring")
        for c, last, g in zip(senders, where, got):
            for (o, k), v in zip(last, [g] if own is None else g):
                if own is not None and o != 0:  # a client's list gets the server's key too
                    try:
                        v = blind(own.key, v)
                    except PSIError as e:
                        raise _bad_peer(ctx, c, str(e)) from None
                at = start[o] + k * chunk
                values[at:at + v.shape[0]] = v
    del mine
    # in a worker thread: numpy's sort releases the GIL (the event loop ran within 0.3 s throughout 3 x 10^6
    # values, 2 s of sorting), so the server's heartbeats go on while the clients await its answer
    if hide:
        with busy():
            position, indicator = await asyncio.get_running_loop().run_in_executor(None, union_positions, values,
                                                                                 lists)
        del values
        U, m = int(indicator.shape[0]), int(indicator.sum())
        await ctx.send_recv({o: {"position": position[o].astype(np.uint32), "union": U, "intersection": m}
                             for o in sizes}, [], None, "PSI: the union")
        return Union(U, m, indicator=indicator)
    with busy():
        member, rank = await asyncio.get_running_loop().run_in_executor(None, common_values, values, lists)
    del values
    await ctx.send_recv({o: {"member": np.packbits(member[o]), "rank": rank[o].astype(np.uint32)} for o in sizes},
                        [], None, "PSI: the intersection")
    if own is None:
        return int(member[1].sum())
    return _unshuffled(ctx, perm, np.packbits(member[0]), rank[0].astype(np.uint32), own.size, 0)


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
    _, inv, counts = np.unique(values.view(f"S{POINT_BYTES}").ravel(), return_inverse=True, return_counts=True)
    indicator = counts == len(sizes)
    position, start = {}, 0
    for o, size in sizes.items():
        position[o] = inv[start:start + size]
        start += size
    return position, indicator
