"""Reader: replay a recording (finished, crashed or still being written) as a StepSource.

``state_at(step)`` starts from the nearest keyframe at or before ``step`` (or from a cached state
between that keyframe and ``step``, which makes scrubbing forward cheap) and applies the recorded
steps with :class:`engine.state.timeline.StateTimeline`, the same code the engine used to make its live
states. Schema-1 files are read by ``recordings.file.v1_reader``. Every failure is a
:class:`RecordingError` naming the file.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import json
import operator
import os
import sqlite3
import threading
import warnings
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from engine.outputs import StepRecord
from engine.run_info import RunInfo
from engine.state.state import COLUMNS, EngineState
from engine.state.timeline import StateTimeline
from recordings.errors import RecordingError
from recordings.file import codec
from recordings.file.opening import file_version, missing_wal, open_readonly
from recordings.file.column_replay import replay_columns
from recordings.file.compact import Batch
from recordings.file.event_details import load_detail
from recordings.file.keyframe_bases import KeyframeBases
from recordings.file.schema import READABLE_OLD_VERSIONS, latest_version
from recordings.file.scrub_back import ScrubBack
from recordings.file.step_batches import (BATCH_FIELDS, V4_BATCH_FIELDS, batch_columns, columns_from_rows,
                                          columns_from_v4_rows)
from recordings.info import RequestInfo, TimelineEvent

_FIRST = operator.itemgetter(0)
ID_WINDOW = 512   # request numbers loaded around one the reader has not seen yet

ID_CACHE_MAX = 1 << 16   # request numbers -> ids kept; beyond, the cache starts over (flat memory)


_CHILD_TABLES = (("events", codec.EVENT_COLUMNS), ("block_events", codec.BLOCK_EVENT_COLUMNS),
                 ("transitions", codec.TRANSITION_COLUMNS))
_V4_CHILD_TABLES = (("events", codec.EVENT_COLUMNS), ("transitions", codec.TRANSITION_COLUMNS))


def _select(columns, version: int) -> str:
    """The SELECT list of ``columns`` for a file of schema ``version``: on a version-2 file the
    columns version 3 added are read as their defaults."""
    if version > 2:
        return ", ".join(columns)
    return ", ".join(f"{codec.V2_DEFAULTS[c]} AS {c}" if c in codec.V2_DEFAULTS else c for c in columns)
CURSOR_REACH = 64   # a forward seek within this many steps continues the last replay
_ARRIVAL_SQL = ("SELECT request_id, arrival_step, arrival_time, num_prompt_tokens, max_tokens, "
                "coalesce(json_extract(sampling_json, '$.priority'), 0) "
                "FROM requests WHERE arrival_step >= ? AND arrival_step <= ? ORDER BY seq")


class Reader:
    """Read-only access to the recording at ``path``; implements ``engine.state.source.StepSource``.

    Safe to share between threads (calls are serialised). Keeps the last ``cache_size`` states.
    ``damaged=True`` opens what is left of a damaged or truncated file (``recordings.damage.report``
    finds which steps still read): the tables are not touched at open, so only the calls that
    reach damaged rows fail.
    Raises :class:`RecordingError` if the file is missing, not SQLite, not a BatchScope
    recording, of an unsupported schema version, truncated or corrupt (here or on any later call).
    Open a file of any schema with :func:`recordings.file.open_reader.open_reader`.
    """

    damage = None                 # a damaged file's recordings.damage.report.DamageReport (keep_readable)
    _limit: int | None = None     # the last step served (keep_readable)

    def __init__(self, path: str | os.PathLike, cache_size: int = 8, *, damaged: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        # the latest schema, or a previous one as it is (JSON batch arrays, one row per block event)
        version = file_version(self.path, damaged)
        self._version = version if version in READABLE_OLD_VERSIONS else latest_version()
        self._conn: sqlite3.Connection | None = open_readonly(self.path, self._version, damaged)
        self._cache: OrderedDict[int, EngineState] = OrderedDict()
        self._cache_size = max(1, cache_size)
        self._init_request_numbers()
        self._text: dict[str, tuple[int, list[str]]] = {}

        self._cursor: StateTimeline | None = None     # the last replay, at its last step
        self._scrub = ScrubBack()                      # states below a scrub back (bounded)
        try:
            with self._reading("run info"):
                self._run_info = RunInfo.from_json(json.loads(self._rows("SELECT run_info_json FROM runs")[0][0]),
                                                   where=str(self.path))
        except BaseException:
            self.close()                  # a failed open leaves no connection behind
            raise

    # --- StepSource ----------------------------------------------------------------------------
    def run_info(self) -> RunInfo:
        """The :class:`engine.run_info.RunInfo` the writer was given (a copy; tuples came back as
        lists; a stored value of the wrong type is in its ``extra``, with a ``RunInfoWarning`` at open)."""
        return copy.deepcopy(self._run_info)

    def latest_step(self) -> int:
        """The last committed step, -1 before the first (asks the file anew on every call); at
        most the last readable step after :meth:`keep_readable`."""
        if self._limit is not None:
            return self._limit
        value = self._rows("SELECT max(step) FROM steps")[0][0]
        return -1 if value is None else value

    def keep_readable(self, report) -> None:
        """Serve only steps ``0..report.last_good_step`` from now on (``report``: the file's
        :class:`recordings.damage.report.DamageReport`, kept as ``self.damage``): a damaged file then
        replays up to its last readable step, and ``latest_step`` / ``state_at`` / ``records`` /
        ``step_batches`` never reach the damage."""
        with self._lock:
            self.damage, self._limit = report, int(report.last_good_step)

    def _stop(self, stop: int) -> int:
        return stop if self._limit is None else min(stop, self._limit + 1)

    def state_at(self, step: int) -> EngineState:
        """The engine state after ``step``, clamped to [-1, latest_step()]. Scrubbing back (a
        step at most a few below the last one asked for) is served from a bounded cache filled
        ahead of need (``recordings.file.scrub_back``)."""
        step = min(step, self._stop(step + 1) - 1)
        with self._lock, self._reading(f"state at step {step}"):
            row = self._rows("SELECT max(step) FROM steps WHERE step <= ?", (int(step),))[0][0]
            target = -1 if row is None else row
            if not self._scrub.moved_back(target):
                return self._state_at(target)
            state = self._scrub.states.get(target)
            if state is None:
                state = self._state_at(target, self._scrub.keep(target))
            self._scrub.served(state, self._fill_base, self._records)
            return state

    def keyframe_state(self, step: int) -> EngineState:
        """The state stored in the keyframe at ``step`` as it is (no replay, no cache). Raises
        :class:`RecordingError` if there is none or it does not read or decode."""
        with self._lock, self._reading(f"keyframe at step {step}"):
            rows = self._rows("SELECT state_npz, finished_json FROM keyframes WHERE step = ?", (int(step),))
            if not rows:
                raise RecordingError(f"{self.path}: no keyframe at step {step}")
            return codec.state_from_blob(rows[0][0], rows[0][1], self._static_of,
                                         self._bases.hashes_of, self._bases.map_of)

    def _state_at(self, target: int, keep=lambda s: False) -> EngineState:
        """The state after ``target`` (a recorded step or -1); a replay up to it hands the
        states of the steps ``keep`` says yes to on its way to the scrub-back cache."""
        if target in self._cache:
            self._cache.move_to_end(target)
            return self._cache[target]
        cursor, self._cursor = self._cursor, None     # dropped if applying fails
        if cursor is not None and cursor.step < target <= cursor.step + CURSOR_REACH:
            timeline = cursor         # scrubbing forward: no state copied, no keyframe loaded
        else:
            base = self._base_state(target, self._keyframe_at(target))
            if base.step == target:
                return base
            timeline = StateTimeline.from_state(base)
        for step in self._replay(timeline, timeline.step + 1, target + 1):
            if step < target and keep(step):
                self._scrub.states.add(timeline.snapshot())
        self._cursor = timeline
        state = timeline.snapshot()
        self._remember(state)
        return state

    def _replay(self, timeline: StateTimeline, start: int, stop: int) -> Iterator[int]:
        """Apply the recorded steps ``start <= step < stop`` to ``timeline``, yielding each
        step once applied: from their columns on a schema-4+ file
        (``recordings.file.column_replay``), else through their records."""
        if self._version >= 4 and type(self)._records is Reader._records:
            yield from replay_columns(timeline, self._rows, self._arrivals_by_step, start, stop)
            return
        for record in self._records(start, stop):
            timeline.apply(record)
            yield record.step

    def _fill_base(self, target: int) -> EngineState:
        """Where the scrub-back fill replays up to ``target`` from: the newest state it holds
        at or after the keyframe before ``target``, else that keyframe."""
        keyframe = self._keyframe_at(target)
        near = self._scrub.states.at_or_before(target)
        if near is not None and near.step >= keyframe:
            return near
        base = self._base_state(keyframe, keyframe)
        self._scrub.states.add(base)          # the scrub reaches it next
        return base

    def records(self, start: int, stop: int) -> list[StepRecord]:
        """The recorded steps with ``start <= step < stop``, in step order, each equal to the
        :class:`StepRecord` that was written."""
        with self._lock, self._reading(f"steps {start}..{stop}"):
            return self._records(start, self._stop(stop))

    def step_batches(self, start: int, stop: int) -> dict[str, Any]:
        """The steps with ``start <= step < stop`` as the window's step views need them, without
        decoding whole records: each step's scalar columns and its batch, as numpy columns (one
        query, each JSON column parsed once for the whole range; tokens, events, block events
        and transitions are not read). Equal to :func:`batch_columns` of :meth:`records`.

        Per step (step order): ``step``, ``start_ns``, ``end_ns``, ``clock``, ``token_time``,
        ``num_waiting``, ``num_running``, ``num_paused``, ``num_finished``, ``num_free_blocks``,
        ``num_total_blocks``, ``schedule_ns``, ``forward_ns``, ``update_ns``,
        ``recorder_wait_ns``, ``num_scheduled_tokens``, ``num_new_tokens``, ``num_arrivals``
        (requests that arrived in the step, from ``requests.arrival_step``) (numpy int64 or
        float64), ``error``, ``preempted_ids``, ``not_admitted``, ``waiting_reason``, ``knobs``
        (lists, as in :class:`StepRecord`) and ``batch_start`` (int64, one more: step ``i``'s batch entries
        are ``batch_start[i]:batch_start[i + 1]``). Per batch entry, in batch order:
        ``request_id`` (object), ``slot``, ``num_tokens``, ``num_computed_tokens`` (int64) and
        ``is_prefill`` (bool), as in ``StepRecord.scheduled``."""
        stop = self._stop(stop)
        with self._lock, self._reading(f"batches of steps {start}..{stop}"):
            if type(self).records is not Reader.records:    # another schema: from its records
                return batch_columns(self.records(start, stop))
            v4 = self._version >= 4
            rows = self._rows(f"SELECT {_select(V4_BATCH_FIELDS if v4 else BATCH_FIELDS, self._version)} "
                              "FROM steps WHERE step >= ? AND step < ? ORDER BY step", (start, stop))
            if v4:
                return columns_from_v4_rows(rows, self._id_of, self._num_prompt_of_seqs)
            return columns_from_rows(rows, self._id_of)

    def batches(self, start: int, stop: int, scalars: Sequence[str] = ()) -> list[tuple[tuple, Batch]]:
        """Who ran and what they sampled in the steps with ``start <= step < stop`` (schema >= 2),
        in step order, without decoding whole records: per step, the values of ``scalars`` (SQL
        expressions over the ``steps`` row, e.g. ``"token_time"``) and a
        :class:`recordings.file.compact.Batch` with ``seq``, ``is_prefill``, ``num_tokens`` and
        ``token_id`` (-1 = no token) in batch order. For metrics that stream a whole run (read it
        in ranges of a few thousand steps)."""
        stop = self._stop(stop)
        head = "".join(f"{expr}, " for expr in scalars)
        k = len(scalars)
        with self._lock, self._reading(f"batches of steps {start}..{stop}"):
            if self._version >= 4:
                return [(row[:k], Batch(row[k])) for row in self._rows(
                    f"SELECT {head}batch FROM steps WHERE step >= ? AND step < ? ORDER BY step",
                    (start, stop))]
            return [(row[:k], Batch.of_json(*row[k:])) for row in self._rows(
                f"SELECT {head}batch_seq_json, batch_prefill_json, batch_num_tokens_json, token_id_json "
                "FROM steps WHERE step >= ? AND step < ? ORDER BY step", (start, stop))]

    def request_text(self, request_id: str, step: int) -> str:
        """Generated text of ``request_id`` up to and including ``step`` ('' if unknown).
        Incremental per request: scrubbing forward reads only the new steps."""
        with self._lock, self._reading(f"text of {request_id}"):
            row = self._rows("SELECT seq, arrival_step, finish_step FROM requests "
                             "WHERE request_id = ?", (request_id,))
            if not row:
                return ""
            seq, first, last = row[0]
            upto = min(step, last) if last is not None else step
            done, parts = self._text.get(request_id, (first - 1, []))
            if done > upto:
                done, parts = first - 1, []
            v4 = self._version >= 4
            for text_json, seq_src in self._rows(
                    f"SELECT token_text_json, {'batch' if v4 else 'batch_seq_json'} FROM steps "
                    "WHERE step > ? AND step <= ? AND token_text_json IS NOT NULL ORDER BY step", (done, upto)):
                if v4:       # the texts are in token order: the batch's entries that sampled one
                    batch = Batch(seq_src)
                    seqs = batch.seq[batch.token_id >= 0].tolist()
                else:        # the texts are aligned with the batch
                    seqs = json.loads(seq_src)
                if seq in seqs:
                    parts.append(json.loads(text_json)[seqs.index(seq)] or "")
            self._text[request_id] = (max(done, upto), parts)
            if len(self._text) > 64:
                self._text.pop(next(iter(self._text)))
            return "".join(parts)

    # --- beyond StepSource ---------------------------------------------------------------------
    # Schema-specific SQL and decoding (recordings.file.v1_reader overrides them).
    _TIMELINE_SQL = ("SELECT e.step, e.kind, e.detail, s.clock, s.end_ns FROM events e "
                     "JOIN requests r ON r.seq = e.seq JOIN steps s ON s.step = e.step "
                     "WHERE r.request_id = ? ORDER BY e.step, e.ord")
    _PROMPT_COLUMN = "prompt_token_ids"

    @staticmethod
    def _decode_prompt(value: Any) -> tuple[int, ...] | None:
        return codec.tokens_from_blob(value)

    def request_timeline(self, request_id: str) -> list[TimelineEvent]:
        """Every lifecycle event of ``request_id`` in order ([] if unknown)."""
        rows = self._rows(self._TIMELINE_SQL, (request_id,))
        with self._reading(f"request {request_id}'s events"):
            return [TimelineEvent(step, kind, load_detail(kind, detail or ""), clock, end_ns)
                    for step, kind, detail, clock, end_ns in rows]

    def request_info(self, request_id: str) -> RequestInfo | None:
        """The request's arrival, prompt, sampling and outcome, or ``None`` if unknown."""
        rows = self._rows(
            "SELECT request_id, arrival_step, arrival_time, num_prompt_tokens, max_tokens, "
            f"{self._PROMPT_COLUMN}, prompt_text, sampling_json, status, finish_reason, "
            "finish_step, num_output_tokens, ttft, mean_itl, num_preemptions, error "
            "FROM requests WHERE request_id = ?", (request_id,))
        if not rows:
            return None
        values = list(rows[0])
        with self._reading(f"request {request_id}"):
            values[5] = self._decode_prompt(values[5])
            values[7] = None if values[7] is None else json.loads(values[7])
        return RequestInfo(*values)

    def request_ids(self) -> list[str]:
        """Every recorded request id, in arrival order."""
        return [r[0] for r in self._rows("SELECT request_id FROM requests ORDER BY seq")]

    def request_ids_of(self, seqs: Sequence[int] | np.ndarray) -> list[str]:
        """The request ids of the arrival numbers ``seqs`` (``requests.seq``, as the schema-4
        tables and blobs store requests), through the reader's window cache. Raises
        :class:`RecordingError` for a number no request has."""
        with self._lock, self._reading("request ids"):
            return self._ids_of_seqs(np.asarray(seqs, np.int64).reshape(-1))

    def is_complete(self) -> bool:
        """True once the writer closed the file cleanly (False while writing or after a crash)."""
        return self._rows("SELECT closed_at FROM runs")[0][0] is not None

    def missing_wal(self) -> bool:
        """True when the file is in WAL mode with no ``-wal`` file beside it (a copy of a crashed
        or running recording made without it): it then holds the steps up to its last checkpoint
        (``recordings.file.opening.missing_wal``)."""
        return missing_wal(self.path)

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
                try:
                    return _fetch_all(self._conn, sql, params)
                except (UnicodeDecodeError, sqlite3.OperationalError) as exc:
                    if "decode" not in str(exc):
                        raise
                    self._conn.text_factory = _decode_replacing  # invalid UTF-8: U+FFFD
                    try:
                        return _fetch_all(self._conn, sql, params)
                    finally:
                        self._conn.text_factory = str
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                raise RecordingError(f"{self.path}: corrupt or unreadable recording: {exc}") \
                    from exc

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn a malformed row (bad JSON, missing field) into a RecordingError."""
        try:
            yield
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError, OverflowError,
                RecursionError) as exc:       # (a number too big for int64, JSON nested too deep)
            raise RecordingError(f"{self.path}: corrupt recording ({what}): "
                                 f"{type(exc).__name__}: {exc}") from exc

    def _records(self, start: int, stop: int) -> list[StepRecord]:
        if self._version >= 4:
            return self._v4_records(start, stop)
        steps = self._rows(f"SELECT {_select(codec.STEP_COLUMNS, self._version)} FROM steps "
                           "WHERE step >= ? AND step < ? ORDER BY step", (start, stop))
        if not steps:
            return []
        lo, hi = steps[0][0], steps[-1][0]
        events, blocks, transitions = (
            self._rows_by_step(f"SELECT {_select(columns, self._version)} FROM {table} "
                               "WHERE step >= ? AND step <= ? ORDER BY step, ord", lo, hi)
            for table, columns in _CHILD_TABLES)
        arrivals = self._arrivals_by_step(lo, hi)
        return [codec.record_from_rows(row, arrivals.get(row[0], ()), events.get(row[0], ()),
                                       blocks.get(row[0], ()), transitions.get(row[0], ()),
                                       self._id_of, self._num_prompt_of)
                for row in steps]

    def _rows_by_step(self, sql: str, lo: int, hi: int, step_column: int = 0) -> dict[int, list[tuple]]:
        """The rows of ``sql`` (parameters ``lo``, ``hi``: a step range) grouped by their step,
        in the query's order."""
        by_step: dict[int, list[tuple]] = defaultdict(list)
        for r in self._rows(sql, (lo, hi)):
            by_step[r[step_column]].append(r)
        return by_step

    def _arrivals_by_step(self, lo: int, hi: int) -> dict[int, list]:
        """The ``Arrival`` records of the requests that arrived at steps ``lo``..``hi``, by step."""
        return {step: [codec.arrival_from_row(r) for r in rows]
                for step, rows in self._rows_by_step(_ARRIVAL_SQL, lo, hi, step_column=1).items()}

    def _v4_records(self, start: int, stop: int) -> list[StepRecord]:
        """:meth:`_records` of a schema-4 file: the batch and block events are blobs."""
        steps = self._rows(f"SELECT {', '.join(codec.V4_STEP_COLUMNS)} FROM steps "
                           "WHERE step >= ? AND step < ? ORDER BY step", (start, stop))
        if not steps:
            return []
        lo, hi = steps[0][0], steps[-1][0]
        events, transitions = (
            self._rows_by_step(f"SELECT {', '.join(columns)} FROM {table} "
                               "WHERE step >= ? AND step <= ? ORDER BY step, ord", lo, hi)
            for table, columns in _V4_CHILD_TABLES)
        blocks = dict(self._rows("SELECT step, data FROM block_events WHERE step >= ? AND step <= ?",
                                 (lo, hi)))
        arrivals = self._arrivals_by_step(lo, hi)
        return [codec.record_from_v4_row(row, arrivals.get(row[0], ()), events.get(row[0], ()),
                                         blocks.get(row[0]), transitions.get(row[0], ()),
                                         self._id_of, self._num_prompt_of_seqs, self._ids_of_seqs)
                for row in steps]

    def _keyframe_at(self, target: int) -> int:
        """The step of the newest keyframe at or before ``target``."""
        keyframe = self._rows("SELECT max(step) FROM keyframes WHERE step <= ?", (target,))[0][0]
        if keyframe is None:
            raise RecordingError(f"{self.path}: corrupt recording: no keyframe at or before "
                                 f"step {target}")
        return keyframe

    def _base_state(self, target: int, keyframe: int) -> EngineState:
        """The latest cached state or keyframe (at step ``keyframe``) at or before ``target``
        that replay can start from (no cached state is used from before the keyframe)."""
        cached = [s for s in self._cache if keyframe <= s <= target]
        if cached:
            return self._cache[max(cached)]
        blob, finished = self._rows("SELECT state_npz, finished_json FROM keyframes "
                                    "WHERE step = ?", (keyframe,))[0]
        state = codec.state_from_blob(blob, finished, self._static_of, self._bases.hashes_of,
                                      self._bases.map_of)
        self._remember(state)
        return state

    def _remember(self, state: EngineState) -> None:
        self._cache[state.step] = state
        self._cache.move_to_end(state.step)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    # ---- Request numbers: ids, prompt lengths and keyframe columns, loaded in windows ----
    def _init_request_numbers(self) -> None:
        self._ids: dict[int, str] = {}
        self._num_prompt: dict[int, int] = {}
        self._static: tuple | None = None              # the last keyframe's (seqs, ids, static)
        self._bases = KeyframeBases(self._rows)    # what keyframes stored against earlier ones need
        indexes = {name for (name,) in self._rows(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'requests'")}
        # the covering index of arrival number -> id and static facts (files of this release)
        self._by_seq = next((f"INDEXED BY {name}" for name in ("requests_static", "requests_seq_lookup")
                             if name in indexes), "")
        self._static_hint = "INDEXED BY requests_static" if "requests_static" in indexes else ""

    def _id_of(self, seq: int) -> str:
        name = self._ids.get(seq)
        if name is None:
            # The requests near ``seq`` (a step's batch and queue are near each other in arrival
            # order), through the covering index: never the whole table and its prompt blobs.
            self._forget_ids()
            for s, rid, n in self._rows(
                    f"SELECT seq, request_id, num_prompt_tokens FROM requests {self._by_seq} "
                    "WHERE seq BETWEEN ? AND ?", (seq - ID_WINDOW, seq + ID_WINDOW)):
                self._ids[s], self._num_prompt[s] = rid, n
            name = self._ids.get(seq)
            if name is None:
                raise KeyError(f"request number {seq} is not in the requests table")
        return name

    def _static_of(self, seqs: np.ndarray) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
        """Request ids and static columns (``codec.STATIC_COLUMNS``) of the arrival numbers
        ``seqs`` (ascending). A request's static facts never change, and keyframes near each
        other hold mostly the same live requests (a scrub back decodes one a keyframe
        interval): those of the last call are reused and only the others read (~25 -> ~8 ms a
        keyframe at 14k live requests). Raises ``KeyError`` for a number the table does not
        have."""
        last = self._static
        if last is None or not len(last[0]) or not len(seqs):
            ids, static = self._static_rows(seqs)
            self._static = (np.asarray(seqs, np.int64).copy(), np.array(ids, object), static)
            return ids, static
        known, known_ids, known_static = last
        at = np.minimum(np.searchsorted(known, seqs), len(known) - 1)
        have = known[at] == seqs
        new_ids, new_static = self._static_rows(seqs[~have]) if not have.all() else ((), {})
        out_ids = np.empty(len(seqs), object)
        out_ids[have] = known_ids[at[have]]
        out_ids[~have] = new_ids
        static = {}
        for name, column in known_static.items():
            static[name] = out = np.empty(len(seqs), column.dtype)
            out[have] = column[at[have]]
            if name in new_static:
                out[~have] = new_static[name]
        self._static = (np.asarray(seqs, np.int64).copy(), out_ids, static)
        return tuple(out_ids.tolist()), static

    def _static_rows(self, seqs: np.ndarray) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
        """:meth:`_static_of` from the requests table: one range query when ``seqs`` are dense,
        else ``IN`` lists."""
        sql = (f"SELECT seq, request_id, arrival_step, arrival_time, num_prompt_tokens, max_tokens "
               f"FROM requests {self._static_hint} WHERE ")
        rows: list[tuple] = []
        if len(seqs) and int(seqs[-1]) - int(seqs[0]) < 4 * len(seqs) + 64:
            lo, hi = int(seqs.min()), int(seqs.max())
            dense = self._static_range(lo, hi)
            if dense is not None:
                pick = seqs - lo
                return tuple(dense[0][pick].tolist()), {k: v[pick] for k, v in dense[1].items()}
            rows = self._rows(sql + "seq BETWEEN ? AND ? ORDER BY seq", (int(seqs[0]), int(seqs[-1])))
        else:
            for i in range(0, len(seqs), 900):
                part = [int(x) for x in seqs[i:i + 900]]
                rows += self._rows(sql + f"seq IN ({', '.join('?' * len(part))}) ORDER BY seq", part)
        found = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        at = np.searchsorted(found, seqs)
        if len(seqs) and (at.max() >= len(found) or not np.array_equal(found[at], seqs)):
            raise KeyError("a keyframe names a request number the requests table does not have")
        self._forget_ids()
        for r in rows:
            self._ids[r[0]], self._num_prompt[r[0]] = r[1], r[4]
        picked = [rows[i] for i in at.tolist()]
        static = {name: np.array([r[j] for r in picked], COLUMNS[name])
                  for j, name in ((2, "arrival_step"), (3, "arrival_time"),
                                  (4, "num_prompt_tokens"), (5, "max_tokens"))}
        return tuple(r[1] for r in picked), static

    def _static_range(self, lo: int, hi: int) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """Request ids (object array) and static columns of every arrival number ``lo..hi``: the
        ids and integer columns aggregated into one text each by SQLite (``group_concat``) and
        split by numpy, since a row costs ~0.25 us in the ``sqlite3`` module (it lets go of the
        GIL at every row): reading them as rows was ~2/3 of decoding a keyframe of 14k live
        requests. ``arrival_time`` comes as rows (SQLite's text of a REAL need not give the same
        double back). ``group_concat`` sees the rows in the subquery's ``ORDER BY`` order
        (SQLite keeps that order for order-sensitive aggregates); the ids at both ends and in the
        middle are checked against the table. None when the range has a gap or a value that is
        not what the writer stores (then the rows are read as they are)."""
        n = hi - lo + 1
        (count, ids, *numbers), = self._rows(
            "SELECT count(*), group_concat(request_id, char(31)), group_concat(arrival_step), "
            "group_concat(num_prompt_tokens), group_concat(max_tokens) FROM "
            "(SELECT seq, request_id, arrival_step, num_prompt_tokens, max_tokens "
            f"FROM requests {self._static_hint} WHERE seq BETWEEN ? AND ? ORDER BY seq)", (lo, hi))
        names = np.array(ids.split("\x1f") if count == n and isinstance(ids, str) else (), object)
        if len(names) != n:
            return None
        try:
            with warnings.catch_warnings():       # text numpy cannot read to its end warns
                warnings.simplefilter("error")
                arrays = [np.fromstring(text, np.int64, sep=",") for text in numbers]
        except (DeprecationWarning, ValueError, TypeError):
            return None
        probe = (lo, (lo + hi) // 2, hi)
        if any(len(a) != n for a in arrays) or dict(self._rows(
                "SELECT seq, request_id FROM requests WHERE seq IN (?, ?, ?)", probe)) != \
                {s: names[s - lo] for s in probe}:
            return None
        with _collector_paused():
            times = self._rows(f"SELECT arrival_time FROM requests {self._static_hint} "
                               "WHERE seq BETWEEN ? AND ? ORDER BY seq", (lo, hi))
        if len(times) != n:
            return None
        static = {name: a.astype(COLUMNS[name], copy=False)
                  for name, a in zip(("arrival_step", "num_prompt_tokens", "max_tokens"), arrays)}
        try:
            static["arrival_time"] = np.fromiter(map(_FIRST, times), COLUMNS["arrival_time"], n)
        except TypeError:           # a NULL: NaN, as the row path reads it
            static["arrival_time"] = np.array(times, COLUMNS["arrival_time"]).reshape(n)
        return names, static

    def _forget_ids(self) -> None:
        """Start the id cache over once it holds ``ID_CACHE_MAX`` requests: a reader that has
        scrubbed a long recording (or the live view of a long run) keeps no id per request of
        its history."""
        if len(self._ids) >= ID_CACHE_MAX:
            self._ids.clear()
            self._num_prompt.clear()

    def _num_prompt_of(self, seq: int) -> int:
        self._id_of(seq)
        return self._num_prompt[seq]

    def _ids_of_seqs(self, seqs: np.ndarray) -> list[str]:
        """The request ids of the arrival numbers ``seqs``."""
        try:
            return list(map(self._ids.__getitem__, seqs.tolist()))
        except KeyError:
            return [self._id_of(s) for s in seqs.tolist()]

    def _num_prompt_of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        """The prompt lengths of the arrival numbers ``seqs`` (int64)."""
        num_prompt = self._num_prompt
        try:
            return np.fromiter(map(num_prompt.__getitem__, seqs.tolist()), np.int64, len(seqs))
        except KeyError:
            return np.fromiter(map(self._num_prompt_of, seqs.tolist()), np.int64, len(seqs))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No garbage collection while a burst of row tuples is made (one per live request of a
    keyframe: ~14k): they hold floats only, so no pass could free any of them while the list
    holds them, and the ~20 young-generation passes they would start (each of which promotes
    them, counting towards a full pass) cost ~0.2 ms; in a process with a large heap (the
    window, ``bench_scale.py``) such a full pass costs 100+ ms and would land inside a seek."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _fetch_all(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple]:
    """Every row of ``sql``; the statement is finished even when a row fails to decode (an
    unfinished statement would keep the file's read lock)."""
    cursor = conn.execute(sql, params)
    try:
        return cursor.fetchall()
    finally:
        cursor.close()


def _decode_replacing(raw: bytes) -> str:
    """A text column's bytes as UTF-8, invalid sequences replaced by U+FFFD."""
    return raw.decode("utf-8", "replace")
