"""Transport bar: engine pause/resume and single step (live), replay play at a chosen speed,
step back / forward, a step scrubber with a spin box, a "jump to" box, and the "Live" follow
toggle (live only). Before the first step the spin box reads "loading…".

The bar does not own the shown step: it emits ``seekRequested(step)`` / ``followToggled(on)`` /
``jumpRequested(text)`` and the main window answers with ``set_position(shown, latest,
following)``. Replay speeds: N steps/s (above the frame rate, steps between frames are skipped:
the position follows the elapsed time) or "max", shown as "every step" (every step drawn, one per
frame, as fast as frames draw: slower than the rates above the frame rate).
"""
from __future__ import annotations

from PySide6.QtCore import QElapsedTimer, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (QComboBox, QFrame, QHBoxLayout, QLabel, QLineEdit, QSlider,
                               QSpinBox, QToolButton, QWidget)

from engine.state.source import EngineControl
from ui.style.colors import ERROR, css
from ui.style.theme import fix_size
from ui.plain_text import rich_escape

SPEEDS = (1, 2, 5, 10, 30, 100, 300, 1000, 3000, "max")   # replay speeds, steps per second
FRAME_MS = 33                                              # fastest timed tick (the frame rate)
LOADING_TEXT = "loading…"                                  # where the step goes before the first
SLIDER_MIN_PX = 100
JUMP_CHROME_PX = 48         # a line edit's frame, text margins and clear button beside its text
JUMP_TIP = ("Jump to a step number, a time on the engine clock (t=12.5: the step running then) "
            "or a request id (its arrival step); Enter")


def _button(text: str, tip: str, checkable: bool = False) -> QToolButton:
    b = QToolButton()
    b.setText(text)
    b.setToolTip(tip)
    b.setCheckable(checkable)
    b.setToolButtonStyle(Qt.ToolButtonTextOnly)
    return b


class _JumpBox(QLineEdit):
    """The jump box: it asks for ``full_width`` (its whole placeholder) and gives way to its
    minimum width in a narrow window."""

    full_width = 0

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(max(self.full_width, self.minimumWidth()), super().sizeHint().height())


def _separator() -> QFrame:
    f = QFrame()
    f.setFrameShape(QFrame.VLine)
    f.setStyleSheet("color: #3a3d43;")
    return f


