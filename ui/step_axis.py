"""A step axis that pages by relabelling, not by moving its view.

The slot timeline shows a window of steps that pages forward (``ui.record_cache.step_span``).
Moving a pyqtgraph view's x range to page sends the new range through the view box, its items,
its axes and its linked views (~1 ms in a frame at 16k blocks, every 50 steps). The timeline
instead keeps its view in window columns (x = step - first step of the window, fixed while the
window's size is) and gives the first step to this axis, which places its ticks at round step
numbers and labels them with the steps: a page redraws only the axis' labels.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg


class StepAxis(pg.AxisItem):
    """A ``pg.AxisItem`` over a view whose coordinate is ``step - offset``: ticks fall on round
    steps (pyqtgraph's own spacing, computed on the steps) and read as steps. ``set_offset``
    changes the step at coordinate 0 (an int) and redraws the labels only."""

    def __init__(self, orientation: str = "bottom", **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.offset = 0

    def set_offset(self, offset: int) -> None:
        """Label the view's coordinate x as step ``x + offset``."""
        if offset != self.offset:
            self.offset = int(offset)
            self.picture = None
            self.update()

    def tickValues(self, minVal: float, maxVal: float, size: float):
        """pyqtgraph's tick levels over the steps ``minVal + offset .. maxVal + offset``, as
        view coordinates."""
        levels = super().tickValues(minVal + self.offset, maxVal + self.offset, size)
        return [(spacing, np.asarray(values, float) - self.offset) for spacing, values in levels]

    def tickStrings(self, values, scale: float, spacing: float) -> list[str]:
        """The labels of the steps at view coordinates ``values``."""
        return super().tickStrings([v + self.offset for v in values], scale, spacing)
