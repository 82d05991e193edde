"""Per-step metrics over the shown window: output tokens/s, batch size, KV usage, queue depth,
scheduled tokens, step time and the engine's wait for the recorder.

Six pyqtgraph plots in a 2x3 grid of one layout widget with linked step axes; every curve is a
long-lived PlotCurveItem updated with ``setData``. The x axis counts steps back from the shown
step (0 = the shown step, at the right edge), so it stays put while the run advances: moving
axes cost more to paint than the curves. While the run is shorter than the window the plotted
span grows with the slot timeline's; the views' x range stays ``[-window, 0]`` all along and the
curves are stretched to it (x = steps back x window / span) with the step axes' scale set to
match (``AxisItem.setScale``: ticks placed and labelled in steps), so a growing span relabels
two axes instead of moving six linked views (which re-lays out and repaints every plot). Each step's numbers come from its light summary
(:class:`ui.step_summary.StepSummary`: counts and times, no record decoded) and are computed once
(:class:`ui.record_cache.StepMemo`), so a frame costs one array per series, not a pass over
every step. A step where the user changed live knobs (``StepRecord.knobs``, recorded with the
step they first hold in) gets a dashed vertical line in every plot, and the changes in view are
listed in a line under the plots.
"""
from __future__ import annotations

import functools

from typing import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from engine.outputs import StepRecord
from ui.colors import PALETTE, css
from ui.record_cache import StepMemo, step_span
from ui.step_summary import StepSummary, as_summaries
from ui.theme import PLOT_BG, PLOT_FG, cache_decorations, style_axis

# (key, title, y label, y units, [(series, colour)])
PLOTS = (
    ("throughput", "Output tokens/s", "tokens/s", None, [("output", PALETTE[0])]),
    ("batch", "Batch size (requests scheduled)", "requests", None, [("scheduled", PALETTE[1])]),
    ("kv", "KV cache usage", "%", None, [("kv", PALETTE[2])]),
    ("queues", "Queues", "requests", None,
     [("waiting", PALETTE[3]), ("running", PALETTE[0]), ("paused", PALETTE[4])]),
    ("tokens", "Scheduled tokens", "tokens", None, [("tokens", PALETTE[5])]),
    ("time", "Step time", "ms", None,
     [("step_ms", PALETTE[6]), ("recorder_wait_ms", PALETTE[7])]),
)
# step_metrics keys, in the order of metric_row's tuple
FIELDS = ("step", "seconds", "new", "scheduled", "tokens", "kv", "waiting", "running", "paused",
          "step_ms", "recorder_wait_ms")
KNOB_COLOR = (237, 201, 72)       # the knob-change markers and their line
MAX_KNOB_LINES = 3                # knob changes listed under the plots (the newest)


def knobs_text(changes: Sequence[tuple[int, Sequence[tuple[str, int]]]]) -> str:
    """'knobs changed: step 30: max_num_seqs → 2, num_usable_blocks → 40' for ``(step,
    StepRecord.knobs)`` pairs in step order (the newest :data:`MAX_KNOB_LINES`); '' if none."""
    if not changes:
        return ""
    more = f"{len(changes) - MAX_KNOB_LINES} earlier, " if len(changes) > MAX_KNOB_LINES else ""
    return "knobs changed: " + more + "; ".join(
        f"step {step}: " + ", ".join(f"{name} → {value:,}" for name, value in knobs)
        for step, knobs in changes[-MAX_KNOB_LINES:])


def _label(key: str) -> str:
    return key.removesuffix("_ms").replace("_", " ")


def metric_row(s: StepSummary, simulated: bool = False) -> tuple:
    """One step's numbers, in :data:`FIELDS` order (seconds of the step, counts, KV %, ms). The
    step's seconds are its wall time, or for a simulated run its simulated duration
    (``token_time - clock``), so tokens/s and step times are those of the simulated device."""
    dur_ns = max(round((s.token_time - s.clock) * 1e9) if simulated else s.end_ns - s.start_ns, 1)
    return (s.step, dur_ns * 1e-9, s.num_new_tokens, len(s.slots), s.total_num_scheduled_tokens,
            100.0 * s.kv_cache_usage, s.num_waiting, s.num_running, s.num_paused, dur_ns * 1e-6,
            s.recorder_wait_ns * 1e-6)


