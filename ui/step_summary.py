"""What the window's step views need of a step, without its whole record.

The slot timeline needs each step's batch (request, slot, tokens, prefill) and the metrics plots,
the error banner and the "why not admitted" column a step's counts, times, error, preempted and
not-admitted requests. A :class:`StepSummary` holds just that. Every source gives a step range's
columns (``StepSource.step_batches``: a recording in one light query, each JSON column parsed once
for the range; a live engine from its packed newest steps), built by
``recordings.file.step_batches.step_batch_columns``; summaries are made from those columns
(:func:`summaries_from_columns`), so a recording and a live run cannot differ.

A summary answers what the views ask of a ``StepRecord`` (``step``, ``error``, ``scheduled``,
``preempted_ids``, ``not_admitted``, ``not_admitted_reason``, ``kv_cache_usage``...), so views
accept either.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from engine.outputs import BatchEntry, StepRecord
from engine.state.source import StepSource
from recordings.file.step_batches import batch_columns

SCALARS = ("step", "start_ns", "end_ns", "clock", "token_time", "num_waiting", "num_running",
           "num_paused", "num_finished", "num_free_blocks", "num_total_blocks", "schedule_ns",
           "forward_ns", "update_ns", "recorder_wait_ns", "total_num_scheduled_tokens",
           "num_new_tokens", "num_preemptions", "num_arrivals", "error", "preempted_ids", "not_admitted",
           "waiting_reason", "knobs")
# the recording's steps column keeps its name (renaming it would need a schema migration)
COLUMN_OF = {"total_num_scheduled_tokens": "num_scheduled_tokens"}
BATCH = ("request_ids", "slots", "num_tokens", "num_computed_tokens", "is_prefill")


class StepSummary:
    """One step: the scalars of :data:`SCALARS` (Python values, as in ``StepRecord``) and its
    batch as aligned numpy arrays in batch order (:data:`BATCH`: request ids as an object
    array, slots, tokens scheduled, tokens computed before the step, prefill flags)."""

    __slots__ = SCALARS + BATCH + ("_scheduled",)

    def __init__(self, scalars: Sequence[Any], batch: Sequence[np.ndarray]):
        for name, value in zip(SCALARS, scalars):
            setattr(self, name, value)
        for name, value in zip(BATCH, batch):
            setattr(self, name, value)
        self._scheduled: tuple[BatchEntry, ...] | None = None

    @property
    def scheduled(self) -> tuple[BatchEntry, ...]:
        """The batch as ``StepRecord.scheduled`` gives it (built on first use: for hover, not
        for frames)."""
        if self._scheduled is None:
            self._scheduled = tuple(BatchEntry(*e) for e in zip(
                self.request_ids.tolist(), self.slots.tolist(), self.num_tokens.tolist(),
                self.num_computed_tokens.tolist(), self.is_prefill.tolist()))
        return self._scheduled

    @property
    def num_scheduled_requests(self) -> int:
        return len(self.slots)

    # what a StepRecord works out of these fields, worked out by the same code
    kv_cache_usage = StepRecord.kv_cache_usage          # fraction of KV blocks in use after it
    not_admitted_reason = StepRecord.not_admitted_reason  # why a waiting request was not admitted

    def __repr__(self) -> str:
        return f"StepSummary(step={self.step}, {len(self.slots)} scheduled)"


def summaries_from_columns(cols: dict[str, Any]) -> list[StepSummary]:
    """One summary per step of ``cols`` (``Reader.step_batches`` / ``batch_columns`` output);
    a step's batch arrays are views of the range's arrays."""
    n = len(cols["step"])
    scalars = zip(*(cols[k].tolist() if isinstance(cols[k], np.ndarray) else cols[k]
                    for k in (COLUMN_OF.get(name, name) for name in SCALARS)))
    entry = (cols["request_id"], cols["slot"], cols["num_tokens"], cols["num_computed_tokens"],
             cols["is_prefill"])
    bounds = cols["batch_start"].tolist()
    return [StepSummary(sc, [a[bounds[i]:bounds[i + 1]] for a in entry])
            for i, sc in zip(range(n), scalars)]


def summarize(records: Sequence[StepRecord]) -> list[StepSummary]:
    """Summaries of ``records`` (a source that has records only; tests)."""
    return summaries_from_columns(batch_columns(records))


def as_summaries(steps: Sequence[StepRecord | StepSummary]) -> list[StepSummary]:
    """``steps`` as summaries: summaries pass through, records are summarised."""
    if all(isinstance(s, StepSummary) for s in steps):
        return list(steps)
    return [s if isinstance(s, StepSummary) else summarize([s])[0] for s in steps]


def fetch_summaries(source: StepSource, start: int, stop: int) -> list[StepSummary]:
    """Summaries of the steps ``start <= step < stop`` the source has, in step order, from
    ``source.step_batches`` (a recording: no record is decoded)."""
    start = max(0, start)
    if stop <= start:
        return []
    return summaries_from_columns(source.step_batches(start, stop))
