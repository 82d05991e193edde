"""A red banner across the top of the window for engine, step and source errors.

``show_error(text)`` shows it unless the user dismissed that same text; ``show_error(None)``
hides it. Every error reaches the window this way, never only a log.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QWidget
from ui.plain_text import PlainLabel


class ErrorBanner(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.text: str | None = None
        self._dismissed: str | None = None
        self.setAttribute(Qt.WA_StyledBackground, True)
        self.setStyleSheet("ErrorBanner { background: #6b2226; border-bottom: 1px solid #e15759; }"
                           "QLabel { color: #ffe9e9; font-weight: bold; }")
        self.label = PlainLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Dismiss this error")
        close.setAutoRaise(True)
        close.clicked.connect(self.dismiss)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 5, 6, 5)
        lay.addWidget(self.label, 1)
        lay.addWidget(close)
        self.hide()

    def show_error(self, text: str | None) -> None:
        self.text = text
        if text is None or text == self._dismissed:
            self.hide()
            return
        self.label.setText(f"⚠  {text}")
        self.show()

    def dismiss(self) -> None:
        self._dismissed = self.text
        self.hide()
