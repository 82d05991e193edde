"""A bounded cache of exact past states around the shown step, for scrubbing back.

Stepping back one step costs a replay from the nearest state before it (a keyframe of the
recording, or a state cached here) through the steps in between: at 16k blocks, 256 running and
10k waiting, ~2 ms to start a replay from a state (``StateTimeline.from_state``), ~0.2 ms a step
(a record unpacked from the live ring and applied; ~0.5 ms more read from a recording), ~0.5 ms
to copy a state out, and a keyframe decoded from the file ~5-30 ms. Two users:
:class:`app.live.source.LiveSource` keeps the states the engine published with their step (one
a frame while the window follows the run) and the states it replayed, and
``recordings.file.scrub_back`` does the same for a replayed recording (its keyframes as the bases). A
step back replays a few steps from a nearby state instead of reading the file, and
:class:`BackFill` fills the steps just below the shown one ahead of need, within ~2 ms a call
(one state a call once it is ahead of the scrub).

Memory is bounded by ``max_bytes`` (the states' arrays: ~2 MiB a state at 10k live requests, so
the default keeps ~32 of them, hundreds in a small run), never by history. When full, the state
farthest *after* the cursor (the step last asked for) goes first, then the one farthest before
it: scrubbing back leaves behind states it will not need again, while the states below the
cursor are the bases the next steps back replay from.
"""
from __future__ import annotations

import bisect
import threading
import time
from typing import Callable, Iterable

from engine.outputs import StepRecord
from engine.state.state import EngineState
from engine.state.timeline import StateTimeline

STATE_CACHE_BYTES = 64 * 2**20   # the states kept, at most (their arrays' bytes)
ID_BYTES = 64                    # a request id's share of a state (tuple slot, lookup entry)


def state_nbytes(state: EngineState) -> int:
    """Bytes ``state`` holds, about: its numpy arrays plus :data:`ID_BYTES` per live request
    (the id strings themselves are shared between states)."""
    arrays = (*state.columns.values(), state.block_owner, state.block_pos, state.block_hash,
              state.shared_seq, state.shared_block, state.cpu_owner)
    return sum(a.nbytes for a in arrays) + ID_BYTES * len(state.request_ids)


