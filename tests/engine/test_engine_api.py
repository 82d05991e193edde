"""LLMEngine's request API around the step loop: ids, rejections, user actions on every kind of
request, the state it publishes between steps, and the wall clock."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import RequestStatus, SamplingParams
from fake_runner import FakeRunner, ToyTokenizer, reference_output

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
    engine, _ = make()
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=2))
    bad = engine.add_request([1] * 60, SamplingParams(max_tokens=10))        # over max_model_len
    st = engine.state()
    assert st.step == -1
    assert st.requests[rid].status == "WAITING" and [v.request_id for v in st.waiting] == [rid]
    assert st.requests[bad].status == "FINISHED_ERROR" and "max_model_len" in st.requests[bad].error
    assert engine.requests[bad].finished_time == 0.0


def test_user_actions_on_each_kind_of_request():
    engine, runner = make()
    run = engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=6), request_id="run")
    engine.add_request([6, 7], SamplingParams(max_tokens=6), request_id="run2")
    wait = engine.add_request([8, 9], SamplingParams(max_tokens=6), request_id="wait")   # seq cap 2
    engine.step()
    assert engine.requests[wait].status is RequestStatus.WAITING
    assert not engine.resume_request(run) and not engine.pause_request("nope") and not engine.abort_request("nope")
    # Aborting a waiting request: finished at once, never scheduled, nothing to release in the runner.
    assert engine.abort_request(wait)
    assert engine.requests[wait].status is RequestStatus.FINISHED_ABORTED
    assert engine.requests[wait].finished_time == 1.0
    assert not engine.abort_request(wait) and not engine.pause_request(wait)
    # Pausing a running request keeps its KV and frees its slot; resuming brings it back.
    blocks = list(engine.scheduler.kv.block_ids(run))
    assert blocks and engine.pause_request(run) and not engine.pause_request(run)
    assert engine.state().requests[run].status == "PAUSED" and engine.state().requests[run].slot is None
    rec = engine.step()
    assert [s.request_id for s in rec.scheduler_output.scheduled] == ["run2"]
    assert engine.scheduler.kv.block_ids(run) == blocks
    assert engine.resume_request(run)
    engine.run_until_done(max_steps=50)
    assert engine.requests[run].output_token_ids == reference_output([1, 2, 3, 4, 5], 6)
    assert engine.requests[run].num_preemptions == 0
    assert sorted(runner.released) == ["run", "run2", "wait"]
    assert engine.scheduler.kv.num_free_blocks == CONFIG.num_gpu_blocks


def test_abort_mid_stream_keeps_only_streamed_text():
    tok = ToyTokenizer({i: chr(ord("a") + i % 26) for i in range(1000)})
    engine, _ = make(tokenizer=tok)
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=10, stop=("zzzz",)))
    streamed = ""
    for _ in range(6):
        streamed += "".join(t.text for t in engine.step().new_tokens)
    assert len(engine.requests[rid].output_text) == 6 and len(streamed) == 3     # 3 held back
    assert engine.abort_request(rid)
    assert engine.requests[rid].output_text == streamed


def test_idle_steps_advance_the_virtual_clock_only():
    engine, _ = make()
    rec = engine.step()
    assert rec.step == 0 and rec.scheduler_output.is_empty and rec.new_tokens == () and rec.error is None
    assert engine.now() == 1.0 and engine.step().step == 1 and not engine.has_unfinished


def test_wall_clock_times_are_ordered():
    engine, _ = make(CONFIG.replace(clock="wall"))
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=3))
    engine.run_until_done(max_steps=20)
    r = engine.requests[rid]
    assert r.status is RequestStatus.FINISHED_LENGTH
    assert 0 <= r.arrival_time <= r.first_token_time <= r.token_times[-1] <= r.finished_time
    assert r.ttft > 0 and r.token_times == sorted(r.token_times)
