"""Per-step metrics over the shown window: output tokens/s, batch size, KV usage, queue depth.

Four pyqtgraph plots in a 2x2 grid with linked step axes; every curve is a
long-lived PlotDataItem updated with ``setData``; a dashed marker shows the displayed step.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QWidget

from engine.outputs import StepRecord
from ui.colors import PALETTE, css
from ui.record_cache import step_span
from ui.theme import PLOT_FG, plot_widget, style_axis

# (key, title, y label, y units, [(series, colour)])
PLOTS = (
    ("throughput", "Output tokens/s", "tokens/s", None, [("output", PALETTE[0])]),
    ("batch", "Batch size (requests scheduled)", "requests", None, [("scheduled", PALETTE[1])]),
    ("kv", "KV cache usage", "%", None, [("kv", PALETTE[2])]),
    ("queues", "Queues", "requests", None,
     [("waiting", PALETTE[3]), ("running", PALETTE[0]), ("paused", PALETTE[4])]),
)


def step_metrics(records: Sequence[StepRecord]) -> dict[str, np.ndarray]:
    """Arrays over ``records`` (in step order): step, wall seconds, new tokens, output tokens/s,
    scheduled requests, scheduled tokens, KV usage %, waiting, running, paused."""
    def arr(fn, dtype=float):
        return np.fromiter((fn(r) for r in records), dtype, len(records))

    dur = arr(lambda r: max(r.end_ns - r.start_ns, 1) * 1e-9)
    new = arr(lambda r: len(r.new_tokens))
    return {
        "step": arr(lambda r: r.step),
        "seconds": dur,
        "new": new,
        "output": new / dur,
        "scheduled": arr(lambda r: len(r.scheduler_output.scheduled)),
        "tokens": arr(lambda r: r.num_scheduled_tokens),
        "kv": arr(lambda r: 100.0 * r.kv_cache_usage),
        "waiting": arr(lambda r: r.num_waiting),
        "running": arr(lambda r: r.num_running),
        "paused": arr(lambda r: r.num_paused),
    }


class MetricsPlots(QWidget):
    """``set_records(records, shown_step, first_step, window)`` redraws every curve."""

    def __init__(self, window: int = 200, parent: QWidget | None = None):
        super().__init__(parent)
        self.window = window
        self.metrics: dict[str, np.ndarray] = step_metrics(())
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(2)
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.markers: list[pg.InfiniteLine] = []
        first = None
        for i, (key, title, ylabel, units, series) in enumerate(PLOTS):
            widget = plot_widget()
            grid.addWidget(widget, i // 2, i % 2)
            p = widget.getPlotItem()
            if len(series) > 1:
                title += "<span style='font-size:8pt'>" + "".join(
                    f" <span style='color:{css(c)}'>&#9644;{n}</span>" for n, c in series) + "</span>"
            p.setTitle(title, color=PLOT_FG, size="10pt")
            p.setMouseEnabled(False, False)
            # no grid: grid lines belong to the axes, and would repaint every axis on each frame
            style_axis(p.getAxis("left"), ylabel, units)
            style_axis(p.getAxis("bottom"), "step")
            p.getAxis("left").setWidth(52)
            for name, color in series:
                curve = p.plot([], [], pen=pg.mkPen(color, width=2), name=name,
                               stepMode=None, connect="finite")
                self.curves[name] = curve
            p.setYRange(0, 100 if key == "kv" else 1, padding=0.02)
            marker = pg.InfiniteLine(angle=90, movable=False,
                                     pen=pg.mkPen("#ffffff", width=1, style=Qt.DashLine))
            p.addItem(marker)
            self.markers.append(marker)
            if first is None:
                first = p
            else:
                p.setXLink(first)
            self.plots[key] = p
        for i in (0, 1):
            grid.setColumnStretch(i, 1)
            grid.setRowStretch(i, 1)
        self.curves["output"].setFillLevel(0)
        self.curves["output"].setBrush(pg.mkBrush(*PALETTE[0], 60))
        self.curves["kv"].setFillLevel(0)
        self.curves["kv"].setBrush(pg.mkBrush(*PALETTE[2], 60))

    def set_records(self, records: Sequence[StepRecord], shown_step: int,
                    latest_step: int | None = None) -> None:
        """Plot ``records`` up to ``shown_step``; the step span is the slot timeline's."""
        latest = shown_step if latest_step is None else latest_step
        first_step, span = step_span(shown_step, latest, self.window)
        recs = [r for r in records if first_step <= r.step <= shown_step]
        m = self.metrics = step_metrics(recs)
        for name, curve in self.curves.items():
            curve.setData(m["step"], m[name])
        for key, _t, _l, _u, series in PLOTS:
            if key != "kv":      # y from 0 to the window's maximum: no jitter, no false zero
                top = max([1.0] + [float(m[n].max()) for n, _c in series if len(m[n])])
                self.plots[key].setYRange(0, top * 1.08, padding=0)
        self.plots["throughput"].setXRange(first_step - 0.5, first_step + span - 0.5, padding=0)
        for marker in self.markers:
            marker.setValue(shown_step)
            marker.setVisible(shown_step >= 0)

    def mean_output_tps(self, last: int = 10) -> float | None:
        """Mean output tokens/s over the last ``last`` plotted steps (None with no steps)."""
        new, sec = self.metrics["new"][-last:], self.metrics["seconds"][-last:]
        return float(new.sum() / sec.sum()) if len(sec) else None
