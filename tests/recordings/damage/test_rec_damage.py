"""Damaged recordings lose nothing that still reads: ``recordings.damage.report`` finds exactly the
steps ``state_at`` replays (checked step by step against the intact file), and
``recordings.damage.salvage`` copies them into a valid recording that replays the same states."""
from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from tests.support.damaged_files import (damage_base_run, middle_leaf, overwrite_page, prefix_end, replayable_steps, root_page,
                           steps_of, truncated)
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError
from recordings.damage.report import _without, bad_ranges, find_damage, read_rows
from recordings.check.file_check import check_file
from recordings.damage.salvage import salvage


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A closed recording of ~300 steps of the real engine (fake runner) over ~110 pages."""
    return damage_base_run(tmp_path_factory.mktemp("orig") / "run.sqlite")


def test_bad_ranges_finds_each_failing_number_by_halving():
    bad = {5, 6, 7, 40, 99}
    calls = []

    def probe(a, b):
        calls.append((a, b))
        return not any(a <= x < b for x in bad)
    assert bad_ranges(probe, 0, 100, chunk=32) == [(5, 7), (40, 40), (99, 99)]
    assert len(calls) < 100                       # not one probe per number
    assert _without([(0, 10), (20, 30)], [(3, 4), (10, 21), (30, 30)]) == [(0, 2), (5, 9), (22, 29)]


def test_rows_that_break_the_query_or_the_schema_do_not_read():
    """Past a truncated file's end SQLite returned rows of key 0 with NULL in a NOT NULL column
    amid a range scan (a 20 MB recording cut to 90%): they count as unreadable, not copied."""
    class Reader:
        def __init__(self, rows):
            self.rows = rows

        def execute(self, sql, params=()):
            if sql.startswith("PRAGMA table_info"):
                return [(0, "step", "INTEGER", 0, None, 1), (1, "data", "BLOB", 1, None, 0)]
            return self.rows
    assert read_rows(Reader([(7, b"x"), (8, b"y")]), "block_events", "step", 7, 9) == \
        [{"step": 7, "data": b"x"}, {"step": 8, "data": b"y"}]
    assert read_rows(Reader([(7, b"x"), (0, None)]), "block_events", "step", 7, 9) is None
    assert read_rows(Reader([(7, b"x"), (12, b"z")]), "block_events", "step", 7, 9) is None


def test_an_intact_file_has_no_damage(original):
    report = find_damage(original)
    assert not report.is_damaged and report.damaged == []
    last = open_reader(original).latest_step()
    assert report.readable == [(0, last)] and report.last_good_step == last == report.last_saved_step


@pytest.mark.slow
@pytest.mark.parametrize("table", ["steps", "block_events", "keyframes"])
def test_a_damaged_page_reports_exactly_the_steps_that_replay(original, tmp_path, table):
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, table))
    report = find_damage(damaged)
    ref = open_reader(original)
    assert report.is_damaged and report.last_step == ref.latest_step()
    assert any(table in line for line in report.damaged), report.damaged
    truth = replayable_steps(damaged, ref)
    assert truth != set(range(ref.latest_step() + 1))     # the damage costs steps
    assert steps_of(report.readable) == truth
    assert 0 <= report.last_good_step < report.last_step
    lines = report.lines()
    assert lines[0].startswith("page damage in table") and "readable" in "\n".join(lines)
    assert report.suggestion().endswith(f"batchscope recover {damaged} {tmp_path / 'bad.salvaged.sqlite'}")


@pytest.mark.slow
@pytest.mark.parametrize("table", ["steps", "events"])
def test_salvage_keeps_every_readable_step_and_round_trips(original, tmp_path, table):
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, table))
    report = find_damage(damaged)
    phases = []
    result = salvage(damaged, tmp_path / "out.sqlite", report=report,
                     on_progress=lambda phase, done, total: phases.append(phase))
    assert {"copy", "verify"} <= set(phases)
    k = result.last_step       # the copy can keep more: it reads rows one by one, not as a replay
    ref, out = open_reader(original), open_reader(result.path)
    assert prefix_end(replayable_steps(damaged, ref)) == report.last_good_step <= k < report.last_step
    assert k == report.last_saved_step          # what check said recover would keep
    assert result.num_steps == report.last_step + 1
    assert out.latest_step() == k
    for step in range(-1, k + 1):
        assert out.state_at(step) == ref.state_at(step), step
    assert out.run_info().salvaged["last_step"] == k and not out.is_complete()
    problems = check_file(out)
    assert [p.invariant for p in problems] == ["incomplete"] and "salvaged" in problems[0].message
    assert any(line.startswith(f"dropped steps {k + 1}..") for line in result.lines())
    arrived = {rid for (rid,) in ref.execute("SELECT request_id FROM requests WHERE arrival_step <= ?", (k,))}
    assert set(out.request_ids()) == arrived
    assert not (tmp_path / "out.sqlite.partial").exists()
    with pytest.raises(RecordingError, match="already exists"):
        salvage(damaged, result.path)


def test_lost_keyframes_are_replayed_and_stored_again(original, tmp_path):
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, "keyframes"))
    result = salvage(damaged, tmp_path / "out.sqlite")
    ref, out = open_reader(original), open_reader(result.path)
    steps = [k for (k,) in out.execute("SELECT step FROM keyframes ORDER BY step")]
    assert max(b - a for a, b in zip(steps, steps[1:])) <= 16       # the run's keyframe_interval
    assert result.rederived_keyframes > 0 and "re-derived" in " ".join(result.lines())
    for k in range(0, result.last_step + 1, 5):
        assert out.state_at(k) == ref.state_at(k)


def test_a_keyframe_whose_bytes_changed_is_found_by_decoding_and_replayed(original, tmp_path):
    """Bytes changed inside a row (SQLite's pages intact): only decoding finds it."""
    damaged = tmp_path / "bad.sqlite"
    damaged.write_bytes(original.read_bytes())
    with sqlite3.connect(damaged) as db:
        db.execute("UPDATE keyframes SET state_npz = zeroblob(300) WHERE step = 47")
    assert find_damage(damaged, decode=False).bad_keyframes == []
    report = find_damage(damaged)
    assert report.bad_keyframes == [47] and "keyframes that do not decode: at steps 47" in report.lines()
    assert report.readable[0] == (0, 46) and report.readable[1][0] == 63     # the next keyframe
    result = salvage(damaged, tmp_path / "out.sqlite")
    ref, out = open_reader(original), open_reader(result.path)
    assert out.latest_step() == ref.latest_step() and result.rederived_keyframes == 1
    assert out.keyframe_state(47) == ref.state_at(47)


def test_a_damaged_index_costs_nothing_after_salvage(original, tmp_path):
    """An index is rebuilt: every step survives though the damaged file's reader fails there."""
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", root_page(original, "requests_static"))
    report = find_damage(damaged)
    assert any(line.startswith("index requests_static of table requests") for line in report.damaged)
    result = salvage(damaged, tmp_path / "out.sqlite", report=report)
    ref, out = open_reader(original), open_reader(result.path)
    assert out.latest_step() == ref.latest_step() and out.is_complete()
    for step in range(0, ref.latest_step() + 1, 7):
        assert out.state_at(step) == ref.state_at(step)


@pytest.mark.parametrize("fraction", [0.5, 0.97])
def test_a_truncated_file(original, tmp_path, fraction):
    cut = truncated(original, tmp_path / "cut.sqlite", fraction)
    with pytest.raises(RecordingError, match="truncated"):
        open_reader(cut)
    report = find_damage(cut)
    assert report.damaged[0].startswith("truncated") and report.is_damaged
    ref = open_reader(original)
    truth = replayable_steps(cut, ref)
    assert steps_of(report.readable) == truth
    try:
        result = salvage(cut, tmp_path / "out.sqlite", report=report)
    except RecordingError as e:
        assert "nothing can be salvaged" in str(e) and 0 not in truth
        assert not (tmp_path / "out.sqlite").exists()
        return
    out = open_reader(result.path)
    assert out.latest_step() == result.last_step >= prefix_end(truth)
    assert lost_ids_equal(out, ref, result.last_step, every=1)      # request rows lost: rebuilt


def test_files_that_are_not_recordings_say_so(tmp_path):
    (tmp_path / "empty.sqlite").write_bytes(b"")
    (tmp_path / "text.sqlite").write_text("hello, not a database\n" * 100)
    with pytest.raises(RecordingError, match="empty"):
        find_damage(tmp_path / "empty.sqlite")
    with pytest.raises(RecordingError, match="not an SQLite database"):
        find_damage(tmp_path / "text.sqlite")
    with pytest.raises(RecordingError, match="not an SQLite database"):
        salvage(tmp_path / "text.sqlite", tmp_path / "out.sqlite")


def lost_ids_equal(out, ref, last: int, every: int = 3) -> bool:
    """Whether the salvaged ``out`` replays the states of ``ref`` at steps -1..``last`` (every
    ``every``-th), but for what a rebuilt request (id ``lost-<seq>``) cannot know: its id, its
    arrival time (known to within a step), and the prompt length or ``max_tokens`` its row marks
    as a lower bound."""
    ids = {rid: ref.execute("SELECT request_id FROM requests WHERE seq = ?", (int(rid[5:]),))[0][0]
           for (rid,) in out.execute("SELECT request_id FROM requests WHERE request_id LIKE 'lost-%'")}
    for k in range(-1, last + 1, every):
        got, want = out.state_at(k), ref.state_at(k)
        if tuple(ids.get(r, r) for r in got.request_ids) != want.request_ids:
            return False
        rebuilt = np.array([r in ids for r in got.request_ids], dtype=bool)
        for name, column in want.columns.items():
            same = got.columns[name] == column
            if column.dtype.kind == "f":                    # NaN: no token yet
                same |= np.isnan(got.columns[name]) & np.isnan(column)
            if name in ("arrival_time", "num_prompt_tokens", "max_tokens"):
                same |= rebuilt
            if not same.all():
                return False
        if not (got.block_owner == want.block_owner).all():
            return False
    return True


def test_lost_request_rows_are_rebuilt_from_the_steps(original, tmp_path):
    """A page of ``requests`` lost: every step is kept, the lost requests come back from the step
    rows (arrival, prompt length, outcome, metrics exact; ids and prompts said to be lost)."""
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, "requests"))
    report = find_damage(damaged)
    assert report.lost_requests, report.lines()
    result = salvage(damaged, tmp_path / "out.sqlite", report=report)
    ref, out = open_reader(original), open_reader(result.path)
    assert result.last_step == ref.latest_step() and out.is_complete()
    lost = sum(b - a + 1 for a, b in report.lost_requests)     # ranges: a few of them may read alone
    assert 0 < result.rebuilt.num_rebuilt <= lost and len(out.request_ids()) == len(ref.request_ids())
    assert any(line.startswith(f"rebuilt {result.rebuilt.num_rebuilt} request rows") for line in result.lines())
    names = ["seq", "arrival_step", "num_prompt_tokens", "max_tokens", "status", "finish_reason",
             "finish_step", "num_output_tokens", "num_preemptions", "error", "ttft", "mean_itl"]
    rebuilt = out.execute(f"SELECT {', '.join(names)}, sampling_json FROM requests "
                          "WHERE request_id LIKE 'lost-%' ORDER BY seq")
    assert len(rebuilt) == result.rebuilt.num_rebuilt
    for *row, sampling in rebuilt:           # exact, but for what the row says it could not rebuild
        approximate = set(json.loads(sampling)["rebuilt"]) | {"ttft"}    # ttft: from arrival_time
        truth = ref.execute(f"SELECT {', '.join(names)} FROM requests WHERE seq = ?", (row[0],))[0]
        assert {n: v for n, v in zip(names, row) if n not in approximate} == \
            {n: v for n, v in zip(names, truth) if n not in approximate}
        assert ("num_prompt_tokens" in approximate) is (row[0] in result.rebuilt.approximate) or \
            "max_tokens" in approximate
    assert lost_ids_equal(out, ref, result.last_step)
    assert check_file(out) == []          # the rebuilt outcomes agree with the steps
