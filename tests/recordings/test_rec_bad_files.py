"""Files that are not (whole, readable) recordings give a RecordingError naming file and problem."""
from __future__ import annotations

import random
import sqlite3

import pytest
import sqlite_utils

from recordings import Reader, RecordingError, summarize
from recordings.schema import latest_version


def open_fails(path, match: str) -> RecordingError:
    with pytest.raises(RecordingError, match=match) as info:
        Reader(path)
    assert str(path) in str(info.value)
    return info.value


def test_missing_and_empty_files(tmp_path):
    open_fails(tmp_path / "nothing.sqlite", "no such file")
    (tmp_path / "empty.sqlite").write_bytes(b"")
    open_fails(tmp_path / "empty.sqlite", "empty")
    open_fails(tmp_path, "not a file")


def test_random_bytes(tmp_path):
    path = tmp_path / "noise.sqlite"
    path.write_bytes(random.Random(0).randbytes(50_000))
    open_fails(path, "not an SQLite database")


def test_truncated_recording(tmp_path, recorded):
    data = recorded.read_bytes()
    for size in (60, len(data) // 2, len(data) - 100):
        path = tmp_path / f"cut{size}.sqlite"
        path.write_bytes(data[:size])
        open_fails(path, "truncated")


def test_an_unrelated_sqlite_database(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite_utils.Database(path)
    db["dogs"].insert({"name": "Cleo"})
    db.close()
    open_fails(path, "not a BatchScope recording")


def test_a_newer_schema_version(tmp_path, recorded):
    conn = sqlite3.connect(recorded)
    conn.execute(f"PRAGMA user_version = {latest_version() + 1}")
    conn.commit()
    conn.close()
    open_fails(recorded, f"schema version {latest_version() + 1} is newer")


def test_a_recording_without_its_run_row(tmp_path, recorded):
    conn = sqlite3.connect(recorded)
    conn.execute("DELETE FROM runs")
    conn.commit()
    conn.close()
    open_fails(recorded, "no run row")


def test_damaged_bytes_never_leak_other_errors(tmp_path, recorded, small_run):
    """Scribbling over the file may fail at open or at any later call, always as a
    RecordingError naming the file (never a raw sqlite3 / JSON / decoding error)."""
    data = recorded.read_bytes()
    rng = random.Random(1)
    failures = 0
    for trial in range(40):
        damaged = bytearray(data)
        start = rng.randrange(0, len(data) - 64)
        size = rng.choice([1, 16, 512, 4096])
        damaged[start:start + size] = rng.randbytes(size)
        path = tmp_path / f"damaged{trial}.sqlite"
        path.write_bytes(bytes(damaged))
        try:
            reader = Reader(path)
            for k in range(-1, len(small_run.records)):
                reader.state_at(k)
            reader.records(0, 10**6)
            for rid in reader.request_ids():
                reader.request_info(rid)
                reader.request_text(rid, 10**6)
                reader.request_timeline(rid)
            summarize(reader)
        except RecordingError as exc:
            assert str(path) in str(exc)
            failures += 1
    assert failures > 10


def test_a_closed_reader_says_so(recorded):
    reader = Reader(recorded)
    reader.close()
    reader.close()
    with pytest.raises(RecordingError, match="closed"):
        reader.latest_step()
