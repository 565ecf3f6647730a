"""Every malformed frame is a clean refusal (issue 25): 20,000+ mutated frames through :func:`sqm.mpc.net.wire.decode`
and the validators a protocol step applies give a value or :class:`sqm.mpc.net.wire.WireError`, never another exception.
Mutations: random byte flips, insertions, deletions and truncations of real frames, and crafted headers (JSON nested
100,000 deep, integers of 5,000 digits, shapes like [0, 10^30], unknown tags, lying lengths)."""
from __future__ import annotations

import contextlib
import json
import struct

import numpy as np
import pytest

from sqm.mpc.net import wire


def _frames(rng):
    p = (1 << 61) - 1
    yield wire.encode([rng.integers(0, p, size=(4, 3), dtype=np.int64), rng.integers(0, p, size=3, dtype=np.int64)])
    yield wire.encode({"digest": bytes(32), "counts": [3, 4], "name": "client 1", "x": 1.5, "big": 2 ** 200})
    yield wire.encode([[None, True, [1, [2, [3]]]], np.zeros(0, np.float64), b"\x00\xff"])
    yield wire.encode(rng.normal(size=(2, 2)))


def _header_frame(header: bytes, tail: bytes = b"") -> bytes:
    return wire.MAGIC + bytes([wire.VERSION]) + struct.pack("<I", len(header)) + header + tail


CRAFTED = [
    b'{"v":' + b"[" * 100_000 + b"]" * 100_000 + b',"b":[]}',
    b'{"v":' + b"9" * 5000 + b',"b":[]}',
    json.dumps({"v": {"$a": 0}, "b": [["<f8", [0, 10 ** 30], 0]]}).encode(),
    json.dumps({"v": {"$a": 0}, "b": [["<i8", [0] * 100, 0]]}).encode(),
    json.dumps({"v": {"$a": 0}, "b": [["<i8", [0, 2 ** 40, 2 ** 40, 2 ** 40], 0]]}).encode(),
    json.dumps({"v": {"$a": 0}, "b": [["|O", [1], 8]]}).encode(),
    json.dumps({"v": {"$x": 0}, "b": []}).encode(),
    json.dumps({"v": {"$b": 0}, "b": [["bytes", [], 10 ** 12]]}).encode(),
    json.dumps({"v": {"$d": [[1, 2]]}, "b": []}).encode(),
    json.dumps({"v": [[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]], "b": []}).encode(),
    json.dumps({"v": 1, "b": [["<i8", [-1], 8]]}).encode(),
    json.dumps({"v": 1e999, "b": []}).encode().replace(b"Infinity", b"1e999"),
    b'{"v": NaN, "b": []}', b"[]", b'"x"', b"\xff\xfe",
]


def _validate(x):
    checks = (wire.list_of([wire.shares((4, 3), (1 << 61) - 1), wire.shares((3,), (1 << 61) - 1)], "input shares"),
              wire.digest(32), wire.value(int, "a count", lambda v: 0 <= v < 10), wire.nothing,
              wire.array(np.float64, (2, 2)), wire.one_of(wire.digest(16), wire.value(str)))
    for check in checks:
        with contextlib.suppress(wire.WireError):
            check(x)


def test_twenty_thousand_mutated_frames_give_only_clean_refusals():
    rng = np.random.default_rng(2025)
    frames = list(_frames(rng))
    seen = {"decoded": 0, "refused": 0}
    cases = [_header_frame(h) for h in CRAFTED]
    for _ in range(20_000):
        f = bytearray(frames[rng.integers(len(frames))])
        kind = rng.integers(5)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(f))) if f else 0
            if kind == 0 and f:
                f[i] ^= 1 << int(rng.integers(8))
            elif kind == 1:
                f[i:i] = bytes(rng.integers(0, 256, size=int(rng.integers(1, 8)), dtype=np.uint8))
            elif kind == 2 and f:
                del f[i:i + int(rng.integers(1, 8))]
            elif kind == 3:
                f = f[:i]
            else:  # the header's digits, brackets and quotes, where the parser is
                j = 9 + int(rng.integers(max(1, len(f) - 9)))
                if j < len(f):
                    f[j] = b'0123456789[]{}",:-.e$aNb'[int(rng.integers(24))]
        cases.append(bytes(f))
    assert len(cases) >= 20_000
    for data in cases:
        try:
            out = wire.decode(data)
        except wire.WireError:
            seen["refused"] += 1
            continue
        seen["decoded"] += 1
        _validate(out)
    assert seen["refused"] > 10_000 and seen["decoded"] > 0, seen


@pytest.mark.parametrize("header, tail, words", [
    (CRAFTED[0], b"", "nests too deeply"), (CRAFTED[1], b"", "more than 4300 digits"),
    (CRAFTED[2], b"", "out of bounds"), (CRAFTED[3], b"", "out of bounds"), (CRAFTED[5], bytes(8), "not allowed"),
    (CRAFTED[7], b"", "truncated"), (CRAFTED[9], b"", "nests too deeply")])
def test_each_limit_has_its_own_words(header, tail, words):
    with pytest.raises(wire.WireError, match=words):
        wire.decode(_header_frame(header, tail))
