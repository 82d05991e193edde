"""The fast path of ``batchscope check`` (``recordings.check.stream_check``) reports exactly what the
reference (a ``StateTimeline`` replay and ``StateChecker`` on every state) reports: on random runs
(recompute and swap preemption, prefix caching, failed steps, user actions) and on copies of them
damaged at random (rows of every kind edited by hand, pages overwritten, files cut short); and a
clean run is checked on the fast path to its end."""
from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from recordings.check import stream_check
from recordings.check.invariants import check_recording
from recordings.errors import RecordingError
from recordings.file import compact
from recordings.file.open_reader import open_reader
from tests.support.block_event_rows import block_events, replace_block_event
from tests.support.damaged_files import overwrite_page, page_size, truncated
from tests.support.engine_driver import run_engine

KINDS = {"plain": {}, "caching": dict(num_prefixes=3, enable_prefix_caching=True),
         "swap": dict(preemption_mode="swap", num_cpu_blocks=64)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, int], Path]:
    out = {}
    d = tmp_path_factory.mktemp("runs")
    for kind, kwargs in KINDS.items():
        for seed in range(3):
            out[kind, seed] = run_engine(d / f"{kind}{seed}.sqlite", seed=seed, num_requests=24,
                                         keep_states=False, **kwargs).path
    return out


def both(path: Path, max_problems: int = 40):
    """(fast, reference) results of checking ``path``: the problems, or the error's type."""
    out = []
    for fast in (None, False):
        try:
            with open_reader(path) as reader:
                out.append(check_recording(reader, max_problems=max_problems, fast=fast))
        except (RecordingError, ValueError, KeyError, IndexError, TypeError) as e:
            out.append(type(e).__name__)
    return out


def test_clean_runs_are_checked_on_the_fast_path_to_their_end(runs):
    for (kind, seed), path in runs.items():
        with open_reader(path) as reader:
            step, _, clean = stream_check.replay_fast(reader, reader.run_info().config)
            assert clean and step == reader.latest_step(), (kind, seed, step)
        assert both(path) == [[], []], (kind, seed)


# --- edits: each breaks one kind of row at a random step -------------------------------------------
def _pick(db, sql: str, rng: random.Random):
    rows = db.execute(sql).fetchall()
    return rng.choice(rows) if rows else None


def free_count(db, rng):
    (n,), = db.execute("SELECT max(step) FROM steps").fetchall()
    db.execute("UPDATE steps SET num_free_blocks = num_free_blocks + ? WHERE step = ?",
               (rng.choice([-1, 1]), rng.randrange(n + 1)))


def queue_count(db, rng):
    (n,), = db.execute("SELECT max(step) FROM steps").fetchall()
    column = rng.choice(["num_waiting", "num_running", "num_paused"])
    db.execute(f"UPDATE steps SET {column} = {column} + 1 WHERE step = ?", (rng.randrange(n + 1),))


def transition_status(db, rng):
    row = _pick(db, "SELECT step, ord FROM transitions", rng)
    status = rng.choice(["RUNNING", "WAITING", "PAUSED", "PREEMPTED", "FINISHED_STOPPED", "SWAPPED", "BOGUS"])
    db.execute("UPDATE transitions SET status = ? WHERE step = ? AND ord = ?", (status, *row))


def transition_slot(db, rng):
    row = _pick(db, "SELECT step, ord FROM transitions", rng)
    db.execute("UPDATE transitions SET slot = ? WHERE step = ? AND ord = ?", (rng.choice([-1, 0, 1, 99]), *row))


def transition_dropped(db, rng):
    row = _pick(db, "SELECT step, ord FROM transitions", rng)
    db.execute("DELETE FROM transitions WHERE step = ? AND ord = ?", row)


def finish_event_added(db, rng):
    step, seq = _pick(db, "SELECT step, seq FROM transitions WHERE status = 'RUNNING'", rng)
    db.execute("INSERT INTO events (step, ord, seq, kind, detail) VALUES (?, 999, ?, 'aborted', '')", (step, seq))


