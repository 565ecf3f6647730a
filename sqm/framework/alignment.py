"""Record alignment of a job's clients: private set intersection of their ids, before any share of data.

Organisations never hold the same records.  Every job (``sqm pca --job``, ``sqm logreg --job``,
``sqm linreg --job``) therefore starts with an ECDH private set intersection of the clients' canonical ids
(:func:`sqm.framework.tables.canonical_id`; the protocol: :mod:`sqm.mpc.protocols.psi`) and runs on the intersection:

- each client learns the intersection size and which of ITS OWN records are in it (the PSI semantics of
  every VFL platform), and the other clients' set sizes;
- the server learns the set sizes and the intersection size (with 3 or more clients also how many ids each
  group of clients shares), never anything it could test an id against;
- no id, hash or keyed digest of an id leaves its owner in a form that anyone holding it could test a
  guessed id against: every value a party receives is blinded under a key it does not hold.

Before the PSI, every party applies its own size policy to the set sizes of the schema exchange
(:func:`check_set_sizes`, the operator's ``--max-set-ratio``): a peer's set at most that many times its own, never
above the PSI's 32-bit limit; a refusal names the peer.  Every table of what each role learns:
``docs/explanation/record-alignment.md``.

Each client then keeps its intersection records in the canonical id order (:func:`sqm.framework.party.canonical_order`,
which every client computes alone; a file sorted by id is still read chunk by chunk, one mask bit per record
held) and the clients check among themselves, through the PSI's ranks of the fully blinded values, that they
hold the intersection in the same order (:meth:`sqm.mpc.protocols.psi.Intersection.order_digest`); that digest also
stands in the job's ``ids_digest``, compared again before any share.  The job's record count is the intersection
size, a public count like n before it: ``--min-intersection`` (default :data:`DEFAULT_MIN_INTERSECTION`)
refuses a smaller one before any share of data is sent.

A task whose server holds a table of its own (a PBM-VFL job: the labels, keyed by the same ids) aligns it too:
the server is then a holder in the PSI (:mod:`sqm.mpc.protocols.psi`, "The server's own set"), learns which of its own
records are in the intersection of every party's set (never which client holds one of its ids), and sends the
clients the digest of its order, which each compares with its own.

Neighbouring datasets across organisations: adding or removing one person at one organisation changes the
intersection by at most one record, so the sensitivities of the job's release, proven per record, hold
unchanged; the intersection size itself is released exactly, like the record count n of a job over
identical sets.

Membership hidden (:func:`hide_membership`): no client learns the intersection size; the server alone checks the
minimum and, below it, withholds the release.

Randomness: each client's PSI key and shuffle (and r, with a server table) come from streams of their own (OS entropy;
in a seeded experiment, derived from the party's own seed under their own labels), so the alignment draws nothing from
the job's other streams: a job releases bit for bit what it releases on pre-intersected files.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from sqm.framework.tables import PartyTable
from sqm.mpc.net.party import ProtocolError
from sqm.mpc.net.party import messages as wire
from sqm.mpc.protocols.psi import MAX_SET, Intersection, Union, hash_ids_yielding, intersect
from sqm.mpc.shares.randomness import secure_generator
from sqm.mechanism.rng import party_key_bytes
from sqm.errors import UsageError
from sqm.framework.alignment_policy import (  # noqa: F401  (the policy's one declaration, used here)
    DEFAULT_ALIGNMENT_KEYS,
    DEFAULT_MAX_SET_RATIO,
    DEFAULT_MIN_INTERSECTION,
    check_max_set_ratio,
    check_min_intersection,
)

log = logging.getLogger(__name__)

class TooFewInCommon(ProtocolError):
    """Every party refuses the job, before any share of data is sent: the intersection is smaller than the job's
    minimum.  The message holds the counts only (the same at every party, and sent to every peer)."""

    def __init__(self, reason: str):
        super().__init__(f"refused before any share was sent: {reason}")


def check_set_sizes(pid: int, sizes: dict[int, int], max_ratio: float = DEFAULT_MAX_SET_RATIO,
                    hide: bool = False) -> None:
    """This party's size policy, before any id is hashed or sent (every party has every set size from the schema
    exchange): refused (a ProtocolError naming the peer) a set above the 32-bit limit of the PSI's ranks and
    positions (:data:`sqm.mpc.protocols.psi.MAX_SET`; hiding membership, their sum too), and a peer's set above
    ``max_ratio`` times this party's own, or, at a party holding no set (the server of a PCA or regression job),
    a largest set above ``max_ratio`` times the smallest."""
    from sqm.mpc.net.abort import party_label

    def refuse(who: int, why: str):
        raise ProtocolError(f"party {pid} refused before any id was sent: {party_label(who)} declared "
                            f"{sizes[who]:,} records, {why}")
    for j, v in sorted(sizes.items()):
        if v > MAX_SET:
            refuse(j, f"above the {MAX_SET:,} a private set intersection can rank (32-bit positions)")
    big = max(sorted(sizes), key=lambda j: sizes[j])
    if hide and sum(sizes.values()) > MAX_SET:
        refuse(big, f"and the sets hold {sum(sizes.values()):,} in all, above the {MAX_SET:,} positions a "
                    f"membership-hiding alignment can place them at (32-bit)")
    if pid in sizes:
        for j, v in sorted(sizes.items()):
            if j != pid and v > max_ratio * sizes[pid]:
                refuse(j, f"more than {max_ratio:g} times this party's {sizes[pid]:,} (its --max-set-ratio)")
    else:
        small = min(sizes.values())
        if sizes[big] > max_ratio * small:
            refuse(big, f"more than {max_ratio:g} times the smallest set, {small:,} (this party's "
                        f"--max-set-ratio)")


class _Ids:
    """A table's ids, for a shard worker's bucket of the alignment (:mod:`sqm.mpc.protocols.psi_buckets`): an
    in-memory table's ids without its values (a streamed table goes as it is: a worker reads its file)."""

    def __init__(self, ids):
        self.ids = list(ids)

    def iter_ids(self):
        return iter(self.ids)


