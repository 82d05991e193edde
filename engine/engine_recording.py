"""Recording glue of :class:`engine.engine.LLMEngine`: what it needs from a recorder, and how a
recorder failure (a full disk, a dead writer thread) stops recording while the engine keeps
serving. A mixin; kept apart so the step loop reads on its own.
"""
from __future__ import annotations

import logging
from typing import Protocol

from engine.outputs import StepRecord

log = logging.getLogger("engine.engine")


class Recorder(Protocol):
    """What the engine needs from a recorder (``recordings.file.writer.RecordingWriter``)."""

    def write_request(self, request_id: str, arrival_step: int, arrival_time: float,
                      prompt_token_ids: list[int], prompt_text: str | None, sampling: dict) -> None: ...
    def write_step(self, record: StepRecord) -> None: ...


class EngineRecording:
    """``poll_recorder`` and the recorder-failure path of :class:`engine.engine.LLMEngine`."""

    def poll_recorder(self) -> str | None:
        """Notice a recorder that failed in its own thread since the last write (a full disk):
        stop recording and return ``recorder_error``. Call it while idle; ``step`` notices on its
        next write anyway."""
        failure = getattr(self.recorder, "failure", None) if self.recorder is not None else None
        if failure:
            self._recorder_failed(RuntimeError(failure))
        return self.recorder_error

    def _recorder_failed(self, exc: Exception) -> None:
        """Stop recording after a recorder failure (full disk, writer thread died): the engine
        keeps serving; ``recorder_error`` says what happened (the file stays readable up to its
        last committed step)."""
        log.error("recording stopped: %s", exc)
        self.recorder_error = f"recording stopped at step {self.step_index - 1}: {exc}"
        self.recorder = None
