"""Batch-slot timeline: one row per batch slot, one column per step, drawn as ONE image.

A cell is the request that held the slot in that step (``record.scheduled``), in the request's
colour: striped and lighter for a prefill chunk, solid for decode, dark when the slot was idle.
The view shows a window of ``window`` steps that grows from the left and then scrolls with the
run; a vertical marker shows the step on display. Each step's column (palette index, prefill
flag, request key per slot) is computed once per record (:class:`ui.record_cache.StepMemo`),
so a frame stacks cached columns and paints them with numpy: no Python per cell per frame.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from engine.outputs import BatchEntry, StepRecord
from ui.colors import (BACKGROUND, IDLE, MUTED, color_index, css, dim, lighten,
                       packed, palette_lut, request_rgb)
from ui.packed_image import PackedImageItem
from ui.pointer import track_pointer
from ui.record_cache import StepMemo, step_span
from ui.theme import plot_widget, style_axis

LABEL_PX = 56       # a run of cells this wide (screen pixels) gets its request id written on it
MAX_LABELS = 300
MAX_KEYS = 1_000_000   # request keys remembered before the key table starts over
_SOLID = palette_lut(none=IDLE)
_LIGHT = palette_lut(lambda c: lighten(c, 0.5), none=IDLE)
_SOLID_DIM = palette_lut(dim, none=IDLE)
_LIGHT_DIM = palette_lut(lambda c: dim(lighten(c, 0.5)), none=IDLE)


def row_px(num_slots: int) -> int:
    """Image pixels per slot row: 8 (7 painted, striped for prefill, + a 1-pixel gap) up to 64
    slots, 4 up to 128, then 1 (no stripes or gaps: a row is 1-2 screen pixels; a prefill
    chunk is the lighter colour)."""
    return 8 if num_slots <= 64 else 4 if num_slots <= 128 else 1


def decode_rgb(request_id: str) -> tuple[int, int, int]:
    return request_rgb(request_id)


def prefill_rgb(request_id: str) -> tuple[int, int, int]:
    """The light stripe of a prefill cell (even painted rows); odd rows are ``decode_rgb``."""
    return lighten(request_rgb(request_id), 0.5)


class SlotTimeline(QWidget):
    """``set_records(records, shown_step, max_num_seqs, latest_step)`` redraws;
    ``set_selected(id)`` fades every other request. Emits ``requestSelected(request_id)`` when
    a cell is clicked. ``image`` is the packed uint32 array on screen, ``(slots * row_px, span)``."""

    requestSelected = Signal(str)

    def __init__(self, max_num_seqs: int = 1, window: int = 200, parent: QWidget | None = None):
        super().__init__(parent)
        self.window = window
        self.max_num_seqs = max(1, max_num_seqs)
        self.row_px = row_px(self.max_num_seqs)
        self.shown_step = -1
        self.first_step, self.span = 0, window
        self.labels: list[pg.TextItem] = []
        self.selected: str | None = None
        self.by_step: dict[int, StepRecord] = {}       # the drawn records
        self._keys: dict[str, int] = {}                # request id -> small int key
        self._ids: list[str] = []                      # key -> request id
        self._pal_of_key = np.zeros(0, np.int16)       # key -> palette index
        self._memo = StepMemo(self._column)
        self._grid = None                              # (palette, prefill, key), each (slots, span)
        self.image = np.zeros((self.row_px, 1), np.uint32)
        self.plot = plot_widget()
        pi = self.plot.getPlotItem()
        pi.setMouseEnabled(False, False)
        pi.invertY(True)
        style_axis(pi.getAxis("bottom"), "step")
        style_axis(pi.getAxis("left"), "batch slot")
        self.item = PackedImageItem()
        pi.addItem(self.item)
        self.marker = pg.InfiniteLine(angle=90, movable=False,
                                      pen=pg.mkPen("#ffffff", width=1.5, style=pg.QtCore.Qt.DashLine))
        pi.addItem(self.marker)
        pi.getViewBox().sigResized.connect(lambda *_: self._grid is not None and self._paint())
        track_pointer(self.plot, self._cell_at_scene, lambda c: self.describe(*c), self._clicked)
        self.title = QLabel("Batch slots")
        self.title.setStyleSheet("font-weight: bold;")
        head = QHBoxLayout()
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(QLabel(self._legend_html()))
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.plot, 1)
        self._set_slot_ticks()

    @staticmethod
    def _legend_html() -> str:
        c = (78, 121, 167)
        sw = "<span style='color:{}'>&#9632;</span>"
        return (f"<span style='color:{css(MUTED)}'>{sw.format(css(lighten(c, 0.5)))} prefill chunk"
                f" (lighter, striped) &nbsp; {sw.format(css(c))} decode &nbsp; {sw.format(css(IDLE))} idle"
                " &nbsp; ┆ shown step</span>")

    def _set_slot_ticks(self) -> None:
        s = self.max_num_seqs
        stride = max(1, s // 16)
        ticks = [(i, str(i)) for i in range(0, s, stride)]
        self.plot.getPlotItem().getAxis("left").setTicks([ticks])

    # --- per-step columns ----------------------------------------------------------------
    def _new_key(self, request_id: str) -> int:
        k = self._keys[request_id] = len(self._ids)
        self._ids.append(request_id)
        if k == len(self._pal_of_key):
            self._pal_of_key = np.concatenate([self._pal_of_key, np.zeros(max(k, 1024), np.int16)])
        self._pal_of_key[k] = color_index(request_id)
        return k

    def _column(self, record: StepRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(palette int16, prefill bool, key int32), each ``[max_num_seqs]``, of one step;
        palette and key are -1 for an idle slot. One dict lookup per batch entry."""
        s, sched = self.max_num_seqs, record.scheduled
        pal, pre, key = np.full(s, -1, np.int16), np.zeros(s, bool), np.full(s, -1, np.int32)
        if sched:
            ids, slot, _n, _c, prefill = zip(*sched)          # BatchEntry columns, in C
            get = self._keys.get
            keys = [get(r) for r in ids]
            if None in keys:
                keys = [get(r) if get(r) is not None else self._new_key(r) for r in ids]
            keys = np.array(keys, np.int32)
            slot = np.array(slot, np.int64)
            ok = (slot >= 0) & (slot < s)
            key[slot[ok]] = keys[ok]
            pal[slot[ok]] = self._pal_of_key[keys[ok]]
            pre[slot[ok]] = np.array(prefill, bool)[ok]
        return pal, pre, key

    # --- data in -------------------------------------------------------------------------
    def set_records(self, records: Sequence[StepRecord], shown_step: int,
                    max_num_seqs: int | None = None, latest_step: int | None = None) -> None:
        """Show ``records`` (those inside the step span are drawn) up to ``shown_step``; the
        span covers the run up to ``latest_step`` while it fits in ``window``."""
        if (max_num_seqs and max_num_seqs != self.max_num_seqs) or len(self._ids) > MAX_KEYS:
            self.max_num_seqs = max_num_seqs or self.max_num_seqs
            self.row_px = row_px(self.max_num_seqs)
            self._keys, self._ids, self._pal_of_key = {}, [], np.zeros(0, np.int16)
            self._memo = StepMemo(self._column)
            self._set_slot_ticks()
        latest = shown_step if latest_step is None else latest_step
        self.shown_step = shown_step
        self.first_step, self.span = x0, w = step_span(shown_step, latest, self.window)
        recs = [r for r in records if x0 <= r.step <= shown_step]
        self.by_step = {r.step: r for r in recs}
        s = self.max_num_seqs
        pal, pre, key = np.full((s, w), -1, np.int16), np.zeros((s, w), bool), np.full((s, w), -1, np.int32)
        if recs:
            at = np.array([r.step - x0 for r in recs])
            cols = self._memo.get(recs)
            for grid, i in ((pal, 0), (pre, 1), (key, 2)):
                grid[:, at] = np.stack([c[i] for c in cols], axis=1)
        self._grid = pal, pre, key
        self.title.setText(f"Batch slots  ·  {s} slots  ·  steps {x0}–{max(shown_step, x0)}")
        self._paint()

    def set_selected(self, request_id: str | None) -> None:
        if request_id != self.selected:
            self.selected = request_id
            if self._grid is not None:
                self._paint()

    def _paint(self) -> None:
        pal, pre, key = self._grid
        s, w = pal.shape
        rp = self.row_px
        if self.selected is None:
            solid, light = _SOLID[pal], _LIGHT[pal]
        else:
            faded = key != self._keys.get(self.selected, -2)
            solid = np.where(faded, _SOLID_DIM[pal], _SOLID[pal])
            light = np.where(faded, _LIGHT_DIM[pal], _LIGHT[pal])
        if rp == 1:
            self.image = np.where(pre, light, solid)
        else:
            img = np.empty((s, rp, w), np.uint32)
            img[:, rp - 1, :] = packed(BACKGROUND)
            img[:, 0:rp - 1:2, :] = np.where(pre, light, solid)[:, None, :]
            img[:, 1:rp - 1:2, :] = solid[:, None, :]
            self.image = img.reshape(s * rp, w)
        self.item.set_packed(self.image)
        x0 = self.first_step
        self.item.setRect(QRectF(x0 - 0.5, -0.5, w, s))
        pi = self.plot.getPlotItem()
        pi.setXRange(x0 - 0.5, x0 + w - 0.5, padding=0)
        pi.setYRange(-0.5, s - 0.5, padding=0)
        self.marker.setValue(self.shown_step)
        self.marker.setVisible(self.shown_step >= 0)
        self._place_labels(key)

    def _place_labels(self, key: np.ndarray) -> None:
        """Write the request id at the start of every run of cells wide enough to hold it
        (only when rows are tall enough to read: a few dozen slots at most)."""
        vb = self.plot.getPlotItem().getViewBox()
        px_per_step = max(vb.width(), 1.0) / max(self.span, 1)
        min_run = max(1, int(np.ceil(LABEL_PX / px_per_step)))
        runs = []
        if vb.height() / max(self.max_num_seqs, 1) >= 14:
            for slot, row in enumerate(key):
                edges = np.flatnonzero(np.diff(np.r_[-2, row, -2]))
                for a, b in zip(edges[:-1], edges[1:]):
                    if row[a] >= 0 and b - a >= min_run:
                        runs.append((slot, self.first_step + a, self._ids[row[a]]))
        runs = runs[:MAX_LABELS]
        while len(self.labels) < len(runs):
            t = pg.TextItem(color="#101114", anchor=(0, 0.5))
            font = QFont()
            font.setPointSize(8)
            font.setBold(True)
            t.setFont(font)
            self.plot.getPlotItem().addItem(t)
            self.labels.append(t)
        for t, (slot, step, rid) in zip(self.labels, runs):
            t.setText(rid)
            t.setColor("#101114" if self.selected in (None, rid) else "#a0a4ab")
            t.setPos(step - 0.5 + 2 / px_per_step, slot - 0.5 / self.row_px)
            t.setVisible(True)
        for t in self.labels[len(runs):]:
            t.setVisible(False)

    # --- lookups (hover, click, tests) -----------------------------------------------------
    def pixel_of(self, slot: int, step: int) -> tuple[int, int]:
        """Image (row, col) of the first painted pixel of cell (slot, step)."""
        return slot * self.row_px, step - self.first_step

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(step, slot) under plot coordinates, None outside the window."""
        step, slot = int(round(x)), int(round(y))
        if 0 <= slot < self.max_num_seqs and self.first_step <= step < self.first_step + self.span:
            return step, slot
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
