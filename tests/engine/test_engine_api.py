"""LLMEngine's request API around the step loop: ids, rejections, user actions on every kind of
request, the state it publishes between steps, and the wall clock."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.fake_runner import FakeRunner, ToyTokenizer, reference_output

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=16, max_model_len=64, max_num_seqs=2, max_num_batched_tokens=16)


def make(config=CONFIG, **kw) -> tuple[LLMEngine, FakeRunner]:
    runner = FakeRunner(config.num_gpu_blocks, config.block_size)
    return LLMEngine(config, runner, config.num_gpu_blocks, **kw), runner


def test_ids_are_unique_and_generated():
    engine, _ = make()
    a = engine.add_request([1, 2, 3], SamplingParams(max_tokens=2))
    b = engine.add_request([4, 5], SamplingParams(max_tokens=2))
    assert a != b
    with pytest.raises(ValueError, match="duplicate"):
        engine.add_request([1], SamplingParams(max_tokens=1), request_id=a)
    engine.add_request([1], SamplingParams(max_tokens=1), request_id="later", arrival_time=5.0)
    with pytest.raises(ValueError, match="duplicate"):
        engine.add_request([1], SamplingParams(max_tokens=1), request_id="later")


def test_stop_strings_need_a_tokenizer():
    engine, _ = make()
    with pytest.raises(ValueError, match="tokenizer"):
        engine.add_request([1], SamplingParams(max_tokens=1, stop=("x",)))


def test_state_shows_requests_before_any_step():
    engine, runner = make()
    done = engine.collect_finished()
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=2))
    bad = engine.add_request([1] * 60, SamplingParams(max_tokens=10))        # over max_model_len
    st = engine.state()
    assert st.step == -1
    assert st.requests[rid].status == "WAITING" and [v.request_id for v in st.waiting] == [rid]
    assert list(st.requests) == [rid] and bad not in engine.requests          # live ones only
    assert st.view(bad).status == "FINISHED_ERROR" and "max_model_len" in st.view(bad).error
    assert [v.request_id for v in st.finished] == [bad] and st.block_ids(bad) == ()
    assert not done                                   # handed over with the next step
    rec = engine.step()
    assert [ev.kind for ev in rec.events if ev.request_id == bad] == ["arrived", "rejected"]
    assert list(done) == [bad] and done[bad].finished_time == 0.0
    assert bad not in runner.released                 # the runner never saw it
    assert engine.state().view(bad) == st.view(bad)


def test_user_actions_on_each_kind_of_request():
    engine, runner = make()
    done = engine.collect_finished()
    run = engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=6), request_id="run")
    engine.add_request([6, 7], SamplingParams(max_tokens=6), request_id="run2")
    wait = engine.add_request([8, 9], SamplingParams(max_tokens=6), request_id="wait")   # seq cap 2
    engine.step()
    assert engine.requests[wait].status is RequestStatus.WAITING
    assert not engine.resume_request(run) and not engine.pause_request("nope") and not engine.abort_request("nope")
    # Aborting a waiting request: finished at once (it leaves the live requests), never scheduled.
    waiting_req = engine.requests[wait]
    assert engine.abort_request(wait)
    assert wait not in engine.requests and wait not in engine.scheduler.requests
    assert waiting_req.status is RequestStatus.FINISHED_ABORTED and waiting_req.finished_time == 1.0
    assert engine.state().view(wait).status == "FINISHED_ABORTED" and wait not in engine.state().request_ids
    assert not engine.abort_request(wait) and not engine.pause_request(wait)
    # Pausing a running request keeps its KV and frees its slot; resuming brings it back.
    blocks = list(engine.scheduler.kv.block_ids(run))
    assert blocks and engine.pause_request(run) and not engine.pause_request(run)
    assert engine.state().requests[run].status == "PAUSED" and engine.state().requests[run].slot is None
    assert engine.state().block_ids(run) == tuple(blocks)
    rec = engine.step()
    assert done == {wait: waiting_req}                # handed over once, with the next step
    assert [s.request_id for s in rec.scheduled] == ["run2"]
    assert engine.scheduler.kv.block_ids(run) == blocks and engine.state().block_ids(run) == tuple(blocks)
    assert engine.resume_request(run)
    engine.run_until_done(max_steps=50)
    assert not engine.requests and set(done) == {"run", "run2", "wait"}
    assert done[run].output_token_ids == reference_output([1, 2, 3, 4, 5], 6)
    assert done[run].num_preemptions == 0
    assert sorted(runner.released) == ["run", "run2", "wait"]
    assert engine.scheduler.kv.num_free_blocks == CONFIG.num_gpu_blocks
    assert engine.scheduler.num_finished == 3 and len(engine.state()) == 0


def test_abort_mid_stream_keeps_only_streamed_text():
    tok = ToyTokenizer({i: chr(ord("a") + i % 26) for i in range(1000)})
    engine, _ = make(tokenizer=tok)
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=10, stop=("zzzz",)))
    req = engine.requests[rid]
    streamed = ""
    for _ in range(6):
        streamed += "".join(t.text for t in engine.step().new_tokens)
    assert len(req.output_text) == 6 and len(streamed) == 3     # 3 held back
    assert engine.abort_request(rid)
    assert req.output_text == streamed and rid not in engine.requests


def test_idle_steps_advance_the_virtual_clock_only():
    engine, _ = make()
    rec = engine.step()
    assert rec.step == 0 and rec.scheduled == () and rec.new_tokens == () and rec.error is None
    assert engine.now() == 1.0 and engine.step().step == 1 and not engine.has_unfinished


def test_wall_clock_times_are_ordered():
    engine, _ = make(CONFIG.replace(clock="wall"))
    done = engine.collect_finished()
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=3))
    engine.run_until_done(max_steps=20)
    r = done[rid]
    assert r.status is RequestStatus.FINISHED_LENGTH
    assert 0 <= r.arrival_time <= r.first_token_time <= r.token_times[-1] <= r.finished_time
    assert r.ttft > 0 and r.token_times == sorted(r.token_times)


def test_a_bookkeeping_step_records_the_last_user_actions_and_runs_nothing():
    engine, runner = make()
    done = engine.collect_finished()
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=3), request_id="a")
    engine.add_request([4, 5, 6], SamplingParams(max_tokens=3), request_id="b")
    engine.step()
    engine.abort_request("a")
    engine.add_request([7, 8], SamplingParams(max_tokens=2), request_id="late")
    assert engine.has_pending_changes
    calls = runner.num_calls
    before = engine.state()
    rec = engine.step(run_batch=False)
    assert runner.num_calls == calls and rec.scheduled == () and rec.new_tokens == ()
    assert [a.request_id for a in rec.arrivals] == ["late"]
    assert ("a", "FINISHED_ABORTED") in [(t.request_id, t.status) for t in rec.transitions]
    assert "a" in done and not engine.has_pending_changes
    after = engine.state()
    assert after.view("a").status == "FINISHED_ABORTED" and after.view("late").status == "WAITING"
    assert after.view("b") == before.view("b")          # nobody ran


@pytest.mark.parametrize("compact", [False, True])
def test_token_ids_slices_prompt_and_output_like_the_whole_sequence(compact):
    import array
    import itertools

    from engine.request import Request
    prompt = [5, 6, 7, 8, 9]
    req = Request("x", array.array("i", prompt) if compact else list(prompt), SamplingParams(max_tokens=4))
    req.output_token_ids += [11, 12, 13]
    whole = prompt + [11, 12, 13]
    assert req.all_token_ids == whole
    for start, end in itertools.combinations_with_replacement(range(len(whole) + 1), 2):
        assert req.token_ids(start, end) == whole[start:end], (start, end)
        assert all(type(t) is int for t in req.token_ids(start, end))


def test_a_compact_prompt_stays_compact_through_the_engine():
    import array
    engine, runner = make()
    done = engine.collect_finished()
    engine.add_request(array.array("i", [1, 2, 3, 4, 5]), SamplingParams(max_tokens=3, ignore_eos=True),
                       request_id="c")
    engine.step()
    assert isinstance(engine.requests["c"].prompt_token_ids, array.array)
    engine.run_until_done()
    assert done["c"].output_token_ids == reference_output([1, 2, 3, 4, 5], 3)


@pytest.mark.parametrize("policy", ["fcfs", "static"])
def test_nonzero_priority_is_refused_at_add_request_outside_policy_priority(policy):
    engine, _ = make(CONFIG.replace(policy=policy))
    for kw in ({"priority": 2}, {}):
        params = SamplingParams(max_tokens=2, priority=0 if kw else -1)
        with pytest.raises(ValueError, match=rf"priority=(2|-1) needs policy='priority' .*policy='{policy}'"):
            engine.add_request([1, 2], params, request_id="p", **kw)
    assert not engine.requests and not engine.has_pending_changes      # nothing was queued
    engine.add_request([1, 2], SamplingParams(max_tokens=2), request_id="p", priority=0)   # 0 is fine
    priority, _ = make(CONFIG.replace(policy="priority"))
    priority.add_request([1, 2], SamplingParams(max_tokens=2), request_id="p", priority=2)
    assert priority.requests["p"].priority == 2


@pytest.mark.parametrize("clock", ["virtual", "wall"])
def test_arrival_time_is_honoured_or_refused(clock):
    engine, _ = make(CONFIG.replace(clock=clock))
    done = engine.collect_finished()
    engine.add_request([1, 2], SamplingParams(max_tokens=2), request_id="first")
    for _ in range(3):
        engine.step()
    now = engine.now()
    assert now > 0
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=2), request_id="past", arrival_time=0.0)
    for bad in (-1.0, float("nan"), float("inf"), "3"):
        with pytest.raises(ValueError, match="arrival_time must be a finite number >= 0"):
            engine.add_request([1], SamplingParams(max_tokens=1), request_id="bad", arrival_time=bad)
    assert engine.requests["past"].arrival_time == 0.0
    assert engine.state().requests["past"].arrival_time == 0.0
    engine.run_until_done(20)
    assert done["past"].ttft >= now                # its latency counts from its own arrival
    if clock == "virtual":                         # (a future wall time would make the test timed)
        at = engine.now() + 2
        engine.add_request([4, 5], SamplingParams(max_tokens=1), request_id="later", arrival_time=at)
        records = engine.run_until_done(20)
        arrived = [r for r in records if any(a.request_id == "later" for a in r.arrivals)]
        assert arrived[0].clock == at and done["later"].arrival_time == at
