"""One shared position for several runs in the compare window: by time or by step.

By time, the positions ("ticks") are every step start of every run, on their common engine
clock, in order: moving one tick forward shows the next moment at which any run starts a step,
and each run shows its last step started at or before that moment (its step 0 before its first
step started, so the window opens on step 0 of every run, never on an empty "step -1"). By
step, tick k is step k of every run (clamped to each run's last step).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MODES = ("time", "step")


class SyncClock:
    """``SyncClock(clocks, by)``: ``clocks[r]`` is run r's step start times (float64 [steps r],
    step order, on one engine clock); ``by`` is ``"time"`` or ``"step"``. Raises ``ValueError``
    for another mode."""

    def __init__(self, clocks: Sequence[np.ndarray], by: str = "time"):
        if by not in MODES:
            raise ValueError(f"sync by {by!r}: choose from {', '.join(MODES)}")
        self.by = by
        self.clocks = [np.asarray(c, np.float64) for c in clocks]
        self.latest = [len(c) - 1 for c in self.clocks]
        if by == "time":
            self.ticks = np.unique(np.concatenate(self.clocks)) if self.clocks else np.zeros(0)
        else:
            self.ticks = np.arange(max(self.latest, default=-1) + 1, dtype=np.float64)

    @property
    def last_tick(self) -> int:
        return len(self.ticks) - 1

    def steps_at(self, tick: int) -> list[int]:
        """The step each run shows at ``tick`` (clamped to the ticks): by time its last step
        started by then, or step 0 before its first; -1 only for a run without steps."""
        if self.last_tick < 0:
            return [-1] * len(self.clocks)
        tick = min(max(int(tick), 0), self.last_tick)
        if self.by == "step":
            return [min(tick, last) for last in self.latest]
        t = self.ticks[tick]
        return [max(0, int(np.searchsorted(c, t, side="right")) - 1) if len(c) else -1 for c in self.clocks]

    def x_at(self, tick: int) -> float:
        """The position on the plots' x axis: engine time (by time) or the step (by step)."""
        if self.last_tick < 0:
            return 0.0
        return float(self.ticks[min(max(int(tick), 0), self.last_tick)])

    def tick_at_time(self, t: float) -> int:
        """By time: the last tick at or before engine time ``t``; by step: the first run's step
        running at ``t``."""
        if self.by == "time":
            return max(0, int(np.searchsorted(self.ticks, t, side="right")) - 1)
        return max(0, int(np.searchsorted(self.clocks[0], t, side="right")) - 1) if self.clocks else 0

    def tick_at_step(self, step: int) -> int:
        """By step: ``step``; by time: the tick at which the first run starts ``step``."""
        if self.by == "step" or not self.clocks or not len(self.clocks[0]):
            return max(0, min(int(step), self.last_tick))
        return self.tick_at_time(self.clocks[0][min(max(int(step), 0), self.latest[0])])
