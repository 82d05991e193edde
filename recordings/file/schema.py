"""The recording's SQLite schema, created and upgraded by numbered migrations.

A recording is marked by ``PRAGMA application_id = APPLICATION_ID`` and carries its schema version
in ``PRAGMA user_version``. :func:`migrate` applies the pending migrations in order, each in its
own transaction together with the version bump, so a file is always at one whole version.

Units are in the column names: ``*_ns`` are integer nanoseconds since the run started, ``clock``,
``token_time`` and ``arrival_time``/``ttft``/``mean_itl`` are on the engine clock (steps under the
virtual clock, seconds under the wall or sim clock), ``*_json`` columns hold JSON text.

Version 2 stores what changed, not what is: see docs/recording.md for every table and view.
Version 3 only adds columns (prefix-cache counters, block hashes, the waiting reason).
Version 4 stores each step's batch, tokens and block events as compact binary blobs instead of
JSON arrays. Version 5 (this code writes it) stores most keyframes' block maps as changes since
the keyframe before. The reader opens version-2, -3 and -4 files as they are
(``READABLE_OLD_VERSIONS``; on a version-2 file the columns version 3 added read as their
defaults). Version-1 files are never upgraded in place (their per-step
rows are a different model); :class:`recordings.file.reader.Reader` opens them read-only through
``recordings.file.v1_reader``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import sqlite_utils

from recordings.errors import RecordingError

APPLICATION_ID = 0x42536370  # "BScp"


def _v1_tables(db: sqlite_utils.Database) -> None:
    """Version 1: runs, requests, steps, per-step rows and keyframes, with their indexes."""
    db["runs"].create({
        "run_id": int, "model": str, "dtype": str, "device": str, "seed": int, "clock": str,
        "started_at": str, "closed_at": str, "keyframe_interval": int, "run_info_json": str,
    }, pk="run_id")
    db["requests"].create({
        "request_id": str, "arrival_step": int, "arrival_time": float,
        "num_prompt_tokens": int, "max_tokens": int, "prompt_token_ids_json": str,
        "prompt_text": str, "sampling_json": str,
        # outcome, filled in when the request finishes
        "status": str, "finish_reason": str, "finish_step": int, "num_output_tokens": int,
        "ttft": float, "mean_itl": float, "num_preemptions": int, "error": str,
    }, pk="request_id")
    db["steps"].create({
        "step": int, "start_ns": int, "end_ns": int, "clock": float,
        "num_scheduled_tokens": int, "num_scheduled_requests": int,
        "num_waiting": int, "num_running": int, "num_paused": int, "num_finished": int,
        "num_free_blocks": int, "num_total_blocks": int, "kv_cache_usage": float,
        "num_preemptions": int, "schedule_ns": int, "forward_ns": int, "update_ns": int,
        "error": str, "preempted_ids_json": str, "not_admitted_json": str,
    }, pk="step")
    # seq = position inside the step (batch order, event order, token order, change order)
    db["step_requests"].create({
        "step": int, "seq": int, "request_id": str, "slot": int, "num_tokens": int,
        "num_computed_tokens": int, "is_prefill": int, "new_block_ids_json": str,
        "block_ids_json": str,
    }, pk=("step", "seq"))
    db["events"].create({
        "step": int, "seq": int, "request_id": str, "kind": str, "detail": str,
    }, pk=("step", "seq"))
    db["tokens"].create({
        "step": int, "seq": int, "request_id": str, "idx": int, "token_id": int, "text": str,
    }, pk=("step", "seq"))
    db["request_states"].create({
        "step": int, "seq": int, "request_id": str, "view_json": str,
    }, pk=("step", "seq"))
    db["keyframes"].create({"step": int, "state_json": str}, pk="step")
    for table in ("step_requests", "events", "tokens", "request_states"):
        db[table].create_index(["request_id", "step"])
    db["events"].create_index(["kind"])


_V1_STEP_TABLES = ("steps", "step_requests", "events", "tokens", "request_states", "keyframes",
                   "requests")


# The number of tokens of batch entry b.key of step s (see the views in _v2_tables).
_NUM_TOKENS = """coalesce(json_extract(s.batch_num_tokens_json, '$[' || b.key || ']'),
                        (SELECT json_extract(p.value, '$[1]') FROM json_each(s.batch_prefill_json) p
                         WHERE json_extract(p.value, '$[0]') = b.key), 1)"""


# The views of schema versions 2 and 3 (name -> SELECT). The reader makes its own TEMP copies of
# them (``recordings.file.opening``): a file's own view definitions are never run, and SQLite's
# ``trusted_schema = OFF`` refuses the JSON functions in views stored in a file.
VIEWS = {
    "step_requests": f"""
        SELECT s.step AS step, b.key AS ord, r.request_id AS request_id, r.seq AS seq,
               json_extract(s.batch_slot_json, '$[' || b.key || ']') AS slot,
               {_NUM_TOKENS} AS num_tokens,
               json_extract(s.batch_num_computed_json, '$[' || b.key || ']') AS num_computed_tokens,
               EXISTS (SELECT 1 FROM json_each(s.batch_prefill_json) p
                       WHERE json_extract(p.value, '$[0]') = b.key) AS is_prefill
        FROM steps s, json_each(s.batch_seq_json) b JOIN requests r ON r.seq = b.value""",
    "tokens": f"""
        SELECT s.step AS step, b.key AS ord, r.request_id AS request_id, r.seq AS seq,
               coalesce(json_extract(s.token_index_json, '$[' || b.key || ']'),
                        json_extract(s.batch_num_computed_json, '$[' || b.key || ']')
                        + {_NUM_TOKENS} - r.num_prompt_tokens) AS idx,
               json_extract(s.token_id_json, '$[' || b.key || ']') AS token_id,
               coalesce(json_extract(s.token_text_json, '$[' || b.key || ']'), '') AS text,
               s.token_time AS token_time
        FROM steps s, json_each(s.batch_seq_json) b JOIN requests r ON r.seq = b.value
        WHERE json_extract(s.token_id_json, '$[' || b.key || ']') >= 0""",
}


def _v2_tables(db: sqlite_utils.Database) -> None:
    """Version 2: requests keyed by arrival number, compact steps (batch and tokens as aligned
    JSON arrays), events, block events, transitions, npz keyframes, and SQL views ``tokens`` and
    ``step_requests`` that expand the arrays. Only a version-1 file without steps is upgraded."""
    if db["steps"].exists() and db.execute("SELECT count(*) FROM steps").fetchone()[0]:
        raise RecordingError("a version-1 recording with steps is not upgraded in place; "
                             "it opens read-only")
    for table in _V1_STEP_TABLES:
        db[table].drop(ignore=True)
    db["requests"].create({
        "seq": int, "request_id": str, "arrival_step": int, "arrival_time": float,
        "num_prompt_tokens": int, "max_tokens": int, "prompt_token_ids": bytes,
        "prompt_text": str, "sampling_json": str,
        # outcome, filled in when the request finishes
        "status": str, "finish_reason": str, "finish_step": int, "num_output_tokens": int,
        "ttft": float, "mean_itl": float, "num_preemptions": int, "error": str,
    }, pk="seq")
    db["requests"].create_index(["request_id"], unique=True)
    # covering index: the reader maps arrival numbers to ids and static facts (keyframes leave
    # them out) without touching the prompt blobs
    db["requests"].create_index(["seq", "request_id", "num_prompt_tokens", "arrival_step",
                                 "arrival_time", "max_tokens"], index_name="requests_static")
    db["requests"].create_index(["arrival_step"])
    db["steps"].create({
        "step": int, "start_ns": int, "end_ns": int, "clock": float, "token_time": float,
        "num_scheduled_tokens": int, "num_scheduled_requests": int, "num_new_tokens": int,
        "num_waiting": int, "num_running": int, "num_paused": int, "num_finished": int,
        "num_free_blocks": int, "num_total_blocks": int, "kv_cache_usage": float,
        "num_preemptions": int, "schedule_ns": int, "forward_ns": int, "update_ns": int,
        "recorder_wait_ns": int, "error": str,
        "batch_seq_json": str, "batch_slot_json": str, "batch_num_tokens_json": str,
        "batch_num_computed_json": str, "batch_prefill_json": str, "token_index_json": str,
        "token_id_json": str, "token_text_json": str, "preempted_json": str,
        "not_admitted_json": str,
    }, pk="step")
    # Per-step child rows keyed by (step, ord): WITHOUT ROWID, so the key is the table (no
    # second copy of it in an index).
    for table, columns in (
            ("events", "seq INTEGER, kind TEXT, detail TEXT"),
            ("block_events", "kind TEXT, seq INTEGER, block_ids_json TEXT"),
            ("transitions", "seq INTEGER, status TEXT, slot INTEGER, num_computed_tokens INTEGER, "
                            "num_preemptions INTEGER, error TEXT")):
        db.execute(f"CREATE TABLE [{table}] (step INTEGER, ord INTEGER, {columns}, "
                   "PRIMARY KEY (step, ord)) WITHOUT ROWID")
    db["keyframes"].create({"step": int, "state_npz": bytes, "finished_json": str}, pk="step")
    for table in ("events", "block_events", "transitions"):
        db[table].create_index(["seq", "step"])
    db["events"].create_index(["kind"])
    # One row per scheduled request per step, and per generated token: plain SQL over the arrays.
    # A NULL batch_num_tokens_json means 1 token for every entry not in batch_prefill_json
    # ([[index, num_tokens], ...]); a NULL token_index_json means each token's index follows
    # from the batch (num_computed_tokens + num_tokens - the request's num_prompt_tokens).
    for name, select in VIEWS.items():
        db.execute(f"CREATE VIEW {name} AS{select}")


def _v3_columns(db: sqlite_utils.Database) -> None:
    """Version 3: scheduler depth. Prefix caching: ``steps.prefix_cache_queries`` /
    ``prefix_cache_hits`` (tokens looked up and found cached by the step's admissions) and
    ``block_events.block_hashes_json`` (the prefix hashes of a ``cached`` event's blocks, aligned
    with ``block_ids_json``; NULL for other kinds). Policies: ``steps.waiting_reason``, why every
    waiting request not named in ``not_admitted_json`` waited (NULL = ``behind_older``;
    ``static_batch`` while a static batch runs); ``steps.knobs_json``, live knob changes made
    before the step (``[[name, value], ...]``, NULL = none; a block event of the pool's own,
    such as ``reserved``, has ``seq`` -1). Only adds columns: a version-2 file still opens
    (read-only) as it is."""
    for column in ("prefix_cache_queries", "prefix_cache_hits"):
        db.execute(f"ALTER TABLE steps ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE steps ADD COLUMN waiting_reason TEXT")
    db.execute("ALTER TABLE steps ADD COLUMN knobs_json TEXT")
    db.execute("ALTER TABLE block_events ADD COLUMN block_hashes_json TEXT")


def _v4_compact(db: sqlite_utils.Database) -> None:
    """Version 4: compact steps. A step's batch and tokens are one binary ``steps.batch`` blob and
    its block events one ``block_events.data`` blob (:mod:`recordings.file.compact`, coded as
    differences and deflated: docs/recording.md has the layout); ``token_text_json`` lists the
    new tokens' text in token order; empty ``preempted_json`` / ``not_admitted_json`` are NULL;
    ``num_prefill_tokens`` (the tokens of the step's prefill chunks) keeps the prefill/decode
    split a plain SQL sum.
    The ``tokens`` and ``step_requests`` views, which expanded the JSON arrays, are gone
    (``recordings.file.reader.Reader.step_batches`` gives the same columns). Only a version-3
    file without steps is upgraded; older files open read-only as they are."""
    if db.execute("SELECT count(*) FROM steps").fetchone()[0]:
        raise RecordingError("a recording with steps is not upgraded in place; it opens read-only")
    for name in VIEWS:
        db.execute(f"DROP VIEW IF EXISTS {name}")
    db["steps"].drop()
    db["block_events"].drop()
    db["steps"].create({
        "step": int, "start_ns": int, "end_ns": int, "clock": float, "token_time": float,
        "num_scheduled_tokens": int, "num_scheduled_requests": int, "num_new_tokens": int,
        "num_waiting": int, "num_running": int, "num_paused": int, "num_finished": int,
        "num_free_blocks": int, "num_total_blocks": int, "kv_cache_usage": float,
        "num_preemptions": int, "schedule_ns": int, "forward_ns": int, "update_ns": int,
        "recorder_wait_ns": int, "error": str, "num_prefill_tokens": int, "batch": bytes,
        "token_text_json": str, "preempted_json": str, "not_admitted_json": str,
        # in version 3's order (CSV exports list the columns as the table has them)
        "prefix_cache_queries": int, "prefix_cache_hits": int, "waiting_reason": str, "knobs_json": str,
    }, pk="step", not_null={"prefix_cache_queries", "prefix_cache_hits"},
        defaults={"prefix_cache_queries": 0, "prefix_cache_hits": 0})
    db.execute("CREATE TABLE block_events (step INTEGER PRIMARY KEY, data BLOB NOT NULL)")


def _v5_keyframe_maps(db: sqlite_utils.Database) -> None:
    """Version 5: no table changes. A keyframe may store its block map as the blocks changed
    since the keyframe before it (``map_base``, ``map_changed``, ``map_owner``, ``map_pos`` in
    ``keyframes.state_npz`` instead of ``block_owner`` / ``block_pos``; docs/recording.md), which
    a schema-4 reader would not decode, and new files have 16 kB pages. Version-4 files open as
    they are (every keyframe of theirs holds its whole map)."""


# (version, migration); versions are 1, 2, 3 ... in order. Never edit a released migration:
# append a new one.
MIGRATIONS: list[tuple[int, Callable[[sqlite_utils.Database], None]]] = [
    (1, _v1_tables),
    (2, _v2_tables),
    (3, _v3_columns),
    (4, _v4_compact),
    (5, _v5_keyframe_maps),
]
READABLE_OLD_VERSIONS = (2, 3, 4)   # the previous schemas the reader still opens as they are (no upgrade)


def prefill_tokens_sql(version: int) -> str:
    """The SQL expression over a ``steps`` row of a schema-``version`` file (2 or later) for the
    tokens of the step's prefill chunks: the column ``num_prefill_tokens`` (schema 4), else a
    sum over ``batch_prefill_json`` (schema 2, 3: ``[[batch index, tokens], ...]``)."""
    if version >= 4:
        return "num_prefill_tokens"
    return ("(SELECT coalesce(sum(json_extract(p.value, '$[1]')), 0) "
            "FROM json_each(steps.batch_prefill_json) p)")


def latest_version() -> int:
    """The schema version this code writes (the last migration's number)."""
    return MIGRATIONS[-1][0]


def schema_version(db: sqlite_utils.Database) -> int:
    """The file's schema version (``PRAGMA user_version``; 0 for a new, empty file)."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def check_version(version: int, path: str | Path) -> None:
    """Raise :class:`RecordingError` if ``version`` is newer than this code understands."""
    if version > latest_version():
        raise RecordingError(
            f"{path}: recording schema version {version} is newer than this BatchScope "
            f"supports (version {latest_version()}); upgrade BatchScope to open it")


def migrate(db: sqlite_utils.Database, path: str | Path, target: int | None = None) -> int:
    """Apply the pending migrations up to ``target`` (default: the latest), in order.

    A new file (version 0) also gets the BatchScope application id. Returns the version after.
    Raises :class:`RecordingError` for a file of another application or of a newer version.
    """
    version = schema_version(db)
    check_version(version, path)
    app_id = db.execute("PRAGMA application_id").fetchone()[0]
    if version and app_id != APPLICATION_ID:
        raise RecordingError(f"{path}: not a BatchScope recording (application id {app_id:#x})")
    if version == 0 and db.table_names():
        raise RecordingError(f"{path}: an SQLite database that is not a BatchScope recording")
    target = latest_version() if target is None else target
    for number, step in MIGRATIONS:
        if version < number <= target:
            with db.atomic():
                step(db)
                db.execute(f"PRAGMA user_version = {int(number)}")
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            version = number
    return version
