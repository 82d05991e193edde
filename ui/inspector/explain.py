"""The selected request explained in words: why it waits, its preemptions and its prefix-cache hits.

Pure functions over what every ``StepSource`` gives (a state, the shown step's record or summary,
``source.request_timeline`` and ``source.records``), so a live engine and a replay explain the
same request the same way. No widgets: ``ui.inspector.forensics`` shows the texts.

- :func:`explain_waiting`: the inspector's reason line, naming the blocked request a waiting one
  is behind and the priorities that put it there.
- :func:`load_history`: the request's preemptions (``engine.sched.preemption.PreemptionInfo`` from the
  events) and admissions (with the prefix-cache blocks each one hit, from the step's ``hit``
  block events) up to the shown step.
- :data:`PREFIX_EXPLAINERS`: the hook for events that explain where a prefix match stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.outputs import RequestView
from engine.sched.preemption import PreemptionInfo, preemption_info
from engine.kv.prefix_explain import describe_detail as describe_prefix_match
from engine.state.state import EngineState
from ui.views.request_table import (PAUSED_TEXT, SWAPPED_TEXT, not_admitted, reason_text,
                              reason_words, state_priority_of)
from ui.state_lookup import find_row
from engine.plural import plural
from engine.vocab import RequestStatus, BlockEventKind, EventKind, NotAdmittedReason, PreemptionMode

# what each preemption mode did with the victim's KV, after the engine's one-line description
MODE_NOTES = {
    PreemptionMode.SWAP: "KV kept in the CPU swap pool, copied back on resume",
    PreemptionMode.SWAP_FALLBACK: "recompute fallback: the CPU swap pool had no room, so its KV was dropped",
}

# The prefix-cache explainer: timeline event kind -> function(detail) -> one line for people.
# The engine records, at each admission with prefix caching on, a ``prefix_cache`` event saying
# how much hit and where the match stopped and why (engine.kv.prefix_explain); the inspector lists
# its lines under the prefix-cache hit, for live runs and recordings alike.
PREFIX_EXPLAINERS: dict[str, Callable[[str], str]] = {EventKind.PREFIX_CACHE: describe_prefix_match,
                                                       EventKind.PREFIX_CACHE_WAITING: describe_prefix_match}


def explain_waiting(record, view: RequestView, state: EngineState) -> str:
    """The inspector's reason line for ``view`` in ``state``: the error, the finish reason,
    "paused by user", or why it was not admitted in ``record``'s step (a ``StepRecord`` or a
    ``StepSummary``; None: '' for a waiting request). A request behind the blocked one names it
    and why it is blocked; under ``priority`` it also names both priorities."""
    priority_of = state_priority_of(state)
    reason = not_admitted(record, view, priority_of)
    text = reason_text(view, reason)
    if view.status == RequestStatus.PAUSED and text == PAUSED_TEXT:
        return text + (f" (keeps its KV, {view.num_computed_tokens} tokens, but no batch slot)"
                       if view.num_computed_tokens else " (its KV was taken: it recomputes on resume)")
    if view.status == RequestStatus.SWAPPED and text == SWAPPED_TEXT:
        row = find_row(state, view.request_id)
        cpu = 0 if row is None else int((state.cpu_owner == state.columns["seq"][row]).sum())
        return (f"{text} ({cpu} CPU blocks hold its {view.num_computed_tokens} tokens of KV; "
                "it is copied back, nothing recomputed, once a batch slot, the token budget and "
                "enough free GPU blocks allow, oldest swap-out first)")
    if view.error or view.finish_reason or view.status in (RequestStatus.PAUSED, RequestStatus.SWAPPED):
        return text
    if reason == NotAdmittedReason.STATIC_BATCH:
        return f"{text}: the next batch starts when every running request has finished"
    blocked = record.not_admitted[0] if record is not None and record.not_admitted else None
    if blocked is None or blocked[0] == view.request_id:
        if reason == NotAdmittedReason.LOWER_PRIORITY:           # listed itself: displaced this step
            return f"{text}: a higher-priority request took its place in this step"
        return text
    first, why = blocked
    if reason == NotAdmittedReason.LOWER_PRIORITY:
        return (f"lower priority ({priority_of(view.request_id)}) than {first} "
                f"({priority_of(first)}), which is blocked: {reason_words(why)}")
    if reason == NotAdmittedReason.BEHIND:
        return f"behind older request {first}, which is blocked: {reason_words(why)}"
    return text


@dataclass(frozen=True)
class Admission:
    """One admission (``scheduled`` event) of the request: the step and the prefix-cache blocks
    it started from (``num_cached_blocks`` full blocks of ``block_size`` tokens)."""

    step: int
    num_cached_blocks: int
    block_size: int

    @property
    def num_cached_tokens(self) -> int:
        """Tokens found in the prefix cache (whole blocks: vLLM's ``num_cached_tokens``)."""
        return self.num_cached_blocks * self.block_size


@dataclass(frozen=True)
class Preemption:
    """One preemption of the request: the step, its :class:`PreemptionInfo` (None for a
    recording made before forensics, whose ``detail`` is free text) and the admission that
    brought the request back (None: not back by the shown step)."""

    step: int
    info: PreemptionInfo | None
    detail: str
    back: Admission | None = None

    @property
    def num_dropped_tokens(self) -> int:
        """Tokens of KV a recompute preemption (or a swap that fell back to recompute) dropped:
        computed, then thrown away."""
        dropping = (PreemptionMode.RECOMPUTE, PreemptionMode.SWAP_FALLBACK)
        return self.info.num_tokens if self.info is not None and self.info.mode in dropping else 0

    @property
    def num_swapped_tokens(self) -> int:
        """Tokens of KV a swap preemption copied to the CPU (kept: not recomputed)."""
        return self.info.num_tokens if self.info is not None and self.info.mode == PreemptionMode.SWAP else 0

    @property
    def num_recomputed_tokens(self) -> int:
        """Of the dropped tokens, those computed again: all but what the prefix cache gave back
        at the re-admission (0 while the request is not back)."""
        if self.back is None:
            return 0
        return max(self.num_dropped_tokens - self.back.num_cached_tokens, 0)

    def describe(self) -> str:
        """'step 12: recompute 120 tokens (higher priority for req-7), preemption #2; back at
        step 20, 96 from the prefix cache'; a swap mode's preemption adds what happened to the
        KV (:data:`MODE_NOTES`)."""
        text = f"step {self.step}: " + (self.info.describe() if self.info is not None
                                        else f"preempted {self.detail}".strip())
        note = MODE_NOTES.get(self.info.mode) if self.info is not None else None
        if note:
            text += f" — {note}"
        if self.back is not None:
            text += f"; back at step {self.back.step}"
            if self.back.num_cached_tokens:
                text += f", {self.back.num_cached_tokens} from the prefix cache"
        return text


@dataclass(frozen=True)
class RequestHistory:
    """What the inspector explains of one request up to a step: its preemptions and admissions
    in step order, and the lines of :data:`PREFIX_EXPLAINERS` events."""

    preemptions: tuple[Preemption, ...] = ()
    admissions: tuple[Admission, ...] = ()
    prefix_notes: tuple[str, ...] = ()

    @property
    def num_dropped_tokens(self) -> int:
        """Wasted work: tokens of KV its recompute preemptions dropped."""
        return sum(p.num_dropped_tokens for p in self.preemptions)

    @property
    def num_recomputed_tokens(self) -> int:
        """Of :attr:`num_dropped_tokens`, those computed again after re-admission."""
        return sum(p.num_recomputed_tokens for p in self.preemptions)

    @property
    def num_swapped_tokens(self) -> int:
        """Tokens of KV its swap preemptions copied to the CPU (kept, not wasted)."""
        return sum(p.num_swapped_tokens for p in self.preemptions)


def load_history(source, request_id: str, step: int, block_size: int) -> RequestHistory:
    """``request_id``'s preemptions, admissions and prefix notes up to and including ``step``,
    from ``source.request_timeline`` (a source without one: an empty history) and, for each
    admission, the ``hit`` block events of that step's record (``source.records``)."""
    events = [e for e in source.request_timeline(request_id) if e.step <= step]
    # a "scheduled" right after "resumed" is a paused request taking its slot back with its KV,
    # not an admission (no prefix-cache lookup)
    steps = sorted({e.step for prev, e in zip([None, *events], events)
                    if e.kind == EventKind.SCHEDULED and not (prev is not None and prev.kind == EventKind.RESUMED
                                                      and prev.step == e.step)})
    admissions = tuple(Admission(s, _hit_blocks(source, s, request_id), block_size) for s in steps)
    # a preempted request comes back in a later step (never in the step that preempted it)
    preemptions = tuple(Preemption(e.step, preemption_info(e.detail), e.detail,
                                   next((a for a in admissions if a.step > e.step), None))
                        for e in events if e.kind == EventKind.PREEMPTED)
    notes = tuple(PREFIX_EXPLAINERS[e.kind](e.detail) for e in events if e.kind in PREFIX_EXPLAINERS)
    return RequestHistory(preemptions, admissions, notes)


def _hit_blocks(source, step: int, request_id: str) -> int:
    """Blocks shared into ``request_id``'s table from the prefix cache in ``step``."""
    records = source.records(step, step + 1)
    return sum(len(ev.block_ids) for r in records for ev in r.block_events
               if ev.kind == BlockEventKind.HIT and ev.request_id == request_id)


def prefix_text(history: RequestHistory, view: RequestView) -> str:
    """The first admission's hit, '48 of 130 prompt tokens hit (3 blocks)' (vLLM's
    ``num_cached_tokens``; re-admissions after a preemption are told with the preemption), then
    the :data:`PREFIX_EXPLAINERS` lines."""
    if not history.admissions:
        return "not admitted yet"
    first = history.admissions[0]
    text = (f"{first.num_cached_tokens} of {view.num_prompt_tokens} prompt tokens hit "
            f"({plural(first.num_cached_blocks, 'block')})")
    return "\n".join((text, *history.prefix_notes))


def preemption_text(history: RequestHistory) -> str:
    """One line per preemption, then the wasted work, or 'none'."""
    if not history.preemptions:
        return "none"
    lines = [p.describe() for p in history.preemptions]
    swapped = history.num_swapped_tokens
    lines.append(f"wasted: {history.num_dropped_tokens} KV tokens dropped, "
                 f"{history.num_recomputed_tokens} computed again "
                 f"({plural(len(history.preemptions), 'preemption')})"
                 + (f"; {swapped} swapped to the CPU (kept, not recomputed)" if swapped else ""))
    return "\n".join(lines)
