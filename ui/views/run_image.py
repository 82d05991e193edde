"""Pixels of the by-request block map, painted per segment (pure numpy, no Qt).

The by-request layout (``ui.views.request_runs``) is a sequence of a few hundred SEGMENTS of
cells that look alike (each run's shared, full, partly written and empty parts, then the
cached-free, free and out-of-use regions). A request whose block count changes moves every run
after it, so from one frame to the next most cells of this layout change place: repainting the
changed cells is no saving (the physical layout's ``ui.views.block_image.BlockImage`` is). What
is saved is everything per block: the look of each segment is worked out once, as one
``px`` x ``px`` tile (``ui.views.block_image.render`` of one cell), and the image is ONE gather
of those tiles by the segment each grid position shows: two passes over the positions and one
over the pixels, instead of a dozen per-block arrays (palette, fill, marks, selection, their
codes and strips) gathered into the grid and rendered.
"""
from __future__ import annotations

import numpy as np

from ui.style.colors import BACKGROUND, packed
from ui.views.block_grid import BlockGrid
from ui.views.block_image import fill_rows, painted_px, render_cells


def segment_image(palette_index: np.ndarray, fill: np.ndarray, marks: np.ndarray,
                  framed: np.ndarray, lengths: np.ndarray, block_size: int, grid: BlockGrid,
                  places: np.ndarray, framed_cells: np.ndarray | None = None) -> np.ndarray:
    """The by-request map as a packed-colour image, uint32 ``grid.shape``, equal to rendering
    every cell on its own (``ui.views.block_image.render`` of the cells laid out in ``grid``).

    ``palette_index`` (int16), ``fill`` (int64 tokens), ``marks`` (int8), ``framed`` (bool):
    the look of each segment, as ``ui.views.request_runs.segments`` returns them with
    ``lengths`` (int64 cells per segment, summing to ``grid.num_cells``); ``places``:
    ``grid.places()`` (int64, the position at each row-major place); ``framed_cells``:
    int cells framed besides whole framed segments (the selection's shared blocks in other
    runs), or None. Needs ``grid.per_pixel`` 1 (area-averaged maps:
    ``ui.views.block_image.dense_image``); raises ValueError otherwise or when ``lengths``
    does not add up to the grid's cells."""
    if grid.per_pixel != 1:
        raise ValueError(f"segment_image paints one cell per position, got per_pixel {grid.per_pixel}")
    lengths = np.asarray(lengths, np.int64)
    if int(lengths.sum()) != grid.num_cells:
        raise ValueError(f"segments of {int(lengths.sum())} cells for a grid of {grid.num_cells}")
    n, px = len(lengths), grid.px
    level = fill_rows(np.asarray(fill), block_size, painted_px(px))
    # tiles: each segment as drawn, then framed, then a blank place (no cell)
    tiles = np.empty((2 * n + 1, px, px), np.uint32)
    tiles[:2 * n] = render_cells(np.concatenate([palette_index, palette_index]),
                                 np.concatenate([level, level]), px,
                                 np.concatenate([framed, np.ones(n, bool)]),
                                 np.concatenate([marks, marks]))
    tiles[2 * n] = packed(BACKGROUND)
    tile_of_cell = np.full(len(places), 2 * n, np.int32)           # past the cells: blank
    tile_of_cell[:grid.num_cells] = np.repeat(np.arange(n, dtype=np.int32), lengths)
    if framed_cells is not None and len(framed_cells):
        cells = np.asarray(framed_cells, np.int64)
        tile_of_cell[cells] = tile_of_cell[cells] % n + n
    at = tile_of_cell[places].reshape(grid.rows, grid.columns)
    if px == 1:
        return tiles[:, 0, 0][at]
    return tiles[at].transpose(0, 2, 1, 3).reshape(grid.rows * px, grid.columns * px)
