"""BatchScope's main window: every view of one StepSource, live or replayed.

A 30 Hz QTimer pulls ``source.latest_step()``, whatever the engine's step rate. Following live
it shows ``state_at(latest)``; after a scrub or a jump it shows ``state_at(k)`` and the steps
``[k - window, k]`` as light summaries (``ui.step_summary``: each step's batch and counts; a
recording reads them without decoding records, and only the steps not cached yet). Views are redrawn only when the shown step, the newest state, the source or
the selection changes; while every frame draws a new step, the queue tables and the metrics
plots + inspector take turns (``ui.frame_pacer``: each at most one draw behind, caught up
once the stream stops); each view draws from the state's arrays with numpy, so a frame stays
within budget at 16k blocks, 256 running and 10k waiting (``bench/bench_ui_frame.py``). The
window never builds an engine or opens a recording itself: ``open_recording(path)`` (given by
``app/``) does.

A replayed recording is checked in the background as ``batchscope check`` does
(``ui.check_worker``: a child process with its own reader, progress in the status bar, cancelled
when another file is opened or the window closes); the status bar then says "check: clean" or the number of
problems, a button that lists them (``ui.dialogs.check``: a click shows the step). A run cut
short is marked incomplete in the title and the status bar (``ui.run_end``), with a button
that lists its unfinished requests.
"""
from __future__ import annotations

from typing import Callable, Mapping

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QGroupBox,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.run_info import RunInfo
from engine.state.source import EngineControl, RecordingSource, StepSource
from engine.state.state import EngineState
from recordings.check.invariants import Problem
from recordings.errors import RecordingError
from ui.check_worker import CheckWorker
from recordings.numbers import clock_text
from ui.dialogs.check import FindingsDialog, problem_findings, unfinished_findings
from ui.dialogs.inject import InjectDialog
from ui.dialogs.knobs import KnobsDialog
from ui.dialogs.run_summary import RunSummaryDialog, recording_path
from ui.error_banner import ErrorBanner
from ui.frame_pacer import FramePacer
from ui.inspector.inspector import RequestInspector
from ui.jump import parse_jump, resolve_jump
from ui.layout_fence import LayoutFence
from ui.fitted_label import FittedLabel
from ui.plain_text import as_rich
from ui.record_cache import RecordCache, step_span
from ui.run_end import RunEnd, run_end
from ui.step_summary import StepSummary
from ui.style.colors import ERROR, css
from ui.status_line import StatusLine
from ui.style.theme import apply_theme
from ui.transport import FRAME_MS, TransportBar
from ui.views.block_map import KVBlockMap
from ui.views.metrics_plots import TPS_WORDS, MetricsPlots
from ui.views.queue_tables import QueueTables
from ui.views.slot_timeline import SlotTimeline
from engine.plural import plural

CHECK_TIP = ("The recording checked as `batchscope check` does (integrity, rows, G1-G4 every step, G6 "
             "at the end, metrics, complete); "
             "click to list the problems")


# the status-bar fields: (full template, short template) of the widest texts, and how soon
# each gives way when the window narrows (lower first; ui.status_line). Templates with digits
# are sized again from the run's magnitudes (_fit_status_templates).
STATUS_FIELDS = {
    "mode": ("REPLAY · SIMULATED", None, 9),
    "step": ("step 8,888 of 8,888  (scrubbed)", "step 8,888/8,888", 5),
    "clock": ("clock 8,888 sim ms", "8,888 sim ms", 3),
    "kv": ("KV 100% (8,888/8,888 blocks)", "KV 100%", 2),
    "tps": (f"8,888,888 output tok/s ({TPS_WORDS})", "8,888,888 tok/s", 1),
    "threads": ("threads 88 of 88 (auto, others' load 88.8)", "threads 88 of 88", 4),
    "run": ("", "", 0),
}


MODEL_NAME_CHARS = 32      # the status bar keeps at least this much of the model's name whole


# the view groups updated at half the frame rate while draws stream (ui.frame_pacer)
SLOW_VIEWS = ("queues", "metrics")


