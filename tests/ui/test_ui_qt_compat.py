"""The PySide6 6.12 reference-count guard: a long session of void Qt calls must not kill the
process (without the guard, ~5,000 calls are enough on Python 3.11)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_many_void_qt_calls_do_not_deallocate_none():
    code = ("import ui, sys\n"
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