async def _bucketed(ctx, runner, table, sizes: dict[int, int], seed):
    """The alignment as one PSI per bucket on this party's shard workers (:mod:`sqm.mpc.protocols.psi_buckets`):
    (m, this client's Intersection or None at the server)."""
    import hashlib

    from sqm.mpc.protocols.psi import client_key
    from sqm.mpc.protocols.psi_buckets import BUCKET_DOMAIN, BucketPSI, merge, padded_size

    W = runner.count
    padded = {c: padded_size(v, W) for c, v in sizes.items()}
    mine = None if table is None else party_key_bytes(seed, ctx.pid, "sqm-psi bucket key contribution")
    kb = await client_key(ctx, mine)
    if table is None:
        works = [BucketPSI(s, W, padded, ctx.job_digest) for s in range(W)]
    else:
        assert kb is not None  # a client holds the bucket key
        ids = table if hasattr(table, "chunks") else _Ids(table.iter_ids())
        key = hashlib.sha256(BUCKET_DOMAIN + kb).digest()
        works = [BucketPSI(s, W, padded, ctx.job_digest, ids, key,
                           party_key_bytes(seed, ctx.pid, f"sqm-psi bucket {s}")) for s in range(W)]
    results = await runner.run(ctx, works)
    ctx.alignment_worker_records = list(runner.records)
    log.info(f"party {ctx.pid}: record alignment in {W} buckets on its shard workers (padded lengths "
             f"{', '.join(f'{v:,}' for _, v in sorted(padded.items()))})")
    if table is None:
        return sum(int(r["m"]) for r in results), None
    found = merge(results, table.n_rows)
    return found.size, found


def runs_bucketed(ctx, sizes: dict[int, int], all_keys: bool, runner, hide: bool = False) -> bool:
    """Whether this job's alignment runs one PSI per bucket on the shard workers (:func:`align_records`): it has
    workers, the threshold's keys, no server table, and reveals membership."""
    from sqm.mpc.protocols.psi import shared_mode

    return runner is not None and not hide and 0 not in sizes and shared_mode(ctx, all_keys)


