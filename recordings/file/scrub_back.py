"""Scrubbing a recording back: exact past states below the shown step, filled ahead of need.

A step forward continues the reader's last replay (one record applied), but a step back has no
such shortcut: without help each one decodes the keyframe at or before it (~25-35 ms at 14k live
requests) and replays the steps up to it (~0.5 ms a record). :class:`ScrubBack` gives
``recordings.file.reader.Reader`` what the live window has (``app.live.source``): a bounded
:class:`engine.state.cache.StateCache` of the states below the cursor, filled a stretch ahead of
a scrub back by :class:`engine.state.cache.BackFill` within ~2 ms a call, from the nearest cached
state or keyframe, so a step back finds its state cached and a keyframe is decoded once per
keyframe interval instead of once per step. It acts only while the reader is asked for steps
just below the last one asked (a scrub back): forward play, random jumps and whole-run passes
(``batchscope check``, exports) do no fill work and keep no states here.

Decoded records are kept only until the fill applies them (at most a read chunk ahead of it): a
record at 256 running is ~500 named tuples the garbage collector tracks, and ~200 of them kept
below the cursor made every full collection walk ~100k objects and long-lived records
promoted into the oldest generation triggered those full collections inside scrub frames. The
fill's checkpoints (:class:`engine.state.cache.BackFill`) are what spare it re-reading them.
"""
from __future__ import annotations

from typing import Callable, Iterator

from engine.outputs import StepRecord
from engine.state.state import EngineState
from engine.state.cache import BackFill, StateCache

READ_CHUNK = 4       # records read from the file in one query by the fill (at most this many wait)


class ScrubBack:
    """The scrub-back cache of one reader. ``moved_back(target)`` says whether ``target`` is a
    step back (at most ``fill.depth`` below the last step asked for) and remembers it; during a
    scrub back, ``states`` answers the steps it holds, ``keep(target)`` says which steps a
    replay up to a missing ``target`` should keep on its way, and ``served(state, base_of,
    read)`` keeps the state served and advances the fill (``BackFill.run``). Memory:
    ``states`` is bounded by ``max_bytes``, ``records`` by :data:`READ_CHUNK`."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.states = StateCache() if max_bytes is None else StateCache(max_bytes)
        self.fill = BackFill(checkpoints=True)
        self.records: dict[int, StepRecord] = {}     # read ahead of the fill, not applied yet
        self._last: int | None = None

    def moved_back(self, target: int) -> bool:
        last, self._last = self._last, target
        back = last is not None and 0 < last - target <= self.fill.depth
        if not back and last != target:
            self.fill.reset()                     # forward or a jump: the fill's job is stale
            self.records.clear()
        return back

    def keep(self, target: int) -> Callable[[int], bool]:
        """The steps a replay up to ``target`` passes that the next steps back need (the
        fill's ``lead`` below it, when the step above it is cached: the scrub goes on)."""
        if target + 1 not in self.states:
            return lambda s: False
        lead, states = self.fill.lead, self.states
        return lambda s: target - lead <= s < target and s not in states

    def served(self, state: EngineState, base_of: Callable[[int], EngineState | None],
               read: Callable[[int, int], list[StepRecord]]) -> None:
        """Keep ``state`` (the step just served, now the cursor) and fill below it, with the
        records ``read(start, stop)`` returns (those read ahead of the fill's replay wait in
        :attr:`records` when a call's budget ends mid-chunk: a resumed replay reads each record
        once)."""
        self.states.cursor = step = state.step
        if step not in self.states:
            self.states.add(state)
        self.fill.run(step, self.states, base_of, lambda a, b: self.records_from(read, a, b))
        if len(self.records) > READ_CHUNK:          # left by a replay the fill gave up
            self.records = {s: r for s, r in self.records.items() if s < step}
            if len(self.records) > READ_CHUNK:
                self.records.clear()

    def records_from(self, read: Callable[[int, int], list[StepRecord]], start: int, stop: int,
                     chunk: int = READ_CHUNK) -> Iterator[StepRecord]:
        """The records ``start <= step < stop`` (consecutive steps), from :attr:`records` or
        read ``chunk`` at a time; each leaves :attr:`records` as it is handed out (a replay
        applies a record once); stops at the first step the file does not have."""
        records = self.records
        for k in range(start, stop):
            record = records.pop(k, None)
            if record is None:
                for r in read(k, min(stop, k + chunk)):
                    records[r.step] = r
                record = records.pop(k, None)
                if record is None:
                    return
            yield record
