"""Conversions between the engine's frozen objects and the recording's rows.

The writer calls the ``*_rows``/``*_json`` functions, the reader the ``*_from_*`` ones; keeping
both directions in one file keeps them symmetric, so a read-back object compares equal to the one
written (tuples stay tuples, ``None`` stays ``None``, float fields come back as floats).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping, Sequence

from engine.outputs import (NewToken, RequestEvent, RequestView, ScheduledRequest,
                            SchedulerOutput, StepRecord)
from engine.state import EngineState

_VIEW_FIELDS = tuple(f.name for f in dataclasses.fields(RequestView))


def dumps(obj: Any) -> str:
    """Compact JSON text; tuples become lists, anything else unknown becomes ``str(obj)``."""
    return json.dumps(obj, separators=(",", ":"), default=str)


def strict_dumps(obj: Any) -> str:
    """Compact JSON text; raises ``TypeError`` for values JSON cannot hold (engine payloads
    must round-trip exactly, so nothing is silently turned into a string)."""
    return json.dumps(obj, separators=(",", ":"))


# --- request views and states ----------------------------------------------------------------
def view_to_dict(view: RequestView) -> dict[str, Any]:
    """A plain dict of every field of ``view`` (``block_ids`` stays a tuple until dumped)."""
    return {name: getattr(view, name) for name in _VIEW_FIELDS}


def view_from_dict(data: Mapping[str, Any]) -> RequestView:
    """The :class:`RequestView` that :func:`view_to_dict` (after a JSON round trip) came from."""
    data = dict(data)
    data["block_ids"] = tuple(data["block_ids"])
    return RequestView(**data)


def state_json(step: int, clock: float, num_total_blocks: int, block_size: int,
               max_num_seqs: int, views: Iterable[RequestView]) -> str:
    """JSON text of a full engine state (a keyframe); ``views`` in the state's request order."""
    return strict_dumps({
        "step": step, "clock": clock, "num_total_blocks": num_total_blocks,
        "block_size": block_size, "max_num_seqs": max_num_seqs,
        "requests": [view_to_dict(v) for v in views],
    })


def state_from_json(text: str) -> EngineState:
    """The :class:`EngineState` a :func:`state_json` keyframe describes."""
    data = json.loads(text)
    views = [view_from_dict(v) for v in data.pop("requests")]
    return EngineState(requests={v.request_id: v for v in views}, **data)


# --- requests ----------------------------------------------------------------------------------
_OUTCOME_FIELDS = ("status", "finish_reason", "num_output_tokens", "ttft", "mean_itl",
                   "num_preemptions", "error")


