"""Batch-slot timeline: one row per batch slot, one column per step.

A cell is the request that held the slot in that step, in the request's colour: striped and
lighter for a prefill chunk, solid for decode, dark when the slot was idle. The view shows a
window of ``window`` steps that grows from the left and then scrolls with the run; a vertical
marker shows the step on display. One long-lived ``pg.ImageItem`` holds the whole window.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from engine.outputs import ScheduledRequest, StepRecord
from ui.colors import BACKGROUND, IDLE, MUTED, as_rgba, css, dim, lighten, packed, request_rgb
from ui.pointer import track_pointer
from ui.record_cache import step_span
from ui.theme import plot_widget, style_axis

ROW_PX = 8          # image pixels per slot row: 7 painted + 1 gap
LABEL_PX = 56       # a run of cells this wide (screen pixels) gets its request id written on it
MAX_LABELS = 300


def decode_rgb(request_id: str) -> tuple[int, int, int]:
    return request_rgb(request_id)


def prefill_rgb(request_id: str) -> tuple[int, int, int]:
    """The light stripe of a prefill cell (even painted rows); odd rows are ``decode_rgb``."""
    return lighten(request_rgb(request_id), 0.5)


class SlotTimeline(QWidget):
    """``set_records(records, shown_step, max_num_seqs)`` redraws; ``set_selected(id)`` fades
    every other request. Emits ``requestSelected(request_id)`` when a cell is clicked."""

    requestSelected = Signal(str)

    def __init__(self, max_num_seqs: int = 1, window: int = 200, parent: QWidget | None = None):
        super().__init__(parent)
        self.window = window
        self.max_num_seqs = max(1, max_num_seqs)
        self.shown_step = -1
        self.first_step, self.span = 0, window
        self.labels: list[pg.TextItem] = []
        self.selected: str | None = None
        self.cells: dict[tuple[int, int], ScheduledRequest] = {}   # (step, slot) -> request
        self.image = np.zeros((ROW_PX, 1, 4), np.uint8)
        self.plot = plot_widget()
        pi = self.plot.getPlotItem()
        pi.setMouseEnabled(False, False)
        pi.invertY(True)
        style_axis(pi.getAxis("bottom"), "step")
        style_axis(pi.getAxis("left"), "batch slot")
        self.item = pg.ImageItem(axisOrder="row-major")
        pi.addItem(self.item)
        self.marker = pg.InfiniteLine(angle=90, movable=False,
                                      pen=pg.mkPen("#ffffff", width=1.5, style=pg.QtCore.Qt.DashLine))
        pi.addItem(self.marker)
        pi.getViewBox().sigResized.connect(lambda *_: self.cells and self._redraw())
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
                f" (striped) &nbsp; {sw.format(css(c))} decode &nbsp; {sw.format(css(IDLE))} idle"
                " &nbsp; ┆ shown step</span>")

    def _set_slot_ticks(self) -> None:
        s = self.max_num_seqs
        stride = max(1, s // 16)
        ticks = [(i, str(i)) for i in range(0, s, stride)]
        self.plot.getPlotItem().getAxis("left").setTicks([ticks])

    # --- data in -------------------------------------------------------------------------
    def set_records(self, records: Sequence[StepRecord], shown_step: int,
                    max_num_seqs: int | None = None, latest_step: int | None = None) -> None:
        """Show ``records`` (those inside the step span are drawn) up to ``shown_step``; the
        span covers the run up to ``latest_step`` while it fits in ``window``."""
        if max_num_seqs and max_num_seqs != self.max_num_seqs:
            self.max_num_seqs = max_num_seqs
            self._set_slot_ticks()
        latest = shown_step if latest_step is None else latest_step
        self.shown_step = shown_step
        self.first_step, self.span = step_span(shown_step, latest, self.window)
        self.cells = {(r.step, s.slot): s for r in records for s in r.scheduler_output.scheduled
                      if self.first_step <= r.step <= shown_step}
        self.title.setText(f"Batch slots  ·  {self.max_num_seqs} slots  ·  steps "
                           f"{self.first_step}–{max(shown_step, self.first_step)}")
        self._redraw()

    def set_selected(self, request_id: str | None) -> None:
        if request_id != self.selected:
            self.selected = request_id
            self._redraw()

    def _redraw(self) -> None:
        s, w, x0 = self.max_num_seqs, self.span, self.first_step
        ids = sorted({c.request_id for c in self.cells.values()})
        index = {r: i for i, r in enumerate(ids)}

        def paint(rgb, r):
            return rgb if self.selected in (None, r) else dim(rgb)

        table_solid = packed([paint(decode_rgb(r), r) for r in ids] + [IDLE])
        table_light = packed([paint(prefill_rgb(r), r) for r in ids] + [IDLE])
        who = np.full((s, w), len(ids), np.int64)
        pre = np.zeros((s, w), bool)
        for (step, slot), c in self.cells.items():
            if 0 <= slot < s:
                who[slot, step - x0] = index[c.request_id]
                pre[slot, step - x0] = c.is_prefill
        img = np.empty((s, ROW_PX, w), "<u4")
        img[:, ROW_PX - 1, :] = packed(BACKGROUND)
        base = table_solid[who]                                      # (s, w)
        img[:, 0:ROW_PX - 1:2, :] = np.where(pre, table_light[who], base)[:, None, :]
        img[:, 1:ROW_PX - 1:2, :] = base[:, None, :]
        self.image = as_rgba(img.reshape(s * ROW_PX, w))
        self.item.setImage(self.image, autoLevels=False)
        self.item.setRect(QRectF(x0 - 0.5, -0.5, w, s))
        pi = self.plot.getPlotItem()
        pi.setXRange(x0 - 0.5, x0 + w - 0.5, padding=0)
        pi.setYRange(-0.5, s - 0.5, padding=0)
        self.marker.setValue(self.shown_step)
        self.marker.setVisible(self.shown_step >= 0)
        self._place_labels(who, len(ids), ids)

    def _place_labels(self, who: np.ndarray, idle: int, ids: list[str]) -> None:
        """Write the request id at the start of every run of cells wide enough to hold it."""
        vb = self.plot.getPlotItem().getViewBox()
        px_per_step = max(vb.width(), 1.0) / max(self.span, 1)
        min_run = max(1, int(np.ceil(LABEL_PX / px_per_step)))
        runs = []
        if vb.height() / max(self.max_num_seqs, 1) >= 14:
            for slot, row in enumerate(who):
                edges = np.flatnonzero(np.diff(np.r_[-1, row, -1]))
                for a, b in zip(edges[:-1], edges[1:]):
                    if row[a] != idle and b - a >= min_run:
                        runs.append((slot, self.first_step + a, ids[row[a]]))
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
            t.setPos(step - 0.5 + 2 / px_per_step, slot - 0.5 / ROW_PX)
            t.setVisible(True)
        for t in self.labels[len(runs):]:
            t.setVisible(False)

    # --- lookups (hover, click, tests) -----------------------------------------------------
    def pixel_of(self, slot: int, step: int) -> tuple[int, int]:
        """Image (row, col) of the first painted pixel of cell (slot, step)."""
        return slot * ROW_PX, step - self.first_step

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(step, slot) under plot coordinates, None outside the window."""
        step, slot = int(round(x)), int(round(y))
        if 0 <= slot < self.max_num_seqs and self.first_step <= step < self.first_step + self.span:
            return step, slot
        return None

    def describe(self, step: int, slot: int) -> str:
        c = self.cells.get((step, slot))
        if c is None:
            return f"step {step} · slot {slot}\nidle"
        phase = "prefill chunk" if c.is_prefill else "decode"
        return (f"step {step} · slot {slot}\n{c.request_id}  ({phase})\n{c.num_tokens} tokens "
                f"[{c.num_computed_tokens} → {c.num_computed_tokens + c.num_tokens})\n"
                f"{len(c.block_ids)} blocks" + (f", {len(c.new_block_ids)} new" if c.new_block_ids else ""))

    def _cell_at_scene(self, pos: QPointF) -> tuple[int, int] | None:
        vb = self.plot.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            return None
        p = vb.mapSceneToView(pos)
        return self.cell_at(p.x(), p.y())

    def _clicked(self, cell: tuple[int, int]) -> None:
        if cell in self.cells:
            self.requestSelected.emit(self.cells[cell].request_id)
