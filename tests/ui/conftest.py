"""UI tests run offscreen with pytest-qt; the fake run lives in fakes.py next to this file."""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

import pytest  # noqa: E402

from fakes import FakeControl, FakeSource  # noqa: E402


@pytest.fixture
def source() -> FakeSource:
    return FakeSource()


@pytest.fixture
def control(source) -> FakeControl:
    return FakeControl(source)


@pytest.fixture
def window(qtbot, source, control):
    from ui import MainWindow
    w = MainWindow(source, control)
    w.timer.stop()              # tests drive frames with w.refresh(); no timer races
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w
