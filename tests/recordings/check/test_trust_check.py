"""``batchscope check`` beyond the invariants: SQLite integrity, schema, missing rows, metrics
recomputed against the stored outcomes; each problem one line with its step, exit 0 only clean."""
from __future__ import annotations

import sqlite3

import pytest

from app.commands.check import run_check
from tests.support.hostile_files import edit_file
from recordings.file.open_reader import open_reader
from recordings.check.file_check import check_file


@pytest.fixture
def clean(recorded):
    return recorded.path


@pytest.fixture
def copy(recorded):
    return recorded.path            # a fresh recording of its own per test


def edit(path, *statements):
    edit_file(path, *statements)


def problems(path):
    with open_reader(path) as reader:
        return check_file(reader)


def test_a_clean_recording_has_no_problem_and_exits_0(clean, capsys):
    assert problems(clean) == []
    assert run_check(str(clean)) == 0
    assert "clean" in capsys.readouterr().out


def test_a_missing_step_is_named(copy):
    with open_reader(copy) as reader:
        (k,), = reader.execute("SELECT min(step) FROM transitions WHERE step > 0")
    edit(copy, f"DELETE FROM steps WHERE step = {k}")
    found = [(p.step, p.invariant, p.message) for p in problems(copy)]
    assert (k + 1, "rows", f"step {k} is missing") in found
    assert (k, "rows", "transitions rows of a step that has no steps row") in found


def test_a_stored_outcome_that_differs_from_the_rows_is_named(copy):
    with open_reader(copy) as reader:
        (rid, step, ttft), = reader.execute(
            "SELECT request_id, finish_step, ttft FROM requests WHERE ttft IS NOT NULL "
            "AND status = 'FINISHED_LENGTH' ORDER BY seq LIMIT 1")
    edit(copy, f"UPDATE requests SET ttft = ttft + 2, num_output_tokens = num_output_tokens + 1 "
               f"WHERE request_id = '{rid}'")
    found = problems(copy)
    assert [(p.step, p.invariant) for p in found] == [(step, "metrics")]
    assert f"request {rid!r}" in found[0].message
    assert f"ttft stored {ttft + 2!r}, recomputed {ttft!r}" in found[0].message
    assert "num_output_tokens stored" in found[0].message


def test_a_broken_index_fails_the_integrity_check(copy, capsys):
    """The index on requests.arrival_step is declared over another column: its entries no
    longer match the table (what a torn write or bad sector leaves)."""
    conn = sqlite3.connect(copy)
    conn.execute("PRAGMA writable_schema = ON")
    changed = conn.execute("UPDATE sqlite_master SET sql = replace(sql, '(\"arrival_step\")', "
                           "'(\"max_tokens\")') WHERE name = 'idx_requests_arrival_step'").rowcount
    assert changed == 1
    conn.commit()
    conn.close()
    found = problems(copy)
    assert found and all(p.invariant == "integrity" and p.step == -1 for p in found), found
    assert run_check(str(copy)) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(found) and all(": step -1: integrity: " in line for line in out)


def test_a_dropped_column_and_a_foreign_table_are_schema_problems(copy):
    edit(copy, "ALTER TABLE steps DROP COLUMN knobs_json", "CREATE TABLE extra (x)")
    messages = [p.message for p in problems(copy) if p.invariant == "schema"]
    assert "table steps lacks column(s) knobs_json" in messages
    assert any("unknown table 'extra'" in m for m in messages)
