"""Dialog to add a request to a live engine (running or paused).

Validates before calling ``control.add_request``; a refused or failing request keeps the dialog
open with the reason in red. After ``accept`` the new id is in ``request_id``. The priority field
is enabled under the run's ``priority`` policy only (any other policy refuses a nonzero
priority); "Inject at front" under ``fcfs`` only (the request is then moved to the front of the
waiting queue, ``control.move_to_front``, before the engine's next step); the penalties are
passed only when they change the logits.
"""
from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFormLayout, QHBoxLayout, QLabel, QPlainTextEdit, QSpinBox,
                               QVBoxLayout, QWidget)

from engine.request import MAX_PENALTY
from engine.state.source import EngineControl
from ui.style.colors import ERROR, css
from ui.request_menu import PRIORITY_RANGE
from ui.style.theme import follow_window
from engine.vocab import Policy


PENALTY_DEFAULTS = {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}


def _spin(low: float, high: float, value: float, step: float = 0.1) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(2)
    box.setValue(value)
    return box


class InjectDialog(QDialog):
    """``InjectDialog(control, parent=None, policy="")``: ``policy`` is the run's scheduling
    policy (``priority`` enables the priority field, ``fcfs`` the "Inject at front" box)."""

    def __init__(self, control: EngineControl, parent: QWidget | None = None, policy: str = ""):
        super().__init__(parent)
        follow_window(self, parent)
        self.control = control
        self.request_id: str | None = None
        self.setWindowTitle("Inject request")
        self.setMinimumWidth(460)
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Prompt text…")
        self.prompt.setMinimumHeight(110)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 1_000_000)
        self.max_tokens.setValue(64)
        self.temperature = _spin(0.0, 5.0, 0.0)
        self.temperature.setToolTip("0 = greedy")
        self.top_p = _spin(0.0, 1.0, 1.0, 0.05)
        self.use_seed = QCheckBox("fixed seed")
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setEnabled(False)
        self.use_seed.toggled.connect(self.seed.setEnabled)
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.use_seed)
        seed_row.addWidget(self.seed, 1)
        self.priority = QSpinBox()
        self.priority.setRange(*PRIORITY_RANGE)
        self.priority.setEnabled(policy == Policy.PRIORITY)
        self.priority.setToolTip("lower value runs first; may preempt running requests of lower "
                                 "priority" if policy == Policy.PRIORITY else
                                 f"needs the priority policy (this run: {policy or 'unknown'})")
        self.at_front = QCheckBox("Inject at front (served before the requests waiting now)")
        self.at_front.setEnabled(policy == Policy.FCFS)
        self.at_front.setToolTip("moves the new request to the front of the waiting queue" if
                                 policy == Policy.FCFS else "needs the fcfs policy (this run: "
                                 f"{policy or 'unknown'}; under priority give a lower priority)")
        self.penalties = {"repetition_penalty": _spin(0.01, 10.0, 1.0),
                          "frequency_penalty": _spin(-MAX_PENALTY, MAX_PENALTY, 0.0),
                          "presence_penalty": _spin(-MAX_PENALTY, MAX_PENALTY, 0.0)}
        penalty_row = QHBoxLayout()
        for name, box in self.penalties.items():
            box.setToolTip(f"{name} (off at {PENALTY_DEFAULTS[name]:g})")
            penalty_row.addWidget(QLabel(name.split("_")[0]))
            penalty_row.addWidget(box, 1)
        form = QFormLayout()
        form.addRow("Prompt", self.prompt)
        form.addRow("max_tokens", self.max_tokens)
        form.addRow("temperature", self.temperature)
        form.addRow("top_p", self.top_p)
        form.addRow("seed", seed_row)
        form.addRow("priority", self.priority)
        form.addRow("queue", self.at_front)
        form.addRow("penalties", penalty_row)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setStyleSheet(f"color: {css(ERROR)};")
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.button(QDialogButtonBox.Ok).setText("Add request")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.message)
        lay.addWidget(self.buttons)

    def values(self) -> dict:
        """The request as keyword arguments of ``EngineControl.add_request``: ``priority`` when
        the field is enabled, each penalty when it is not off."""
        values = {"prompt": self.prompt.toPlainText(), "max_tokens": self.max_tokens.value(),
                  "temperature": self.temperature.value(), "top_p": self.top_p.value(),
                  "seed": self.seed.value() if self.use_seed.isChecked() else None}
        if self.priority.isEnabled():
            values["priority"] = self.priority.value()
        values.update({name: box.value() for name, box in self.penalties.items()
                       if box.value() != PENALTY_DEFAULTS[name]})
        return values

    def validate(self) -> str | None:
        """The first problem with the inputs, or None when they are fine."""
        v = self.values()
        if not v["prompt"].strip():
            return "The prompt is empty: type the text the model should continue."
        if v["max_tokens"] < 1:
            return "max_tokens must be at least 1."
        if not 0.0 < v["top_p"] <= 1.0:
            return "top_p must be in (0, 1]."
        return None

    def accept(self) -> None:
        problem = self.validate()
        if problem is None:
            try:
                self.request_id = self.control.add_request(**self.values())
                if self.at_front.isEnabled() and self.at_front.isChecked():
                    self.control.move_to_front(self.request_id)
            except Exception as e:                      # the engine refused it: say why
                problem = f"The engine refused the request: {e}"
        if problem is not None:
            self.message.setText(problem)
            return
        super().accept()
