"""A bucket of the bucketed record alignment that outgrows its public padding is refused before anything is sent.

The padding (:func:`sqm.mpc.protocols.psi_buckets.padded_size`) makes that event improbable (below 1e-15 per
bucket), so the test forces it with a padded length below the bucket's true size and a party context that records
every use: the refusal names the party and the bucket, and the context is never asked to send or receive."""
from __future__ import annotations

import asyncio
import math
import secrets

import pytest

from sqm.mpc.net.abort import ProtocolError
from sqm.mpc.protocols.psi_buckets import BucketPSI, bucket_of, padded_size


class _Ids:
    def __init__(self, ids):
        self.ids = ids

    def iter_ids(self):
        return iter(self.ids)


class _RecordingContext:
    """A client's context that records every attribute asked of it beyond its identity."""

    def __init__(self, pid: int):
        object.__setattr__(self, "asked", [])
        object.__setattr__(self, "pid", pid)
        object.__setattr__(self, "is_server", False)

    def __getattr__(self, name):
        self.asked.append(name)
        raise AssertionError(f"the refused bucket used ctx.{name}")


def test_a_bucket_beyond_its_padding_is_refused_before_anything_is_sent():
    key, count, shard = secrets.token_bytes(32), 4, 1
    ids = [f"id{i}" for i in range(400)]
    true_size = sum(bucket_of(key, i, count) == shard for i in ids)
    assert true_size > 2
    program = BucketPSI(shard, count, {1: true_size - 1}, "ab" * 32, _Ids(ids), key, secrets.token_bytes(32))
    ctx = _RecordingContext(1)
    with pytest.raises(ProtocolError, match=rf"client 1: bucket {shard} of its record alignment holds "
                                            rf"{true_size} ids, beyond its padding of {true_size - 1}"):
        asyncio.run(program.run(ctx))
    assert ctx.asked == []


def test_the_padding_covers_eight_deviations_and_never_exceeds_the_set():
    for n, w in ((10, 2), (1000, 4), (10 ** 6, 16)):
        mean = n / w
        assert padded_size(n, w) >= min(n, mean + 8 * math.sqrt(mean * (1 - 1 / w)))
        assert padded_size(n, w) <= n
