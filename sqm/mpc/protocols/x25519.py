"""X25519 (RFC 7748) over many points at once, for the PSI's blinding (:mod:`sqm.mpc.protocols.psi`).

Two backends give the same bytes for the same key and point:

- Intel's Cryptography Primitives Library (the ``ipp-crypto`` wheel, Apache 2.0, with Intel's compiler runtime
  ``intel-cmplr-lib-rt``): its multi-buffer ``mbx_x25519_mb8`` multiplies eight points per call with AVX-512 IFMA.
  Optional: ``pip install sqm-vfl[fastpsi]``.  It is used only when its libraries load and it agrees with
  libsodium on a sample at first use (a CPU without IFMA, or any mismatch, keeps libsodium);
- libsodium's ``crypto_scalarmult`` through PyNaCl, one point per call, otherwise.

Refusal is libsodium's on both: a point on libsodium's list of small-order encodings (top bit ignored), or a
product that is zero, raises :class:`SmallOrderError` naming no value.
"""
from __future__ import annotations

import ctypes
import hashlib
from functools import lru_cache

import numpy as np

POINT_BYTES = 32
_LANES = 8
_RUNTIME = ["libintlc", "libimf", "libsvml", "libirng"]  # Intel's compiler runtime that crypto_mb links, in load order
# libsodium's small-order u-coordinates (crypto_scalarmult/curve25519/ref10/x25519_ref10.c), little endian
_SMALL_ORDER = [0, 1, 325606250916557431795983626356110631294008115727848805560023387167927233504,
                39382357235489614581723060781553021112529911719440698176882885853963445705823,
                2 ** 255 - 20, 2 ** 255 - 19, 2 ** 255 - 18]


class SmallOrderError(ValueError):
    """A point of small order (or its product zero): blinding it would reveal nothing but zero."""


def _small_order_rows(points: np.ndarray) -> np.ndarray:
    """Which rows of ``points`` ((N, 32) uint8) encode a blocklisted small-order point, top bit ignored."""
    masked = points.copy()
    masked[:, 31] &= 0x7F
    keys = masked.view(f"S{POINT_BYTES}").ravel()
    bl = np.array([v.to_bytes(POINT_BYTES, "little") for v in _SMALL_ORDER], dtype=f"S{POINT_BYTES}")
    # (numpy's bytes type ignores trailing zero bytes, which changes nothing between strings of one width)
    return np.isin(keys, bl)


def _sodium(key: bytes, points: np.ndarray) -> np.ndarray:
    from nacl.bindings import crypto_scalarmult
    from nacl.exceptions import RuntimeError as NaclError

    b = points.tobytes()
    try:
        out = b"".join([crypto_scalarmult(key, b[i:i + POINT_BYTES]) for i in range(0, len(b), POINT_BYTES)])
    except NaclError:
        raise SmallOrderError("a value is a point of small order (blinding it gives zero)") from None
    return np.frombuffer(out, dtype=np.uint8).reshape(-1, POINT_BYTES)


def _library_files(dist: str, wanted) -> dict[str, str]:
    """Name -> path of the files of the installed distribution ``dist`` whose name ``wanted`` accepts."""
    from importlib import metadata

    return {f.name: str(f.locate()) for f in metadata.distribution(dist).files or [] if wanted(f.name)}


def _load(paths: list[str], mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """The first of ``paths`` that loads, the most specific version first (a wheel copies ``libx.so``,
    ``libx.so.N``, ``libx.so.N.M``, and the shortest may be a linker script)."""
    for path in sorted(paths, key=len, reverse=True):
        try:
            return ctypes.CDLL(path, mode=mode)
        except OSError:
            continue
    raise OSError(f"none of {paths} loads")


@lru_cache(maxsize=1)
def _multibuffer():
    """``mbx_x25519_mb8`` from crypto_mb, or None where it is not installed, does not load, or disagrees with
    libsodium on a sample (a CPU without AVX-512 IFMA)."""
    try:
        runtime = _library_files("intel-cmplr-lib-rt", lambda name: name.split(".so")[0] in _RUNTIME)
        for base in _RUNTIME:  # the compiler runtime first, where the global symbol table finds it
            _load([path for name, path in runtime.items() if name.split(".so")[0] == base], ctypes.RTLD_GLOBAL)
        lib = _load(list(_library_files("ipp-crypto", lambda name: name.startswith("libcrypto_mb.so")).values()))
        fn = lib.mbx_x25519_mb8
    except Exception:  # not installed, or not loadable here: libsodium
        return None
    fn.restype = ctypes.c_uint32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    # a public sample, fixed: SHAKE-256 of a label (no generator: nothing secret is drawn here)
    sample = np.frombuffer(hashlib.shake_256(b"sqm x25519 sample").digest(POINT_BYTES * 3 * _LANES), dtype=np.uint8)
    key, pts = sample[:POINT_BYTES].tobytes(), sample[POINT_BYTES:].reshape(-1, POINT_BYTES)
    try:
        out, failed = _batched(fn, key, pts)
        ok = not failed and np.array_equal(out, _sodium(key, pts))
    except Exception:  # pragma: no cover - a library that fails its first call: libsodium
        ok = False
    return fn if ok else None


def _batched(fn, key: bytes, points: np.ndarray) -> tuple[np.ndarray, bool]:
    """``points`` times ``key`` through ``mbx_x25519_mb8``, eight lanes a call; and whether any lane's status was not
    success (a small-order point, or a failure of the library)."""
    n = points.shape[0]
    pad = (-n) % _LANES
    pts = np.ascontiguousarray(points, dtype=np.uint8)
    if pad:  # the last call's spare lanes multiply a copy of the first point
        pts = np.concatenate([pts, np.repeat(pts[:1], pad, axis=0)])
    out = np.empty_like(pts)
    k = np.frombuffer(key, dtype=np.uint8).copy()
    rows = np.arange(pts.shape[0], dtype=np.uint64) * np.uint64(POINT_BYTES)
    src = rows + np.uint64(pts.ctypes.data)  # the lanes' pointer arrays: eight addresses per call
    dst = rows + np.uint64(out.ctypes.data)
    keys = np.full(_LANES, k.ctypes.data, dtype=np.uint64)
    s0, d0, kp, step = src.ctypes.data, dst.ctypes.data, keys.ctypes.data, 8 * _LANES
    failed = 0
    for g in range(pts.shape[0] // _LANES):
        failed |= fn(d0 + g * step, kp, s0 + g * step)
    return out[:n], bool(failed)


def backend() -> str:
    """Which backend :func:`scalarmult` uses here: "crypto_mb" or "libsodium"."""
    return "libsodium" if _multibuffer() is None else "crypto_mb"


def scalarmult(key: bytes, points: np.ndarray) -> np.ndarray:
    """Every u-coordinate in ``points`` ((N, 32) uint8) multiplied by the scalar ``key`` (X25519, the key clamped):
    an (N, 32) uint8 array.  Raises :class:`SmallOrderError` where libsodium refuses."""
    fn = _multibuffer()
    if fn is None or points.shape[0] == 0:
        return _sodium(key, points)
    out, failed = _batched(fn, key, points)
    if _small_order_rows(points).any() or not out.any(axis=1).all():
        raise SmallOrderError("a value is a point of small order (blinding it gives zero)")
    if failed:  # pragma: no cover - a lane's failure other than small order: libsodium decides
        return _sodium(key, points)
    return out
