"""Guard against a reference-count bug of PySide6 6.12 on Python < 3.12.

PySide6 6.12.0 (cp310-abi3 wheel) returns ``None`` from every void method without taking a
reference, and ``Signal.connect`` does the same with ``True``: each call drops one reference
that was never taken. From Python 3.12 on these singletons are immortal (PEP 683) and nothing
happens; on 3.11 their counts (about 5,000 for ``None`` at start-up) run down within seconds
of a redrawing window and the process dies with ``Fatal Python error: none_dealloc``.

``guard_singletons()`` detects the bug with a probe and, only then, gives ``None``, ``True``
and ``False`` 2**40 extra references: what 3.12 does by making them immortal. ``import ui``
runs it, so the app and the tests are covered.
"""
from __future__ import annotations

import ctypes
import sys

RESERVE = 1 << 40


def drops_singleton_refs() -> bool:
    """True if a void PySide6 call loses a reference to ``None`` (the 6.12 bug)."""
    from PySide6.QtCore import QPointF

    p = QPointF()
    before = sys.getrefcount(None)
    for _ in range(64):
        p.setX(1.0)
    return sys.getrefcount(None) <= before - 32


def guard_singletons() -> bool:
    """Make ``None``/``True``/``False`` effectively immortal if PySide6 needs it.
    Returns True when the guard is (or already was) in place."""
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if sys.getrefcount(None) > RESERVE // 2:
        return True
    if hasattr(sys, "gettotalrefcount") or not drops_singleton_refs():
        return False            # debug builds lay objects out differently; healthy PySide6
    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += RESERVE
    return True
