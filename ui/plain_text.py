"""Recorded text shown as text, never as markup: one place for the window's widgets.

Qt guesses whether a label's, tooltip's or message box's text is HTML (``Qt::mightBeRichText``):
a request id such as ``<img src=...>`` or a trace file named ``<b>x</b>.csv`` would be rendered.
Labels that show recorded text are :class:`PlainLabel` s (``Qt.PlainText``, control and
bidi-override characters shown as escapes) or set to plain text (:func:`make_plain`); where a widget
mixes our own markup with recorded text, the recorded part goes through :func:`rich_escape`;
tooltips and message boxes get :func:`as_rich` (escaped inside an explicit ``<qt>`` document)
or :func:`tooltip_text`.
Control and bidi-override characters are made visible first (``recordings.safe_text.visible``).
"""
from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import Qt as GuiQt
from PySide6.QtWidgets import QLabel

from recordings.safe_text import visible


class PlainLabel(QLabel):
    """A QLabel whose text is always shown literally: ``Qt.PlainText``, and ``setText`` makes
    control and bidi-override characters visible (``recordings.safe_text.visible``)."""

    def __init__(self, text: str = "", parent=None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.PlainText)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(visible(text))


def make_plain(*labels: QLabel) -> None:
    """Show each label's text literally (``Qt.PlainText``: no HTML detection)."""
    for label in labels:
        label.setTextFormat(Qt.PlainText)


def rich_escape(text: object) -> str:
    """Recorded ``text`` to put inside our own rich text: visible controls, HTML escaped."""
    return html.escape(visible(text), quote=True)


def as_rich(text: object) -> str:
    """A whole tooltip or message-box text that shows ``text`` literally (newlines kept)."""
    return "<qt>" + rich_escape(text).replace("\n", "<br>") + "</qt>"


def tooltip_text(text: object) -> str:
    """``text`` for a tooltip, shown literally: as it is (controls made visible) when Qt would
    take it for plain text anyway, else :func:`as_rich` (Qt only guesses from the first line)."""
    shown = visible(text)
    return as_rich(shown) if GuiQt.mightBeRichText(shown) else shown