def step_metrics(steps: Sequence[StepSummary | StepRecord],
                 rows: Sequence[tuple] | None = None) -> dict[str, np.ndarray]:
    """float64 arrays over ``steps`` (summaries or records, in step order), one per
    :data:`FIELDS` key plus ``output`` (output tokens/s = new tokens / step wall time).
    ``rows``: their :func:`metric_row`s when already known."""
    rows = [metric_row(s) for s in as_summaries(steps)] if rows is None else rows
    table = np.array(rows, float).reshape(len(rows), len(FIELDS))
    m = {k: table[:, i] for i, k in enumerate(FIELDS)}
    m["output"] = m["new"] / np.maximum(m["seconds"], 1e-9)
    return m


class WindowCurve(pg.PlotCurveItem):
    """A curve whose bounding rectangle is its view's visible rectangle, not its data's: a
    ``PlotCurveItem`` recomputes its data's bounds (two NaN-aware min / max passes and a pixel
    size) after every ``setData``, nine curves a frame, although a metrics curve always spans
    the plot (its x range is the window; what leaves the view is not drawn anyway). The
    rectangle is worked out again only when the view's range or transform changes."""

    def __init__(self, *args, **kwargs) -> None:
        self._view_rect = None
        super().__init__(*args, **kwargs)

    def boundingRect(self):
        if self._view_rect is None:
            vb = self.getViewBox()
            if vb is None:
                return super().boundingRect()
            self._view_rect = vb.viewRect()
        return self._view_rect

    def viewRangeChanged(self) -> None:
        self.prepareGeometryChange()
        self._view_rect = None
        super().viewRangeChanged()

    def viewTransformChanged(self) -> None:
        self._view_rect = None
        super().viewTransformChanged()


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= ``x`` (>= 1): y ranges that change
    rarely, so axes are not re-laid out every frame."""
    x = max(float(x), 1.0)
    base = 10.0 ** np.floor(np.log10(x))
    return next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= x)


class MetricsPlots(QWidget):
    """``set_records(steps, shown_step, latest_step)`` redraws every curve (``steps``:
    :class:`~ui.step_summary.StepSummary` s, or ``StepRecord`` s).

    All plots live in ONE ``pg.GraphicsLayoutWidget`` (one scene to paint); only the bottom row
    shows step ticks (the x axes are linked) and y ranges snap to :func:`nice_ceiling`, so a
    frame re-lays out two axes, not twelve."""

    def __init__(self, window: int = 200, parent: QWidget | None = None):
        super().__init__(parent)
        self.window = window
        self.metrics: dict[str, np.ndarray] = step_metrics(())
        self._memo = StepMemo(metric_row)
        self.simulated = False
        self.layout_widget = pg.GraphicsLayoutWidget(border=False)
        self.layout_widget.setBackground(PLOT_BG)
        self.layout_widget.ci.setSpacing(0)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.layout_widget)
        self.knob_label = QLabel("")
        self.knob_label.setStyleSheet(f"color: {css(KNOB_COLOR)};")
        self.knob_label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)   # long text: cut
        self.knob_label.setVisible(False)
        lay.addWidget(self.knob_label)
        self._knob_lines: dict[str, list[pg.InfiniteLine]] = {}
        self._knob_x: list[int] = []
        self.knob_steps: list[int] = []        # steps in view where knobs changed
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotCurveItem] = {}
        self._span = 0
        self._top: dict[str, float] = {}
        rows = (len(PLOTS) + 1) // 2
        first = None
        for i, (key, title, ylabel, units, series) in enumerate(PLOTS):
            p = self.layout_widget.addPlot(row=i // 2, col=i % 2)
            p.setMenuEnabled(False)
            p.hideButtons()
            if len(series) > 1:
                title += "<span style='font-size:8pt'>" + "".join(
                    f" <span style='color:{css(c)}'>&#9644;{_label(n)}</span>" for n, c in series) + "</span>"
            p.setTitle(title, color=PLOT_FG, size="9pt")
            p.setMouseEnabled(False, False)
            # no grid: grid lines belong to the axes, and would repaint every axis on each frame
            style_axis(p.getAxis("left"), ylabel, units)
            p.getAxis("left").enableAutoSIPrefix(False)
            p.getAxis("left").setWidth(60)
            bottom = p.getAxis("bottom")
            bottom.enableAutoSIPrefix(False)
            if i // 2 == rows - 1:
                style_axis(bottom, "steps before the shown step")
            else:
                p.hideAxis("bottom")
            # bare curves (no scatter item to keep up to date), 1-pixel pens: a wider pen goes
            # through Qt's stroker and doubles the plots' paint time
            for name, color in series:
                self.curves[name] = WindowCurve(pen=pg.mkPen(color, width=1), skipFiniteCheck=True)
                p.addItem(self.curves[name])
            p.setYRange(0, 100 if key == "kv" else 1, padding=0.02)
            cache_decorations(p)
            if first is None:
                first = p
                p.setXRange(-window + 0.5, 0.5, padding=0)
            else:
                p.setXLink(first)
            self.plots[key] = p
        self._step_axes = [self.plots[key].getAxis("bottom")       # the ones shown
                           for i, (key, *_) in enumerate(PLOTS) if i // 2 == rows - 1]

    def set_records(self, records: Sequence[StepSummary | StepRecord], shown_step: int,
                    latest_step: int | None = None) -> None:
        """Plot the last ``span`` of ``records`` up to ``shown_step`` (``span``: the slot
        timeline's number of steps)."""
        latest = shown_step if latest_step is None else latest_step
        _first, span = step_span(shown_step, latest, self.window)
        recs = as_summaries([r for r in records if shown_step - span < r.step <= shown_step])
        m = self.metrics = step_metrics(recs, self._memo.get(recs))
        x = (m["step"] - shown_step) * (self.window / span)
        for name, curve in self.curves.items():
            curve.setData(x, m[name])
        for key, _t, _l, _u, series in PLOTS:
            if key != "kv":      # y from 0 to the window's maximum: no jitter, no false zero
                top = nice_ceiling(max([1.0] + [float(m[n].max()) for n, _c in series if len(m[n])]))
                if self._top.get(key) != top:
                    self._top[key] = top
                    self.plots[key].setYRange(0, top * 1.05, padding=0)
        if span != self._span:
            self._span = span
            for axis in self._step_axes:
                axis.setScale(span / self.window)
        self._show_knobs([(s.step, s.knobs) for s in recs if s.knobs], shown_step)

    def _show_knobs(self, changes: list[tuple[int, tuple]], shown_step: int) -> None:
        """Dashed lines at the steps of ``changes`` (``(step, knobs)``) in every plot, and their
        text under the plots; nothing to do in the common frame without any."""
        stretch = self.window / self._span if self._span else 1.0    # as the curves are
        xs = [(step - shown_step) * stretch for step, _ in changes]
        if xs == self._knob_x:
            return
        self._knob_x, self.knob_steps = xs, [step for step, _ in changes]
        pen = pg.mkPen(KNOB_COLOR, width=1, style=Qt.DashLine)
        for key, plot in self.plots.items():
            lines = self._knob_lines.setdefault(key, [])
            while len(lines) < len(xs):
                lines.append(pg.InfiniteLine(angle=90, movable=False, pen=pen))
                plot.addItem(lines[-1])
            for i, line in enumerate(lines):
                line.setVisible(i < len(xs))
                if i < len(xs):
                    line.setPos(xs[i])
        text = knobs_text(changes)
        self.knob_label.setText(text)
        self.knob_label.setToolTip(text)
        self.knob_label.setVisible(bool(text))

    def set_simulated(self, simulated: bool) -> None:
        """Plot a simulated run's step times and tokens/s in simulated seconds."""
        if simulated != self.simulated:
            self.simulated = simulated
            self._memo = StepMemo(functools.partial(metric_row, simulated=simulated))

    def mean_output_tps(self, last: int = 10) -> float | None:
        """Mean output tokens/s over the last ``last`` plotted steps (None with no steps)."""
        new, sec = self.metrics["new"][-last:], self.metrics["seconds"][-last:]
        return float(new.sum() / sec.sum()) if len(sec) else None