def request_row(request_id: str, arrival_step: int, arrival_time: float,
                prompt_token_ids: Sequence[int], prompt_text: str | None,
                sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The ``requests`` row of an announced arrival (outcome columns still empty)."""
    return {
        "request_id": request_id, "arrival_step": arrival_step, "arrival_time": arrival_time,
        "num_prompt_tokens": len(prompt_token_ids), "max_tokens": sampling.get("max_tokens"),
        "prompt_token_ids_json": strict_dumps(list(prompt_token_ids)),
        "prompt_text": prompt_text, "sampling_json": dumps(sampling),
    }


def request_row_from_view(view: RequestView) -> dict[str, Any]:
    """A ``requests`` row for a request the engine never announced (no prompt, no sampling);
    it has the same columns as :func:`request_row`, so both can share one batch insert."""
    return {"request_id": view.request_id, "arrival_step": view.arrival_step,
            "arrival_time": view.arrival_time, "num_prompt_tokens": view.num_prompt_tokens,
            "max_tokens": view.max_tokens, "prompt_token_ids_json": None, "prompt_text": None,
            "sampling_json": None}


def outcome_row(view: RequestView, step: int) -> dict[str, Any]:
    """The outcome columns of a request that finished in ``step``, from its final view."""
    row = {name: getattr(view, name) for name in _OUTCOME_FIELDS}
    row.update(request_id=view.request_id, finish_step=step)
    return row


# --- step records ------------------------------------------------------------------------------
def step_rows(record: StepRecord) -> dict[str, list[dict[str, Any]]]:
    """Rows of every table that one step writes, keyed by table name.

    Raises ``TypeError``/``ValueError`` if a payload cannot be stored as JSON.
    """
    so = record.scheduler_output
    step = record.step
    return {
        "steps": [{
            "step": step, "start_ns": record.start_ns, "end_ns": record.end_ns,
            "clock": record.clock, "num_scheduled_tokens": record.num_scheduled_tokens,
            "num_scheduled_requests": len(so.scheduled),
            "num_waiting": record.num_waiting, "num_running": record.num_running,
            "num_paused": record.num_paused, "num_finished": record.num_finished,
            "num_free_blocks": record.num_free_blocks,
            "num_total_blocks": record.num_total_blocks,
            "kv_cache_usage": record.kv_cache_usage, "num_preemptions": record.num_preemptions,
            "schedule_ns": record.schedule_ns, "forward_ns": record.forward_ns,
            "update_ns": record.update_ns, "error": record.error,
            "preempted_ids_json": strict_dumps(so.preempted_ids),
            "not_admitted_json": strict_dumps(so.not_admitted),
        }],
        "step_requests": [{
            "step": step, "seq": i, "request_id": s.request_id, "slot": s.slot,
            "num_tokens": s.num_tokens, "num_computed_tokens": s.num_computed_tokens,
            "is_prefill": int(s.is_prefill), "new_block_ids_json": strict_dumps(s.new_block_ids),
            "block_ids_json": strict_dumps(s.block_ids),
        } for i, s in enumerate(so.scheduled)],
        "events": [{
            "step": step, "seq": i, "request_id": e.request_id, "kind": e.kind,
            "detail": e.detail,
        } for i, e in enumerate(record.events)],
        "tokens": [{
            "step": step, "seq": i, "request_id": t.request_id, "idx": t.index,
            "token_id": t.token_id, "text": t.text,
        } for i, t in enumerate(record.new_tokens)],
        "request_states": [{
            "step": step, "seq": i, "request_id": v.request_id,
            "view_json": strict_dumps(view_to_dict(v)),
        } for i, v in enumerate(record.changed)],
    }


# Column order the reader selects; record_from_rows unpacks rows in exactly this order.
STEP_COLUMNS = ("step", "start_ns", "end_ns", "clock", "num_waiting", "num_running",
                "num_paused", "num_finished", "num_free_blocks", "num_total_blocks",
                "schedule_ns", "forward_ns", "update_ns", "error", "preempted_ids_json",
                "not_admitted_json")
STEP_REQUEST_COLUMNS = ("step", "request_id", "slot", "num_tokens", "num_computed_tokens",
                        "is_prefill", "new_block_ids_json", "block_ids_json")
EVENT_COLUMNS = ("step", "request_id", "kind", "detail")
TOKEN_COLUMNS = ("step", "request_id", "idx", "token_id", "text")
STATE_COLUMNS = ("step", "view_json")


def record_from_rows(step_row: Sequence[Any], scheduled: Iterable[Sequence[Any]],
                     events: Iterable[Sequence[Any]], tokens: Iterable[Sequence[Any]],
                     changed: Iterable[Sequence[Any]]) -> StepRecord:
    """Rebuild one :class:`StepRecord` from its rows (columns as in the ``*_COLUMNS`` tuples,
    child rows in ``seq`` order)."""
    (step, start_ns, end_ns, clock, num_waiting, num_running, num_paused, num_finished,
     num_free_blocks, num_total_blocks, schedule_ns, forward_ns, update_ns, error,
     preempted_json, not_admitted_json) = step_row
    so = SchedulerOutput(
        step=step,
        scheduled=tuple(
            ScheduledRequest(request_id=rid, slot=slot, num_tokens=n, num_computed_tokens=nc,
                             is_prefill=bool(pre), new_block_ids=tuple(json.loads(new)),
                             block_ids=tuple(json.loads(blocks)))
            for _, rid, slot, n, nc, pre, new, blocks in scheduled),
        preempted_ids=tuple(json.loads(preempted_json)),
        not_admitted=tuple(tuple(pair) for pair in json.loads(not_admitted_json)),
    )
    return StepRecord(
        step=step, start_ns=start_ns, end_ns=end_ns, clock=clock, scheduler_output=so,
        new_tokens=tuple(NewToken(request_id=rid, index=idx, token_id=tid, text=text)
                         for _, rid, idx, tid, text in tokens),
        events=tuple(RequestEvent(request_id=rid, kind=kind, detail=detail)
                     for _, rid, kind, detail in events),
        changed=tuple(view_from_dict(json.loads(text)) for _, text in changed),
        num_waiting=num_waiting, num_running=num_running, num_paused=num_paused,
        num_finished=num_finished, num_free_blocks=num_free_blocks,
        num_total_blocks=num_total_blocks, schedule_ns=schedule_ns, forward_ns=forward_ns,
        update_ns=update_ns, error=error,
    )
