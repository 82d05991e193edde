"""UI tests run offscreen with pytest-qt on states and records of the REAL engine with the fake
runner of tests/support (fakes.py)."""
from __future__ import annotations
from tests.support.paths import REPO

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = REPO

import pytest  # noqa: E402

from tests.support.fakes import FakeControl, FakeSource, big_source  # noqa: E402


@pytest.fixture
def source() -> FakeSource:
    return FakeSource()


@pytest.fixture(scope="session")
def big() -> FakeSource:
    """16,384 blocks, 256 running (decoding), 10,000 waiting: read it, never step it."""
    return big_source()


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


@pytest.fixture
def replay_window(qtbot, tmp_path):
    """The window replaying a recording of the fake source's run (``recordings.file.reader.Reader``)."""
    from recordings.file.reader import Reader
    from recordings.file.open_reader import open_reader
    from ui import MainWindow
    path = tmp_path / "fake.sqlite"
    FakeSource(record_to=path).close()
    reader = open_reader(path)
    w = MainWindow(reader, None, open_recording=Reader)
    w.timer.stop()
    qtbot.addWidget(w)
    yield w
    w.close()
    reader.close()
