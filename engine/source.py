"""The two interfaces the UI is written against.

``StepSource`` hands out immutable states and step records; ``recordings.Reader`` (replay) and
``app.bridge.LiveSource`` (a running engine) both implement it, so views cannot tell them apart.
``EngineControl`` is what the transport bar, the inject dialog and the request menu call on a
live engine; a replay has none.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from engine.outputs import StepRecord
from engine.state import EngineState


class StepSource(Protocol):
    """Read-only access to a run, live or recorded."""

    def run_info(self) -> dict[str, Any]:
        """Provenance and config: keys include ``config`` (EngineConfig.to_dict()), ``model``,
        ``device``, ``dtype``, ``trace``, ``started_at``."""

    def latest_step(self) -> int:
        """Index of the last completed step, -1 before the first."""

    def state_at(self, step: int) -> EngineState:
        """State after ``step`` (clamped to [-1, latest_step()]). Raises ``IndexError`` never."""

    def records(self, start: int, stop: int) -> Sequence[StepRecord]:
        """Step records with ``start <= step < stop`` in step order (fewer if not available)."""

    def request_text(self, request_id: str, step: int) -> str:
        """Generated text of ``request_id`` up to and including ``step`` ('' if unknown)."""


class EngineControl(Protocol):
    """Commands to a live engine. All are thread-safe and return at once; effects show up in the
    next published state. ``add_request`` returns the new request id."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def step_once(self) -> None: ...
    def is_paused(self) -> bool: ...
    def add_request(self, prompt: str, max_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, seed: int | None = None) -> str: ...
    def abort_request(self, request_id: str) -> None: ...
    def pause_request(self, request_id: str) -> None: ...
    def resume_request(self, request_id: str) -> None: ...
    def last_error(self) -> str | None: ...
