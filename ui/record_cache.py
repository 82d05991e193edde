"""Step records around the shown step, fetched from the source only where missing.

Records are immutable once a step completes, so a frame that advances one step asks the source
for one record instead of the whole window (a recording reader runs one small query per frame).
"""
from __future__ import annotations

from engine.outputs import StepRecord
from engine.source import StepSource


def step_span(shown_step: int, latest_step: int, window: int, minimum: int = 32) -> tuple[int, int]:
    """``(first_step, num_steps)`` of the step axis shared by the timeline and the plots: the
    whole run while it is shorter than ``window`` (at least ``minimum`` steps), then a window
    that ends at the shown step."""
    span = min(window, max(latest_step + 1, shown_step + 1, minimum))
    return max(0, shown_step - span + 1), span


class RecordCache:
    def __init__(self, source: StepSource, keep: int = 2000):
        self.source = source
        self.keep = keep
        self._by_step: dict[int, StepRecord] = {}

    def clear(self) -> None:
        self._by_step.clear()

    def get(self, start: int, stop: int) -> list[StepRecord]:
        """Records with ``start <= step < stop`` in step order (as ``source.records``)."""
        start = max(0, start)
        missing = [s for s in range(start, stop) if s not in self._by_step]
        if missing:
            for rec in self.source.records(missing[0], missing[-1] + 1):
                self._by_step[rec.step] = rec
        if len(self._by_step) > self.keep:
            lo, hi = start - self.keep // 4, stop + self.keep // 4
            self._by_step = {s: r for s, r in self._by_step.items() if lo <= s < hi}
        return [self._by_step[s] for s in range(start, stop) if s in self._by_step]
