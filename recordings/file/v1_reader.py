"""Legacy: read schema-1 recordings (BatchScope before schema 2) through the :class:`Reader` API.

``open_reader(path)`` on a schema-1 file returns a :class:`V1Reader`. It is read-only: a v1 file is never
upgraded in place (its per-step rows are another model). What it gives:

- ``state_at(k)``: the v1 way (the nearest keyframe, then the ``request_states`` rows, each a whole
  JSON ``RequestView`` with its block table, up to ``k``), converted to today's columnar
  :class:`EngineState`: live requests (waiting, preempted, running, paused) are rows in arrival
  order, ``seq`` being the request's position in the ``requests`` table by rowid; the block arrays
  come from each view's block table; first/last token times from ``ttft``/``mean_itl``
  (first = arrival + ttft, last = first + mean_itl * (n - 1)); finished requests become
  ``recently_finished`` (the last :data:`NUM_RECENTLY_FINISHED`, by finish step).
- ``records(a, b)``: :class:`StepRecord` s with the batch (``step_requests``), tokens, events,
  preempted and not-admitted requests and the counts of each step. v1 stored no block events,
  transitions or arrivals per step, so ``block_events``, ``transitions`` and ``arrivals`` are
  empty: records of a v1 file describe what happened but cannot be replayed through
  ``StateTimeline`` (``state_at`` is the state). ``token_time`` (not stored by v1) is the step's
  clock + 1 under the virtual clock, else its clock + its duration, as v1's metrics defined it;
  ``recorder_wait_ns`` is 0.
- ``request_text``, ``request_timeline``, ``request_info``, ``request_ids`` from the v1 tables;
  ``run_info``, ``latest_step``, ``is_complete``, ``execute``, ``close`` as :class:`Reader`'s.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
import numpy as np

from engine.outputs import BatchEntry, NewToken, RequestEvent, RequestView, StepRecord
from engine.run_info import RunInfo
from engine.state.state import COLUMNS, NUM_RECENTLY_FINISHED, STATUS_CODE, EngineState
from recordings.errors import RecordingError
from recordings.file.opening import open_readonly
from recordings.file.reader import Reader

# the view fields a version-1 file stored (later ones, e.g. num_recomputed_tokens, keep their defaults)
_VIEW_FIELDS = [k for k, f in RequestView.__dataclass_fields__.items() if f.default is dataclasses.MISSING]
_STEP_SQL = ("SELECT step, start_ns, end_ns, clock, num_waiting, num_running, num_paused, "
             "num_finished, num_free_blocks, num_total_blocks, schedule_ns, forward_ns, "
             "update_ns, error, preempted_ids_json, not_admitted_json FROM steps "
             "WHERE step >= ? AND step < ? ORDER BY step")
_CHILD_SQL = {  # v1 child rows of a step range, in their order within a step
    "batch": "SELECT step, request_id, slot, num_tokens, num_computed_tokens, is_prefill "
             "FROM step_requests WHERE step >= ? AND step <= ? ORDER BY step, seq",
    "tokens": "SELECT step, request_id, idx, token_id, text FROM tokens "
              "WHERE step >= ? AND step <= ? ORDER BY step, seq",
    "events": "SELECT step, request_id, kind, detail FROM events "
              "WHERE step >= ? AND step <= ? ORDER BY step, seq",
}


class V1Reader(Reader):
    """Read-only access to a schema-1 recording (see the module docstring for what differs)."""

    def __init__(self, path: str | os.PathLike, cache_size: int = 8, *, damaged: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn = open_readonly(self.path, version=1, damaged=damaged)
        self._cache_size = max(1, cache_size)
        self._views: OrderedDict[int, tuple[dict[str, dict], EngineState]] = OrderedDict()
        self._order: dict[str, tuple[int, int]] | None = None  # id -> (seq, finish step)
        with self._reading("run info"):
            self._run_info = RunInfo.from_json(json.loads(self._rows("SELECT run_info_json FROM runs")[0][0]),
                                               where=str(self.path))
        self._virtual = self._run_info.config.get("clock", "virtual") != "wall"

    # --- state ---------------------------------------------------------------------------------
    def state_at(self, step: int) -> EngineState:
        """The engine state after ``step``, clamped to [-1, latest_step()]."""
        with self._lock, self._reading(f"state at step {step}"):
            row = self._rows("SELECT step, clock FROM steps WHERE step <= ? "
                             "ORDER BY step DESC LIMIT 1", (int(step),))
            target, clock = row[0] if row else (-1, None)
            if target in self._views:
                self._views.move_to_end(target)
                return self._views[target][1]
            kf = self._rows("SELECT max(step) FROM keyframes WHERE step <= ?", (target,))[0][0]
            if kf is None:
                raise RecordingError(f"{self.path}: corrupt recording: no keyframe at or before "
                                     f"step {target}")
            cached = [s for s in self._views if kf <= s <= target]
            if cached:
                base = max(cached)
                views, prev = dict(self._views[base][0]), self._views[base][1]
                layout = (prev.num_total_blocks, prev.block_size, prev.max_num_seqs)
            else:
                data = json.loads(self._rows("SELECT state_json FROM keyframes WHERE step = ?",
                                             (kf,))[0][0])
                base, views = kf, {v["request_id"]: v for v in data["requests"]}
                layout = tuple(int(data[k]) for k in ("num_total_blocks", "block_size",
                                                      "max_num_seqs"))
                clock = data["clock"] if clock is None else clock
            for (text,) in self._rows("SELECT view_json FROM request_states WHERE step > ? "
                                      "AND step <= ? ORDER BY step, seq", (base, target)):
                view = json.loads(text)
                views[view["request_id"]] = view
            state = self._state(target, clock, layout, views)
            self._views[target] = (views, state)
            while len(self._views) > self._cache_size:
                self._views.popitem(last=False)
            return state

    def _state(self, step: int, clock: float, layout: tuple[int, int, int],
               views: dict[str, dict]) -> EngineState:
        """The columnar state of v1 ``views``; ``layout`` = (blocks, block size, max_num_seqs)."""
        nb, bs, mns = layout
        order = self._request_order()
        finished = sorted((v for v in views.values() if v["status"].startswith("FINISHED")),
                          key=lambda v: (order[v["request_id"]][1], order[v["request_id"]][0]))
        live = sorted((v for v in views.values() if not v["status"].startswith("FINISHED")),
                      key=lambda v: order[v["request_id"]][0])
        cols = {k: np.zeros(len(live), dt) for k, dt in COLUMNS.items()}
        owner, pos = np.full(nb, -1, np.int64), np.zeros(nb, np.int64)
        for i, v in enumerate(live):
            seq, n_out = order[v["request_id"]][0], v["num_output_tokens"]
            first = v["arrival_time"] + v["ttft"] if v["ttft"] is not None else math.nan
            last = first + v["mean_itl"] * (n_out - 1) if v["mean_itl"] is not None else first
            blocks = v["block_ids"]
            for k, value in (("seq", seq), ("status", STATUS_CODE[v["status"]]),
                             ("slot", -1 if v["slot"] is None else v["slot"]),
                             ("num_blocks", len(blocks)), ("first_token_time", first),
                             ("last_token_time", last)):
                cols[k][i] = value
            for k in ("arrival_step", "arrival_time", "num_prompt_tokens", "max_tokens",
                      "num_computed_tokens", "num_output_tokens", "num_preemptions"):
                cols[k][i] = v[k]
            owner[blocks], pos[blocks] = seq, np.arange(len(blocks))
        next_seq = 1 + max((order[rid][0] for rid in views), default=-1)
        return EngineState(step, clock, nb, bs, mns,
                           next_seq=next_seq, request_ids=tuple(v["request_id"] for v in live),
                           columns=cols, block_owner=owner, block_pos=pos,
                           recently_finished=tuple(
                               RequestView(**{k: v[k] for k in _VIEW_FIELDS})
                               for v in finished[-NUM_RECENTLY_FINISHED:]))

    def _request_order(self) -> dict[str, tuple[int, int]]:
        """request id -> (arrival number = rowid order, finish step or -1)."""
        if self._order is None:
            rows = self._rows("SELECT request_id, finish_step FROM requests ORDER BY rowid")
            self._order = {rid: (i, -1 if fin is None else fin)
                           for i, (rid, fin) in enumerate(rows)}
        return self._order

    # --- records -------------------------------------------------------------------------------
    def records(self, start: int, stop: int) -> list[StepRecord]:
        """The recorded steps with ``start <= step < stop`` in today's :class:`StepRecord` shape
        (no block events, transitions or arrivals: v1 did not store them)."""
        with self._lock, self._reading(f"steps {start}..{stop}"):
            steps = self._rows(_STEP_SQL, (start, stop))
            if not steps:
                return []
            child: dict[str, dict[int, list]] = {}
            for name, sql in _CHILD_SQL.items():
                child[name] = {}
                for r in self._rows(sql, (steps[0][0], steps[-1][0])):
                    child[name].setdefault(r[0], []).append(r[1:])
            return [self._record(row, *(child[n].get(row[0], ()) for n in _CHILD_SQL))
                    for row in steps]

    def _record(self, row, batch, tokens, events) -> StepRecord:
        (step, start_ns, end_ns, clock, num_waiting, num_running, num_paused, num_finished,
         num_free, num_total, schedule_ns, forward_ns, update_ns, error, preempted,
         not_admitted) = row
        duration = 1.0 if self._virtual else (end_ns - start_ns) / 1e9
        return StepRecord(
            step=step, start_ns=start_ns, end_ns=end_ns, clock=clock, token_time=clock + duration,
            arrivals=(), block_events=(), transitions=(),
            scheduled=tuple(BatchEntry(rid, slot, n, nc, bool(pre))
                            for rid, slot, n, nc, pre in batch),
            new_tokens=tuple(NewToken(rid, idx, tid, text or "") for rid, idx, tid, text in tokens),
            events=tuple(RequestEvent(rid, kind, detail or "") for rid, kind, detail in events),
            preempted_ids=tuple(json.loads(preempted)),
            not_admitted=tuple((rid, why) for rid, why in json.loads(not_admitted)),
            num_waiting=num_waiting, num_running=num_running, num_paused=num_paused,
            num_finished=num_finished, num_free_blocks=num_free, num_total_blocks=num_total,
            schedule_ns=schedule_ns, forward_ns=forward_ns, update_ns=update_ns, error=error)

    # --- requests ------------------------------------------------------------------------------
    def request_text(self, request_id: str, step: int) -> str:
        """Generated text of ``request_id`` up to and including ``step`` ('' if unknown)."""
        rows = self._rows("SELECT text FROM tokens WHERE request_id = ? AND step <= ? "
                          "ORDER BY step, seq", (request_id, step))
        with self._reading(f"text of {request_id}"):
            return "".join(text or "" for (text,) in rows)

    _TIMELINE_SQL = ("SELECT e.step, e.kind, e.detail, s.clock, s.end_ns FROM events e "
                     "JOIN steps s ON s.step = e.step WHERE e.request_id = ? ORDER BY e.step, e.seq")
    _PROMPT_COLUMN = "prompt_token_ids_json"

    @staticmethod
    def _decode_prompt(value: Any) -> tuple[int, ...] | None:
        return None if value is None else tuple(json.loads(value))

    def request_ids(self) -> list[str]:
        """Every recorded request id, in arrival order."""
        return [r[0] for r in self._rows("SELECT request_id FROM requests ORDER BY rowid")]
