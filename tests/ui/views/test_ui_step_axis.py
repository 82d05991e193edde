"""The slot timeline's step axis: after a page its labels are those a fresh pyqtgraph layout
draws, whether it reused its last layout (same ticks, labels as long) or laid out again."""
from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QPainter, QPicture

from ui.record_cache import step_span
from ui.views.slot_timeline import SlotTimeline


def fresh_layout(axis) -> list[tuple[float, str]]:
    """(label centre, text) of each label pyqtgraph's own layout gives the axis now (without
    letting it resize the axis to its text, as a layout on screen may)."""
    picture = QPicture()
    p = QPainter(picture)
    p.setFont(axis.style["tickFont"])
    axis._updateMaxTextSize = lambda size: None
    try:
        _line, _ticks, texts = pg.AxisItem.generateDrawSpecs(axis, p)
    finally:
        p.end()
        del axis._updateMaxTextSize
    return [(rect.center().x(), text) for rect, _flags, text in texts]


@pytest.mark.slow
@pytest.mark.parametrize("window", [200, 400, 64])
def test_paged_labels_equal_a_fresh_layout(qtbot, window):
    w = SlotTimeline(max_num_seqs=4, window=window)
    qtbot.addWidget(w)
    w.resize(800, 300)
    w.show()
    qtbot.waitExposed(w)
    axis = w.step_axis
    drawn = []
    draw = axis.drawPicture
    axis.drawPicture = lambda p, line, ticks, texts: (
        drawn.append([(r.center().x(), t) for r, _f, t in texts]), draw(p, line, ticks, texts))
    page = window // 4
    # pages from 3-digit to 4-digit steps (labels grow: a full layout again), then back
    shown_steps = [*range(700, 2000, page), 1000, 30]
    for shown in shown_steps:
        drawn.clear()
        w.set_records([], shown, 4, shown)
        qtbot.waitUntil(lambda: bool(drawn))
        qtbot.wait(30)                                   # any layout change drawn too
        x0 = step_span(shown, shown, window)[0]
        assert axis.offset == x0
        fresh = fresh_layout(axis)
        assert [t for _x, t in drawn[-1]] == [t for _x, t in fresh], shown
        assert [x for x, _t in drawn[-1]] == pytest.approx([x for x, _t in fresh], abs=0.5)
        steps = [int(t.replace(",", "")) for _x, t in drawn[-1]]
        assert steps and all(x0 <= s < x0 + w.span for s in steps), shown
    spacing = axis.tickValues(-0.5, w.span - 0.5, axis.width())[0][0]
    if page % spacing == 0:              # the ticks stay put: most pages reused the layout
        assert axis.relabels >= len(shown_steps) // 2
    else:                                # they move: every page is a full layout
        assert axis.relabels == 0
    assert axis.layouts >= 2                              # 999 -> 1000 laid out again


def test_whole_steps_read_with_thousands_separators(qtbot):
    w = SlotTimeline(max_num_seqs=4, window=200)
    qtbot.addWidget(w)
    axis = w.step_axis
    axis.set_offset(130000)
    assert axis.tickStrings([0.0, 50.0, 150.0], 1.0, 50.0) == ["130,000", "130,050", "130,150"]
    axis.set_offset(0)
    assert axis.tickStrings([0.0, 50.0], 1.0, 50.0) == ["0", "50"]
