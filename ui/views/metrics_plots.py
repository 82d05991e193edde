"""Per-step metrics over the shown window: output tokens/s, batch size, KV usage, queue depth,
scheduled tokens, step time, roofline efficiency and the engine's wait for the recorder.

Step time is on the run's clock: a simulated run's is the simulated device's (its plot says
"simulated"), a model run's is wall time. The recorder wait is always wall time (how long the
engine waited for the writer), so it has a plot of its own: one ms axis for both mixed the two.

Eight pyqtgraph plots in a grid of two columns of one layout widget with linked step axes (with
an odd count, the last spans both); every curve is a
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

Roofline efficiency is each step's roofline floor / its time (``recordings.metrics.roofline``: the cost
model of ``batchscope bench`` and the simulated executor, fed the step's scheduled tokens and
context lengths), against the shape and device peaks the run's provenance names
(:meth:`MetricsPlots.set_run_info`). A simulated run's is labelled as the simulator's assumption;
a run without peaks or shape shows, in place of the curve, why.
"""
from __future__ import annotations

import functools

from typing import Mapping, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics, QTextDocument
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from engine.outputs import StepRecord
from engine.run_info import RunInfo
from recordings.metrics.roofline import Roofline, roofline_of
from ui.style.colors import MUTED, PALETTE, TEXT, css
from recordings.numbers import number_text
from ui.record_cache import StepMemo, step_span
from ui.step_summary import StepSummary, as_summaries
from ui.style.theme import PLOT_BG, PLOT_FG, cache_decorations, style_axis

TPS_WINDOW = 16     # output tokens/s: tokens over time of this many steps (status bar and plot)
TPS_WORDS = f"{TPS_WINDOW}-step mean"
# (key, title, y label, y units, [(series, colour)])
PLOTS = (
    # the averaging window on a line of its own: a half-width plot cut it off after the name
    ("throughput", f"Output tokens/s<br><span style='font-size:8pt; color:{css(MUTED)}'>{TPS_WORDS}</span>",
     "tokens/s", None, [("output", PALETTE[0])]),
    ("batch", "Batch size", "requests", None, [("scheduled", PALETTE[1])]),
    ("kv", "KV cache usage", "%", None, [("kv", PALETTE[2])]),
    ("queues", "Queues", "requests", None,
     [("waiting", PALETTE[3]), ("running", PALETTE[0]), ("swapped", PALETTE[10]), ("paused", PALETTE[4])]),
    ("tokens", "Scheduled tokens", "tokens", None, [("tokens", PALETTE[5])]),
    # step time is the simulated device's in a simulated run (:meth:`MetricsPlots.set_simulated`
    # labels it so); the engine's wait for the recorder is always wall time: a plot of its own
    ("time", "Step time", "ms", None, [("step_ms", PALETTE[6])]),
    ("efficiency", "Roofline efficiency", "%", None, [("efficiency", TEXT)]),
    ("recorder", "Recorder wait", "wall ms", None, [("recorder_wait_ms", PALETTE[7])]),
)
# step_metrics keys, in the order of metric_row's tuple
FIELDS = ("step", "seconds", "new", "scheduled", "tokens", "kv", "waiting", "running", "paused",
          "step_ms", "recorder_wait_ms", "floor_s", "arrivals", "finished")
KNOB_COLOR = (237, 201, 72)       # the knob-change markers and their line
MAX_KNOB_LINES = 3                # knob changes listed under the plots (the newest)
AXIS_PX = 60                      # each plot's y axis: its label and values up to "20,000"
TITLE_SLACK_PX = 16               # beside the widest title in the panel's minimum width
EFFICIENCY_NOTE_SHORT = "none: why in the tooltip"    # the note where its plot is too short for it
EFFICIENCY_NOTE_MARGIN = 8        # pixels: the note that replaces the efficiency curve wraps this
                                  # far inside its plot (it must not paint over the neighbours)


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


