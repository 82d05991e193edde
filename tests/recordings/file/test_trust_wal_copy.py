"""A copy of a running (or crashed) recording made without its -wal file: it opens with the steps
up to its last checkpoint and says it is incomplete, or, before any checkpoint, says what is
missing (never "not a BatchScope recording"). Opening it creates no file next to it."""
from __future__ import annotations

import shutil
import sqlite3

import pytest

from app.commands.check import run_check
from tests.support.engine_driver import SMALL_SEED, run_engine
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError


def copy_while_running(path, tmp_path, at_step, checkpoint):
    """Record a run, and when ``at_step`` steps are committed (optionally checkpointed into the
    main file) copy the main file alone, as a user copying a crashed run's .sqlite would."""
    copy = tmp_path / "copy" / "only.sqlite"
    copy.parent.mkdir()

    def grab(run):
        if len(run.records) == at_step:
            run.writer.flush()
            if checkpoint:
                conn = sqlite3.connect(path)
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                conn.close()
            assert (path.parent / f"{path.name}-wal").stat().st_size > 0
            shutil.copy(path, copy)

    run = run_engine(path, SMALL_SEED, between_steps=grab,
                     writer_kwargs={"flush_interval_s": 600, "keyframe_interval": 8})
    return run, copy


def test_a_copy_after_a_checkpoint_opens_up_to_it_and_says_it_is_incomplete(tmp_path, capsys):
    run, copy = copy_while_running(tmp_path / "run.sqlite", tmp_path, 21, checkpoint=True)
    with open_reader(copy) as reader:
        assert reader.latest_step() == 20 and not reader.is_complete() and reader.missing_wal()
        assert reader.state_at(20) == run.states[20]
        assert reader.records(0, 21) == run.records[:21]
    assert run_check(str(copy)) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    assert "step 20: incomplete: the run was cut short" in lines[0]
    assert "only.sqlite-wal) is missing" in lines[0]
    assert sorted(p.name for p in copy.parent.iterdir()) == ["only.sqlite"]   # no -wal / -shm made


def test_a_copy_before_any_checkpoint_names_the_missing_wal_file(tmp_path):
    _, copy = copy_while_running(tmp_path / "run.sqlite", tmp_path, 21, checkpoint=False)
    with pytest.raises(RecordingError) as info:
        open_reader(copy)
    message = str(info.value)
    assert "only.sqlite-wal, which is missing" in message and "not a BatchScope" not in message
    assert sorted(p.name for p in copy.parent.iterdir()) == ["only.sqlite"]


def test_a_clean_recording_is_not_reported_missing_its_wal(tmp_path):
    path = tmp_path / "run.sqlite"
    run_engine(path, SMALL_SEED)
    with open_reader(path) as reader:
        assert reader.is_complete() and not reader.missing_wal()
