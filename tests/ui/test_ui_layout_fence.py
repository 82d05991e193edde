"""A panel behind a ``LayoutFence`` fills the space the window's layout gives the fence, and its
labels' text changes re-lay out the panel alone, not the window (which Qt otherwise does for
every ``setText`` of a label whose size is not fixed)."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication, QLabel, QSplitter, QVBoxLayout, QWidget

from ui.layout_fence import LayoutFence


class LayoutRequests(QObject):
    """Counts the LayoutRequest events that reach the watched widgets."""

    def __init__(self, *widgets: QWidget):
        super().__init__()
        self.count = 0
        for w in widgets:
            w.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            self.count += 1
        return False


def window_with_panel(qtbot, fenced: bool):
    """A splitter (as the main window's) holding a panel of two labels, fenced or not."""
    panel = QWidget()
    lay = QVBoxLayout(panel)
    label = QLabel("generated 1 / 400")
    lay.addWidget(label)
    lay.addStretch(1)
    splitter = QSplitter()
    splitter.addWidget(QLabel("another view"))
    splitter.addWidget(LayoutFence(panel) if fenced else panel)
    splitter.resize(600, 300)
    qtbot.addWidget(splitter)
    splitter.show()
    qtbot.waitExposed(splitter)
    QApplication.processEvents()
    return splitter, panel, label


def relayouts_after_text_changes(splitter: QSplitter, label: QLabel) -> int:
    watch = LayoutRequests(splitter)
    for n in range(2, 12):
        label.setText(f"generated {n * 37} / 400 · a longer line {'x' * n}")
        QApplication.processEvents()
    return watch.count


def test_text_changes_behind_a_fence_leave_the_window_layout_alone(qtbot):
    splitter, _panel, label = window_with_panel(qtbot, fenced=False)
    assert relayouts_after_text_changes(splitter, label) > 0       # what the fence prevents
    splitter, _panel, label = window_with_panel(qtbot, fenced=True)
    assert relayouts_after_text_changes(splitter, label) == 0
    assert label.text().endswith("x" * 11)


def test_the_panel_fills_the_fence_as_the_window_resizes(qtbot):
    splitter, panel, _label = window_with_panel(qtbot, fenced=True)
    fence = panel.parentWidget().parentWidget()        # the scroll area's viewport's
    assert isinstance(fence, LayoutFence) and panel.size() == fence.size()
    splitter.resize(900, 420)
    QApplication.processEvents()
    assert fence.height() > 300 and panel.size() == fence.size()
    assert fence.sizeHint() == panel.sizeHint()


def test_a_panel_taller_than_its_fence_scrolls_instead_of_squeezing_its_wrapped_lines(qtbot):
    """Wrapped lines in a short space: before, the panel took the fence's size and its rows were
    squeezed until their lines overlapped; now each keeps the height its lines need."""
    panel = QWidget()
    lay = QVBoxLayout(panel)
    labels = []
    for i in range(8):
        label = QLabel(f"row {i}: 118 blocks [13763, 9492, 2201, 3393, 1501, 14622, 8023, 7037, 12148, 10950]")
        label.setWordWrap(True)
        lay.addWidget(label)
        labels.append(label)
    fence = LayoutFence(panel)
    qtbot.addWidget(fence)
    fence.resize(220, 150)
    fence.show()
    qtbot.waitExposed(fence)
    QApplication.processEvents()
    for label in labels:
        assert label.height() >= label.heightForWidth(label.width()) > label.fontMetrics().height()
    tops = [label.geometry().top() for label in labels]
    assert all(a.geometry().bottom() < b.geometry().top() for a, b in zip(labels, labels[1:])), tops
    assert fence.verticalScrollBar().maximum() > 0 and panel.width() <= fence.width()