def legend_title(title: str, series: Sequence[tuple[str, tuple[int, int, int]]], per_line: int = 2) -> str:
    """``title`` followed by a legend of ``series`` (``(name, colour)``: a swatch in the curve's
    colour and the name), ``per_line`` entries a line (HTML): a half-width plot's title
    must fit its column, or it widens the column and the panel's right column is cut off."""
    entries = [f"<span style='color:{css(c)}'>&#9644;{_label(n)}</span>" for n, c in series]
    lines = [" ".join(entries[i:i + per_line]) for i in range(0, len(entries), per_line)]
    return f"{title} <span style='font-size:8pt'>" + "<br>".join(lines) + "</span>"


class NarrowTitle(pg.LabelItem):
    """A plot title that claims no width: pyqtgraph's label makes its text's width its minimum
    (on every text change and resize), so a long title widened its column and pushed the other
    column out of a narrow panel. Text wider than the plot is clipped at the plot's edges."""

    def updateMin(self) -> None:  # noqa: N802 - pyqtgraph's name
        super().updateMin()
        self.setMinimumWidth(0)
        self._sizeHint[Qt.SizeHint.MinimumSize] = (0, self.minimumHeight())
        self._sizeHint[Qt.SizeHint.PreferredSize] = (0, self.minimumHeight())
        self.setFlag(self.GraphicsItemFlag.ItemClipsChildrenToShape, True)
        self.updateGeometry()                   # the layout caches size hints


def set_title(plot: pg.PlotItem, html: str) -> None:
    """``plot``'s title (9 pt, the plots' text colour) in a :class:`NarrowTitle`."""
    if not isinstance(plot.titleLabel, NarrowTitle):
        plot.layout.removeItem(plot.titleLabel)
        if plot.scene() is not None:
            plot.scene().removeItem(plot.titleLabel)
        plot.titleLabel = NarrowTitle("", size="9pt", justify="left", parent=plot)   # cut at the right
        plot.layout.addItem(plot.titleLabel, 0, 1)
    plot.setTitle(html, color=PLOT_FG, size="9pt")


def metric_row(s: StepSummary, simulated: bool = False, roofline: Roofline | None = None) -> tuple:
    """One step's numbers, in :data:`FIELDS` order (seconds of the step, counts, KV %, ms, the
    roofline floor in seconds: 0 without a ``roofline`` cost model, the requests that arrived in
    the step and those finished by its end). The step's seconds are its
    wall time, or for a simulated run its simulated duration (``token_time - clock``), so
    tokens/s and step times are those of the simulated device."""
    dur_ns = max(round((s.token_time - s.clock) * 1e9) if simulated else s.end_ns - s.start_ns, 1)
    floor = 0.0
    if roofline is not None and roofline.cost is not None:
        floor = float(roofline.floors_s(s.num_tokens, s.num_computed_tokens, (0, len(s.slots)), (s.num_new_tokens,))[0])
    return (s.step, dur_ns * 1e-9, s.num_new_tokens, len(s.slots), s.total_num_scheduled_tokens,
            100.0 * s.kv_cache_usage, s.num_waiting, s.num_running, s.num_paused, dur_ns * 1e-6,
            s.recorder_wait_ns * 1e-6, floor, s.num_arrivals, s.num_finished)


def step_metrics(steps: Sequence[StepSummary | StepRecord], rows: Sequence[tuple] | None = None,
                 num_swapped: int | None = None) -> dict[str, np.ndarray]:
    """float64 arrays over ``steps`` (summaries or records, in step order, consecutive), one per
    :data:`FIELDS` key plus ``output`` (output tokens/s, :func:`output_tps`: the
    :data:`TPS_WINDOW` steps up to each step),
    ``efficiency`` (roofline floor / step time, in %) and ``swapped`` (:func:`swapped_counts`
    from ``num_swapped``, the swapped queue after the last step; empty when not given).
    ``rows``: their :func:`metric_row`s when already known."""
    rows = [metric_row(s) for s in as_summaries(steps)] if rows is None else rows
    table = np.array(rows, float).reshape(len(rows), len(FIELDS))
    m = {k: table[:, i] for i, k in enumerate(FIELDS)}
    m["output"] = output_tps(m["new"], m["seconds"])
    m["efficiency"] = 100.0 * m["floor_s"] / np.maximum(m["seconds"], 1e-9)
    m["swapped"] = np.zeros(0) if num_swapped is None else swapped_counts(m, num_swapped)
    return m


