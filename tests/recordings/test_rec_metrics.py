"""summarize() recomputes the run's metrics from rows; checked against the run computed by hand."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from recordings import Reader, RecordingWriter, summarize
from synthetic import generate, write_run


def hand_latencies(run):
    """TTFT and ITL samples from the generator's own token times (the views' ttft/mean_itl
    use the same clock: end of the producing step)."""
    ttft, itl = [], []
    for rid, view in run.states[-1].requests.items():
        steps = [r for r in run.records for t in r.new_tokens if t.request_id == rid]
        if not steps:
            continue
        times = [(r.clock + 1.0) if run.run_info["config"]["clock"] == "virtual"
                 else r.end_ns / 1e9 for r in steps]
        ttft.append(times[0] - view.arrival_time)
        assert ttft[-1] == pytest.approx(view.ttft)  # same definition as the engine's view
        itl.extend(b - a for a, b in zip(times, times[1:]))
    return ttft, itl


@pytest.mark.parametrize("clock", ["virtual", "wall"])
def test_summary_matches_the_run(tmp_path, clock):
    run = generate(seed=11, num_requests=20, num_gpu_blocks=16, max_num_seqs=4, clock=clock)
    path = tmp_path / "run.sqlite"
    write_run(run, path)
    summary = summarize(Reader(path))
    records, final = run.records, run.states[-1]
    arrivals = [a for arr in run.arrivals.values() for a in arr]

    preempted_events = sum(e.kind == "preempted" for r in records for e in r.events)
    assert preempted_events > 0
    assert summary.num_preemptions == preempted_events
    assert summary.num_requests == len(arrivals) == 20
    assert summary.num_finished_by_reason == dict(
        Counter(v.finish_reason for v in final.requests.values() if v.is_finished))
    assert summary.num_finished == len(final.requests)
    assert summary.num_steps == len(records)
    assert summary.num_prompt_tokens == sum(len(a.prompt_token_ids) for a in arrivals)
    num_out = sum(len(r.new_tokens) for r in records)
    assert summary.num_output_tokens == num_out
    assert num_out == sum(v.num_output_tokens for v in final.requests.values())
    wall = (records[-1].end_ns - records[0].start_ns) / 1e9
    assert summary.wall_duration_s == pytest.approx(wall)
    assert summary.output_tokens_per_s == pytest.approx(num_out / wall)
    assert summary.mean_batch_size == pytest.approx(
        np.mean([len(r.scheduler_output.scheduled) for r in records
                 if r.scheduler_output.scheduled]))
    assert summary.peak_kv_cache_usage == pytest.approx(max(r.kv_cache_usage for r in records))
    assert summary.time_unit == ("steps" if clock == "virtual" else "s")

    ttft, itl = hand_latencies(run)
    for got, samples in ((summary.ttft, ttft), (summary.itl, itl)):
        assert got.num_samples == len(samples) > 0
        assert [got.p50, got.p90, got.p99] == pytest.approx(
            list(np.percentile(samples, [50, 90, 99])))


def test_format_table_names_every_metric(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    write_run(small_run, path)
    table = summarize(Reader(path)).format_table()
    for label in ("requests", "finished", "steps", "prompt tokens", "output tokens",
                  "output tokens/s", "TTFT p50/p90/p99 (steps)", "ITL p50/p90/p99 (steps)",
                  "preemptions", "mean batch size", "peak KV cache usage"):
        assert label in table
    assert len(table.splitlines()) == 13


def test_an_empty_recording_summarizes_to_zeros(tmp_path, small_run):
    path = tmp_path / "empty.sqlite"
    with RecordingWriter(path, small_run.run_info):
        pass
    summary = summarize(Reader(path))
    assert (summary.num_requests, summary.num_steps, summary.num_output_tokens,
            summary.num_preemptions) == (0, 0, 0, 0)
    assert summary.ttft.p50 is None and summary.output_tokens_per_s is None
    assert "-" in summary.format_table()
