"""``batchscope check --quick``: the invariants on a sample of keyframe intervals (and the last),
the rest skipped and said so; a violation in a checked interval is found at its step."""
from __future__ import annotations

import io
import shutil
import sqlite3

import pytest

from app.commands.check import run_check
from recordings.check.sampled import QUICK_EVERY, sampled_check, sampled_intervals
from recordings.file.open_reader import open_reader
from tests.support.engine_driver import SMALL_SEED, run_engine


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("quick") / "run.sqlite"
    run_engine(path, seed=SMALL_SEED, num_requests=30, writer_kwargs={"keyframe_interval": 8})
    return path


def broken_at(recorded, tmp_path, step: int):
    bad = tmp_path / f"bad{step}.sqlite"
    shutil.copy(recorded, bad)
    with sqlite3.connect(bad) as db:          # one more free block than there are: G1 at that step
        db.execute("UPDATE steps SET num_free_blocks = num_free_blocks + 1 WHERE step = ?", (step,))
    return bad


def test_the_sample_is_the_first_interval_every_nth_and_the_last(recorded):
    with open_reader(recorded) as reader:
        latest = reader.latest_step()
        keyframes = [k for (k,) in reader.execute("SELECT step FROM keyframes WHERE step < ? ORDER BY step",
                                                  (latest,))]
    intervals = list(zip(keyframes, keyframes[1:] + [latest]))
    assert latest > 40 and len(intervals) > 4
    with open_reader(recorded) as reader:
        every_2nd = sampled_intervals(reader, every=2)
        assert every_2nd[:len(intervals[::2])] == intervals[::2] and every_2nd[-1] == intervals[-1]
        assert sampled_intervals(reader, every=32) == [intervals[0], intervals[-1]]
        with pytest.raises(ValueError, match=">= 1"):
            sampled_intervals(reader, every=0)


def test_quick_finds_a_violation_in_a_checked_interval_and_says_what_it_skipped(recorded, tmp_path):
    bad = broken_at(recorded, tmp_path, 5)
    out = io.StringIO()
    assert run_check(str(bad), quick=True, out=out) == 1
    lines = out.getvalue().splitlines()
    assert "quick: invariants (G1-G4, G6) checked on" in lines[0] and "skipped" in lines[0]
    assert f"steps: one keyframe interval in {QUICK_EVERY} and the last (0..7, " in lines[0]  # not '32th'
    assert any(f"{bad}: step 5: G1: " in line for line in lines), lines
    with open_reader(bad) as reader:
        problems, intervals = sampled_check(reader)
    assert [(p.step, p.invariant) for p in problems] == [(5, "G1")] and intervals[0][0] == -1


def test_quick_skips_a_violation_the_complete_check_finds(recorded, tmp_path):
    bad = broken_at(recorded, tmp_path, 20)           # in the 3rd keyframe interval: not in the sample
    out = io.StringIO()
    assert run_check(str(bad), quick=True, out=out) == 0
    text = out.getvalue()
    assert "quick: clean in what was checked" in text and "skipped" in text and "step 20" not in text
    out = io.StringIO()
    assert run_check(str(bad), out=out) == 1 and f"{bad}: step 20: G1: " in out.getvalue()
