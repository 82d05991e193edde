"""Frame pacing: which of the window's slower views a frame updates while draws stream in.

At 200 steps/s and 30 frames/s every frame has a new step, and redrawing every view every
frame costs more than a 16 ms frame on 2 cores (``bench/bench_ui_frame.py``). The views a user
watches move (the KV block map, the slot timeline, the status bar) are redrawn every draw; the
views read rather than watched (the queue tables, the metrics plots with the inspector) are
split into groups and, while draws *stream*, only one group is updated per draw, round robin,
so each is at most one draw behind. This is how a game or a profiler UI such as Perfetto spends
a fixed frame budget: the headline view every frame, secondary panels at a lower rate.

Draws stream while at most one *still* frame (a tick of the window's frame timer with nothing
new) passed since the previous draw: a live run as fast as the frame rate or faster, a replay
playing (its own timer draws between the window's ticks), a key held to scrub. After two still
frames the stream has stopped: the window updates the skipped groups (``catch_up``), and the
next draw updates every view. A draw the user asked for directly (``full_next()``: a single
step, a jump, a click on Live, a forced draw) updates every view too, so a paused, stepped or
jumped-to window is always consistent.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

STILL_FRAMES = 2   # still frames after which draws no longer stream (the skipped groups catch up)


class FramePacer:
    """Round-robin updates of the slow view groups while draws stream.

    ``FramePacer(groups)``: ``groups`` names the slow view groups (at least one; strings).
    Per frame the window calls ``begin()`` when it draws (-> the groups to update: all unless
    draws stream, else the one whose turn it is) or ``still()`` when it has nothing new to draw
    (-> the stale groups to update now: once :data:`STILL_FRAMES` still frames passed, else
    none). ``full_next()`` makes the next draw update every group. ``stale`` names the groups
    whose shown data is older than the last draw. Raises ``ValueError`` for no groups or a
    repeated name."""

    def __init__(self, groups: Sequence[str]):
        if not groups or len(set(groups)) != len(groups):
            raise ValueError(f"FramePacer needs distinct group names, got {list(groups)!r}")
        self.groups = tuple(groups)
        self._turn = deque(self.groups)
        self.stale: set[str] = set()
        self._still = STILL_FRAMES          # still frames since the last draw (none drawn yet)
        self._full = False

    @property
    def streaming(self) -> bool:
        """Whether a draw now continues a stream of draws."""
        return not self._full and self._still < STILL_FRAMES

    def full_next(self) -> None:
        """The next draw updates every group (the user asked for that step)."""
        self._full = True

    def begin(self) -> tuple[str, ...]:
        """A draw: the groups to update in it; the others become stale."""
        streaming = self.streaming
        self._still, self._full = 0, False
        if not streaming or len(self.groups) == 1:
            self.stale.clear()
            return self.groups
        group = self._turn[0]
        self._turn.rotate(-1)
        self.stale.update(self.groups)
        self.stale.discard(group)
        return (group,)

    def still(self) -> tuple[str, ...]:
        """A frame with nothing new to draw: the stale groups (in group order) to update now,
        once the stream has stopped; then none is stale."""
        self._still += 1
        if self._still < STILL_FRAMES or not self.stale:
            return ()
        due = tuple(g for g in self.groups if g in self.stale)
        self.stale.clear()
        return due