def block_event_edited(db, rng):
    events = list(block_events(db))
    step, ord_, ev = rng.choice(events)
    (top,), = db.execute("SELECT max(seq) FROM requests").fetchall()
    change = rng.randrange(4)
    if change == 0 and ev.block_ids:
        ids = list(ev.block_ids)
        ids[rng.randrange(len(ids))] = rng.randrange(max(max(ids) + 2, 8))
        ev = ev._replace(block_ids=tuple(ids))
    elif change == 1 and ev.request_id:
        ev = ev._replace(request_id=str(rng.randrange(top + 1)))
    elif change == 2:
        ev = ev._replace(block_ids=ev.block_ids[1:], block_hashes=ev.block_hashes[1:])
    else:
        ev = ev._replace(kind=rng.choice(["allocated", "freed", "hit", "evicted", "reserved"]))
    replace_block_event(db, step, ord_, ev)


def batch_swapped(db, rng):
    (n,), = db.execute("SELECT max(step) FROM steps").fetchall()
    a, b = rng.randrange(n + 1), rng.randrange(n + 1)
    (blob,), = db.execute("SELECT batch FROM steps WHERE step = ?", (b,)).fetchall()
    db.execute("UPDATE steps SET batch = ?, num_scheduled_requests = ? WHERE step = ?",
               (blob, len(compact.Batch(blob).seq), a))


def step_dropped(db, rng):
    (n,), = db.execute("SELECT max(step) FROM steps").fetchall()
    db.execute("DELETE FROM steps WHERE step = ?", (rng.randrange(1, n + 1),))


def knob_set(db, rng):
    (n,), = db.execute("SELECT max(step) FROM steps").fetchall()
    db.execute("UPDATE steps SET knobs_json = ? WHERE step = ?",
               (json.dumps([[rng.choice(["max_num_seqs", "max_num_batched_tokens"]), rng.choice([1, 2, 3])]]),
                rng.randrange(n + 1)))


def arrival_moved(db, rng):
    (seq,), = [_pick(db, "SELECT seq FROM requests", rng)]
    db.execute("UPDATE requests SET arrival_step = arrival_step + ? WHERE seq = ?", (rng.choice([-3, 2]), seq))


EDITS = [free_count, queue_count, transition_status, transition_slot, transition_dropped, finish_event_added,
         block_event_edited, batch_swapped, step_dropped, knob_set, arrival_moved]


@pytest.mark.parametrize("edit", EDITS, ids=[e.__name__ for e in EDITS])
def test_hand_edited_copies_get_the_references_problems(runs, tmp_path, edit):
    rng = random.Random(edit.__name__)
    found = 0
    for (kind, seed), path in runs.items():
        for i in range(3):
            bad = tmp_path / f"{kind}{seed}-{i}.sqlite"
            shutil.copy(path, bad)
            with sqlite3.connect(bad) as db:
                edit(db, rng)
            fast, reference = both(bad)
            assert fast == reference, (kind, seed, i)
            found += bool(reference)
    assert found, "no edit broke anything: the test checks nothing"


def test_damaged_pages_and_cut_files_get_the_references_problems(runs, tmp_path):
    rng = random.Random(1)
    for (kind, seed), path in runs.items():
        pages = path.stat().st_size // page_size(path)
        hit = overwrite_page(path, tmp_path / f"page-{kind}{seed}.sqlite", rng.randrange(2, pages + 1), seed=seed)
        cut = truncated(path, tmp_path / f"cut-{kind}{seed}.sqlite", rng.uniform(0.5, 0.95))
        for damaged in (hit, cut):
            fast, reference = both(damaged)
            assert fast == reference, (kind, seed, damaged.name)


def test_position_hashes_tell_a_table_of_0_to_n_minus_1_from_any_other():
    """The additive hash of a table's positions equals ``sum h(0..n-1)`` for the table 0..n-1
    only: a gap, a repeat or a position moved past the end changes it."""
    tables = stream_check._Tables()
    rng = np.random.default_rng(0)
    for n in range(2, 40):
        pos = np.arange(n)
        with np.errstate(over="ignore"):
            assert tables.hash_of(pos).sum(dtype=np.uint64) == tables[np.array([n])][0]
            for wrong in (np.append(pos[:-1], n), np.append(pos[:-1], 0), np.append(pos, n + 1),
                          rng.permutation(np.append(pos[1:], pos[1]))):
                assert tables.hash_of(wrong).sum(dtype=np.uint64) != tables[np.array([len(wrong)])][0]
