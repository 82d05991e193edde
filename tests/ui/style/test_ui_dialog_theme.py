"""The window's dialogs come up in the window's dark palette and font (Qt does not pass a
parent's palette on to a child window: they were light in a dark window)."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QPalette

from tests.support.fakes import FakeControl, FakeSource
from ui import MainWindow
from ui.dialogs.check import FindingsDialog
from ui.dialogs.inject import InjectDialog
from ui.dialogs.knobs import KnobsDialog


@pytest.fixture
def window(qtbot):
    source = FakeSource()
    w = MainWindow(source, FakeControl(source))
    w.timer.stop()
    qtbot.addWidget(w)
    return w


def _is_dark(color: QColor) -> bool:
    return color.lightnessF() < 0.3


def _assert_follows(dialog, window) -> None:
    for role in (QPalette.Window, QPalette.WindowText, QPalette.Button, QPalette.Base):
        assert dialog.palette().color(role) == window.palette().color(role), role
    assert dialog.font().pointSize() == window.font().pointSize()
    image = dialog.grab().toImage()          # what is painted: the dialog's own background
    assert _is_dark(image.pixelColor(2, image.height() - 2))


def test_run_summary_follows_the_window(qtbot, replay_window):
    w = replay_window
    assert _is_dark(w.palette().color(QPalette.Window))
    dialog = w.show_run_summary()
    qtbot.addWidget(dialog)
    _assert_follows(dialog, w)
    dialog.close()


@pytest.mark.parametrize("make", [
    lambda w: InjectDialog(w.control, w),
    lambda w: KnobsDialog(w.control, 64, w),
    lambda w: FindingsDialog("check", "summary", [], w),
])
def test_engine_and_check_dialogs_follow_the_window(qtbot, window, make):
    dialog = make(window)
    qtbot.addWidget(dialog)
    _assert_follows(dialog, window)

