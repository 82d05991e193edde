"""Invariants checked on a recording (``recordings.check.invariants``, ``batchscope check``): clean runs of the
real engine pass; recordings corrupted by hand with sqlite3 are reported at the corrupted step,
naming the invariant."""
from __future__ import annotations
from tests.support.paths import FIXTURES

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from engine.state.state import EngineState
from tests.support.block_event_rows import block_events, replace_block_event
from tests.support.engine_driver import SMALL_SEED, run_engine
from recordings.file.open_reader import open_reader
from recordings.check.invariants import StateChecker, check_recording

FIXTURES = FIXTURES


def problems_of(path, max_problems: int = 100) -> list:
    with open_reader(path) as reader:
        return check_recording(reader, max_problems=max_problems)


def hand_held_block_to_another(path) -> tuple[int, int]:
    """Edit the first ``allocated`` block event that comes while another request holds a block so
    that it hands that held block to its request too. Returns (step, block)."""
    db = sqlite3.connect(path)
    tables: dict[str, list[int]] = {}
    for step, ord_, event in list(block_events(db)):
        kind, seq, ids = event.kind, event.request_id, list(event.block_ids)
        others = [b for s, t in tables.items() if s != seq for b in t]
        if kind == "allocated" and others:
            ids[0] = others[0]
            replace_block_event(db, step, ord_, event._replace(block_ids=tuple(ids)))
            db.close()
            return step, others[0]
        if kind == "allocated":
            tables.setdefault(seq, []).extend(ids)
        elif kind == "freed":
            tables.pop(seq, None)
    raise AssertionError("no allocation while another request held blocks")


@pytest.fixture
def clean(tmp_path) -> Path:
    """A finished recording of a run with preemption, pauses, aborts, rejections and failed steps."""
    run = run_engine(tmp_path / "run.sqlite", seed=SMALL_SEED, writer_kwargs={"keyframe_interval": 8})
    assert sum(r.num_preemptions for r in run.records) > 0
    return run.path


@pytest.mark.parametrize("caching", [False, True])
def test_clean_runs_have_no_problems(tmp_path, caching):
    for seed in range(4):
        run = run_engine(tmp_path / f"run{seed}{caching}.sqlite", seed=seed, num_prefixes=3 * caching,
                         enable_prefix_caching=caching)
        assert problems_of(run.path) == [], seed


def test_a_schema_1_recording_is_checked_from_its_stored_states():
    assert problems_of(FIXTURES / "v1_small.sqlite") == []


def test_one_block_handed_to_two_requests_is_reported_at_its_step(clean):
    step, block = hand_held_block_to_another(clean)
    problems = problems_of(clean)
    assert problems, "the corruption went unnoticed"
    first = problems[0]
    assert (first.step, first.invariant) == (step, "G1"), problems
    assert str(first).startswith(f"step {step}: G1: allocated block {block} to ")
    assert all(p.step >= step for p in problems)