def output_tps(new: np.ndarray, seconds: np.ndarray, window: int = TPS_WINDOW) -> np.ndarray:
    """Output tokens/s at each step: the output tokens of the ``window`` steps up to it (fewer
    at the start) over their summed duration, float64 [n] from ``new`` (tokens per step) and
    ``seconds`` (each step's duration, wall or simulated), both float [n]. The ONE definition of
    output tok/s in the window: the throughput plot draws it and the status bar shows its last
    value (a mean of per-step rates would weigh a 5 ms decode step like a 500 ms prefill step:
    it read ~4x the tokens actually produced per second). Raises ValueError on arrays of
    different lengths or a ``window`` < 1."""
    new, seconds = np.asarray(new, float), np.asarray(seconds, float)
    if new.shape != seconds.shape or window < 1:
        raise ValueError(f"output_tps needs arrays of one length and window >= 1, got "
                         f"{new.shape}, {seconds.shape}, window {window}")
    def trailing(a: np.ndarray) -> np.ndarray:
        c = np.concatenate([[0.0], np.cumsum(a)])
        return c[1:] - c[np.maximum(np.arange(1, len(a) + 1) - window, 0)]
    return trailing(new) / np.maximum(trailing(seconds), 1e-9)


def swapped_counts(m: Mapping[str, np.ndarray], num_swapped: int) -> np.ndarray:
    """Requests swapped out to the CPU after each step of ``m`` (:func:`step_metrics` arrays of
    consecutive steps), float64 like them; ``num_swapped``: the swapped queue after the last
    step (its state's).

    No step column holds the swapped queue's length; it follows from what is recorded. Every
    live request is in exactly one of waiting, running, swapped, paused (the scheduler's G3
    invariant, checked on every recorded step), and the live requests change only by arrivals
    (each step's ``arrivals``) and finishes (``num_finished``, cumulative, rejections included):
    live after step s = live after the last step - the arrivals after s + the finishes after s,
    and swapped = live - waiting - running - paused. The live requests after the last step are
    its swapped queue plus its recorded counts (not the state's whole list: a live engine's state
    also holds requests injected since that step)."""
    queued = m["waiting"] + m["running"] + m["paused"]
    if not len(queued):
        return queued
    arrived_after = m["arrivals"][::-1].cumsum()[::-1] - m["arrivals"]
    live = num_swapped + queued[-1] - arrived_after + (m["finished"][-1] - m["finished"])
    return live - queued


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


