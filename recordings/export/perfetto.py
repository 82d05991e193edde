"""A recording as a Chrome / Perfetto trace (Trace Event Format, JSON Object Format).

Opens in https://ui.perfetto.dev and chrome://tracing. Three processes (``pid``):

1. ``batch slots``: one thread (``tid`` = slot) per batch slot, with a complete slice
   (``ph`` ``X``) per run of consecutive steps in which one request held the slot
   (:mod:`recordings.export.slot_runs`: the cells of the window's slot timeline), named by
   the request id; preemptions as thread-scoped instants (``ph`` ``i``) on the slot the
   request last ran in, with the ``preempted`` event's reason, mode and tokens as args.
2. ``requests``: each request's lifecycle as nestable async slices (``b`` / ``e``, ``id`` = the
   request id): queued, prefill, decode, preempted, paused (:mod:`recordings.export.lifecycles`).
3. ``engine``: a ``steps`` thread with one ``X`` slice per scheduler step, and counters
   (``ph`` ``C``, numeric ``args``): ``KV blocks`` (used / cached_free / free after the step),
   ``queues`` (waiting / running / swapped / paused after the step) and ``tokens`` (prefill /
   decode tokens computed in the step, 0 between steps).

``ts`` and ``dur`` are microseconds on the run's engine clock (:mod:`recordings.export.timebase`:
wall or simulated seconds, or ``us_per_step`` per virtual step); ``otherData`` says which.
Process and thread names and orders are ``M`` metadata events. The file is written as the
steps stream by (:class:`recordings.export.trace_file.TraceFile`), read in chunks of columns
(:mod:`recordings.export.step_chunks`): per chunk the batch entries are handled column-wise and
only those that start or end a slot run or change a request's phase or slot become events, so
a 100,000-step, 256-slot recording exports at several thousand steps a second of CPU
(``bench/bench_export.py``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from recordings.file.completeness import completeness
from recordings.export.lifecycles import Lifecycles
from recordings.export.replay import Progress
from recordings.export.slot_runs import SlotRun, SlotRuns
from recordings.export.step_chunks import StepChunk, chunks
from recordings.export.timebase import US_PER_STEP, TimeBase, time_base
from recordings.export.trace_file import TraceFile
from engine.vocab import EventKind

SLOTS_PID, REQUESTS_PID, ENGINE_PID = 1, 2, 3
STEPS_TID = 1
PROCESS_NAMES = {SLOTS_PID: "batch slots", REQUESTS_PID: "requests", ENGINE_PID: "engine"}
BEFORE_BATCH = {EventKind.PREEMPTED, EventKind.PAUSED, EventKind.RESUMED, EventKind.ABORTED, EventKind.REJECTED}  # between steps / in schedule()
AFTER_BATCH = {EventKind.FINISHED, EventKind.FAILED}                                  # in update_from_output()


@dataclass(frozen=True)
class PerfettoExport:
    """What was written: the file, its time base, and events per (process name, ``ph``)."""

    path: Path
    timebase: TimeBase
    counts: dict[tuple[str, str], int]
    num_steps: int

    @property
    def num_events(self) -> int:
        return sum(self.counts.values())


def export_perfetto(reader, path: str | Path, *, us_per_step: float = US_PER_STEP,
                    progress: Progress | None = None,
                    source: Callable[..., Iterable[StepChunk]] | None = None) -> PerfettoExport:
    """Write the recording open in ``reader`` (a ``recordings.file.reader.Reader``) to ``path`` as
    trace-event JSON (see the module doc). ``us_per_step``: microseconds per step under the
    virtual clock. ``progress(n)`` is called as each ``n`` steps are done. ``source(reader,
    progress)`` gives the steps in chunks (default :func:`recordings.export.step_chunks.chunks`:
    column-wise where the file allows, else the full replay). Raises ``RecordingError`` for an
    unreadable recording, ``ValueError`` for a bad ``us_per_step``, ``OSError`` if ``path``
    cannot be written (no partial file is left)."""
    info = reader.run_info()
    tb = time_base(info, us_per_step)
    config = info.config
    max_num_seqs = int(config.get("max_num_seqs") or 1)
    other = {"source": "BatchScope recording", "recording": Path(reader.path).name,
             "clock": tb.clock, "time_axis": tb.description,
             **completeness(reader).to_json(), "model": _name(info.model),
             "device": info.device, "config": config,
             "trace": (info.trace or {}).get("name")}
    with TraceFile(path, other, PROCESS_NAMES) as out:
        _metadata(out, max_num_seqs, tb)
        writer = _StepWriter(out, tb, max_num_seqs)
        num_steps = 0
        for chunk in (source or chunks)(reader, progress):
            writer.add(chunk)
            num_steps += len(chunk)
        writer.close()
    return PerfettoExport(Path(path), tb, dict(sorted(out.counts.items())), num_steps)


def _name(model: Any) -> Any:
    return model.get("name") if isinstance(model, dict) else model


def _metadata(out: TraceFile, max_num_seqs: int, tb: TimeBase) -> None:
    """Process and thread names and sort orders (``ph`` ``M``)."""
    width = len(str(max_num_seqs - 1))
    for pid, name in PROCESS_NAMES.items():
        label = f"{name} ({tb.clock} clock)" if pid == SLOTS_PID else name
        out.emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        out.emit({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                  "args": {"sort_index": pid}})
    for slot in range(max_num_seqs):
        out.emit({"ph": "M", "name": "thread_name", "pid": SLOTS_PID, "tid": slot,
                  "args": {"name": f"slot {slot:0{width}d}"}})
        out.emit({"ph": "M", "name": "thread_sort_index", "pid": SLOTS_PID, "tid": slot,
                  "args": {"sort_index": slot}})
    out.emit({"ph": "M", "name": "thread_name", "pid": ENGINE_PID, "tid": STEPS_TID,
              "args": {"name": "steps"}})


class _StepWriter:
    """Turns each chunk of steps into events; holds only live requests and open slot runs. The
    batch entries are handled column-wise: only those that change a request's phase or slot
    (:meth:`StepChunk.changed_entries`) and the slot runs that start or end are Python work."""

    def __init__(self, out: TraceFile, tb: TimeBase, max_num_seqs: int) -> None:
        self.out, self.tb = out, tb
        self.runs = SlotRuns(max_num_seqs, self._slot_slice)
        self.lives = Lifecycles(out.emit, tb, REQUESTS_PID)
        self._prev_end: float | None = None      # token_time of the previous step
        self._tokens_idle = True                 # the tokens counter reads 0

    def add(self, c: StepChunk) -> None:
        """Write the events of chunk ``c``'s steps, in step order and within a step in the order
        the engine made them (arrivals, events before the batch, the batch, events in it, the
        step and its counters)."""
        self.runs.begin(c)
        n = len(c)
        first = c.batch_start
        prefill_sum = np.zeros(len(c.request) + 1, np.int64)
        np.cumsum(np.where(c.is_prefill, c.num_tokens, 0), out=prefill_sum[1:])
        all_sum = np.zeros(len(c.request) + 1, np.int64)
        np.cumsum(c.num_tokens, out=all_sum[1:])
        prefill = (prefill_sum[first[1:]] - prefill_sum[first[:-1]]).tolist()
        decode = ((all_sum[first[1:]] - all_sum[first[:-1]]) - np.asarray(prefill, np.int64)).tolist()
        phased = c.changed_entries(c.is_prefill)
        phased = np.split(phased, np.searchsorted(c.entry_row[phased], np.arange(1, n)))
        names, request, is_prefill = c.names, c.request, c.is_prefill
        clock, token_time, step = c.clock.tolist(), c.token_time.tolist(), c.step.tolist()
        size = np.diff(first).tolist()
        used = (c.num_total_blocks - c.num_free_blocks).tolist()
        cached, free = c.cached_free.tolist(), (c.num_free_blocks - c.cached_free).tolist()
        waiting, running, paused = c.num_waiting.tolist(), c.num_running.tolist(), c.num_paused.tolist()
        swapped, new_tokens, preemptions = c.swapped.tolist(), c.num_new_tokens.tolist(), c.num_preemptions.tolist()
        wall = (c.end_ns - c.start_ns).tolist()
        for k in range(n):
            t0, t1 = clock[k], token_time[k]
            if self._prev_end is not None and t0 > self._prev_end and not self._tokens_idle:
                self._counter("tokens", self._prev_end, {"prefill": 0, "decode": 0})   # idle gap
                self._tokens_idle = True
            for _, a in c.arrivals[k]:
                self.lives.arrive(a.request_id, min(a.arrival_time, t0),
                                  {"arrival_step": a.arrival_step, "num_prompt_tokens": a.num_prompt_tokens,
                                   "max_tokens": a.max_tokens, "priority": a.priority})
            for _, ev in c.events[k]:
                if ev.kind in BEFORE_BATCH:
                    self._lifecycle_event(ev.request_id, ev.kind, ev.detail, t0)
            for i in phased[k].tolist():
                self.lives.phase(names[int(request[i])], "prefill" if is_prefill[i] else "decode", t0)
            self.runs.step(k)
            for _, ev in c.events[k]:
                if ev.kind in AFTER_BATCH and ev.request_id in self.lives:
                    self.lives.finish(ev.request_id, t1, {"event": ev.kind, "detail": ev.detail})
                    self.runs.forget(ev.request_id)
            p, d = prefill[k], decode[k]
            self._step_slice(step[k], t0, t1, {"step": step[k], "num_scheduled_requests": size[k],
                                               "num_prefill_tokens": p, "num_decode_tokens": d,
                                               "num_new_tokens": new_tokens[k],
                                               "num_preemptions": preemptions[k], "wall_ns": wall[k]},
                             c.error[k])
            self._counter("tokens", t0, {"prefill": p, "decode": d})
            self._tokens_idle = p == d == 0
            self._counter("KV blocks", t1, {"used": used[k], "cached_free": cached[k], "free": free[k]})
            self._counter("queues", t1, {"waiting": waiting[k], "running": running[k],
                                         "swapped": swapped[k], "paused": paused[k]})
            self._prev_end = t1
        self.runs.end()

    def _lifecycle_event(self, request_id: str, kind: str, detail: str, t: float) -> None:
        if kind == EventKind.PREEMPTED:
            args = _detail_args(detail)
            self._preemption_instant(request_id, t, args)
            self.lives.phase(request_id, "preempted", t, args)
        elif kind == EventKind.PAUSED:
            self.lives.phase(request_id, "paused", t)
        elif kind == EventKind.RESUMED:
            self.lives.phase(request_id, "queued", t)
        elif request_id in self.lives or kind == EventKind.REJECTED:        # aborted, rejected
            self.lives.finish(request_id, t, {"event": kind, "detail": detail})
            self.runs.forget(request_id)

    def _preemption_instant(self, request_id: str, t: float, args: dict) -> None:
        slot = self.runs.last_slot(request_id)
        ev: dict[str, Any] = {"ph": "i", "cat": "preemption", "name": f"preempted {request_id}",
                              "pid": SLOTS_PID, "tid": 0 if slot is None else slot,
                              "s": "p" if slot is None else "t", "ts": self.tb.us(t),
                              "args": {"request_id": request_id, **args}}
        self.out.emit(ev)

    def _slot_slice(self, run: SlotRun) -> None:
        ts = self.tb.us(run.start)
        self.out.emit({"ph": "X", "cat": "slot", "name": run.request_id, "pid": SLOTS_PID,
                       "tid": run.slot, "ts": ts, "dur": max(0.0, round(self.tb.us(run.end) - ts, 3)),
                       "args": {"request_id": run.request_id, "first_step": run.first_step,
                                "last_step": run.last_step, "num_steps": run.num_steps,
                                "num_tokens": run.num_tokens,
                                "num_prefill_tokens": run.num_prefill_tokens,
                                "num_prefill_steps": run.num_prefill_steps}})

    def _step_slice(self, step: int, t0: float, t1: float, args: dict[str, Any], error: str | None) -> None:
        ts = self.tb.us(t0)
        if error:
            args["error"] = error
        self.out.emit({"ph": "X", "cat": "step", "name": f"step {step}", "pid": ENGINE_PID,
                       "tid": STEPS_TID, "ts": ts,
                       "dur": max(0.0, round(self.tb.us(t1) - ts, 3)), "args": args})

    def _counter(self, name: str, t: float, values: dict[str, int]) -> None:
        self.out.emit({"ph": "C", "name": name, "pid": ENGINE_PID, "tid": 0, "ts": self.tb.us(t),
                       "args": values})

    def close(self) -> None:
        self.runs.close()
        if self._prev_end is not None:
            if not self._tokens_idle:
                self._counter("tokens", self._prev_end, {"prefill": 0, "decode": 0})
            self.lives.close(self._prev_end)


def _detail_args(detail: str) -> dict[str, Any]:
    """A ``preempted`` event's detail (``engine.sched.preemption`` PreemptionInfo JSON: mode, reason,
    for, tokens, count) as args; older recordings' free text as ``{"detail": text}``."""
    try:
        parsed = json.loads(detail)
    except (TypeError, ValueError):
        return {"detail": detail}
    return parsed if isinstance(parsed, dict) else {"detail": detail}

