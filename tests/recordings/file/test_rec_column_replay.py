"""The reader's seek replays the steps after a keyframe from their columns
(``recordings.file.column_replay``, ``StateTimeline.apply_columns``) and reads a keyframe's
request ids and static columns aggregated by SQLite (``Reader._static_range``): the state it
gives after every step equals the replay of the file's :class:`StepRecord` s through
``StateTimeline.apply`` from the same keyframe (what the reader did before), on files of schemas
3 to 5 and on runs with prefix caching, swap, priorities and live knobs, and the engine's own
states on those runs."""
from __future__ import annotations

import random
import shutil
import sqlite3

import pytest

from engine.state.timeline import StateTimeline
from engine.vocab import BlockEventKind, EventKind
from recordings.errors import RecordingError
from recordings.file.open_reader import open_reader
from recordings.file.reader import Reader
from tests.support.engine_driver import Action, run_engine
from tests.support.paths import FIXTURES

# schema 1 stores per-request views, not records to replay (``test_rec_v1`` holds its reader to
# the states of its fixture); schemas 2-3 replay through records, 4 and later from columns
FIXTURE_NAMES = ("v3_prefix", "v3_swap", "v4_prefix", "v4_swap")


def record_replay(path) -> tuple[list, list]:
    """(the state after each step -1 .. latest, every record) as the reader gave them before it
    replayed columns: the keyframe at or before the step, then the file's records applied one
    by one with ``StateTimeline.apply``."""
    with open_reader(path) as reader:
        records = reader.records(0, reader.latest_step() + 1)
        keyframes = {s for (s,) in reader.execute("SELECT step FROM keyframes")}
        states, timeline = [], None
        for k in range(-1, len(records)):
            if k in keyframes:
                timeline = StateTimeline.from_state(reader.keyframe_state(k))
            else:
                timeline.apply(records[k])
            states.append(timeline.snapshot())
    return states, records


def replay_records(reader: Reader, timeline: StateTimeline, start: int, stop: int):
    """``Reader._replay`` as it was: every step through its record."""
    for record in reader._records(start, stop):
        timeline.apply(record)
        yield record.step


def seeks(path, seed: int, random_order: bool) -> list:
    """The states ``state_at`` gives: from a new reader for every step, then (``random_order``)
    from one reader with a one-state cache in a random order (keyframes, cached states,
    scrubbing back), then forward (the last replay continued)."""
    steps = list(range(-1, open_reader(path).latest_step() + 1))
    out = []
    for k in steps:
        with open_reader(path) as reader:
            out.append((f"new reader, step {k}", reader.state_at(k)))
    if not random_order:
        return out
    order = random.Random(seed).sample(steps, len(steps))
    with open_reader(path, cache_size=1) as reader:
        out += [(f"random order, step {k}", reader.state_at(k)) for k in order + steps]
    return out


