"""The window's status fields in one row that gives way by priority when the window narrows.

``QStatusBar`` lays permanent widgets out with a box layout: when the bar is narrower than their
size hints every widget shrinks at once, and a label narrower than its text is cut where it
ends (the model label lost its start, "molLM2-135M-Instruct", while "checking…" and
"incomplete: N unfinished" were shown). :class:`StatusLine` places its fields itself: each
starts at its size hint (its full text, ``ui.fitted_label.FittedLabel``); when they do not all
fit, the fields that matter least give way first, each down to its minimum (its short form:
"5,554 tok/s" for "5,554 output tok/s (16-step mean)"), until the row fits; one field
(``stretch``) takes what room is left. Buttons never shrink. The row's minimum size hint is the
sum of the minimums, which sets how narrow the window can get.

The row is a normal (not permanent) widget of the status bar, so a temporary message
(``QStatusBar.showMessage``: a jump error, "Opened …") takes the whole bar while it shows, as
Qt hides normal widgets for it.
"""
from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import QSizePolicy, QWidget

SPACING_PX = 6


@dataclass
class _Field:
    widget: QWidget
    give_way: int        # lower gives way first
    stretch: bool


class StatusLine(QWidget):
    """``StatusLine()``; ``add(widget, give_way, stretch=False)`` appends a field (its order
    on screen: the order added). ``give_way``: fields with lower numbers shrink to their
    minimum size hint first; ``stretch``: the field (one) that takes the room left over.
    ``widths()``: each shown field's width after the last fit (the tests' view of it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.fields: list[_Field] = []
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)

    def add(self, widget: QWidget, give_way: int, stretch: bool = False) -> QWidget:
        """Append ``widget`` as a field; returns it."""
        hidden = widget.isHidden() and widget.testAttribute(Qt.WA_WState_ExplicitShowHide)
        widget.setParent(self)
        widget.setVisible(not hidden)           # a new parent hides it: as it was (shown by default)
        widget.installEventFilter(self)         # shown / hidden: fit again
        self.fields.append(_Field(widget, give_way, stretch))
        self.refit()
        return widget

    def _shown(self) -> list[_Field]:
        return [f for f in self.fields if not f.widget.isHidden()]

    def _sum(self, sizes: list[int]) -> int:
        return sum(sizes) + SPACING_PX * max(len(sizes) - 1, 0)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        shown = self._shown()
        return QSize(self._sum([self._hint(f) for f in shown]), self._height(shown))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        shown = self._shown()
        return QSize(self._sum([self._min(f) for f in shown]), self._height(shown))

    @staticmethod
    def _hint(field: _Field) -> int:
        return max(field.widget.sizeHint().width(), field.widget.minimumWidth())

    @classmethod
    def _min(cls, field: _Field) -> int:
        return max(min(field.widget.minimumSizeHint().width(), cls._hint(field)), field.widget.minimumWidth())

    @staticmethod
    def _height(shown: list[_Field]) -> int:
        return max([f.widget.sizeHint().height() for f in shown], default=0)

    def widths(self) -> dict[QWidget, int]:
        """The shown fields' widths, as placed."""
        return {f.widget: f.widget.width() for f in self._shown()}

    def refit(self) -> None:
        """Place the fields for the current width (after a field's size hints changed)."""
        shown = self._shown()
        sizes = [self._hint(f) for f in shown]
        excess = self._sum(sizes) - self.width()
        for i in sorted(range(len(shown)), key=lambda i: shown[i].give_way):
            if excess <= 0:
                break
            cut = min(excess, sizes[i] - self._min(shown[i]))
            sizes[i] -= cut
            excess -= cut
        stretch = next((i for i, f in enumerate(shown) if f.stretch), None)
        if stretch is not None:             # the room left over, or what it still has to give
            sizes[stretch] = max(0, sizes[stretch] - excess)
        x, h = 0, self.height()
        for f, w in zip(shown, sizes):
            f.widget.setGeometry(x, 0, w, h)
            x += w + SPACING_PX
        self.updateGeometry()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.refit()

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() in (QEvent.Show, QEvent.Hide):
            self.refit()
        return False

    def event(self, event) -> bool:
        if event.type() == QEvent.LayoutRequest:        # a field's size hint changed
            self.refit()
        return super().event(event)
