"""Plain, frozen data passed between scheduler, model runner, engine, recorder and UI. No torch.

The flow of one step (see docs/data-flow.md): ``Scheduler.schedule() -> SchedulerOutput``,
``Runner.execute(...) -> ModelRunnerOutput``, ``Scheduler.update_from_output(...)``, then the
engine freezes what changed into a :class:`StepRecord`: the recorder stores it and
``engine.state.timeline.StateTimeline.apply`` turns the state before the step into the state after it.
A record stores what changed, not what is: block events instead of block tables, and a
:class:`Transition` only for requests whose status, slot or progress did not follow from the batch.

High-volume items (one per scheduled request or token per step) are ``NamedTuple``s: cheap to
build on the engine's hot path and equal by value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, Sequence
from engine.vocab import EventKind, NotAdmittedReason


class ScheduledRequest(NamedTuple):
    """One request's share of a step, as the model runner needs it.

    ``num_computed_tokens`` is the value *before* the step; the step computes tokens
    ``[num_computed_tokens, num_computed_tokens + num_tokens)`` of the request's sequence.
    ``new_block_ids`` were allocated to it this step (a runner appends them to the table it
    holds; a request sent in full gets its whole table in :class:`NewRequestData` instead).
    ``slot`` is its batch slot (0 .. max_num_seqs - 1), stable while it keeps running.
    Its first five fields are a :class:`BatchEntry`'s, in the same order (the engine's record
    is ``s[:5]``).
    """

    request_id: str
    slot: int
    num_tokens: int
    num_computed_tokens: int
    is_prefill: bool
    new_block_ids: tuple[int, ...]


class NewRequestData(NamedTuple):
    """A request the runner holds no state for, sent in full ONCE (vLLM v1 ``NewRequestData``):
    on first admission, and again after anything that made the runner drop it (recompute
    preemption, swap-out, pause; then ``output_token_ids`` carries the output so far, which it
    recomputes or keeps). ``block_ids`` is its whole block table and ``num_computed_tokens`` the
    value before the step (a prefix-cache hit or a swapped-in request starts above 0; a forked
    parallel-sampling sequence at its prompt length). ``prompt_token_ids`` is the request's own
    sequence (immutable once added); ``output_token_ids`` a copy. ``sampling_params`` is an
    ``engine.request.SamplingParams``."""

    request_id: str
    prompt_token_ids: Sequence[int]
    output_token_ids: tuple[int, ...]
    sampling_params: Any
    block_ids: tuple[int, ...]
    num_computed_tokens: int


@dataclass(frozen=True)
class CachedRequestData:
    """The step's diff for requests the runner already holds (vLLM v1 ``CachedRequestData``),
    as parallel lists in batch order: ``new_block_ids[i]`` were appended to ``req_ids[i]``'s
    block table this step (usually empty; one block every ``block_size`` decode steps) and
    ``num_computed_tokens[i]`` is its value before the step. ``new_token_ids`` maps a request to
    output tokens it gained that the runner did not sample itself, which it must append before
    the step (empty in this engine, where every output token is one the runner returned in
    its ``ModelRunnerOutput`` and appended to its own state; the field is the contract for
    callers that add tokens elsewhere, as vLLM's pipeline-parallel ranks do)."""

    req_ids: list[str] = field(default_factory=list)
    new_block_ids: list[tuple[int, ...]] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)
    new_token_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)


NO_CACHED_REQUESTS = CachedRequestData()


