"""Random workloads through LLMEngine + the fake runner, with the global invariants G1-G6 of
``../shared/cases/README.md`` checked after every step (see ``engine_invariants``) and G7 (outputs
equal a reference run with 10x the KV blocks and no prefix cache) at the end. Prefix caching is
drawn on or off, over prompts that may share prefixes. Some prompts sample ``n`` > 1 sequences
(parallel sampling), seeded so that the fake runner's sequences differ: the reference runs each
sequence as a request of its own with its seed (``solo_arrivals``). User actions between steps:
abort, pause, resume, ``set_priority`` (refused unless the policy is ``priority``) and the live
knob ``max_num_seqs`` (up or down: a cut preempts, swapping out between steps in swap mode)."""
from __future__ import annotations

import pytest

from functools import partial

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.config import POLICIES, EngineConfig
from engine.sched.preemption import preemption_info
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.engine_driver import (ACTIONS, VALUE_ACTIONS, Action, Arrival, assert_outputs_match,
                                         distinct_prompt, reference_outputs, run_workload, solo_arrivals,
                                         without_wall_times)
from tests.support.fake_runner import FakeRunner, ToyTokenizer, hash_next_token
from engine.vocab import PreemptionReason

STOP_TOKEN = 5
TOKENIZER = ToyTokenizer({})            # token i decodes to "<i>"


