"""Per-frame CPU sections for bench/bench_ui_frame.py ``--sections``: where a slow frame goes.

``Sections(w, app)`` wraps the calls one frame of ``ui.MainWindow`` makes (the source's
``state_at``, the back fill inside it, the step summaries, each view's update) with a timer of
the calling thread's CPU time (``time.thread_time``: on a shared machine wall time includes
waiting for other processes), and times the repaint (``processEvents``) by window area through
the application's ``notify`` (``bench_ui_frame.timing_app``). ``frame()`` opens a frame;
``report(totals)`` prints, per section, the mean CPU ms over all frames and over the slowest
5% (the frames at or above the p95 of ``totals``), so the sections that make the p95 stand out.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np


class Sections:
    """Per-frame CPU ms by section (see the module docstring)."""

    def __init__(self, w, app, areas: dict) -> None:
        self.frames: list[dict[str, float]] = []
        self._cur: dict[str, float] | None = None
        self._depth: list[str] = []
        self.app, self.areas = app, areas
        src = w.source
        self._wrap(src, "state_at", "state fetch")
        fill = getattr(src, "_fill", None)
        if fill is not None:
            self._wrap(fill, "run", "  of which back fill")
        self._wrap(w.cache, "get", "step summaries")
        self._wrap(w.block_map, "set_state", "block map update")
        self._wrap(w.timeline, "set_records", "slot timeline update")
        self._wrap(w.queues, "set_state", "queue tables update")
        self._wrap(w.metrics, "set_records", "metrics update")
        self._wrap(w.inspector, "set_state", "inspector update")

    def _wrap(self, obj, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            if self._cur is None:
                return fn(*a, **k)
            t = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                self._cur[label] = self._cur.get(label, 0.0) + (time.thread_time() - t) * 1e3
        setattr(obj, name, timed)

    @contextmanager
    def frame(self):
        """Time one frame's sections (call ``paint()`` inside for the repaint)."""
        self._cur = {}
        try:
            yield
        finally:
            self.frames.append(self._cur)
            self._cur = None

    def paint(self) -> None:
        """``processEvents``, its paint events timed by area of the window."""
        paints: dict = {}
        self.app.paints = paints
        t = time.thread_time()
        self.app.processEvents()
        total = (time.thread_time() - t) * 1e3
        self.app.paints = None
        by_area: dict[str, float] = defaultdict(float)
        for obj, (_n, cpu) in paints.items():
            area, o = "paint: rest of the window", obj
            while o is not None and area == "paint: rest of the window":
                area = next((f"paint: {n}" for n, a in self.areas.items() if a is o), area)
                o = o.parent()
            by_area[area] += cpu * 1e3
        for area, ms in by_area.items():
            self._cur[area] = self._cur.get(area, 0.0) + ms
        self._cur["events besides paint"] = total - sum(by_area.values())

    def report(self, totals: list[float], indent: str = "  ") -> None:
        """Mean CPU ms per section over all frames and over the frames whose ``totals`` (the
        frames' CPU ms, same order) are at or above their p95."""
        t = np.asarray(totals)
        slow = t >= np.percentile(t, 95)
        names = sorted({n for f in self.frames for n in f},
                       key=lambda n: -np.mean([f.get(n, 0.0) for f in self.frames]))
        print(f"{indent}{'section (CPU ms per frame)':30s} {'mean':>7s} {'p95 frames':>11s}")
        for name in names:
            v = np.array([f.get(name, 0.0) for f in self.frames])
            print(f"{indent}{name:30s} {v.mean():7.2f} {v[slow].mean():11.2f}")
        rest = t - np.array([sum(v for n, v in f.items() if not n.startswith("  ")) for f in self.frames])
        print(f"{indent}{'rest of the frame':30s} {rest.mean():7.2f} {rest[slow].mean():11.2f}")
        print(f"{indent}{'whole frame':30s} {t.mean():7.2f} {t[slow].mean():11.2f}  "
              f"({int(slow.sum())} frames at or above p95 {np.percentile(t, 95):.2f})")
