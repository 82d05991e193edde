"""A one-line label that fits its text to the width it is given, whole or visibly shortened.

A ``QLabel`` that is narrower than its text cuts it where the widget ends: the status bar's
model label showed "molLM2-135M-Instruct" (its start cut off) while the check and incomplete
buttons took the room. :class:`FittedLabel` paints its text itself: the full form when it fits,
else the short form the caller gave, else that form elided with "…" at the end
(``QFontMetrics.elidedText``), so a shortened text always shows that it is shortened and always
keeps its start; whenever it is not whole, the tooltip starts with the full text.

Its size hints are fixed at construction (from a template text, measured with the label's
``QFontMetrics``), and ``setText`` only repaints it: a text that changes every frame re-lays out
nothing (a ``QLabel.setText`` calls ``updateGeometry``, which re-lays out the whole window unless
the label has a fixed size; see ``ui.layout_fence``).
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontMetrics, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from recordings.safe_text import visible
from ui.plain_text import as_rich, rich_escape

PADDING_PX = 8          # each side of the text (the status bar's QLabel padding: ui.style.theme)


class FittedLabel(QWidget):
    """``FittedLabel(template, short_template=None, bold=False, align=left)``.

    ``template``: the widest text the label should show whole (its size hint's width);
    ``short_template``: the widest short form (its minimum size hint's width; default: the
    template, so the label never asks for less). ``setText(text, short=None)`` sets the full
    text and the short form to fall back to (default: the full text, elided). Text is plain
    (recorded text shows literally: control and bidi-override characters as escapes,
    ``recordings.safe_text.visible``). ``shown_text()`` is what is painted at the current width;
    ``is_whole()`` whether that is the full text; the tooltip is ``setToolTip``'s text, after the
    full text when that is not shown whole."""

    def __init__(self, template: str = "", short_template: str | None = None, bold: bool = False,
                 align: Qt.AlignmentFlag = Qt.AlignLeft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.align = align | Qt.AlignVCenter
        self._text = self._short = self._tip = self._shown = ""
        self.set_templates(template, short_template)
        if bold:
            font = self.font()
            font.setBold(True)
            self.setFont(font)
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Fixed)

    # --- sizes -------------------------------------------------------------------------------
    def text_width(self, text: str) -> int:
        """Pixels ``text`` takes in this label, padding included."""
        return QFontMetrics(self.font()).horizontalAdvance(text) + 2 * PADDING_PX

    def set_templates(self, template: str, short_template: str | None = None) -> None:
        """New size hints: ``template`` (full) and ``short_template`` (minimum). Re-lays out
        the window once (call it when the magnitudes change, not every frame)."""
        self._templates = (template, template if short_template is None else short_template)
        self._measure()

    def _measure(self) -> None:
        self._hint = self.text_width(self._templates[0])
        self._min = min(self._hint, self.text_width(self._templates[1]))
        self.updateGeometry()
        self._fit()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self._hint, QFontMetrics(self.font()).height() + 4)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self._min, QFontMetrics(self.font()).height() + 4)

    # --- text --------------------------------------------------------------------------------
    def setText(self, text: str, short: str | None = None) -> None:  # noqa: N802 (Qt's name)
        """Show ``text`` (plain), or ``short`` where ``text`` does not fit; repaints only."""
        text = visible(text)
        short = text if short is None else visible(short)
        if (text, short) != (self._text, self._short):
            self._text, self._short = text, short
            self._fit()

    def text(self) -> str:
        """The full text (whatever is shown)."""
        return self._text

    def textFormat(self) -> Qt.TextFormat:  # noqa: N802 (QLabel's name)
        """Always ``Qt.PlainText``: the text is painted as it is, never as markup."""
        return Qt.PlainText

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt's name)
        """The tooltip after the full text (which leads it while the text is shortened)."""
        self._tip = tip
        self._apply_tip()

    def shown_text(self) -> str:
        """The text painted at the label's current width."""
        return self._shown

    def is_whole(self) -> bool:
        """Whether the full text is shown."""
        return self._shown == self._text

    def _fit(self) -> None:
        room = self.width() - 2 * PADDING_PX
        fm = QFontMetrics(self.font())
        if fm.horizontalAdvance(self._text) <= room:
            shown = self._text
        elif fm.horizontalAdvance(self._short) <= room:
            shown = self._short
        else:
            shown = fm.elidedText(self._short, Qt.ElideRight, max(room, 0))
        whole_before = self._shown == self._text
        if shown != self._shown:
            self._shown = shown
            self.update()
        if whole_before != self.is_whole() or not self.is_whole():
            self._apply_tip()

    def _apply_tip(self) -> None:
        tip = self._tip
        if not self.is_whole() and self._text:
            if tip.startswith("<qt>"):         # rich: the full text escaped, then the tip's body
                tip = f"<qt><b>{rich_escape(self._text)}</b><br>{tip[4:]}"
            else:
                tip = f"{self._text}\n{tip}".rstrip("\n") if tip else self._text
                tip = as_rich(tip) if "<" in tip else tip
        if super().toolTip() != tip:
            super().setToolTip(tip)

    # --- Qt events ---------------------------------------------------------------------------
    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self._fit()

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() == event.Type.FontChange:      # the window's font, once it is a child
            self._measure()

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt's name)
        p = QPainter(self)
        p.setPen(self.palette().windowText().color())
        p.drawText(self.rect().adjusted(PADDING_PX, 0, -PADDING_PX, 0), self.align | Qt.TextSingleLine,
                   self._shown)
