"""Record alignment of a job's clients: private set intersection of their ids, before any share of data.

Organisations never hold the same records.  Every job (``sqm pca --job``, ``sqm logreg --job``,
``sqm linreg --job``) therefore starts with an ECDH private set intersection of the clients' canonical ids
(:func:`sqm.framework.tables.canonical_id`; the protocol: :mod:`sqm.runtime.psi`) and runs on the intersection:

- each client learns the intersection size and which of ITS OWN records are in it (the PSI semantics of
  every VFL platform), and the other clients' set sizes;
- the server learns the set sizes and the intersection size (with 3 or more clients also how many ids each
  group of clients shares), never anything it could test an id against;
- no id, hash or keyed digest of an id leaves its owner in a form that anyone holding it could test a
  guessed id against: every value a party receives is blinded under a key it does not hold.

Each client then keeps its intersection records in the canonical id order (:func:`sqm.framework.party.canonical_order`,
which every client computes alone; a file sorted by id is still read chunk by chunk, one mask bit per record
held) and the clients check among themselves, through the PSI's ranks of the fully blinded values, that they
hold the intersection in the same order (:meth:`sqm.runtime.psi.Intersection.order_digest`); that digest also stands
in the job's ``ids_digest``, compared again before any share.  The job's record count is the intersection
size, a public count like n before it: ``--min-intersection`` (default :data:`DEFAULT_MIN_INTERSECTION`)
refuses a smaller one before any share of data is sent.

A task whose server holds a table of its own (a PBM-VFL job: the labels, keyed by the same ids) aligns it too:
the server is then a holder in the PSI (:mod:`sqm.runtime.psi`, "The server's own set"), learns which of its own
records are in the intersection of every party's set, and sends the clients the digest of its order, which
each compares with its own.

Neighbouring datasets across organisations: adding or removing one person at one organisation changes the
intersection by at most one record, so the sensitivities of the job's release, proven per record, hold
unchanged; the intersection size itself is released exactly, like the record count n of a job over
identical sets.

Randomness: each client's PSI key and shuffle come from streams of their own (OS entropy; in a seeded
experiment, derived from the party's own seed under their own labels), so the alignment draws nothing from
the job's other streams: a job releases bit for bit what it releases on pre-intersected files.
"""
from __future__ import annotations

import logging

import numpy as np

from sqm.framework.tables import PartyTable
from sqm.runtime.party import ProtocolError
from sqm.runtime.party import messages as wire
from sqm.runtime.psi import hash_ids_yielding, intersect
from sqm.runtime.randomness import secure_generator
from sqm.mechanism.rng import party_key_bytes
from sqm.runtime.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_MIN_INTERSECTION = 100


class TooFewInCommon(ProtocolError):
    """Every party refuses the job, before any share of data is sent: the intersection is smaller than the job's
    minimum.  The message holds the counts only (the same at every party, and sent to every peer)."""

    def __init__(self, reason: str):
        super().__init__(f"refused before any share was sent: {reason}")


def check_min_intersection(v, where: str = "--min-intersection") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{where} must be an integer >= 1 (the fewest records in common a job runs on), got {v!r}")
    return v


async def align_records(ctx, table, sizes: dict[int, int], min_common: int, seed=None):
    """Align this party's records with the other clients' (module docstring): returns ``(table, m)``, the
    client's table restricted to the intersection (None at the server) and the intersection size m.
    ``sizes``: every client's record count (public, from the schema exchange), and ``sizes[0]`` the server's
    when it holds a table of its own (``table``: a PBM-VFL job's labels, aligned like a client's); ``seed``: this party's job
    seed (None: OS entropy; see :func:`sqm.mechanism.rng.party_key_bytes`).  Every party refuses, before any share
    of data is sent, an intersection smaller than ``min_common``.  (Membership-hiding alignment:
    :func:`hide_membership`.)"""
    if table is None:  # the server, holding no table
        m = await intersect(ctx, sizes)
        found = None
    else:  # a client, or a server holding a table of its own (sizes[0]: a PBM-VFL job's labels)
        key, rng = _psi_secrets(seed, ctx.pid)
        found = await intersect(ctx, sizes, await hash_ids_yielding(table.iter_ids(), table.n_rows), key, rng)
        m = found.size
    _check_min(m, min_common, sizes)
    log.info(f"party {ctx.pid}: record alignment (PSI): {m:,} records in common ({_held(sizes)})")
    digest = None if found is None else found.order_digest()
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


async def hide_membership(ctx, table, sizes: dict[int, int], min_common: int, seed=None):
    """Membership-hiding alignment (issue 29): the PSI's union variant (:func:`sqm.runtime.psi.intersect`,
    ``hide_membership``) places every client's records at their positions in the union of all clients' ids, in
    the order of the fully blinded values (pseudo-random: the positions of a client's own records are a uniformly
    random subset whichever of them the others hold); the server keeps the indicator of the intersection over
    those positions, which enters the secure evaluation as a Shamir sharing (:meth:`PartyContext._masked_rows`),
    so no client learns whether any of its records is in the intersection.  Returns ``(table, m, union)``: the
    client's table over the union's U positions (its own rows where it holds the record, zeros elsewhere; in
    memory, or for a streamed file a :class:`sqm.framework.union_table.UnionTable` read bucket by bucket), the intersection size m (public, like n) and the :class:`sqm.runtime.psi.Union` the evaluation
    needs (``ctx.membership``).  The job's record count is m; every party refuses, before any share of data, an
    intersection smaller than ``min_common``."""
    if 0 in sizes:
        raise UsageError("membership-hiding alignment is for tasks whose server holds no table")
    if table is None:
        union = await intersect(ctx, sizes, hide_membership=True)
    else:
        key, rng = _psi_secrets(seed, ctx.pid)
        points = await hash_ids_yielding(table.iter_ids(), table.n_rows)
        union = await intersect(ctx, sizes, points, key, rng, hide_membership=True)
    m = union.intersection
    _check_min(m, min_common, sizes)
    log.info(f"party {ctx.pid}: record alignment hiding membership (PSI over the union): {union.size:,} records in "
             f"the union, {m:,} in common ({_held(sizes)})")
    if table is None:
        return None, m, union
    if hasattr(table, "chunks"):  # a streamed file stays streamed: its rows sorted into position buckets on disk
        from sqm.framework.union_table import place

        return place(table, union.position, union.size), m, union
    placed = np.zeros((union.size, table.block.shape[1]), dtype=np.float64)
    placed[union.position] = table.block
    return PartyTable(table.file, list(table.columns), placed, [], held=np.sort(union.position)), m, union
