"""Reader: replay a recording (finished, crashed or still being written) as a StepSource.

``state_at(step)`` starts from the nearest keyframe at or before ``step`` (or from a cached state
between that keyframe and ``step``, which makes scrubbing forward cheap) and replays the recorded
``RequestView`` deltas up to ``step``. Every failure is a :class:`RecordingError` naming the file.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import sqlite3
import threading
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any, Iterator, Sequence

from engine.outputs import StepRecord
from engine.state import EngineState
from recordings import codec
from recordings.errors import RecordingError
from recordings.info import RequestInfo, TimelineEvent
from recordings.opening import open_readonly

_CHILD_TABLES = (
    ("step_requests", codec.STEP_REQUEST_COLUMNS),
    ("events", codec.EVENT_COLUMNS),
    ("tokens", codec.TOKEN_COLUMNS),
    ("request_states", codec.STATE_COLUMNS),
)


class Reader:
    """Read-only access to the recording at ``path``; implements ``engine.source.StepSource``.

    Safe to share between threads (calls are serialised). Keeps the last ``cache_size`` states.
    Raises :class:`RecordingError` if the file is missing, not SQLite, not a BatchScope
    recording, of an unsupported schema version, truncated or corrupt (here or on any later call).
    """

    def __init__(self, path: str | os.PathLike, cache_size: int = 32) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = open_readonly(self.path)
        self._cache: OrderedDict[int, EngineState] = OrderedDict()
        self._cache_size = max(1, cache_size)
        with self._reading("run info"):
            self._run_info = json.loads(self._rows("SELECT run_info_json FROM runs")[0][0])

    # --- StepSource ----------------------------------------------------------------------------
    def run_info(self) -> dict[str, Any]:
        """The ``run_info`` dict the writer was given (a copy; tuples came back as lists)."""
        return copy.deepcopy(self._run_info)

    def latest_step(self) -> int:
        """The last committed step, -1 before the first (asks the file anew on every call)."""
        value = self._rows("SELECT max(step) FROM steps")[0][0]
        return -1 if value is None else value

    def state_at(self, step: int) -> EngineState:
        """The engine state after ``step``, clamped to [-1, latest_step()]."""
        with self._lock, self._reading(f"state at step {step}"):
            row = self._rows("SELECT step, clock FROM steps WHERE step <= ? "
                             "ORDER BY step DESC LIMIT 1", (int(step),))
            target, clock = row[0] if row else (-1, None)
            if target in self._cache:
                self._cache.move_to_end(target)
                return self._cache[target]
            base = self._base_state(target)
            if base.step < target:
                requests = dict(base.requests)
                for (text,) in self._rows("SELECT view_json FROM request_states WHERE step > ? "
                                          "AND step <= ? ORDER BY step, seq",
                                          (base.step, target)):
                    view = codec.view_from_dict(json.loads(text))
                    requests[view.request_id] = view
                base = EngineState(step=target, clock=clock, num_total_blocks=base.num_total_blocks,
                                   block_size=base.block_size, max_num_seqs=base.max_num_seqs,
                                   requests=requests)
            self._remember(base)
            return base

    def records(self, start: int, stop: int) -> list[StepRecord]:
        """The recorded steps with ``start <= step < stop``, in step order, each equal to the
        :class:`StepRecord` that was written."""
        with self._lock, self._reading(f"steps {start}..{stop}"):
            steps = self._rows(f"SELECT {', '.join(codec.STEP_COLUMNS)} FROM steps "
                               "WHERE step >= ? AND step < ? ORDER BY step", (start, stop))
            if not steps:
                return []
            lo, hi = steps[0][0], steps[-1][0]
            children = []
            for table, columns in _CHILD_TABLES:
                by_step: dict[int, list[tuple]] = defaultdict(list)
                for r in self._rows(f"SELECT {', '.join(columns)} FROM {table} "
                                    "WHERE step >= ? AND step <= ? ORDER BY step, seq", (lo, hi)):
                    by_step[r[0]].append(r)
                children.append(by_step)
            return [codec.record_from_rows(row, *(c.get(row[0], ()) for c in children))
                    for row in steps]

    def request_text(self, request_id: str, step: int) -> str:
        """Generated text of ``request_id`` up to and including ``step`` ('' if unknown)."""
        rows = self._rows("SELECT text FROM tokens WHERE request_id = ? AND step <= ? "
                          "ORDER BY step, seq", (request_id, step))
        with self._reading(f"text of {request_id}"):
            return "".join(text or "" for (text,) in rows)

    # --- beyond StepSource ---------------------------------------------------------------------
    def request_timeline(self, request_id: str) -> list[TimelineEvent]:
        """Every lifecycle event of ``request_id`` in order ([] if unknown)."""
        rows = self._rows(
            "SELECT e.step, e.kind, e.detail, s.clock, s.end_ns FROM events e "
            "JOIN steps s ON s.step = e.step WHERE e.request_id = ? ORDER BY e.step, e.seq",
            (request_id,))
        return [TimelineEvent(*r) for r in rows]

    def request_info(self, request_id: str) -> RequestInfo | None:
        """The request's arrival, prompt, sampling and outcome, or ``None`` if unknown."""
        rows = self._rows(
            "SELECT request_id, arrival_step, arrival_time, num_prompt_tokens, max_tokens, "
            "prompt_token_ids_json, prompt_text, sampling_json, status, finish_reason, "
            "finish_step, num_output_tokens, ttft, mean_itl, num_preemptions, error "
            "FROM requests WHERE request_id = ?", (request_id,))
        if not rows:
            return None
        values = list(rows[0])
        with self._reading(f"request {request_id}"):
            values[5] = None if values[5] is None else tuple(json.loads(values[5]))
            values[7] = None if values[7] is None else json.loads(values[7])
        return RequestInfo(*values)

    def request_ids(self) -> list[str]:
        """Every recorded request id, in arrival order."""
        return [r[0] for r in self._rows("SELECT request_id FROM requests ORDER BY rowid")]

    def is_complete(self) -> bool:
        """True once the writer closed the file cleanly (False while writing or after a crash)."""
        return self._rows("SELECT closed_at FROM runs")[0][0] is not None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one read-only SQL query on the recording (for metrics and exporters); the rows.
        Raises :class:`RecordingError` on any SQLite error."""
        return self._rows(sql, params)

    def close(self) -> None:
        """Close the file. Idempotent; later calls raise :class:`RecordingError`."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                raise RecordingError(f"{self.path}: the reader is closed")
            try:
                return self._conn.execute(sql, params).fetchall()
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                raise RecordingError(f"{self.path}: corrupt or unreadable recording: {exc}") \
                    from exc

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn a malformed row (bad JSON, missing field) into a RecordingError."""
        try:
            yield
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise RecordingError(f"{self.path}: corrupt recording ({what}): "
                                 f"{type(exc).__name__}: {exc}") from exc

    def _base_state(self, target: int) -> EngineState:
        """The latest cached state or keyframe at or before ``target`` that replay can start
        from (no cached state is used from before the nearest keyframe)."""
        keyframe = self._rows("SELECT max(step) FROM keyframes WHERE step <= ?", (target,))[0][0]
        if keyframe is None:
            raise RecordingError(f"{self.path}: corrupt recording: no keyframe at or before "
                                 f"step {target}")
        cached = [s for s in self._cache if keyframe <= s <= target]
        if cached:
            return self._cache[max(cached)]
        text = self._rows("SELECT state_json FROM keyframes WHERE step = ?", (keyframe,))[0][0]
        state = codec.state_from_json(text)
        self._remember(state)
        return state

    def _remember(self, state: EngineState) -> None:
        self._cache[state.step] = state
        self._cache.move_to_end(state.step)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
