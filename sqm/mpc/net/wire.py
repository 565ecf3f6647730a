"""The wire format between parties: typed frames, never pickles.

Every message a party sends is one frame::

    b"SQMW" | version (1 byte) | header length (4 bytes, little endian) | header (UTF-8 JSON) | buffers

The JSON header is ``{"v": TREE, "b": [[dtype, shape, nbytes], ...]}``.  TREE is plain JSON (null, booleans,
integers of any size, finite or non-finite floats, strings, lists) where the objects are tagged:
``{"$a": i}`` is buffer i read as a numpy array of the listed dtype and shape, ``{"$b": i}`` is buffer i as
``bytes`` and ``{"$d": [[key, value], ...]}`` a dict with string keys.  Buffers follow the header back to
back.  Only the dtypes in :data:`DTYPES` (no object arrays, no structured dtypes) are accepted.

Why by hand: the standard library's safe formats (json, struct, ``numpy.save`` with ``allow_pickle=False``)
each cover a part: json has no arrays or bytes, ``numpy.save`` carries one array and parses a Python-literal
header.  This module is the small glue that frames a tree of them; it executes nothing it reads.

:func:`decode` refuses any frame that is not exactly of this form (bad magic, truncated, trailing bytes,
unknown tags or dtypes, sizes that disagree), raising :class:`WireError` and nothing else (a fuzz test of 20,000
mutated frames holds it to that).  Limits, checked before anything is built: a header of at most
:data:`MAX_HEADER` bytes, nesting of at most :data:`MAX_DEPTH` levels, integers of at most
:data:`MAX_INT_DIGITS` digits, arrays of at most :data:`MAX_NDIM` dimensions each at most :data:`MAX_DIM` long,
whose bytes must be in the frame.  What a protocol step expects is
then checked by a validator (:func:`shares`, :func:`packed_shares`, :func:`array`, :func:`digest`, :func:`value`):
a frame of the right form but the wrong dtype, shape or range is refused too.
"""
from __future__ import annotations

import ctypes
import functools
import json
import struct
from typing import Any
from collections.abc import Callable

import numpy as np

from sqm.errors import RefusedError
from sqm.mpc.shares.kernels import kernel_function, numpy_forced
from sqm.mpc.shares.randomness import secure_generator

MAGIC = b"SQMW"
VERSION = 1
MAX_HEADER = 1 << 24  # 16 MiB of JSON is far above any header the protocols send
MAX_DEPTH = 16
MAX_NDIM = 32  # an array's dimensions (numpy's own limit is 64)
MAX_DIM = 1 << 40  # one dimension's length (an empty array may claim any shape; this bounds what it claims)
MAX_INT_DIGITS = 4300  # integers in the header: Python's own limit on int/str conversion, refused cleanly here
DTYPES = {np.dtype(t).str: np.dtype(t) for t in
          ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
           "float64")}


class WireError(RefusedError, ValueError):
    """A frame that is malformed or not what the protocol expects at this step."""


# ----- encoding ---------------------------------------------------------------------------------------------
def encode(obj: Any) -> bytes:
    """One frame for ``obj``: None, bool, int, float, str, bytes, list/tuple, dict (str keys), numpy arrays of
    the dtypes in :data:`DTYPES` and numpy scalars.  Tuples arrive as lists."""
    buffers: list = []  # bytes and arrays of uint8, joined once into the frame
    meta: list[list] = []

    def tree(x, depth: int):
        if depth > MAX_DEPTH:
            raise WireError("message nests too deeply")
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, np.integer)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            return float(x)
        if isinstance(x, np.bool_):
            return bool(x)
        if isinstance(x, (bytes, bytearray, memoryview)):
            buffers.append(bytes(x))
            meta.append(["bytes", [], len(buffers[-1])])
            return {"$b": len(buffers) - 1}
        if isinstance(x, np.ndarray):
            a = np.ascontiguousarray(x)
            dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
            if dt.str not in DTYPES:
                raise WireError(f"arrays of dtype {x.dtype} cannot be sent (allowed: numeric and bool)")
            a = a.astype(dt, copy=False)
            buffers.append(a.reshape(-1).view(np.uint8))  # its bytes, joined into the frame below: no copy here
            meta.append([dt.str, list(a.shape), a.nbytes])
            return {"$a": len(buffers) - 1}
        if isinstance(x, (list, tuple)):
            return [tree(v, depth + 1) for v in x]
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                raise WireError("dict keys must be strings")
            return {"$d": [[k, tree(v, depth + 1)] for k, v in x.items()]}
        raise WireError(f"objects of type {type(x).__name__} cannot be sent")

    header = json.dumps({"v": tree(obj, 0), "b": meta}, separators=(",", ":")).encode()
    return b"".join([MAGIC, bytes([VERSION]), struct.pack("<I", len(header)), header, *buffers])


