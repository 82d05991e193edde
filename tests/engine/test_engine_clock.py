"""The engine's ``sim`` clock: it advances by each step's ``ModelRunnerOutput.step_duration_s``,
jumps idle gaps to the next arrival, and a simulated run is deterministic (the same workload gives
the same step records, but for the wall-clock ``*_ns`` timings)."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from tests.support.engine_driver import without_wall_times
from tests.support.fake_runner import NullRunner

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=128, max_num_seqs=4,
                      max_num_batched_tokens=16, clock="sim", check_invariants=True)
# (request id, arrival time in simulated seconds, prompt tokens, max_tokens): a burst at 0, a
# request arriving while the engine is busy, then a 10 s idle gap before the last one.
WORKLOAD = [("a", 0.0, 20, 3), ("b", 0.0, 5, 4), ("c", 0.015, 3, 2), ("d", 10.0, 6, 2)]


def duration(sched) -> float:
    """A stand-in cost model: 5 ms per step plus 0.25 ms per scheduled token (binary-exact)."""
    return 0.005 + 0.00025 * sched.total_num_scheduled_tokens


def run_sim():
    runner = NullRunner(step_duration=duration)
    engine = LLMEngine(CONFIG, runner, CONFIG.num_gpu_blocks)
    done = engine.collect_finished()
    for rid, at, p, m in WORKLOAD:
        engine.add_request(list(range(1, p + 1)), SamplingParams(max_tokens=m, ignore_eos=True),
                           request_id=rid, arrival_time=at)
    records = engine.run_until_done(max_steps=200)
    return engine, records, done


def test_sim_clock_advances_by_step_duration_and_jumps_idle_gaps():
    engine, records, done = run_sim()
    assert set(done) == {"a", "b", "c", "d"} and not engine.has_unfinished
    clock = 0.0
    for rec in records:
        d = 0.005 + 0.00025 * rec.total_num_scheduled_tokens
        if rec.total_num_scheduled_tokens == 0:
            pytest.fail(f"idle step {rec.step}: the sim clock should have jumped to the next arrival")
        if rec.clock != clock:
            # Only an idle engine jumps, and only to the next arrival.
            assert rec.clock == 10.0 and rec.arrivals[0].request_id == "d" and clock < 10.0, (rec.step, rec.clock)
        assert rec.token_time == pytest.approx(rec.clock + d, abs=1e-12)
        clock = rec.token_time
    assert engine.now() == pytest.approx(clock)
    jumps = [r.step for r in records if r.arrivals and r.arrivals[0].request_id == "d"]
    assert len(jumps) == 1 and records[jumps[0] - 1].num_running == 0     # idle before the jump
    # c arrives at 15 ms, while a and b run: admitted before the first step that starts at or
    # after 15 ms, with its own arrival time.
    (c_step,) = [r.step for r in records if any(a.request_id == "c" for a in r.arrivals)]
    assert records[c_step].clock >= 0.015 > records[c_step - 1].clock
    # Request times are simulated seconds: TTFT = token time of the first token - arrival time.
    for rid, at, _, m in WORKLOAD:
        r = done[rid]
        assert r.arrival_time == at and r.num_output_tokens == m
        first = next(rec for rec in records if any(t.request_id == rid for t in rec.new_tokens))
        assert r.first_token_time == first.token_time and r.ttft == pytest.approx(first.token_time - at)
        assert r.token_times == sorted(r.token_times) and r.finished_time == r.token_times[-1]
    assert done["d"].ttft == pytest.approx(0.005 + 0.00025 * 6)       # no queueing after the gap


def test_idle_sim_engine_jumps_to_a_later_arrival():
    engine = LLMEngine(CONFIG, NullRunner(step_duration=duration), CONFIG.num_gpu_blocks)
    rec = engine.step()
    # An empty step costs what the runner says (the cost model's overhead); with no work and no
    # arrival there is nothing to jump to.
    assert rec.scheduled == () and rec.clock == 0.0 and rec.token_time == engine.now() == 0.005
    engine.add_request([1, 2], SamplingParams(max_tokens=1), request_id="x", arrival_time=2.0)
    assert engine.next_arrival_time == 2.0 and engine.now() == 0.005       # not yet admitted
    rec = engine.step()
    assert rec.clock == 2.0 and [a.request_id for a in rec.arrivals] == ["x"]
    assert rec.token_time == 2.0 + 0.005 + 0.00025 * 2 and not engine.has_unfinished


def test_two_identical_sim_runs_give_identical_records():
    _, first, done1 = run_sim()
    _, second, done2 = run_sim()
    assert len(first) == len(second) > 0
    assert [without_wall_times(r) for r in first] == [without_wall_times(r) for r in second]
    assert any(r.start_ns != s.start_ns for r, s in zip(first, second))   # wall times differ
    for rid in done1:
        a, b = done1[rid], done2[rid]
        assert (a.output_token_ids, a.token_times, a.first_token_time, a.finished_time) == (
            b.output_token_ids, b.token_times, b.first_token_time, b.finished_time)
