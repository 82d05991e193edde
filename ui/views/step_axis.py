"""A step axis that pages by relabelling, not by moving its view, and relabels cheaply.

The slot timeline shows a window of steps that pages forward (``ui.record_cache.step_span``).
Moving a pyqtgraph view's x range to page sends the new range through the view box, its items,
its axes and its linked views (~1 ms in a frame at 16k blocks, every 50 steps). The timeline
instead keeps its view in window columns (x = step - first step of the window, fixed while the
window's size is) and gives the first step to this axis, which places its ticks at round step
numbers and labels them with the steps: a page redraws only the axis' labels.

A page moves the window by a multiple of the major tick spacing (a quarter window: 50 steps of
200), so the ticks stay where they were and only their text changes. pyqtgraph lays an axis out
in ``AxisItem.generateDrawSpecs`` (the method its docs name for subclasses to override): tick
levels, a text measurement per label, crowding checks: ~1 ms of a page's ~1.6 ms axis repaint
on a 2-core machine, and a page comes every 2-3 frames at 20 steps a frame. :class:`StepAxis`
keeps the last layout and, when a relabel leaves the geometry, the range and the tick positions
as they were and every label as long as before, reuses it with the new strings (the repaint
then takes ~0.5 ms: drawing the text). Its tick search is reused the same way.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg


class StepAxis(pg.AxisItem):
    """A ``pg.AxisItem`` over a view whose coordinate is ``step - offset``: ticks fall on round
    steps (pyqtgraph's own spacing, computed on the steps) and read as steps. ``set_offset``
    changes the step at coordinate 0 (an int) and redraws the labels only. ``layouts``
    counts full layouts (pyqtgraph's ``generateDrawSpecs``) and ``relabels`` the layouts
    reused with new text."""

    def __init__(self, orientation: str = "bottom", **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.offset = 0
        self.layouts = self.relabels = 0
        self._relabel = False          # the picture was dropped by set_offset alone
        self._ticks: tuple | None = None    # the last tick levels: (range, size), offset, levels
        # the last full layout: (key, tick levels, specs, (level, tick) each label is of)
        self._layout: tuple | None = None

    def set_offset(self, offset: int) -> None:
        """Label the view's coordinate x as step ``x + offset``."""
        if offset != self.offset:
            self.offset = int(offset)
            self._relabel = self.picture is not None or self._relabel
            self.picture = None
            self.update()

    def tickValues(self, minVal: float, maxVal: float, size: float):
        """pyqtgraph's tick levels over the steps ``minVal + offset .. maxVal + offset``, as
        view coordinates. pyqtgraph's spacings depend on the range's width and ``size`` only,
        so an offset moved by a multiple of every level's spacing puts the ticks at the same
        view coordinates: those of the last call are returned again (no new tick search)."""
        last = self._ticks
        if (last is not None and last[0] == (minVal, maxVal, size)
                and all((self.offset - last[1]) % s == 0 for s, _v in last[2])):
            return last[2]
        levels = [(spacing, np.asarray(values, float) - self.offset) for spacing, values in
                  super().tickValues(minVal + self.offset, maxVal + self.offset, size)]
        self._ticks = ((minVal, maxVal, size), self.offset, levels)
        return levels

    def tickStrings(self, values, scale: float, spacing: float) -> list[str]:
        """The labels of the steps at view coordinates ``values`` (whole steps with thousands
        separators: ``130,050``)."""
        steps = [v + self.offset for v in values]
        labels = super().tickStrings(steps, scale, spacing)
        return [f"{round(s):,}" if float(s).is_integer() else text for s, text in zip(steps, labels)]

    def generateDrawSpecs(self, p):
        """pyqtgraph's layout (axis line, ticks, ``(rect, flags, text)`` per label), reused with
        the new labels after a relabel that keeps everything else (see the module docstring)."""
        relabel, self._relabel = self._relabel, False
        key = self._key()
        if relabel and self._layout is not None and self._layout[0] == key and key[2] is not None:
            specs = self._relabelled(*self._layout[1:])
            if specs is not None:
                self.relabels += 1
                return specs
        specs = super().generateDrawSpecs(p)
        self.layouts += 1
        self._layout = None
        if specs is not None and self._tickLevels is None:
            levels = self._levels(key)
            sources = self._text_sources(levels, specs[2])
            if sources is not None:
                self._layout = (key, levels, specs, sources)
        return specs

    def setTicks(self, ticks) -> None:
        """Fixed ticks (pyqtgraph's ``setTicks``): each layout is a full one."""
        self._layout = None
        super().setTicks(ticks)

    def _key(self) -> tuple:
        """What a layout depends on besides the labels' text: the axis' rectangle, the view
        range and the item's device transform."""
        r, t = self.mapRectFromParent(self.geometry()), self.deviceTransform_()
        return ((r.x(), r.y(), r.width(), r.height()), tuple(self.range),
                None if t is None else (t.m11(), t.m12(), t.m21(), t.m22(), t.dx(), t.dy()))

    def _levels(self, key: tuple) -> tuple:
        """The tick levels, ``((spacing, view positions), ...)``, at the current offset, over
        the axis' length in device pixels (as pyqtgraph measures it: a function of ``key``)."""
        (x, y, w, h), _, _ = key
        ends = ((x, y), (x + w, y)) if self.orientation in ("top", "bottom") else ((x, y), (x, y + h))
        a, b = (self.mapToDevice(pg.Point(*e)) for e in ends)
        length = pg.Point(b - a).length()
        return tuple((s, tuple(np.asarray(v, float).tolist()))
                     for s, v in self.tickValues(self.range[0], self.range[1], length))

    def _strings(self, levels: tuple) -> list[list[str]]:
        """Each level's labels at the current offset."""
        return [self.tickStrings(list(v), self.autoSIPrefixScale * self.scale, s) for s, v in levels]

    def _text_sources(self, levels: tuple, text_specs: list) -> list[tuple[int, int]] | None:
        """The (level, tick) each label of ``text_specs`` is the text of (None if one is not
        found: that layout is not reused)."""
        where = {}
        for i, strings in enumerate(self._strings(levels)):
            for j, text in enumerate(strings):
                where.setdefault(text, (i, j))
        sources = [where.get(text) for _rect, _flags, text in text_specs]
        return None if None in sources else sources

    def _relabelled(self, levels: tuple, specs: tuple, sources: list) -> tuple | None:
        """``specs`` with the labels at the current offset, or None when the ticks moved or a
        label's length changed (its measured rectangle would not fit it)."""
        if self._levels(self._layout[0]) != levels:
            return None
        strings = self._strings(levels)
        texts = [strings[i][j] for i, j in sources]
        if any(len(new) != len(old) for new, (_r, _f, old) in zip(texts, specs[2])):
            return None
        axis, ticks, text_specs = specs
        return axis, ticks, [(rect, flags, new) for (rect, flags, _old), new in zip(text_specs, texts)]
