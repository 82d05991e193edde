"""Admission control and the anti-thrash knobs (``engine.sched.admission``, ``EngineConfig``
``max_queue_time``, ``admission="slo"``, ``kv_watermark``, ``max_preemptions_per_request``):
direct scheduler examples, then random workloads through the engine with the global invariants
checked every step (``engine_invariants``, which also checks each timeout and SLO rejection against
its rule) and G7 (served requests' outputs equal a reference run without admission control)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.config import POLICIES, ConfigError, EngineConfig
from engine.vocab import NotAdmittedReason
from engine.request import RequestStatus, SamplingParams
from engine.sched.admission import Rejection, rejection_info
from engine.vocab import AdmissionRejection, EventKind
from engine.sched.scheduler import Scheduler
from tests.engine.sched.test_scheduler import add, make_request, sample_all, tokens
from tests.support.engine_driver import (Arrival, assert_outputs_match, distinct_prompt, reference_outputs,
                                         run_workload, solo_arrivals)
from tests.support.fake_runner import FakeRunner


def per_step(num_tokens: int, num_seqs: int, attn_pairs: int, context_tokens: int) -> float:
    """A toy step-time model: 10 ms per step + 1 ms per token."""
    return 0.01 + 0.001 * num_tokens


class TimedFakeRunner(FakeRunner):
    """The fake runner with a step duration (the sim clock advances by it) and the same model as
    its ``cost_model`` (what SLO admission predicts with)."""

    class cost_model:          # noqa: N801 - the attribute a simulated executor has
        predict_step_s = staticmethod(per_step)

    def execute(self, sched):
        out = super().execute(sched)
        n = sum(s.num_tokens for s in sched.scheduled)
        return dataclasses.replace(out, step_duration_s=per_step(n, len(sched.scheduled), 0, 0)
                                   if sched.scheduled else None)


# --- config -----------------------------------------------------------------------------------
@pytest.mark.parametrize("knobs, words", [
    ({"max_queue_time": 0}, "max_queue_time"), ({"max_queue_time": float("inf")}, "max_queue_time"),
    ({"admission": "maybe"}, "admission"), ({"admission": "slo", "clock": "sim"}, "slo_ttft_ms"),
    ({"admission": "slo", "slo_ttft_ms": 100.0}, "virtual clock"), ({"slo_ttft_ms": -1.0}, "slo_ttft_ms"),
    ({"kv_watermark": 1.0}, "kv_watermark"), ({"kv_watermark": -0.1}, "kv_watermark"),
    ({"max_preemptions_per_request": -1}, "max_preemptions_per_request")])
def test_bad_admission_knobs_are_refused_by_name(knobs, words):
    with pytest.raises(ConfigError, match=words):
        EngineConfig(**knobs)


def test_slo_admission_needs_a_step_time_model():
    with pytest.raises(ValueError, match="step-time model"):
        Scheduler(EngineConfig(admission="slo", slo_ttft_ms=100.0, clock="sim", num_gpu_blocks=8), 8)


def test_rejection_detail_round_trips_and_reads_damaged_as_none():
    r = Rejection(AdmissionRejection.SLO_TTFT, 3.25, 2.0, 7, 1200)
    assert rejection_info(r.to_detail()) == r
    assert "predicted TTFT 3.25 s exceeds the TTFT SLO of 2 s" in r.describe()
    assert rejection_info("{not json") is None and rejection_info('{"reason": "x"}') is None


# --- queue timeout ----------------------------------------------------------------------------
def test_a_request_waiting_past_max_queue_time_is_rejected_and_one_admitted_in_time_is_not():
    s = Scheduler(EngineConfig(block_size=4, num_gpu_blocks=64, max_num_seqs=1, max_num_batched_tokens=64,
                               max_queue_time=3.0), 64)
    a, b = make_request("a", 4, max_tokens=10), make_request("b", 4)
    a.arrival_time, b.arrival_time = 0.0, 0.0
    add(s, a, b)
    for step in range(4):              # a holds the only slot; b waits
        assert s.expire_waiting(float(step)) == []
        out = s.schedule(step)
        s.update_from_output(out, sample_all(out, s), float(step + 1), step)
    assert s.expire_waiting(3.0) == []                 # exactly max_queue_time: still waits
    assert s.expire_waiting(3.5) == ["b"]              # past it: rejected, a runs on
    assert b.status is RequestStatus.FINISHED_ERROR and "timed out: waited 3.5 s" in b.error
    kinds = [(e.request_id, e.kind) for e in s.take_events()]
    assert kinds[-2:] == [("b", EventKind.ADMISSION_REJECTED), ("b", EventKind.REJECTED)]
    assert a.status is RequestStatus.RUNNING and s.expire_waiting(100.0) == []   # admitted: never times out


def test_a_preempted_request_never_times_out():
    s = Scheduler(EngineConfig(block_size=4, num_gpu_blocks=4, max_num_seqs=2, max_num_batched_tokens=64,
                               max_queue_time=1.0), 4)
    a, b = add(s, make_request("a", 7, max_tokens=8), make_request("b", 7, max_tokens=8))
    preempted = []
    for step in range(6):
        out = s.schedule(step)
        preempted += out.preempted_ids
        s.update_from_output(out, sample_all(out, s), float(step + 1), step)
    assert preempted == ["b"] and b.status is RequestStatus.PREEMPTED
    assert s.expire_waiting(50.0) == [] and b.status is RequestStatus.PREEMPTED


# --- SLO admission ----------------------------------------------------------------------------
def test_slo_admission_rejects_once_the_queue_ahead_predicts_a_ttft_over_the_slo():
    # one step of 1 s each (at most 16 tokens a step): a 16-token prompt takes one step
    s = Scheduler(EngineConfig(block_size=4, num_gpu_blocks=256, max_num_seqs=8, max_num_batched_tokens=16,
                               admission="slo", slo_ttft_ms=3500.0, clock="sim"), 256,
                  step_time=lambda *work: 1.0)
    verdicts = [s.add_request(make_request(f"r{i}", 16), now=0.0) for i in range(6)]
    assert verdicts == [True, True, True, False, False, False]     # 4th: 4 steps of prefill > 3.5 s
    r3 = next(e for e in s.take_events() if e.kind == EventKind.ADMISSION_REJECTED and e.request_id == "r3")
    info = rejection_info(r3.detail)
    assert (info.reason, info.value, info.limit, info.num_ahead, info.num_tokens_ahead) == (AdmissionRejection.SLO_TTFT, 4.0, 3.5, 3, 48)
    out = s.schedule(0)                       # a new step: the queue ahead is summed again
    assert tokens(out) == {"r0": 16}
    assert not s.add_request(make_request("late", 16), now=0.0)      # 2 ahead + running prefill + own


def test_time_already_waited_counts_against_the_slo():
    s = Scheduler(EngineConfig(block_size=4, num_gpu_blocks=64, admission="slo", slo_ttft_ms=1000.0,
                               clock="sim"), 64, step_time=lambda *work: 0.1)
    late = make_request("late", 4)
    late.arrival_time = 0.0
    assert not s.add_request(late, now=5.0)
    assert "predicted TTFT 5.1 s" in late.error


# --- anti-thrash ------------------------------------------------------------------------------
def test_kv_watermark_keeps_blocks_free_while_others_run_but_never_blocks_an_idle_engine():
    cfg = dict(block_size=4, num_gpu_blocks=10, max_num_seqs=4, max_num_batched_tokens=64)
    s = Scheduler(EngineConfig(**cfg, kv_watermark=0.3), 10)
    a, b = add(s, make_request("a", 16, max_tokens=4), make_request("b", 12, max_tokens=4))
    out = s.schedule(0)          # a alone: 4 blocks; b would leave 10 - 4 - 3 = 3 free = the watermark
    assert tokens(out) == {"a": 16, "b": 12}
    c = add(s, make_request("c", 4, max_tokens=2))[0]
    s.update_from_output(out, sample_all(out, s), 1.0, 0)
    out = s.schedule(1)          # 2 free + 1 for c < 3 watermark blocks: c waits
    assert "c" not in tokens(out) and (c.request_id, NotAdmittedReason.NO_FREE_BLOCKS) in out.not_admitted
    idle = Scheduler(EngineConfig(**cfg, kv_watermark=0.9), 10)
    add(idle, make_request("big", 36, max_tokens=4))
    assert tokens(idle.schedule(0)) == {"big": 36}        # nothing runs: the watermark does not apply


@pytest.mark.parametrize("cap, c_preempted_before, victim", [(0, 1, "c"), (1, 0, "c"), (1, 1, "b"), (2, 1, "c")])
def test_a_request_at_the_preemption_cap_is_passed_over_for_the_next_newest(cap, c_preempted_before, victim):
    s = Scheduler(EngineConfig(block_size=2, num_gpu_blocks=6, max_num_seqs=3, max_num_batched_tokens=64,
                               max_preemptions_per_request=cap), 6)
    a, b, c = add(s, *(make_request(r, 4, max_tokens=8) for r in "abc"))
    out = s.schedule(0)                  # 2 blocks each: the cache is full
    s.update_from_output(out, sample_all(out, s), 1.0, 0)
    c.num_preemptions = c_preempted_before
    out = s.schedule(1)                  # a needs a third block
    assert out.preempted_ids == (victim,)


# --- random workloads, invariants every step --------------------------------------------------
@st.composite
def admission_workloads(draw, slo: bool):
    chunked = draw(st.booleans())
    max_model_len = draw(st.integers(16, 96))
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    num_blocks = draw(st.integers(max(2, 16 // block_size), max(3, 128 // block_size)))
    config = EngineConfig(
        block_size=block_size, num_gpu_blocks=num_blocks, max_model_len=max_model_len,
        max_num_seqs=draw(st.integers(1, 5)),
        max_num_batched_tokens=(draw(st.integers(1, 64)) if chunked
                                else draw(st.integers(max_model_len, max_model_len + 32))),
        enable_chunked_prefill=chunked, policy=draw(st.sampled_from(POLICIES)),
        enable_prefix_caching=draw(st.booleans()),
        clock="sim" if slo else "virtual",
        max_queue_time=draw(st.one_of(st.none(), st.floats(0.05, 2.0) if slo else st.integers(1, 12).map(float))),
        admission="slo" if slo else "all",
        slo_ttft_ms=draw(st.floats(20.0, 2000.0)) if slo else None,
        kv_watermark=draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
        max_preemptions_per_request=draw(st.sampled_from([0, 0, 1, 2])))
    arrivals = []
    for i in range(draw(st.integers(1, 12))):
        n = draw(st.sampled_from([1, 1, 1, 2]))
        prio = draw(st.integers(0, 2)) if config.policy == "priority" else 0
        params = SamplingParams(max_tokens=draw(st.integers(1, 24)), ignore_eos=True, priority=prio, n=n,
                                seed=i if n > 1 else None, temperature=1.0 if n > 1 else 0.0)
        arrivals.append(Arrival(f"r{i}", draw(st.integers(0, 10)),
                                distinct_prompt(i, draw(st.integers(1, 48))), params))
    return config, arrivals


def _check(config: EngineConfig, arrivals, runner=None) -> None:
    result = run_workload(config, arrivals, runner=runner, max_steps=3000)
    plain = config.replace(admission="all", max_queue_time=None, kv_watermark=0.0, max_preemptions_per_request=0,
                           clock="virtual")
    assert_outputs_match(result, reference_outputs(plain, solo_arrivals(arrivals)))
    for rid, req in result.requests.items():
        if rid in result.rejected and req.error and ("timed out" in req.error or "predicted TTFT" in req.error):
            assert not req.output_token_ids and req.num_preemptions == 0
            event("timed out" if "timed out" in req.error else "rejected by the SLO")
    cap = config.max_preemptions_per_request
    if cap and any(r.num_preemptions > cap for r in result.requests.values()):
        event("preempted past the cap (no other victim)")
    # thrash per request, as the tables show it: tokens computed again below the most it had
    high: dict[str, int] = {}
    again: dict[str, int] = {}
    for rec in result.records:
        for x in rec.scheduled:
            end = x.num_computed_tokens + x.num_tokens
            again[x.request_id] = again.get(x.request_id, 0) + max(
                0, min(end, high.get(x.request_id, 0)) - x.num_computed_tokens)
            high[x.request_id] = max(high.get(x.request_id, 0), end)
    views = {v.request_id: v for v in result.states[-1].recently_finished} if result.states else {}
    for rid, req in result.requests.items():
        if rid in views:
            assert views[rid].num_recomputed_tokens == again.get(rid, 0), rid
            if req.num_preemptions == 0:
                assert views[rid].num_recomputed_tokens == 0, rid
    if any(again.values()):
        event("tokens recomputed")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(admission_workloads(slo=False))
def test_random_workloads_with_timeouts_watermark_and_cap_keep_invariants(w):
    _check(*w)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(admission_workloads(slo=True))
def test_random_workloads_with_slo_admission_keep_invariants(w):
    config, arrivals = w
    _check(config, arrivals, TimedFakeRunner(config.num_gpu_blocks, config.block_size))