@st.composite
def workloads(draw):
    chunked = draw(st.booleans())
    policy = draw(st.sampled_from(POLICIES))
    swap = draw(st.booleans())
    max_model_len = draw(st.integers(16, 160))
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    # A cache of roughly 16..160 tokens: tight enough to preempt, big enough to serve most requests.
    num_blocks = draw(st.integers(max(1, 16 // block_size), max(2, 160 // block_size)))
    config = EngineConfig(
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        max_model_len=max_model_len,
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=(draw(st.integers(1, 96)) if chunked
                                else draw(st.integers(max_model_len, max_model_len + 64))),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.one_of(st.just(0), st.integers(1, 48))),
        policy=policy,
        enable_prefix_caching=draw(st.booleans()),
        preemption_mode=swap and "swap" or "recompute",
        num_cpu_blocks=draw(st.integers(1, 40 // block_size + 1)) if swap else 0,
    )
    num_prefixes = draw(st.sampled_from([0, 1, 2]))       # prompts starting with shared prefixes
    vocab = draw(st.sampled_from([20, 1000]))             # small vocab: EOS and stops fire often
    eos = draw(st.sampled_from([None, 3]))
    n = draw(st.integers(1, 12))
    arrivals = []
    for i in range(n):
        stop = (f"<{STOP_TOKEN}>",) if draw(st.integers(0, 4)) == 0 else ()
        priority = draw(st.integers(0, 3)) if policy == "priority" else 0
        n = draw(st.sampled_from([1, 1, 1, 2, 3]))             # parallel sampling
        seed = draw(st.one_of(st.none(), st.integers(0, 99))) if n > 1 else None
        params = SamplingParams(max_tokens=draw(st.integers(0, 32)), ignore_eos=draw(st.booleans()),
                                stop=stop, priority=priority, n=n, seed=seed,
                                temperature=0.0 if seed is None else 1.0)
        prompt_len = draw(st.integers(0, 64))              # 0 and the largest are rejected
        prompt = distinct_prompt(i, prompt_len)
        if num_prefixes:
            cut = draw(st.integers(0, prompt_len))
            prompt = distinct_prompt(100 + draw(st.integers(0, num_prefixes - 1)), cut) + prompt[cut:]
        arrivals.append(Arrival(f"r{i}", draw(st.integers(0, 12)), prompt, params))
    actions = draw(st.lists(st.builds(Action, st.integers(0, 40), st.sampled_from(ACTIONS + VALUE_ACTIONS),
                                      st.sampled_from([a.request_id for a in arrivals]),
                                      st.integers(1, 6)), max_size=10))
    fail_steps = draw(st.lists(st.integers(0, 60), max_size=1))
    return config, vocab, eos, arrivals, actions, fail_steps


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_random_workloads_keep_invariants_and_outputs(w):
    config, vocab, eos, arrivals, actions, fail_steps = w
    fn = partial(hash_next_token, vocab_size=vocab)
    runner = FakeRunner(config.num_gpu_blocks, config.block_size, fn, fail_steps=fail_steps,
                        num_cpu_blocks=config.num_cpu_blocks)
    result = run_workload(config, arrivals, actions, runner=runner, tokenizer=TOKENIZER,
                          eos_token_id=eos, max_steps=3000)
    reference = reference_outputs(config, solo_arrivals(arrivals), tokenizer=TOKENIZER, eos_token_id=eos,
                                  next_token_fn=fn)
    assert_outputs_match(result, reference)
    kinds = {e.kind + (":paused" if "paused" in e.detail else "") for r in result.records for e in r.events}
    for kind in sorted(kinds - {"arrived", "scheduled"}):
        event(f"event {kind}")
    event(f"policy {config.policy}")
    modes = {e.detail.split('"mode":"')[1].split('"')[0] for r in result.records for e in r.events
             if e.kind == "preempted" and '"mode":"' in e.detail}
    for mode in sorted(modes):
        event(f"preemption {mode}")
    if any(s.is_prefill and s.num_computed_tokens for r in result.records for s in r.scheduled):
        event("continued prefill chunk")
    if any(r.prefix_cache_hits for r in result.records):
        event("prefix-cache hit")
    if any(len(st.shared_block) for st in result.states):
        event("block shared by live requests")
    if any(ev.kind == "forked" for r in result.records for ev in r.events):
        event("parallel sampling fork")
    if any(r.knobs for r in result.records):
        event("live knob change")
    if any(preemption_info(e.detail).reason == PreemptionReason.SLOTS_CUT for r in result.records for e in r.events
           if e.kind == "preempted"):
        event("preempted by a max_num_seqs cut")
    if runner.num_copied_blocks:
        event("copy-on-write")
    forks = [ev.request_id for r in result.records for ev in r.events if ev.kind == "forked"]
    if len(forks) > len(set(forks)):
        event("group forked again after a recompute")

    failed_steps = {r.step for r in result.records if r.error}
    assert failed_steps <= set(fail_steps)
    in_failed = {s.request_id for r in result.records if r.error for s in r.scheduled}
    in_failed |= {ev.request_id for r in result.records if r.error for ev in r.events if ev.kind == "forked"}
    for rid, req in result.requests.items():
        sp = req.sampling_params
        if req.status is RequestStatus.FINISHED_ERROR:
            knob_cut = "max_num_seqs was set to" in req.error      # a group no longer fits the slots
            assert rid in result.rejected or rid in in_failed or knob_cut, (rid, req.error)
            assert req.error
            if rid in in_failed:
                assert "injected failure" in req.error
        elif req.status is RequestStatus.FINISHED_STOPPED:
            last = req.output_token_ids[-1]
            if req.stop_reason == "eos":
                assert not sp.ignore_eos and last == eos
            else:
                # The stop string fired on its first occurrence and was cut from the text.
                assert req.stop_reason == f"<{STOP_TOKEN}>" and last == STOP_TOKEN
                assert STOP_TOKEN not in req.output_token_ids[:-1]
                assert req.output_text == TOKENIZER.decode(req.output_token_ids[:-1])
        elif req.status is RequestStatus.FINISHED_LENGTH:
            assert req.num_output_tokens == sp.max_tokens
            if sp.stop:
                assert STOP_TOKEN not in req.output_token_ids
            if eos is not None and not sp.ignore_eos:
                assert eos not in req.output_token_ids
        if req.status is not RequestStatus.FINISHED_ERROR and sp.stop:
            streamed = "".join(t.text for t in result.streamed.get(rid, []))
            assert streamed == req.output_text, (rid, streamed, req.output_text)


def test_heavy_pressure_workload_preempts_and_matches_reference():
    """A fixed workload that surely preempts (the random one may not): 12 requests over 10 blocks."""
    config = EngineConfig(block_size=4, num_gpu_blocks=10, max_model_len=64, max_num_seqs=6,
                          max_num_batched_tokens=16, long_prefill_token_threshold=8)
    arrivals = [Arrival(f"r{i}", i // 3, distinct_prompt(i, 3 + 2 * i), SamplingParams(max_tokens=12))
                for i in range(12)]
    actions = [Action(4, "pause", "r1"), Action(9, "resume", "r1"), Action(6, "abort", "r5")]
    result = run_workload(config, arrivals, actions)
    assert result.num_preemptions > 0
    assert_outputs_match(result, reference_outputs(config, arrivals))
    assert result.requests["r5"].status is RequestStatus.FINISHED_ABORTED
    assert all(ok for _, ok in result.action_results)


def test_future_arrival_time_equals_adding_at_that_step():
    """``add_request(arrival_time=s)`` under the virtual clock behaves like adding before step s."""
    from engine.engine import LLMEngine

    config = EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=2, max_num_batched_tokens=8)
    arrivals = [Arrival("a", 0, distinct_prompt(0, 10), SamplingParams(max_tokens=5)),
                Arrival("b", 3, distinct_prompt(1, 6), SamplingParams(max_tokens=5))]
    stepped = run_workload(config, arrivals)
    engine = LLMEngine(config, FakeRunner(16, 4), 16)
    done = engine.collect_finished()
    for a in arrivals:
        engine.add_request(list(a.prompt), a.params, request_id=a.request_id, arrival_time=float(a.arrive_step))
    assert engine.next_arrival_time == 3.0
    records = engine.run_until_done(max_steps=100)
    # The same records, step for step (but for wall-clock timings): batches, arrivals, tokens,
    # block events, transitions, not-admitted reasons.
    assert [without_wall_times(r) for r in records] == [without_wall_times(r) for r in stepped.records]
    assert not engine.requests and done["b"].arrival_step == 3
    assert {k: r.output_token_ids for k, r in done.items()} == stepped.outputs()


def test_parked_kv_never_stalls_waiting_requests():
    """A paused request holding most of the cache must not leave a waiting request stuck (G5):
    its KV is taken, and it recomputes when resumed."""
    config = EngineConfig(block_size=4, num_gpu_blocks=4, max_model_len=64, max_num_seqs=2,
                          max_num_batched_tokens=16)
    arrivals = [Arrival("P", 0, distinct_prompt(0, 10), SamplingParams(max_tokens=4)),
                Arrival("W", 2, distinct_prompt(1, 10), SamplingParams(max_tokens=4))]
    result = run_workload(config, arrivals, [Action(2, "pause", "P"), Action(30, "resume", "P")])
    assert result.finish_step("W") < 10
    assert result.requests["P"].num_preemptions == 1
    assert_outputs_match(result, reference_outputs(config, arrivals))


def test_parked_kv_yields_to_a_growing_running_request():
    """A running request that needs a block takes a paused request's KV before preempting itself."""
    config = EngineConfig(block_size=4, num_gpu_blocks=6, max_model_len=64, max_num_seqs=2,
                          max_num_batched_tokens=16)
    arrivals = [Arrival("A", 0, distinct_prompt(0, 8), SamplingParams(max_tokens=12)),
                Arrival("P", 0, distinct_prompt(1, 8), SamplingParams(max_tokens=12))]
    result = run_workload(config, arrivals, [Action(2, "pause", "P"), Action(40, "resume", "P")])
    a, p = result.requests["A"], result.requests["P"]
    assert a.num_preemptions == 0 and p.num_preemptions == 1
    assert result.finish_step("A") == 11          # never stalled: prefill at step 0 + 11 decodes
    assert_outputs_match(result, reference_outputs(config, arrivals))


def test_long_prefill_cap_is_ignored_without_chunked_prefill():
    """Without chunked prefill a prompt is never split, so a cap below its length must not leave it
    waiting forever (it did: the capped chunk never covered the prompt)."""
    config = EngineConfig(block_size=4, num_gpu_blocks=16, max_model_len=32, max_num_seqs=2,
                          max_num_batched_tokens=32, enable_chunked_prefill=False,
                          long_prefill_token_threshold=4)
    arrivals = [Arrival("a", 0, distinct_prompt(0, 10), SamplingParams(max_tokens=3)),
                Arrival("b", 1, distinct_prompt(1, 20), SamplingParams(max_tokens=3))]
    result = run_workload(config, arrivals)
    assert [(s.request_id, s.num_tokens) for r in result.records for s in r.scheduled
            if s.is_prefill] == [("a", 10), ("b", 20)]
    assert_outputs_match(result, reference_outputs(config, arrivals))


def test_prefix_sharing_under_pressure_matches_reference():
    """A fixed workload that surely shares, evicts and preempts with prefix caching on (the random
    one may not): 12 requests with one of two 12-token prefixes over 12 blocks, a pause and an
    abort; outputs equal the reference run (no cache, 10x blocks)."""
    config = EngineConfig(block_size=4, num_gpu_blocks=12, max_model_len=64, max_num_seqs=4,
                          max_num_batched_tokens=16, enable_prefix_caching=True)
    arrivals = [Arrival(f"r{i}", i, distinct_prompt(100 + i % 2, 12) + distinct_prompt(i, 2 + i % 5),
                        SamplingParams(max_tokens=10)) for i in range(12)]
    actions = [Action(5, "pause", "r2"), Action(12, "resume", "r2"), Action(8, "abort", "r5")]
    result = run_workload(config, arrivals, actions)
    kinds = {ev.kind for r in result.records for ev in r.block_events}
    assert {"hit", "cached", "evicted"} <= kinds and result.num_preemptions > 0
    assert any(len(st.shared_block) for st in result.states)
    assert_outputs_match(result, reference_outputs(config, arrivals))


def test_max_num_seqs_cut_swaps_out_between_steps_and_back_in():
    """Found by the random workloads: lowering max_num_seqs to 1 swaps the request in the cut
    slot out between steps; the next step swaps it back in (FIFO, before any admission) and
    computes further, and its outputs still equal the reference."""
    config = EngineConfig(block_size=8, num_gpu_blocks=2, max_model_len=16, max_num_seqs=2,
                          max_num_batched_tokens=16, enable_chunked_prefill=False, policy="priority",
                          preemption_mode="swap", num_cpu_blocks=1)
    arrivals = [Arrival("r0", 5, (0, 18, 38, 60), SamplingParams(max_tokens=6, stop=(f"<{STOP_TOKEN}>",))),
                Arrival("r5", 0, (655,), SamplingParams(max_tokens=6))]
    fn = partial(hash_next_token, vocab_size=20)
    result = run_workload(config, arrivals, [Action(10, "max_num_seqs", "r0", 1)],
                          runner=FakeRunner(2, 8, fn, num_cpu_blocks=1), tokenizer=TOKENIZER, max_steps=300)
    cut = [(r.step, e.request_id) for r in result.records for e in r.events if e.kind == "preempted"]
    assert cut and all(preemption_info(e.detail).reason == PreemptionReason.SLOTS_CUT
                       for r in result.records for e in r.events if e.kind == "preempted")
    assert any(ev.kind == "swapped_in" for r in result.records for ev in r.block_events)
    assert_outputs_match(result, reference_outputs(config, arrivals, tokenizer=TOKENIZER, next_token_fn=fn))