def _group(title: str, widget: QWidget) -> QGroupBox:
    box = QGroupBox(title)
    lay = QVBoxLayout(box)
    lay.setContentsMargins(4, 6, 4, 4)
    lay.addWidget(widget)
    return box


class MainWindow(QMainWindow):
    """``MainWindow(source, control=None, open_recording=None, title="BatchScope")``.

    Public: ``set_source(source, control=None)``, ``show_step(k)`` (scrub; stops following),
    ``set_following(on)``, ``select_request(id)``, ``refresh(force=False)`` (one frame),
    ``state`` / ``records`` (the window's :class:`StepSummary` s) / ``record`` (the shown
    step's) / ``shown_step`` / ``selected`` (what is on screen), the ``actions``
    dict, and ``sourceChanged(source)`` after File > Open swapped the source.
    """

    sourceChanged = Signal(object)

    def __init__(self, source: StepSource, control: EngineControl | None = None,
                 open_recording: Callable[[str], StepSource] | None = None,
                 title: str = "BatchScope", window: int = 200):
        super().__init__()
        self.base_title, self.window = title, window
        self.open_recording = open_recording
        self.source, self.control = source, control
        self.cache = RecordCache(source)
        self.following, self.shown_step, self.selected = True, -1, None
        self.state: EngineState | None = None
        self.records: list[StepSummary] = []       # the steps of the window, light summaries
        self.record: StepSummary | None = None     # the shown step's, if available
        self._drawn: tuple | None = None
        self.pacer = FramePacer(SLOW_VIEWS)        # queue tables, metrics + inspector: by turns while streaming
        self._latest = -1                          # the newest step at the last draw
        self._source_error: str | None = None
        self.check: CheckWorker | None = None        # the background check of a replayed file
        self.check_problems: list | None = None      # its result once done
        self.damage_text: str | None = None          # a damaged file's banner (RecordingStatus._damaged)
        self.run_end: RunEnd | None = None           # how a replayed run ended
        self.findings: FindingsDialog | None = None  # the open list of problems / unfinished
        apply_theme(self)
        self.resize(1600, 1000)
        self._build_views()
        self._build_menus()
        self._build_status()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.refresh)
        self.set_source(source, control)
        self.timer.start(FRAME_MS)

    # --- construction ------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.banner = ErrorBanner()
        self.block_map = KVBlockMap(layout="auto")
        self.timeline = SlotTimeline(window=self.window)
        self.queues = QueueTables()
        self.metrics = MetricsPlots(window=self.window)
        self.inspector = RequestInspector(self.source)
        self.transport = TransportBar()
        for view in (self.block_map, self.timeline, self.queues):
            view.requestSelected.connect(self.select_request)
        self.transport.seekRequested.connect(self.show_step)
        self.transport.jumpRequested.connect(self.jump_to)
        self.transport.followToggled.connect(self.set_following)
        self.transport.engineStepped.connect(lambda: self.set_following(True))
        self.transport.knobsRequested.connect(self.edit_knobs)
        top = QSplitter(Qt.Horizontal)
        top.addWidget(self.block_map)
        top.addWidget(self.timeline)
        top.setSizes([620, 980])
        bottom = QSplitter(Qt.Horizontal)
        bottom.addWidget(_group("Requests", self.queues))
        bottom.addWidget(_group("Metrics", self.metrics))
        bottom.addWidget(_group("Selected request", LayoutFence(self.inspector)))
        bottom.setSizes([700, 520, 380])
        main = QSplitter(Qt.Vertical)
        main.addWidget(top)
        main.addWidget(bottom)
        main.setSizes([470, 430])
        for s in (top, bottom, main):
            s.setChildrenCollapsible(False)
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(6, 4, 6, 0)
        lay.setSpacing(4)
        lay.addWidget(self.banner)
        lay.addWidget(main, 1)
        lay.addWidget(self.transport)
        self.setCentralWidget(central)

    def _action(self, menu, text: str, slot, *keys: str) -> QAction:
        act = QAction(text, self)
        act.setShortcuts([QKeySequence(k) for k in keys])
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _build_menus(self) -> None:
        bar = self.menuBar()
        f, e, v = bar.addMenu("&File"), bar.addMenu("&Engine"), bar.addMenu("&View")
        self.actions = {
            "open": self._action(f, "&Open recording…", self.open_recording_dialog, "Ctrl+O"),
            "quit": self._action(f, "&Quit", self.close, "Ctrl+Q"),
            "inject": self._action(e, "&Inject request…", self.inject_request, "Ctrl+I"),
            "pause": self._action(e, "&Pause / Resume", self.transport.toggle_pause, "Space"),
            "knobs": self._action(e, "Live &knobs…", self.edit_knobs, "Ctrl+K"),
            "step": self._action(e, "&Step", self.transport.step, "S", "Right"),
            "back": self._action(v, "Step &back", self.transport.step_back, "Left"),
            "forward": self._action(v, "Step &forward", self.transport.step_forward, "Shift+Right"),
            "live": self._action(v, "Follow &live", lambda: self.set_following(True), "L"),
            "jump": self._action(v, "&Jump to…", self._focus_jump, "Ctrl+G"),
            "summary": self._action(v, "Run &summary…", self.show_run_summary, "Ctrl+M"),
        }
        f.insertSeparator(self.actions["quit"])
        self.actions["open"].setEnabled(self.open_recording is not None)

    def _build_status(self) -> None:
        """The status fields in a :class:`StatusLine`: each keeps its text whole while the window
        is wide enough, gives way by priority to its short form (the full text in its tooltip)
        when it is not, and the model line takes the room left, shortened at its end only."""
        self.status_line = StatusLine()
        self.status: dict[str, FittedLabel] = {}
        self.end_btn = self._status_button("", self.show_unfinished)
        self.check_btn = self._status_button(CHECK_TIP, self.show_problems)
        for k, (template, short, give_way) in STATUS_FIELDS.items():
            if k == "run":
                self.status_line.add(self.end_btn, 10)
                self.status_line.add(self.check_btn, 10)
            self.status[k] = self.status_line.add(
                FittedLabel(template, short, bold=k == "mode", align=Qt.AlignRight if k == "run" else Qt.AlignLeft),
                give_way, stretch=k == "run")
        self.status["threads"].hide()
        self._status_magnitudes: tuple = ()
        self.statusBar().addWidget(self.status_line, 1)

    def _set_mode(self, text: str, tip: str) -> None:
        self.status["mode"].set_templates(text)
        self.status["mode"].setText(text)
        self.status["mode"].setToolTip(tip)

    def _fit_status_templates(self, latest: int, total_blocks: int) -> None:
        """Size the step and KV fields for this run's numbers (a re-layout only when their
        digits grow: a live run's step count, another source)."""
        key = (len(f"{max(latest, 0):,}"), len(f"{total_blocks:,}"))
        if key == self._status_magnitudes:
            return
        self._status_magnitudes = key
        n, t = ("8" * k for k in key)
        self.status["step"].set_templates(f"step {n} of {n}  (scrubbed)", f"step {n}/{n}")
        self.status["kv"].set_templates(f"KV 100% ({t}/{t} blocks)", STATUS_FIELDS["kv"][1])

    # --- public API --------------------------------------------------------------------------
    def set_source(self, source: StepSource, control: EngineControl | None = None) -> None:
        """Show ``source`` (a live engine when ``control`` is given, else a replay)."""
        self.source, self.control = source, control
        self.cache = RecordCache(source)
        self.following, self.shown_step, self._drawn = True, -1, None
        self._start_check(source if control is None else None)
        self.select_request(None)
        self.inspector.set_source(source, control)
        self.queues.set_control(control)
        self.transport.set_control(control)
        if self.run_end is not None and not self.run_end.closed:
            self.transport.live_btn.show()      # a file still being written: its newest step can be followed
        for name in ("inject", "knobs"):
            self.actions[name].setEnabled(control is not None)
        self._set_mode("LIVE" if control is not None else "REPLAY", "")
        self._run_info: RunInfo | None = None
        self.time_unit = ""                  # "s" or "steps", from the run's clock
        self.policy = ""                     # the run's scheduling policy, from its config
        self.refresh(force=True)

    def _show_run_info(self) -> None:
        """Model, device and dtype in the status bar, the config as its tooltip. A live engine
        fills its run info only once the model is loaded, so this repeats until it has one."""
        info = self.source.run_info()
        if info == self._run_info:
            return
        self._run_info = info
        model = info.model
        name = str(model.get("name") or model.get("path") or "") if isinstance(model, Mapping) else model
        run_text = " · ".join(str(v) for v in (name, info.device, info.dtype) if v)
        # whole while it fits; else the model name alone (the minimum: never its start cut), then elided
        self.status["run"].set_templates(run_text, name[:MODEL_NAME_CHARS] if name else run_text[:MODEL_NAME_CHARS])
        self.status["run"].setText(run_text, name or None)
        details = {**(model if isinstance(model, Mapping) else {}), **info.config}
        self.status["run"].setToolTip(as_rich("\n".join(f"{k} = {v}" for k, v in details.items())))
        clock = info.config.get("clock")
        self.time_unit = {"wall": "s", "virtual": "steps", "sim": "sim s"}.get(clock, "")
        self.metrics.set_run_info(info)
        if info.simulated:      # a simulated executor's run: say so wherever it shows
            self._set_mode(f"{self.status['mode'].text()} · SIMULATED", "step times from the roofline cost "
                           f"model, tokens synthetic ({info.device or 'sim'}); no model ran")
        self.queues.set_time_unit(self.time_unit)
        self.policy = info.config.get("policy", "fcfs")
        self.queues.set_policy(self.policy)
        self.inspector.time_unit = self.time_unit
        self.inspector.set_text_note(
            "a simulated run has no text: its sampled tokens are synthetic ids" if info.simulated else None)
        mode = "live" if self.control is not None else "replay"
        if info.simulated:
            mode = f"simulated {mode}"
        end = self.run_end.summary() if self.run_end is not None else ""
        self.setWindowTitle(f"{self.base_title} — {name or 'run'} ({mode})" + (f" — {end}" if end else ""))

    def show_step(self, step: int) -> None:
        """Show the state after ``step`` (clamped) and stop following the newest step."""
        self.following = False
        self.shown_step = step
        self.refresh()

    def set_following(self, on: bool) -> None:
        """Follow the newest step (or stop); a click (or a single engine step), so the next draw
        updates every view at once."""
        self.following = on
        self.pacer.full_next()
        self.refresh()

    def select_request(self, request_id: str | None) -> None:
        """Select ``request_id`` in every view (None clears the selection)."""
        self.selected = request_id
        for view in (self.block_map, self.timeline, self.queues, self.inspector):
            view.set_selected(request_id)
        if self.state is not None:
            self.inspector.set_state(self.state, self.shown_step, self.record)

    def jump_to(self, text: str) -> bool:
        """Show the step ``text`` names (a step, ``t=<engine time>`` or a request id, see
        ``ui.jump``); a request is also selected. False (and the box marked) if not understood."""
        try:
            jump = parse_jump(text)
            step = resolve_jump(self.source, jump, self.state)
        except ValueError as e:
            self.transport.show_jump_error(str(e))
            self.statusBar().showMessage(str(e), 8000)
            return False
        self.transport.show_jump_error(None)
        if jump.kind == "step" and int(jump.value) != step:
            self.statusBar().showMessage(f"step {int(jump.value):,} is outside this run (steps 0–{step:,} "
                                         f"so far): showing step {step:,}", 8000)
        self.pacer.full_next()                      # a jump lands far away: every view at once
        self.show_step(step)
        if jump.kind == "request":
            self.select_request(str(jump.value))
        return True

    def _focus_jump(self) -> None:
        self.transport.jump.setFocus()
        self.transport.jump.selectAll()

    # --- the frame -----------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Pull the source and redraw what changed (called by the 30 Hz timer)."""
        try:
            if self._run_info is None or not self._run_info.model:
                self._show_run_info()
            latest = self.source.latest_step()
            k = latest if self.following else max(-1, min(self.shown_step, latest))
            # the newest state can change without a new step (a live engine's injected request)
            state = self.source.state_at(k) if k == latest else None
            old = self.state
            fresh = state is not None and state is not old and (
                old is None or state.step != old.step or state != old)
            if force or fresh or self._drawn != (k, step_span(k, latest, self.window), id(self.source)):
                if force or (self.control is not None and self.control.is_paused()):
                    self.pacer.full_next()         # a paused engine moves only when the user asks
                self._draw(k, latest, state)
            else:
                self._update_slow(self.pacer.still())      # the stream stopped: catch up
                self.queues.catch_up()                     # a table the pointer held and left to rest
            self._source_error = None
        except Exception as e:                          # a broken source must not kill the UI
            latest, k = self.shown_step, self.shown_step
            self._source_error = f"Could not read step {k}: {type(e).__name__}: {e}"
        self.transport.set_position(k, latest, self.following)
        step_text = (f"step {k:,} of {latest:,}" + ("" if self.following else "  (scrubbed)")
                     if latest >= 0 else self.transport.no_step_text())
        self.status["step"].setText(step_text, f"step {k:,}/{latest:,}" if latest >= 0 else None)
        threads = getattr(self.control, "threads_status", None)
        threads_text = (threads() or "") if callable(threads) else ""
        if self.status["threads"].text() != threads_text:    # torch's threads (app.threads), live only
            self.status["threads"].setText(threads_text, threads_text.split(" (")[0])
            self.status["threads"].setVisible(bool(threads_text))
        self._show_errors()

    def _draw(self, k: int, latest: int, state: EngineState | None = None) -> None:
        """Show step ``k``: the block map, slot timeline and status bar always; the slow view
        groups the pacer says (all unless draws stream, ``ui.frame_pacer``)."""
        self.shown_step, self._latest = k, latest
        self.state = state = state if state is not None else self.source.state_at(k)
        self.records = self.cache.get(k - self.window, k + 1)
        self.block_map.set_state(state)
        self.timeline.set_records(self.records, k, state.max_num_seqs, latest)
        self.record = self.records[-1] if self.records and self.records[-1].step == k else None
        self._update_slow(self.pacer.begin())
        self._drawn = (k, step_span(k, latest, self.window), id(self.source))
        self._fit_status_templates(latest, state.num_total_blocks)
        clock = clock_text(state.clock, self.time_unit)
        self.status["clock"].setText(f"clock {clock}", clock)
        kv = f"KV {100 * state.kv_cache_usage:.0f}%"
        self.status["kv"].setText(f"{kv} ({state.num_used_blocks:,}/{plural(state.num_total_blocks, 'block')})", kv)

    def _update_slow(self, groups: tuple[str, ...]) -> None:
        """Update the slow view ``groups`` (``SLOW_VIEWS`` names) to the shown step."""
        state, k = self.state, self.shown_step
        if "queues" in groups:
            self.queues.set_state(state, self.record)
        if "metrics" in groups:
            swapped = len(state.queue_rows("swapped")) if len(state.cpu_owner) else 0   # no swap pool: none
            self.metrics.set_records(self.records, k, self._latest, num_swapped=swapped)
            self.inspector.set_state(state, k, self.record)
            tps = self.metrics.mean_output_tps()
            self.status["tps"].setText("– tok/s" if tps is None else f"{tps:,.0f} output tok/s ({TPS_WORDS})",
                                       "– tok/s" if tps is None else f"{tps:,.0f} tok/s")

    def _show_errors(self) -> None:
        errors = [self._source_error]
        if self.control is not None:
            try:
                errors.append(self.control.last_error())
            except Exception as e:
                errors.append(f"The engine did not answer: {e}")
        failed = next((r for r in reversed(self.records) if r.error), None)
        if failed is not None:
            errors.append(f"step {failed.step}: {failed.error}")
        errors.append(self.damage_text)                 # a damaged recording, under any other error
        self.banner.show_error(next((e for e in errors if e), None))

    # --- menu actions --------------------------------------------------------------------------
    def open_recording_dialog(self) -> None:
        """File > Open recording…: pick a file, open it with ``open_recording``, swap source."""
        if self.open_recording is None:
            return
        path, _ = QFileDialog.getOpenFileName(
            self, "Open recording", "", "BatchScope recordings (*.sqlite *.db);;All files (*)")
        if path:
            self.open_path(path)

    def open_path(self, path: str) -> bool:
        """Open ``path`` as a replay; errors go to a message box. True on success."""
        self.statusBar().showMessage(f"Opening {path}…")
        QApplication.setOverrideCursor(Qt.WaitCursor)
        try:
            source = self.open_recording(path)
        except Exception as e:
            QApplication.restoreOverrideCursor()
            self.statusBar().clearMessage()
            QMessageBox.critical(self, "Could not open recording",
                                 as_rich(f"{path}\n\n{type(e).__name__}: {e}"))
            return False
        QApplication.restoreOverrideCursor()
        self.statusBar().showMessage(f"Opened {path}", 5000)
        self.set_source(source, control=None)
        self.sourceChanged.emit(source)
        return True

    def inject_request(self) -> InjectDialog | None:
        """Engine > Inject request…: a modal dialog; selects the new request on accept."""
        if self.control is None:
            return None
        dialog = InjectDialog(self.control, self, policy=self.policy)
        if dialog.exec() and dialog.request_id:
            self.select_request(dialog.request_id)
        return dialog

    def edit_knobs(self) -> KnobsDialog | None:
        """Engine > Live knobs… (a live engine, paused): the knobs dialog, open (window-modal);
        on Apply the window follows the newest state, which shows the change at once."""
        if self.control is None or self.state is None or not self.control.is_paused():
            self.statusBar().showMessage("Pause the live engine to change its knobs", 5000)
            return None
        dialog = KnobsDialog(self.control, self.state.num_total_blocks, self)
        dialog.accepted.connect(lambda: self.set_following(True))
        dialog.open()
        return dialog

    def show_run_summary(self) -> RunSummaryDialog | None:
        """View > Run summary…: the recording's metrics (``batchscope summary``), non-modal."""
        path = recording_path(self.source)
        if path is None or not path.exists():
            self.statusBar().showMessage("No recording to summarise yet", 5000)
            return None
        dialog = RunSummaryDialog(path, parent=self)
        dialog.show()
        return dialog

    def closeEvent(self, event) -> None:
        self._stop_check(wait=True)
        self.timer.stop()
        self.transport.timer.stop()
        super().closeEvent(event)

    # ---- The replayed recording's background check and its end, in the status bar ----
    def _status_button(self, tip: str, slot) -> QToolButton:
        b = QToolButton()
        b.setAutoRaise(True)
        b.setToolTip(tip)
        b.clicked.connect(slot)
        b.hide()
        return b

    # --- the recording's check and end ------------------------------------------------------------
    def _start_check(self, source) -> None:
        """Cancel the running check; for a replayed recording (``source`` with a ``path``), mark
        a run cut short and start checking the file in the background."""
        self._stop_check()
        self.damage_text = None
        try:
            self.check_problems, self.run_end = None, run_end(source) if source is not None else None
        except RecordingError:          # a damaged file's requests do not all read
            self.check_problems, self.run_end = None, None
        end = self.run_end.short() if self.run_end is not None else ""
        self.end_btn.setText(end)
        self.end_btn.setToolTip(f"{self.run_end.summary()}: click to list the unfinished requests"
                                if end else "")
        self.end_btn.setMinimumWidth(self.end_btn.sizeHint().width())
        self.end_btn.setVisible(bool(end))
        recording = isinstance(source, RecordingSource)
        self.check_btn.setVisible(recording)
        if not recording:
            return
        path = source.path
        if source.damage is not None:                       # opened as damaged: already known
            self._damaged(source.damage)
            return
        self.check_btn.setText("checking…")
        self.check_btn.setToolTip(CHECK_TIP)
        self.check_btn.setStyleSheet("")
        self.check = worker = CheckWorker(path, self)
        self.check_btn.setMinimumWidth(self.check_btn.fontMetrics().horizontalAdvance("checking… 100%") + 16)
        worker.progress.connect(lambda done, total: worker is self.check and self.check_btn.setText(
            f"checking… {100 * done // max(total, 1)}%"))
        worker.checked.connect(lambda problems, total: worker is self.check and self._checked(problems, total))
        worker.failed.connect(lambda message: worker is self.check and self._checked(None, 0, message))
        worker.damaged.connect(lambda report: worker is self.check and self._damaged(report))
        worker.start()

    def _stop_check(self, wait: bool = False) -> None:
        """Cancel the running check: it stops at its next step, its signals are ignored from
        now on and it deletes itself once finished (``wait``: block until then, as the window
        closes: a thread must not outlive its window)."""
        worker, self.check = self.check, None
        if worker is None:
            return
        worker.cancel()
        if wait:
            worker.wait()
        elif worker.isFinished():
            worker.deleteLater()
        else:
            worker.finished.connect(worker.deleteLater)

    def _checked(self, problems: list | None, num_steps: int, error: str = "") -> None:
        self.check_problems = problems
        if problems is None:
            self.check_btn.setText("check failed")
            self.check_btn.setToolTip(as_rich(f"The recording could not be checked: {error}"))
            self.check_btn.setStyleSheet(f"color: {css(ERROR)};")
        elif problems:
            n = len(problems)
            self.check_btn.setText(f"check: {n} problem{'s' * (n != 1)}")
            self.check_btn.setStyleSheet(f"color: {css(ERROR)};")
        else:
            self.check_btn.setText("check: clean")
            self.check_btn.setToolTip(f"{num_steps:,} steps checked: SQLite integrity, schema, every "
                                      "step's rows, no invariant violated (G1 blocks, G3 queues, G4 "
                                      "limits, G6 drain), metrics equal the stored outcomes, complete")

    def _damaged(self, report) -> None:
        """A damaged file (``recordings.damage.report.DamageReport``): replay only its readable steps
        (``Reader.keep_readable``), say so in the banner and on the check button, whose list
        holds the report and the command that saves what reads."""
        if isinstance(self.source, RecordingSource) and report.version >= 2:
            self.source.keep_readable(report)
        n, k = report.last_step + 1, report.last_good_step
        self.check_problems = [Problem(-1, "damage", line) for line in report.lines() + [report.suggestion()]]
        self.check_btn.setText(f"damaged: steps 0..{k} of {n:,} readable" if k >= 0 else "damaged: no step reads")
        self.check_btn.setToolTip(as_rich("\n".join(report.lines() + [report.suggestion(),
                                                                         "Click to list the damage"])))
        self.check_btn.setStyleSheet(f"color: {css(ERROR)};")
        self.check_btn.setMinimumWidth(self.check_btn.sizeHint().width())
        self.damage_text = report.summary()
        self.refresh(force=True)

    def _show_findings(self, title: str, summary: str, findings: list) -> FindingsDialog:
        if self.findings is not None:
            self.findings.close()
        self.findings = FindingsDialog(title, summary, findings, self)
        self.findings.jumpRequested.connect(self._jump_to_finding)
        self.findings.show()
        return self.findings

    def show_problems(self) -> FindingsDialog | None:
        """The check's problems in a dialog (None before the check is done or when clean)."""
        if not self.check_problems:
            return None
        n = len(self.check_problems)
        summary = (f"{self.source.path}: damaged" if self.damage_text else
                   f"{self.source.path}: {n} problem{'s' * (n != 1)} found")
        return self._show_findings("Recording check", summary, problem_findings(self.check_problems))

    def show_unfinished(self) -> FindingsDialog | None:
        """The requests a run cut short left unfinished, in a dialog (None for a complete run)."""
        end = self.run_end
        if end is None or end.is_complete:
            return None
        return self._show_findings("Unfinished requests", end.summary(), unfinished_findings(end))

    def _jump_to_finding(self, step: int, request_id: str) -> None:
        self.show_step(step)
        if request_id:
            self.select_request(request_id)
