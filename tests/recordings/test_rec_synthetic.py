"""The synthetic run generator produces plausible, deterministic runs (the other tests rely on it)."""
from __future__ import annotations

from collections import Counter

from hypothesis import given, settings, strategies as st

from synthetic import generate


def check_plausible(run) -> None:
    state = run.initial
    for record, after in zip(run.records, run.states):
        state = state.apply(record)
        assert state == after
        live = [r for r in state.requests.values() if not r.is_finished]
        owned = [b for r in live for b in r.block_ids]
        assert len(owned) == len(set(owned)), "a block has two owners"
        assert record.num_free_blocks == record.num_total_blocks - len(owned)
        slots = [r.slot for r in state.running]
        assert None not in slots and len(slots) == len(set(slots)) <= state.max_num_seqs
        assert record.num_running == len(state.running)
        assert record.num_waiting == len(state.waiting)
        assert record.num_finished == len(state.finished)
        for s in record.scheduler_output.scheduled:
            assert state.requests[s.request_id].block_ids[:len(s.block_ids)] == s.block_ids or \
                state.requests[s.request_id].is_finished
        assert record.num_preemptions == sum(e.kind == "preempted" for e in record.events)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), num_requests=st.integers(1, 12),
       num_gpu_blocks=st.integers(4, 30), max_num_seqs=st.integers(1, 5))
def test_generated_runs_keep_the_engine_invariants(seed, num_requests, num_gpu_blocks,
                                                   max_num_seqs):
    check_plausible(generate(seed=seed, num_requests=num_requests,
                             num_gpu_blocks=num_gpu_blocks, max_num_seqs=max_num_seqs))


def test_generation_is_deterministic():
    assert generate(seed=5).records == generate(seed=5).records
    assert generate(seed=5).records != generate(seed=6).records


def test_small_run_covers_the_lifecycle(small_run):
    kinds = Counter(e.kind for r in small_run.records for e in r.events)
    for kind in ("arrived", "scheduled", "preempted", "paused", "resumed", "aborted", "failed",
                 "finished"):
        assert kinds[kind] > 0, kind
    assert any(r.scheduler_output.not_admitted for r in small_run.records)
    assert any(r.error for r in small_run.records)
    assert all(v.is_finished for v in small_run.states[-1].requests.values())
