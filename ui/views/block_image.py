"""Pixels of the KV block map (pure numpy, no Qt): one ``px`` x ``px`` cell per block.

A cell is ``px - 1`` painted pixels square plus a 1-pixel gap (right and bottom), or ``px``
painted pixels and no gap when ``px`` <= 2 (:func:`painted_px`: a map of more blocks than a
gap per block leaves room for, where gaps would take half of it or more), filled from
the bottom like a glass: the owner's colour up to ``fill / block_size`` of its height, a faint
tint of that colour above, the free colour when nobody owns the block; selected blocks get a
white edge. Prefix caching adds two marks (``marks``): a block shared by several requests
(reference count > 1) gets a gold top row, a cached-free block (held by nobody, still caching a
prefix: evictable, reusable on a hit) is painted in the cached colour instead of the free one.
A block taken out of use (the user shrank the usable pool: ``MARK_RESERVED``) is dark with
light diagonal hatching. :class:`BlockImage` keeps the image up to date by repainting only the
cells whose look changed (a decode step changes the last block of each running request, not
16k cells).

When the blocks outnumber the view's device pixels a cell cannot be drawn at all: the map is
then AREA-AVERAGED (:func:`dense_image`), as a downscaled photo is: each pixel shows the mean
colour of the ``per_pixel`` consecutive blocks it covers, each block's colour being its cell's
mean (:func:`block_rgb`: the owner's colour in proportion to its fill, the faint tint for the
rest, free grey). A pixel's colour so tells fill and occupancy density (half of its blocks
free: half-way to grey) instead of the colour of whichever block a sampling scaler hit.
"""
from __future__ import annotations

import math

import numpy as np

from ui.style.colors import BACKGROUND, FREE, mix, packed, palette_lut, unpack

MAX_PIXELS = 400_000   # target image size in pixels (16,384 blocks -> 4 px per block)
MAX_CELL_PX = 12       # image pixels per block side at most (a larger view scales the image up)
TINT = 0.70            # how far the empty part of an owned block fades towards the free colour
SELECTED = (255, 255, 255)
SHARED = (242, 183, 5)                                  # top row of a prefix-shared block
CACHED_FREE = mix(FREE, (96, 125, 139), 0.55)           # a free block that still caches a prefix
RESERVED_BG = mix(BACKGROUND, FREE, 0.25)               # a block out of use: dark ...
RESERVED_HATCH = mix(FREE, (255, 255, 255), 0.12)       # ... with light diagonal hatching
MARK_SHARED, MARK_CACHED_FREE, MARK_RESERVED = 1, 2, 3  # values of ``marks`` (< 4)
_FULL = palette_lut()                                   # [21] packed; index -1 = free
_TINT = palette_lut(lambda c: mix(c, FREE, TINT))
_FULL_RGB = unpack(_FULL).astype(np.float32)            # [21, 3] the same, as RGB floats
_TINT_RGB = unpack(_TINT).astype(np.float32)
SHARED_SHARE = 0.5     # how far an area-averaged shared block's colour goes towards SHARED
SELECTED_SHARE = 0.6   # ... and a pixel holding a selected block towards SELECTED


def grid_columns(num_blocks: int, aspect: float = 2.0) -> int:
    """Columns that make ``num_blocks`` square cells fill an area ``aspect`` times wider than
    tall; multiples of 8 above 16 so block ids are easy to count along a row."""
    if num_blocks <= 0:
        return 8
    c = math.ceil(math.sqrt(num_blocks * max(0.2, min(aspect, 8.0))))
    if c > 16:
        c = 8 * math.ceil(c / 8)
    return max(4, min(c, 512, num_blocks))


