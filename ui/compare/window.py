"""The compare window: recordings of one workload side by side (stacked), at one shared position.

Each run gets a pane with its KV block map and batch-slot timeline (the main window's
``KVBlockMap`` and ``SlotTimeline``, driven the way ``MainWindow`` drives them in replay:
``state_at(k)`` and the step summaries up to ``k``); below them the runs' metrics overlaid
(``ui.compare.metrics``), and one transport bar (``ui.transport.TransportBar``) for all. The
position is synchronised by engine time (each run shows the step it was running at that moment)
or by step number (``ui.compare.sync``; the "Sync by step" toggle, T). A header lists the headline
ratios of every run against the first (``recordings.compare.comparison``), and a panel lists every request's
E2E change and its cause (``ui.compare.requests``). Clicking a request selects it in every run:
the same request id is the same request of the workload; clicking it in the panel also shows the
moment it arrived.
"""
from __future__ import annotations

import html
from typing import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QMainWindow, QSplitter, QToolButton, QVBoxLayout, QWidget)

from engine.state.source import StepSource
from recordings.compare.comparison import HEADLINE_FIELDS, Comparison
from recordings.compare.tables import is_better, metric_label, num, ratio_text
from ui.style.colors import MUTED, PALETTE, RGB, css
from ui.compare.metrics import CompareMetrics, legend_html, run_columns, run_series
from ui.compare.requests import RequestDeltas
from ui.compare.sync import SyncClock
from ui.jump import arrival_step, parse_jump
from ui.views.block_map import KVBlockMap
from ui.record_cache import RecordCache
from ui.views.slot_timeline import SlotTimeline
from recordings.numbers import clock_text
from ui.style.theme import apply_theme, fix_size
from ui.transport import TransportBar

RUN_COLORS: tuple[RGB, ...] = (PALETTE[1], PALETTE[2], PALETTE[0], PALETTE[4], PALETTE[3], PALETTE[5])   # cyan, amber, rose, green, violet, orange
GOOD, BAD = (89, 161, 79), (225, 87, 89)
UNITS = {"wall": "s", "virtual": "steps", "sim": "sim s"}


def header_html(c: Comparison, colors: Sequence[RGB]) -> str:
    """The headline table as rich text (names escaped): a row per run and, per metric, a column
    of values (right-aligned, so digits line up) and a column of each later run's ratio to the
    first run, improvements green, regressions red; the metric's name spans both."""
    first = c.headlines[0]
    sim = " · <b>SIMULATED</b> (times in simulated seconds)" if first.simulated else ""
    muted = css(MUTED)
    gap = "&nbsp;" * 4
    cells = "".join(f"<td colspan='2' align='right' style='color:{muted}'>{gap}"
                    f"{html.escape(metric_label(attr, label, first.time_unit))}</td>"
                    for attr, label, _h, _s in HEADLINE_FIELDS)
    rows = [f"<tr><td style='color:{muted}'>one workload: {first.num_requests} requests, "
            f"clock {html.escape(first.clock)}{sim}</td>{cells}</tr>"]
    for k, h in enumerate(c.headlines):
        row = [f"<td><span style='color:{css(colors[k % len(colors)])}'>&#9632;</span> "
               f"<b>{html.escape(h.name)}</b></td>"]
        for attr, _label, _higher, spec in HEADLINE_FIELDS:
            ratio = ""
            if k:
                r = c.ratios(k)[attr]
                good = is_better(attr, r)
                color = css(GOOD) if good else css(BAD) if good is False else muted
                ratio = f"&nbsp;<b style='color:{color}'>{ratio_text(r)}</b>"
            row.append(f"<td align='right'>{gap}{num(h.value(attr), spec)}</td><td align='left'>{ratio}</td>")
        rows.append(f"<tr>{''.join(row)}</tr>")
    return f"<table cellspacing='0' cellpadding='1'>{''.join(rows)}</table>"


def _split(orientation, widgets: Sequence[QWidget], sizes: list[int] | None = None) -> QSplitter:
    """A splitter of ``widgets`` that cannot collapse them."""
    split = QSplitter(orientation)
    for w in widgets:
        split.addWidget(w)
    if sizes:
        split.setSizes(sizes)
    split.setChildrenCollapsible(False)
    return split


