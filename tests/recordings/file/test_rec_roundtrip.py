"""Record the real engine, read it back: every state and record equals the live one."""
from __future__ import annotations

import pytest

import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from engine.state.source import StepSource
from engine.state.state import NUM_RECENTLY_FINISHED
from tests.support.engine_driver import EngineRun, run_engine
from recordings.file.open_reader import open_reader
from recordings.file import reader as reader_module


def assert_replays(run: EngineRun, path, num_random: int | None = None) -> None:
    """Every state and record of ``run`` comes back equal from the recording at ``path``: in step
    order, then in a random order through a tiny cache (``num_random`` steps, default all)."""
    with open_reader(path, cache_size=4) as reader:
        n = len(run.records)
        assert reader.latest_step() == n - 1
        assert reader.state_at(-1) == run.initial
        for k in range(n):
            assert reader.state_at(k) == run.states[k], f"state after step {k}"
        order = list(range(-1, n))
        random.Random(n).shuffle(order)  # scrubbing in any order
        for k in order[:num_random]:
            expected = run.initial if k < 0 else run.states[k]
            assert reader.state_at(k) == expected, f"state after step {k} (random order)"
        assert reader.records(0, n) == run.records
        for start in range(0, n, max(7, n // 50)):
            assert reader.records(start, start + 5) == run.records[start:start + 5]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), num_requests=st.integers(0, 12),
       num_gpu_blocks=st.integers(4, 24), max_num_seqs=st.integers(1, 4),
       keyframe_interval=st.integers(1, 12), clock=st.sampled_from(["virtual", "wall"]),
       num_prefixes=st.sampled_from([0, 0, 1, 3]))
def test_every_state_and_record_round_trips(seed, num_requests, num_gpu_blocks, max_num_seqs,
                                            keyframe_interval, clock, num_prefixes):
    """Also with prefix caching on over prompts sharing prefixes (shared and cached-free blocks
    in the states, hit / cached / evicted block events in the records)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.sqlite"
        run = run_engine(path, seed, num_requests=num_requests, num_gpu_blocks=num_gpu_blocks,
                         max_num_seqs=max_num_seqs, clock=clock, num_prefixes=num_prefixes,
                         enable_prefix_caching=num_prefixes > 0,
                         writer_kwargs={"keyframe_interval": keyframe_interval})
        assert_replays(run, path)


def test_round_trip_with_prefix_sharing(tmp_path):
    """A longer run with prefix caching: blocks shared by several live requests, cached-free
    blocks, hits and evictions all happen, and every state and record replays exactly."""
    path = tmp_path / "shared.sqlite"
    run = run_engine(path, seed=5, num_requests=300, num_gpu_blocks=24, max_num_seqs=4,
                     num_prefixes=2, enable_prefix_caching=True, arrivals_per_step=1.0,
                     writer_kwargs={"keyframe_interval": 8})
    kinds = {ev.kind for r in run.records for ev in r.block_events}
    assert {"hit", "cached", "evicted", "freed", "allocated"} <= kinds
    assert any(len(s.shared_block) for s in run.states), "no block was ever shared by two live requests"
    assert any(s.cached_free_mask().any() for s in run.states)
    assert sum(r.prefix_cache_hits for r in run.records) > 0
    assert_replays(run, path, num_random=100)


@pytest.mark.slow
def test_round_trip_with_thousands_of_finished_requests(tmp_path):
    """State after every step of a long run (the state holds live requests only, the finished
    ones leave it) equals ``state_at(k)``; keyframes are cut by the writer's own policy."""
    path = tmp_path / "long.sqlite"
    run = run_engine(path, seed=3, num_requests=2500, num_gpu_blocks=40, max_num_seqs=16,
                     max_num_batched_tokens=64, max_output=16, arrivals_per_step=1.0,
                     p_action=0.05, fail_steps=(40, 700, 1100))
    assert len(run.finished) == len(run.prompts) >= 2500
    assert sum(r.num_preemptions for r in run.records) > 100
    assert max(len(s) for s in run.states) < 100  # live requests only
    assert_replays(run, path, num_random=300)
    with open_reader(path) as reader:
        (keyframes,), = reader.execute("SELECT count(*) FROM keyframes")
        assert 1 < keyframes < len(run.records) / 8


