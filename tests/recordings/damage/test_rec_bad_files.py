"""Files that are not (whole, readable) recordings give a RecordingError naming file and problem."""
from __future__ import annotations
from tests.support.paths import FIXTURES

import random
import sqlite3

import pytest
import sqlite_utils


from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError
from recordings.metrics.run_metrics import summarize
from recordings.file.schema import latest_version

V1_FIXTURE = FIXTURES / "v1_small.sqlite"


def open_fails(path, match: str) -> RecordingError:
    with pytest.raises(RecordingError, match=match) as info:
        open_reader(path)
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
    data = recorded.path.read_bytes()
    for size in (60, len(data) // 2, len(data) - 100):
        path = tmp_path / f"cut{size}.sqlite"
        path.write_bytes(data[:size])
        open_fails(path, "truncated")


@pytest.mark.parametrize("keep", ["header", "most of page 1"])
def test_a_file_cut_inside_its_first_page_says_nothing_reads(keep, tmp_path, recorded, capsys):
    """Cut short before page 1 ends (the schema is on it), a recording has nothing to read or
    salvage: open, ``summary``, ``check`` and ``recover`` each say so once, naming the size and
    the page size, and exit 1 (they said 'no such table: runs' and printed it twice in check)."""
    from app.cli import main
    from tests.support.damaged_files import page_size

    data = recorded.path.read_bytes()
    size = 100 if keep == "header" else page_size(recorded.path) - 1
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[:size])
    expect = (f"{path}: truncated recording: its first page, which holds the list of tables, is cut "
              f"short, so no step, request or setting can be read ({size} bytes, the header expects "
              f"pages of {page_size(recorded.path)} bytes)")
    for damaged in (False, True):
        with pytest.raises(RecordingError) as info:
            open_reader(path, damaged=damaged)
        assert str(info.value) == expect
    for argv in (["summary", str(path)], ["check", str(path)], ["check", "--quick", str(path)],
                 ["recover", str(path), str(tmp_path / "saved.sqlite")]):
        assert main(argv) == 1
        captured = capsys.readouterr()
        assert captured.err == f"batchscope: {expect}\n" and captured.out == "", argv
    assert not (tmp_path / "saved.sqlite").exists() and path.read_bytes() == data[:size]


def test_an_unrelated_sqlite_database(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite_utils.Database(path)
    db["dogs"].insert({"name": "Cleo"})
    db.close()
    open_fails(path, "not a BatchScope recording")


def test_a_newer_schema_version(tmp_path, recorded):
    conn = sqlite3.connect(recorded.path)
    conn.execute(f"PRAGMA user_version = {latest_version() + 1}")
    conn.commit()
    conn.close()
    open_fails(recorded.path, f"schema version {latest_version() + 1} is newer")


def test_a_recording_without_its_run_row(tmp_path, recorded):
    conn = sqlite3.connect(recorded.path)
    conn.execute("DELETE FROM runs")
    conn.commit()
    conn.close()
    open_fails(recorded.path, "no run row")


def test_a_v1_file_that_is_not_a_recording_any_more(tmp_path):
    """The legacy path reports damage the same way (a v1 file with a dropped table)."""
    path = tmp_path / "v1.sqlite"
    path.write_bytes(V1_FIXTURE.read_bytes())
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE request_states")
    conn.commit()
    conn.close()
    open_fails(path, "corrupt or unreadable")


@pytest.mark.parametrize("which", ["v2", "v1"])
def test_damaged_bytes_never_leak_other_errors(tmp_path, recorded, which):
    """Scribbling over the file may fail at open or at any later call, always as a
    RecordingError naming the file (never a raw sqlite3 / JSON / npz / decoding error)."""
    data = (recorded.path if which == "v2" else V1_FIXTURE).read_bytes()
    num_steps = len(recorded.records) if which == "v2" else 33
    rng = random.Random(1)
    failures = 0
    for trial in range(80):     # 16 kB pages: more scribbles land in a page's unused room
        damaged = bytearray(data)
        start = rng.randrange(0, len(data) - 64)
        size = rng.choice([1, 16, 512, 4096])
        damaged[start:start + size] = rng.randbytes(size)
        path = tmp_path / f"damaged{trial}.sqlite"
        path.write_bytes(bytes(damaged))
        try:
            reader = open_reader(path)
            for k in range(-1, num_steps):
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


@pytest.mark.parametrize("which", ["v2", "v1"])
def test_a_closed_reader_says_so(recorded, which):
    reader = open_reader(recorded.path if which == "v2" else V1_FIXTURE)
    reader.close()
    reader.close()
    with pytest.raises(RecordingError, match="closed"):
        reader.latest_step()
    with pytest.raises(RecordingError, match="closed"):
        reader.state_at(3)