class RunPane(QWidget):
    """One run: its name, the shown step and time, its KV block map and its slot timeline."""

    def __init__(self, source: StepSource, name: str, color: RGB, window: int = 200):
        super().__init__()
        self.source, self.name, self.window = source, name, window
        self.cache = RecordCache(source)
        self.latest = source.latest_step()
        clock = source.run_info().config.get("clock")
        self.unit = UNITS.get(clock, "")
        self.shown = None
        title = QLabel(f"<span style='color:{css(color)}'>&#9632;</span> <b>{html.escape(name)}</b>")
        self.where = fix_size(QLabel(""), "step 8888888 of 8888888 · t = 8.888e+88 sim s")
        self.where.setStyleSheet(f"color: {css(MUTED)};")
        self.block_map = KVBlockMap(layout="auto")
        self.timeline = SlotTimeline(window=window)
        split = _split(Qt.Horizontal, [self.block_map, self.timeline], [520, 1080])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(1)
        head = QHBoxLayout()
        head.addWidget(title)
        head.addSpacing(16)
        head.addWidget(self.where)
        head.addStretch(1)
        lay.addLayout(head)
        lay.addWidget(split, 1)

    def show_step(self, k: int) -> None:
        """Show the state after step ``k`` (-1: before the first) and the steps up to it."""
        if k == self.shown:
            return
        self.shown = k
        state = self.source.state_at(k)
        records = self.cache.get(k - self.window, k + 1)
        self.block_map.set_state(state)
        self.timeline.set_records(records, k, state.max_num_seqs, self.latest)
        t = f" · t = {clock_text(state.clock, self.unit)}" if k >= 0 else ""
        self.where.setText(f"step {k} of {self.latest}{t}")

    def set_selected(self, request_id: str | None) -> None:
        self.block_map.set_selected(request_id)
        self.timeline.set_selected(request_id)


