"""The CPU swap pool of swap preemption, drawn under the GPU blocks of the KV block map.

``EngineState.cpu_owner[c]`` is the ``seq`` of the swapped-out request whose KV CPU block ``c``
holds (-1 free; empty without a swap pool). :class:`CpuPoolLayer` paints it as a second
packed-colour image in the block map's view, with the GPU grid's columns and cell size, so a
CPU block looks as large as a GPU block: an owned block in its owner's colour (the same colour
as on the GPU and in every other view), a free one dark grey, the selected request's blocks
framed in white (``ui.views.block_image``, repainted only where it changed). A state does not keep
where in its table each CPU block sits, so every owned CPU block is drawn full: together a
request's CPU blocks hold its ``num_computed_tokens`` tokens of KV.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg

from engine.state.state import EngineState
from ui.views.block_image import BlockImage
from ui.style.colors import MUTED, color_indices
from ui.views.packed_image import PackedImageItem
from ui.state_lookup import find_row
from engine.plural import plural


class CpuPoolLayer:
    """The CPU pool's image item and label in ``view`` (a ``pg.ViewBox``).

    ``update(state, columns, px, top, selected)`` paints ``state.cpu_owner`` in a grid of
    ``columns`` cells of ``px`` image pixels whose top edge is ``top`` (view y), hidden when
    the run has no swap pool. After it: ``owners`` (the owning request's id of each CPU block,
    None free), ``image`` (uint32, as ``ui.views.block_image.render``), ``shape`` (rows, columns)."""

    def __init__(self, view: pg.ViewBox) -> None:
        self.item = PackedImageItem()
        self.label = pg.TextItem(anchor=(0, 1), color=MUTED)
        for it in (self.item, self.label):
            it.setVisible(False)
            view.addItem(it)
        self._painter = BlockImage()
        self.state: EngineState | None = None
        self.columns, self.px, self.top = 1, 4, 0.0
        self.image = np.zeros((0, 0), np.uint32)
        self._rows = np.zeros(0, np.int64)          # row of each block's owner, -1 free
        self._label = ""

    @property
    def num_blocks(self) -> int:
        return 0 if self.state is None else len(self.state.cpu_owner)

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns) of the CPU grid (0 rows without a pool)."""
        return math.ceil(self.num_blocks / self.columns), self.columns

    def update(self, state: EngineState, columns: int, px: int, top: float,
               selected: str | None = None) -> None:
        self.state = state
        n = len(state.cpu_owner)
        visible = n > 0
        if self.item.isVisible() != visible:
            self.item.setVisible(visible)
            self.label.setVisible(visible)
        if not visible:
            return
        self.columns, self.px = columns, px
        owner = state.cpu_owner
        held = owner >= 0
        rows = np.full(n, -1, np.int64)
        seq = state.columns["seq"]
        if held.any() and len(seq):
            rows[held] = np.minimum(np.searchsorted(seq, owner[held]), len(seq) - 1)
        self._rows = rows
        holders = np.unique(rows[held])
        colours = color_indices([state.request_ids[r] for r in holders.tolist()])
        palette = np.full(n, -1, np.int16)
        palette[held] = colours[np.searchsorted(holders, rows[held])]
        fill = np.where(held, state.block_size, 0)
        sel = find_row(state, selected)
        framed = None if sel is None else rows == sel
        self.image = self._painter.update(palette, fill, state.block_size, columns, px, framed)
        self.item.set_packed(self.image)
        if self.top != top or self.item.pos().y() != top:
            self.top = top
            self.item.setPos(0, top)
            self.label.setPos(0, top)
        text = f"CPU swap pool: {int(held.sum()):,} / {plural(n, 'block')} hold swapped-out KV"
        if text != self._label:
            self._label = text
            self.label.setText(text)

    # --- lookups (hover, click, tests) ------------------------------------------------------
    def cell_origin(self, block_id: int) -> tuple[int, int]:
        """Pixel (x, y) of the top-left painted pixel of CPU block ``block_id`` in ``image``."""
        return (block_id % self.columns) * self.px, (block_id // self.columns) * self.px

    def block_at(self, x: float, y: float) -> int | None:
        """CPU block under view coordinates ``(x, y)``, None outside the CPU grid."""
        y -= self.top
        if self.num_blocks == 0 or x < 0 or y < 0:
            return None
        col, row = int(x // self.px), int(y // self.px)
        b = row * self.columns + col
        return b if col < self.columns and 0 <= b < self.num_blocks else None

    def owner_of(self, block_id: int) -> str | None:
        r = int(self._rows[block_id])
        return None if r < 0 else self.state.request_ids[r]

    def describe(self, block_id: int) -> str:
        """Tooltip of one CPU block: its id, and for a held one the swapped-out owner, how many
        CPU blocks it holds and the tokens of KV they keep."""
        rid = self.owner_of(block_id)
        head = f"CPU block {block_id} (swap pool)"
        if rid is None:
            return f"{head}\nfree"
        st, r = self.state, int(self._rows[block_id])
        count = int(np.count_nonzero(self._rows == r))
        tokens = int(st.columns["num_computed_tokens"][r])
        return "\n".join([head, f"owner {rid} (swapped out)",
                          f"{count} CPU blocks hold its {tokens} swapped tokens of KV",
                          "copied back to the GPU when it resumes (nothing recomputed)"])
