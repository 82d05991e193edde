"""Save a screenshot of the main window on the fake run at a mid-run step.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/support/screenshot.py docs/screenshot-fake.png
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]


def grab_window(path: str, step: int = 20, selected: str | None = "req-2") -> None:
    from PySide6.QtWidgets import QApplication

    from tests.support.fakes import FakeControl, FakeSource
    from ui import MainWindow
    app = QApplication.instance() or QApplication([])
    source = FakeSource()
    w = MainWindow(source, FakeControl(source))
    w.show()
    w.show_step(step)
    w.select_request(selected)
    save_grab(app, w, path)


def save_grab(app, widget, path: str) -> None:
    """Let ``widget`` lay out and paint, save its screenshot to ``path`` and close it."""
    for _ in range(10):
        app.processEvents()
    widget.grab().save(path)
    widget.close()


if __name__ == "__main__":
    grab_window(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot-fake.png")
