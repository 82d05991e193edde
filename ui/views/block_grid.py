"""Where the KV block map puts each cell: the grid's geometry, pure arithmetic (no Qt).

The map draws a SEQUENCE of cells (the blocks in id order for the physical layout, in runs of
their owners for the by-request one, ``ui.views.request_runs``) into a grid of ``columns``
positions a row. :class:`BlockGrid` says which grid position shows which part of it:

- ``per_pixel``: cells per position. 1 while every block gets a cell of ``px`` x ``px`` image
  pixels; more when the blocks outnumber the view's device pixels: each position is then one
  pixel, the area average of ``per_pixel`` consecutive cells (``ui.views.block_image.dense_image``).
- ``band``: the grid is cut into horizontal bands of ``band`` rows, filled column by column
  (top to bottom, then the next column), band after band. ``band`` 1 is plain reading order
  (the physical layout); the by-request layout picks ``band`` about the square root of a run's
  length, so that a run of consecutive cells is a block of whole columns, roughly square, instead
  of a one-row stripe that wraps (the order-preserving "strip" treemap of Bederson, Shneiderman
  and Wattenberg, "Ordered and quantum treemaps", ACM ToG 2002, with strips of equal height):
  big enough to hold a label, and easy to point at.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_BAND = 64          # rows per band at most


@dataclass(frozen=True)
class BlockGrid:
    """A grid of ``columns`` positions a row showing ``num_cells`` cells (see the module).
    ``px``: image pixels per position side (1 when ``per_pixel`` > 1)."""

    num_cells: int
    columns: int
    px: int = 1
    per_pixel: int = 1
    band: int = 1

    def __post_init__(self) -> None:
        if min(self.columns, self.px, self.per_pixel, self.band) < 1 or self.num_cells < 0:
            raise ValueError(f"a block grid needs columns, px, per_pixel, band >= 1 and "
                             f"num_cells >= 0, got {self}")

    @property
    def num_positions(self) -> int:
        """Grid positions that show cells: ``ceil(num_cells / per_pixel)``."""
        return -(-self.num_cells // self.per_pixel)

    @property
    def rows(self) -> int:
        """Rows of the grid: whole bands, at least one row."""
        per_band = self.band * self.columns
        return max(1, -(-self.num_positions // per_band)) * self.band if self.band > 1 else \
            max(1, -(-self.num_positions // self.columns))

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) of the grid's image in image pixels."""
        return self.rows * self.px, self.columns * self.px

    def position(self, p):
        """(row, column) of grid position ``p`` (int or int array)."""
        per_band = self.band * self.columns
        band, within = np.divmod(p, per_band)
        col, r = np.divmod(within, self.band)
        return band * self.band + r, col

    def index(self, row, col):
        """Grid position at (``row``, ``col``) (ints or int arrays; no bounds check)."""
        band, r = np.divmod(row, self.band)
        return band * self.band * self.columns + col * self.band + r

    def places(self) -> np.ndarray:
        """int64 [rows * columns]: the grid position at each row-major place, shown or not (a
        permutation of ``0 .. rows * columns - 1``; positions from ``num_positions`` on show
        nothing). It depends on ``rows``, ``columns`` and ``band`` only: a view keeps it while
        the number of cells changes within the same rows."""
        rows, cols = np.divmod(np.arange(self.rows * self.columns, dtype=np.int64), self.columns)
        return self.index(rows, cols)

    def order(self) -> np.ndarray:
        """int64 [rows * columns]: the grid position shown at each row-major place (-1 where
        none: past the last cell). The identity (then -1s) when ``band`` is 1."""
        p = self.places()
        return np.where(p < self.num_positions, p, -1)

    def cell_at(self, x: float, y: float) -> int | None:
        """The cell (index in the sequence) under image coordinates ``(x, y)``: the position's
        cell, or with ``per_pixel`` > 1 the one of its cells that the fraction of ``x`` across
        the pixel points at (zoomed in, every block of a pixel can be pointed at). None outside."""
        if x < 0 or y < 0:
            return None
        col, row = int(x // self.px), int(y // self.px)
        if col >= self.columns or row >= self.rows:
            return None
        p = int(self.index(row, col))
        k = self.per_pixel
        i = p * k + min(int((x / self.px - col) * k), k - 1) if k > 1 else p
        return i if 0 <= i < self.num_cells else None

    def cell_origin(self, i: int) -> tuple[int, int]:
        """Image (x, y) of the top-left pixel of the position that shows cell ``i``."""
        row, col = self.position(i // self.per_pixel)
        return int(col) * self.px, int(row) * self.px

    def cell_point(self, i: int) -> tuple[float, float]:
        """Image (x, y) inside the position of cell ``i`` that :meth:`cell_at` maps back to it:
        the middle of the cell, or of its slice of an area-averaged pixel."""
        x, y = self.cell_origin(i)
        k = self.per_pixel
        frac = ((i % k) + 0.5) / k if k > 1 else (self.px - 1) / (2 * self.px) if self.px > 2 else 0.5
        return x + frac * self.px, y + (self.px - 1) / 2 if self.px > 2 else y + self.px / 2

    def span(self, i: int) -> tuple[int, int]:
        """The cells ``(first, last)`` that the position of cell ``i`` shows (area averaged)."""
        first = (i // self.per_pixel) * self.per_pixel
        return first, min(first + self.per_pixel, self.num_cells) - 1


def band_rows(num_cells: int, num_runs: int) -> int:
    """Rows per band for ``num_cells`` cells in ``num_runs`` runs: about the square root of the
    mean run (a square run), 1 .. :data:`MAX_BAND`."""
    if num_runs <= 0 or num_cells <= 0:
        return 1
    return int(max(1, min(MAX_BAND, round(math.sqrt(num_cells / num_runs)))))