# ----- decoding ---------------------------------------------------------------------------------------------
def decode(data: bytes) -> Any:
    """The object in one frame; :class:`WireError` for anything that is not exactly a frame."""
    data = bytes(data)
    if len(data) < 9 or data[:4] != MAGIC:
        raise WireError("not a frame of this protocol (bad magic)")
    if data[4] != VERSION:
        raise WireError(f"frame version {data[4]}, expected {VERSION}")
    (hlen,) = struct.unpack_from("<I", data, 5)
    if hlen > MAX_HEADER or 9 + hlen > len(data):
        raise WireError("frame header is truncated or too long")
    try:
        head = json.loads(data[9:9 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise WireError("frame header is not JSON") from None
    except RecursionError:  # JSON nested beyond the interpreter's stack: far beyond MAX_DEPTH
        raise WireError(f"frame header nests too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError:  # an integer of more than MAX_INT_DIGITS digits (Python refuses to convert it)
        raise WireError(f"frame header holds an integer of more than {MAX_INT_DIGITS} digits") from None
    if not isinstance(head, dict) or set(head) != {"v", "b"} or not isinstance(head["b"], list):
        raise WireError("frame header lacks its fields")
    pos = 9 + hlen
    bufs: list[bytes | np.ndarray] = []
    for m in head["b"]:
        if (not isinstance(m, list) or len(m) != 3 or not isinstance(m[0], str) or not isinstance(m[1], list)
                or not _nonneg_int(m[2]) or not all(_nonneg_int(s) for s in m[1])):
            raise WireError("frame buffer description is malformed")
        kind, shape, n = m
        if len(shape) > MAX_NDIM or any(d > MAX_DIM for d in shape):
            raise WireError(f"frame buffer shape {_short_shape(shape)} is out of bounds (at most {MAX_NDIM} "
                            f"dimensions of at most 2^40)")
        if pos + n > len(data):
            raise WireError("frame is truncated")
        at = pos
        pos += n
        if kind == "bytes":
            if shape:
                raise WireError("a bytes buffer has no shape")
            bufs.append(data[at:pos])
            continue
        dt = DTYPES.get(kind)
        if dt is None:
            raise WireError(f"dtype {kind!r} is not allowed on the wire")
        if int(np.prod(shape, dtype=object)) * dt.itemsize != n:
            raise WireError(f"array of shape {shape} and dtype {dt} does not fill its {n} bytes")
        try:
            # read in place, then one copy: the array owns its (writable) memory, not the frame's
            bufs.append(np.frombuffer(data, dtype=dt, count=n // dt.itemsize, offset=at).reshape(shape).copy())
        except ValueError:  # a shape numpy cannot build (e.g. its size overflows): never reached by our frames
            raise WireError(f"array of shape {_short_shape(shape)} cannot be built") from None
    if pos != len(data):
        raise WireError("frame has trailing bytes")
    used = set()

    def tree(x, depth: int):
        if depth > MAX_DEPTH:
            raise WireError("message nests too deeply")
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [tree(v, depth + 1) for v in x]
        if isinstance(x, dict) and len(x) == 1:
            (tag, val), = x.items()
            if tag in ("$a", "$b") and _nonneg_int(val) and val < len(bufs) and val not in used:
                want_bytes = tag == "$b"
                if isinstance(bufs[val], bytes) != want_bytes:
                    raise WireError("frame tag and buffer kind disagree")
                used.add(val)
                return bufs[val]
            if tag == "$d" and isinstance(val, list) and all(
                    isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str) for kv in val):
                return {k: tree(v, depth + 1) for k, v in val}
        raise WireError("frame holds an unknown tag")

    out = tree(head["v"], 0)
    if len(used) != len(bufs):
        raise WireError("frame holds a buffer nothing refers to")
    return out


def _short_shape(shape) -> str:
    return "[" + ", ".join(str(d) if d < 10 ** 12 else f"~1e{len(str(d)) - 1}" for d in shape[:8]) + (
        ", ...]" if len(shape) > 8 else "]")


def _nonneg_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


# ----- what a step expects ------------------------------------------------------------------------------------
Validator = Callable[[Any], Any]


def shares(shape, p: int) -> Validator:
    """An int64 array of exactly ``shape`` with every entry in [0, p): Shamir shares in F_p."""
    return array(np.int64, shape, lo=0, hi=p - 1, what="shares")


def share_bytes(p: int) -> int:
    """Bytes per field element in a packed frame (:func:`pack_shares`): those of p - 1."""
    return max(1, -(-(int(p) - 1).bit_length() // 8))


def pack_shares(a, p: int) -> np.ndarray:
    """Field elements (int64 in [0, p)) as their :func:`share_bytes` low little-endian bytes each: a uint8 array of
    shape (elements, bytes), what :func:`packed_shares` reads back (a 40-bit field's shares in 5 bytes, not 8)."""
    a = np.ascontiguousarray(np.asarray(a, dtype="<i8")).reshape(-1)
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, 8)[:, :share_bytes(p)])


def packed_shares(shape, p: int) -> Validator:
    """A :func:`pack_shares` frame of the shares of exactly ``shape`` (uint8, (elements, bytes)), unpacked to int64
    with every entry in [0, p) (:func:`shares`)."""
    nb = share_bytes(p)
    n = int(np.prod(shape, dtype=np.int64))
    raw = array(np.uint8, (n, nb), what="packed shares")
    full = shares(tuple(shape), p)

    def check(x):
        b = raw(x)
        out = np.zeros((n, 8), dtype=np.uint8)
        out[:, :nb] = b
        return full(out.view("<i8").reshape(tuple(shape)).astype(np.int64, copy=False))
    return check


def _bit_plan(p: int, n: int) -> tuple[int, int, int, int, int]:
    """(h, k, nb, groups, bytes) of :func:`pack_bits` for n elements: high parts of h bits, k to a group in nb
    bytes."""
    h = max(1, (int(p) - 1).bit_length() - 32)
    k = 8 if h <= 8 else 4 if h <= 16 else 2
    nb = -(-k * h // 8)
    groups = -(-int(n) // k)
    return h, k, nb, groups, 4 * int(n) + groups * nb


def pack_bits(a, p: int) -> np.ndarray:
    """Field elements (int64 in [0, p), p above 2^32) in their bits, nearly: each one's low 32 bits as 4 bytes,
    then its high h = bits(p - 1) - 32 bits packed k to a group of nb bytes (h <= 8: 8 in h bytes; h <= 16: 4 in
    ceil(h/2); else 2): a flat uint8 array that :func:`packed_bits` reads back (a 42-bit field's shares in 5.25
    bytes, not :func:`pack_shares`' 6).  Fields below 2^33: :func:`pack_shares`, flattened."""
    a = np.ascontiguousarray(np.asarray(a, dtype="<i8")).reshape(-1)
    if int(p) - 1 < 1 << 32:
        return pack_shares(a, p).reshape(-1)
    h, k, nb, groups, total = _bit_plan(p, a.size)
    fns = _bit_kernel()
    if fns is not None:
        out = np.empty(total, dtype=np.uint8)
        if fns[0](a.ctypes.data, a.size, h, k, nb, out.ctypes.data) == 0:
            return out
    return _pack_bits_numpy(a, h, k, nb, groups)


def _pack_bits_numpy(a: np.ndarray, h: int, k: int, nb: int, groups: int) -> np.ndarray:
    low = a.astype("<u4").view(np.uint8)  # the low 32 bits (the cast wraps modulo 2^32)
    flat = np.zeros(groups * k, dtype="<u8")
    flat[:a.size] = a >> 32
    high = flat.reshape(groups, k)
    word = high[:, 0].copy()
    for i in range(1, k):
        word |= high[:, i] << np.uint64(i * h)
    return np.concatenate([low.reshape(-1), word.view(np.uint8).reshape(groups, 8)[:, :nb].reshape(-1)])


def packed_bits(shape, p: int) -> Validator:
    """A :func:`pack_bits` frame of the shares of exactly ``shape``, unpacked to int64 with every entry in [0, p)
    (:func:`shares`)."""
    n = int(np.prod(shape, dtype=np.int64))
    if int(p) - 1 < 1 << 32:
        nbytes = share_bytes(p)
        flat = packed_shares(tuple(shape), p)
        raw_small = array(np.uint8, (n * nbytes,), what="packed shares")
        return lambda x: flat(raw_small(x).reshape(n, nbytes))
    h, k, nb, groups, total = _bit_plan(p, n)
    raw = array(np.uint8, (total,), what="packed shares")
    full = shares(tuple(shape), p)

    def check(x):
        b = raw(x)
        fns = _bit_kernel()
        if fns is not None:  # compiled: the same integers; any entry not below p is refused by ``full`` below
            b = np.ascontiguousarray(b)
            out = np.empty(tuple(shape), dtype=np.int64)
            if fns[1](b.ctypes.data, n, h, k, nb, p, out.ctypes.data) == 0:
                return out
        return full(_unpack_bits_numpy(b, n, h, k, nb, groups).reshape(tuple(shape)))
    return check


def _unpack_bits_numpy(b: np.ndarray, n: int, h: int, k: int, nb: int, groups: int) -> np.ndarray:
    """:func:`pack_bits`'s n elements from its bytes ``b`` (unchecked)."""
    vals = np.frombuffer(b[:4 * n].tobytes(), dtype="<u4").astype(np.int64)  # the low 32 bits
    words = np.zeros((groups, 8), dtype=np.uint8)
    words[:, :nb] = b[4 * n:].reshape(groups, nb)
    word = words.view("<u8").reshape(groups)
    high = np.empty((k, groups), dtype="<u8")
    for i in range(k):
        np.right_shift(word, np.uint64(i * h), out=high[i])
    high &= np.uint64((1 << h) - 1)
    high <<= np.uint64(32)
    vals |= high.T.reshape(-1)[:n].view(np.int64)
    return vals


_KERNEL = "sqm.mpc.net._wire_kernel"  # the compiled packing's extension module (setup.py)


@functools.lru_cache(maxsize=1)
def _bit_kernel():
    """The compiled (pack, unpack) of :func:`pack_bits` (``_wire_kernel.c`` beside this module, an optional
    extension) where it gives the numpy functions' bytes and integers on a fixed public sample, else None (also
    where ``SQM_WIRE_KERNEL=numpy`` asks for numpy)."""
    if numpy_forced("SQM_WIRE_KERNEL"):
        return None
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    pack = kernel_function(_KERNEL, "sqm_wire_pack", [ptr, i64, i64, i64, i64, ptr])
    unpack = kernel_function(_KERNEL, "sqm_wire_unpack", [ptr, i64, i64, i64, i64, i64, ptr], ctypes.c_int64)
    if pack is None or unpack is None:
        return None
    rng = secure_generator(20263)  # a fixed public sample (its seed is here)
    try:
        for bits in (33, 36, 40, 42, 48, 49, 56, 61, 62):
            p = (1 << bits) - 1 - 2 * int(rng.integers(0, 1000))  # an odd modulus of that size (no prime needed)
            for n in (0, 1, 5, 8, 13):
                a = rng.integers(0, p, size=n, dtype=np.int64)
                h, k, nb, groups, total = _bit_plan(p, n)
                want = _pack_bits_numpy(a, h, k, nb, groups)
                got = np.empty(total, dtype=np.uint8)
                if pack(a.ctypes.data, n, h, k, nb, got.ctypes.data) != 0 or not np.array_equal(got, want):
                    return None
                noisy = got.copy()
                noisy[4 * n:] |= rng.integers(0, 256, size=total - 4 * n, dtype=np.uint8) * (groups * k > n)
                back = np.empty(n, dtype=np.int64)
                bad = unpack(noisy.ctypes.data, n, h, k, nb, p, back.ctypes.data)
                if bad != int((_unpack_bits_numpy(noisy, n, h, k, nb, groups) >= p).sum()) or \
                        not np.array_equal(back, _unpack_bits_numpy(noisy, n, h, k, nb, groups)):
                    return None
    except Exception:  # a kernel that fails its first calls: the numpy code
        return None
    return pack, unpack


def array(dtype, shape=None, lo=None, hi=None, what: str = "array", finite: bool = True) -> Validator:
    """A numpy array of ``dtype`` (exactly), of ``shape`` (None: any; entries None: any length) and, if given,
    with entries in [lo, hi]; float arrays must be finite unless ``finite`` is False."""
    dt = np.dtype(dtype)

    def check(x):
        if not isinstance(x, np.ndarray):
            raise WireError(f"expected {what} (an array), got {type(x).__name__}")
        if x.dtype != dt:
            raise WireError(f"expected {what} of dtype {dt}, got {x.dtype}")
        if shape is not None and (x.ndim != len(shape) or any(
                s is not None and int(s) != n for s, n in zip(shape, x.shape, strict=False))):
            want = ", ".join("*" if s is None else str(int(s)) for s in shape)
            raise WireError(f"expected {what} of shape ({want}), got {x.shape}")
        if x.size:
            if dt.kind == "f" and finite and not np.all(np.isfinite(x)):
                raise WireError(f"{what} holds NaN or infinite values")
            if lo is not None and x.min() < lo or hi is not None and x.max() > hi:
                raise WireError(f"{what} holds values outside [{lo}, {hi}]")
        return x
    return check


def digest(n: int = 32) -> Validator:
    """A bytes string of exactly ``n`` bytes (a hash, an HMAC, a key contribution)."""
    def check(x):
        if not isinstance(x, bytes) or len(x) != n:
            raise WireError(f"expected {n} bytes, got {type(x).__name__} of length "
                            f"{len(x) if hasattr(x, '__len__') else '-'}")
        return x
    return check


def value(kind, what: str = "value", pred: Callable[[Any], bool] | None = None) -> Validator:
    """A small public value of Python type ``kind`` (or a tuple of types) satisfying ``pred``."""
    def check(x):
        if isinstance(x, bool) and kind is not bool and (not isinstance(kind, tuple) or bool not in kind):
            raise WireError(f"expected {what}, got a boolean")
        if not isinstance(x, kind) or (pred is not None and not pred(x)):
            raise WireError(f"expected {what}, got {type(x).__name__} {_short(x)}")
        return x
    return check


def nothing(x):
    """An empty message (used by parties that take part in an exchange with nothing to say)."""
    if x is not None:
        raise WireError("expected an empty message")
    return x


def list_of(validators, what: str) -> Validator:
    """A list of exactly ``len(validators)`` items, item k checked by ``validators[k]``."""
    validators = list(validators)

    def check(x):
        if not isinstance(x, list) or len(x) != len(validators):
            raise WireError(f"expected {what}: a list of {len(validators)} arrays")
        return [v(item) for v, item in zip(validators, x, strict=False)]
    return check


def one_of(*validators: Validator) -> Validator:
    def check(x):
        errors = []
        for v in validators:
            try:
                return v(x)
            except WireError as e:
                errors.append(str(e))
        raise WireError(" / ".join(errors))
    return check


def _short(x) -> str:
    s = repr(x) if isinstance(x, (int, float, bool)) or x is None else ""
    return s[:40]