@dataclass(frozen=True)
class SchedulerOutput:
    """The scheduler's decision for one step (vLLM v1 ``SchedulerOutput``, simplified), and the
    runner's whole contract: a runner keeps its own per-request state from
    ``scheduled_new_reqs`` (sent once, in full), ``scheduled_cached_reqs`` (the diff of the
    requests it holds) and ``finished_req_ids`` (requests it must drop before this step:
    finished, aborted, failed, and those that left the batch with their state elsewhere:
    preempted, swapped out, paused; a dropped request that comes back is sent in full again).
    It never reads live ``Request`` objects.

    ``scheduled`` in batch order (running requests first, then new admissions); a runner packs
    its forward pass in this order. ``num_scheduled_tokens`` maps each scheduled request to its
    token count this step and ``total_num_scheduled_tokens`` is their sum (vLLM's names).
    ``preempted_ids`` lost their blocks this step (recompute preemption).
    ``not_admitted`` pairs waiting request ids with the reason they did not start
    (``NOT_ADMITTED_*``) for the requests the step looked at; every other waiting request has
    ``waiting_reason`` (so a step costs O(1), not O(waiting)). Swap preemption: the runner copies
    ``blocks_to_swap_out`` (GPU block, CPU block) pairs, then ``blocks_to_swap_in`` (CPU block,
    GPU block) pairs, before the forward pass (a GPU block a swap-out freed may be written by
    this very step). Parallel sampling (``engine.sequence_group``): the runner first copies
    ``blocks_to_copy`` (source GPU block, destination GPU block) pairs, every layer (the
    copy-on-write of a prompt's last partial block for each further sequence of its group,
    forked in the step before), before the swap copies; ``parallel_samples`` pairs a request
    id with the ids of the sequences that take their first token from ITS last logits row in
    this step (each sampled with its own parameters and random stream). Those sequences are
    also in ``forked``: their batch entries, computing nothing (``num_tokens`` 0) but sampling
    in their batch slot (the engine records them after ``scheduled``); they are new to the
    runner in that step (in ``scheduled_new_reqs``).
    """

    step: int
    scheduled: tuple[ScheduledRequest, ...]
    preempted_ids: tuple[str, ...] = ()
    not_admitted: tuple[tuple[str, str], ...] = ()
    waiting_reason: NotAdmittedReason = NotAdmittedReason.BEHIND
    blocks_to_swap_out: tuple[tuple[int, int], ...] = ()
    blocks_to_swap_in: tuple[tuple[int, int], ...] = ()
    blocks_to_copy: tuple[tuple[int, int], ...] = ()
    parallel_samples: tuple[tuple[str, tuple[str, ...]], ...] = ()
    forked: tuple[ScheduledRequest, ...] = ()
    scheduled_new_reqs: tuple[NewRequestData, ...] = ()
    scheduled_cached_reqs: CachedRequestData = NO_CACHED_REQUESTS
    finished_req_ids: tuple[str, ...] = ()

    @cached_property
    def num_scheduled_tokens(self) -> dict[str, int]:
        """``{request_id: tokens scheduled this step}`` over ``scheduled`` (built on first use)."""
        return {s.request_id: s.num_tokens for s in self.scheduled}

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum([s.num_tokens for s in self.scheduled])

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


class BatchEntry(NamedTuple):
    """One scheduled request in a recorded step: ``num_tokens`` computed from
    ``num_computed_tokens`` (the value before the step) in batch slot ``slot``."""

    request_id: str
    slot: int
    num_tokens: int
    num_computed_tokens: int
    is_prefill: bool


class RequestEvent(NamedTuple):
    """A lifecycle event: kind is one of arrived, rejected, scheduled, forked, preempted, paused,
    resumed, aborted, finished, failed (``forked``: a parallel-sampling sequence started on its
    group's prompt KV; the detail names the sequence whose blocks it shares). ``detail`` is
    free text (the error, finish reason...)."""

    request_id: str
    kind: str
    detail: str = ""


class NewToken(NamedTuple):
    """One generated token: its index in the output, id and decoded text delta."""

    request_id: str
    index: int
    token_id: int
    text: str


class BlockEvent(NamedTuple):
    """KV blocks changing hands or cache tags (``kind`` a :class:`engine.vocab.BlockEventKind`):
    ``allocated`` appends ``block_ids`` (taken off the free queue) to the request's block table
    in order; ``hit`` appends cached blocks to it, shared (reference count + 1; only to a table
    that was empty); ``forked`` appends blocks another sequence of its parallel-sampling
    group holds, shared the same way (the prompt's full blocks, only to an empty table);
    ``freed`` releases the request's whole table (each block loses one
    reference; a cached block reaching 0 stays cached-free); ``cached`` tags the request's
    ``block_ids`` with ``block_hashes`` (aligned; the chained prefix hashes); ``evicted`` drops
    the tags of cached-free blocks the free queue hands to ``request_id``."""

    kind: str
    request_id: str
    block_ids: tuple[int, ...]
    block_hashes: tuple[int, ...] = ()


class Arrival(NamedTuple):
    """The facts of a request entering the engine's queues (times on the engine clock;
    ``priority`` as it arrived: a later change is a ``priority`` event)."""

    request_id: str
    arrival_step: int
    arrival_time: float
    num_prompt_tokens: int
    max_tokens: int
    priority: int = 0


class Transition(NamedTuple):
    """Authoritative values after the step for a request whose status, slot, progress or
    preemption count changed other than by running its batch entry (user actions, preemption,
    finishing, failing). ``slot`` -1 = none. A FINISHED_* status removes it from the state."""

    request_id: str
    status: str
    slot: int
    num_computed_tokens: int
    num_preemptions: int
    error: str | None = None


