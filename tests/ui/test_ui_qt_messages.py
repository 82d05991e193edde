"""Qt's harmless "propagateSizeHints()" warning is filtered; other Qt messages still show."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtCore import qWarning
from PySide6.QtWidgets import QWidget
from ui.qt_app import qt_application
app = qt_application(["x"])
w = QWidget(); w.show(); app.processEvents()
qWarning("This plugin does not support propagateSizeHints()")
qWarning("a real problem")
"""


def test_the_harmless_warning_is_dropped_and_the_rest_kept():
    # a fresh process: the message handler is process-wide (pytest-qt installs its own)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "propagateSizeHints" not in done.stderr
    assert "a real problem" in done.stderr
