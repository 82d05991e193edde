"""PySide6 6.12.0 on Python 3.11 drops a reference to None on every void Qt call, killing a
redrawing window within minutes (`Fatal Python error: none_dealloc`); pyproject.toml excludes that
release. This guards the pin: a long session of void Qt calls must leave the process alive."""
from __future__ import annotations
from tests.support.paths import REPO

import subprocess
import sys

ROOT = REPO


def test_many_void_qt_calls_do_not_deallocate_none():
    code = ("import sys\n"
            "from PySide6.QtCore import QPointF, QObject, Signal\n"
            "p = QPointF()\n"
            "for _ in range(200_000): p.setX(1.0)\n"
            "class O(QObject):\n"
            "    s = Signal()\n"
            "o = O()\n"
            "for _ in range(20_000): o.s.connect(print); o.s.disconnect(print)\n"
            "print('alive', sys.getrefcount(None) > 1000)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "alive True" in out.stdout
