"""Write a run, read it back: states and records must equal the live ones, field by field."""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from engine.source import StepSource
from recordings import Reader
from synthetic import generate, write_run


def assert_replays(run, path) -> None:
    """Every state and record of ``run`` comes back equal from the recording at ``path``."""
    with Reader(path, cache_size=4) as reader:
        n = len(run.records)
        assert reader.latest_step() == n - 1
        assert reader.state_at(-1) == run.initial
        for k in range(n):
            assert reader.state_at(k) == run.states[k], f"state after step {k}"
        order = list(range(-1, n))
        random.Random(n).shuffle(order)  # scrubbing in any order, through a tiny cache
        for k in order:
            expected = run.initial if k < 0 else run.states[k]
            assert reader.state_at(k) == expected, f"state after step {k} (random order)"
        assert reader.records(0, n) == run.records
        for start in range(0, n, 7):
            assert reader.records(start, start + 5) == run.records[start:start + 5]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), num_requests=st.integers(0, 10),
       num_gpu_blocks=st.integers(4, 24), max_num_seqs=st.integers(1, 4),
       keyframe_interval=st.integers(1, 12), clock=st.sampled_from(["virtual", "wall"]))
def test_every_state_and_record_round_trips(seed, num_requests, num_gpu_blocks, max_num_seqs,
                                            keyframe_interval, clock):
    run = generate(seed=seed, num_requests=num_requests, num_gpu_blocks=num_gpu_blocks,
                   max_num_seqs=max_num_seqs, clock=clock)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.sqlite"
        write_run(run, path, keyframe_interval=keyframe_interval)
        assert_replays(run, path)


def test_reader_is_a_step_source(recorded, small_run):
    reader: StepSource = Reader(recorded)
    assert reader.run_info() == small_run.run_info
    assert reader.latest_step() == len(small_run.records) - 1


def test_state_at_clamps_out_of_range_steps(recorded, small_run):
    reader = Reader(recorded)
    assert reader.state_at(-50) == small_run.initial
    assert reader.state_at(10**6) == small_run.states[-1]
    assert reader.records(-10, 0) == []
    assert reader.records(10**6, 10**6 + 5) == []


def test_keyframes_every_interval(recorded, small_run):
    reader = Reader(recorded)
    steps = [s for (s,) in reader.execute("SELECT step FROM keyframes ORDER BY step")]
    assert steps == list(range(-1, len(small_run.records), 8))
    assert reader.execute("SELECT keyframe_interval FROM runs") == [(8,)]


def test_request_text_timeline_and_info(recorded, small_run):
    reader = Reader(recorded)
    final = small_run.states[-1]
    for rid, view in final.requests.items():
        tokens = [(r.step, t) for r in small_run.records for t in r.new_tokens
                  if t.request_id == rid]
        assert reader.request_text(rid, 10**6) == "".join(t.text for _, t in tokens)
        if tokens:
            first_step = tokens[0][0]
            assert reader.request_text(rid, first_step - 1) == ""
            assert reader.request_text(rid, first_step) == tokens[0][1].text
        events = [(r.step, e.kind, e.detail) for r in small_run.records for e in r.events
                  if e.request_id == rid]
        timeline = reader.request_timeline(rid)
        assert [(e.step, e.kind, e.detail) for e in timeline] == events
        assert all(e.clock == small_run.records[e.step].clock for e in timeline)
        info = reader.request_info(rid)
        arrival = next(a for arr in small_run.arrivals.values() for a in arr
                       if a.request_id == rid)
        assert info.prompt_token_ids == arrival.prompt_token_ids
        assert info.sampling == arrival.sampling
        assert info.num_prompt_tokens == view.num_prompt_tokens
        assert (info.status, info.finish_reason, info.num_output_tokens, info.ttft,
                info.mean_itl, info.num_preemptions, info.error) == (
            view.status, view.finish_reason, view.num_output_tokens, view.ttft,
            view.mean_itl, view.num_preemptions, view.error)
        assert info.finish_step == max(r.step for r in small_run.records
                                       if any(v.request_id == rid for v in r.changed))
    assert reader.request_ids() == list(final.requests)
    assert reader.request_info("nope") is None
    assert reader.request_text("nope", 5) == ""
    assert reader.request_timeline("nope") == []


def test_unannounced_requests_get_a_row_from_their_view(tmp_path, small_run):
    """An engine that never calls write_request still gets requests rows (from the views)."""
    from recordings import RecordingWriter

    path = tmp_path / "run.sqlite"
    announced = {"req-3", "req-9"}  # the others are unannounced, in the same batches
    with RecordingWriter(path, small_run.run_info) as writer:
        for k, record in enumerate(small_run.records):
            for a in small_run.arrivals.get(k, []):
                if a.request_id in announced:
                    writer.write_request(a.request_id, a.arrival_step, a.arrival_time,
                                         a.prompt_token_ids, a.prompt_text, a.sampling)
            writer.write_step(record)
    reader = Reader(path)
    assert reader.request_ids() == list(small_run.states[-1].requests)
    info = reader.request_info("req-0")
    assert info.prompt_token_ids is None and info.is_finished
    for a in (a for arr in small_run.arrivals.values() for a in arr if a.request_id in announced):
        info = reader.request_info(a.request_id)
        assert (info.prompt_token_ids, info.prompt_text, info.sampling) == (
            a.prompt_token_ids, a.prompt_text, a.sampling)
    assert_replays(small_run, path)
