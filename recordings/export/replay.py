"""Every recorded step with the state after it, streamed: what the exporters walk through.

The states come from ``recordings.check.invariants.replayed_states`` (the keyframe before the first step,
then the recorded deltas applied with ``engine.state.timeline.StateTimeline``, as a replay in the
window does), read in chunks of steps: memory follows one chunk and the live requests.
"""
from __future__ import annotations

from typing import Callable, Iterator

from engine.outputs import StepRecord
from engine.state.state import EngineState
from recordings.check.invariants import Problem, replayed_states
from recordings.errors import RecordingError

Progress = Callable[[int], object]     # called with the number of steps just done


def replay(reader, progress: Progress | None = None) -> Iterator[tuple[EngineState, StepRecord]]:
    """(state after step k, record of step k) for k = 0 .. ``reader.latest_step()``.

    ``progress(1)`` is called after each step. Raises :class:`RecordingError` naming the step
    when the recording's rows cannot be decoded or replayed."""
    for item in replayed_states(reader):
        if isinstance(item, Problem):
            raise RecordingError(f"{reader.path}: cannot export past {item}")
        yield item
        if progress is not None:
            progress(1)
