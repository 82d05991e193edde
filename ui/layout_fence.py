"""A holder that keeps a panel's text changes from re-laying out the whole window.

Qt propagates a widget's size-hint change (``QWidget::updateGeometry``: a label's ``setText``
calls it, whether or not the size changed) to its parent's layout, whose activation calls
``updateGeometry`` on its own widget, and so on up to the window, unless a widget on the way
has a fixed size (minimum == maximum). A panel whose labels change every frame (the request
inspector: tokens generated, KV blocks, the shown step) therefore re-lays out its group box,
the splitters and the main window on every frame (~1 ms at 16k blocks). :class:`LayoutFence`
gives the panel a fixed size equal to the space the window's layout gave the fence, so its
changes re-lay out the panel alone; the window's layout sees the panel's size hints as they were
when it last asked (content that outgrows the space is clipped, as in any fixed-size panel).
"""
from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QWidget


class LayoutFence(QWidget):
    """``LayoutFence(inner)``: hosts ``inner`` (reparented) at the fence's own size.

    The fence reports ``inner``'s size hints to the layout it sits in; ``inner`` is resized
    (fixed size) whenever the fence is."""

    def __init__(self, inner: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.inner = inner
        inner.setParent(self)
        inner.move(0, 0)
        self.setSizePolicy(inner.sizePolicy())

    def sizeHint(self) -> QSize:
        return self.inner.sizeHint()

    def minimumSizeHint(self) -> QSize:
        return self.inner.minimumSizeHint()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.inner.setFixedSize(event.size())
