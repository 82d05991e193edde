"""Parallel sampling (``SamplingParams.n``) in the scheduler on its own, in the style of vLLM's
``tests/v1/core/test_scheduler.py``: a group's sequences fork onto the prompt its head prefills
once (shared full blocks, copy-on-write of the partial one), take a batch slot each, and are
preempted, swapped, paused and resumed as a group. No engine, no runner: hand-built
``ModelRunnerOutput``s."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.outputs import ModelRunnerOutput
from engine.sched.preemption import preemption_info
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from engine.sched.scheduler import Scheduler
from engine.sequence_group import make_sequences, sequence_ids, sequence_params
from engine.vocab import BlockEventKind, NotAdmittedReason

R = RequestStatus


def make_scheduler(num_blocks: int = 64, **kw) -> Scheduler:
    kw = {"block_size": 4, "max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 128} | kw
    return Scheduler(EngineConfig(num_gpu_blocks=num_blocks, **kw), num_blocks)


def add_group(s: Scheduler, rid: str, prompt_len: int, n: int, max_tokens: int = 8, **kw):
    reqs = make_sequences(rid, list(range(1, prompt_len + 1)),
                          SamplingParams(max_tokens=max_tokens, n=n, **kw))
    assert all(s.add_request(r) for r in reqs)
    return reqs


def step(s: Scheduler, k: int, token: int = 9):
    """Schedule step ``k`` and hand back a token for every request that samples in it (the
    scheduled ones whose chunk ends their tokens, and the forked ones of ``parallel_samples``)."""
    out = s.schedule(k)
    sampled = {x.request_id: token for x in out.scheduled
               if x.num_computed_tokens + x.num_tokens == s.requests[x.request_id].num_tokens}
    sampled.update((rid, token + 1 + i) for _, rids in out.parallel_samples for i, rid in enumerate(rids))
    s.update_from_output(out, ModelRunnerOutput(sampled_token_ids=sampled), now=k + 1.0, step=k)
    s.check_invariants()
    return out


def tables(s: Scheduler, reqs) -> list[list[int]]:
    return [list(s.kv.block_ids(r.request_id)) for r in reqs]


def test_n_must_be_at_least_one():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="n .*must be an integer >= 1"):
            SamplingParams(n=bad)
    assert SamplingParams().n == 1


def test_sequence_ids_and_seeds():
    assert sequence_ids("a", 1) == ["a"] and sequence_ids("a", 3) == ["a#0", "a#1", "a#2"]
    reqs = make_sequences("a", [1, 2], SamplingParams(n=3, seed=10, temperature=1.0))
    assert [r.request_id for r in reqs] == ["a#0", "a#1", "a#2"]
    assert [r.sampling_params.seed for r in reqs] == [10, 11, 12]
    assert {r.sampling_params.n for r in reqs} == {1} and all(r.group is reqs[0].group for r in reqs)
    (solo,) = make_sequences("b", [1, 2], SamplingParams(seed=3))
    assert solo.request_id == "b" and solo.group is None and solo.sampling_params.seed == 3
    assert sequence_params(SamplingParams(n=2), 1).seed is None


def test_fork_shares_full_blocks_and_copies_the_partial_one():
    s = make_scheduler()
    a0, a1, a2 = add_group(s, "a", 10, 3)            # 10 tokens: 2 full blocks + 2 tokens
    out = step(s, 0)
    # the head prefills the prompt once; the others start running without computing
    assert [(x.request_id, x.num_tokens) for x in out.scheduled] == [("a#0", 10)]
    assert [r.status for r in (a0, a1, a2)] == [R.RUNNING] * 3 and [r.slot for r in (a0, a1, a2)] == [0, 1, 2]
    head = tables(s, [a0])[0]
    assert tables(s, [a1, a2]) == [head[:2] + [3], head[:2] + [4]]
    assert [s.kv.pool.ref_cnt[b] for b in head] == [3, 3, 1]
    assert out.parallel_samples == (("a#0", ("a#1", "a#2")),) and out.blocks_to_copy == ()
    events = [(e.kind, e.request_id, e.block_ids) for e in s.kv.take_events()]
    assert events == [(BlockEventKind.ALLOCATED, "a#0", (0, 1, 2)), (BlockEventKind.FORKED, "a#1", (0, 1)),
                      (BlockEventKind.ALLOCATED, "a#1", (3,)), (BlockEventKind.FORKED, "a#2", (0, 1)),
                      (BlockEventKind.ALLOCATED, "a#2", (4,))]
    assert [e.kind for e in s.take_events() if e.request_id == "a#1"] == ["arrived", "scheduled", "forked"]
    # each sequence got its own first token from the head's row, and the prompt counts as computed
    assert [r.output_token_ids for r in (a0, a1, a2)] == [[9], [10], [11]]
    assert [r.num_computed_tokens for r in (a0, a1, a2)] == [10, 10, 10]
    assert a1.first_token_time == a0.first_token_time == 1.0

    out = step(s, 1)                                 # the copies land before this forward pass
    assert out.blocks_to_copy == ((2, 3), (2, 4)) and out.parallel_samples == ()
    assert [(x.request_id, x.num_tokens, x.num_computed_tokens, x.is_prefill) for x in out.scheduled] == [
        ("a#0", 1, 10, False), ("a#1", 1, 10, False), ("a#2", 1, 10, False)]
    assert step(s, 2).blocks_to_copy == ()


def test_a_prompt_of_whole_blocks_is_shared_whole_and_each_sequence_grows_its_own():
    s = make_scheduler()
    a0, a1 = add_group(s, "a", 8, 2)
    out = step(s, 0)
    assert tables(s, [a0, a1]) == [[0, 1], [0, 1]] and out.parallel_samples == (("a#0", ("a#1",)),)
    out = step(s, 1)
    assert out.blocks_to_copy == ()
    assert [x.new_block_ids for x in out.scheduled] == [(2,), (3,)]
    assert tables(s, [a0, a1]) == [[0, 1, 2], [0, 1, 3]]


def test_the_group_takes_a_slot_per_sequence():
    s = make_scheduler(max_num_seqs=4)
    s.add_request(make_sequences("x", [1, 2, 3], SamplingParams(max_tokens=8))[0])
    s.add_request(make_sequences("y", [4, 5, 6], SamplingParams(max_tokens=8))[0])
    add_group(s, "a", 6, 3)
    out = step(s, 0)
    # 2 slots left: the group of 3 waits, its head named with the reason
    assert [x.request_id for x in out.scheduled] == ["x", "y"]
    assert out.not_admitted == (("a#0", NotAdmittedReason.SEQ_CAP),)
    for rid in ("x", "y"):
        s.finish_request(rid, R.FINISHED_ABORTED)
    out = step(s, 1)
    assert [x.request_id for x in out.scheduled] == ["a#0"] and len(s.running) == 3


@pytest.mark.parametrize("n, knobs, message", [
    (5, {}, "n=5 sequences take 5 batch slots but max_num_seqs is 4"),
    (2, {"max_num_batched_tokens": 16}, r"prompt \(20 tokens\) is prefilled in one step, but max_num_batched_tokens is 16"),
    (2, {"long_prefill_token_threshold": 12}, "long_prefill_token_threshold is 12"),
    # 20 + 8 tokens: 7 blocks for the head, 7 - 5 shared = 2 more per other sequence
    (4, {"num_blocks": 12}, r"need 13 KV blocks \(the prompt's 5 full blocks shared\) but the whole cache has 12"),
])
def test_impossible_groups_are_rejected_naming_the_knob(n, knobs, message):
    s = make_scheduler(**knobs)
    reqs = make_sequences("a", list(range(20)), SamplingParams(max_tokens=8, n=n))
    assert not any(s.add_request(r) for r in reqs)
    assert all(r.status is R.FINISHED_ERROR and r.error == reqs[0].error for r in reqs)
    assert reqs[0].error and __import__("re").search(message, reqs[0].error), reqs[0].error
    assert not s.requests and not s.groups


def test_group_preempted_together_recomputes_with_one_prefill():
    # 8 blocks of 4: b (8 tokens) first, then the group (prompt 6 = 1 full block + 2 tokens)
    s = make_scheduler(num_blocks=8, max_num_batched_tokens=32)
    b = make_sequences("b", list(range(50, 58)), SamplingParams(max_tokens=12))[0]
    s.add_request(b)
    a0, a1, a2 = add_group(s, "a", 6, 3, max_tokens=6)
    step(s, 0)
    assert s.kv.num_free_blocks == 2 and [r.request_id for r in s.running] == ["b", "a#0", "a#1", "a#2"]
    step(s, 1)                                   # b takes a block for its 9th token
    step(s, 2)
    out = s.schedule(3)
    # each sequence needs a block for its 9th token, one is free: the head takes it, then a#1
    # finds none and the newest running request -- a#2 -- is the victim: the whole group goes,
    # the head's entry (scheduled before) is taken back
    assert out.preempted_ids == ("a#0", "a#1", "a#2")
    assert [x.request_id for x in out.scheduled] == ["b"]
    s.update_from_output(out, ModelRunnerOutput(sampled_token_ids={"b": 9}), now=4.0, step=3)
    s.check_invariants()
    assert all(r.status is R.PREEMPTED and r.num_computed_tokens == 0 and not s.kv.block_ids(r.request_id)
               for r in (a0, a1, a2))
    assert [r.request_id for r in s.waiting] == ["a#0", "a#1", "a#2"]          # head first
    infos = [preemption_info(e.detail) for e in s.take_events() if e.kind == "preempted"]
    assert [(i.mode, i.reason, i.for_request, i.num_tokens) for i in infos] == [
        ("recompute", "no_free_blocks", "", 8)] * 3
    outputs = [list(r.output_token_ids) for r in (a0, a1, a2)]
    assert [len(o) for o in outputs] == [3, 3, 3]
    s.finish_request("b", R.FINISHED_ABORTED)
    out = step(s, 4)
    # readmitted: the head alone recomputes prompt + its output; the others fork at the prompt
    assert [(x.request_id, x.num_computed_tokens, x.num_tokens) for x in out.scheduled] == [("a#0", 0, 9)]
    assert out.parallel_samples == () and [r.num_computed_tokens for r in (a1, a2)] == [6, 6]
    out = step(s, 5)
    head = s.kv.block_ids("a#0")
    assert out.blocks_to_copy == ((head[1], s.kv.block_ids("a#1")[1]), (head[1], s.kv.block_ids("a#2")[1]))
    # the others recompute their own outputs in one chunk from the end of the prompt
    assert [(x.request_id, x.num_computed_tokens, x.num_tokens, x.is_prefill) for x in out.scheduled] == [
        ("a#0", 9, 1, False), ("a#1", 6, 3, True), ("a#2", 6, 3, True)]
    assert [r.output_token_ids[:3] for r in (a0, a1, a2)] == outputs


def test_group_swapped_out_copies_shared_blocks_once_and_shares_them_again():
    s = make_scheduler(num_blocks=40, preemption_mode="swap", num_cpu_blocks=40)
    a0, a1 = add_group(s, "a", 10, 2)
    step(s, 0)
    step(s, 1)
    assert s._preempt(a1, "test") == ["a#0", "a#1"]          # one sequence preempts the group
    assert [r.status for r in (a0, a1)] == [R.SWAPPED] * 2 and list(s.swapped) == [a0, a1]
    # 11 computed tokens: 3 blocks; the head copies all, the other only its own partial block
    assert [len(s.swap.tables[r]) for r in ("a#0", "a#1")] == [3, 1]
    cpu = dict(s.swap.tables)
    out = s.schedule(2)          # (preempted between steps: out and back in within the step)
    assert [c for _, c in out.blocks_to_swap_out] == cpu["a#0"] + cpu["a#1"]
    assert [c for c, _ in out.blocks_to_swap_in] == cpu["a#0"] + cpu["a#1"]
    assert [(x.request_id, x.num_tokens) for x in out.scheduled] == [("a#0", 1), ("a#1", 1)]
    head, other = s.kv.block_ids("a#0"), s.kv.block_ids("a#1")
    assert other[:2] == head[:2] and other[2] != head[2]
    assert [s.kv.pool.ref_cnt[b] for b in head] == [2, 2, 1]
    s.check_invariants()


def test_swap_falls_back_to_recompute_for_the_whole_group():
    s = make_scheduler(num_blocks=40, preemption_mode="swap", num_cpu_blocks=3)
    a0, a1 = add_group(s, "a", 10, 2)
    step(s, 0)
    step(s, 1)
    s._preempt(a0, "test")                   # 3 + 1 CPU blocks needed, 3 free: none swaps
    assert [r.status for r in (a0, a1)] == [R.PREEMPTED] * 2 and not s.swap.tables
    assert {preemption_info(e.detail).mode for e in s.take_events() if e.kind == "preempted"} == {
        "recompute_fallback"}


def test_head_aborted_while_swapped_hands_the_shared_blocks_over():
    s = make_scheduler(num_blocks=40, preemption_mode="swap", num_cpu_blocks=40)
    a0, a1, a2 = add_group(s, "a", 10, 3)
    step(s, 0)
    step(s, 1)
    s._preempt(a0, "test")
    shared = s.swap.tables["a#0"][:2]
    s.finish_request("a#0", R.FINISHED_ABORTED)
    assert s.swap.tables["a#1"][:2] == shared and len(s.swap.tables["a#1"]) == 3
    assert len(s.swap.tables["a#2"]) == 1 and s.swap.pool.num_free_blocks == 40 - 4
    s.check_invariants()
    out = s.schedule(2)
    assert [x.request_id for x in out.scheduled] == ["a#1", "a#2"]
    assert s.kv.block_ids("a#2")[:2] == s.kv.block_ids("a#1")[:2]


def test_pause_and_resume_act_on_the_whole_group():
    s = make_scheduler()
    a0, a1, a2 = add_group(s, "a", 6, 3)
    step(s, 0)
    assert s.pause_request("a#1")
    assert [r.status for r in (a0, a1, a2)] == [R.PAUSED] * 3 and not s.running
    assert all(s.kv.block_ids(r.request_id) for r in (a0, a1, a2))       # KV kept
    assert s.resume_request("a#2")
    assert [r.status for r in (a0, a1, a2)] == [R.RUNNING] * 3 and s.running == [a0, a1, a2]
    assert not s.resume_request("a#0")                                     # not paused any more


def test_set_priority_moves_the_whole_group():
    s = make_scheduler(policy="priority")
    add_group(s, "a", 6, 2)
    assert s.set_priority("a#0", -3)
    assert [r.priority for r in s.requests.values()] == [-3, -3]


def test_sequences_finish_on_their_own_and_the_group_leaves_with_the_last():
    s = make_scheduler()
    a0, a1 = add_group(s, "a", 6, 2, max_tokens=3)
    step(s, 0)
    s.finish_request("a#0", R.FINISHED_ABORTED)
    assert s.groups.live_ids("a") == ["a#1"] and a1.status is R.RUNNING and not a0.group.is_finished
    assert s.kv.pool.ref_cnt[s.kv.block_ids("a#1")[0]] == 1     # the shared block stays held
    for k in (1, 2):
        step(s, k)
    assert a1.status is R.FINISHED_LENGTH and not s.groups and s.kv.num_free_blocks == 64
    assert a0.group.is_finished


def test_failed_prefill_fails_the_forked_sequences():
    s = make_scheduler()
    reqs = add_group(s, "a", 6, 3)
    out = s.schedule(0)
    s.update_from_output(out, ModelRunnerOutput(errors={"a#0": "boom"}), now=1.0, step=0)
    assert all(r.status is R.FINISHED_ERROR and r.error == "boom" for r in reqs)
    assert not s.requests and not s.groups and s.kv.num_free_blocks == 64


def test_a_runner_without_parallel_samples_fails_the_sequence_not_the_engine():
    s = make_scheduler()
    a0, a1 = add_group(s, "a", 6, 2)
    out = s.schedule(0)
    s.update_from_output(out, ModelRunnerOutput(sampled_token_ids={"a#0": 3}), now=1.0, step=0)
    assert a0.output_token_ids == [3] and a1.status is R.FINISHED_ERROR
    assert "no first token" in a1.error
