"""Fuzzing the recording reader (hypothesis): a small real recording, truncated, bit-flipped, or
with random values (NULL, huge and negative numbers, text, blobs, bad JSON) written into random
cells. Every call a user's session makes (open, seek, records, batches, request info and text,
summary, check) either works or raises ``RecordingError`` naming the file: nothing else escapes."""
from __future__ import annotations

import shutil
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.engine_driver import SMALL_SEED, run_engine
from tests.support.hostile_files import read_everything
from recordings.errors import RecordingError

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CELLS = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True), st.text(max_size=20),
                  st.binary(max_size=20), st.sampled_from(["[", "[1,", "{}", "[[1]]", "[-1]", "[1e999]", "null",
                                                            "[\"a\"]", "[9223372036854775807]", "[" * 5000]))


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "clean.sqlite"
    run_engine(path, SMALL_SEED, writer_kwargs={"keyframe_interval": 8})
    return path


@pytest.fixture(scope="module")
def cells(clean):
    """(table, column, key column, key values) of every column of every table."""
    conn = sqlite3.connect(clean)
    out = []
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        key = next((c[1] for c in info if c[5] == 1), info[0][1])
        keys = [k for (k,) in conn.execute(f"SELECT {key} FROM {table}")]
        out += [(table, c[1], key, keys) for c in info if c[1] != key and keys]
    conn.close()
    return out


def use_everything(path):
    """What a session does with a file; RecordingError is the only failure allowed."""
    try:
        read_everything(path)
    except RecordingError as e:
        assert str(path) in str(e)


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_random_values_in_random_cells(clean, cells, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cells") / "fuzzed.sqlite"
    shutil.copy(clean, path)
    conn = sqlite3.connect(path)
    for _ in range(data.draw(st.integers(1, 4))):
        table, column, key, keys = data.draw(st.sampled_from(cells))
        try:
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?",
                         (data.draw(CELLS), data.draw(st.sampled_from(keys))))
        except sqlite3.IntegrityError:      # a NOT NULL or key column: that cell stays as it was
            pass
    conn.commit()
    conn.close()
    use_everything(path)


@SETTINGS
@given(data=st.data())
def test_truncated_and_bit_flipped_files(clean, tmp_path_factory, data):
    raw = bytearray(clean.read_bytes())
    for _ in range(data.draw(st.integers(0, 8))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    path = tmp_path_factory.mktemp("bits") / "fuzzed.sqlite"
    path.write_bytes(bytes(raw))
    use_everything(path)


@pytest.mark.parametrize("column", ["prefix_cache_queries", "prefix_cache_hits", "num_scheduled_tokens"])
def test_an_infinite_counter_is_a_recording_error(clean, tmp_path, column):
    """Found by the fuzz test above: ``int(inf)`` in the summary escaped as an OverflowError."""
    path = tmp_path / "inf.sqlite"
    shutil.copy(clean, path)
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE steps SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM steps)", (float("inf"),))
    conn.commit()
    conn.close()
    use_everything(path)
