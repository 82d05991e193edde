"""Integer arrays packed into one blob: the binary columns of schema 4 (docs/recording.md).

A packed blob is one format byte, then the payload: ``b"z"`` + a zlib stream of it (RFC 1950,
Python's ``zlib``), or ``b"r"`` + the payload as it is when compressing would not make it
shorter (a few bytes). The payload is the arrays one after the other, each as::

    1 byte   dtype code: 0 u1, 1 u2, 2 u4, 3 i1, 4 i2, 5 i4, 6 i8 (little-endian)
    4 bytes  number of values, little-endian uint32
    n * size the values

Each array is stored in the narrowest of those types that holds its values (unsigned when none
is negative), so small numbers cost one byte before compression. The codec is zlib because every
language's standard library reads it (the file stays readable without BatchScope: see
docs/recording.md) and Python ships it (no new dependency); on these payloads (a few hundred to a
few thousand bytes of small integers) zstd or lz4 would save little, and level 6 costs ~20 µs
for a 256-request step here.
"""
from __future__ import annotations

import struct
import zlib
from typing import Sequence

import numpy as np

DTYPES = (np.dtype("<u1"), np.dtype("<u2"), np.dtype("<u4"), np.dtype("<i1"), np.dtype("<i2"),
          np.dtype("<i4"), np.dtype("<i8"))
_CODE = {dt: code for code, dt in enumerate(DTYPES)}
_UNSIGNED = (DTYPES[0], DTYPES[1], DTYPES[2], DTYPES[6])   # then i8: no u8
_SIGNED = (DTYPES[3], DTYPES[4], DTYPES[5], DTYPES[6])
_HEADER = np.dtype([("code", "u1"), ("count", "<u4")])
_HEADER_STRUCT = struct.Struct("<BI")      # the same header, read ~10x faster than through numpy
ZLIB_LEVEL = 6
COMPRESSED, RAW = b"z", b"r"


def narrowest(a: np.ndarray) -> np.dtype:
    """The narrowest little-endian dtype of :data:`DTYPES` that holds every value of the integer
    array ``a`` (``u1`` when it is empty)."""
    if not len(a):
        return DTYPES[0]
    lo, hi = int(a.min()), int(a.max())
    for dt in (_UNSIGNED if lo >= 0 else _SIGNED):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return dt
    raise OverflowError(f"values {lo}..{hi} do not fit in 64 bits")


def pack(arrays: Sequence[np.ndarray | Sequence[int]], level: int = ZLIB_LEVEL) -> bytes:
    """``arrays`` (integer values, each at most 2**32 - 1 long) as one blob (see the module doc).
    Raises ``OverflowError`` for a value outside int64 or an array too long."""
    parts = []
    for values in arrays:
        a = np.asarray(values, dtype=np.int64) if not isinstance(values, np.ndarray) or \
            values.dtype.kind not in "iu" else values
        if len(a) >= 1 << 32:
            raise OverflowError(f"an array of {len(a)} values (at most 2**32 - 1)")
        dt = narrowest(a)
        header = np.array([(_CODE[dt], len(a))], _HEADER).tobytes()
        parts += (header, a.astype(dt, copy=False).tobytes())
    payload = b"".join(parts)
    packed = zlib.compress(payload, level)
    return COMPRESSED + packed if len(packed) < len(payload) else RAW + payload


def unpack(blob: bytes) -> list[np.ndarray]:
    """The arrays :func:`pack` stored, each as int64. Raises ``ValueError`` for a damaged blob
    (unknown format byte or dtype code, a bad zlib stream, a length past the end)."""
    if not blob:
        raise ValueError("an empty packed blob")
    kind, body = blob[:1], blob[1:]
    if kind == COMPRESSED:
        try:
            payload = zlib.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"damaged packed blob: {exc}") from exc
    elif kind == RAW:
        payload = bytes(body)
    else:
        raise ValueError(f"packed blob with unknown format byte {kind!r}")
    out, at, size = [], 0, len(payload)
    while at < size:
        if at + _HEADER.itemsize > size:
            raise ValueError("packed blob cut inside an array header")
        code, count = _HEADER_STRUCT.unpack_from(payload, at)
        if code >= len(DTYPES):
            raise ValueError(f"packed blob with unknown dtype code {code}")
        dt = DTYPES[code]
        at += _HEADER.itemsize
        end = at + count * dt.itemsize
        if end > size:
            raise ValueError("packed blob shorter than its arrays")
        out.append(np.frombuffer(payload, dt, count, at).astype(np.int64))
        at = end
    return out