class StateCache:
    """Exact states by step (each equal to ``Reader.state_at(step)``), at most ``max_bytes`` of
    them (:func:`state_nbytes`; a single state bigger than that is kept alone). Thread-safe (the engine thread adds the states it publishes,
    the window's thread the ones it replays). ``cursor``: the step the window last asked for
    (None while it follows the newest step: the oldest states go first).
    Raises ``ValueError`` for a ``max_bytes`` below 1."""

    def __init__(self, max_bytes: int = STATE_CACHE_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.max_bytes = max_bytes
        self.cursor: int | None = None               # None: following the newest step
        self.nbytes = 0
        self.evicted_below = 0        # states evicted from below the cursor (the cache is full)
        self._lock = threading.Lock()
        self._steps: list[int] = []                    # sorted
        self._states: dict[int, tuple[EngineState, int]] = {}

    def __len__(self) -> int:
        return len(self._steps)

    def __contains__(self, step: int) -> bool:
        return step in self._states

    def steps(self) -> list[int]:
        """The cached steps, ascending."""
        with self._lock:
            return list(self._steps)

    def clear(self) -> None:
        with self._lock:
            self._steps.clear()
            self._states.clear()
            self.nbytes = 0

    def has_room(self) -> bool:
        """Whether one more state of the mean size held fits within ``max_bytes`` without
        evicting a state below the cursor (those after it go first: a scrub back has passed
        them). True while empty."""
        with self._lock:
            n = len(self._steps)
            if n == 0:
                return True
            free = self.max_bytes - self.nbytes
            if self.cursor is not None:
                after = self._steps[bisect.bisect_right(self._steps, self.cursor):]
                free += sum(self._states[s][1] for s in after)
            return free >= self.nbytes / n

    def get(self, step: int) -> EngineState | None:
        hit = self._states.get(step)
        return None if hit is None else hit[0]

    def at_or_before(self, step: int) -> EngineState | None:
        """The cached state of the newest step ``<= step``, or None."""
        with self._lock:
            i = bisect.bisect_right(self._steps, step)
            return self._states[self._steps[i - 1]][0] if i else None

    def add(self, state: EngineState) -> None:
        """Keep ``state`` (replacing one of the same step), then evict down to ``max_bytes``
        (the newly added one last of all)."""
        step, size = state.step, state_nbytes(state)
        with self._lock:
            if step in self._states:
                self.nbytes -= self._states.pop(step)[1]
            else:
                bisect.insort(self._steps, step)
            self._states[step] = (state, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes and len(self._steps) > 1:
                self._evict(keep=step)

    def _evict(self, keep: int) -> None:
        """Drop the state farthest after the cursor, else the one farthest before it."""
        steps = self._steps
        victim = steps[-1] if self.cursor is not None and steps[-1] > self.cursor else steps[0]
        if victim == keep:
            victim = steps[-2] if victim == steps[-1] else steps[1]
        if self.cursor is not None and victim < self.cursor:
            self.evicted_below += 1
        steps.remove(victim)
        self.nbytes -= self._states.pop(victim)[1]


def replay(base: EngineState, records: Iterable[StepRecord], step: int,
           keep: Callable[[int], bool] = lambda s: False,
           on_state: Callable[[EngineState], None] = lambda s: None) -> EngineState:
    """``base`` advanced through ``records`` (the steps after it, in order) to ``step``, with
    :class:`engine.state.timeline.StateTimeline` (the one implementation of state + record). The
    states of the steps ``keep`` says yes to on the way are snapshotted and handed to
    ``on_state``. Raises ``ValueError`` when ``records`` do not reach ``step``."""
    if base.step == step:
        return base
    timeline = StateTimeline.from_state(base)
    for record in records:
        if record.step > step:
            break
        timeline.apply(record)
        if record.step == step:
            return timeline.snapshot()
        if keep(record.step):
            on_state(timeline.snapshot())
    raise ValueError(f"records after step {base.step} stop at step {timeline.step}, "
                     f"before step {step}")


class BackFill:
    """Fills the steps just below the cursor ahead of a scrub back, within a time budget a call.

    ``run(cursor, cache, base_of, records_of)`` looks for the highest step in
    ``cursor - depth .. cursor - 1`` not in ``cache``, replays from the newest cached state
    before it (``base_of(step)``: that state, or None when none is near enough) through
    ``records_of(start, stop)`` (an iterable of the records, in order) and adds the state of
    every missing step on the way to ``cache`` (at most ``depth`` below the target). The replay
    resumes on the next call while its target stays within ``depth`` below the cursor; when it
    is done, the next stretch below starts in the same call if time is left.

    A call works until ``budget_s`` seconds (``time.perf_counter``, checked after each unit of
    work: starting a replay from its base, applying a record, copying a state out) have passed,
    and once the cache is ahead (the ``lead`` steps just below the cursor all cached) it copies
    one state at most: a scrub back uses one state a frame, so one a frame keeps pace, and the
    frame pays one copy (~0.5 ms at 10k live requests) instead of the whole stretch's (a base's
    copy ~2 ms, then ~0.7 ms a step). A call also stops when the cache had to evict a state below
    the cursor (full: filling more would only evict what was filled).

    Checkpoints (``checkpoints=True``, for a recording, whose records are decoded from the
    file): a replay that starts far below its stretch (from a keyframe up to 128 steps
    back) also keeps, while the cache has room (:meth:`StateCache.has_room`), the states where
    the next stretches below will start (every ``depth + 1`` steps below the stretch), so each
    later stretch replays about ``depth`` records from its checkpoint instead of all of them
    from the keyframe again: every record is applied about twice in a whole scrub back, and the
    records read on the way need not be kept between stretches (a decoded record at 256
    running is ~500 tracked objects that the garbage collector's full passes walk). A unit of work is not
    split: a call can overrun the budget by one (a base read from a recording's keyframe:
    ~5-30 ms). Raises ``ValueError`` for a ``depth`` or ``lead`` below 1 or a negative
    ``budget_s``."""

    def __init__(self, depth: int = 16, budget_s: float = 0.002, lead: int = 8,
                 checkpoints: bool = False) -> None:
        if depth < 1 or lead < 1 or budget_s < 0:
            raise ValueError(f"depth and lead must be >= 1 and budget_s >= 0, got depth={depth}, "
                             f"lead={lead}, budget_s={budget_s}")
        self.depth, self.budget_s, self.lead = depth, budget_s, lead
        self.checkpoints = checkpoints
        self._job: tuple[StateTimeline, int, int] | None = None    # (timeline, lowest, highest)

    def reset(self) -> None:
        self._job = None

    def ahead(self, cursor: int, cache: StateCache) -> int:
        """How many of the steps just below ``cursor`` are cached, without a gap (up to
        ``lead``)."""
        n = 0
        while n < self.lead and cursor - 1 - n >= 0 and (cursor - 1 - n) in cache:
            n += 1
        return n

    def run(self, cursor: int, cache: StateCache,
            base_of: Callable[[int], EngineState | None],
            records_of: Callable[[int, int], Iterable[StepRecord]]) -> int:
        """Advance the fill for at most about ``budget_s``; returns the states it added."""
        deadline = time.perf_counter() + self.budget_s
        made, evicted = 0, cache.evicted_below
        while True:
            job = self._job_near(cursor)
            if job is None:
                job = self._start(cursor, cache, base_of)
                if job is None or time.perf_counter() >= deadline:
                    return made
            timeline, first, last = job
            applied = 0
            for record in records_of(timeline.step + 1, last + 1):
                timeline.apply(record)
                applied += 1
                if record.step >= first and record.step not in cache:
                    cache.add(timeline.snapshot())
                    made += 1
                elif (self.checkpoints and record.step < first - 1
                      and (first - 1 - record.step) % (self.depth + 1) == 0
                      and record.step not in cache and cache.has_room()):
                    cache.add(timeline.snapshot())     # a checkpoint: a later stretch's base
                if (record.step >= last or time.perf_counter() >= deadline
                        or cache.evicted_below > evicted
                        or (made and self.ahead(cursor, cache) >= self.lead)):
                    break
            if timeline.step >= last or not applied:       # done (or the records stop short)
                self._job = None
            if not applied or time.perf_counter() >= deadline or cache.evicted_below > evicted or (
                    made and self.ahead(cursor, cache) >= self.lead):
                return made

    def _job_near(self, cursor: int) -> tuple[StateTimeline, int, int] | None:
        """The replay under way, if its target is still within ``depth`` below ``cursor``."""
        job = self._job
        if job is not None and not (max(0, cursor - self.depth) <= job[2] < cursor
                                    and job[0].step < job[2]):
            job = self._job = None           # the cursor moved away, or the job is done
        return job

    def _start(self, cursor: int, cache: StateCache,
               base_of: Callable[[int], EngineState | None]) -> tuple[StateTimeline, int, int] | None:
        """A replay towards the highest missing step within ``depth`` below ``cursor`` (None
        when nothing is missing or no base is near): every missing step from the base up,
        one replay a stretch between cached states, at most ``depth`` of them."""
        lo = max(0, cursor - self.depth)
        target = next((s for s in range(cursor - 1, lo - 1, -1) if s not in cache), None)
        base = None if target is None else base_of(target)
        if base is None:
            self._job = None
            return None
        self._job = (StateTimeline.from_state(base), max(base.step + 1, target - self.depth), target)
        return self._job