async def align_records(ctx, table, sizes: dict[int, int], min_common: int, seed=None,
                        max_ratio: float = DEFAULT_MAX_SET_RATIO, all_keys: bool = False, runner=None):
    """Align this party's records with the other clients' (module docstring): returns ``(table, m)``, the
    client's table restricted to the intersection (None at the server) and the intersection size m.
    ``sizes``: every client's record count (public, from the schema exchange), and ``sizes[0]`` the server's
    when it holds a table of its own (``table``: a PBM-VFL job's labels, aligned like a client's); ``seed``: this
    party's job seed (None: OS entropy; see :func:`sqm.mechanism.rng.party_key_bytes`).  Every party first applies its
    size policy (:func:`check_set_sizes`, ``max_ratio``), and refuses, before any share of data is sent, an
    intersection smaller than ``min_common``.  ``all_keys``: every list under every client's key (the job file's
    ``"alignment_keys": "all"``), else keys as strong as the runtime's threshold
    (:func:`sqm.mpc.protocols.psi.shared_mode`).  ``runner``: this party's shard workers
    (:class:`sqm.mpc.protocols.shards.ShardRunner`): with the threshold's keys and no server table, one PSI per bucket
    on them (:mod:`sqm.mpc.protocols.psi_buckets`).  (Membership-hiding alignment: :func:`hide_membership`.)"""
    check_set_sizes(ctx.pid, sizes, max_ratio)
    found: Intersection | None
    if runs_bucketed(ctx, sizes, all_keys, runner):
        m, found = await _bucketed(ctx, runner, table, sizes, seed)
    elif table is None:  # the server, holding no table
        size = await intersect(ctx, sizes, all_keys=all_keys)
        assert isinstance(size, int)  # the server without a set of its own gets the intersection size
        m, found = size, None
    else:  # a client, or a server holding a table of its own (sizes[0]: a PBM-VFL job's labels)
        key, rng = _psi_secrets(seed, ctx.pid)
        got = await intersect(ctx, sizes, await hash_ids_yielding(table.iter_ids(), table.n_rows), key, rng,
                              all_keys=all_keys)
        assert isinstance(got, Intersection)  # a holder of a set gets its Intersection
        m, found = got.size, got
    _check_min(m, min_common, sizes)
    digest = None if found is None else found.order_digest()
    order = "" if digest is None else f", their order's digest {digest.hex()[:16]}"  # compared among the clients
    log.info(f"party {ctx.pid}: record alignment (PSI): {m:,} records in common ({_held(sizes)}){order}")
    await ctx.check_clients(digest, "the order of the records in common (after the PSI)", wire.digest(32))
    if 0 in sizes:  # the server's table in the same order as the clients' (its digest, which it sends them)
        theirs = await ctx.broadcast(digest if ctx.is_server else None, wire.digest(32), sender=0,
                                     receivers=ctx.clients, step="the server's order of the records in common")
        if not ctx.is_server and theirs != digest:
            raise ProtocolError(f"party {ctx.pid}: refused before any share was sent: the server's table holds the "
                                f"records in common in another order than this client's")
    if found is None:
        return None, m
    table = table.restricted(found.member)
    table.ids_digest = digest
    return table, m


def _psi_secrets(seed, pid: int):
    """This holder's PSI key and shuffle generator: streams of their own (OS entropy; a seeded experiment: derived
    from the party's own seed under their own labels)."""
    key = party_key_bytes(seed, pid, "sqm-psi key")
    rng = secure_generator(None if seed is None else int.from_bytes(party_key_bytes(seed, pid, "sqm-psi shuffle"),
                                                                     "big"))
    return key, rng


def _held(sizes) -> str:
    return ", ".join(("the server's table" if c == 0 else f"client {c}") + f" {v:,}" for c, v in sorted(sizes.items()))


