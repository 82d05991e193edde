"""KV-cache block map: one cell per physical block of the paged cache, zoomable.

The whole map is ONE packed-colour image on a long-lived ``PackedImageItem`` in a
``pg.ViewBox``, painted from the state's arrays with numpy (``ui.views.block_image``): no Python per
block per frame. A block is ``px`` x ``px`` image pixels, ``px`` the most whole device pixels
a block can have and the whole cache fit the view (up to 12; a 1-pixel gap between cells from 3
pixels on), and the fitted view shows one image pixel per device pixel (or a whole number of
them when the image is scaled up): a map scaled by a fraction aliases its gaps into moiré
(``ui.views.block_image.fitted_cell_px``); its cell fills from the bottom like a glass with the owner's colour, a faint tint
above, dark grey when free; the selected request's blocks get a white frame.

Mouse wheel zooms (pan by dragging, double-click fits the whole cache again); hover names the
exact block under the pointer at any zoom (block id, owners, reference count, prefix hash, fill,
token range and position in the block table), a click selects the (oldest) owner. With prefix
caching, shared blocks (reference count > 1) and cached-free blocks are marked; blocks the user
took out of use (live knob ``num_usable_blocks``) are hatched (``ui.views.block_image``). With swap
preemption the CPU swap pool is drawn under the GPU blocks, in the same cells and colours
(``ui.views.cpu_pool``).
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine.state.state import RESERVED, EngineState
from ui.views.block_image import (CACHED_FREE, MARK_CACHED_FREE, MARK_RESERVED, MARK_SHARED,
                            RESERVED_BG, RESERVED_HATCH, SHARED, TINT, BlockImage, cell_px,
                            device_scale, fitted_cell_px, grid_columns)
from ui.style.colors import BACKGROUND, FREE, MUTED, color_indices, css, mix
from ui.views.cpu_pool import CpuPoolLayer
from ui.views.packed_image import PackedImageItem
from ui.views.pointer import track_pointer
from ui.style.theme import title_row
from ui.state_lookup import block_fill, block_holders, owned_blocks
from engine.plural import plural


class KVBlockMap(QWidget):
    """The paged KV cache at one step. ``set_state(state)`` redraws; ``set_selected(id)``
    frames that request's blocks. Emits ``requestSelected(request_id)`` on click.

    After a draw: ``owner_rows`` int64 [blocks] (row of each block's owner in the state's
    columns, -1 free; worked out when first asked for: hover, click), ``fill`` int64 [blocks]
    (tokens written), ``columns``, ``px`` (image pixels per block side) and ``image`` (the
    packed uint32 array on screen); ``cpu`` the CPU swap pool under it (:class:`CpuPoolLayer`),
    ``num_reserved`` the blocks out of use."""

    requestSelected = Signal(str)

    def __init__(self, state: EngineState | None = None, columns: int | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self._fixed_columns = columns
        self.columns, self.px = columns or 8, cell_px(0)
        self.state: EngineState | None = None
        self._owner_rows: np.ndarray | None = np.zeros(0, np.int64)
        self._holders, self._at = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.fill = np.zeros(0, np.int64)
        self.selected: str | None = None
        self.zoomed = False                     # the user zoomed or panned: keep their range
        self.image = np.zeros((self.px, self.px), np.uint32)
        self._shape: tuple[int, int] = (0, 0)     # (height, width) of both grids, image pixels
        self._painter = BlockImage()
        head, self.title, self.title_numbers = title_row(
            "KV cache blocks", "  ·  8,888,888 / 8,888,888 used (100%)  ·  block size 8888 tokens")
        head.addStretch(1)
        self.num_reserved = 0
        self._legend_key: tuple | None = None
        self.legend = QLabel(self._legend_html())
        self.legend.setWordWrap(True)
        self.legend.setStyleSheet(f"color: {css(MUTED)};")
        self.plot = pg.GraphicsLayoutWidget(border=False)
        self.plot.setBackground(css(BACKGROUND))
        self.plot.ci.setContentsMargins(2, 2, 2, 2)
        self.view = self.plot.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.view.sigRangeChangedManually.connect(self._user_zoomed)
        self.view.sigResized.connect(self._view_resized)
        self.item = PackedImageItem()
        self.view.addItem(self.item)
        self.cpu = CpuPoolLayer(self.view)
        track_pointer(self.plot, self._key_at_scene, self._describe_key, self._clicked)
        self.plot.scene().sigMouseClicked.connect(self._double_clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.legend)
        if state is not None:
            self.set_state(state)

    @staticmethod
    def _legend_html(num_reserved: int = 0, cpu: bool = False) -> str:
        """The legend; ``num_reserved`` > 0 adds the out-of-use mark with that count, ``cpu``
        the CPU swap pool. Lines break between entries only."""
        square = "<span style='color:{}'>&#9632;</span>"
        entries = [(square.format(css(FREE)), "free"),
                   (square.format("#4e79a7"), "tokens written (request colour, fills upward)"),
                   (square.format(css(mix((78, 121, 167), FREE, TINT))), "allocated, not written"),
                   (square.format(css(SHARED)), "top: shared prefix"),
                   (square.format(css(CACHED_FREE)), "cached-free")]
        if num_reserved:
            entries.append((f"<span style='background:{css(RESERVED_BG)}; "
                            f"color:{css(RESERVED_HATCH)}'>&#9641;</span>",
                            f"out of use ({plural(num_reserved, 'block')}: pool shrunk)"))
        if cpu:
            entries.append(("", "lower grid: CPU swap pool (swapped-out KV)"))
        entries += [("<span style='color:white'>&#9633;</span>", "selected"), ("", "wheel: zoom"),
                    ("", "double-click: fit")]
        return " &nbsp; ".join(f"{mark}&nbsp;{text.replace(' ', '&nbsp;')}" if mark else
                               text.replace(" ", "&nbsp;") for mark, text in entries)

    # --- data in -------------------------------------------------------------------------
    def set_state(self, state: EngineState) -> None:
        self.state = state
        self._owner_rows = None
        self._holders, self._at = block_holders(state)
        self.fill = block_fill(state, self._holders, self._at)
        used = state.num_used_blocks
        self.title_numbers.setText(f"  ·  {used:,} / {state.num_total_blocks:,} used "
                           f"({100.0 * state.kv_cache_usage:.0f}%)  ·  block size "
                           f"{state.block_size} tokens")
        self.num_reserved = int(np.count_nonzero(state.block_owner == RESERVED))
        self._show_pools()
        self._redraw()

    def _show_pools(self) -> None:
        """The legend entries the blocks out of use and the CPU pool need (set only when they
        change: the legend's height may change, a relayout). The CPU pool's numbers are on its
        label in the view (``ui.views.cpu_pool``: no relayout when they change)."""
        key = (self.num_reserved, len(self.state.cpu_owner) > 0)
        if key != self._legend_key:
            self._legend_key = key
            self.legend.setText(self._legend_html(*key))

    def set_selected(self, request_id: str | None) -> None:
        if request_id != self.selected:
            self.selected = request_id
            self._redraw()

    @property
    def owner_rows(self) -> np.ndarray:
        """Row of each block's owner in the state's columns (-1 free), int64 [blocks]."""
        if self._owner_rows is None:
            self._owner_rows = np.append(self._holders, -1)[self._at]
        return self._owner_rows

    def palette_index(self) -> np.ndarray:
        """Palette entry of each block's owner (int16 [blocks], -1 free): one colour lookup per
        request that holds blocks (running and paused ones), then one gather over the blocks
        (:func:`ui.state_lookup.block_holders`: no search for the owners' rows)."""
        ids = self.state.request_ids
        colours = color_indices([ids[r] for r in self._holders.tolist()])
        return np.append(colours, np.int16(-1))[self._at]

    def marks(self) -> np.ndarray | None:
        """Mark of each block (int8 [blocks]: ``MARK_SHARED`` for a reference count > 1,
        ``MARK_CACHED_FREE``, ``MARK_RESERVED`` for a block out of use, 0), or None when no
        block is shared, cached or out of use."""
        st = self.state
        if not len(st.shared_block) and not self.num_reserved and not st.block_hash.any():
            return None
        marks = np.where(st.cached_free_mask(), MARK_CACHED_FREE, 0).astype(np.int8)
        if len(st.shared_block):
            marks[np.unique(st.shared_block)] = MARK_SHARED
        if self.num_reserved:
            marks[st.block_owner == RESERVED] = MARK_RESERVED
        return marks

    def _framed(self) -> np.ndarray | None:
        return owned_blocks(self.state, self.selected) if self.selected else None

    def _aspect(self) -> float:
        w, h = self.plot.width(), self.plot.height()
        return w / h if h > 20 and w > 20 else 2.0

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if self.state is not None and not self._fixed_columns:
            if grid_columns(len(self.fill) + len(self.state.cpu_owner), self._aspect()) != self.columns:
                self._redraw()
            elif not self.zoomed:
                self.fit()

    def _device_size(self) -> tuple[float, float] | None:
        """The view's ``(width, height)`` in device pixels; None before it is laid out."""
        size, ratio = self.view.size(), self.plot.devicePixelRatioF()
        if size.width() <= 20 or size.height() <= 20:
            return None
        return size.width() * ratio, size.height() * ratio

    def _layout(self) -> tuple[int, int]:
        """``(columns, px)`` of the grid for the current state and view size: ``px`` whole
        device pixels per block that fit the view (``ui.views.block_image.fitted_cell_px``), or
        before the view is laid out, ``cell_px``'s guess."""
        n, num_cpu = len(self.fill), len(self.state.cpu_owner)
        cols = self._fixed_columns or grid_columns(n + num_cpu, self._aspect())
        # the CPU pool's rows, and two rows of gap for its label, count in the grid's shape
        rows = max(1, math.ceil(n / cols)) + (2 + math.ceil(num_cpu / cols) if num_cpu else 0)
        size = self._device_size()
        return cols, cell_px(n + num_cpu) if size is None else fitted_cell_px(cols, rows, size[0], size[1])

    def _redraw(self) -> None:
        if self.state is None:
            return
        n, num_cpu = len(self.fill), len(self.state.cpu_owner)
        cols, px = self._layout()
        gpu_h = max(1, math.ceil(n / cols)) * px
        cpu_top = gpu_h + 2 * px if num_cpu else gpu_h
        shape = (cpu_top + math.ceil(num_cpu / cols) * px, cols * px)
        relayout = (cols, px) != (self.columns, self.px) or shape != self._shape
        self.columns, self.px, self._shape = cols, px, shape
        self.image = self._painter.update(self.palette_index(), self.fill, self.state.block_size,
                                          cols, px, self._framed(), self.marks())
        self.item.set_packed(self.image)
        self.cpu.update(self.state, cols, px, cpu_top, self.selected)
        if relayout:
            self.fit()

    def fit(self) -> None:
        """Show the whole cache, CPU pool included (undo the user's zoom), centred, at a whole
        number of device pixels per image pixel (``ui.views.block_image.device_scale``) with the
        grid's corner on a device pixel: every cell covers the same device pixels. Panning
        stops 5% beyond the grids, widened to the view's aspect so that the whole of them fits."""
        self.zoomed = False
        h, w = self._shape
        a = self._aspect()
        span_x, span_y = 1.1 * max(w, a * h), 1.1 * max(h, w / a)
        size = self._device_size()
        if size is not None:
            width, height = size
            scale = device_scale(w, h, width, height)             # device pixels per image pixel
            x0 = -math.floor((width - w * scale) / 2) / scale     # margins of whole device pixels
            y0 = -math.floor((height - h * scale) / 2) / scale
            span_x, span_y = max(span_x, width / scale + 2 / scale), max(span_y, height / scale + 2 / scale)
        self.view.setLimits(xMin=(w - span_x) / 2, xMax=(w + span_x) / 2, yMin=(h - span_y) / 2,
                            yMax=(h + span_y) / 2, minXRange=2 * self.px, minYRange=2 * self.px)
        if size is None:
            self.view.autoRange(padding=0.01)
        else:
            self.view.setRange(xRange=(x0, x0 + width / scale), yRange=(y0, y0 + height / scale),
                               padding=0)

    def _view_resized(self, *_args) -> None:
        """The view box got its new size (after the widget's resize event): lay the grid out
        again for it (another cell size: :meth:`_layout`) and fit, unless the user zoomed."""
        if self.state is not None and not self.zoomed:
            if self._layout() != (self.columns, self.px):
                self._redraw()
            self.fit()

    def _user_zoomed(self, *_args) -> None:
        self.zoomed = True

    def _double_clicked(self, ev) -> None:
        if ev.double():
            self.fit()

    # --- lookups (used by hover, click and tests) -----------------------------------------
    def cell_origin(self, block_id: int) -> tuple[int, int]:
        """Pixel (x, y) of the top-left painted pixel of ``block_id`` in ``image``."""
        return (block_id % self.columns) * self.px, (block_id // self.columns) * self.px

    def block_at(self, x: float, y: float) -> int | None:
        """Block under image coordinates ``(x, y)`` (gaps belong to the block on their left
        and above), None outside the grid."""
        if x < 0 or y < 0:
            return None
        col, row = int(x // self.px), int(y // self.px)
        b = row * self.columns + col
        return b if col < self.columns and 0 <= b < len(self.fill) else None

    def owner_of(self, block_id: int) -> str | None:
        r = int(self.owner_rows[block_id])
        return None if r < 0 else self.state.request_ids[r]

    def describe(self, block_id: int) -> str:
        """Tooltip of one block: id, owner, position in the owner's table, tokens written, then
        the token range it holds, its other holders and reference count when shared, and the
        prefix hash of a cached block (a cached-free block: its hash and token range)."""
        st = self.state
        h = int(st.block_hash[block_id])
        pos, bs = int(st.block_pos[block_id]), st.block_size
        cached = [f"prefix hash {h & (2**64 - 1):016x}"] if h else []
        rid = self.owner_of(block_id)
        if rid is None:
            if st.block_owner[block_id] == RESERVED:
                return (f"block {block_id}\nout of use: the usable KV pool was shrunk to "
                        f"{plural(st.num_total_blocks - self.num_reserved, 'block')} (live knob "
                        "num_usable_blocks)")
            if h:
                return "\n".join([f"block {block_id}", "cached-free (evictable, reusable on a hit)",
                                   f"tokens {pos * bs}-{pos * bs + bs - 1} of its prefix", *cached])
            return f"block {block_id}\nfree"
        r = int(self.owner_rows[block_id])
        size, fill = int(st.columns["num_blocks"][r]), int(self.fill[block_id])
        lines = [f"block {block_id}", f"owner {rid}", f"block {pos + 1} of {size} in its table",
                 f"{fill} / {bs} tokens written"]
        if fill:
            lines.append(f"tokens {pos * bs}-{pos * bs + fill - 1}")
        owners = st.block_holders(block_id) if len(st.shared_block) else [rid]
        if len(owners) > 1:
            more = " ..." if len(owners) > 6 else ""
            lines.append(f"shared: reference count {len(owners)} ({', '.join(owners[:6])}{more})")
        return "\n".join(lines + cached)

    def _key_at_scene(self, pos: QPointF) -> tuple[str, int] | None:
        """``("gpu", block)`` or ``("cpu", block)`` under scene point ``pos``, or None."""
        if not self.view.sceneBoundingRect().contains(pos):
            return None
        p = self.view.mapSceneToView(pos)
        b = self.block_at(p.x(), p.y())
        if b is not None:
            return "gpu", b
        c = self.cpu.block_at(p.x(), p.y())
        return None if c is None else ("cpu", c)

    def _describe_key(self, key: tuple[str, int]) -> str:
        pool, b = key
        return self.describe(b) if pool == "gpu" else self.cpu.describe(b)

    def _clicked(self, key: tuple[str, int]) -> None:
        pool, b = key
        rid = self.owner_of(b) if pool == "gpu" else self.cpu.owner_of(b)
        if rid is not None:
            self.requestSelected.emit(rid)
