"""``batchscope check``: a recording verified end to end, one :class:`recordings.check.invariants.Problem` per fault.

:func:`check_file` runs, in order:

- ``integrity``: SQLite's ``PRAGMA integrity_check`` (every page, index and constraint; step -1).
- ``schema``: the file's schema version is one this code reads, and its tables, views and columns
  are those BatchScope's migrations create (``recordings.file.schema.migrate`` on an empty database):
  a missing column, an unknown table, view or trigger (which nothing of ours writes) is named.
- ``rows``: every step from 0 to the last one has its ``steps`` row (no gaps), the keyframe before
  the first step exists, no per-step row (events, block events, transitions, keyframes) names a
  step that is not there, and each step's batch arrays are as long as its
  ``num_scheduled_requests``.
- the invariants G1-G4 and G6 replayed from the rows (:func:`recordings.check.invariants.check_recording`).
- ``metrics``: each finished request's stored outcome (``num_output_tokens``, TTFT, mean ITL,
  ``finish_step``, ``num_preemptions``) recomputed from the steps' token arrays (in SQL,
  independently of the Python decoding of ``recordings.metrics.run_metrics`` and the replay) and the events,
  and compared.
- ``incomplete``: the writer never closed the file (``runs.closed_at`` NULL: a crash, a kill, a
  full disk, or a copy taken while it was written), at the last step it holds; and whether the
  ``-wal`` file of such a copy is missing (the steps after its last checkpoint are lost).

Version-1 files (read-only, another row model) get only the integrity, invariant and
incomplete checks. Cost: one pass over the file for the integrity check, one replay, one
SQL pass over the steps' token arrays (O(requests) memory).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import sqlite_utils

from recordings.metrics.stats import STEPS_PER_QUERY
from recordings.check.invariants import FINISH_EVENT_KINDS, Problem, name_list, check_recording
from recordings.file.schema import READABLE_OLD_VERSIONS, latest_version, migrate

REL_TOLERANCE = 1e-9        # float outcomes (TTFT, mean ITL) agree within this relative error
_BATCH_ARRAYS = ("batch_seq_json", "batch_slot_json", "batch_num_computed_json", "token_id_json")


def check_file(reader, *, max_problems: int = 100,
               on_step: Callable[[int], None] | None = None, quick_every: int | None = None) -> list[Problem]:
    """Every problem of the recording open in ``reader`` (a ``recordings.file.reader.Reader``), in the order
    of the module doc; ``[]`` when it is clean. At most ``max_problems`` invariant problems (see
    :func:`recordings.check.invariants.check_recording`, which also calls ``on_step``) and as many of
    each other kind. ``quick_every`` N: ``check --quick``: SQLite's ``quick_check`` for the
    integrity check (every page, not the indexes' agreement with their tables) and the invariants
    on every N-th keyframe interval only (:mod:`recordings.check.sampled`); the other checks
    whole. Raises :class:`recordings.errors.RecordingError` if the file cannot be read."""
    version = int(reader.execute("PRAGMA user_version")[0][0])
    problems = integrity_problems(reader, max_problems, quick=quick_every is not None)
    if version >= 2:
        problems += schema_problems(reader, version) + row_problems(reader, max_problems)
    if quick_every is None:
        problems += check_recording(reader, max_problems=max_problems, on_step=on_step, fast=not problems)
    else:
        from recordings.check.sampled import sampled_check
        problems += sampled_check(reader, every=quick_every, max_problems=max_problems, on_step=on_step)[0]
    if version >= 2:
        problems += metric_problems(reader, max_problems)
    return problems + incomplete_problems(reader)


def integrity_problems(reader, max_problems: int = 100, quick: bool = False) -> list[Problem]:
    """SQLite's own check of the file (``integrity_check``; ``quick``: ``quick_check``, which skips
    comparing the indexes with their tables): one ``integrity`` problem per message it gives."""
    rows = reader.execute(f"PRAGMA {'quick_check' if quick else 'integrity_check'}({int(max_problems)})")
    return [Problem(-1, "integrity", str(m)) for (m,) in rows if m != "ok"]


def _expected_schema(version: int | None = None) -> dict[str, tuple[str, set[str]]]:
    """name -> (type, columns) of every table and view schema ``version`` (default: the latest)
    has."""
    db = sqlite_utils.Database(memory=True)
    try:
        migrate(db, ":memory:", target=version)
        return _schema_of(lambda sql: db.execute(sql).fetchall())
    finally:
        db.close()


def _schema_of(rows) -> dict[str, tuple[str, set[str]]]:
    out = {}
    for kind, name in rows("SELECT type, name FROM sqlite_master WHERE type IN "
                           "('table', 'view', 'trigger') AND name NOT LIKE 'sqlite_%'"):
        # a view's columns are not asked for: that would compile the file's own view
        cols = {c[1] for c in rows(f"PRAGMA main.table_xinfo(\"{name}\")")} if kind == "table" else set()
        out[name] = (kind, cols)
    return out


def schema_problems(reader, version: int) -> list[Problem]:
    """``schema`` problems: a version this code does not write as it is, and every table, view
    or column missing from the file or in it though BatchScope never makes it (a trigger, say)."""
    out: list[Problem] = []
    if version != latest_version() and version not in READABLE_OLD_VERSIONS:
        out.append(Problem(-1, "schema", f"schema version {version}, read as it is (this code "
                                         f"writes {latest_version()}); its columns are not checked"))
        return out
    expected = _expected_schema(version)
    found = _schema_of(reader.execute)
    for name, (kind, cols) in expected.items():
        if name not in found:
            out.append(Problem(-1, "schema", f"{kind} {name} is missing"))
        elif cols - found[name][1]:
            out.append(Problem(-1, "schema", f"{kind} {name} lacks column(s) "
                                             f"{', '.join(sorted(cols - found[name][1]))}"))
    for name, (kind, _) in found.items():
        if name not in expected:
            out.append(Problem(-1, "schema", f"unknown {kind} {name!r}: BatchScope never "
                                             "creates it (it is ignored and never run)"))
    return out


def row_problems(reader, max_problems: int = 100) -> list[Problem]:
    """``rows`` problems: missing steps, a missing first keyframe, rows of steps that are not
    there, batch arrays of the wrong length."""
    out: list[Problem] = []
    for step, prev in reader.execute(
            "SELECT step, prev FROM (SELECT step, lag(step) OVER (ORDER BY step) AS prev "
            "FROM steps) WHERE step != coalesce(prev, -1) + 1 LIMIT ?", (max_problems,)):
        first = 0 if prev is None else prev + 1
        out.append(Problem(step, "rows", f"steps {first}..{step - 1} are missing" if step - 1 > first
                           else f"step {first} is missing"))
    if not reader.execute("SELECT 1 FROM keyframes WHERE step = -1"):
        out.append(Problem(-1, "rows", "the keyframe before the first step is missing"))
    for table in ("events", "block_events", "transitions", "keyframes"):
        for (step,) in reader.execute(
                f"SELECT DISTINCT step FROM {table} WHERE step >= 0 AND step NOT IN "
                "(SELECT step FROM steps) ORDER BY step LIMIT ?", (max_problems,)):
            out.append(Problem(step, "rows", f"{table} rows of a step that has no steps row"))
    if int(reader.execute("PRAGMA user_version")[0][0]) >= 4:
        return out      # the batch blobs are checked as they are decoded (metric_problems, the replay)
    lengths = " OR ".join(f"json_array_length({c}) != num_scheduled_requests" for c in _BATCH_ARRAYS)
    for (step,) in reader.execute(
            f"SELECT step FROM steps WHERE NOT ({' AND '.join(f'json_valid({c})' for c in _BATCH_ARRAYS)}) "
            f"OR {lengths} ORDER BY step LIMIT ?", (max_problems,)):
        out.append(Problem(step, "rows", "the batch arrays are not JSON arrays of "
                                         "num_scheduled_requests entries"))
    return out


def metric_problems(reader, max_problems: int = 100) -> list[Problem]:
    """``metrics`` problems: finished requests whose stored outcome differs from the one
    recomputed from the rows (at the request's ``finish_step``)."""
    # per request: its tokens, the first and the last token's time (SQL over the aligned arrays,
    # apart from the Python decoding that recordings.metrics.run_metrics and the replay do)
    out: list[Problem] = []
    if int(reader.execute("PRAGMA user_version")[0][0]) >= 4:
        tokens = _token_spans(reader, out, max_problems)
    else:
        tokens = {seq: (n, first, last) for seq, n, first, last in reader.execute(
            "SELECT b.value, count(*), min(s.token_time), max(s.token_time) "
            "FROM steps s, json_each(s.batch_seq_json) b WHERE s.num_new_tokens > 0 "
            "AND json_extract(s.token_id_json, '$[' || b.key || ']') >= 0 GROUP BY b.value")}
    kinds = ", ".join(f"'{k}'" for k in FINISH_EVENT_KINDS)
    ended = dict(reader.execute(f"SELECT seq, min(step) FROM events WHERE kind IN ({kinds}) GROUP BY seq"))
    preempted = dict(reader.execute("SELECT seq, count(*) FROM events WHERE kind = 'preempted' GROUP BY seq"))
    for (seq, rid, arrival, step, n_out, ttft, itl, n_pre) in reader.execute(
            "SELECT seq, request_id, arrival_time, finish_step, num_output_tokens, ttft, mean_itl, "
            "num_preemptions FROM requests WHERE status IS NOT NULL ORDER BY seq"):
        count, first, last = tokens.get(seq, (0, None, None))
        want = {"num_output_tokens": count, "finish_step": ended.get(seq),
                "num_preemptions": preempted.get(seq, 0),
                "ttft": None if first is None else first - arrival,
                "mean_itl": (last - first) / (count - 1) if count >= 2 else None}
        stored = {"num_output_tokens": n_out, "finish_step": step, "num_preemptions": n_pre,
                  "ttft": ttft, "mean_itl": itl}
        wrong = [f"{k} stored {stored[k]!r}, recomputed {want[k]!r}" for k in want
                 if not _same(stored[k], want[k])]
        if wrong:
            out.append(Problem(step if step is not None else -1, "metrics",
                               f"request {rid!r}: {'; '.join(wrong)}"))
            if len(out) >= max_problems:
                break
    return out


def _token_spans(reader, out: list[Problem], max_problems: int) -> dict[int, tuple[int, float, float]]:
    """Per request ``seq``: (tokens, first token's time, last token's time) of a schema-4 file, in
    one streamed pass over the batch blobs (numpy per range of steps, O(requests) arrays); a
    ``rows`` problem into ``out`` for each step whose blob does not hold
    ``num_scheduled_requests`` entries."""
    count, first, last = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    (top,), = reader.execute("SELECT max(step) FROM steps")
    for lo in range(0, (top if top is not None else -1) + 1, STEPS_PER_QUERY):
        seqs, times = [], []
        for (step, n, t), batch in reader.batches(lo, lo + STEPS_PER_QUERY,
                                                  ("step", "num_scheduled_requests", "token_time")):
            if len(batch.seq) != n and len(out) < max_problems:
                out.append(Problem(step, "rows", f"the batch blob holds {len(batch.seq)} entries, "
                                                 f"not num_scheduled_requests {n}"))
            sampled = batch.seq[batch.token_id >= 0]
            seqs.append(sampled)
            times.append(np.full(len(sampled), np.nan if t is None else t, np.float64))
        seq, time = np.concatenate(seqs or [np.zeros(0, np.int64)]), np.concatenate(times or [np.zeros(0)])
        odd = (seq < 0) | (seq >= 1 << 32)
        if odd.any():
            if len(out) < max_problems:
                out.append(Problem(lo, "rows", f"the batches of steps {lo}..{lo + STEPS_PER_QUERY - 1} name "
                                               f"request numbers outside 0..2^32: {name_list(seq[odd].tolist())}"))
            seq, time = seq[~odd], time[~odd]
        if len(seq) and seq.max() >= len(count):
            size = int(seq.max()) + 1
            count = np.concatenate([count, np.zeros(size - len(count), np.int64)])
            first = np.concatenate([first, np.full(size - len(first), np.inf)])
            last = np.concatenate([last, np.full(size - len(last), -np.inf)])
        count += np.bincount(seq, minlength=len(count))
        np.minimum.at(first, seq, time)
        np.maximum.at(last, seq, time)
    return {seq: (n, f, g) for seq, n, f, g in zip(np.flatnonzero(count).tolist(), count[count > 0].tolist(),
                                                     first[count > 0].tolist(), last[count > 0].tolist())}


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):   # text in a number column
        return False
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=REL_TOLERANCE, abs_tol=1e-12)
    return a == b


def incomplete_problems(reader) -> list[Problem]:
    """An ``incomplete`` problem at the last step when the run was cut short, naming what is
    lost; ``[]`` for a file its writer closed."""
    if reader.is_complete():
        return []
    last = reader.latest_step()
    salvaged = reader.run_info().salvaged
    if isinstance(salvaged, dict):
        return [Problem(last, "incomplete",
                        f"salvaged from a damaged recording ({salvaged.get('source')!s}, "
                        f"{salvaged.get('num_steps_in_source')!s} steps): it holds steps 0..{last}, "
                        "the later ones were lost to the damage")]
    lost = (f"; its -wal file ({reader.path.name}-wal) is missing, so the steps committed after "
            "the last checkpoint are not in this copy" if reader.missing_wal() else "")
    return [Problem(last, "incomplete",
                    f"the run was cut short: the writer never closed the file (a crash, a kill, a "
                    f"full disk, or a copy taken while it was written); it holds steps 0..{last}"
                    f"{lost}")]
