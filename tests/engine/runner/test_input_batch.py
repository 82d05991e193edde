"""The runner's own per-request state (``engine.runner.input_batch``) and the diff-shaped scheduler
output that feeds it (``engine.runner.sync``): random workloads compared with the scheduler
every step, the diffs of preemption / prefix hits / parallel sampling, dense rows, and the
vectorized slot mapping against the per-token construction it replaced."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.runner.attention import PagedAttentionMetadata
from engine.config import EngineConfig
from engine.runner.input_batch import InputBatch
from engine.outputs import CachedRequestData, ModelRunnerOutput, NewRequestData, ScheduledRequest, SchedulerOutput
from engine.request import Request, SamplingParams
from engine.runner.sampling_tensors import derived_seed
from engine.sched.scheduler import Scheduler
from tests.support.engine_driver import run_workload
from tests.support.fake_runner import FakeRunner, ToyTokenizer, hash_next_token
from tests.engine.sched.test_scheduler_invariants import workloads

import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine


def per_token_slots(query_lens, context_lens, tables, block_size) -> list[int]:
    """The slot mapping as the runner built it before: one Python step per token."""
    slots = []
    for q, ctx, table in zip(query_lens, context_lens, tables):
        for pos in range(ctx - q, ctx):
            slots.append(table[pos // block_size] * block_size + pos % block_size)
    return slots


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_runner_state_equals_the_schedulers_requests_after_every_step(w):
    """Random workloads (recompute and swap preemption, aborts, pauses, live max_num_seqs cuts,
    parallel sampling, prefix caching): after every step the fake runner's InputBatch holds
    the requests the scheduler thinks it holds, with the same token ids, num_computed_tokens,
    block tables and sampling parameters (the harness's check, ``runner_state``), also after a
    step whose forward pass failed (its requests fail and are dropped the next step)."""
    config, vocab, eos, arrivals, actions, fail_steps = w
    runner = FakeRunner(config.num_gpu_blocks, config.block_size, partial(hash_next_token, vocab_size=vocab),
                        fail_steps=fail_steps, num_cpu_blocks=config.num_cpu_blocks)
    result = run_workload(config, arrivals, actions, runner=runner, tokenizer=ToyTokenizer({}),
                          eos_token_id=eos, max_steps=3000)
    assert not runner.violations
    entries = [s.request_id for rec in result.records for s in rec.scheduled]
    if len(entries) > len(set(entries)):        # someone ran in two steps: held after the first
        assert runner.num_state_checks > 0


def _ids(req: Request) -> list[int]:
    return list(req.all_token_ids)


def _drive(s: Scheduler, step: int, token: int = 9):
    """One scheduler step with a runner that samples ``token`` for each request whose chunk
    reaches its end; returns the step's output."""
    out = s.schedule(step)
    sampled = {x.request_id: token for x in out.scheduled
               if x.num_computed_tokens + x.num_tokens == s.requests[x.request_id].num_tokens}
    sampled.update((rid, token) for _, rids in out.parallel_samples for rid in rids)
    s.update_from_output(out, ModelRunnerOutput(sampled_token_ids=sampled), float(step), step)
    return out


def test_new_requests_are_sent_once_then_as_a_diff_and_a_preempted_one_again_in_full():
    config = EngineConfig(block_size=4, num_gpu_blocks=4, max_model_len=16, max_num_seqs=2,
                          max_num_batched_tokens=64)
    s = Scheduler(config, 4)
    a = Request("a", list(range(6)), SamplingParams(max_tokens=8, ignore_eos=True))
    b = Request("b", list(range(10, 16)), SamplingParams(max_tokens=8, ignore_eos=True))
    s.add_request(a)
    s.add_request(b)
    first = _drive(s, 0)
    assert [n.request_id for n in first.scheduled_new_reqs] == ["a", "b"]
    assert first.scheduled_new_reqs[0] == NewRequestData("a", a.prompt_token_ids, (), a.sampling_params,
                                                         s.kv.block_table("a"), 0)
    assert first.scheduled_cached_reqs.req_ids == [] and first.finished_req_ids == ()
    second = _drive(s, 1)
    assert second.scheduled_new_reqs == ()
    assert second.scheduled_cached_reqs.req_ids == ["a", "b"]
    assert second.scheduled_cached_reqs.num_computed_tokens == [6, 6]
    assert second.num_scheduled_tokens == {"a": 1, "b": 1} and second.total_num_scheduled_tokens == 2
    step = 2
    out = _drive(s, step)
    while not out.preempted_ids:                   # decoding until the cache runs out
        step += 1
        out = _drive(s, step)
    victim = out.preempted_ids[0]
    assert victim in out.finished_req_ids           # dropped in the very step that preempted it
    while victim not in [n.request_id for n in out.scheduled_new_reqs]:
        step += 1
        out = _drive(s, step)
    sent = next(n for n in out.scheduled_new_reqs if n.request_id == victim)
    assert sent.num_computed_tokens == 0 and len(sent.output_token_ids) >= 1    # recomputes its output too


def test_a_prefix_hit_is_sent_with_its_computed_tokens_and_forked_sequences_are_new():
    config = EngineConfig(block_size=4, num_gpu_blocks=32, max_model_len=32, max_num_seqs=4,
                          max_num_batched_tokens=64, enable_prefix_caching=True)
    s = Scheduler(config, 32)
    s.add_request(Request("a", list(range(9)), SamplingParams(max_tokens=2, ignore_eos=True)))
    _drive(s, 0)
    _drive(s, 1)
    s.add_request(Request("b", list(range(9)) + [50], SamplingParams(max_tokens=2, ignore_eos=True)))
    out = _drive(s, 2)
    (new,) = out.scheduled_new_reqs
    assert new.request_id == "b" and new.num_computed_tokens == 8          # two cached blocks
    from engine.sequence_group import make_sequences
    for r in make_sequences("p", list(range(30, 37)), SamplingParams(max_tokens=2, n=3, seed=1, temperature=1.0)):
        s.add_request(r)
    out = _drive(s, 3)
    assert {n.request_id for n in out.scheduled_new_reqs} == {"p#0", "p#1", "p#2"}
    forked = {n.request_id: n for n in out.scheduled_new_reqs}["p#1"]
    assert forked.num_computed_tokens == 7 and forked.block_ids == s.kv.block_table("p#1")


def _new(rid: str, prompt, blocks, computed=0, output=(), **params) -> NewRequestData:
    return NewRequestData(rid, list(prompt), tuple(output), SamplingParams(**params), tuple(blocks), computed)


def test_rows_stay_dense_and_keep_their_contents_when_one_is_removed():
    batch = InputBatch(2, 8, 2, block_size=4)          # grows past its first capacity
    batch.add(_new("a", [1, 2, 3], [5]))
    batch.add(_new("b", [4, 5], [6], temperature=0.5, top_k=3, seed=7))
    batch.add(_new("c", range(10), [7, 8, 9], computed=4, output=(11,)))
    batch.remove("a")
    assert batch.req_ids == ["c", "b"] and batch.req_id_to_index == {"c": 0, "b": 1}
    assert batch.token_ids[0, :batch.num_tokens[0]].tolist() == list(range(10)) + [11]
    assert batch.output_token_ids(0).tolist() == [11] and batch.block_ids(0).tolist() == [7, 8, 9]
    assert int(batch.num_computed_tokens[0]) == 4
    assert (float(batch.temperature[1]), int(batch.top_k[1]), int(batch.seed[1])) == (0.5, 3, 7)
    batch.append_tokens(np.array([1, 0, 1]), np.array([40, 41, 42]))     # b twice: in order
    assert batch.output_token_ids(1).tolist() == [40, 42] and batch.output_token_ids(0).tolist() == [11, 41]
    batch.append_blocks(1, [12, 13])
    assert batch.block_ids(1).tolist() == [6, 12, 13]


def test_a_diff_naming_a_request_the_runner_does_not_hold_is_an_error():
    batch = InputBatch(2, 8, 2, block_size=4)
    with pytest.raises(ValueError, match="'x'.*does not hold"):
        batch.update(SchedulerOutput(0, (), scheduled_cached_reqs=CachedRequestData(["x"], [()], [0])))
    batch.add(_new("a", [1, 2, 3], [5]))
    with pytest.raises(ValueError, match="runs past"):
        batch.prepare([ScheduledRequest("a", 0, 4, 0, True, ())])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda bs: st.tuples(st.just(bs), st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 40)), min_size=1, max_size=8))))
