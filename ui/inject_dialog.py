"""Dialog to add a request to a live engine (running or paused).

Validates before calling ``control.add_request``; a refused or failing request keeps the dialog
open with the reason in red. After ``accept`` the new id is in ``request_id``.
"""
from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFormLayout, QHBoxLayout, QLabel, QPlainTextEdit, QSpinBox,
                               QVBoxLayout, QWidget)

from engine.source import EngineControl
from ui.colors import ERROR, css


class InjectDialog(QDialog):
    def __init__(self, control: EngineControl, parent: QWidget | None = None):
        super().__init__(parent)
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
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip("0 = greedy")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.0, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        self.top_p.setValue(1.0)
        self.use_seed = QCheckBox("fixed seed")
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setEnabled(False)
        self.use_seed.toggled.connect(self.seed.setEnabled)
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.use_seed)
        seed_row.addWidget(self.seed, 1)
        form = QFormLayout()
        form.addRow("Prompt", self.prompt)
        form.addRow("max_tokens", self.max_tokens)
        form.addRow("temperature", self.temperature)
        form.addRow("top_p", self.top_p)
        form.addRow("seed", seed_row)
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
        """The request as keyword arguments of ``EngineControl.add_request``."""
        return {"prompt": self.prompt.toPlainText(), "max_tokens": self.max_tokens.value(),
                "temperature": self.temperature.value(), "top_p": self.top_p.value(),
                "seed": self.seed.value() if self.use_seed.isChecked() else None}

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
            except Exception as e:                      # the engine refused it: say why
                problem = f"The engine refused the request: {e}"
        if problem is not None:
            self.message.setText(problem)
            return
        super().accept()
