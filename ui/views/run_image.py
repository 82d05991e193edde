"""Pixels of the by-request block map, painted per segment (pure numpy, no Qt).

The by-request layout (``ui.views.request_runs``) is a sequence of a few hundred SEGMENTS of
cells that look alike (each run's shared, full, partly written and empty parts, then the
cached-free, free and out-of-use regions). A request whose block count changes moves every run
after it, so from one frame to the next most cells of this layout change place: repainting the
changed cells is no saving (the physical layout's ``ui.views.block_image.BlockImage`` is). What
is saved is everything per block: the look of each segment is worked out once, as one
``px`` x ``px`` tile (``ui.views.block_image.render`` of one cell), and the image is ONE gather
of those tiles by the segment each grid position shows, put in the grid's order by one
transposing copy (no per-position index array): a pass over the positions and one over the
pixels, instead of a dozen per-block arrays (palette, fill, marks, selection, their codes and
strips) gathered into the grid and rendered.
"""
from __future__ import annotations

import numpy as np

from ui.style.colors import BACKGROUND, packed
from ui.views.block_grid import BlockGrid
from ui.views.block_image import fill_rows, painted_px, render_cells


def segment_image(palette_index: np.ndarray, fill: np.ndarray, marks: np.ndarray,
                  framed: np.ndarray, lengths: np.ndarray, block_size: int, grid: BlockGrid,
                  framed_cells: np.ndarray | None = None) -> np.ndarray:
    """The by-request map as a packed-colour image, uint32 ``grid.shape``, equal to rendering
    every cell on its own (``ui.views.block_image.render`` of the cells laid out in ``grid``).

    ``palette_index`` (int16), ``fill`` (int64 tokens), ``marks`` (int8), ``framed`` (bool):
    the look of each segment, as ``ui.views.request_runs.segments`` returns them with
    ``lengths`` (int64 cells per segment, summing to ``grid.num_cells``); ``framed_cells``:
    int cells framed besides whole framed segments (the selection's shared blocks in other
    runs), or None. Needs ``grid.per_pixel`` 1 (area-averaged maps:
    ``ui.views.block_image.dense_image``); raises ValueError otherwise or when ``lengths``
    does not add up to the grid's cells.

    No per-place index array: the grid's bands are filled column by column, so the sequence of
    positions, cut into ``[bands, columns, band]``, is the image's rows transposed
    (``ui.views.block_grid``): one repeat over the cells and one transposing copy. With
    ``px`` 1 the repeat is of the segments' colours themselves (no tile index)."""
    if grid.per_pixel != 1:
        raise ValueError(f"segment_image paints one cell per position, got per_pixel {grid.per_pixel}")
    lengths = np.asarray(lengths, np.int64)
    if int(lengths.sum()) != grid.num_cells:
        raise ValueError(f"segments of {int(lengths.sum())} cells for a grid of {grid.num_cells}")
    n, px, band, cols = len(lengths), grid.px, grid.band, grid.columns
    level = fill_rows(np.asarray(fill), block_size, painted_px(px))
    # tiles: each segment as drawn, then framed, then a blank place (no cell)
    tiles = np.empty((2 * n + 1, px, px), np.uint32)
    tiles[:2 * n] = render_cells(np.concatenate([palette_index, palette_index]),
                                 np.concatenate([level, level]), px,
                                 np.concatenate([framed, np.ones(n, bool)]),
                                 np.concatenate([marks, marks]))
    tiles[2 * n] = packed(BACKGROUND)
    bands = grid.rows // band
    if px == 1:
        seq = np.full(bands * cols * band, tiles[2 * n, 0, 0], np.uint32)   # past the cells: blank
        seq[:grid.num_cells] = np.repeat(tiles[:n, 0, 0], lengths)
        if framed_cells is not None and len(framed_cells):
            cells = np.asarray(framed_cells, np.int64)
            seg = np.searchsorted(np.cumsum(lengths), cells, side="right")
            seq[cells] = tiles[seg + n, 0, 0]
        return seq.reshape(bands, cols, band).transpose(0, 2, 1).reshape(grid.rows, cols)
    tile_of_cell = np.full(bands * cols * band, 2 * n, np.int32)     # past the cells: blank
    tile_of_cell[:grid.num_cells] = np.repeat(np.arange(n, dtype=np.int32), lengths)
    if framed_cells is not None and len(framed_cells):
        cells = np.asarray(framed_cells, np.int64)
        tile_of_cell[cells] = tile_of_cell[cells] % n + n
    at = tile_of_cell.reshape(bands, cols, band).transpose(0, 2, 1)
    return tiles[at].transpose(0, 1, 3, 2, 4).reshape(grid.rows * px, cols * px)