def test_reader_id_cache_stays_bounded_and_replays_stay_equal(recorded, monkeypatch):
    # a cache of 4 request numbers, loaded 2 either side at a time: it starts over again and again
    monkeypatch.setattr(reader_module, "ID_CACHE_MAX", 4)
    monkeypatch.setattr(reader_module, "ID_WINDOW", 2)
    # at most the cap plus one load (a window of 5, or a keyframe's requests): fewer than the run's
    bound = 4 + max(5, max(len(s) for s in recorded.states))
    assert bound < len(recorded.prompts)
    with open_reader(recorded.path, cache_size=1) as reader:
        for k in range(len(recorded.records)):
            assert reader.state_at(k) == recorded.states[k]
            assert len(reader._ids) <= bound
        assert reader.records(0, len(recorded.records)) == recorded.records


def test_reader_is_a_step_source(recorded):
    reader: StepSource = open_reader(recorded.path)
    assert reader.run_info() == recorded.run_info
    assert reader.latest_step() == len(recorded.records) - 1


def test_state_at_clamps_out_of_range_steps(recorded):
    reader = open_reader(recorded.path)
    assert reader.state_at(-50) == recorded.initial
    assert reader.state_at(10**6) == recorded.final
    assert reader.records(-10, 0) == []
    assert reader.records(10**6, 10**6 + 5) == []


def test_keyframes_every_interval(recorded):
    reader = open_reader(recorded.path)
    steps = [s for (s,) in reader.execute("SELECT step FROM keyframes ORDER BY step")]
    assert steps == list(range(-1, len(recorded.records), 8))
    assert reader.execute("SELECT keyframe_interval FROM runs") == [(8,)]


def test_request_text_timeline_and_info(recorded):
    reader = open_reader(recorded.path)
    final_views = {v.request_id: v for v in recorded.final.finished}
    assert len(recorded.finished) < NUM_RECENTLY_FINISHED and set(final_views) == set(recorded.prompts)
    for rid, req in recorded.finished.items():
        tokens = [(r.step, t) for r in recorded.records for t in r.new_tokens
                  if t.request_id == rid]
        text = reader.request_text(rid, 10**6)
        assert text == "".join(t.text for _, t in tokens) == req.output_text
        if tokens:
            first_step = tokens[0][0]
            assert reader.request_text(rid, first_step - 1) == ""
            assert reader.request_text(rid, first_step) == tokens[0][1].text
        events = [(r.step, e.kind, e.detail) for r in recorded.records for e in r.events
                  if e.request_id == rid]
        timeline = reader.request_timeline(rid)
        assert [(e.step, e.kind, e.detail) for e in timeline] == events
        assert all(e.clock == recorded.records[e.step].clock for e in timeline)
        info = reader.request_info(rid)
        view = final_views[rid]
        assert info.prompt_token_ids == tuple(recorded.prompts[rid])
        assert info.sampling["max_tokens"] == req.sampling_params.max_tokens
        assert info.sampling.get("stop", []) == list(req.sampling_params.stop)    # at its default: left out
        assert info.num_prompt_tokens == view.num_prompt_tokens
        assert (info.status, info.finish_reason, info.num_output_tokens, info.ttft,
                info.mean_itl, info.num_preemptions, info.error) == (
            view.status, view.finish_reason, view.num_output_tokens, view.ttft,
            view.mean_itl, view.num_preemptions, view.error)
        assert info.finish_step == max(r.step for r in recorded.records
                                       if any(t.request_id == rid for t in r.transitions))
    arrived = [a.request_id for r in recorded.records for a in r.arrivals]
    assert reader.request_ids() == arrived and sorted(arrived) == sorted(recorded.prompts)
    assert reader.request_info("nope") is None
    assert reader.request_text("nope", 5) == ""
    assert reader.request_timeline("nope") == []
