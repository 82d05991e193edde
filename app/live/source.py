"""LiveSource: a StepSource fed by the engine thread, readable from the UI thread, bounded in memory.

It keeps the newest published :class:`EngineState` and a ring of the newest step records; all
older history is read back from the recording being written through a ``recordings.file.reader.Reader``
(which opens the file read-only mid-write). A past state is the reader's state at the last
committed step, advanced through the ring with :class:`engine.state.timeline.StateTimeline`: the one
implementation of state + record, so live and replay cannot differ.

Past states the window asks for are kept in a bounded :class:`engine.state.cache.StateCache`
(with the states the engine published with their step, one a frame while the window follows):
a step back replays a few steps from a nearby cached state, and :class:`engine.state.cache.BackFill`
fills the steps below the shown one a few per call ahead of a scrub back, instead of each step
back loading a keyframe of the file and replaying up to it (~25 ms at 10k live requests).

The ring keeps each record packed (``app.live.step_ring``: the batch and tokens as numpy columns, the
rest as plain tuples), not as the record's ~500 named tuples at 256 running: the garbage
collector does not walk it, so a full collection stays short however long the run.
"""
from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from app.live import step_ring
from engine.state.cache import BackFill, StateCache, replay
from app.live.step_ring import PackedStep, step_of
from engine.outputs import StepRecord
from engine.run_info import RunInfo
from engine.state.state import EngineState
from recordings.info import timeline_events

RING_STEPS = 1024           # newest records kept in memory
PUBLISH_INTERVAL_S = 1 / 60  # the engine hands over a fresh state at most this often
NEAR_STEPS = 32             # a cached state this close before a step is replayed from