def test_batchscope_check_exit_codes_and_one_line_per_problem(clean, tmp_path, capsys):
    assert main(["check", str(clean)]) == 0
    assert "no invariant violated" in capsys.readouterr().out
    bad = tmp_path / "bad.sqlite"
    shutil.copy(clean, bad)
    step, _ = hand_held_block_to_another(bad)
    assert main(["check", str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(problems_of(bad)) and lines[0].startswith(f"{bad}: step {step}: G1: ")
    assert main(["check", str(bad), "--max-problems", "1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].endswith("stopped after 1 problems")


def test_limits_come_from_the_runs_config(clean):
    """G4 against the stored config: lower its token budget and exactly the steps above it fail."""
    with open_reader(clean) as reader:
        tokens = {r.step: r.total_num_scheduled_tokens for r in reader.records(0, reader.latest_step() + 1)}
        info = reader.run_info().to_json()
    limit = sorted(set(tokens.values()))[-2]         # below the busiest steps only
    info["config"]["max_num_batched_tokens"] = limit
    with sqlite3.connect(clean) as db:
        db.execute("UPDATE runs SET run_info_json = ?", (json.dumps(info),))
    problems = problems_of(clean)
    assert {p.invariant for p in problems} == {"G4"}
    assert [p.step for p in problems] == sorted(k for k, n in tokens.items() if n > limit)
    assert all(f"> max_num_batched_tokens {limit}" in p.message for p in problems)


def test_a_finished_request_kept_running_breaks_queues_and_drain(clean):
    """A finishing transition edited to RUNNING: the request never leaves (G3 at that step: the
    step's counts disagree) and the finished run does not drain (G6 at the last step)."""
    with sqlite3.connect(clean) as db:
        step, ord_, seq = db.execute("SELECT step, ord, seq FROM transitions WHERE status = 'FINISHED_LENGTH' "
                                     "ORDER BY step LIMIT 1").fetchone()
        db.execute("UPDATE transitions SET status = 'RUNNING' WHERE step = ? AND ord = ?", (step, ord_))
        (last,), = db.execute("SELECT max(step) FROM steps")
    problems = problems_of(clean, max_problems=10_000)
    assert (problems[0].step, problems[0].invariant) == (step, "G3"), problems
    assert any(p.step == last and p.invariant == "G6" for p in problems), problems


@pytest.mark.parametrize("owner, message", [
    ("(SELECT min(seq) FROM requests)", "cannot be replayed"),   # a request that is not live then
    ("9999", "do not decode"),                                   # no such request
])
def test_a_record_the_state_cannot_take_ends_the_check_at_its_step(clean, owner, message):
    with sqlite3.connect(clean) as db:
        step, ord_, event = next((s, o, e) for s, o, e in block_events(db) if e.kind == "freed" and s > 5)
        (seq,), = db.execute(f"SELECT {owner}").fetchall()
        replace_block_event(db, step, ord_, event._replace(request_id=str(seq)))
    problems = problems_of(clean)
    assert problems[-1].step == step and problems[-1].invariant == "record", problems
    assert message in problems[-1].message
    assert all(p.step < step for p in problems[:-1])


def test_block_tables_named_twice_or_with_gaps_name_the_request(tmp_path):
    """States edited by hand (one step of a prefix-caching run): a block in its owner's table twice
    is G2, a table position skipped is G1; each names the request."""
    run = run_engine(tmp_path / "run.sqlite", seed=3, num_prefixes=3, enable_prefix_caching=True)
    k = next(i for i, s in enumerate(run.states) if len(s.shared_block) and s.num_used_blocks >= 2)
    st, rec = run.states[k], run.records[k]

    def checked(**arrays) -> list:
        checker = StateChecker(run.run_info.config)
        for s, r in zip(run.states[:k], run.records[:k]):
            assert checker.check_step(s, r) == []
        fields = dict(block_owner=st.block_owner, block_pos=st.block_pos, block_hash=st.block_hash,
                      shared_seq=st.shared_seq, shared_block=st.shared_block) | arrays
        edited = EngineState(st.step, st.clock, st.num_total_blocks, st.block_size, st.max_num_seqs,
                             next_seq=st.next_seq, request_ids=st.request_ids, columns=dict(st.columns),
                             recently_finished=st.recently_finished, **fields)
        return checker.check_step(edited, rec)

    assert checked() == []
    block = int(st.shared_block[0])
    owner = st.block_holders(block)[0]
    twice = checked(shared_seq=np.append(st.shared_seq, st.block_owner[block]),
                    shared_block=np.append(st.shared_block, block))
    assert any(p.invariant == "G2" and p.message == f"block tables name a block twice: {owner}" for p in twice), twice
    rid = next(r for r in st.request_ids if len(st.block_ids(r)) >= 2)
    pos = st.block_pos.copy()
    pos[st.block_ids(rid)[-1]] += 1
    gap = checked(block_pos=pos)
    assert [(p.invariant, p.message) for p in gap] == [("G1", f"block tables with gaps or repeated positions: {rid}")]


def test_a_run_cut_short_is_not_held_to_the_drain_invariant(tmp_path):
    """A recording closed while requests still run (Ctrl+C, the window closed) has requests with
    no outcome (NULL status): G6 does not apply, and the steps so far check clean."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.request import SamplingParams
    from tests.support.fake_runner import FakeRunner
    from recordings.file.open_reader import open_reader
    from recordings.file.writer import RecordingWriter
    from recordings.check.invariants import check_recording

    config = EngineConfig(block_size=4, num_gpu_blocks=32, max_num_seqs=4, max_num_batched_tokens=32)
    with RecordingWriter(tmp_path / "cut.sqlite", {"config": config.to_dict()}) as writer:
        engine = LLMEngine(config, FakeRunner(32, 4), 32, recorder=writer)
        for i in range(4):
            engine.add_request(list(range(1, 9)), SamplingParams(max_tokens=30, ignore_eos=True))
        for _ in range(5):
            engine.step()
    with open_reader(tmp_path / "cut.sqlite") as reader:
        (unfinished,), = reader.execute("SELECT count(*) FROM requests WHERE status IS NULL")
        assert unfinished == 4
        assert check_recording(reader) == []