def value_ticks(axis: pg.AxisItem, top: float) -> None:
    """Label 0, ``top`` / 2 and ``top`` only: pyqtgraph puts at least 2.25 major intervals and
    their minor ticks on any axis, and on these ~40-pixel plots the labels overlapped."""
    axis.setTicks([[(v, number_text(v)) for v in (0.0, top / 2, top)], []])


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
        self.simulated = False
        self.roofline: Roofline = roofline_of(RunInfo())
        self._memo = StepMemo(metric_row)
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
            wide = i == len(PLOTS) - 1 and len(PLOTS) % 2       # the last of an odd count: both columns
            p = self.layout_widget.addPlot(row=i // 2, col=i % 2, colspan=2 if wide else 1)
            p.setMenuEnabled(False)
            p.hideButtons()
            set_title(p, legend_title(title, series) if len(series) > 1 else title)
            p.setMouseEnabled(False, False)
            # no grid: grid lines belong to the axes, and would repaint every axis on each frame
            style_axis(p.getAxis("left"), ylabel, units)
            p.getAxis("left").enableAutoSIPrefix(False)
            p.getAxis("left").setWidth(AXIS_PX)
            bottom = p.getAxis("bottom")
            bottom.enableAutoSIPrefix(False)
            if i // 2 == rows - 1:
                style_axis(bottom, "step (0 = shown)")
            else:
                p.hideAxis("bottom")
            # bare curves (no scatter item to keep up to date), 1-pixel pens: a wider pen goes
            # through Qt's stroker and doubles the plots' paint time
            for name, color in series:
                self.curves[name] = WindowCurve(pen=pg.mkPen(color, width=1), skipFiniteCheck=True)
                p.addItem(self.curves[name])
            p.setYRange(0, 100 if key == "kv" else 1, padding=0.02)
            value_ticks(p.getAxis("left"), 100 if key == "kv" else 1)
            cache_decorations(p)
            if first is None or wide:
                # the range never changes (curves are stretched to it); a linked view of another
                # width would get the other's units per pixel, not its range
                first = first or p
                p.setXRange(-window + 0.5, 0.5, padding=0)
            else:
                p.setXLink(first)
            self.plots[key] = p
        for col in (0, 1):          # two equal columns, whatever the titles' lengths
            self.layout_widget.ci.layout.setColumnStretchFactor(col, 1)
        # every step axis follows the span (hidden ones cost nothing to rescale)
        self._step_axes = [p.getAxis("bottom") for p in self.plots.values()]
        self.efficiency_note = pg.TextItem(color=MUTED, anchor=(0.5, 0.5))   # why no curve
        note_font = QFont()
        note_font.setPointSize(8)
        self.efficiency_note.setFont(note_font)
        self.plots["efficiency"].addItem(self.efficiency_note, ignoreBounds=True)
        self.efficiency_note.setPos(-window / 2, 0.5)
        self._efficiency_text = ""
        self.plots["efficiency"].vb.sigResized.connect(self._fit_efficiency_note)
        for p in self.plots.values():
            p.vb.sigResized.connect(self._fit_axis_labels)
        self._show_roofline()
        self._show_clock()
        self._fit_min_width()

    def _fit_min_width(self) -> None:
        """The panel's minimum width: two columns whose titles read whole (each title line,
        legends and clock notes included, beside its axis); a narrower panel cut them
        ("KV cache usag", "Step time · simulate"). Set when a title changes."""
        font = QFont()
        font.setPointSize(9)            # set_title's size; spans inside set their own (8 pt notes)
        doc = QTextDocument()
        doc.setDefaultFont(font)
        doc.setDocumentMargin(0)
        widths = []
        for p in self.plots.values():
            doc.setHtml(p.titleLabel.text)
            widths.append(doc.idealWidth())
        widest = int(max(widths)) + 1
        width = 2 * (AXIS_PX + widest + TITLE_SLACK_PX)
        if self.minimumWidth() != width:
            self.setMinimumWidth(width)

    def _fit_axis_labels(self, *_args) -> None:
        """Show a y axis's label (its unit) only where its plot is at least as tall as the label:
        in a short window the vertical labels of plots above one another ran into each other.
        Their titles still name what is plotted; the tick values stay."""
        for p in self.plots.values():
            axis = p.getAxis("left")
            need = QFontMetrics(axis.label.font()).horizontalAdvance(axis.labelText) + 8
            show = p.vb.height() >= need
            if axis.label.isVisible() != show:
                axis.showLabel(show)
                axis.setWidth(AXIS_PX)          # kept: the plots of a column stay aligned step for step

    def _fit_efficiency_note(self, *_args) -> None:
        """Wrap the efficiency note at its plot's width (a half-width plot: a note wider than
        it painted over the plots beside it)."""
        width = self.plots["efficiency"].vb.width() - 2 * EFFICIENCY_NOTE_MARGIN
        self.efficiency_note.setTextWidth(max(width, 40.0))
        # a note taller than its plot (a short window) was cut at its top and bottom lines: the
        # one-line form then, the reason in the plot's tooltip
        note = self.efficiency_note
        for text in (self._efficiency_text, EFFICIENCY_NOTE_SHORT):
            note.setText(text)
            if note.textItem.boundingRect().height() <= self.plots["efficiency"].vb.height():
                break

    def set_records(self, records: Sequence[StepSummary | StepRecord], shown_step: int,
                    latest_step: int | None = None, num_swapped: int | None = None) -> None:
        """Plot the last ``span`` of ``records`` up to ``shown_step`` (``span``: the slot
        timeline's number of steps). ``num_swapped``: the swapped queue after ``shown_step``
        (its state's), which the swapped queue's curve is worked out from
        (:func:`swapped_counts`); without it that curve is empty."""
        latest = shown_step if latest_step is None else latest_step
        _first, span = step_span(shown_step, latest, self.window)
        recs = as_summaries([r for r in records if shown_step - span < r.step <= shown_step])
        if not recs or recs[-1].step != shown_step:
            num_swapped = None             # the count is of the shown step: it must be the last
        m = self.metrics = step_metrics(recs, self._memo.get(recs), num_swapped)
        x = (m["step"] - shown_step) * (self.window / span)
        no_roofline = self.roofline.cost is None
        for name, curve in self.curves.items():
            if not (no_roofline and name == "efficiency"):     # no floor: no curve (the note says why)
                curve.setData(x if len(m[name]) else m[name], m[name])
        for key, _t, _l, _u, series in PLOTS:
            if key != "kv" and not (no_roofline and key == "efficiency"):
                # y from 0 to the window's maximum: no jitter, no false zero
                top = nice_ceiling(max([1.0] + [float(m[n].max()) for n, _c in series if len(m[n])]))
                if self._top.get(key) != top:
                    self._top[key] = top
                    self.plots[key].setYRange(0, top * 1.05, padding=0)
                    value_ticks(self.plots[key].getAxis("left"), top)
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
            self._reset_memo()
            self._show_clock()

    def _show_clock(self) -> None:
        """Label step time with its clock (simulated or wall) and the recorder wait as wall
        time, in their titles and y axes."""
        note = f"<span style='font-size:8pt; color:{css(MUTED)}'>· {{}}</span>"
        clock = "simulated" if self.simulated else "wall"
        set_title(self.plots["time"], "Step time " + note.format(clock))
        style_axis(self.plots["time"].getAxis("left"), f"{'sim' if self.simulated else 'wall'} ms")
        set_title(self.plots["recorder"], "Recorder wait " + note.format("wall"))
        self.plots["time"].setToolTip("Each step's duration on the run's clock: " + (
            "simulated, the simulated device's time, not wall time." if self.simulated else "wall time."))
        self._fit_min_width()
        self.plots["recorder"].setToolTip("Wall time the engine waited for a full recorder queue when it "
                                          "handed over the previous step (0 while the writer keeps up); "
                                          "wall time even in a simulated run.")

    def set_run_info(self, info: RunInfo) -> None:
        """Take the run's provenance (``StepSource.run_info()``): simulated or not, and the shape
        and device peaks roofline efficiency is computed against (``recordings.metrics.roofline.roofline_of``).
        Call it when the run info changes (a live run has it once its model is loaded)."""
        self.set_simulated(bool(info.simulated))
        roofline = roofline_of(info)
        if (roofline.note, roofline.simulated) != (self.roofline.note, self.roofline.simulated):
            self.roofline = roofline
            self._reset_memo()
            self._show_roofline()

    def _reset_memo(self) -> None:
        self._memo = StepMemo(functools.partial(metric_row, simulated=self.simulated, roofline=self.roofline))

    def _show_roofline(self) -> None:
        """The efficiency plot's title, tooltip and note for :attr:`roofline`."""
        r, plot = self.roofline, self.plots["efficiency"]
        basis = ("not shown" if r.cost is None else "simulated: an assumption" if r.simulated
                 else "floor / measured step time")
        set_title(plot, f"Roofline efficiency<br><span style='font-size:8pt; color:{css(MUTED)}'>{basis}</span>")
        self._fit_min_width()
        plot.setToolTip(f"Roofline efficiency: each step's roofline floor (sum over its operators of max(FLOPs / "
                        f"peak FLOP/s, bytes / bandwidth), from its scheduled tokens and context lengths) / its "
                        f"time.\n{'No efficiency: ' if r.cost is None else 'Basis: '}{r.note}")
        # the reason's first clause fits a half-width plot; the tooltip has the whole of it
        self._efficiency_text = f"No roofline efficiency: {r.note.split(' (')[0]}." if r.cost is None else ""
        self._fit_efficiency_note()
        self.efficiency_note.setVisible(r.cost is None)
        plot.getAxis("left").setStyle(showValues=r.cost is not None)   # no curve: no scale to read
        if r.cost is None:
            self.curves["efficiency"].setData([], [])
            self._top.pop("efficiency", None)
            plot.setYRange(0, 1, padding=0.02)

    def mean_output_tps(self) -> float | None:
        """Output tokens/s at the shown step as the throughput plot draws it (:func:`output_tps`,
        :data:`TPS_WINDOW` steps; None with no steps)."""
        out = self.metrics["output"]
        return float(out[-1]) if len(out) else None
