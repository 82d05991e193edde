"""KV-cache block map: one cell per physical block of the paged cache.

Each cell is ``CELL`` x ``CELL`` pixels of one RGB numpy image shown by a single long-lived
``pg.ImageItem`` (thousands of blocks redraw in a few milliseconds). A cell is filled from the
bottom like a glass: the owner's colour up to ``num_tokens / block_size`` of its height, a faint
tint of that colour above, dark grey when the block is free. The selected request's blocks get a
white frame. Hover shows block id, owner and fill; clicking selects the owning request.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine.state import BlockCell, EngineState
from ui.colors import BACKGROUND, FREE, MUTED, as_rgba, css, lut, mix, packed
from ui.pointer import track_pointer

CELL = 10           # pixels per block side, including a 1-pixel gap on the right and bottom
INNER = CELL - 1    # painted pixels per side
TINT = 0.70         # how far the empty part of an owned block fades towards the free colour
SELECTED = (255, 255, 255)


def grid_columns(num_blocks: int, aspect: float = 2.0) -> int:
    """Columns that make ``num_blocks`` square cells fill an area ``aspect`` times wider than
    tall; multiples of 8 above 16 so block ids are easy to count along a row."""
    if num_blocks <= 0:
        return 8
    c = math.ceil(math.sqrt(num_blocks * max(0.2, min(aspect, 8.0))))
    if c > 16:
        c = 8 * math.ceil(c / 8)
    return max(4, min(c, 256, num_blocks))


def fill_rows(num_tokens: np.ndarray, block_size: int) -> np.ndarray:
    """Painted rows (0 .. INNER) of each block's fill: any token paints at least one row and
    only a full block paints all of them."""
    bs = max(block_size, 1)
    rows = np.rint(num_tokens * INNER / bs).astype(np.int64)
    rows = np.where(num_tokens > 0, np.maximum(rows, 1), 0)
    return np.where(num_tokens < bs, np.minimum(rows, INNER - 1), INNER)


def render(cells: list[BlockCell], block_size: int, columns: int,
           selected: str | None = None) -> np.ndarray:
    """The block map as a ``(rows*CELL, columns*CELL, 4)`` RGBA uint8 image (row-major)."""
    n = len(cells)
    rows = max(1, math.ceil(n / columns))
    owners = [c.request_id for c in cells]
    ids = sorted({o for o in owners if o is not None})
    index = {r: i for i, r in enumerate(ids)}
    which = np.array([index[o] if o is not None else len(ids) for o in owners], np.int64)
    full = packed(np.vstack([lut(ids), [FREE]]))[which]                               # (n,)
    tint = packed(np.vstack([lut(ids, lambda c: mix(c, FREE, TINT)), [FREE]]))[which]
    level = fill_rows(np.array([c.num_tokens for c in cells], np.int64), block_size)
    y = np.arange(INNER)[None, :]                                # painted row, 0 = top
    rows_px = np.full((rows * columns, INNER), packed(BACKGROUND), "<u4")
    rows_px[:n] = np.where(y >= INNER - level[:, None], full[:, None], tint[:, None])
    out = np.empty((rows, CELL, columns, CELL), "<u4")          # [row, y, col, x]
    out[:, INNER:] = packed(BACKGROUND)
    out[:, :, :, INNER:] = packed(BACKGROUND)
    out[:, :INNER, :, :INNER] = rows_px.reshape(rows, columns, INNER).transpose(0, 2, 1)[..., None]
    if selected is not None and selected in index:
        frame = np.zeros((CELL, CELL), bool)
        frame[:INNER, :INNER] = True
        frame[1:INNER - 1, 1:INNER - 1] = False
        sel = np.zeros(rows * columns, bool)
        sel[:n] = which == index[selected]
        out[sel.reshape(rows, 1, columns, 1) & frame[None, :, None, :]] = packed(SELECTED)
    return as_rgba(out.reshape(rows * CELL, columns * CELL))


class KVBlockMap(QWidget):
    """The paged KV cache at one step. ``set_state(state)`` redraws; ``set_selected(id)``
    frames that request's blocks. Emits ``requestSelected(request_id)`` on click."""

    requestSelected = Signal(str)

    def __init__(self, state: EngineState | None = None, columns: int | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self._fixed_columns = columns
        self.columns = columns or 8
        self.cells: list[BlockCell] = []
        self.block_size = 1
        self.selected: str | None = None
        self.image = np.zeros((CELL, CELL, 4), np.uint8)
        self.title = QLabel("KV cache blocks")
        self.title.setStyleSheet("font-weight: bold;")
        self.legend = QLabel(self._legend_html())
        self.legend.setStyleSheet(f"color: {css(MUTED)};")
        self.plot = pg.GraphicsLayoutWidget(border=False)
        self.plot.setBackground(css(BACKGROUND))
        self.plot.ci.setContentsMargins(2, 2, 2, 2)
        self.view = self.plot.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.view.setMouseEnabled(False, False)
        self.item = pg.ImageItem(axisOrder="row-major")
        self.view.addItem(self.item)
        track_pointer(self.plot, self._block_at_scene, self.describe, self._clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.legend)
        if state is not None:
            self.set_state(state)

    @staticmethod
    def _legend_html() -> str:
        sw = "<span style='color:{}'>&#9632;</span>"
        return (f"{sw.format(css(FREE))} free &nbsp; {sw.format('#4e79a7')} tokens written "
                f"(request colour, fills upward) &nbsp; "
                f"{sw.format(css(mix((78, 121, 167), FREE, TINT)))} reserved &nbsp; "
                "<span style='color:white'>&#9633;</span> selected")

    # --- data in -------------------------------------------------------------------------
    def set_state(self, state: EngineState) -> None:
        self.cells = state.block_map()
        self.block_size = state.block_size
        used = sum(1 for c in self.cells if c.request_id is not None)
        self.title.setText(f"KV cache blocks  ·  {used} / {len(self.cells)} used "
                           f"({100.0 * state.kv_cache_usage:.0f}%)  ·  block size "
                           f"{state.block_size} tokens")
        self._redraw()

    def set_selected(self, request_id: str | None) -> None:
        if request_id != self.selected:
            self.selected = request_id
            self._redraw()

    def _aspect(self) -> float:
        w, h = self.plot.width(), self.plot.height()
        return w / h if h > 20 and w > 20 else 2.0

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if self.cells and not self._fixed_columns:
            if grid_columns(len(self.cells), self._aspect()) != self.columns:
                self._redraw()
            else:
                self.view.autoRange(padding=0.01)

    def _redraw(self) -> None:
        cols = self._fixed_columns or grid_columns(len(self.cells), self._aspect())
        resized = cols != self.columns or self.image.shape[:2] != (
            max(1, math.ceil(len(self.cells) / cols)) * CELL, cols * CELL)
        self.columns = cols
        self.image = render(self.cells, self.block_size, cols, self.selected)
        self.item.setImage(self.image, autoLevels=False)
        if resized:
            self.view.autoRange(padding=0.01)

    # --- lookups (used by hover, click and tests) -----------------------------------------
    def cell_origin(self, block_id: int) -> tuple[int, int]:
        """Pixel (x, y) of the top-left painted pixel of ``block_id`` in ``image``."""
        return (block_id % self.columns) * CELL, (block_id // self.columns) * CELL

    def block_at(self, x: float, y: float) -> int | None:
        """Block under image coordinates ``(x, y)``, None outside the grid or on a gap."""
        if x < 0 or y < 0:
            return None
        col, row = int(x // CELL), int(y // CELL)
        b = row * self.columns + col
        return b if col < self.columns and 0 <= b < len(self.cells) else None

    def describe(self, block_id: int) -> str:
        c = self.cells[block_id]
        if c.request_id is None:
            return f"block {block_id}\nfree"
        return (f"block {block_id}\nowner {c.request_id}\n"
                f"{c.num_tokens} / {self.block_size} tokens written")

    def _block_at_scene(self, pos: QPointF) -> int | None:
        p = self.view.mapSceneToView(pos)
        return self.block_at(p.x(), p.y())

    def _clicked(self, block_id: int) -> None:
        if self.cells[block_id].request_id is not None:
            self.requestSelected.emit(self.cells[block_id].request_id)
