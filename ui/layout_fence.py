"""A holder that keeps a panel's text changes from re-laying out the whole window, and lets a
panel taller than its space scroll instead of overlapping its own lines.

Qt propagates a widget's size-hint change (``QWidget::updateGeometry``: a label's ``setText``
calls it, whether or not the size changed) to its parent's layout, whose activation calls
``updateGeometry`` on its own widget, and so on up to the window, unless a widget on the way
has a fixed size (minimum == maximum) or is a scroll area's content. A panel whose labels change
every frame (the request inspector: tokens generated, KV blocks, the shown step) therefore
re-laid out its group box, the splitters and the main window on every frame (~1 ms at 16k
blocks). :class:`LayoutFence` is a frameless ``QScrollArea`` holding the panel: its changes
re-lay out the panel alone; the window's layout sees the panel's size hints. The panel fills the
fence; where its content needs more height than that (wrapped lines in a short window: the
inspector's rows were squeezed until their lines overlapped, a fixed-size panel clips or
overlaps), it keeps the height its lines need (its ``heightForWidth``) and scrolls vertically.
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


class LayoutFence(QScrollArea):
    """``LayoutFence(inner)``: hosts ``inner`` (reparented) at the fence's width and at least
    its height, scrolling vertically when ``inner`` needs more.

    The fence reports ``inner``'s size hints to the layout it sits in."""

    def __init__(self, inner: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.inner = inner
        self.setFrameShape(QFrame.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setWidgetResizable(True)
        self.setWidget(inner)
        self.viewport().setAutoFillBackground(False)    # the panel's colour, not the scroll area's base
        inner.setAutoFillBackground(False)
        self.setSizePolicy(inner.sizePolicy())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return self.inner.sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        # the inner panel's minimum beside the scroll bar it may need
        least = self.inner.minimumSizeHint().expandedTo(self.inner.minimumSize())
        return least + QSize(self.verticalScrollBar().sizeHint().width(), 0)
