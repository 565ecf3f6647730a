"""The record alignment on a party's shard workers: the ids split into buckets by a keyed hash only the clients hold,
each bucket an independent PSI (:func:`sqm.mpc.protocols.psi.intersect`) run by the parties' workers of that bucket.

Where a job runs W shard workers per party, the keys are the threshold's (:func:`sqm.mpc.protocols.psi.shared_mode`)
and the server holds no table, the alignment runs as W PSIs, one per bucket, each in the session of the parties'
s-th workers (the same engine as the release's shards: local processes or the party's own Dask cluster):

1. in the job's session the clients agree a bucket key K_b (fresh contributions sent to the other clients only, a
   digest compared among them: :func:`sqm.mpc.protocols.psi.client_key`); the server never holds it;
2. an id goes to bucket HMAC-SHA256(K_b, id) mod W.  Worker s of a client reads its party's ids (streamed: it keeps
   only its bucket's, memory about N / W), hashes them onto the curve and pads its bucket with random points (hashes
   of fresh random strings, which match nothing) to a public length :func:`padded_size` of the client's set size
   and W, so that no party learns a bucket's true size;
3. worker s of every party runs the PSI on bucket s (its own fresh keys), each client's worker returns its members'
   row indices and their ranks in the bucket, the server's worker the bucket's intersection size;
4. each client ranks its members bucket after bucket (the intersection sizes of the buckets before, which it knows
   from its own members and K_b) and goes on as after one PSI.

What each party learns is what it learns from one PSI: the padded lengths are functions of the public set sizes;
the server sees each bucket's lists under the bucket PSI's key, which it does not hold, and so learns the Venn counts
split at random (by a hash whose key it does not hold) among the buckets: a random split of counts it learns anyway;
a client receives no list (threshold keys) and learns the members of its own set, as before.  The server together
with a client (beyond the runtime's threshold) learns which bucket each of the other clients' values falls in, which
adds nothing to what that coalition already tests under the threshold's keys; "alignment_keys": "all" therefore
never runs bucketed.  A bucket that outgrows its padding (probability below 1e-15 per bucket) is refused before any
value of it is sent.
"""
from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass

import numpy as np

from sqm.mpc.net.abort import ProtocolError, party_label
from sqm.mpc.net.party import PartyProgram

BUCKET_DOMAIN = b"sqm-psi-v1 bucket key\x00"
PAD_SDS = 8.0  # standard deviations of a bucket's size its padding allows (binomial tail below 1e-15)


def padded_size(n: int, buckets: int) -> int:
    """The public length of each bucket of a set of ``n`` ids in ``buckets`` buckets: the mean, 8 of the binomial's
    standard deviations and 8 more (a bucket is larger with probability below 1e-15), at most ``n``."""
    mean = n / buckets
    return int(min(n, math.ceil(mean + PAD_SDS * math.sqrt(mean * (1 - 1 / buckets)) + 8)))


def bucket_of(key: bytes, ident, buckets: int) -> int:
    """The bucket of id ``ident`` (str or bytes): HMAC-SHA256 under the clients' bucket key, mod ``buckets``."""
    data = ident.encode() if isinstance(ident, str) else bytes(ident)
    return int.from_bytes(hmac.new(key, data, hashlib.sha256).digest()[:8], "little") % buckets


@dataclass
class BucketPSI(PartyProgram):
    """Bucket ``shard`` of ``count``: one party's part of the bucket's PSI, in the session of the parties' workers of
    that bucket.  ``padded``: every client's public bucket length; at a client, ``ids`` (an object with ``iter_ids()``:
    its records' ids in order), ``key`` (the bucket key, secret) and ``seed`` (32 fresh bytes: its PSI key, shuffle
    and padding, secret)."""

    shard: int
    count: int
    padded: dict
    job_digest: str
    ids: object = None
    key: bytes | None = None
    seed: bytes | None = None

    def describe(self) -> str:
        return (f"record alignment bucket {self.shard} of {self.count} of job {self.job_digest[:16]}, padded "
                f"lengths {sorted(self.padded.items())}")

    async def run(self, ctx):
        from sqm.mpc.protocols.psi import DUMMY_DOMAIN, Intersection, hash_ids, intersect
        from sqm.mpc.shares.randomness import secure_generator

        sizes = {int(c): int(v) for c, v in self.padded.items()}
        if ctx.is_server:
            m = await intersect(ctx, sizes)
            assert isinstance(m, int)  # the server without a table gets the bucket's intersection size
            return {"m": m}
        assert self.key is not None and self.seed is not None and self.ids is not None  # a client's work
        rows, mine = [], []
        for r, ident in enumerate(self.ids.iter_ids()):  # type: ignore[attr-defined]
            if bucket_of(self.key, ident, self.count) == self.shard:
                rows.append(r)
                mine.append(ident)
        if len(mine) > sizes[ctx.pid]:
            raise ProtocolError(f"{party_label(ctx.pid)}: bucket {self.shard} of its record alignment holds "
                                f"{len(mine):,} ids, beyond its padding of {sizes[ctx.pid]:,} (probability below "
                                f"1e-15); job refused, nothing sent")
        rng = secure_generator(int.from_bytes(self.seed, "big"))
        pad = sizes[ctx.pid] - len(mine)
        points = hash_ids(mine + [DUMMY_DOMAIN + rng.bytes(16) for _ in range(pad)])
        got = await intersect(ctx, sizes, points, rng.bytes(32), rng)
        assert isinstance(got, Intersection)  # a client's result
        real = got.member[:len(mine)]
        if got.member[len(mine):].any():  # pragma: no cover - a random point matched: probability 2^-250
            raise ProtocolError(f"{party_label(ctx.pid)}: a padding value of its bucket matched another list")
        return {"rows": np.asarray(rows, dtype=np.int64)[real], "rank": got.rank[:len(mine)][real].astype(np.int64),
                "m": int(got.size)}


def merge(results: list[dict], n_rows: int):
    """A client's :class:`sqm.mpc.protocols.psi.Intersection` over its ``n_rows`` records from its buckets'
    results, ranked bucket after bucket."""
    from sqm.mpc.protocols.psi import Intersection

    member = np.zeros(n_rows, dtype=bool)
    rank = np.full(n_rows, -1, dtype=np.int64)
    offset = 0
    for r in results:
        member[r["rows"]] = True
        rank[r["rows"]] = offset + r["rank"]
        offset += int(r["m"])
    return Intersection(member, rank, offset)
