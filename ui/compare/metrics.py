"""Metrics of several runs overlaid: output tokens/s, running and waiting requests and KV cache
usage over the whole run, a line per run in the run's colour, and one cursor at the shared
position. Whole-run columns are read once (:func:`run_columns`), curves computed once per sync mode
(:func:`run_series`); a frame only moves the cursor."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from ui.style.colors import RGB, css
from engine.state.source import StepSource
from ui.step_summary import fetch_summaries
from ui.style.theme import PLOT_BG, PLOT_FG, cache_decorations, style_axis

# (key, title); each run gives one curve per key
PLOTS = (("throughput", "Output tokens / {unit}"), ("running", "Running requests"),
         ("waiting", "Waiting requests"), ("kv", "KV cache usage %"))
NUM_BINS = 120        # throughput is averaged over this many bins of the x axis
COLUMNS = ("step", "clock", "token_time", "new", "running", "waiting", "kv")


CHUNK = 4096        # steps summarised at a time by run_columns (their batch arrays are dropped)


def run_columns(source: StepSource) -> dict[str, np.ndarray]:
    """The per-step numbers the compare window needs of a whole run, float64 arrays over its
    steps: ``step``, ``clock`` (start), ``token_time`` (end), ``new`` (output tokens), ``running``,
    ``waiting``, ``kv`` (KV usage %). Read :data:`CHUNK` steps at a time, keeping only these
    columns, so memory is 56 bytes a step whatever the batch size."""
    parts: list[np.ndarray] = []
    latest = source.latest_step()
    for lo in range(0, latest + 1, CHUNK):
        parts.append(np.array([(s.step, s.clock, s.token_time, s.num_new_tokens, s.num_running, s.num_waiting,
                                100.0 * s.kv_cache_usage)
                               for s in fetch_summaries(source, lo, min(lo + CHUNK, latest + 1))],
                              np.float64).reshape(-1, len(COLUMNS)))
    table = np.concatenate(parts) if parts else np.zeros((0, len(COLUMNS)))
    return {name: table[:, i] for i, name in enumerate(COLUMNS)}


def run_series(cols: dict[str, np.ndarray], by: str, x_max: float | None = None,
               num_bins: int = NUM_BINS) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{key: (x, y)}`` (float64 arrays) of one run's :func:`run_columns` for :data:`PLOTS`,
    ``x`` = the step's start on the engine clock (``by="time"``) or its number (``"step"``).
    Throughput is output tokens per unit of the engine clock, averaged over ``num_bins`` bins of
    ``[0, x_max]``: by time, tokens by their step's ``token_time`` over the bin's width (idle
    time counts); by step, over the summed durations of the bin's steps."""
    clock, end, step, new = cols["clock"], cols["token_time"], cols["step"], cols["new"]
    x = clock if by == "time" else step
    top = float(x_max if x_max is not None else (end.max() if by == "time" and len(end) else
                                                 x.max() if len(x) else 1.0))
    edges = np.linspace(0.0, max(top, 1e-9), num_bins + 1)
    if by == "time":
        tokens, _ = np.histogram(end, edges, weights=new)
        tput = tokens / np.diff(edges)
    else:
        tokens, _ = np.histogram(step, edges, weights=new)
        busy, _ = np.histogram(step, edges, weights=end - clock)
        tput = np.divide(tokens, busy, out=np.zeros_like(tokens), where=busy > 0)
    return {"throughput": ((edges[:-1] + edges[1:]) / 2, tput), "running": (x, cols["running"]),
            "waiting": (x, cols["waiting"]), "kv": (x, cols["kv"])}


class CompareMetrics(QWidget):
    """``set_runs(series, colors, x_label, unit)`` draws each run's :func:`run_series` curves;
    ``set_cursor(x)`` moves the shared cursor. ``plots`` and ``curves[(key, run)]`` are public
    for tests."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.layout_widget = pg.GraphicsLayoutWidget(border=False)
        self.layout_widget.setBackground(PLOT_BG)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.layout_widget)
        self.plots: dict[str, pg.PlotItem] = {}
        self.cursors: dict[str, pg.InfiniteLine] = {}
        self.curves: dict[tuple[str, int], pg.PlotCurveItem] = {}
        first = None
        for i, (key, _title) in enumerate(PLOTS):
            p = self.layout_widget.addPlot(row=0, col=i)
            p.setMenuEnabled(False)
            p.hideButtons()
            p.setMouseEnabled(False, False)
            style_axis(p.getAxis("left"))
            p.getAxis("left").setWidth(48)
            style_axis(p.getAxis("bottom"))
            cache_decorations(p)
            self.cursors[key] = pg.InfiniteLine(angle=90, movable=False,
                                                pen=pg.mkPen("#ffffff", width=1, style=Qt.DashLine))
            p.addItem(self.cursors[key])
            if first is None:
                first = p
            else:
                p.setXLink(first)
            self.plots[key] = p

    def set_runs(self, series: Sequence[dict[str, tuple[np.ndarray, np.ndarray]]], colors: Sequence[RGB],
                 x_label: str, unit: str) -> None:
        """Replace the curves: ``series[r]`` is run r's :func:`run_series` (in ``colors[r]``)."""
        for curve in self.curves.values():
            curve.getViewBox().removeItem(curve) if curve.getViewBox() else None
        self.curves.clear()
        for key, title in PLOTS:
            p = self.plots[key]
            p.setTitle(title.format(unit=unit), color=PLOT_FG, size="9pt")
            p.getAxis("bottom").setLabel(x_label, **{"color": PLOT_FG, "font-size": "9pt"})
            top = 1.0
            for r, (run, color) in enumerate(zip(series, colors)):
                x, y = run[key]
                curve = pg.PlotCurveItem(x, y, pen=pg.mkPen(color, width=2), skipFiniteCheck=True)
                p.addItem(curve)
                self.curves[(key, r)] = curve
                top = max(top, float(y.max()) if len(y) else 0.0)
            p.setYRange(0, 100 if key == "kv" else top * 1.05, padding=0)
        right = max((float(run[k][0].max()) for run in series for k, _ in PLOTS if len(run[k][0])), default=1.0)
        self.plots[PLOTS[0][0]].setXRange(0, right, padding=0.01)

    def set_cursor(self, x: float) -> None:
        for line in self.cursors.values():
            line.setPos(x)


def legend_html(names: Sequence[str], colors: Sequence[RGB]) -> str:
    """'▬ static  ▬ fcfs' in the runs' colours."""
    return " &nbsp; ".join(f"<span style='color:{css(c)}'>&#9644;&#9644;</span>&nbsp;{n}"
                           for n, c in zip(names, colors))
