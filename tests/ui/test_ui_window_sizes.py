"""The window at ordinary sizes: it can be made 1024 pixels wide (its minimum was 1,501: the
views' title rows and the status bar's fixed fields), and its panels fit what they hold there:
the inspector's lines are never wider than its space (they are wrapped; it scrolls down)."""
from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication

from tests.support.fakes import FakeSource, shown_window

SIZES = [(1600, 1000), (1280, 800), (1024, 700)]


@pytest.mark.parametrize("size", SIZES)
def test_the_window_takes_ordinary_sizes_and_the_inspector_fits_its_width(qtbot, size):
    source = FakeSource(30)
    w = shown_window(qtbot, source)
    w.select_request(source.state_at(29).running[0].request_id)
    w.resize(*size)
    w.show_step(29)
    for _ in range(5):
        QApplication.processEvents()
    assert w.minimumSizeHint().width() <= 1024 and (w.width(), w.height()) == size
    fence = w.inspector.parentWidget().parentWidget()       # LayoutFence's viewport's
    assert w.inspector.width() <= fence.viewport().width()
    assert all(lab.width() <= w.inspector.width() for lab in w.inspector.values.values())
    assert w.metrics.width() >= w.metrics.minimumWidth()


def test_the_jump_box_shows_its_whole_placeholder(qtbot):
    """At 220 pixels the placeholder read "jump: step, t=12…": the box is as wide as the text
    beside its frame, margins and clear button."""
    from PySide6.QtWidgets import QStyle, QToolButton
    w = shown_window(qtbot, FakeSource(3))
    jump = w.transport.jump
    jump.setText("1")                              # the clear button shows while there is text
    QApplication.processEvents()
    clear = max((b.width() for b in jump.findChildren(QToolButton) if b.isVisible()), default=0)
    frame = jump.style().pixelMetric(QStyle.PixelMetric.PM_DefaultFrameWidth)
    margins = jump.textMargins()
    room = jump.width() - 2 * frame - margins.left() - margins.right() - 4 - clear
    assert clear > 0 and jump.fontMetrics().horizontalAdvance(jump.placeholderText()) <= room


def test_a_live_window_1024_wide_keeps_a_usable_scrubber(qtbot):
    """The live transport bar holds the engine's buttons too: at its minimum the slider was
    squeezed to its handle (it looked like a check box) and the window could not be 1024 wide.
    The jump box gives way first, down to "jump: st…" (its tooltip has the syntax)."""
    from tests.support.fakes import FakeControl
    from ui.transport import SLIDER_MIN_PX
    source = FakeSource(3)
    w = shown_window(qtbot, source, FakeControl(source))
    w.resize(1024, 700)
    for _ in range(5):
        QApplication.processEvents()
    t = w.transport
    assert w.width() == 1024 and t.slider.width() >= SLIDER_MIN_PX
    assert t.jump.minimumWidth() <= t.jump.width() <= t.jump.full_width
    assert all(b.width() >= b.sizeHint().width() for b in (t.pause_btn, t.step_btn, t.knobs_btn, t.live_btn))