class CompareWindow(QMainWindow):
    """``CompareWindow(sources, names, comparison=None, by="time")``: the runs of ``sources``
    (recordings of one workload) side by side. Public: ``seek(tick)``, ``set_sync(by)``,
    ``select_request(id)``, ``show_request(id)``, ``panes``, ``metrics``, ``deltas`` (the
    per-request panel, shown with a ``comparison``), ``sync`` (:class:`SyncClock`), ``tick``."""

    def __init__(self, sources: Sequence[StepSource], names: Sequence[str], comparison: Comparison | None = None,
                 by: str = "time", window: int = 200, title: str = "BatchScope — compare"):
        super().__init__()
        self.sources, self.names = list(sources), list(names)
        self.colors = [RUN_COLORS[i % len(RUN_COLORS)] for i in range(len(self.sources))]
        self.columns = [run_columns(s) for s in self.sources]
        clock = self.sources[0].run_info().config.get("clock")
        self.unit = UNITS.get(clock, "")
        self.tick = 0
        apply_theme(self)
        self.setWindowTitle(title)
        self.resize(1600, 1000)
        self.header = QLabel(header_html(comparison, self.colors) if comparison is not None else
                             legend_html([html.escape(n) for n in self.names], self.colors))
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.panes = [RunPane(s, n, c, window) for s, n, c in zip(self.sources, self.names, self.colors)]
        for i, pane in enumerate(self.panes):
            pane.block_map.legend.setVisible(i == len(self.panes) - 1)   # one legend is enough
            for view in (pane.block_map, pane.timeline):
                view.requestSelected.connect(self.select_request)
        self.metrics = CompareMetrics()
        self.deltas = RequestDeltas()
        if comparison is not None and comparison.deltas:
            self.deltas.set_comparison(comparison)
        else:
            self.deltas.setVisible(False)
        self.deltas.requestSelected.connect(self.show_request)
        self.legend = QLabel(legend_html([html.escape(n) for n in self.names], self.colors))
        self.transport = TransportBar()
        for w in (self.transport.live_btn, self.transport.spin, self.transport.latest_label):
            w.setVisible(False)
        self.transport.jump.setPlaceholderText("jump: step or t=12.5")
        self.sync_btn = QToolButton()
        self.sync_btn.setText("Sync by step")
        self.sync_btn.setCheckable(True)
        self.sync_btn.setToolTip("Off: every run shows the moment of the slider on the engine clock; "
                                 "on: every run shows the same step number (T)")
        self.sync_btn.toggled.connect(lambda on: self.set_sync("step" if on else "time"))
        self.position = fix_size(QLabel(""), "t = 8.888e+88 sim s")
        self.transport.layout().insertWidget(0, self.sync_btn)
        self.transport.layout().addWidget(self.position)
        self.transport.seekRequested.connect(self.seek)
        self.transport.jumpRequested.connect(self.jump_to)
        self._build_layout()
        toggle = QAction("Sync by step", self)
        toggle.setShortcut(QKeySequence("T"))
        toggle.triggered.connect(self.sync_btn.toggle)
        play = QAction("Play", self)
        play.setShortcut(QKeySequence("Space"))
        play.triggered.connect(self.transport.toggle_pause)
        self.addActions([toggle, play])
        self.set_sync(by)

    def _build_layout(self) -> None:
        plots = QWidget()
        lay = QVBoxLayout(plots)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.legend)
        lay.addWidget(self.metrics, 1)
        bottom = _split(Qt.Horizontal, [plots, self.deltas], [1080, 520])
        main = _split(Qt.Vertical, [_split(Qt.Vertical, self.panes), bottom], [700, 260])
        central = QWidget()
        outer = QVBoxLayout(central)
        outer.setContentsMargins(6, 4, 6, 0)
        for widget, stretch in ((self.header, 0), (main, 1), (self.transport, 0)):
            outer.addWidget(widget, stretch)
        self.setCentralWidget(central)

    # --- position --------------------------------------------------------------------------
    def set_sync(self, by: str) -> None:
        """Synchronise the runs by ``"time"`` or ``"step"``, keeping the shown moment (by time:
        the first run's shown step's start; by step: the first run's shown step)."""
        old = getattr(self, "sync", None)
        first_step = old.steps_at(self.tick)[0] if old is not None else 0
        self.sync = SyncClock([run["clock"] for run in self.columns], by)
        self.sync_btn.blockSignals(True)
        self.sync_btn.setChecked(by == "step")
        self.sync_btn.blockSignals(False)
        top = (max((float(run["token_time"][-1]) for run in self.columns if len(run["step"])), default=1.0)
               if by == "time" else float(max(self.sync.latest, default=0)))
        self.metrics.set_runs([run_series(run, by, top) for run in self.columns], self.colors,
                              f"engine time ({self.unit})" if by == "time" else "step", self.unit or "s")
        for pane in self.panes:
            pane.shown = None
        self.seek(self.sync.tick_at_step(first_step) if old is not None else 0)

    def seek(self, tick: int) -> None:
        """Show position ``tick`` (clamped) in every run."""
        self.tick = max(0, min(int(tick), self.sync.last_tick))
        for pane, step in zip(self.panes, self.sync.steps_at(self.tick)):
            pane.show_step(step)
        x = self.sync.x_at(self.tick)
        self.metrics.set_cursor(x)
        self.position.setText(f"t = {clock_text(x, self.unit)}" if self.sync.by == "time" else f"step {int(x)}")
        self.transport.set_position(self.tick, self.sync.last_tick, False)

    def jump_to(self, text: str) -> bool:
        """Jump to a step number (the first run's, by time) or ``t=<engine time>``."""
        try:
            jump = parse_jump(text)
            if jump.kind == "request":
                raise ValueError("the compare window jumps to a step or a time (t=12.5)")
        except ValueError as e:
            self.transport.show_jump_error(str(e))
            return False
        self.transport.show_jump_error(None)
        self.seek(self.sync.tick_at_time(float(jump.value)) if jump.kind == "time" else
                  self.sync.tick_at_step(int(jump.value)))
        return True

    def show_request(self, request_id: str) -> None:
        """Select ``request_id`` in every run and show the moment it arrived (in the first run)."""
        self.select_request(request_id)
        try:
            self.seek(self.sync.tick_at_step(arrival_step(self.sources[0], request_id, None)))
        except ValueError:
            pass

    def select_request(self, request_id: str | None) -> None:
        """Select ``request_id`` in every run."""
        for pane in self.panes:
            pane.set_selected(request_id)

    def closeEvent(self, event) -> None:
        self.transport.timer.stop()
        super().closeEvent(event)
