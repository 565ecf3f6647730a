"""The wire format: typed frames round-trip exactly, and anything that is not a well-formed frame of the
expected kind is refused without being executed."""
import json
import os
import pickle
import struct

import numpy as np
import pytest

from sqm.mpc.net import wire


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # would create the marker file if unpickled


def test_round_trip_of_every_supported_kind():
    a = np.arange(12, dtype=np.int64).reshape(3, 4) * (2 ** 61 // 12)
    obj = {"n": 2 ** 200, "neg": -5, "f": 0.1, "inf": float("inf"), "s": "héllo", "b": b"\x00\xff",
           "t": (1, [None, True, False]), "arr": [a, np.zeros((0, 3), np.float32), np.array([1, 2], np.uint8)],
           "scalar": np.int32(7), "big_endian": np.arange(3, dtype=">i8")}
    back = wire.decode(wire.encode(obj))
    assert back["n"] == 2 ** 200 and back["neg"] == -5 and back["f"] == 0.1 and back["inf"] == float("inf")
    assert back["s"] == "héllo" and back["b"] == b"\x00\xff" and back["t"] == [1, [None, True, False]]
    assert back["scalar"] == 7 and type(back["scalar"]) is int
    assert back["arr"][0].dtype == np.int64 and np.array_equal(back["arr"][0], a)
    assert back["arr"][1].shape == (0, 3) and back["arr"][1].dtype == np.float32
    assert back["arr"][2].dtype == np.uint8 and list(back["arr"][2]) == [1, 2]
    assert back["big_endian"].dtype == np.dtype("<i8") and list(back["big_endian"]) == [0, 1, 2]
    assert back["arr"][0].flags.writeable  # a copy, not a view into the received bytes


@pytest.mark.parametrize("obj", [np.array([1, "a"], dtype=object), {1: 2}, object(), Exploit("x"),
                                 np.zeros(2, dtype=[("a", "i4")]), {1.5}])
def test_unsupported_objects_are_not_encoded(obj):
    with pytest.raises(wire.WireError):
        wire.encode(obj)


def test_a_pickle_is_refused_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    blob = pickle.dumps(Exploit(str(marker)))
    with pytest.raises(wire.WireError, match="bad magic"):
        wire.decode(blob)
    assert not marker.exists()
    # a pickle smuggled inside a well-formed frame arrives as inert bytes
    assert wire.decode(wire.encode({"x": blob}))["x"] == blob
    assert not marker.exists()


def _frame(header: dict, *buffers: bytes) -> bytes:
    h = json.dumps(header).encode()
    return wire.MAGIC + bytes([wire.VERSION]) + struct.pack("<I", len(h)) + h + b"".join(buffers)


@pytest.mark.parametrize("data, match", [
    (b"", "bad magic"),
    (wire.MAGIC + bytes([9]) + struct.pack("<I", 2) + b"{}", "version"),
    (wire.MAGIC + bytes([1]) + struct.pack("<I", 100) + b"{}", "truncated"),
    (_frame({"v": 1}), "lacks its fields"),
    (_frame({"v": {"$a": 0}, "b": [["|O", [1], 8]]}, b"\0" * 8), "not allowed"),
    (_frame({"v": {"$a": 0}, "b": [["<i8", [2], 8]]}, b"\0" * 8), "does not fill"),
    (_frame({"v": {"$a": 0}, "b": [["<i8", [1], 8]]}, b"\0" * 4), "truncated"),
    (_frame({"v": {"$a": 0}, "b": [["<i8", [1], 8]]}, b"\0" * 9), "trailing"),
    (_frame({"v": {"$a": 1}, "b": [["<i8", [1], 8]]}, b"\0" * 8), "unknown tag"),
    (_frame({"v": {"$x": 0}, "b": []}), "unknown tag"),
    (_frame({"v": {"a": 1, "b": 2}, "b": []}), "unknown tag"),
    (_frame({"v": [{"$a": 0}, {"$a": 0}], "b": [["<i8", [1], 8]]}, b"\0" * 8), "unknown tag"),
    (_frame({"v": None, "b": [["<i8", [1], 8]]}, b"\0" * 8), "nothing refers"),
    (_frame({"v": {"$b": 0}, "b": [["<i8", [1], 8]]}, b"\0" * 8), "disagree"),
    (_frame({"v": None, "b": [["<i8", [-1], 8]]}, b"\0" * 8), "malformed"),
    (wire.MAGIC + bytes([1]) + struct.pack("<I", 3) + b"\xff\xfe\xfd", "not JSON"),
])
def test_malformed_frames_are_refused(data, match):
    with pytest.raises(wire.WireError, match=match):
        wire.decode(data)


def test_deep_nesting_is_refused():
    deep = None
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(wire.WireError, match="deeply"):
        wire.encode(deep)
    h = json.dumps({"v": json.loads("[" * 40 + "]" * 40), "b": []}).encode()
    with pytest.raises(wire.WireError, match="deeply"):
        wire.decode(wire.MAGIC + bytes([1]) + struct.pack("<I", len(h)) + h)


def test_share_validator_checks_dtype_shape_and_range():
    p = 2 ** 31 - 1
    check = wire.shares((4, None), p)
    ok = np.array([[0, p - 1]] * 4, np.int64)
    assert check(ok) is ok
    with pytest.raises(wire.WireError, match="dtype int64"):
        check(ok.astype(np.int32))
    with pytest.raises(wire.WireError, match=r"shape \(4, \*\)"):
        check(ok[:3])
    with pytest.raises(wire.WireError, match="outside"):
        check(ok + 1)
    with pytest.raises(wire.WireError, match="outside"):
        check(ok - 1)
    with pytest.raises(wire.WireError, match="an array"):
        check([1, 2])


def test_other_validators():
    assert wire.digest(32)(os.urandom(32))
    with pytest.raises(wire.WireError):
        wire.digest(32)(b"short")
    with pytest.raises(wire.WireError):
        wire.value(int, "a count")(True)  # a boolean is not a count
    with pytest.raises(wire.WireError):
        wire.value(int, "a count", lambda v: v >= 0)(-1)
    with pytest.raises(wire.WireError):
        wire.array(np.float64, (2,))(np.array([1.0, np.nan]))
    with pytest.raises(wire.WireError):
        wire.nothing(0)
    either = wire.one_of(wire.digest(32), wire.digest(0))
    assert either(b"") == b""


def test_frame_layout_is_header_then_each_arrays_bytes():
    """The frame is byte for byte the documented layout (the arrays' bytes are joined in, not re-encoded): a
    strided and a big-endian array go as their C-order little-endian bytes, and the arrays decoded own their
    memory (writing to one changes neither the frame nor the other)."""
    strided = np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2]
    big = np.arange(5, dtype=">i4")
    frame = wire.encode([strided, b"xy", big, np.zeros((2, 0), bool)])
    header = json.dumps({"v": [{"$a": 0}, {"$b": 1}, {"$a": 2}, {"$a": 3}],
                         "b": [["<i8", [4, 3], 96], ["bytes", [], 2], ["<i4", [5], 20], ["|b1", [2, 0], 0]]},
                        separators=(",", ":")).encode()
    body = np.ascontiguousarray(strided).tobytes() + b"xy" + big.astype("<i4").tobytes()
    assert frame == wire.MAGIC + bytes([wire.VERSION]) + struct.pack("<I", len(header)) + header + body
    a, xy, b, e = wire.decode(frame)
    assert np.array_equal(a, strided) and xy == b"xy" and list(b) == [0, 1, 2, 3, 4] and e.shape == (2, 0)
    assert a.flags.owndata and b.flags.owndata
    a[0, 0] = 99
    assert wire.decode(frame)[0][0, 0] == 0


@pytest.mark.parametrize("bits", [8, 39, 40, 46, 61])
def test_packed_shares_round_trip_in_the_fields_bytes_and_refuse_what_is_not_a_share(bits):
    from sqm.mpc.shares.field import prime_below

    p = prime_below(bits)
    a = np.random.default_rng(bits).integers(0, p, size=(7, 3), dtype=np.int64)
    a[0, 0], a[0, 1] = 0, p - 1
    frame = wire.pack_shares(a, p)
    assert frame.dtype == np.uint8 and frame.shape == (21, -(-bits // 8))
    back = wire.packed_shares((7, 3), p)(wire.decode(wire.encode(frame)))
    assert back.dtype == np.int64 and np.array_equal(back, a)
    with pytest.raises(wire.WireError, match="shape"):
        wire.packed_shares((7, 4), p)(frame)
    over = frame.copy()
    over[0] = 255  # all ones: 2^(8 nb) - 1 >= p
    with pytest.raises(wire.WireError, match="outside"):
        wire.packed_shares((7, 3), p)(over)
