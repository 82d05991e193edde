"""Plain, frozen answers of the Reader's per-request queries."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TimelineEvent:
    """One lifecycle event of a request: the step it happened in, the engine clock at that
    step's start (steps or seconds, see the run's ``config['clock']``) and the step's end in
    nanoseconds since the run started. ``kind``/``detail`` as in ``engine.outputs.RequestEvent``."""

    step: int
    kind: str
    detail: str
    clock: float
    end_ns: int


@dataclass(frozen=True)
class RequestInfo:
    """A request's row: arrival (``arrival_time`` on the engine clock), prompt, sampling dict,
    and outcome (``None`` until the request finished: status, finish_reason, finish_step,
    num_output_tokens, ttft and mean_itl on the engine clock, num_preemptions, error).
    ``prompt_token_ids``/``sampling`` are ``None`` when the engine never announced the request;
    ``sampling`` leaves out the keys at ``engine.request.SamplingParams``' defaults in files of
    schema 5 and later (``recordings.file.codec.stored_sampling``)."""

    request_id: str
    arrival_step: int
    arrival_time: float
    num_prompt_tokens: int | None
    max_tokens: int | None
    prompt_token_ids: tuple[int, ...] | None
    prompt_text: str | None
    sampling: dict[str, Any] | None
    status: str | None
    finish_reason: str | None
    finish_step: int | None
    num_output_tokens: int | None
    ttft: float | None
    mean_itl: float | None
    num_preemptions: int | None
    error: str | None

    @property
    def is_finished(self) -> bool:
        """True once the request reached a FINISHED_* status."""
        return self.status is not None and self.status.startswith("FINISHED")


def timeline_events(records, request_id: str) -> list[TimelineEvent]:
    """The :class:`TimelineEvent` s of ``request_id`` in ``records`` (``StepRecord`` s in step
    order), as ``Reader.request_timeline`` reads them from a file: for sources that hold records
    (a live engine's newest steps)."""
    return [TimelineEvent(r.step, e.kind, e.detail, r.clock, r.end_ns)
            for r in records for e in r.events if e.request_id == request_id]