class TransportBar(QWidget):
    seekRequested = Signal(int)
    jumpRequested = Signal(str)
    followToggled = Signal(bool)
    engineStepped = Signal()
    knobsRequested = Signal()

    def __init__(self, control: EngineControl | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.control = control
        self.shown, self.latest, self.following = -1, -1, True
        self.pause_btn = _button("Pause", "Pause or resume the engine (Space)")
        self.step_btn = _button("Step ▸", "Run exactly one engine step while paused (S)")
        self.knobs_btn = _button("Knobs…", "Change max_num_seqs, max_num_batched_tokens and the "
                                 "usable KV pool while paused (Ctrl+K)")
        self.knobs_btn.clicked.connect(self.knobsRequested)
        self.back_btn = _button("◂ Back", "Show the previous step (Left)")
        self.play_btn = _button("▶ Play", "Play the recording (Space)", checkable=True)
        self.fwd_btn = _button("Fwd ▸", "Show the next step")
        self.speed = QComboBox()
        self.speed.addItems(["every step" if s == "max" else f"{s:,} steps/s" for s in SPEEDS])
        self.speed.setCurrentIndex(SPEEDS.index(10))
        self.speed.setToolTip("Replay speed: steps per second (steps between frames are skipped), "
                              "or every step (none skipped: one per frame, as fast as the window draws, "
                              "slower than the high rates)")
        self.jump = _JumpBox()
        self.jump.setPlaceholderText("jump: step, t=12.5, request id")
        self.jump.setToolTip(JUMP_TIP)
        self.jump.setClearButtonEnabled(True)
        # as wide as its placeholder beside the clear button where there is room (it read "jump:
        # step, t=12…" in a 1600-pixel window); in a narrow live window it gives way first
        # (Qt elides the placeholder; the tooltip has the syntax)
        fm = self.jump.fontMetrics()
        self.jump.full_width = fm.horizontalAdvance(self.jump.placeholderText()) + JUMP_CHROME_PX
        self.jump.setMinimumWidth(fm.horizontalAdvance("jump: st…") + JUMP_CHROME_PX)
        self.jump.setMaximumWidth(self.jump.full_width)
        self.jump.returnPressed.connect(lambda: self.jumpRequested.emit(self.jump.text()))
        self.jump.textEdited.connect(lambda _t: self.show_jump_error(None))
        self.slider = QSlider(Qt.Horizontal)
        self.slider.setRange(-1, -1)
        self.slider.setToolTip("Drag to show any step")
        self.slider.setMinimumWidth(SLIDER_MIN_PX)     # squeezed, only its handle showed, like a check box
        self.spin = QSpinBox()
        self.spin.setRange(-1, -1)
        self.spin.setPrefix("step ")
        self.spin.setKeyboardTracking(False)
        # a fixed size (both ways): its range grows every step, and a spin box's new range
        # re-lays out the window unless its size is fixed (see ui.style.theme.fix_size)
        self.spin.setFixedSize(self.spin.fontMetrics().horizontalAdvance("step 8888888") + 40,
                               self.spin.sizeHint().height())
        self.latest_label = fix_size(QLabel("of –"), "of 8,888,888")
        self.live_btn = _button("● Live", "Follow the newest step", checkable=True)
        self.live_btn.setChecked(True)
        self.engine_label = QLabel("")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 3, 6, 3)
        self.engine_widgets = [self.pause_btn, self.step_btn, self.knobs_btn]
        for w in (self.pause_btn, self.step_btn, self.knobs_btn, self.engine_label):
            lay.addWidget(w)
        self.engine_sep = _separator()
        lay.addWidget(self.engine_sep)
        for w in (self.back_btn, self.play_btn, self.fwd_btn, self.speed):
            lay.addWidget(w)
        lay.addWidget(self.slider, 1)
        for w in (self.spin, self.latest_label, self.jump, self.live_btn):
            lay.addWidget(w)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._play_tick)
        self.clock = QElapsedTimer()
        self._play_from = 0
        self.pause_btn.clicked.connect(self.toggle_pause)
        self.step_btn.clicked.connect(self.step)
        self.back_btn.clicked.connect(self.step_back)
        self.fwd_btn.clicked.connect(self.step_forward)
        self.play_btn.toggled.connect(self._play_toggled)
        self.speed.currentIndexChanged.connect(self._apply_speed)
        self.slider.valueChanged.connect(self._user_seek)
        self.spin.valueChanged.connect(self._user_seek)
        self.live_btn.toggled.connect(self._live_toggled)
        self.set_control(control)

    # --- wiring from the main window -----------------------------------------------------------
    def set_control(self, control: EngineControl | None) -> None:
        self.control = control
        live = control is not None
        for w in (*self.engine_widgets, self.engine_label, self.engine_sep, self.live_btn):
            w.setVisible(live)        # a replay has no newest step to follow: no Live button
        for w in (self.play_btn, self.speed):
            w.setVisible(not live)
        self.play_btn.setChecked(False)
        self.refresh_engine()

    def no_step_text(self) -> str:
        """What stands where the step goes before the first one: "loading…" while a live engine
        starts, "failed to start" once it reported it could not (its error is in the banner),
        "no steps recorded" in a replay."""
        if self.control is None:
            return "no steps recorded"
        status = self.control.status()
        return status if status and "fail" in status.lower() else LOADING_TEXT

    def set_position(self, shown: int, latest: int, following: bool) -> None:
        self.shown, self.latest, self.following = shown, latest, following
        # no step yet (a live engine loading its model): the spin box says so instead of "-1"
        self.spin.setSpecialValueText(self.no_step_text() if latest < 0 else "")
        for w in (self.slider, self.spin):
            w.blockSignals(True)
            if (w.minimum(), w.maximum()) != (min(0, latest), latest):
                w.setRange(min(0, latest), latest)
            w.setValue(shown)
            w.blockSignals(False)
        self.latest_label.setText(f"of {latest:,}" if latest >= 0 else "of –")
        self.live_btn.blockSignals(True)
        self.live_btn.setChecked(following)
        self.live_btn.blockSignals(False)
        self.back_btn.setEnabled(shown > 0)
        self.fwd_btn.setEnabled(shown < latest)
        self.refresh_engine()

    def refresh_engine(self) -> None:
        """Mirror the engine's state on the pause and step buttons and the engine label (its
        ``status()`` line when the control has one, e.g. "loading model…")."""
        paused = self.control is not None and self.control.is_paused()
        self.pause_btn.setText("Resume" if paused else "Pause")
        self.step_btn.setEnabled(paused)
        self.knobs_btn.setEnabled(paused)
        status = self.control.status() if self.control is not None else None
        text = status or ("paused" if paused else "running")
        color = "#edc948" if paused else "#e15759" if "fail" in text.lower() else "#59a14f"
        html = f"<b style='color:{color}'>{rich_escape(text.upper())}</b>"
        if self.engine_label.text() != html:
            self.engine_label.setText(html)

    # --- actions (buttons and the window's shortcuts) -------------------------------------------
    def toggle_pause(self) -> None:
        """Live: pause or resume the engine. Replay: play or stop."""
        if self.control is None:
            self.play_btn.toggle()
        elif self.control.is_paused():
            self.control.resume()
        else:
            self.control.pause()
        self.refresh_engine()

    def step(self) -> None:
        """Live: exactly one engine step (only while paused). Replay: the next recorded step."""
        if self.control is None:
            self.step_forward()
        elif self.control.is_paused():
            self.control.step_once()
            self.engineStepped.emit()

    def step_back(self) -> None:
        if self.shown > 0:
            self.seekRequested.emit(self.shown - 1)

    def step_forward(self) -> None:
        if self.shown < self.latest:
            self.seekRequested.emit(self.shown + 1)

    def show_jump_error(self, message: str | None) -> None:
        """Mark the jump box as not understood (``message`` as its tooltip); None clears it."""
        self.jump.setStyleSheet(f"border: 1px solid {css(ERROR)};" if message else "")
        self.jump.setToolTip(message or JUMP_TIP)

    def _user_seek(self, value: int) -> None:
        self.seekRequested.emit(value)
        if self.timer.isActive():                   # keep playing from where the user put it
            self._play_from = self.shown
            self.clock.restart()

    def _live_toggled(self, on: bool) -> None:
        if on:
            self.play_btn.setChecked(False)
        self.followToggled.emit(on)

    # --- replay playback ---------------------------------------------------------------------
    def steps_per_second(self) -> float | None:
        """The chosen replay speed (None = max)."""
        s = SPEEDS[self.speed.currentIndex()]
        return None if isinstance(s, str) else float(s)

    def _apply_speed(self) -> None:
        rate = self.steps_per_second()
        self.timer.setInterval(0 if rate is None else max(FRAME_MS, int(1000 / rate)))
        self._play_from = self.shown
        self.clock.start()

    def _play_toggled(self, on: bool) -> None:
        self.play_btn.setText("■ Stop" if on else "▶ Play")
        if on:
            if self.shown >= self.latest:
                self.seekRequested.emit(0)      # at the end: play from the start
            elif self.following:
                self.seekRequested.emit(self.shown)
            self._apply_speed()
            self.timer.start()
        else:
            self.timer.stop()

    def _play_tick(self) -> None:
        if self.shown >= self.latest:
            self.play_btn.setChecked(False)
            return
        rate = self.steps_per_second()
        if rate is None or rate * FRAME_MS <= 1000:
            target = self.shown + 1                 # at or below the frame rate: every step
        else:
            target = self._play_from + int(rate * self.clock.elapsed() / 1000)
        self.seekRequested.emit(min(max(target, self.shown + 1), self.latest))