def cell_px(num_blocks: int) -> int:
    """Image pixels per block side (including the gap): 4 .. 12, about ``MAX_PIXELS`` in all."""
    return int(min(MAX_CELL_PX, max(4, math.isqrt(MAX_PIXELS // max(num_blocks, 1)))))


def fitted_cell_px(columns: int, rows: int, width: float, height: float) -> int:
    """Pixels per cell side for a grid of ``columns`` x ``rows`` cells shown in ``width`` x
    ``height`` device pixels: the most whole device pixels a cell can have and the grid still
    fit (1 .. :data:`MAX_CELL_PX`). The image is then drawn one image pixel per device pixel
    (:func:`device_scale`): a grid drawn scaled by a fraction samples its 1-pixel gaps unevenly
    (some cells lose theirs, others get two), which shows as moiré bands over the whole map
    (26,000 blocks in a 600 x 400 view were cells of 4 image pixels at 0.74 device pixels each)."""
    return int(max(1, min(MAX_CELL_PX, width // max(columns, 1), height // max(rows, 1))))


def device_scale(image_width: int, image_height: int, width: float, height: float) -> float:
    """Device pixels per image pixel that show a whole ``image_width`` x ``image_height`` image
    in ``width`` x ``height`` device pixels: a whole number (each cell covers the same whole
    device pixels: no moiré), or, when even one pixel per block does not fit (more blocks than
    device pixels), the fraction that fits (cells of one pixel have no gaps to alias)."""
    fit = min(width / max(image_width, 1), height / max(image_height, 1))
    return float(math.floor(fit)) if fit >= 1 else fit


def painted_px(px: int) -> int:
    """Painted pixels of a ``px``-pixel cell's side: ``px - 1`` and a 1-pixel gap, or all ``px``
    (no gap) when ``px`` <= 2."""
    return px if px <= 2 else px - 1


def fill_rows(fill: np.ndarray, block_size: int, inner: int) -> np.ndarray:
    """Painted rows (0 .. ``inner``) of each block's fill: any token paints at least one row and
    only a full block paints all of them (a one-row cell: any token paints it). ``fill`` int [n]
    tokens -> int64 [n]."""
    bs = max(block_size, 1)
    fill = np.asarray(fill)
    out = np.zeros(len(fill), np.int64)
    some = np.flatnonzero(fill)              # only blocks with tokens: a big cache is mostly empty
    f = fill[some]
    rows = np.maximum(np.rint(f * inner / bs).astype(np.int64), 1)
    out[some] = np.where(f < bs, np.minimum(rows, max(inner - 1, 1)), inner)
    return out


def _edge(px: int) -> np.ndarray:
    """bool (px, px): the white frame of a selected cell (the edge of its painted square)."""
    inner = painted_px(px)
    edge = np.zeros((px, px), bool)
    edge[:inner, :inner] = True
    edge[1:inner - 1, 1:inner - 1] = False
    return edge


def _hatch(px: int) -> np.ndarray:
    """bool (px, px): the hatching of a block out of use (diagonal stripes two pixels wide,
    four apart, over its painted square)."""
    inner = painted_px(px)
    y, x = np.indices((px, px))
    return (y < inner) & (x < inner) & ((x + y) % 4 < 2)


def _strips(palette_index: np.ndarray, level: np.ndarray, inner: int,
            marks: np.ndarray | None = None) -> np.ndarray:
    """uint32 (n, inner): the painted column of each cell, top to bottom."""
    y = np.arange(inner)[None, :]                                   # painted row, 0 = top
    out = np.where(y >= inner - level[:, None], _FULL[palette_index][:, None],
                   _TINT[palette_index][:, None])
    if marks is not None and marks.any():
        out[marks == MARK_CACHED_FREE] = packed(CACHED_FREE)
        out[marks == MARK_SHARED, 0] = packed(SHARED)
        out[marks == MARK_RESERVED] = packed(RESERVED_BG)
    return out


def render(palette_index: np.ndarray, fill: np.ndarray, block_size: int, columns: int, px: int,
           framed: np.ndarray | None = None, marks: np.ndarray | None = None) -> np.ndarray:
    """The block map as a packed-colour image (uint32 ``(rows * px, columns * px)``, see
    ``ui.style.colors.packed``), block ``b`` at cell (``b // columns``, ``b % columns``).

    ``palette_index``: int [n] palette entry of each block's owner, -1 = free; ``fill``: int [n]
    tokens written; ``framed``: bool [n] blocks to frame in white (the selection), or None;
    ``marks``: int [n] block marks (``MARK_SHARED``, ``MARK_CACHED_FREE``, ``MARK_RESERVED``,
    0 none) or None."""
    return _render(palette_index, fill_rows(np.asarray(fill), block_size, painted_px(px)), columns, px,
                   framed, marks)


def render_cells(palette_index: np.ndarray, level: np.ndarray, px: int,
                 framed: np.ndarray | None = None, marks: np.ndarray | None = None) -> np.ndarray:
    """Each cell's ``px`` x ``px`` tile as :func:`render` draws it (painted square, gap, white
    frame, hatching), uint32 ``(n, px, px)``; ``level``: int [n] painted rows of fill
    (:func:`fill_rows`), the other arguments as :func:`render`'s."""
    return _render(palette_index, level, 1, px, framed, marks).reshape(len(palette_index), px, px)


def _render(palette_index: np.ndarray, level: np.ndarray, columns: int, px: int,
            framed: np.ndarray | None, marks: np.ndarray | None = None) -> np.ndarray:
    n, inner = len(palette_index), painted_px(px)
    rows = max(1, math.ceil(n / columns))
    bg = packed(BACKGROUND)
    cells = np.full((rows * columns, inner), bg, np.uint32)
    cells[:n] = _strips(palette_index, level, inner, marks)
    out = np.empty((rows, px, columns, px), np.uint32)                 # [row, y, col, x]
    out[:, inner:] = bg                                                # the gaps (if any)
    out[:, :, :, inner:] = bg
    out[:, :inner, :, :inner] = cells.reshape(rows, columns, inner).transpose(0, 2, 1)[..., None]
    if framed is not None and framed.any():
        sel = np.zeros(rows * columns, bool)
        sel[:n] = framed
        out[sel.reshape(rows, 1, columns, 1) & _edge(px)[None, :, None, :]] = packed(SELECTED)
    if marks is not None and (reserved := marks == MARK_RESERVED).any():
        hatched = np.zeros(rows * columns, bool)
        hatched[:n] = reserved
        out[hatched.reshape(rows, 1, columns, 1) & _hatch(px)[None, :, None, :]] = packed(RESERVED_HATCH)
    return out.reshape(rows * px, columns * px)


class BlockImage:
    """The block map image of successive states, repainted where it changed.

    ``update`` returns the image (uint32, as :func:`render`): a full render when the layout
    changed or more than an eighth of the blocks look different, else the changed cells
    repainted in place (the array is reused: keep no copy of an older frame in it)."""

    def __init__(self) -> None:
        self.image: np.ndarray | None = None
        self._codes: np.ndarray | None = None
        self._layout: tuple | None = None

    def update(self, palette_index: np.ndarray, fill: np.ndarray, block_size: int, columns: int,
               px: int, framed: np.ndarray | None = None, marks: np.ndarray | None = None) -> np.ndarray:
        n = len(palette_index)
        level = fill_rows(np.asarray(fill), block_size, painted_px(px))
        sel = np.zeros(n, bool) if framed is None else framed
        codes = ((palette_index.astype(np.int32) + 1) * px + level) * 2 + sel  # a cell's look
        if marks is not None:
            codes = codes * 4 + marks
        layout = (n, columns, px)
        changed = (np.flatnonzero(codes != self._codes)
                   if layout == self._layout and self.image is not None else None)
        if changed is None or len(changed) > n // 8:
            self.image = _render(palette_index, level, columns, px, framed, marks)
        elif len(changed):
            self._repaint(changed, palette_index, level, sel, columns, px, marks)
        self._codes, self._layout = codes, layout
        return self.image

    def _repaint(self, blocks: np.ndarray, palette_index: np.ndarray, level: np.ndarray,
                 sel: np.ndarray, columns: int, px: int, marks: np.ndarray | None = None) -> None:
        inner = painted_px(px)
        tiles = np.full((len(blocks), px, px), packed(BACKGROUND), np.uint32)
        tiles[:, :inner, :inner] = _strips(palette_index[blocks], level[blocks], inner,
                                           None if marks is None else marks[blocks])[:, :, None]
        framed = sel[blocks]
        if framed.any():
            tiles[framed] = np.where(_edge(px), packed(SELECTED), tiles[framed])
        if marks is not None and (hatched := marks[blocks] == MARK_RESERVED).any():
            tiles[hatched] = np.where(_hatch(px), packed(RESERVED_HATCH), tiles[hatched])
        rows, cols = np.divmod(blocks, columns)
        grid = self.image.reshape(-1, px, columns, px)                  # [row, y, col, x]
        grid[rows, :, cols, :] = tiles




def block_rgb(palette_index: np.ndarray, fill: np.ndarray, block_size: int,
              marks: np.ndarray | None = None) -> np.ndarray:
    """The mean colour of each block's cell, float32 [n, 3] (0..255): the owner's colour over
    ``fill / block_size`` of it and the faint tint over the rest (free: the free colour); a
    shared block :data:`SHARED_SHARE` of the way to the shared gold, a cached-free one the
    cached colour, one out of use the dark out-of-use colour. Arguments as :func:`render`."""
    pi = np.asarray(palette_index, np.int64)
    f = (np.clip(np.asarray(fill, np.float32), 0, block_size) / max(block_size, 1))[:, None]
    tint = _TINT_RGB[pi]
    rgb = tint + (_FULL_RGB[pi] - tint) * f
    if marks is not None and marks.any():
        shared = marks == MARK_SHARED
        rgb[shared] = rgb[shared] * (1 - SHARED_SHARE) + np.float32(SHARED_SHARE) * np.array(SHARED, np.float32)
        rgb[marks == MARK_CACHED_FREE] = CACHED_FREE
        rgb[marks == MARK_RESERVED] = RESERVED_BG
    return rgb


def dense_image(rgb: np.ndarray, columns: int, per_pixel: int,
                framed: np.ndarray | None = None) -> np.ndarray:
    """The area-averaged map of more blocks than pixels: uint32 ``(rows, columns)`` packed
    colours, pixel ``p`` (row-major) the mean of ``rgb`` (float [n, 3], :func:`block_rgb`) over
    blocks ``p * per_pixel`` .. ``(p + 1) * per_pixel - 1`` (the last pixel over the blocks that
    are left), the pixels past the last block the background. ``framed`` (bool [n], the
    selection): a pixel holding any of them goes :data:`SELECTED_SHARE` of the way to white.
    Raises ValueError for ``columns`` or ``per_pixel`` < 1."""
    if columns < 1 or per_pixel < 1:
        raise ValueError(f"dense_image needs columns >= 1 and per_pixel >= 1, got {columns}, {per_pixel}")
    n, k = len(rgb), per_pixel
    num_px = -(-n // k)
    rows = max(1, -(-num_px // columns))
    buf = np.zeros((num_px * k, 3), np.float32)
    buf[:n] = rgb
    counts = np.full(num_px, k, np.float32)
    if num_px:
        counts[-1] = n - (num_px - 1) * k
    mean = buf.reshape(num_px, k, 3).sum(axis=1) / counts[:, None]
    if framed is not None and framed.any():
        sel = np.zeros(num_px * k, bool)
        sel[:n] = framed
        hit = sel.reshape(num_px, k).any(axis=1)
        mean[hit] = mean[hit] * (1 - SELECTED_SHARE) + np.float32(255 * SELECTED_SHARE)
    out = np.full(rows * columns, packed(BACKGROUND), np.uint32)
    out[:num_px] = packed(np.rint(mean))
    return out.reshape(rows, columns)


def blank_cells(image: np.ndarray, blank: np.ndarray, columns: int, px: int) -> None:
    """Paint the cells where ``blank`` (bool [rows * columns], row-major) is True in the
    background colour, in place (``image``: uint32 ``(rows * px, columns * px)``): grid places
    that show no block."""
    rows = image.shape[0] // px
    r, c = np.divmod(np.flatnonzero(blank[:rows * columns]), columns)
    if len(r):
        grid = image.reshape(rows, px, columns, px)
        grid[r, :, c, :] = packed(BACKGROUND)
