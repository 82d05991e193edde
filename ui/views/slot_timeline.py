"""Batch-slot timeline: one row per batch slot, one column per step, drawn as ONE image.

A cell is the request that held the slot in that step (its batch: ``StepSummary`` arrays, the
same as ``StepRecord.scheduled``), in the request's
colour: striped and lighter for a prefill chunk, solid for decode, dark when the slot was idle.
The view shows a window of ``window`` steps that grows from the left and then pages forward with
the run (``ui.record_cache.step_span``); a vertical marker shows the step on display. The view's x
coordinate is the window's column (step - ``first_step``), so a page relabels the step axis
(``ui.views.step_axis.StepAxis``) instead of moving the view. The grid of (palette index, prefill flag,
request key) per slot and step is kept while the window stays put: a frame draws the columns
of the steps that changed (the new one, while the run advances), in numpy over all of them at
once, and repaints only those columns of the image: no Python per cell, no pass over the
window per frame.

At production batch sizes (256-1024 slots) most rows are idle most of the time and a row is a
hairline. COMPACT mode shows only the slots used somewhere in the visible window (their numbers
on the axis), so rows are taller and get ids and stripes; it is on by itself (``compact=None``)
when at least :data:`AUTO_COMPACT_SLOTS` slots are configured and most of them are idle in the
window, and the "compact" button sets it either way. Above the rows an OCCUPANCY strip is the
overview: per step, the share of all slots that ran decode (solid) and prefill chunks (amber),
stacked from the bottom, so prefill and decode stay apart at every zoom, even where a row is
one pixel.

When even the shown slots leave a row fewer than :data:`MIN_ROW_PX` screen pixels (256 slots all
busy in a 350-pixel view), the rows SCROLL, as a trace viewer's tracks do (Perfetto): each row is
:data:`SCROLL_ROW_PX` screen pixels, tall enough for the prefill stripes (request ids are
written on rows of :data:`LABEL_ROW_PX`, a few dozen slots; hover names them everywhere), a
scroll bar beside the rows says which of them are on screen, the mouse wheel over the rows moves
them, and the occupancy strip above stays the overview of all slots. The "fit" button squeezes
every row into the view instead (a glance at the whole pool, rows of a pixel or two).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QGraphicsItem, QHBoxLayout, QLabel, QScrollBar, QToolButton,
                               QVBoxLayout, QWidget)

from engine.outputs import BatchEntry, StepRecord
from ui.style.colors import (BACKGROUND, IDLE, MUTED, color_index, css, dim, lighten,
                       packed, palette_lut, request_rgb)
from ui.views.packed_image import PackedImageItem
from ui.views.pointer import track_pointer
from ui.record_cache import step_span
from ui.views.step_axis import StepAxis
from ui.step_summary import StepSummary, as_summaries
from ui.style.theme import cache_decorations, plot_widget, style_axis, title_row

LABEL_PX = 56       # a run of cells this wide (screen pixels) gets its request id written on it
MAX_LABELS = 300
MAX_KEYS = 1_000_000   # request keys remembered before the key table starts over
AXIS_PX = 46               # width of the slot axis (and the strip's, so their columns line up)
AUTO_COMPACT_SLOTS = 32    # compact=None: compact from this many slots when most are idle
STRIP_PX = 24              # image rows of the occupancy strip
MIN_ROW_PX = 5             # screen pixels a fitted row needs; thinner rows scroll instead ...
TICK_LABEL_PX = 14         # screen pixels between two slot labels (a 9-point digit and a gap)
NICE_STRIDES = (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 256, 512, 1024, 1 << 62)
SCROLL_ROW_PX = 8          # ... at this many screen (and image) pixels a row: prefill stripes
                           # (ids on 14-pixel rows cost 3-7 ms a frame at 256 busy slots: every
                           # frame repainted the whole view under the moving text items)
LABEL_ROW_PX = 14          # a row this tall on screen gets request ids written on its cells
WHEEL_ROWS = 3             # rows a wheel notch scrolls
STRIP_DECODE = (122, 162, 204)     # the occupancy strip's decode share ...
STRIP_PREFILL = (242, 183, 5)      # ... and prefill share
_NO_STEP = StepSummary((), [np.zeros(0, object)] + [np.zeros(0, np.int64)] * 3 + [np.zeros(0, bool)])
_SOLID = palette_lut(none=IDLE)
_LIGHT = palette_lut(lambda c: lighten(c, 0.5), none=IDLE)
_SOLID_DIM = palette_lut(dim, none=IDLE)
_LIGHT_DIM = palette_lut(lambda c: dim(lighten(c, 0.5)), none=IDLE)


def row_px(num_slots: int) -> int:
    """Image pixels per slot row when all ``num_slots`` rows fit the view: 8 (7 painted, striped
    for prefill, + a 1-pixel gap) up to 64 slots, 4 up to 128, then 1 (no stripes or gaps: a
    row is 1-2 screen pixels; a prefill chunk is the lighter colour). Scrolled rows are
    :data:`SCROLL_ROW_PX`."""
    return 8 if num_slots <= 64 else 4 if num_slots <= 128 else 1


class _WheelRows(QObject):
    """Turns wheel events over the rows into scrolling them (while they scroll)."""

    def __init__(self, timeline: SlotTimeline) -> None:
        super().__init__(timeline)
        self.timeline = timeline

    def eventFilter(self, obj, event) -> bool:
        t = self.timeline
        if event.type() != QEvent.Type.Wheel or not t.scrolling:
            return False
        notches = event.angleDelta().y() / 120
        t.scroll_bar.setValue(t.scroll_bar.value() - round(notches * WHEEL_ROWS))
        return True


def decode_rgb(request_id: str) -> tuple[int, int, int]:
    return request_rgb(request_id)


def prefill_rgb(request_id: str) -> tuple[int, int, int]:
    """The light stripe of a prefill cell (even painted rows); odd rows are ``decode_rgb``."""
    return lighten(request_rgb(request_id), 0.5)


class SlotTimeline(QWidget):
    """``set_records(steps, shown_step, max_num_seqs, latest_step)`` redraws (``steps``:
    :class:`~ui.step_summary.StepSummary` s, or ``StepRecord`` s);
    ``set_selected(id)`` fades every other request. Emits ``requestSelected(request_id)`` when
    a cell is clicked. ``image`` is the packed uint32 array on screen, ``(slots * row_px, span)``."""

    requestSelected = Signal(str)

    def __init__(self, max_num_seqs: int = 1, window: int = 200, parent: QWidget | None = None,
                 compact: bool | None = None):
        super().__init__(parent)
        self.window = window
        self.max_num_seqs = max(1, max_num_seqs)
        self.compact_choice = compact          # None: auto (see the module)
        self.compact = False
        self.shown_slots = np.arange(self.max_num_seqs)   # the slots drawn, top to bottom
        self.row_px = row_px(self.max_num_seqs)
        self.fit_rows = False                  # the "fit" button: every row in view, never scroll
        self.scrolling = False                 # rows scroll (too many to fit MIN_ROW_PX each)
        self.first_row, self.visible_rows = 0, self.max_num_seqs   # the rows on screen
        self._tick_key: tuple = ()                  # (view height, rows, visible) the ticks are for
        self._ticks: list | None = None                # the slot axis's ticks
        self.shown_step = -1
        self.first_step, self.span = 0, window
        self.labels: list[pg.TextItem] = []
        self._label_looks: list[tuple | None] = []     # (text, colour, x, y) of each label
        self.selected: str | None = None
        self.by_step: dict[int, StepSummary] = {}      # the drawn steps
        self._keys: dict[str, int] = {}                # request id -> small int key
        self._ids: list[str] = []                      # key -> request id
        self._pal_of_key = np.zeros(0, np.int16)       # key -> palette index
        self._grid = None                              # (palette, prefill, key), each (slots, span)
        self._grid_at: tuple | None = None             # (first step, span, slots) of the grid
        self._drawn: list = []                         # the step drawn in each grid column
        self._shown_at: tuple | None = None            # (first step, span, slots) on the axes
        self.image = np.zeros((self.row_px, 1), np.uint32)
        self.plot = plot_widget()
        pi = self.plot.getPlotItem()
        pi.setMouseEnabled(False, False)
        pi.invertY(True)
        # x in window columns (step - first_step): a page relabels the axis, the view stays
        self.step_axis = StepAxis("bottom")
        pi.setAxisItems({"bottom": self.step_axis})
        style_axis(self.step_axis, "step")
        style_axis(pi.getAxis("left"), "batch slot")
        cache_decorations(pi)
        self.item = PackedImageItem()
        pi.addItem(self.item)
        self.marker = pg.InfiniteLine(angle=90, movable=False,
                                      pen=pg.mkPen("#ffffff", width=1.5, style=pg.QtCore.Qt.DashLine))
        pi.addItem(self.marker)
        pi.getViewBox().sigResized.connect(lambda *_: self._grid is not None and self._paint())
        track_pointer(self.plot, self._cell_at_scene, lambda c: self.describe(*c), self._clicked)
        head, self.title, self.title_numbers = title_row(
            "Batch slots", "  ·  8888 slots  ·  steps 88888888–88888888", "  ·  8888/8888 slots")
        head.addStretch(1)
        # under the rows, as the block map's (in the title row it set the window's minimum width)
        self.legend = legend = QLabel(self._legend_html())
        legend.setWordWrap(True)
        legend.setToolTip("prefill chunk: the request's colour, lighter, in stripes (a lighter "
                          "cell when rows are 1-2 pixels); decode: its colour; idle: dark; "
                          "dashed line: the step shown")
        self.compact_button = QToolButton()
        self.compact_button.setText("compact")
        self.compact_button.setCheckable(True)
        self.compact_button.setAutoRaise(True)
        self.compact_button.setToolTip("compact: only the slots used in the shown steps "
                                       "(on by itself when most of many slots are idle)")
        self.compact_button.clicked.connect(self.set_compact)
        head.addWidget(self.compact_button)
        self.fit_button = QToolButton()
        self.fit_button.setText("fit")
        self.fit_button.setCheckable(True)
        self.fit_button.setAutoRaise(True)
        self.fit_button.setToolTip("fit: every row in the view, however thin (off: rows thinner "
                                   f"than {MIN_ROW_PX} pixels scroll at {SCROLL_ROW_PX} pixels a row)")
        self.fit_button.clicked.connect(self.set_fit_rows)
        head.addWidget(self.fit_button)
        self.scroll_bar = QScrollBar(Qt.Orientation.Vertical)
        self.scroll_bar.setVisible(False)
        self.scroll_bar.valueChanged.connect(self._scrolled)
        self.plot.viewport().installEventFilter(_WheelRows(self))
        self.strip = plot_widget()
        self.strip.setFixedHeight(34)
        spi = self.strip.getPlotItem()
        spi.setMouseEnabled(False, False)
        spi.hideAxis("bottom")
        style_axis(spi.getAxis("left"), "used")
        spi.getAxis("left").setTicks([[], []])             # 0 .. all slots: the strip's height
        self.strip.setToolTip("slots used per step, of all slots: decode (blue, from the bottom), "
                              "prefill chunks (amber, above)")
        for axis in (spi.getAxis("left"), pi.getAxis("left")):   # the strip's columns over the rows'
            axis.setWidth(AXIS_PX)
        cache_decorations(spi)
        spi.setXLink(pi)
        spi.setYRange(0, 1, padding=0)
        self.strip_item = PackedImageItem()
        spi.addItem(self.strip_item)
        self.strip_image = np.zeros((STRIP_PX, 1), np.uint32)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.strip)
        rows = QHBoxLayout()
        rows.setContentsMargins(0, 0, 0, 0)
        rows.setSpacing(0)
        rows.addWidget(self.plot, 1)
        rows.addWidget(self.scroll_bar)
        lay.addLayout(rows, 1)
        lay.addWidget(legend)
        self._set_slot_ticks()

    @staticmethod
    def _legend_html() -> str:
        c = (78, 121, 167)
        sw = "<span style='color:{}'>&#9632;</span>"
        return (f"<span style='color:{css(MUTED)}'>{sw.format(css(lighten(c, 0.5)))} prefill"
                f" (striped) &nbsp; {sw.format(css(c))} decode &nbsp; {sw.format(css(IDLE))} idle"
                " &nbsp; ┆ shown step</span>")

    def _set_slot_ticks(self) -> None:
        """Name about 16 of the rows on screen by their slot (set only when they change: new
        ticks redraw the axis)."""
        shown = self.shown_slots
        rows = max(1, min(len(shown), self.visible_rows))
        height = self.plot.getPlotItem().getViewBox().height()
        # never closer than a label's height on screen (8-pixel rows: every row's label overlapped)
        need = TICK_LABEL_PX / (height / rows) if height > 0 else 1.0
        stride = next(k for k in NICE_STRIDES if k >= max(need, rows // 16, 1))
        ticks = [(i, str(int(shown[i]))) for i in range(0, len(shown), stride)]
        if ticks != self._ticks:
            self._ticks = ticks
            self.plot.getPlotItem().getAxis("left").setTicks([ticks])

    def set_compact(self, on: bool | None) -> None:
        """Show only the slots used in the window (True), all slots (False), or decide by
        itself (None: see the module); the button's state follows."""
        self.compact_choice = None if on is None else bool(on)
        if self._grid is not None:
            self._choose_rows()
            self._paint()
        self.compact_button.setChecked(self.compact)

    def set_fit_rows(self, on: bool) -> None:
        """Squeeze every shown row into the view (True) or let rows thinner than
        :data:`MIN_ROW_PX` scroll (False, the default)."""
        self.fit_rows = bool(on)
        self.fit_button.setChecked(self.fit_rows)
        if self._grid is not None:
            self._paint()

    def _lay_out_rows(self) -> bool:
        """Fit the shown rows to the view or let them scroll (see the module): sets
        ``scrolling``, ``row_px``, ``visible_rows`` and the scroll bar; True when the image's
        rows changed size (a full repaint)."""
        n = len(self.shown_slots)
        height = self.plot.getPlotItem().getViewBox().height()
        scrolling = (not self.fit_rows and height > 0 and height / max(n, 1) < MIN_ROW_PX)
        rp = SCROLL_ROW_PX if scrolling else row_px(n)
        visible = max(1, min(n, int(height // SCROLL_ROW_PX))) if scrolling else n
        changed = rp != self.row_px
        if (scrolling, visible) != (self.scrolling, self.visible_rows):
            self._shown_at = None
        self.scrolling, self.row_px, self.visible_rows = scrolling, rp, visible
        bar = self.scroll_bar
        top = max(0, n - visible) if scrolling else 0
        if (bar.maximum(), bar.pageStep()) != (top, visible):     # (a frame: mostly the same)
            bar.blockSignals(True)
            bar.setRange(0, top)
            bar.setPageStep(visible)
            bar.blockSignals(False)
            self._set_slot_ticks()
        if (height, n, visible) != self._tick_key:      # the rows' screen size changed
            self._tick_key = (height, n, visible)
            self._set_slot_ticks()
        self.first_row = bar.value() if scrolling else 0
        if bar.isVisible() != scrolling:
            bar.setVisible(scrolling)
        return changed

    def _scrolled(self, value: int) -> None:
        self.first_row = value
        self._shown_at = None
        if self._grid is not None:
            self._show()

    def _choose_rows(self) -> bool:
        """Pick the slots to draw (``shown_slots``) from the grid; True when they changed."""
        s = self.max_num_seqs
        used = np.flatnonzero((self._grid[2] >= 0).any(axis=1))
        choice = self.compact_choice
        compact = choice if choice is not None else (s >= AUTO_COMPACT_SLOTS and 2 * len(used) < s)
        shown = used if compact and len(used) else np.arange(s)
        self.compact = bool(compact)
        if self.compact_button.isChecked() != self.compact:
            self.compact_button.setChecked(self.compact)
        if np.array_equal(shown, self.shown_slots):
            return False
        self.shown_slots = shown
        self.row_px = row_px(len(shown))
        self._shown_at = None
        self._set_slot_ticks()
        return True

    # --- per-step columns ----------------------------------------------------------------
    def _new_key(self, request_id: str) -> int:
        k = self._keys[request_id] = len(self._ids)
        self._ids.append(request_id)
        if k == len(self._pal_of_key):
            self._pal_of_key = np.concatenate([self._pal_of_key, np.zeros(max(k, 1024), np.int16)])
        self._pal_of_key[k] = color_index(request_id)
        return k

    def _columns(self, steps: Sequence[StepSummary]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(palette int16, prefill bool, key int32), each ``[max_num_seqs, len(steps)]``: one
        column per step, palette and key -1 for an idle slot. One dict lookup per batch entry,
        the rest in numpy over all the steps at once (a jump draws ~200 new steps)."""
        s, n = self.max_num_seqs, len(steps)
        pal, pre, key = (np.full((s, n), -1, np.int16), np.zeros((s, n), bool),
                         np.full((s, n), -1, np.int32))
        sizes = [len(st.slots) for st in steps]
        if sum(sizes):
            ids = np.concatenate([st.request_ids for st in steps]).tolist()
            slot = np.concatenate([st.slots for st in steps])
            prefill = np.concatenate([st.is_prefill for st in steps])
            col = np.repeat(np.arange(n), sizes)
            get = self._keys.get
            keys = np.array([get(r, -1) for r in ids], np.int32)
            for i in np.flatnonzero(keys < 0).tolist():   # requests not seen before: a key each, in order
                k = get(ids[i])
                keys[i] = self._new_key(ids[i]) if k is None else k
            ok = (slot >= 0) & (slot < s)
            at = slot[ok], col[ok]
            key[at] = keys[ok]
            pal[at] = self._pal_of_key[keys[ok]]
            pre[at] = prefill[ok]
        return pal, pre, key

    # --- data in -------------------------------------------------------------------------
    def set_records(self, records: Sequence[StepSummary | StepRecord], shown_step: int,
                    max_num_seqs: int | None = None, latest_step: int | None = None) -> None:
        """Show ``records`` (step summaries or records; those inside the step span are drawn)
        up to ``shown_step``; the span covers the run up to ``latest_step`` while it fits in
        ``window``. Only the columns whose step changed are redrawn (one a frame while the run
        advances): the grid and the image are kept while the span stays put."""
        new_keys = (max_num_seqs and max_num_seqs != self.max_num_seqs) or len(self._ids) > MAX_KEYS
        if new_keys:
            self.max_num_seqs = max_num_seqs or self.max_num_seqs
            self.shown_slots = np.arange(self.max_num_seqs)
            self.row_px = row_px(self.max_num_seqs)
            self._keys, self._ids, self._pal_of_key = {}, [], np.zeros(0, np.int16)
            self._set_slot_ticks()
        latest = shown_step if latest_step is None else latest_step
        self.shown_step = shown_step
        self.first_step, self.span = x0, w = step_span(shown_step, latest, self.window)
        recs = as_summaries([r for r in records if x0 <= r.step <= shown_step])
        self.by_step = {r.step: r for r in recs}
        s = self.max_num_seqs
        if new_keys or self._grid is None or self._grid_at != (x0, w, s):
            self._move_grid(x0, w, s, keep=not new_keys)
        want: list = [None] * w
        for r in recs:
            want[r.step - x0] = r
        drawn = self._drawn
        changed = [j for j in range(w) if want[j] is not drawn[j]]
        if changed:
            cols = self._columns([want[j] if want[j] is not None else _NO_STEP for j in changed])
            for grid, c in zip(self._grid, cols):
                grid[:, changed] = c
            for j in changed:
                drawn[j] = want[j]
        rows_changed = self._choose_rows()
        # compact: the slots shown of all (the label's size is fixed: no relayout, keep it short)
        slots = f"{len(self.shown_slots)}/{s}" if self.compact else f"{s}"
        self.title_numbers.setText(f"  ·  {slots} slots  ·  steps {x0}–{max(shown_step, x0)}", f"  ·  {slots} slots")
        self._paint(changed if self.image is not None and not rows_changed else None)

    def _move_grid(self, x0: int, w: int, s: int, keep: bool) -> None:
        """A grid for the steps ``x0 .. x0 + w - 1``, keeping the columns of the steps it shares
        with the old grid (``keep``), and their pixels: the span pages forward (or grows) with
        only the new columns painted (by :meth:`set_records`, as any changed column)."""
        old, old_at, old_drawn, old_image = self._grid, self._grid_at, self._drawn, self.image
        self._grid_at, self._drawn = (x0, w, s), [None] * w
        self._grid = (np.full((s, w), -1, np.int16), np.zeros((s, w), bool),
                      np.full((s, w), -1, np.int32))
        self.image = None
        if not (keep and old is not None and old_at[2] == s):
            return
        ox0, ow = old_at[0], old_at[1]
        lo, hi = max(x0, ox0), min(x0 + w, ox0 + ow)
        if lo >= hi:
            return
        for new, prev in zip(self._grid, old):
            new[:, lo - x0:hi - x0] = prev[:, lo - ox0:hi - ox0]
        self._drawn[lo - x0:hi - x0] = old_drawn[lo - ox0:hi - ox0]
        if old_image is not None and old_image.shape == (len(self.shown_slots) * self.row_px, ow):
            # the kept columns' pixels move with them; the others are idle until drawn
            image = np.empty((len(self.shown_slots) * self.row_px, w), np.uint32)
            image[:, lo - x0:hi - x0] = old_image[:, lo - ox0:hi - ox0]
            rest = [j for j in range(w) if not lo - x0 <= j < hi - x0]
            if rest:                                        # idle columns, all alike
                image[:, rest] = self._pixels(rest[:1])
            self.image = image
            self.item.set_packed(image)

    def set_selected(self, request_id: str | None) -> None:
        if request_id != self.selected:
            self.selected = request_id
            if self._grid is not None:
                self._paint()

    def _paint(self, columns: list[int] | None = None) -> None:
        """Paint the image from the grid: every column, or only ``columns`` of it."""
        if self._lay_out_rows() or self.image is None:
            columns = None
        if columns is None:
            self.image = self._pixels(slice(None))
            self.item.set_packed(self.image)
        elif columns:
            self.image[:, columns] = self._pixels(columns)      # in place
        labelled = any(t.isVisible() for t in self.labels)
        moved = self._show()
        if columns:
            # repaint only those columns, unless request ids are written on the cells (a few
            # dozen rows): a text item fits its transform to the view while it paints, and
            # leaves pixels of its old place that only a repaint of the image below clears
            if moved or labelled:
                self.item.update()
            else:
                self.item.columns_changed(min(columns), max(columns))

    def _pixels(self, columns) -> np.ndarray:
        """Image pixels of the grid's ``columns`` (uint32 ``(slots * row_px, len)``)."""
        pal, pre, key = (g[self.shown_slots][:, columns] for g in self._grid)
        s, w = pal.shape
        rp = self.row_px
        if self.selected is None:
            solid, light = _SOLID[pal], _LIGHT[pal]
        else:
            faded = key != self._keys.get(self.selected, -2)
            solid = np.where(faded, _SOLID_DIM[pal], _SOLID[pal])
            light = np.where(faded, _LIGHT_DIM[pal], _LIGHT[pal])
        if rp == 1:
            return np.where(pre, light, solid)
        img = np.empty((s, rp, w), np.uint32)
        img[:, rp - 1, :] = packed(BACKGROUND)
        img[:, 0:rp - 1:2, :] = np.where(pre, light, solid)[:, None, :]
        img[:, 1:rp - 1:2, :] = solid[:, None, :]
        return img.reshape(s * rp, w)

    def _show(self) -> bool:
        """Put the image's place, the axes' ranges, the marker and the labels on screen; True
        when a label moved, changed or came or went. The view is in window columns (x = step -
        ``first_step``): it moves only when the window's size changes (while the run is short);
        a page relabels the step axis."""
        s, w, x0 = len(self.shown_slots), self.span, self.first_step
        top, rows = self.first_row, self.visible_rows
        if self._shown_at != (w, s, top, rows):
            self._shown_at = (w, s, top, rows)
            self.item.setRect(QRectF(-0.5, -0.5, w, s))
            pi = self.plot.getPlotItem()
            pi.setXRange(-0.5, w - 0.5, padding=0)
            pi.setYRange(top - 0.5, top + rows - 0.5, padding=0)
            pi.getViewBox().updateMatrix()     # now, not while painting (a second repaint)
            self.strip_item.setRect(QRectF(-0.5, 0, w, 1))
        self.step_axis.set_offset(x0)
        self.marker.setValue(self.shown_step - x0)
        self.marker.setVisible(self.shown_step >= 0)
        self._paint_strip()
        return self._place_labels(self._grid[2][self.shown_slots[top:top + rows]], top)

    def _paint_strip(self) -> None:
        """The occupancy strip: per step column, the share of all slots that decoded (solid,
        from the bottom) and ran a prefill chunk (amber, above it); idle above both."""
        _pal, pre, key = self._grid
        used = (key >= 0).sum(axis=0)
        num_prefill = (pre & (key >= 0)).sum(axis=0)
        s = self.max_num_seqs
        h = STRIP_PX
        decode_top = np.rint((used - num_prefill) * h / s)          # rows from the bottom
        all_top = np.rint(used * h / s)
        y = (h - 1 - np.arange(h))[:, None]                         # rows from the bottom
        img = np.where(y < decode_top[None, :], packed(STRIP_DECODE),
                       np.where(y < all_top[None, :], packed(STRIP_PREFILL), packed(IDLE)))
        self.strip_image = img.astype(np.uint32)
        self.strip_item.set_packed(self.strip_image)

    def _place_labels(self, key: np.ndarray, top: int = 0) -> bool:
        """Write the request id at the start of every run of cells wide enough to hold it, in
        the rows on screen (``key``: theirs, the first being row ``top``), when rows are tall
        enough to read (:data:`LABEL_ROW_PX`: a few dozen rows). Only labels that changed are
        touched (a text item's every change repaints it); True when any did."""
        vb = self.plot.getPlotItem().getViewBox()
        px_per_step = max(vb.width(), 1.0) / max(self.span, 1)
        min_run = max(1, int(np.ceil(LABEL_PX / px_per_step)))
        runs = []
        if vb.height() / max(len(key), 1) >= LABEL_ROW_PX - 0.5:
            for slot, row in enumerate(key, start=top):
                edges = np.flatnonzero(np.diff(np.r_[-2, row, -2]))
                for a, b in zip(edges[:-1], edges[1:]):
                    if row[a] >= 0 and b - a >= min_run:
                        runs.append((slot, a, self._ids[row[a]]))
        runs = runs[:MAX_LABELS]
        while len(self.labels) < len(runs):
            t = pg.TextItem(color="#101114", anchor=(0, 0.5))
            font = QFont()
            font.setPointSize(8)
            font.setBold(True)
            t.setFont(font)
            # the text as a pixmap: the image's repaint under it does not lay the text out again
            t.textItem.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            self.plot.getPlotItem().addItem(t)
            self.labels.append(t)
            self._label_looks.append(None)
        changed = False
        for i, (t, (slot, col, rid)) in enumerate(zip(self.labels, runs)):
            look = (rid, "#101114" if self.selected in (None, rid) else "#a0a4ab",
                    col - 0.5 + 2 / px_per_step, slot - 0.5 / self.row_px)
            if self._label_looks[i] != look or not t.isVisible():
                changed = True
                self._label_looks[i] = look
                t.setText(look[0])
                t.setColor(look[1])
                t.setPos(look[2], look[3])
                t.setVisible(True)
        for t in self.labels[len(runs):]:
            if t.isVisible():
                changed = True
                t.setVisible(False)
        return changed

    # --- lookups (hover, click, tests) -----------------------------------------------------
    def pixel_of(self, slot: int, step: int) -> tuple[int, int]:
        """Image (row, col) of the first painted pixel of cell (slot, step). Raises ValueError
        for a slot that compact mode does not show."""
        rows = np.flatnonzero(self.shown_slots == slot)
        if not len(rows):
            raise ValueError(f"slot {slot} is not shown (compact: only the slots used in the window)")
        return int(rows[0]) * self.row_px, step - self.first_step

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(step, slot) under view coordinates (x: the window's column, step - ``first_step``;
        y: the slot), None outside the window."""
        step, row = self.first_step + int(round(x)), int(round(y))
        if 0 <= row < len(self.shown_slots) and self.first_step <= step < self.first_step + self.span:
            return step, int(self.shown_slots[row])
        return None

    def entry_at(self, step: int, slot: int) -> BatchEntry | None:
        """The batch entry that held ``slot`` in ``step`` (None: idle or not drawn)."""
        rec = self.by_step.get(step)
        return None if rec is None else next((e for e in rec.scheduled if e.slot == slot), None)

    def describe(self, step: int, slot: int) -> str:
        e = self.entry_at(step, slot)
        if e is None:
            return f"step {step} · slot {slot}\nidle"
        phase = "prefill chunk" if e.is_prefill else "decode"
        return (f"step {step} · slot {slot}\n{e.request_id}  ({phase})\n{e.num_tokens} tokens "
                f"[{e.num_computed_tokens} → {e.num_computed_tokens + e.num_tokens})")

    def _cell_at_scene(self, pos: QPointF) -> tuple[int, int] | None:
        vb = self.plot.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            return None
        p = vb.mapSceneToView(pos)
        return self.cell_at(p.x(), p.y())

    def _clicked(self, cell: tuple[int, int]) -> None:
        e = self.entry_at(*cell)
        if e is not None:
            self.requestSelected.emit(e.request_id)
