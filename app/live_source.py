"""LiveSource: a StepSource fed by the engine thread, readable from the UI thread, bounded in memory.

It keeps the newest published :class:`EngineState` and a ring of the newest step records; all
older history is read back from the recording being written through a ``recordings.Reader``
(which opens the file read-only mid-write). A past state is the reader's state at the last
committed step, advanced through the ring with :class:`engine.timeline.StateTimeline`: the one
implementation of state + record, so live and replay cannot differ.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from engine.outputs import StepRecord
from engine.state import EngineState
from engine.timeline import StateTimeline
from recordings.info import timeline_events
from recordings.reader import batch_columns

RING_STEPS = 1024           # newest records kept in memory
PUBLISH_INTERVAL_S = 1 / 60  # the engine hands over a fresh state at most this often


class LiveSource:
    """``publish``/``publish_record`` are called on the engine thread, the getters on the UI
    thread; a lock guards the hand-over. ``open_reader(path)`` opens the recording named by
    ``run_info['recording']`` (``recordings.Reader``) once it is needed.
    """

    def __init__(self, initial: EngineState | None = None,
                 open_reader: Callable[[Path], Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._ring: deque[StepRecord] = deque(maxlen=RING_STEPS)
        self._latest = initial or EngineState(-1, 0.0, 0, 16, 1)
        self._run_info: dict[str, Any] = {}
        self._open_reader = open_reader
        self._reader = None
        self._last_publish = 0.0

    def reset(self, initial: EngineState, run_info: dict[str, Any]) -> None:
        """Start over for a new engine (called once the engine is built)."""
        with self._lock:
            self._ring.clear()
            self._latest = initial
            self._run_info = dict(run_info)
            self._reader = None

    # --- engine thread --------------------------------------------------------------------
    def wants_state(self) -> bool:
        """True when a fresh state is due (the UI pulls at most at its frame rate)."""
        return time.perf_counter() - self._last_publish >= PUBLISH_INTERVAL_S

    def publish(self, state: EngineState, record: StepRecord | None = None) -> None:
        """Hand over the newest state (and the record of the step that made it)."""
        with self._lock:
            if record is not None:
                self._ring.append(record)
            self._latest = state
            self._last_publish = time.perf_counter()

    def publish_record(self, record: StepRecord) -> None:
        """Hand over a step's record without a state (between frames)."""
        with self._lock:
            self._ring.append(record)

    # --- StepSource ---------------------------------------------------------------------
    def run_info(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._run_info)

    def latest_step(self) -> int:
        """The step of the newest published state."""
        with self._lock:
            return self._latest.step

    def latest_state(self) -> EngineState:
        """The newest state, including changes since the last step (injected requests...)."""
        with self._lock:
            return self._latest

    def state_at(self, step: int) -> EngineState:
        with self._lock:
            latest, ring = self._latest, list(self._ring)
        if step >= latest.step:
            return latest
        ring = [r for r in ring if r.step <= step]
        reader = self._history()
        if reader is None:
            return self._replay_from_ring(None, ring, step) or latest
        committed = reader.latest_step()
        base = reader.state_at(min(step, committed))
        return self._replay_from_ring(base, [r for r in ring if r.step > base.step], step) or base

    def _replay_from_ring(self, base: EngineState | None, ring: list[StepRecord],
                          step: int) -> EngineState | None:
        """``base`` advanced through ``ring`` up to ``step``; None when ``ring`` cannot get there
        (a gap between the file and the ring, or no base and the ring does not start at 0)."""
        if base is None:
            return None
        if base.step == step:
            return base
        if not ring or ring[0].step != base.step + 1:
            return None
        timeline = StateTimeline.from_state(base)
        for r in ring:
            if r.step > step:
                break
            timeline.apply(r)
        return timeline.snapshot()

    def records(self, start: int, stop: int) -> Sequence[StepRecord]:
        with self._lock:
            ring = list(self._ring)
        first = ring[0].step if ring else stop
        older: list[StepRecord] = []
        if start < first:
            reader = self._history()
            if reader is not None:
                older = list(reader.records(start, min(stop, first)))
        return older + [r for r in ring if start <= r.step < stop]

    def step_batches(self, start: int, stop: int) -> dict[str, Any]:
        """The steps ``start <= step < stop`` as the window's step views need them (the columns
        of ``recordings.Reader.step_batches``): older steps through the recording's light query
        (no record decoded: a jump to an old step of a long live run), the ring's from its
        records (:func:`recordings.reader.batch_columns`). Equal to ``batch_columns`` of
        :meth:`records`."""
        with self._lock:
            ring = list(self._ring)
        first = ring[0].step if ring else stop
        parts = []
        if start < first:
            reader = self._history()
            if reader is not None:
                parts.append(reader.step_batches(start, min(stop, first)))
        parts.append(batch_columns([r for r in ring if start <= r.step < stop]))
        return parts[0] if len(parts) == 1 else _joined(*parts)

    def request_text(self, request_id: str, step: int) -> str:
        with self._lock:
            ring = list(self._ring)
        reader = self._history()
        committed = reader.latest_step() if reader is not None else -1
        text = reader.request_text(request_id, min(step, committed)) if reader is not None else ""
        return text + "".join(t.text for r in ring if committed < r.step <= step
                              for t in r.new_tokens if t.request_id == request_id)

    def request_timeline(self, request_id: str) -> list:
        """Every lifecycle event of ``request_id`` (``recordings.info.TimelineEvent`` s): the
        recording's up to its last committed step, then the ring's (without a recording, the
        ring's only: the newest :data:`RING_STEPS` steps)."""
        with self._lock:
            ring = list(self._ring)
        reader = self._history()
        committed = reader.latest_step() if reader is not None else -1
        older = [e for e in reader.request_timeline(request_id) if e.step <= committed] if reader else []
        return older + timeline_events([r for r in ring if r.step > committed], request_id)

    def request_info(self, request_id: str):
        """The recorded arrival and outcome of ``request_id`` (None without a recording)."""
        reader = self._history()
        return reader.request_info(request_id) if reader is not None else None

    def _history(self):
        """The reader on the recording being written, opened on first use (None if none)."""
        if self._reader is None and self._open_reader is not None:
            path = self._run_info.get("recording")
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