class LiveSource:
    """``publish``/``publish_record`` are called on the engine thread, the getters on the UI
    thread; a lock guards the hand-over. ``open_reader(path)`` opens the recording named by
    ``run_info().recording`` (``recordings.file.reader.Reader``) once it is needed.
    """

    def __init__(self, initial: EngineState | None = None,
                 open_reader: Callable[[Path], Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._ring: deque[PackedStep] = deque(maxlen=RING_STEPS)
        self._latest = initial or EngineState(-1, 0.0, 0, 16, 1)
        self._run_info = RunInfo()           # empty until the engine is built
        self._open_reader = open_reader
        self._reader = None
        self._last_publish = 0.0
        self.states = StateCache()        # exact past states near the shown step (bounded)
        self._fill = BackFill()        # no checkpoints: the ring's records are cheap to replay
        self._keyframe: EngineState | None = None   # the keyframe last read (one state)

    def reset(self, initial: EngineState, run_info: RunInfo) -> None:
        """Start over for a new engine (called once the engine is built)."""
        with self._lock:
            self._ring.clear()
            self._latest = initial
            self._run_info = run_info
            self._reader = None
            self.states.clear()
            self._fill.reset()
            self._keyframe = None

    # --- engine thread --------------------------------------------------------------------
    def wants_state(self) -> bool:
        """True when a fresh state is due (the UI pulls at most at its frame rate)."""
        return time.perf_counter() - self._last_publish >= PUBLISH_INTERVAL_S

    def publish(self, state: EngineState, record: StepRecord | None = None) -> None:
        """Hand over the newest state (and the record of the step that made it: the state is
        then exactly the one after that step, and kept in :attr:`states` for scrubbing back;
        one without a record may hold changes made since, recorded with the next step)."""
        packed = step_ring.pack(record) if record is not None else None
        with self._lock:
            if record is not None:
                self._ring.append(packed)
            self._latest = state
            self._last_publish = time.perf_counter()
        if record is not None and state.step == record.step:
            self.states.add(state)

    def publish_record(self, record: StepRecord) -> None:
        """Hand over a step's record without a state (between frames)."""
        packed = step_ring.pack(record)
        with self._lock:
            self._ring.append(packed)

    # --- StepSource ---------------------------------------------------------------------
    def run_info(self) -> RunInfo:
        with self._lock:
            return self._run_info

    def latest_step(self) -> int:
        """The step of the newest published state."""
        with self._lock:
            return self._latest.step

    def latest_state(self) -> EngineState:
        """The newest state, including changes since the last step (injected requests...)."""
        with self._lock:
            return self._latest

    def state_at(self, step: int) -> EngineState:
        """The state after ``step``: the newest one for ``step >= latest_step()``; else from
        :attr:`states`, or replayed from a cached state at most :data:`NEAR_STEPS` before it,
        or from the recording's state at its last committed step at or before ``step``
        (through the ring). Then fills a few of the steps below ``step`` (:class:`BackFill`)."""
        with self._lock:
            latest, ring = self._latest, list(self._ring)
        if step >= latest.step:
            self.states.cursor = None
            return latest
        self.states.cursor = step
        state = self.states.get(step)
        if state is None:
            state = self._replayed(step, ring)
        if state.step == step:
            self._fill.run(step, self.states, lambda s: self._fill_base(s, ring),
                           lambda a, b: self._records_iter(ring, a, b))
        return state

    def _fill_base(self, step: int, ring: list[PackedStep]) -> EngineState | None:
        """Where :class:`BackFill` starts a replay up to ``step``: a cached state near it, else
        the recording's keyframe at or before it (a keyframe is read without replaying steps:
        ~10 ms at 10k live requests, once a keyframe interval), when the ring holds the steps
        after it; None otherwise (history older than the ring: each step is read from the file).
        The keyframe last read is kept beside the cache (one state: the stretches of one
        keyframe interval start from it however often the cache evicts it)."""
        base = self._near_base(step, ring)
        reader = self._history() if base is None and ring else None
        if reader is None:
            return base
        keyframe = reader.execute("SELECT max(step) FROM keyframes WHERE step <= ?", (step,))[0][0]
        if keyframe is None or step_of(ring[0]) > keyframe + 1:
            return None
        if self._keyframe is None or self._keyframe.step != keyframe:
            # as stored: the reader's state_at would take keyframes asked one after another
            # for a scrub back of its own (and fill its cache from the file)
            self._keyframe = reader.keyframe_state(keyframe)
        self.states.add(self._keyframe)
        return self._keyframe

    def _near_base(self, step: int, ring: list[PackedStep]) -> EngineState | None:
        """The newest cached state at most :data:`NEAR_STEPS` before ``step`` whose following
        steps are in ``ring`` (or None)."""
        base = self.states.at_or_before(step)
        if base is None or step - base.step > NEAR_STEPS or not ring or step_of(ring[0]) > base.step + 1:
            return None
        return base

    def _replayed(self, step: int, ring: list[PackedStep]) -> EngineState:
        """The state after ``step`` (< the newest), replayed and kept in :attr:`states` (with
        the :attr:`BackFill.lead` steps below it when ``step + 1`` is cached: a scrub back)
        from a cached state near it or the recording's keyframe before it, through the ring
        (:meth:`_fill_base`); from the recording's state at ``step`` itself only when the ring
        does not reach back to a keyframe (older history). Asking the recording for every step
        of a scrub back would decode its records from the file (~500 tracked objects each at
        256 running) and fill the reader's own scrub-back cache beside this one. The
        recording's newest state before ``step`` when the ring does not reach (a gap between
        the file and the ring)."""
        base = self._fill_base(step, ring)
        if base is None:
            reader = self._history()
            if reader is None:
                with self._lock:
                    return self._latest
            base = reader.state_at(min(step, reader.latest_step()))
        # a step back from a cached state (a scrub back starting): the replay passes the next
        # steps back on its way; keep the fill's lead of them (~0.5 ms each) so the next frames
        # find their states while the fill gets ahead
        keep = ((lambda s: step - self._fill.lead <= s and s not in self.states)
                if step + 1 in self.states else (lambda s: False))
        try:
            state = replay(base, self._records_iter(ring, base.step + 1, step + 1), step,
                           keep=keep, on_state=self.states.add)
        except ValueError:
            return base
        self.states.add(state)
        return state

    def _records_iter(self, ring: list[PackedStep], start: int, stop: int) -> Iterator[StepRecord]:
        """The records ``start <= step < stop`` from ``ring`` (unpacked one at a time, as a
        replay uses them)."""
        lo, hi = (bisect.bisect_left(ring, k, key=step_of) for k in (start, stop))
        return map(step_ring.unpack, ring[lo:hi])

    def records(self, start: int, stop: int) -> Sequence[StepRecord]:
        with self._lock:
            ring = list(self._ring)
        first = step_of(ring[0]) if ring else stop
        older: list[StepRecord] = []
        if start < first:
            reader = self._history()
            if reader is not None:
                older = list(reader.records(start, min(stop, first)))
        return older + [step_ring.unpack(p) for p in ring if start <= step_of(p) < stop]

    def step_batches(self, start: int, stop: int) -> dict[str, Any]:
        """The steps ``start <= step < stop`` as the window's step views need them (the columns
        of ``recordings.file.reader.Reader.step_batches``): older steps through the recording's light query
        (no record decoded: a jump to an old step of a long live run), the ring's from its
        packed records (:func:`app.live.step_ring.batch_columns`). Equal to
        ``recordings.file.step_batches.batch_columns`` of :meth:`records`."""
        with self._lock:
            ring = list(self._ring)
        first = step_of(ring[0]) if ring else stop
        parts = []
        if start < first:
            reader = self._history()
            if reader is not None:
                parts.append(reader.step_batches(start, min(stop, first)))
        lo, hi = (bisect.bisect_left(ring, k, key=step_of) for k in (start, stop))
        parts.append(step_ring.batch_columns(ring[lo:hi]))
        return parts[0] if len(parts) == 1 else _joined(*parts)

    def request_text(self, request_id: str, step: int) -> str:
        with self._lock:
            ring = list(self._ring)
        reader = self._history()
        committed = reader.latest_step() if reader is not None else -1
        text = reader.request_text(request_id, min(step, committed)) if reader is not None else ""
        return text + "".join(t for p in ring if committed < step_of(p) <= step
                              for t in step_ring.token_texts(p, request_id))

    def request_timeline(self, request_id: str) -> list:
        """Every lifecycle event of ``request_id`` (``recordings.info.TimelineEvent`` s): the
        recording's up to its last committed step, then the ring's (without a recording, the
        ring's only: the newest :data:`RING_STEPS` steps)."""
        with self._lock:
            ring = list(self._ring)
        reader = self._history()
        committed = reader.latest_step() if reader is not None else -1
        older = [e for e in reader.request_timeline(request_id) if e.step <= committed] if reader else []
        return older + timeline_events([step_ring.unpack(p) for p in ring if step_of(p) > committed
                                        and step_ring.has_events_of(p, request_id)], request_id)

    def request_info(self, request_id: str):
        """The recorded arrival and outcome of ``request_id`` (None without a recording)."""
        reader = self._history()
        return reader.request_info(request_id) if reader is not None else None

    def _history(self):
        """The reader on the recording being written, opened on first use (None if none)."""
        if self._reader is None and self._open_reader is not None:
            path = self._run_info.recording
            if path and Path(path).exists():
                try:
                    self._reader = self._open_reader(Path(path))
                except Exception:  # noqa: BLE001 - not yet readable: try again later
                    return None
        return self._reader


def _joined(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Step-batch columns of the steps of ``a`` then those of ``b`` (``batch_start`` offsets
    moved past ``a``'s entries; arrays concatenated, lists added)."""
    out: dict[str, Any] = {}
    for name, va in a.items():
        vb = b[name]
        if name == "batch_start":
            out[name] = np.concatenate([va, vb[1:] + va[-1]])
        elif isinstance(va, np.ndarray):
            out[name] = np.concatenate([va, vb])
        else:
            out[name] = list(va) + list(vb)
    return out
