"""LiveSource: a StepSource fed by the engine thread, readable from the UI thread."""
from __future__ import annotations

import threading
from typing import Any, Sequence

from engine.outputs import StepRecord
from engine.state import EngineState

KEYFRAME_INTERVAL = 64


class LiveSource:
    """Keeps every :class:`StepRecord` of a live run in memory plus a state keyframe every
    ``KEYFRAME_INTERVAL`` steps, so ``state_at(k)`` for any past step is keyframe + replayed records
    (the same codec the recording uses). ``publish`` is called on the engine thread; the getters on
    the UI thread; a lock guards the hand-over.
    """

    def __init__(self, initial: EngineState | None = None) -> None:
        self._lock = threading.Lock()
        self._records: list[StepRecord] = []
        self._keyframes: dict[int, EngineState] = {}
        self._base = initial or EngineState(-1, 0.0, 0, 16, 1)
        self._latest = self._base
        self._text: dict[str, list[tuple[int, str]]] = {}
        self._run_info: dict[str, Any] = {}

    def reset(self, initial: EngineState, run_info: dict[str, Any]) -> None:
        """Start over for a new engine (called once the engine is built)."""
        with self._lock:
            self._records.clear()
            self._keyframes.clear()
            self._text.clear()
            self._base = self._latest = initial
            self._run_info = dict(run_info)

    def publish(self, state: EngineState, record: StepRecord | None = None) -> None:
        """Engine thread: hand over the newest state (and the record of the step that made it)."""
        with self._lock:
            if record is not None:
                self._records.append(record)
                for t in record.new_tokens:
                    if t.text:
                        self._text.setdefault(t.request_id, []).append((record.step, t.text))
                if record.step % KEYFRAME_INTERVAL == 0:
                    self._keyframes[record.step] = self._state_at_locked(record.step)
            self._latest = state

    # --- StepSource ---------------------------------------------------------------------
    def run_info(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._run_info)

    def latest_step(self) -> int:
        with self._lock:
            return len(self._records) - 1

    def latest_state(self) -> EngineState:
        """The newest state, including changes since the last step (injected requests...)."""
        with self._lock:
            return self._latest

    def state_at(self, step: int) -> EngineState:
        with self._lock:
            last = len(self._records) - 1
            if step >= last:
                return self._latest
            return self._state_at_locked(max(step, -1))

    def _state_at_locked(self, step: int) -> EngineState:
        if step < 0:
            return self._base
        k = (step // KEYFRAME_INTERVAL) * KEYFRAME_INTERVAL
        state = self._keyframes.get(k) if k in self._keyframes and k <= step else None
        start = k + 1 if state is not None else 0
        if state is None:
            state = self._base
        for r in self._records[start:step + 1]:
            state = state.apply(r)
        return state

    def records(self, start: int, stop: int) -> Sequence[StepRecord]:
        with self._lock:
            return self._records[max(0, start):max(0, stop)]

    def request_text(self, request_id: str, step: int) -> str:
        with self._lock:
            return "".join(t for s, t in self._text.get(request_id, ()) if s <= step)