def _check_min(m: int, min_common: int, sizes) -> None:
    if m < min_common:
        who = "parties'" if 0 in sizes else "clients'"
        empty = (f": no record is in every {'party' if 0 in sizes else 'client'}'s file, check that the id columns "
                 f"hold the same kind of id")
        raise TooFewInCommon(f"the {who} record sets have {m:,} records in common ({_held(sizes)}), fewer than the "
                             f"job's minimum {min_common:,} (--min-intersection)" + (empty if m == 0 else ""))


async def hide_membership(ctx, table, sizes: dict[int, int], min_common: int, seed=None,
                          max_ratio: float = DEFAULT_MAX_SET_RATIO, all_keys: bool = False):
    """Membership-hiding alignment: the PSI's union variant (:func:`sqm.mpc.protocols.psi.intersect`,
    ``hide_membership``) places the union of every client's ids at uniformly random distinct positions of
    0..S-1, S = the sum of the set sizes (a function of the public sizes only), and tells each client the
    positions of its own ids: a uniformly random subset of 0..S-1 whichever of them the others hold.  The server
    keeps the indicator of the intersection over the S positions, which enters the secure evaluation as a Shamir
    sharing (:meth:`sqm.mpc.protocols.evaluation.Evaluation._masked_rows`).  No client learns the union size U, the
    intersection size m, or whether any of its records is a member; the server, which deals the indicator, knows both.

    Returns ``(table, union, withheld)``: the client's table over the S positions (its own rows where it holds the
    record, zeros elsewhere; in memory, or for a streamed file a :class:`sqm.framework.union_table.UnionTable` read
    bucket by bucket), the :class:`sqm.mpc.protocols.psi.Union` the evaluation needs
    (``PartyContext(ctx, membership=union)``), and, at the server only, the reason it will withhold the release (None:
    it will not).  ``min_common``: a client cannot refuse a small intersection without learning it, so the server alone
    checks it; below it, the server deals an indicator of zeros (the release then counts no record) and withholds the
    release at its end, while every client's view stays what it would have been."""
    if 0 in sizes:
        raise UsageError("membership-hiding alignment is for tasks whose server holds no table")
    check_set_sizes(ctx.pid, sizes, max_ratio, hide=True)
    if table is None:
        result = await intersect(ctx, sizes, hide_membership=True, all_keys=all_keys)
    else:
        key, rng = _psi_secrets(seed, ctx.pid)
        points = await hash_ids_yielding(table.iter_ids(), table.n_rows)
        result = await intersect(ctx, sizes, points, key, rng, hide_membership=True, all_keys=all_keys)
    assert isinstance(result, Union)  # hiding membership, every party gets a Union
    union = result
    if table is None:
        # the server's Union holds the counts and the indicator
        assert union.intersection is not None and union.indicator is not None
        m, withheld = union.intersection, None
        log.info(f"party {ctx.pid}: record alignment hiding membership: {union.union:,} ids in the union, {m:,} in "
                 f"common ({_held(sizes)}), placed over {union.size:,} positions; the clients are told neither count")
        try:
            _check_min(m, min_common, sizes)
        except TooFewInCommon as e:
            withheld = f"{e}; membership hidden: the job ran with an indicator of zeros and the server withholds " \
                       f"its release (no client can tell)"
            union = dataclasses.replace(union, indicator=np.zeros_like(union.indicator))
        return None, union, withheld
    assert union.position is not None  # a client's Union holds the positions of its ids
    log.info(f"party {ctx.pid}: record alignment hiding membership: its {sizes[ctx.pid]:,} records placed over "
             f"{union.size:,} positions (the sum of the set sizes); which of them every client holds stays secret")
    if hasattr(table, "chunks"):  # a streamed file stays streamed: its rows sorted into position buckets on disk
        from sqm.framework.union_table import place

        return place(table, union.position, union.size), union, None
    placed = np.zeros((union.size, table.block.shape[1]), dtype=np.float64)
    placed[union.position] = table.block
    return PartyTable(table.file, list(table.columns), placed, [], held=np.sort(union.position)), union, None
