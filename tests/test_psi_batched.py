"""The batched hashing onto the curve, on-curve check and blinding give the same bytes as the per-id reference
(the one-id-at-a-time forms, kept here) and as libsodium."""
import hashlib

import gmpy2
import numpy as np
import pytest

from sqm.mpc.protocols import x25519
from sqm.mpc.protocols.psi import _A, _MASK, _P, DOMAIN, POINT_BYTES, PSIError, blind, hash_ids, off_curve


def _hash_reference(ids) -> np.ndarray:
    """Try-and-increment one id at a time: SHA-512 of DOMAIN, a counter byte and the id; each half in turn."""
    out = bytearray()
    for x in ids:
        b = x.encode() if isinstance(x, str) else bytes(x)
        for c in range(256):
            h = hashlib.sha512(DOMAIN + bytes([c]) + b).digest()
            for half in (h[:32], h[32:]):
                u = int.from_bytes(half, "little") & _MASK
                if u < _P and gmpy2.jacobi(u * (u * (u + _A) + 1) % _P, _P) == 1:
                    out += u.to_bytes(32, "little")
                    break
            else:
                continue
            break
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(-1, POINT_BYTES)


def _off_curve_reference(points: np.ndarray) -> int | None:
    for r, row in enumerate(points):
        u = int.from_bytes(row.tobytes(), "little")
        if u >> 255 or u >= _P or gmpy2.jacobi(u * (u * (u + _A) + 1) % _P, _P) < 0:
            return r
    return None


def _ids() -> list:
    edge = ["", "0", "é", "\u4e2d\u6587", "a" * 1000, b"", b"\x00", b"\xff" * 64, bytearray(b"id"), "id", b"id"]
    return edge + [str(i) for i in range(10 ** 4 - len(edge))]


def test_hash_ids_equals_the_reference():
    ids = _ids()
    got = hash_ids(ids, len(ids))
    assert np.array_equal(got, _hash_reference(ids))
    assert np.array_equal(got[9], got[10]) and np.array_equal(got[5], hash_ids([""])[0])  # str and bytes alike
    # the cases the batches route differently: counter 0's second half, and later counters, both occur
    first = [hashlib.sha512(DOMAIN + b"\x00" + str(i).encode()).digest()[:31] for i in range(100)]
    assert {bytes(got[11 + i][:31]) == first[i] for i in range(100)} == {True, False}


def test_hash_ids_across_blocks():
    ids = [f"x{i}" for i in range((1 << 17) + 5)]  # more than one block of ids
    got = hash_ids(iter(ids), len(ids))
    assert got.shape == (len(ids), POINT_BYTES)
    assert np.array_equal(got[(1 << 17) - 3:], _hash_reference(ids[(1 << 17) - 3:]))


def _encode(u: int) -> np.ndarray:
    return np.frombuffer(u.to_bytes(32, "little"), dtype=np.uint8)


def test_off_curve_equals_the_reference():
    pts = hash_ids([str(i) for i in range(10 ** 4)]).copy()
    rng = np.random.default_rng(46)
    assert off_curve(pts) is None and _off_curve_reference(pts) is None
    assert off_curve(pts[:0]) is None
    twist = [u for u in range(2, 200) if gmpy2.jacobi(u * (u * (u + _A) + 1) % _P, _P) < 0]
    cases = [_encode(_P), _encode(_P - 1), _encode(_P + 5), _encode(2 ** 255 - 1), _encode(twist[0]), _encode(0),
             _encode(1), _encode((1 << 255) | 9)]
    for case in cases:
        for at in (0, 1, 4999, 9999):
            bad = pts.copy()
            bad[at] = case
            assert off_curve(bad) == _off_curve_reference(bad), (case, at)
    random = np.frombuffer(rng.bytes(32 * 10 ** 4), dtype=np.uint8).reshape(-1, 32).copy()
    random[:, 31] &= 0x7F  # canonical but half of them on the twist
    for at in range(0, 10 ** 4, 997):
        assert off_curve(random[at:]) == _off_curve_reference(random[at:])
    twice = pts.copy()
    twice[3] = _encode(twist[1])
    twice[7] = _encode(_P)  # the twist point comes first
    assert off_curve(twice) == 3 == _off_curve_reference(twice)


def test_blind_equals_libsodium_and_refuses_alike():
    from nacl.bindings import crypto_scalarmult
    from nacl.exceptions import RuntimeError as NaclError

    rng = np.random.default_rng(7)
    pts = np.frombuffer(rng.bytes(32 * 1001), dtype=np.uint8).reshape(-1, 32)  # curve and twist, non-canonical
    for key in (rng.bytes(32), bytes(32), b"\xff" * 32):
        got = blind(key, pts)
        assert got.tobytes() == b"".join(crypto_scalarmult(key, p.tobytes()) for p in pts)
    small = x25519._SMALL_ORDER + [2 ** 255 + 1, 2 ** 256 - 20]  # and with the top bit set
    for u in small:
        for at in (0, 500, 1000):
            bad = pts.copy()
            bad[at] = np.frombuffer((u % 2 ** 256).to_bytes(32, "little"), dtype=np.uint8)
            with pytest.raises(NaclError):
                crypto_scalarmult(b"\x01" * 32, bad[at].tobytes())
            with pytest.raises(PSIError, match="small order"):
                blind(rng.bytes(32), bad)
    assert x25519.backend() in ("crypto_mb", "libsodium")


def test_small_order_rows_are_libsodiums_refusals():
    """The multi-buffer backend's refusal rule (a blocklisted input, top bit ignored) refuses what libsodium does."""
    from nacl.bindings import crypto_scalarmult
    from nacl.exceptions import RuntimeError as NaclError

    rng = np.random.default_rng(8)
    values = [u + top for u in x25519._SMALL_ORDER for top in (0, 1 << 255)] + [_P + 18, 2, _P - 2]
    pts = np.concatenate([np.stack([_encode(v) for v in values]),
                          np.frombuffer(rng.bytes(32 * 200), dtype=np.uint8).reshape(-1, 32)])
    key = rng.bytes(32)

    def refused(p):
        try:
            crypto_scalarmult(key, p.tobytes())
        except NaclError:
            return True
        return False

    expected = np.array([refused(p) for p in pts])
    assert expected[:14].all() and not expected[14:].any()
    assert np.array_equal(x25519._small_order_rows(pts), expected)