@dataclass(frozen=True)
class RequestView:
    """What the inspector shows of one request at one step (an immutable snapshot).

    Times are on the engine clock; ``ttft`` and ``mean_itl`` are ``None`` until defined.
    Block tables are not part of a view: ask ``EngineState.block_ids(request_id)``.
    """

    request_id: str
    status: str
    arrival_step: int
    arrival_time: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    max_tokens: int
    slot: int | None
    num_preemptions: int
    ttft: float | None
    mean_itl: float | None
    finish_reason: str | None
    error: str | None
    num_recomputed_tokens: int = 0     # tokens computed again after recompute preemptions

    @property
    def is_finished(self) -> bool:
        return self.status.startswith("FINISHED")


@dataclass(frozen=True)
class StepRecord:
    """Everything that happened in one engine step, frozen for the recorder and the UI.

    Times: ``start_ns``/``end_ns`` are wall-clock nanoseconds since the run started;
    ``clock`` is the engine clock at the start of the step and ``token_time`` the engine-clock
    time stamped on the tokens sampled in it (steps under the virtual clock, seconds otherwise).
    ``schedule_ns``/``forward_ns``/``update_ns`` time the phases; ``recorder_wait_ns`` is how
    long the engine waited for a full recorder queue when it handed over the previous step.
    What changed: ``arrivals`` (entered the queues since the last step), ``scheduled`` (batch
    order), ``new_tokens``, ``events``, ``block_events`` (in the order they happened) and
    ``transitions``. Counts are after the step. ``error`` is set when the step's forward pass
    raised; the affected requests are failed. ``knobs`` are the live knob changes
    (``max_num_seqs``, ``max_num_batched_tokens``, ``num_usable_blocks``: name, new value) made
    since the previous step, in order; they hold from this step on. ``prefix_cache_queries`` / ``prefix_cache_hits``
    are the prompt (+ output, on a recompute) tokens of the requests admitted in the step and
    those found in the prefix cache (vLLM's counters, in tokens; 0 with caching off).
    """

    step: int
    start_ns: int
    end_ns: int
    clock: float
    token_time: float
    arrivals: tuple[Arrival, ...]
    scheduled: tuple[BatchEntry, ...]
    new_tokens: tuple[NewToken, ...]
    events: tuple[RequestEvent, ...]
    block_events: tuple[BlockEvent, ...]
    transitions: tuple[Transition, ...]
    preempted_ids: tuple[str, ...]
    not_admitted: tuple[tuple[str, str], ...]
    num_waiting: int
    num_running: int
    num_paused: int
    num_finished: int
    num_free_blocks: int
    num_total_blocks: int
    schedule_ns: int = 0
    forward_ns: int = 0
    update_ns: int = 0
    recorder_wait_ns: int = 0
    error: str | None = None
    waiting_reason: NotAdmittedReason = NotAdmittedReason.BEHIND
    knobs: tuple[tuple[str, int], ...] = ()
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0

    @property
    def num_scheduled_tokens(self) -> dict[str, int]:
        """``{request_id: tokens computed in this step}`` over ``scheduled``."""
        return {s.request_id: s.num_tokens for s in self.scheduled}

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum([s.num_tokens for s in self.scheduled])

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use, in [0, 1]."""
        return 1.0 - self.num_free_blocks / self.num_total_blocks if self.num_total_blocks else 0.0

    @property
    def num_preemptions(self) -> int:
        """Preemptions recorded with this step: its own (``preempted_ids``) and those a live knob
        change made just before it (``max_num_seqs`` cut, KV pool shrunk: ``preempted`` events
        of requests not in ``preempted_ids``). So the steps' total equals the ``preempted``
        events and the requests' ``num_preemptions`` summed."""
        return sum(1 for e in self.events if e.kind == EventKind.PREEMPTED)

    def not_admitted_reason(self, request_id: str, priority_of=None) -> str:
        """Why waiting ``request_id`` was not admitted in this step (``NOT_ADMITTED_*``).

        ``priority_of(request_id) -> int | None`` (the state's priorities) refines
        ``behind_older`` to ``lower_priority`` for a request of lower priority (higher value)
        than the first blocked one."""
        return not_admitted_reason(self, request_id, priority_of)


def not_admitted_reason(record, request_id: str, priority_of=None) -> str:
    """Why waiting ``request_id`` was not admitted in ``record``'s step: its listed reason, else
    the step's ``waiting_reason``; with ``priority_of`` (request id -> priority or None) a request
    of lower priority than the first blocked one is ``lower_priority`` rather than
    ``behind_older``. ``record`` is a :class:`StepRecord` or anything with its ``not_admitted`` and
    ``waiting_reason``."""
    for rid, reason in record.not_admitted:
        if rid == request_id:
            return reason
    default = record.waiting_reason
    if default == NotAdmittedReason.BEHIND and priority_of is not None and record.not_admitted:
        mine, first = priority_of(request_id), priority_of(record.not_admitted[0][0])
        if mine is not None and first is not None and mine > first:
            return NotAdmittedReason.LOWER_PRIORITY
    return default