def assert_seeks_equal_the_record_replay(path, seed: int = 0, random_order: bool = True) -> list:
    """Every seek of :func:`seeks` equals the same seek through the reader's record path (its
    replay and its keyframe decode as they were: rows of the requests table), and a new
    reader's state after each step equals :func:`record_replay`; returns the records."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Reader, "_replay", replay_records)
        patch.setattr(Reader, "_static_range", lambda self, lo, hi: None)
        before = seeks(path, seed, random_order)
    now = seeks(path, seed, random_order)
    for (what, expected), (_, state) in zip(before, now):
        assert state == expected, what
    expected, records = record_replay(path)
    assert [state for _, state in now[:len(expected)]] == expected
    return records


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_seeks_equal_the_record_replay(name, tmp_path):
    path = tmp_path / f"{name}.sqlite"
    shutil.copy(FIXTURES / f"{name}.sqlite", path)
    # A schema-3 keyframe lacks the columns added since (max_computed_tokens): a state reached
    # through the scrub-back fill (which runs on a time budget) and one decoded from a keyframe
    # differ there, before this reader as with it; such files are seeked from new readers only.
    records = assert_seeks_equal_the_record_replay(path, random_order=not name.startswith("v3"))
    assert len(records) > 20


def test_prefix_caching_run_seeks_equal_the_record_replay(tmp_path):
    run = run_engine(tmp_path / "prefix.sqlite", seed=5, num_requests=120, num_gpu_blocks=24,
                     max_num_seqs=4, num_prefixes=2, enable_prefix_caching=True,
                     arrivals_per_step=1.0, writer_kwargs={"keyframe_interval": 8})
    records = assert_seeks_equal_the_record_replay(run.path, seed=5)
    assert record_replay(run.path)[0] == [run.initial, *run.states]
    kinds = {ev.kind for r in records for ev in r.block_events}
    assert {BlockEventKind.HIT, BlockEventKind.CACHED, BlockEventKind.EVICTED} <= kinds
    assert any(len(s.shared_block) for s in run.states)


def test_swap_run_seeks_equal_the_record_replay(tmp_path):
    run = run_engine(tmp_path / "swap.sqlite", seed=7, num_requests=60, num_gpu_blocks=12,
                     num_cpu_blocks=16, preemption_mode="swap", arrivals_per_step=1.0,
                     writer_kwargs={"keyframe_interval": 8})
    records = assert_seeks_equal_the_record_replay(run.path, seed=7)
    assert record_replay(run.path)[0] == [run.initial, *run.states]
    kinds = {ev.kind for r in records for ev in r.block_events}
    assert {BlockEventKind.SWAPPED_OUT, BlockEventKind.SWAPPED_IN} <= kinds


def test_priority_and_knob_run_seeks_equal_the_record_replay(tmp_path):
    rng = random.Random(3)

    def between_steps(run) -> None:      # the user changes priorities and the batch slots
        step, state = len(run.records), run.engine.state()
        if len(state) and rng.random() < 0.3:
            run.act(Action(step, "set_priority", rng.choice(state.request_ids), rng.randint(-3, 3)))
        if rng.random() < 0.05:
            run.act(Action(step, "max_num_seqs", "", rng.randint(1, 4)))

    run = run_engine(tmp_path / "priority.sqlite", seed=3, num_requests=60, policy="priority",
                     arrivals_per_step=1.0, between_steps=between_steps,
                     writer_kwargs={"keyframe_interval": 8})
    records = assert_seeks_equal_the_record_replay(run.path, seed=3)
    assert record_replay(run.path)[0] == [run.initial, *run.states]
    assert any(e.kind == EventKind.PRIORITY for r in records for e in r.events)
    assert any(r.knobs for r in records)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "plain.sqlite"
    run_engine(path, seed=11, num_requests=80, num_gpu_blocks=24, max_num_seqs=4,
               arrivals_per_step=1.0, writer_kwargs={"keyframe_interval": 8})
    return path


@pytest.mark.parametrize("change, aggregated", [
    ("UPDATE requests SET max_tokens = max_tokens + 0.5 WHERE seq = 5", False),      # a REAL
    ("UPDATE requests SET request_id = request_id || char(31) WHERE seq = 7", False),  # the separator
    ("UPDATE requests SET arrival_step = CAST(arrival_step AS TEXT) WHERE seq = 6", True),
])
def test_static_columns_read_as_the_rows_say_whatever_the_values(plain_run, tmp_path, change, aggregated):
    """A value the aggregate text cannot carry as it is (a REAL in an integer column, the
    separator in an id) sends the keyframe's requests to the row path; every seek still equals
    the row path's."""
    path = tmp_path / "changed.sqlite"
    shutil.copy(plain_run, path)
    with sqlite3.connect(path) as db:
        db.execute(change)
    with open_reader(path) as reader:
        assert (reader._static_range(0, 10) is not None) == aggregated
    assert_seeks_equal_the_record_replay(path, random_order=False)


def test_a_batch_naming_a_request_that_is_not_live_is_a_recording_error(plain_run, tmp_path):
    path = tmp_path / "bad.sqlite"
    shutil.copy(plain_run, path)
    with sqlite3.connect(path) as db:
        (step,), = db.execute("SELECT min(step) FROM transitions WHERE status LIKE 'FINISHED%' "
                              "AND step > (SELECT min(step) FROM keyframes WHERE step > 0)")
        (seq,), = db.execute("SELECT seq FROM transitions WHERE step = ? AND status LIKE 'FINISHED%' "
                             "ORDER BY ord LIMIT 1", (step,))
        # the finished request shows up again in the next step's transitions
        db.execute("INSERT INTO transitions (step, ord, seq, status, slot, num_computed_tokens, "
                   "num_preemptions, error) VALUES (?, 999, ?, 'RUNNING', 0, 1, 0, NULL)", (step + 1, seq))
    with open_reader(path) as reader, pytest.raises(RecordingError, match="not live"):
        reader.state_at(step + 1)
