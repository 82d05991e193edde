"""Moving a waiting request to the front of the FCFS queue (the window's "Move to front of the
queue"): the queue order, the recorded event, and the invariants of a run that does it."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.request import SamplingParams
from tests.support.engine_driver import Action, Arrival, distinct_prompt, run_workload
from recordings.file.open_reader import open_reader
from recordings.check.invariants import check_recording
from tests.engine.sched.test_policies import run_step
from tests.engine.sched.test_scheduler import add, ids, make_request, make_scheduler


def test_a_waiting_request_moves_ahead_of_everyone_waiting_and_is_admitted_next():
    s = make_scheduler(max_num_seqs=1)
    add(s, make_request("run", 4, 3), make_request("a", 4), make_request("b", 4), make_request("c", 4))
    run_step(s, 0)
    s.take_events()
    assert ids(s.waiting) == ["a", "b", "c"]
    assert s.move_to_front("c")
    assert ids(s.waiting) == ["c", "a", "b"]
    assert [(e.request_id, e.kind) for e in s.take_events()] == [("c", "moved_to_front")]
    admitted = []
    for step in range(1, 20):
        out = run_step(s, step)
        admitted += [x.request_id for x in out.scheduled if x.request_id not in admitted + ["run"]]
    assert admitted == ["c", "a", "b"]


def test_only_waiting_requests_move_and_only_under_fcfs():
    s = make_scheduler(max_num_seqs=1)
    add(s, make_request("run", 4, 3), make_request("a", 4))
    run_step(s, 0)
    assert not s.move_to_front("run")            # running: nothing to move
    assert not s.move_to_front("nobody")
    s.pause_request("a")
    assert not s.move_to_front("a")              # paused: resume it first
    with pytest.raises(ValueError, match="policy='fcfs'.*lower priority value"):
        make_scheduler(policy="priority").move_to_front("a")


def test_a_recorded_run_with_a_move_keeps_its_invariants_and_replays_the_event(tmp_path):
    # one slot, ten requests queued at once: the last is moved up while the first runs
    config = EngineConfig(block_size=4, num_gpu_blocks=32, max_model_len=64, max_num_seqs=1,
                          max_num_batched_tokens=32, check_invariants=True)
    arrivals = [Arrival(f"r{i}", 0, distinct_prompt(i, 6), SamplingParams(max_tokens=4, ignore_eos=True))
                for i in range(10)]
    result = run_workload(config, arrivals, [Action(2, "move_to_front", "r9")],
                          record_to=tmp_path / "moved.sqlite")
    assert result.action_results[0][1]
    first = {rid: result.scheduled_steps(rid)[0] for rid in result.requests}
    assert first["r0"] < first["r9"] < min(first[f"r{i}"] for i in range(1, 9))
    with open_reader(result.recording) as reader:
        assert check_recording(reader) == []
        events = [e for e in reader.request_timeline("r9") if e.kind == "moved_to_front"]
        assert [e.step for e in events] == [2]


def test_a_parallel_sampling_group_moves_as_a_whole():
    from engine.engine import LLMEngine
    from tests.support.fake_runner import FakeRunner
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=64, max_num_seqs=2,
                          max_num_batched_tokens=64, check_invariants=True)
    engine = LLMEngine(config, FakeRunner(64, 4), 64)
    for i in range(4):
        engine.add_request(list(distinct_prompt(i, 8)), SamplingParams(max_tokens=6, ignore_eos=True),
                           request_id=f"r{i}")
    engine.add_request(list(distinct_prompt(9, 8)), SamplingParams(max_tokens=6, n=2, ignore_eos=True),
                       request_id="g")
    engine.step()
    assert [r.request_id for r in engine.scheduler.waiting] == ["r2", "r3", "g#0", "g#1"]
    assert engine.move_to_front("g#1")                   # any sequence names its group
    assert [r.request_id for r in engine.scheduler.waiting] == ["g#0", "g#1", "r2", "r3"]
    record = engine.step()
    assert [e.request_id for e in record.events if e.kind == "moved_to_front"] == ["g#0", "g#1"]
