"""Plain, frozen data passed between scheduler, model runner, engine, recorder and UI. No torch.

The flow of one step (see DESIGN.md): ``Scheduler.schedule() -> SchedulerOutput``,
``ModelRunner.execute(...) -> ModelRunnerOutput``, ``Scheduler.update_from_output(...)``, then the
engine freezes everything into a :class:`StepRecord` for the recorder and the UI.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Reasons a waiting request was not admitted in a step (recorded per step, per request).
NOT_ADMITTED_TOKEN_BUDGET = "token_budget"      # max_num_batched_tokens already spent
NOT_ADMITTED_NO_FREE_BLOCKS = "no_free_blocks"  # the block pool cannot hold its next chunk
NOT_ADMITTED_SEQ_CAP = "seq_cap"                # max_num_seqs requests already running
NOT_ADMITTED_BEHIND = "behind_older"            # FCFS: an older waiting request is blocked


@dataclass(frozen=True)
class ScheduledRequest:
    """One request's share of a step.

    ``num_computed_tokens`` is the value *before* the step; the step computes tokens
    ``[num_computed_tokens, num_computed_tokens + num_tokens)`` of the request's sequence.
    ``new_block_ids`` were allocated to it this step; ``block_ids`` is its whole block table.
    ``slot`` is its batch slot (0 .. max_num_seqs - 1), stable while it keeps running.
    """

    request_id: str
    slot: int
    num_tokens: int
    num_computed_tokens: int
    is_prefill: bool
    new_block_ids: tuple[int, ...]
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class SchedulerOutput:
    """The scheduler's decision for one step (vLLM v1 ``SchedulerOutput``, simplified).

    ``scheduled`` in batch order (running requests first, then new admissions).
    ``preempted_ids`` lost their blocks this step (recompute preemption).
    ``not_admitted`` pairs a waiting request id with the reason it did not start (NOT_ADMITTED_*).
    """

    step: int
    scheduled: tuple[ScheduledRequest, ...]
    preempted_ids: tuple[str, ...] = ()
    not_admitted: tuple[tuple[str, str], ...] = ()

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass(frozen=True)
class ModelRunnerOutput:
    """Sampled token per request whose scheduled chunk reached the end of its known tokens.

    Requests in the middle of a chunked prefill get no token. ``errors`` maps a request id to
    the error that made its forward or sampling fail (the engine fails those requests only).
    ``step_duration_s`` is set by a simulated executor: the predicted duration of the step in
    seconds, by which the engine's ``sim`` clock advances (None for a real forward pass).
    """

    sampled_token_ids: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    step_duration_s: float | None = None


@dataclass(frozen=True)
class RequestEvent:
    """A lifecycle event: kind is one of arrived, rejected, scheduled, preempted, paused,
    resumed, aborted, finished, failed. ``detail`` is free text (the error, finish reason...)."""

    request_id: str
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class NewToken:
    """One generated token: its index in the output, id and decoded text delta."""

    request_id: str
    index: int
    token_id: int
    text: str


@dataclass(frozen=True)
class RequestView:
    """What the inspector shows of one request at one step (an immutable snapshot).

    Times are seconds on the engine clock; ``ttft`` and ``mean_itl`` are ``None`` until defined.
    ``block_ids`` is the block table (physical block ids in the paged KV cache).
    """

    request_id: str
    status: str
    arrival_step: int
    arrival_time: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    max_tokens: int
    block_ids: tuple[int, ...]
    slot: int | None
    num_preemptions: int
    ttft: float | None
    mean_itl: float | None
    finish_reason: str | None
    error: str | None

    @property
    def is_finished(self) -> bool:
        return self.status.startswith("FINISHED")


@dataclass(frozen=True)
class StepRecord:
    """Everything that happened in one engine step, frozen for the recorder and the UI.

    Times: ``start_ns``/``end_ns`` are wall-clock nanoseconds since the run started;
    ``clock`` is the engine clock at the start of the step (steps under the virtual clock,
    seconds under the wall clock). ``schedule_ns``/``forward_ns``/``update_ns`` time the phases.
    ``changed`` holds the new view of every request whose view changed in this step (the delta
    from which ``recordings.Reader.state_at`` rebuilds state). Counts are after the step.
    ``error`` is set when the step's forward pass raised; the affected requests are failed.
    """

    step: int
    start_ns: int
    end_ns: int
    clock: float
    scheduler_output: SchedulerOutput
    new_tokens: tuple[NewToken, ...]
    events: tuple[RequestEvent, ...]
    changed: tuple[RequestView, ...]
    num_waiting: int
    num_running: int
    num_paused: int
    num_finished: int
    num_free_blocks: int
    num_total_blocks: int
    schedule_ns: int = 0
    forward_ns: int = 0
    update_ns: int = 0
    error: str | None = None

    @property
    def num_scheduled_tokens(self) -> int:
        return self.scheduler_output.num_scheduled_tokens

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use, in [0, 1]."""
        return 1.0 - self.num_free_blocks / self.num_total_blocks if self.num_total_blocks else 0.0

    @property
    def num_preemptions(self) -> int:
        return len(self.scheduler_output.preempted_ids)
