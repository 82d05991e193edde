"""The interfaces the UI is written against: everything it uses of its source is declared here.

``StepSource`` hands out immutable states and step records; ``recordings.file.reader.Reader`` (replay) and
``app.live.source.LiveSource`` (a running engine) both implement it, so views cannot tell them apart.
``RecordingSource`` is a ``StepSource`` read from a recording file (``Reader``, ``V1Reader``): it
also has the file's ``path``, whether the writer closed it and the damage found in it; the window
checks ``isinstance(source, RecordingSource)`` (a runtime-checkable protocol) for what only a file
has (the check button, the run's end, replaying only a damaged file's readable steps).
``EngineControl`` is what the transport bar, the inject dialog and the request menu call on a
live engine; a replay has none.
"""
from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from engine.outputs import StepRecord
from engine.run_info import RunInfo
from engine.state.state import EngineState

# the knobs a live engine changes between steps (``LLMEngine.set_knobs``), vLLM's names
LIVE_KNOBS = ("max_num_seqs", "max_num_batched_tokens", "num_usable_blocks")


def check_knobs(changes: dict[str, Any]) -> dict[str, int]:
    """``changes`` as ints, after checking each name is one of :data:`LIVE_KNOBS` and each value
    an int (not a bool). Raises ``ValueError`` naming the knob (limits are the engine's to check)."""
    unknown = sorted(set(changes) - set(LIVE_KNOBS))
    if unknown:
        raise ValueError(f"unknown live knob(s) {', '.join(unknown)}; live knobs: {', '.join(LIVE_KNOBS)}")
    out = {}
    for name, value in changes.items():
        try:
            if isinstance(value, bool):
                raise TypeError
            out[name] = operator.index(value)          # ints, numpy ints; not floats or text
        except TypeError:
            raise ValueError(f"{name} must be an int, got {value!r}") from None
    return out


def current_knobs(engine) -> dict[str, int]:
    """The :data:`LIVE_KNOBS` of ``engine`` (an ``engine.engine.LLMEngine``) by name: what an
    ``EngineControl.knobs()`` answers. Read it between steps (the engine's thread, or while
    it is paused)."""
    return {"max_num_seqs": engine.config.max_num_seqs,
            "max_num_batched_tokens": engine.config.max_num_batched_tokens,
            "num_usable_blocks": engine.scheduler.kv.num_usable_blocks}


class StepSource(Protocol):
    """Read-only access to a run, live or recorded."""

    def run_info(self) -> RunInfo:
        """Provenance and config (``engine.run_info.RunInfo``: ``config``, ``model``, ``device``,
        ``dtype``, ``trace``, ``started_at``...); an empty ``RunInfo()`` while a live model loads."""

    def latest_step(self) -> int:
        """Index of the last completed step, -1 before the first."""

    def state_at(self, step: int) -> EngineState:
        """State after ``step`` (clamped to [-1, latest_step()]). Raises ``IndexError`` never."""

    def records(self, start: int, stop: int) -> Sequence[StepRecord]:
        """Step records with ``start <= step < stop`` in step order (fewer if not available)."""

    def request_text(self, request_id: str, step: int) -> str:
        """Generated text of ``request_id`` up to and including ``step`` ('' if unknown)."""

    def request_timeline(self, request_id: str) -> Sequence[Any]:
        """Every lifecycle event of ``request_id`` so far, in order ([] if unknown): objects
        with ``step``, ``kind``, ``detail``, ``clock`` and ``end_ns`` (as
        ``recordings.info.TimelineEvent``). A preemption's ``detail`` is its
        ``engine.sched.preemption.PreemptionInfo`` JSON."""

    def step_batches(self, start: int, stop: int) -> dict[str, Any]:
        """The steps ``start <= step < stop`` as the window's step views need them: each step's
        scalars and its batch as numpy columns (``recordings.file.step_batches.step_batch_columns``;
        equal to ``recordings.file.step_batches.batch_columns`` of :meth:`records`)."""

    def request_info(self, request_id: str) -> Any | None:
        """The recorded arrival, prompt, sampling and outcome of ``request_id``
        (``recordings.info.RequestInfo``), or None when unknown or when the source keeps no
        recording to look it up in (a live run before its file opens, an in-memory source)."""


@runtime_checkable
class RecordingSource(StepSource, Protocol):
    """A :class:`StepSource` read from a recording file (``recordings.file.reader.Reader``)."""

    path: Path
    """The recording file."""

    damage: Any | None
    """The file's ``recordings.damage.report.DamageReport`` once :meth:`keep_readable` was
    given one (opened as damaged), else None."""

    def is_complete(self) -> bool:
        """True once the writer closed the file cleanly (False while writing or after a crash)."""

    def keep_readable(self, report: Any) -> None:
        """Serve only the steps up to ``report.last_good_step`` from now on (``report``: the
        file's ``DamageReport``, kept as :attr:`damage`)."""


class EngineControl(Protocol):
    """Commands to a live engine. All are thread-safe and return at once; effects show up in the
    next published state, and a command the engine refuses (``set_priority`` under a policy
    other than ``priority``...) shows up in ``last_error()``, never as an exception.

    ``add_request`` returns the new request id; ``sampling`` are further
    ``engine.request.SamplingParams`` fields by name (``priority``, ``repetition_penalty``,
    ``frequency_penalty``, ``presence_penalty``, ``top_k``, ``stop``...). It raises
    ``ValueError`` at once for an unknown field or an out-of-range value (naming it).

    ``set_knobs(**changes)`` changes live knobs between steps (:data:`LIVE_KNOBS`, ints;
    ``LLMEngine.set_knobs``: lowering ``max_num_seqs`` or ``num_usable_blocks`` preempts): it
    raises ``ValueError`` at once for an unknown knob or a value that is not an int, and a
    value the engine refuses (``ConfigError`` / ``ValueError`` naming the knob and its limit)
    shows up in ``last_error()``. ``knobs()`` gives their current values by name."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def step_once(self) -> None: ...
    def is_paused(self) -> bool: ...
    def add_request(self, prompt: str, max_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, seed: int | None = None, **sampling: Any) -> str: ...
    def abort_request(self, request_id: str) -> None: ...
    def pause_request(self, request_id: str) -> None: ...
    def resume_request(self, request_id: str) -> None: ...
    def set_priority(self, request_id: str, priority: int) -> None: ...
    def move_to_front(self, request_id: str) -> None: ...
    def set_knobs(self, **changes: int) -> None: ...
    def knobs(self) -> dict[str, int]: ...
    def last_error(self) -> str | None: ...

    def status(self) -> str | None:
        """One line for the status bar ("loading model…", "failed: …"), or None: the transport
        then says paused or running."""