def test_vectorized_slot_mapping_equals_the_per_token_construction(case):
    block_size, reqs = case
    rng = np.random.default_rng(len(reqs) * 31 + block_size)
    batch = InputBatch(2, 16, 2, block_size)
    scheduled, tables, q_lens, ctx_lens = [], [], [], []
    for i, (q, computed) in enumerate(reqs):
        ctx = computed + q
        table = rng.permutation(500)[:-(-ctx // block_size)].tolist()
        batch.add(_new(f"r{i}", rng.integers(0, 100, ctx), table, computed=computed))
        scheduled.append(ScheduledRequest(f"r{i}", i, q, computed, True, ()))
        tables.append(table)
        q_lens.append(q)
        ctx_lens.append(ctx)
    want = per_token_slots(q_lens, ctx_lens, tables, block_size)
    inp = batch.prepare(scheduled)
    assert inp.slot_mapping.tolist() == want
    assert inp.positions.tolist() == [p for q, c in zip(q_lens, ctx_lens) for p in range(c - q, c)]
    meta = PagedAttentionMetadata.build(q_lens, ctx_lens, tables, [], block_size, torch.device("cpu"))
    assert meta.slot_mapping.tolist() == want
    assert inp.sample_idx.tolist() == list(range(len(reqs)))         # every chunk ends its tokens
    assert inp.logits_idx.tolist() == (np.cumsum(q_lens) - 1).tolist()


@pytest.mark.parametrize("copy", [False, True])
def test_a_step_upload_returns_each_array_in_its_shape_and_dtype_and_grows_past_its_capacity(copy):
    from engine.runner.buffers import StepUpload

    up = StepUpload(torch.device("cpu"), capacity_bytes=16, copy=copy)
    for _ in range(2):                                       # a second step reuses the buffers
        up.add("input_ids", [5, 6, 7])
        up.add("temperature", np.array([0.5, 1.25, 0.0]), np.float32)      # 12 bytes: the next entry realigns
        up.add("block_tables", np.arange(12, dtype=np.int32).reshape(3, 4))  # past 16 bytes: grows
        up.add("mask", np.eye(2, dtype=bool), np.bool_)
        up.add("empty", np.zeros(0), np.int64)
        with pytest.raises(ValueError, match="'mask' is already staged"):
            up.add("mask", [1])
        got = up.send()
        assert got["input_ids"].tolist() == [5, 6, 7] and got["input_ids"].dtype == torch.int64
        assert got["temperature"].tolist() == [0.5, 1.25, 0.0] and got["temperature"].dtype == torch.float32
        assert got["block_tables"].tolist() == np.arange(12).reshape(3, 4).tolist()
        assert got["block_tables"].dtype == torch.int64
        assert got["mask"].tolist() == [[True, False], [False, True]] and got["empty"].shape == (0,)
    assert up.sends == (2 if copy else 0)                    # one copy per step, none on a CPU by default
    if copy:
        assert all(t.data_ptr() % 8 == 0 for t in got.values())
    with pytest.raises(ValueError, match="dtype int16 is not one of"):
        up.add("x", [1], np.int16)


def test_tokens_the_runner_did_not_sample_are_appended_from_the_diff():
    batch = InputBatch(2, 8, 2, block_size=4)
    batch.add(_new("a", [1, 2, 3], [5], output=(9,)))
    batch.update(SchedulerOutput(1, (), scheduled_cached_reqs=CachedRequestData(
        ["a"], [(6,)], [4], new_token_ids={"a": (10, 11)})))
    assert batch.output_token_ids(0).tolist() == [9, 10, 11] and int(batch.num_tokens[0]) == 6
    assert batch.block_ids(0).tolist() == [5, 6] and int(batch.num_computed_tokens[0]) == 4


def test_token_pairs_and_counters_are_the_rows_prompts_and_outputs():
    batch = InputBatch(2, 4, 2, block_size=4)          # grows past its first capacity
    batch.add(_new("a", [1, 2, 3], [5], output=(9, 9)))
    batch.add(_new("b", [4], [6]))
    batch.add(_new("c", range(10, 16), [7, 8], output=(20, 21, 22)))
    rows = np.array([2, 0, 1])
    for prompt, want in ((True, [list(range(10, 16)), [1, 2, 3], [4]]), (False, [[20, 21, 22], [9, 9], []])):
        which, ids = batch.token_pairs(rows, prompt)
        assert [ids[which == i].tolist() for i in range(3)] == want
    assert batch.sampling_counters(rows).tolist() == [3, 2, 0]
    assert batch.token_pairs(np.array([], dtype=np.int64), True)[1].tolist() == []


def test_unseeded_sampled_requests_keep_their_derived_seed_until_forgotten():
    batch = InputBatch(4, 8, 2, block_size=4, base_seed=5)
    batch.add(_new("g", [1], [1]))                                         # greedy: no stream
    batch.add(_new("x", [1], [2], temperature=1.0))
    batch.add(_new("y", [1], [3], temperature=1.0))
    batch.add(_new("s", [1], [4], temperature=1.0, seed=2 ** 64 + 3))     # seeds are taken mod 2**64
    seeds = {rid: int(batch.seed[batch.req_id_to_index[rid]]) for rid in "gxys"}
    assert seeds == {"g": 0, "x": derived_seed(5, 1), "y": derived_seed(5, 2), "s": 3}
    batch.remove("x")                                # recompute preemption: sent in full again
    batch.add(_new("x", [1], [2], output=(7,), temperature=1.0))
    assert int(batch.seed[batch.req_id_to_index["x"]]) == seeds["x"]
    batch.remove("x")
    batch.forget("x")                                # finished: the id's stream is gone
    batch.add(_new("x", [1], [2], temperature=1.0))
    assert int(batch.seed[batch.req_id_to_index["x"]]) == derived_seed(5, 3)
