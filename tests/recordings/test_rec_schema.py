"""Numbered migrations: applied in order, version stored, newer files refused."""
from __future__ import annotations

import pytest
import sqlite_utils

from recordings import Reader, RecordingError
from recordings import schema

TABLES = {"runs", "requests", "steps", "step_requests", "events", "tokens", "request_states",
          "keyframes"}


def test_a_new_file_gets_every_table_the_version_and_the_application_id(tmp_path):
    db = sqlite_utils.Database(tmp_path / "new.sqlite")
    assert schema.migrate(db, "new.sqlite") == schema.latest_version()
    assert TABLES <= set(db.table_names())
    assert schema.schema_version(db) == schema.latest_version()
    assert db.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
    assert schema.migrate(db, "new.sqlite") == schema.latest_version()  # idempotent


def test_columns_carry_their_units(tmp_path):
    db = sqlite_utils.Database(tmp_path / "new.sqlite")
    schema.migrate(db, "new.sqlite")
    steps = db["steps"].columns_dict
    assert steps["start_ns"] is int and steps["clock"] is float
    assert {"preempted_ids_json", "not_admitted_json", "kv_cache_usage"} <= set(steps)
    assert set(db["requests"].columns_dict) >= {
        "request_id", "arrival_step", "arrival_time", "prompt_token_ids_json", "prompt_text",
        "sampling_json", "status", "finish_reason", "num_output_tokens", "ttft", "mean_itl",
        "num_preemptions", "error"}
    indexed = {tuple(i.columns) for t in ("events", "tokens", "request_states", "step_requests")
               for i in db[t].indexes}
    assert ("request_id", "step") in indexed


def test_pending_migrations_run_in_order_and_old_files_are_upgraded(tmp_path, monkeypatch,
                                                                      recorded, small_run):
    applied = []

    def v2(db):
        applied.append(2)
        db["steps"].add_column("note", str)

    def v3(db):
        applied.append(3)
        assert "note" in db["steps"].columns_dict  # v2 ran first
        db["runs"].add_column("host", str)

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (2, v2), (3, v3)])
    with pytest.raises(RecordingError, match="older"):
        Reader(recorded)
    assert schema.upgrade_file(recorded) == 3
    assert applied == [2, 3]
    reader = Reader(recorded)
    assert reader.execute("PRAGMA user_version") == [(3,)]
    assert reader.records(0, 10**6) == small_run.records
    monkeypatch.undo()
    with pytest.raises(RecordingError, match="schema version 3 is newer .* supports"):
        Reader(recorded)
    with pytest.raises(RecordingError, match="newer"):
        schema.upgrade_file(recorded)


def test_a_failed_migration_leaves_the_file_at_its_old_version(tmp_path, monkeypatch, recorded):
    def broken(db):
        db["steps"].add_column("note", str)
        raise RuntimeError("boom")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (2, broken)])
    with pytest.raises(RuntimeError, match="boom"):
        schema.upgrade_file(recorded)
    db = sqlite_utils.Database(recorded)
    assert schema.schema_version(db) == 1 and "note" not in db["steps"].columns_dict


def test_upgrade_refuses_files_that_are_not_recordings(tmp_path):
    other = tmp_path / "other.sqlite"
    sqlite_utils.Database(other)["dogs"].insert({"name": "Cleo"})
    with pytest.raises(RecordingError, match="not a BatchScope recording"):
        schema.upgrade_file(other)
    noise = tmp_path / "noise.bin"
    noise.write_bytes(b"x" * 5000)
    with pytest.raises(RecordingError, match="not an SQLite database"):
        schema.upgrade_file(noise)
