"""Hover tooltips and clicks over a pyqtgraph view, shared by the block map and the timeline."""
from __future__ import annotations

from typing import Callable, TypeVar

import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QToolTip

from ui.plain_text import tooltip_text

K = TypeVar("K")


def track_pointer(view: pg.GraphicsView, locate: Callable[[QPointF], K | None],
                  describe: Callable[[K], str], on_click: Callable[[K], None]) -> None:
    """``locate(scene_pos)`` names what is under the pointer (None: nothing); hovering shows
    ``describe(key)`` as a tooltip and a left click calls ``on_click(key)``."""
    def moved(pos: QPointF) -> None:
        key = locate(pos)
        if key is None:
            QToolTip.hideText()
        else:
            QToolTip.showText(QCursor.pos(), tooltip_text(describe(key)), view)   # ids: text, not HTML

    def clicked(ev) -> None:
        key = locate(ev.scenePos())
        if key is not None:
            on_click(key)

    view.scene().sigMouseMoved.connect(moved)
    view.scene().sigMouseClicked.connect(clicked)
