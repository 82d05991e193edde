"""One stable colour per request id, shared by every view (block map, slot timeline, tables).

Colours are plain ``(r, g, b)`` tuples of ints so views can paint numpy images with them; use
:func:`request_qcolor` for Qt widgets. A request id ending in a number (``req-7``, ``12``) takes
palette entry ``number % len(PALETTE)``; a parallel-sampling sequence ``<id>#k`` steps ``k`` times
:data:`SEQUENCE_STEP` further on from its prompt's entry, so the sequences of one prompt differ;
other ids are hashed with CRC32 (stable across runs and processes, unlike ``hash()``).

The palette (:data:`PALETTE`, :data:`NUM_COLORS` entries) walks the hue circle by the golden
angle (entry ``i`` at hue ``i / phi`` turns, phi the golden ratio; the three-distance theorem keeps
any run of consecutive entries spread evenly round the circle) in the OKLCh space (Ottosson 2020,
"A perceptual color space for image processing"; conversions by ``coloraide``), with lightness
stepped by a second irrational (sqrt 2) between 0.62 and 0.84 for the dark background, and chroma
0.14 reduced where sRGB cannot show it. Consecutive ids so differ by >= 0.2 in OKLab (about ten
just-noticeable differences), and the 1,024 entries repeat only after 1,024 ids: the live
requests of a run (ids given in arrival order) rarely share a colour.
"""
from __future__ import annotations

import re
import zlib
from typing import Sequence

import numpy as np
from coloraide import Color
from PySide6.QtGui import QColor

RGB = tuple[int, int, int]


def _hex(h: str) -> RGB:
    return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)


NUM_COLORS = 1024                    # palette entries: distinct colours before one repeats
SEQUENCE_STEP = 397                  # palette entries between the sequences of one prompt
LIGHTNESS = (0.62, 0.84)             # OKLab lightness range of the palette (dark background)
CHROMA = 0.14                        # OKLCh chroma asked for (less where sRGB has no such colour)
_PHI = (1 + 5 ** 0.5) / 2


def golden_palette(n: int = NUM_COLORS) -> tuple[RGB, ...]:
    """``n`` request colours, 8-bit sRGB: entry ``i`` is OKLCh (lightness ``LIGHTNESS`` stepped
    by ``frac(i * sqrt 2)``, chroma :data:`CHROMA` fitted into sRGB by lowering the chroma,
    hue ``frac(i / phi)`` turns). Deterministic; ~35 ms for 1,024 entries."""
    lo, hi = LIGHTNESS
    out = []
    for i in range(n):
        c = Color("oklch", [lo + (hi - lo) * ((i * 2 ** 0.5) % 1.0), CHROMA, 360.0 * ((i / _PHI) % 1.0)])
        r, g, b = c.fit("srgb", method="oklch-chroma").convert("srgb").coords()
        out.append(tuple(int(round(255 * min(max(v, 0.0), 1.0))) for v in (r, g, b)))
    return tuple(out)  # type: ignore[return-value]


# No greys: grey means free / idle.
PALETTE: tuple[RGB, ...] = golden_palette()

BACKGROUND: RGB = _hex("#17181b")   # behind everything, and the gaps between cells
FREE: RGB = _hex("#34373d")         # a free KV block
IDLE: RGB = _hex("#26282d")         # an idle batch slot in a step
TEXT: RGB = _hex("#d4d6da")
MUTED: RGB = _hex("#8b9098")
ERROR: RGB = _hex("#e15759")

_TRAILING_INT = re.compile(r"(\d+)(?:#(\d+))?$")


_INDEX_CACHE: dict[str, int] = {}
_INDEX_CACHE_MAX = 200_000


def color_index(request_id: str) -> int:
    """Palette index of ``request_id`` (stable, deterministic; memoised, so views can call it
    for every visible row or owner each frame)."""
    i = _INDEX_CACHE.get(request_id)
    if i is None:
        m = _TRAILING_INT.search(request_id)
        n = (int(m.group(1)) + SEQUENCE_STEP * int(m.group(2) or 0) if m
             else zlib.crc32(request_id.encode("utf-8")))
        i = n % len(PALETTE)
        if len(_INDEX_CACHE) >= _INDEX_CACHE_MAX:
            _INDEX_CACHE.clear()
        _INDEX_CACHE[request_id] = i
    return i


def color_indices(request_ids: Sequence[str]) -> np.ndarray:
    """Palette index of each id, int16 ``[len(request_ids)]`` (index into :func:`palette_lut`);
    one dict lookup per id known before."""
    get = _INDEX_CACHE.get
    found = [get(r) for r in request_ids]
    if None in found:
        found = [color_index(r) for r in request_ids]
    return np.array(found, np.int16).reshape(len(found))


def request_rgb(request_id: str) -> RGB:
    """The colour of ``request_id`` everywhere in the window."""
    return PALETTE[color_index(request_id)]


def request_qcolor(request_id: str) -> QColor:
    return QColor(*request_rgb(request_id))


def mix(a: RGB, b: RGB, t: float) -> RGB:
    """``a`` moved a fraction ``t`` of the way towards ``b``."""
    return tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))  # type: ignore[return-value]


def lighten(c: RGB, t: float = 0.45) -> RGB:
    return mix(c, (255, 255, 255), t)


def dim(c: RGB, t: float = 0.65) -> RGB:
    """``c`` faded towards the background (used for what is not selected)."""
    return mix(c, BACKGROUND, t)


def css(c: RGB) -> str:
    return "#%02x%02x%02x" % c


def palette_lut(fn=lambda c: c, none: RGB = FREE) -> np.ndarray:
    """Packed colours (see :func:`packed`) of ``fn(c)`` for each palette entry, uint32
    ``[len(PALETTE) + 1]``; the last entry is ``none``, so palette index -1 (no request) picks it."""
    return packed([fn(c) for c in PALETTE] + [none])


def packed(rgb) -> np.ndarray:
    """``(..., 3)`` RGB -> ``(...)`` uint32 ``0xffRRGGBB`` (Qt's ``Format_RGB32`` pixel; see
    ``ui.views.packed_image``). Painting images as uint32 is ~10x faster than 3-byte pixels."""
    a = np.asarray(rgb, np.uint32)
    return (a[..., 2] | (a[..., 1] << 8) | (a[..., 0] << 16) | np.uint32(0xFF000000)).astype(np.uint32)


def unpack(img32: np.ndarray) -> np.ndarray:
    """Packed ``(...)`` uint32 -> ``(..., 3)`` uint8 RGB (the inverse of :func:`packed`)."""
    a = np.asarray(img32, np.uint32)
    return np.stack([(a >> 16) & 255, (a >> 8) & 255, a & 255], axis=-1).astype(np.uint8)
