"""Frame pacing: which of the window's slower views a frame updates while draws stream in.

At 200 steps/s and 30 frames/s every frame has a new step, and redrawing every view every
frame costs more than a 16 ms frame on 2 cores (``bench/bench_ui_frame.py``). The views a user
watches move (the KV block map, the slot timeline, the status bar) are redrawn every frame; the
views read rather than watched (the queue tables, the metrics plots with the inspector) are
split into groups and, while draws *stream*, only one group is updated per frame, round robin,
so each updates at half the frame rate (15 Hz) and at most one frame late. This is how a game
or a profiler UI such as Perfetto spends a fixed frame budget: the headline view every frame,
secondary panels at a lower rate.

A draw streams when the previous frame also drew (``begin(streaming=...)`` is told by the
window: its ``refresh()`` drew last time too). The first draw after a still frame, a forced
draw, a new source or a single step therefore updates every view, so a paused or single-stepped
window is always consistent; while streaming, ``stale`` names the groups a frame skipped, and
the window updates them (``catch_up``) on the first frame that has nothing new to draw.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence


class FramePacer:
    """Round-robin updates of the slow view groups while draws stream.

    ``FramePacer(groups)``: ``groups`` names the slow view groups (at least one; strings).
    ``begin(streaming)`` -> the groups this draw updates (all when not streaming, else the one
    whose turn it is); ``stale`` the groups whose shown data is older than the last draw;
    ``catch_up()`` -> the stale groups, then cleared (for a frame without a new draw).
    Raises ``ValueError`` for no groups or a repeated name."""

    def __init__(self, groups: Sequence[str]):
        if not groups or len(set(groups)) != len(groups):
            raise ValueError(f"FramePacer needs distinct group names, got {list(groups)!r}")
        self.groups = tuple(groups)
        self._turn = deque(self.groups)
        self.stale: set[str] = set()

    def begin(self, streaming: bool) -> tuple[str, ...]:
        """The groups to update in this draw; the others become stale."""
        if not streaming or len(self.groups) == 1:
            self.stale.clear()
            return self.groups
        group = self._turn[0]
        self._turn.rotate(-1)
        self.stale.update(self.groups)
        self.stale.discard(group)
        return (group,)

    def catch_up(self) -> tuple[str, ...]:
        """The stale groups (in group order), which the caller updates now; none stay stale."""
        due = tuple(g for g in self.groups if g in self.stale)
        self.stale.clear()
        return due
