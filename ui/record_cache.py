"""Step summaries around the shown step, fetched from the source only where missing.

Steps are immutable once they complete, so a frame that advances one step asks the source for
one step instead of the whole window, and a jump near the shown step for the steps it does not
have yet. What is fetched is a :class:`ui.step_summary.StepSummary` per step (a recording
reads the batch arrays and counts of a step range in one light query; no record is decoded).
"""
from __future__ import annotations

from engine.state.source import StepSource
from ui.step_summary import StepSummary, fetch_summaries


def step_span(shown_step: int, latest_step: int, window: int, minimum: int = 32) -> tuple[int, int]:
    """``(first_step, num_steps)`` of the step axis shared by the timeline and the plots: the
    whole run while it is shorter than ``window`` (at least ``minimum`` steps, rounded up to a
    multiple of ``window // 4``), then a window of ``window`` steps that pages forward a quarter
    window at a time, so the shown step is in its last quarter. Either way the axes move at most
    once every ``window // 4`` steps, not every frame: a move relabels the step axes and redraws
    the whole timeline (~4 ms when the span grows), every 7 frames at 200 steps/s."""
    grain = max(1, window // 4)
    span = min(window, max(minimum, -(-max(latest_step + 1, shown_step + 1) // grain) * grain))
    if shown_step < span:
        return 0, span
    page = max(1, span // 4)
    return ((shown_step - span) // page + 1) * page, span


class RecordCache:
    """Summaries of a source's steps, by step (at most ``keep``, those nearest the last
    request kept)."""

    def __init__(self, source: StepSource, keep: int = 2000):
        self.source = source
        self.keep = keep
        self._by_step: dict[int, StepSummary] = {}

    def clear(self) -> None:
        self._by_step.clear()

    def get(self, start: int, stop: int) -> list[StepSummary]:
        """Summaries of the steps ``start <= step < stop`` the source has, in step order; only
        the span from the first to the last step not cached yet is fetched."""
        start = max(0, start)
        missing = [s for s in range(start, stop) if s not in self._by_step]
        if missing:
            for summary in fetch_summaries(self.source, missing[0], missing[-1] + 1):
                self._by_step[summary.step] = summary
        if len(self._by_step) > self.keep:
            lo, hi = start - self.keep // 4, stop + self.keep // 4
            self._by_step = {s: r for s, r in self._by_step.items() if lo <= s < hi}
        return [self._by_step[s] for s in range(start, stop) if s in self._by_step]


class StepMemo:
    """``fn(record)`` computed once per record and remembered by step (records are immutable):
    per-step derived data (a slot column, a row of metrics) costs one call per new step, not one
    per step per frame. A record (or summary) of the same step from another source is
    recomputed."""

    def __init__(self, fn, keep: int = 4000):
        self.fn, self.keep = fn, keep
        self._by_step: dict[int, tuple[object, object]] = {}

    def get(self, records: list) -> list:
        """``[fn(r) for r in records]``, from memory where possible."""
        memo, out = self._by_step, []
        for r in records:
            hit = memo.get(r.step)
            if hit is None or hit[0] is not r:
                hit = memo[r.step] = (r, self.fn(r))
            out.append(hit[1])
        if len(memo) > self.keep and records:
            lo, hi = records[0].step - self.keep // 4, records[-1].step + self.keep // 4
            self._by_step = {s: v for s, v in memo.items() if lo <= s <= hi}
        return out
