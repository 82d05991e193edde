"""KV-cache block map: one cell per physical block of the paged cache, zoomable.

The whole map is ONE packed-colour image on a long-lived ``PackedImageItem`` in a
``pg.ViewBox``, painted from the state's arrays with numpy (``ui.views.block_image``; by request
per segment of alike cells, ``ui.views.run_image``): no Python per block per frame. A block is ``px`` x ``px`` image pixels, ``px`` the most whole device pixels
a block can have and the whole cache fit the view (up to 12; a 1-pixel gap between cells from 3
pixels on), and the fitted view shows one image pixel per device pixel (or a whole number of
them when the image is scaled up): a map scaled by a fraction aliases its gaps into moiré
(``ui.views.block_image.fitted_cell_px``); its cell fills from the bottom like a glass with the owner's colour, a faint tint
above, dark grey when free; the selected request's blocks get a white frame.

Two layouts, toggled by the buttons in the title row: *physical* (block ``b`` at cell ``b``, as
above: shows where blocks sit and how the pool fragments) and *by request*
(``ui.views.request_runs``: each holder's blocks as one contiguous run, requests in slot order,
areas proportional to blocks, the shared prefix as a gold-marked segment, then the cached-free,
free and out-of-use regions, with request ids and counts written where a run has room). The
grid's geometry (``ui.views.block_grid``): cells of whole device pixels; runs of the by-request
layout in bands filled column by column (squarish runs, not wrapped stripes); and when the
blocks outnumber the view's device pixels, one pixel per ``per_pixel`` blocks, AREA-AVERAGED
(``ui.views.block_image.dense_image``: fill and occupancy density, not a sample). ``layout="auto"``
(the main window's) picks by request from :data:`AUTO_REQUEST_BLOCKS` blocks until the user picks.

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
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QButtonGroup, QLabel, QToolButton, QVBoxLayout, QWidget

from engine.state.state import RESERVED, EngineState
from ui.views.block_grid import BlockGrid, band_rows
from ui.views.block_image import (CACHED_FREE, MARK_CACHED_FREE, MARK_RESERVED, MARK_SHARED,
                            RESERVED_BG, RESERVED_HATCH, SHARED, TINT, BlockImage, block_rgb,
                            cell_px, dense_image, device_scale, fitted_cell_px,
                            grid_columns)
from ui.style.colors import BACKGROUND, FREE, MUTED, color_indices, css, mix, packed
from ui.views.cpu_pool import CpuPoolLayer
from ui.views.packed_image import PackedImageItem
from ui.views.pointer import track_pointer
from ui.views.request_runs import (REGIONS, RequestRuns, block_at_cell, cell_of_block,
                                   cells_of_blocks, request_runs, segments)
from ui.views.run_image import segment_image
from ui.style.theme import title_row
from engine.plural import plural
from ui.state_lookup import block_fill, block_holders, find_row, owned_blocks

LAYOUTS = {"physical": "physical", "request": "by request"}     # name -> button text
AUTO_REQUEST_BLOCKS = 20_000     # layout "auto": by request from this many blocks
LABEL_H = 14                     # device pixels a label needs: a run this tall (and as wide as
MAX_LABELS = 120                 # its text) gets its request id and block count written on it


def _unbroken(text: str) -> str:
    """``text`` as one legend entry that no line break splits (spaces and hyphens that do not
    break)."""
    return text.replace(" ", "&nbsp;").replace("-", "&#8209;")


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
                 parent: QWidget | None = None, layout: str = "physical"):
        super().__init__(parent)
        if layout not in (*LAYOUTS, "auto"):
            raise ValueError(f"block map layout {layout!r}: one of {', '.join([*LAYOUTS, 'auto'])}")
        self._fixed_columns = columns
        self.layout_choice = layout
        self.columns, self.px = columns or 8, cell_px(0)
        self.grid = BlockGrid(0, self.columns, self.px)
        self.runs: RequestRuns | None = None    # the by-request layout's runs (None: physical)
        self.state: EngineState | None = None
        self._owner_rows: np.ndarray | None = np.zeros(0, np.int64)
        self._holders, self._at = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.fill = np.zeros(0, np.int64)
        self.selected: str | None = None
        self.zoomed = False                     # the user zoomed or panned: keep their range
        self.image = np.zeros((self.px, self.px), np.uint32)
        self._shape: tuple[int, int] = (0, 0)     # (height, width) of both grids, image pixels
        self._order: tuple[BlockGrid, np.ndarray] | None = None   # a banded grid's order()
        self._painter = BlockImage()
        head, self.title, self.title_numbers = title_row(
            "KV cache blocks", "  ·  8,888,888 / 8,888,888 used (100%)  ·  block size 8888 tokens",
            "  ·  888,888 / 888,888 (100%)")
        head.addStretch(1)
        self.layout_buttons: dict[str, QToolButton] = {}
        group = QButtonGroup(self)
        for name, text in LAYOUTS.items():
            b = QToolButton()
            b.setText(text)
            b.setCheckable(True)
            b.setAutoRaise(True)
            b.setToolTip("physical: blocks in block-id order (where they sit in the pool)"
                         if name == "physical" else "by request: each request's blocks as one run, "
                         "requests in slot order, then cached-free and free blocks")
            b.clicked.connect(lambda _=False, n=name: self.set_layout(n))
            group.addButton(b)
            head.addWidget(b)
            self.layout_buttons[name] = b
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
        self.labels: list[pg.TextItem] = []
        self._label_font = QFont()
        self._label_font.setPointSize(8)
        self._label_metrics = QFontMetrics(self._label_font)
        self._widths: dict[str, int] = {}
        track_pointer(self.plot, self._key_at_scene, self._describe_key, self._clicked)
        self.plot.scene().sigMouseClicked.connect(self._double_clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.plot, 1)
        lay.addWidget(self.legend)
        self._check_layout_button()
        if state is not None:
            self.set_state(state)

    @property
    def layout_name(self) -> str:
        """The layout drawn: ``"physical"`` or ``"request"`` (``"auto"`` resolved: by request
        from :data:`AUTO_REQUEST_BLOCKS` blocks)."""
        if self.layout_choice != "auto":
            return self.layout_choice
        n = 0 if self.state is None else self.state.num_total_blocks
        return "request" if n >= AUTO_REQUEST_BLOCKS else "physical"

    def set_layout(self, name: str) -> None:
        """Draw the ``name`` layout (``"physical"``, ``"request"`` or ``"auto"``) and fit it.
        Raises ValueError for another name."""
        if name not in (*LAYOUTS, "auto"):
            raise ValueError(f"block map layout {name!r}: one of {', '.join([*LAYOUTS, 'auto'])}")
        self.layout_choice = name
        self._check_layout_button()
        if self.state is not None:
            self._legend_key = None
            self._show_pools()
            self._redraw()
            self.fit()

    def _check_layout_button(self) -> None:
        b = self.layout_buttons[self.layout_name]
        if not b.isChecked():
            b.setChecked(True)

    @staticmethod
    def _legend_html(num_reserved: int = 0, cpu: bool = False, by_request: bool = False) -> str:
        """The legend; ``num_reserved`` > 0 adds the out-of-use mark with that count, ``cpu``
        the CPU swap pool, ``by_request`` the by-request layout's reading. Lines break between
        entries only."""
        square = "<span style='color:{}'>&#9632;</span>"
        entries = [("", "one run per request in slot order (id · blocks), then cached-free and free blocks")
                   ] if by_request else []
        entries += [(square.format(css(FREE)), "free"),
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
        return " &nbsp; ".join(f"{mark}&nbsp;{_unbroken(text)}" if mark else
                               _unbroken(text) for mark, text in entries)

    # --- data in -------------------------------------------------------------------------
    def set_state(self, state: EngineState) -> None:
        self.state = state
        self._owner_rows = None
        self._holders, self._at = block_holders(state)
        self.fill = block_fill(state, self._holders, self._at)
        used, total = state.num_used_blocks, state.num_total_blocks     # one pass over the blocks
        share = f"({100.0 * used / total if total else 0.0:.0f}%)"
        self.title_numbers.setText(f"  ·  {used:,} / {total:,} used {share}  ·  block size {state.block_size} tokens",
                                   f"  ·  {used:,} / {total:,} {share}")
        self.num_reserved = int(np.count_nonzero(state.block_owner == RESERVED))
        if self.layout_choice == "auto":
            self._check_layout_button()         # "auto" resolves with the cache's size
        self._show_pools()
        self._redraw()

    def _show_pools(self) -> None:
        """The legend entries the blocks out of use and the CPU pool need (set only when they
        change: the legend's height may change, a relayout). The CPU pool's numbers are on its
        label in the view (``ui.views.cpu_pool``: no relayout when they change)."""
        key = (self.num_reserved, len(self.state.cpu_owner) > 0, self.layout_name == "request")
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
        """bool [blocks]: the selected request's blocks, those it shares with older holders of
        a prefix included (None without a selection)."""
        if not self.selected:
            return None
        mask = owned_blocks(self.state, self.selected)
        st, row = self.state, find_row(self.state, self.selected)
        if row is not None and len(st.shared_seq):
            mask[st.shared_block[st.shared_seq == st.columns["seq"][row]]] = True
        return mask

    def _aspect(self) -> float:
        w, h = self.plot.width(), self.plot.height()
        return w / h if h > 20 and w > 20 else 2.0

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if self.state is not None and not self._fixed_columns:
            if self._plan() != self.grid:
                self._redraw()
            elif not self.zoomed:
                self.fit()

    def _device_size(self) -> tuple[float, float] | None:
        """The view's ``(width, height)`` in device pixels; None before it is laid out."""
        size, ratio = self.view.size(), self.plot.devicePixelRatioF()
        if size.width() <= 20 or size.height() <= 20:
            return None
        return size.width() * ratio, size.height() * ratio

    def _num_runs(self) -> int:
        """Runs of the by-request layout (requests holding blocks, regions not empty)."""
        runs = self.runs
        return 0 if runs is None else len(runs.rows) + int(np.count_nonzero(runs.regions))

    def _band(self, num_positions: int, columns: int) -> int:
        """Rows per band for ``num_positions`` grid positions in ``columns`` columns: 1 in the
        physical layout; by request about a square run (``ui.views.block_grid.band_rows``),
        evened out so the bands fill the rows the cells need (few rows wasted)."""
        if self.runs is None:
            return 1
        rows = max(1, math.ceil(num_positions / columns))
        target = band_rows(num_positions, self._num_runs())
        return math.ceil(rows / max(1, round(rows / target)))

    def _plan(self) -> BlockGrid:
        """The grid for the current state, layout and view size (``ui.views.block_grid``):
        cells of ``px`` whole device pixels that fit the view (``fitted_cell_px``), or before the
        view is laid out, ``cell_px``'s guess; when even one pixel a block does not fit, one
        pixel per ``per_pixel`` blocks, area-averaged, the grid as wide as the view."""
        n, num_cpu = len(self.fill), len(self.state.cpu_owner)
        cols = self._fixed_columns or grid_columns(n + num_cpu, self._aspect())
        band = self._band(n, cols)
        # the CPU pool's rows, and two rows of gap for its label, count in the grid's shape
        cpu_rows = 2 + math.ceil(num_cpu / cols) if num_cpu else 0
        size = self._device_size()
        if size is None:
            return BlockGrid(n, cols, cell_px(n + num_cpu), 1, band)
        width, height = size
        rows = BlockGrid(n, cols, 1, 1, band).rows + cpu_rows
        if self._fixed_columns or (cols <= width and rows <= height):
            return BlockGrid(n, cols, fitted_cell_px(cols, rows, width, height), 1, band)
        cols = max(1, int(width))                                      # area-averaged pixels
        avail = max(1, int(height) - (2 + math.ceil(num_cpu / cols) if num_cpu else 0))
        k = max(1, math.ceil(n / (cols * avail)))
        while True:
            positions = math.ceil(n / k)
            grid = BlockGrid(n, cols, 1, k, self._band(positions, cols))
            if grid.rows <= avail:
                return grid
            k += 1

    def _layout(self) -> tuple[int, int]:
        """``(columns, px)`` of the grid for the current state and view size (:meth:`_plan`)."""
        g = self._plan()
        return g.columns, g.px

    def _cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """The look of every cell in drawing order: ``(palette_index, fill, marks, framed)``
        (as ``ui.views.block_image.render`` takes them): the blocks in id order, or by request
        (:meth:`_segments` repeated over their lengths)."""
        if self.runs is None:
            return self.palette_index(), self.fill, self.marks(), self._framed()
        *looks, lengths, framed_cells = self._segments()
        pal, fill, marks, framed = (np.repeat(a, lengths) for a in looks)
        framed[framed_cells] = True
        return pal, fill, marks, framed if framed.any() else None

    def _segments(self) -> tuple[np.ndarray, ...]:
        """The by-request layout's segments (``ui.views.request_runs.segments``: palette, fill,
        marks, framed, lengths) and the cells framed besides (int64: the selection's shared
        blocks in other runs)."""
        st, runs = self.state, self.runs
        colours = color_indices([st.request_ids[r] for r in runs.rows.tolist()])
        row = find_row(st, self.selected)
        at = np.flatnonzero(runs.rows == row) if row is not None else ()
        sel_run = int(at[0]) if len(at) else None
        framed_cells = np.zeros(0, np.int64)
        if row is not None and len(st.shared_seq):
            mine = st.shared_block[st.shared_seq == st.columns["seq"][row]]
            if len(mine):
                framed_cells = cells_of_blocks(st, runs, self._at, self.fill, mine)
        return (*segments(runs, colours, st.block_size, sel_run), framed_cells)

    def _grid_order(self, grid: BlockGrid) -> np.ndarray:
        if self._order is None or self._order[0] != grid:
            self._order = (grid, grid.order())
        return self._order[1]

    def _redraw(self) -> None:
        if self.state is None:
            return
        st = self.state
        self.runs = (request_runs(st, self._holders, self._at, self.fill)
                     if self.layout_name == "request" else None)
        grid = self._plan()
        num_cpu = len(st.cpu_owner)
        cols, px = grid.columns, grid.px
        gpu_h = grid.rows * px
        cpu_top = gpu_h + 2 * px if num_cpu else gpu_h
        shape = (cpu_top + math.ceil(num_cpu / cols) * px, cols * px)
        relayout = grid != self.grid or shape != self._shape
        self.grid, self.columns, self.px, self._shape = grid, cols, px, shape
        self.image = self._image(grid)
        self.item.set_packed(self.image)
        self.cpu.update(st, cols, px, cpu_top, self.selected)
        if relayout:
            self.fit()
        else:
            self._place_labels()

    def _image(self, grid: BlockGrid) -> np.ndarray:
        """The map's packed-colour image for ``grid``: by request, painted per segment
        (``ui.views.run_image``: a run that grows moves the runs after it, so most cells change
        place each frame); physical, the cells whose look changed repainted in place
        (``ui.views.block_image.BlockImage``); area-averaged when blocks outnumber pixels."""
        bs, cols, px = self.state.block_size, grid.columns, grid.px
        if grid.per_pixel == 1 and self.runs is not None:
            *looks, lengths, framed_cells = self._segments()
            self._painter = BlockImage()        # its image is not this one: a full render next time
            return segment_image(*looks, lengths, bs, grid, framed_cells)
        pal, fill, marks, framed = self._cells()
        if grid.per_pixel == 1:                 # physical: block b at cell b, band 1
            return self._painter.update(pal, fill, bs, cols, px, framed, marks)
        self._painter = BlockImage()
        flat = dense_image(block_rgb(pal, fill, bs, marks), max(grid.num_positions, 1),
                           grid.per_pixel, framed).reshape(-1)
        order = self._grid_order(grid)
        image = np.where(order >= 0, flat[np.maximum(order, 0)], packed(BACKGROUND))
        return image.astype(np.uint32).reshape(grid.rows, cols)

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
                            yMax=(h + span_y) / 2, minXRange=2 * self.px / self.grid.per_pixel,
                            minYRange=2 * self.px / self.grid.per_pixel)
        if size is None:
            self.view.autoRange(padding=0.01)
        else:
            self.view.setRange(xRange=(x0, x0 + width / scale), yRange=(y0, y0 + height / scale),
                               padding=0)
        self._place_labels()

    def _view_resized(self, *_args) -> None:
        """The view box got its new size (after the widget's resize event): lay the grid out
        again for it (another cell size: :meth:`_plan`) and fit, unless the user zoomed."""
        if self.state is not None and not self.zoomed:
            if self._plan() != self.grid:
                self._redraw()
            self.fit()

    def _user_zoomed(self, *_args) -> None:
        self.zoomed = True
        self._place_labels()

    def _double_clicked(self, ev) -> None:
        if ev.double():
            self.fit()

    # --- labels (by request) --------------------------------------------------------------
    def run_labels(self) -> list[tuple[float, float, str]]:
        """``(x, y, text)`` (image coordinates, text) of each label the by-request layout has
        room for at the current zoom: a request's id and block count, or a region's name and
        count, written at the widest of the first three bands of its run, when its whole columns are
        at least :data:`LABEL_H` device pixels tall and as wide as the text. [] in the physical layout."""
        runs, g = self.runs, self.grid
        if runs is None or self.state is None:
            return []
        scale = self._device_per_image_px()
        if g.band * g.px * scale < LABEL_H:
            return []
        ids = self.state.request_ids
        bounds = np.concatenate([runs.starts, runs.region_starts[1:]])
        per_band, k = g.band * g.columns, g.per_pixel
        pa, pb = -(-bounds[:-1] // k), bounds[1:] // k          # whole positions of each run
        # the widest of its first three bands (a run spans few), in whole columns
        best_room, best_x, best_y = np.full(len(pa), -1.0), np.zeros(len(pa)), np.zeros(len(pa))
        for j in range(3):
            band = pa // per_band + j
            lo, hi = np.maximum(pa, band * per_band), np.minimum(pb, (band + 1) * per_band)
            first_col = -(-(lo - band * per_band) // g.band)
            room = np.where(hi > lo, (hi - band * per_band) // g.band - first_col, 0) * g.px * scale
            better = room > best_room
            best_room = np.where(better, room, best_room)
            best_x = np.where(better, first_col * g.px, best_x)
            best_y = np.where(better, band * g.band * g.px, best_y)
        h = len(runs.rows)
        sizes = np.diff(bounds).tolist()
        out: list[tuple[float, float, str]] = []
        for i in np.flatnonzero(best_room >= self._text_width("888") + 6).tolist():
            n = sizes[i]
            # the longest text that fits: id and block count, the id, the count
            if i < h:
                rid = ids[runs.rows[i]]
                choices = (f"{rid} · {n:,}", rid, f"{n:,}")
            else:
                choices = (f"{REGIONS[i - h]} {n:,}", f"{n:,}")
            text = next((t for t in choices if self._text_width(t) + 6 <= best_room[i]), None)
            if text is not None:
                out.append((float(best_x[i]), float(best_y[i]), text))
                if len(out) >= MAX_LABELS:
                    break
        return out

    def _text_width(self, text: str) -> int:
        """Device-independent pixels ``text`` takes in a label (remembered per text)."""
        w = self._widths.get(text)
        if w is None:
            if len(self._widths) > 20_000:
                self._widths.clear()
            w = self._widths[text] = self._label_metrics.horizontalAdvance(text)
        return w

    def _device_per_image_px(self) -> float:
        """Device pixels per image pixel at the current zoom."""
        w = self.view.viewPixelSize()[0]
        return 1.0 / w if w > 0 else 1.0

    def _place_labels(self) -> None:
        runs = self.run_labels()
        while len(self.labels) < len(runs):
            t = pg.TextItem(color="#f2f3f5", anchor=(0, 0), fill=pg.mkBrush(16, 17, 20, 190))
            t.setFont(self._label_font)
            self.view.addItem(t)
            self.labels.append(t)
        for t, (x, y, text) in zip(self.labels, runs):
            if t.toPlainText() != text:
                t.setText(text)
            if (t.pos().x(), t.pos().y()) != (x, y):
                t.setPos(x, y)
            if not t.isVisible():
                t.setVisible(True)
        for t in self.labels[len(runs):]:
            if t.isVisible():
                t.setVisible(False)

    # --- lookups (used by hover, click and tests) -----------------------------------------
    def cell_of(self, block_id: int) -> int:
        """The cell (place in the drawing order) that shows ``block_id``: the block id itself in
        the physical layout, its place in its owner's run (or its region) by request."""
        if self.runs is None:
            return block_id
        return cell_of_block(self.state, self.runs, self._at, self.fill, block_id)

    def block_of(self, cell: int) -> int | None:
        """The block shown at ``cell`` (the inverse of :meth:`cell_of`; None past the end)."""
        if not 0 <= cell < len(self.fill):
            return None
        if self.runs is None:
            return cell
        return block_at_cell(self.state, self.runs, self._at, self.fill, cell)

    def cell_origin(self, block_id: int) -> tuple[int, int]:
        """Pixel (x, y) of the top-left painted pixel of ``block_id`` in ``image`` (of the
        area-averaged pixel that holds it when blocks outnumber pixels)."""
        return self.grid.cell_origin(self.cell_of(block_id))

    def block_point(self, block_id: int) -> tuple[float, float]:
        """Image (x, y) that :meth:`block_at` maps to ``block_id``: its cell's middle, or its
        slice of an area-averaged pixel (reached by zooming in)."""
        return self.grid.cell_point(self.cell_of(block_id))

    def block_at(self, x: float, y: float) -> int | None:
        """Block under image coordinates ``(x, y)`` (gaps belong to the block on their left
        and above; in an area-averaged pixel, the block that the fraction of ``x`` across it
        points at), None outside the grid."""
        i = self.grid.cell_at(x, y)
        return None if i is None else self.block_of(i)

    def describe_pixel(self, block_id: int) -> str:
        """What the area-averaged pixel holding ``block_id`` averages: its blocks' count and
        range, how many are held, and by request its runs ('' when a block has a cell)."""
        g = self.grid
        if g.per_pixel == 1:
            return ""
        first, last = g.span(self.cell_of(block_id))
        n = last - first + 1
        if self.runs is None:
            held = int(np.count_nonzero(self.state.block_owner[first:last + 1] >= 0))
            return (f"pixel of {n} blocks ({first:,}–{last:,}; area average): {held} held, "
                    f"{n - held} free · wheel: zoom in to point at one")
        runs, ids = self.runs, self.state.request_ids
        bounds = np.concatenate([runs.starts, runs.region_starts[1:]])
        lo = int(np.searchsorted(bounds, first, side="right")) - 1
        hi = int(np.searchsorted(bounds, last, side="right")) - 1
        names = [ids[runs.rows[r]] if r < len(runs.rows) else REGIONS[r - len(runs.rows)]
                 for r in range(lo, hi + 1)]
        more = f" and {len(names) - 4} more" if len(names) > 4 else ""
        return (f"pixel of {n} blocks (area average): {', '.join(names[:4])}{more}"
                " · wheel: zoom in to point at one")

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
        if pool == "cpu":
            return self.cpu.describe(b)
        pixel = self.describe_pixel(b)
        return f"{pixel}\n\n{self.describe(b)}" if pixel else self.describe(b)

    def _clicked(self, key: tuple[str, int]) -> None:
        pool, b = key
        rid = self.owner_of(b) if pool == "gpu" else self.cpu.owner_of(b)
        if rid is not None:
            self.requestSelected.emit(rid)
