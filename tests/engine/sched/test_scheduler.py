"""The scheduler on its own, in the style of vLLM's ``tests/v1/core/test_scheduler.py``: build a
scheduler, ``schedule()``, assert per-request token counts, hand-build a ``ModelRunnerOutput``,
``update_from_output()``, assert the queues, the block tables and that finished requests left
``requests``. No engine, no runner."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.outputs import BatchEntry, ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from engine.request import Request, SamplingParams
from engine.vocab import RequestStatus
from engine.sched.scheduler import Scheduler
from engine.vocab import BlockEventKind, NotAdmittedReason


def make_scheduler(num_blocks: int = 64, **kw) -> Scheduler:
    kw = {"block_size": 4, "max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 128} | kw
    return Scheduler(EngineConfig(num_gpu_blocks=num_blocks, **kw), num_blocks)


def make_request(rid: str, num_prompt_tokens: int, max_tokens: int = 4, **kw) -> Request:
    return Request(rid, list(range(1, num_prompt_tokens + 1)), SamplingParams(max_tokens=max_tokens, **kw))


def add(s: Scheduler, *reqs: Request) -> list[Request]:
    for r in reqs:
        assert s.add_request(r)
    return list(reqs)


def tokens(out: SchedulerOutput) -> dict[str, int]:
    return {x.request_id: x.num_tokens for x in out.scheduled}


def sample_all(out: SchedulerOutput, s: Scheduler, token: int = 9) -> ModelRunnerOutput:
    """What a runner returns: a token for each request whose chunk ends its known tokens."""
    return ModelRunnerOutput(sampled_token_ids={
        x.request_id: token for x in out.scheduled
        if x.num_computed_tokens + x.num_tokens == s.requests[x.request_id].num_tokens})


def ids(queue) -> list[str]:
    return [r.request_id for r in queue]


def test_prefill_then_decode():
    s = make_scheduler()
    a, b, c = add(s, make_request("a", 10), make_request("b", 5), make_request("c", 1))
    out = s.schedule(0)
    assert tokens(out) == {"a": 10, "b": 5, "c": 1}
    assert [x.slot for x in out.scheduled] == [0, 1, 2]
    assert all(x.is_prefill and x.num_computed_tokens == 0 for x in out.scheduled)
    assert [len(x.new_block_ids) for x in out.scheduled] == [3, 2, 1]
    assert all(x.new_block_ids == s.kv.block_table(x.request_id) for x in out.scheduled)
    assert ids(s.running) == ["a", "b", "c"] and not s.waiting and out.not_admitted == ()
    assert all(r.status is RequestStatus.RUNNING for r in (a, b, c))
    assert [ev.kind for ev in s.take_events()] == ["arrived"] * 3 + ["scheduled"] * 3
    assert [ev.kind for ev in s.kv.take_events()] == [BlockEventKind.ALLOCATED] * 3

    got = s.update_from_output(out, sample_all(out, s), now=1.0, step=0)
    assert got == [a, b, c]
    assert [r.num_computed_tokens for r in (a, b, c)] == [10, 5, 1]
    assert [r.output_token_ids for r in (a, b, c)] == [[9], [9], [9]]
    assert a.first_token_time == 1.0 and a.first_token_step == 0 and a.token_times == [1.0]

    out = s.schedule(1)                       # every request decodes its one new token
    assert tokens(out) == {"a": 1, "b": 1, "c": 1}
    assert not any(x.is_prefill for x in out.scheduled)
    assert [x.num_computed_tokens for x in out.scheduled] == [10, 5, 1]
    # a's 11th token still fits its 3rd block; b's 6th token too; c's 2nd token fits its block.
    assert [x.new_block_ids for x in out.scheduled] == [(), (), ()]
    s.update_from_output(out, sample_all(out, s), now=2.0, step=1)
    assert [r.num_output_tokens for r in (a, b, c)] == [2, 2, 2] and a.token_times == [1.0, 2.0]
    s.check_invariants()


def test_chunked_prefill_under_the_token_budget():
    s = make_scheduler(max_num_batched_tokens=8)
    a, b = add(s, make_request("a", 20), make_request("b", 3))
    out = s.schedule(0)
    assert tokens(out) == {"a": 8}
    assert out.not_admitted == (("b", NotAdmittedReason.TOKEN_BUDGET),)
    runner_out = sample_all(out, s)
    assert runner_out.sampled_token_ids == {}            # mid-prefill: no token
    assert s.update_from_output(out, runner_out, now=1.0, step=0) == []
    assert a.num_computed_tokens == 8 and a.num_output_tokens == 0 and a.first_token_time is None

    out = s.schedule(1)
    assert tokens(out) == {"a": 8} and out.scheduled[0].num_computed_tokens == 8
    assert out.scheduled[0].is_prefill and out.scheduled[0].new_block_ids == s.kv.block_table("a")[2:]
    assert len(s.kv.block_table("a")) == 4
    s.update_from_output(out, sample_all(out, s), now=2.0, step=1)

    out = s.schedule(2)                      # a's last 4 prompt tokens, then b with what is left
    assert tokens(out) == {"a": 4, "b": 3} and ids(s.running) == ["a", "b"]
    s.update_from_output(out, sample_all(out, s), now=3.0, step=2)
    assert a.num_output_tokens == b.num_output_tokens == 1 and a.first_token_step == 2


def test_long_prefill_threshold_caps_one_requests_chunk():
    s = make_scheduler(max_num_batched_tokens=32, long_prefill_token_threshold=6)
    add(s, make_request("long", 20), make_request("short", 3))
    out = s.schedule(0)
    assert tokens(out) == {"long": 6, "short": 3}


def test_without_chunked_prefill_a_prompt_is_never_split():
    s = make_scheduler(max_num_batched_tokens=128, enable_chunked_prefill=False)
    add(s, make_request("a", 100), make_request("b", 40))
    out = s.schedule(0)
    assert tokens(out) == {"a": 100}
    assert out.not_admitted == (("b", NotAdmittedReason.TOKEN_BUDGET),)       # 28 left < 40


def test_seq_cap_lists_only_the_first_blocked_request():
    s = make_scheduler(max_num_seqs=2)
    add(s, *(make_request(f"r{i}", 3) for i in range(4)))
    out = s.schedule(0)
    assert tokens(out) == {"r0": 3, "r1": 3}
    assert out.not_admitted == (("r2", NotAdmittedReason.SEQ_CAP),)           # r3: behind r2
    assert ids(s.waiting) == ["r2", "r3"] and len(s.requests) == 4


def test_finished_requests_leave_the_scheduler_and_free_slot_and_blocks():
    s = make_scheduler(max_num_seqs=2)
    a, b, c = add(s, make_request("a", 5, max_tokens=1), make_request("b", 5, max_tokens=3),
                  make_request("c", 2, max_tokens=2))
    out = s.schedule(0)
    assert tokens(out) == {"a": 5, "b": 5} and [x.slot for x in out.scheduled] == [0, 1]
    s.take_events(), s.kv.take_events()
    s.update_from_output(out, sample_all(out, s), now=1.0, step=0)
    # a reached max_tokens: finished, out of every queue and of ``requests``, blocks and slot free.
    assert a.status is RequestStatus.FINISHED_LENGTH and a.slot is None
    assert "a" not in s.requests and a not in s.running and ids(s.running) == ["b"]
    assert s.num_finished == 1 and s.take_finished() == [a] and s.take_finished() == []
    assert [(ev.request_id, ev.kind) for ev in s.take_events()] == [("a", "finished")]
    (freed,) = s.kv.take_events()
    assert freed.kind == BlockEventKind.FREED and freed.request_id == "a" and len(freed.block_ids) == 2
    assert s.kv.block_ids("a") == [] and s.kv.num_free_blocks == 64 - 2
    out = s.schedule(1)
    assert tokens(out) == {"b": 1, "c": 2}
    assert {x.request_id: x.slot for x in out.scheduled} == {"b": 1, "c": 0}     # lowest free slot
    s.update_from_output(out, sample_all(out, s), now=2.0, step=1)
    out = s.schedule(2)
    s.update_from_output(out, sample_all(out, s), now=3.0, step=2)
    assert not s.requests and not s.running and not s.has_unfinished and s.num_finished == 3
    assert {r.request_id for r in s.take_finished()} == {"b", "c"}
    assert s.kv.num_free_blocks == 64 and not s.kv.block_tables
    s.check_invariants()


def test_eos_stops_unless_ignored():
    s = make_scheduler()
    a = Request("a", [1, 2], SamplingParams(max_tokens=5), eos_token_id=0)
    b = Request("b", [1, 2], SamplingParams(max_tokens=5, ignore_eos=True), eos_token_id=0)
    add(s, a, b)
    out = s.schedule(0)
    s.update_from_output(out, ModelRunnerOutput(sampled_token_ids={"a": 0, "b": 0}), now=1.0, step=0)
    assert a.status is RequestStatus.FINISHED_STOPPED and a.stop_reason == "eos"
    assert b.status is RequestStatus.RUNNING and list(s.requests) == ["b"]


def test_check_stop_callback_finishes_as_stopped():
    s = make_scheduler()
    (a,) = add(s, make_request("a", 2, max_tokens=2))
    out = s.schedule(0)
    s.update_from_output(out, sample_all(out, s), now=1.0, step=0, check_stop=lambda r: None)
    out = s.schedule(1)
    # A stop string completed by the last allowed token: stopped, not length-capped.
    s.update_from_output(out, sample_all(out, s), now=2.0, step=1, check_stop=lambda r: "STOP")
    assert a.status is RequestStatus.FINISHED_STOPPED and a.stop_reason == "STOP"
    assert s.take_finished() == [a]


def test_runner_error_fails_only_that_request():
    s = make_scheduler()
    a, b = add(s, make_request("a", 3), make_request("b", 3))
    out = s.schedule(0)
    got = s.update_from_output(out, ModelRunnerOutput(sampled_token_ids={"b": 9}, errors={"a": "boom"}),
                               now=1.0, step=0)
    assert got == [b]
    assert a.status is RequestStatus.FINISHED_ERROR and a.error == "boom" and a.num_computed_tokens == 0
    assert list(s.requests) == ["b"] and s.take_finished() == [a]
    assert ("a", "failed", "boom") in [tuple(ev) for ev in s.take_events()]


def test_preemption_takes_the_newest_running_request():
    # 4 blocks of 4 tokens: a and b prefill 8 tokens each (2 blocks each, cache full).
    s = make_scheduler(num_blocks=4)
    a, b, c = add(s, make_request("a", 8, max_tokens=8), make_request("b", 8, max_tokens=8),
                  make_request("c", 1))
    out = s.schedule(0)
    assert tokens(out) == {"a": 8, "b": 8} and s.kv.num_free_blocks == 0
    assert out.not_admitted == (("c", NotAdmittedReason.NO_FREE_BLOCKS),)
    s.update_from_output(out, sample_all(out, s), now=1.0, step=0)
    s.take_events()
    # Step 1: a's 9th token needs a 3rd block; b (newest) is preempted to make room.
    out = s.schedule(1)
    assert tokens(out) == {"a": 1} and out.preempted_ids == ("b",)
    assert len(out.scheduled[0].new_block_ids) == 1
    assert b.status is RequestStatus.PREEMPTED and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert b.output_token_ids == [9] and b.slot is None and s.kv.block_ids("b") == []
    assert ids(s.waiting) == ["b", "c"] and ids(s.running) == ["a"]          # b back at the front
    assert out.not_admitted == (("b", NotAdmittedReason.NO_FREE_BLOCKS),)         # nobody admitted
    assert [(ev.request_id, ev.kind) for ev in s.take_events()] == [("b", "preempted")]
    s.update_from_output(out, sample_all(out, s), now=2.0, step=1)
    s.check_invariants()


def test_pause_keeps_kv_but_not_the_slot_and_resume_returns():
    s = make_scheduler(max_num_seqs=2)
    a, b = add(s, make_request("a", 4), make_request("b", 4))
    out = s.schedule(0)
    s.update_from_output(out, sample_all(out, s), now=1.0, step=0)
    blocks = list(s.kv.block_ids("a"))
    assert s.pause_request("a") and not s.pause_request("a")
    assert a.status is RequestStatus.PAUSED and a.slot is None and ids(s.paused) == ["a"]
    assert s.kv.block_ids("a") == blocks and "a" in s.requests
    out = s.schedule(1)
    assert tokens(out) == {"b": 1}
    s.update_from_output(out, sample_all(out, s), now=2.0, step=1)
    assert s.resume_request("a") and not s.resume_request("a")
    assert a.status is RequestStatus.RUNNING and a.slot == 0 and s.kv.block_ids("a") == blocks
    out = s.schedule(2)
    assert tokens(out) == {"b": 1, "a": 1}                      # a decodes on: its KV was kept


def test_abort_a_waiting_request():
    s = make_scheduler(max_num_seqs=1)
    a, b = add(s, make_request("a", 4), make_request("b", 4))
    s.schedule(0)
    s.finish_request("b", RequestStatus.FINISHED_ABORTED)
    s.finish_request("b", RequestStatus.FINISHED_ABORTED)             # no-op once finished
    assert not s.waiting and list(s.requests) == ["a"] and b.status is RequestStatus.FINISHED_ABORTED
    assert s.take_finished() == [b] and s.num_finished == 1
    assert [ev.kind for ev in s.take_events()][-1] == "aborted"


def test_rejected_at_admission_never_enters_the_queues():
    s = make_scheduler(num_blocks=2)                 # 8 tokens of KV in the whole cache
    bad = make_request("bad", 6, max_tokens=4)
    assert not s.add_request(bad)
    assert bad.status is RequestStatus.FINISHED_ERROR and "KV blocks" in bad.error
    assert not s.requests and not s.waiting and s.take_finished() == [bad]
    assert [ev.kind for ev in s.take_events()] == ["arrived", "rejected"]
    with pytest.raises(ValueError, match="duplicate"):
        r = make_request("x", 1)
        s.add_request(r)
        s.add_request(r)


def test_scheduled_request_starts_with_a_batch_entry():
    """The engine records ``s[:5]`` of each ScheduledRequest as its BatchEntry."""
    assert ScheduledRequest._fields[:5] == BatchEntry._fields
    s = make_scheduler()
    add(s, make_request("a", 6))
    (x,) = s.schedule(0).scheduled
    assert BatchEntry(*x[:5]) == BatchEntry("a", 0, 6, 0, True)
    assert x.new_block_ids == tuple(s.kv.block_ids("a"))


def test_block_table_copies_follow_the_table():
    s = make_scheduler(max_model_len=64)
    (a,) = add(s, make_request("a", 4, max_tokens=8))
    tables = []
    for step in range(8):
        out = s.schedule(step)
        tables.append(s.kv.block_table("a"))
        assert tables[-1] == tuple(s.kv.block_ids("a"))
        s.update_from_output(out, sample_all(out, s), now=step + 1.0, step=step)
        s.kv.check_invariants()
    # 4 prompt tokens then one per step: a new block at 5 and 9 tokens (block_size 4).
    assert [len(t) for t in tables] == [1, 2, 2, 2, 2, 3, 3, 3]
    assert tables[1] is tables[2] and tables[0] == tables[1][:1]      # copied only on change
    assert s.kv.block_table("a") == () and not s.kv._frozen              # finished: dropped
