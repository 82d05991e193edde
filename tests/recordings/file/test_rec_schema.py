"""Numbered migrations: applied in order, version stored, newer files refused, v1 never upgraded
in place."""
from __future__ import annotations
from tests.support.paths import FIXTURES

import json
import shutil

import pytest
import sqlite_utils


from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError
from recordings.file import opening, schema
from tests.support.canonical import as_recorded, record_data, state_data

TABLES = {"runs", "requests", "steps", "events", "block_events", "transitions", "keyframes"}
VIEWS = {"tokens", "step_requests"}      # schema 2 and 3 only
V1_FIXTURE = FIXTURES / "v1_small.sqlite"


def test_a_new_file_gets_every_table_the_version_and_the_application_id(tmp_path):
    db = sqlite_utils.Database(tmp_path / "new.sqlite")
    assert schema.migrate(db, "new.sqlite") == schema.latest_version() == 5
    assert set(db.table_names()) == TABLES
    assert set(db.view_names()) == set()     # schema 4 stores the batch arrays as blobs
    assert schema.schema_version(db) == schema.latest_version()
    assert db.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
    assert schema.migrate(db, "new.sqlite") == schema.latest_version()  # idempotent


def test_columns_carry_their_units(tmp_path):
    db = sqlite_utils.Database(tmp_path / "new.sqlite")
    schema.migrate(db, "new.sqlite")
    steps = db["steps"].columns_dict
    assert steps["start_ns"] is int and steps["clock"] is float and steps["token_time"] is float
    assert {"recorder_wait_ns", "preempted_json", "not_admitted_json", "kv_cache_usage",
            "num_new_tokens", "prefix_cache_queries", "prefix_cache_hits"} <= set(steps)
    assert steps["batch"] is bytes and "batch_seq_json" not in steps
    assert db["block_events"].columns_dict == {"step": int, "data": bytes}
    assert set(db["requests"].columns_dict) >= {
        "seq", "request_id", "arrival_step", "arrival_time", "prompt_token_ids", "prompt_text",
        "sampling_json", "status", "finish_reason", "num_output_tokens", "ttft", "mean_itl",
        "num_preemptions", "error"}
    indexed = {(t, tuple(i.columns)) for t in ("events", "transitions") for i in db[t].indexes}
    assert {("events", ("seq", "step")), ("transitions", ("seq", "step"))} <= indexed


def test_a_version_3_file_keeps_its_views_and_a_new_one_is_made_at_version_3_on_request(tmp_path):
    db = sqlite_utils.Database(tmp_path / "v3.sqlite")
    assert schema.migrate(db, "v3.sqlite", target=3) == 3
    assert set(db.view_names()) == VIEWS and "block_hashes_json" in db["block_events"].columns_dict
    assert schema.migrate(db, "v3.sqlite") == 5        # no steps yet: upgraded
    assert set(db.view_names()) == set()


def test_a_version_3_recording_is_not_upgraded_in_place(tmp_path):
    path = tmp_path / "v3.sqlite"
    shutil.copy(FIXTURES / "v3_swap.sqlite", path)
    before = path.read_bytes()
    with pytest.raises(RecordingError, match="not upgraded in place"):
        opening.upgrade_file(path)
    assert path.read_bytes() == before


def test_pending_migrations_run_in_order_and_old_files_are_upgraded(monkeypatch, recorded):
    applied = []
    now = schema.latest_version()
    nxt, after = now + 1, now + 2

    def v_next(db):
        applied.append(nxt)
        db["steps"].add_column("note", str)

    def v_after(db):
        applied.append(after)
        assert "note" in db["steps"].columns_dict  # the earlier one ran first
        db["runs"].add_column("host", str)

    path = recorded.path
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (nxt, v_next), (after, v_after)])
    with pytest.raises(RecordingError, match=f"schema version {now}, expected {after}"):
        open_reader(path)
    assert opening.upgrade_file(path) == after
    assert applied == [nxt, after]
    reader = open_reader(path)
    assert reader.execute("PRAGMA user_version") == [(after,)]
    assert reader.records(0, 10**6) == recorded.records
    assert reader.state_at(10**6) == recorded.final
    monkeypatch.undo()
    with pytest.raises(RecordingError, match=f"schema version {after} is newer .* supports"):
        open_reader(path)
    with pytest.raises(RecordingError, match="newer"):
        opening.upgrade_file(path)


def test_a_failed_migration_leaves_the_file_at_its_old_version(monkeypatch, recorded):
    def broken(db):
        db["steps"].add_column("note", str)
        raise RuntimeError("boom")

    now = schema.latest_version()
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (now + 1, broken)])
    with pytest.raises(RuntimeError, match="boom"):
        opening.upgrade_file(recorded.path)
    db = sqlite_utils.Database(recorded.path)
    assert schema.schema_version(db) == now and "note" not in db["steps"].columns_dict


def test_a_v1_recording_is_not_upgraded_in_place(tmp_path):
    path = tmp_path / "v1.sqlite"
    shutil.copy(V1_FIXTURE, path)
    before = path.read_bytes()
    with pytest.raises(RecordingError, match="version-1 recording with steps is not upgraded"):
        opening.upgrade_file(path)
    assert path.read_bytes() == before
    assert open_reader(path).latest_step() == 32  # still opens, read-only, through the v1 reader


def test_upgrade_refuses_files_that_are_not_recordings(tmp_path):
    other = tmp_path / "other.sqlite"
    sqlite_utils.Database(other)["dogs"].insert({"name": "Cleo"})
    with pytest.raises(RecordingError, match="not a BatchScope recording"):
        opening.upgrade_file(other)
    noise = tmp_path / "noise.bin"
    noise.write_bytes(b"x" * 5000)
    with pytest.raises(RecordingError, match="not an SQLite database"):
        opening.upgrade_file(noise)


def test_a_version_2_file_opens_as_it_is_without_the_version_3_columns(tmp_path):
    """Version 3 only added columns: a version-2 file (made here from the version-3 fixture by
    dropping them) opens without an upgrade; its steps read back with zero prefix-cache
    counters, no knob changes and the default waiting reason."""
    path = tmp_path / "v2.sqlite"
    shutil.copy(FIXTURES / "v3_swap.sqlite", path)
    expected = json.loads((FIXTURES / "v3_swap.json").read_text())
    db = sqlite_utils.Database(path)
    for table, column in (("steps", "prefix_cache_queries"), ("steps", "prefix_cache_hits"),
                          ("steps", "waiting_reason"), ("steps", "knobs_json"),
                          ("block_events", "block_hashes_json")):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    db.execute("PRAGMA user_version = 2")
    db.conn.commit()
    db.close()
    reader = open_reader(path)
    assert reader.execute("PRAGMA user_version") == [(2,)]
    records = reader.records(0, 10**6)
    want = [dict(r, prefix_cache_queries=0, prefix_cache_hits=0, knobs=[],
                 waiting_reason="behind_older") for r in expected["records"]]
    assert [record_data(r) for r in records] == want and records
    assert reader.step_batches(0, 10**6)["waiting_reason"] == ["behind_older"] * len(records)
    assert as_recorded(state_data(reader.state_at(10**6)), expected["states"][-1]) == expected["states"][-1]
