"""summarize() recomputes the run's metrics from rows; they equal the live engine's own values."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.state import FINISH_REASON
from engine_runs import SMALL_SEED, run_engine
from recordings import Reader, RecordingWriter, summarize


def live_latencies(run):
    """TTFT and ITL samples from the engine's own requests (their first token and token times)."""
    ttft, itl = [], []
    for req in run.finished.values():
        if req.ttft is not None:
            ttft.append(req.ttft)
        itl.extend(b - a for a, b in zip(req.token_times, req.token_times[1:]))
    return ttft, itl


@pytest.mark.parametrize("clock", ["virtual", "wall"])
def test_summary_matches_the_live_run(tmp_path, clock):
    path = tmp_path / "run.sqlite"
    # wall clock: every request arrives at once, so the schedule does not depend on timing
    run = run_engine(path, 11, num_requests=30, num_gpu_blocks=16, clock=clock,
                     arrivals_per_step=0.5 if clock == "virtual" else 0)
    summary = summarize(Reader(path))
    records = run.records

    preempted_events = sum(e.kind == "preempted" for r in records for e in r.events)
    assert preempted_events > 0
    assert summary.num_preemptions == preempted_events == sum(r.num_preemptions for r in records)
    assert summary.num_requests == len(run.prompts) >= 30
    assert summary.num_finished_by_reason == dict(
        Counter(FINISH_REASON[r.status.value] for r in run.finished.values()))
    assert summary.num_finished == len(run.finished) == len(run.prompts)
    assert summary.num_steps == len(records)
    assert summary.num_prompt_tokens == sum(len(p) for p in run.prompts.values())
    num_out = sum(len(r.new_tokens) for r in records)
    assert summary.num_output_tokens == num_out
    assert num_out == sum(r.num_output_tokens for r in run.finished.values())
    wall = (records[-1].end_ns - records[0].start_ns) / 1e9
    assert summary.wall_duration_s == pytest.approx(wall)
    assert summary.output_tokens_per_s == pytest.approx(num_out / wall)
    assert summary.mean_batch_size == pytest.approx(
        np.mean([len(r.scheduled) for r in records if r.scheduled]))
    assert summary.peak_kv_cache_usage == pytest.approx(max(r.kv_cache_usage for r in records))
    assert summary.time_unit == ("steps" if clock == "virtual" else "s")

    ttft, itl = live_latencies(run)
    for got, samples in ((summary.ttft, ttft), (summary.itl, itl)):
        assert got.num_samples == len(samples) > 0
        assert [got.p50, got.p90, got.p99] == pytest.approx(
            list(np.percentile(samples, [50, 90, 99])))


def test_format_table_names_every_metric(recorded):
    table = summarize(Reader(recorded.path)).format_table()
    for label in ("requests", "finished", "steps", "prompt tokens", "output tokens",
                  "output tokens/s", "TTFT p50/p90/p99 (steps)", "ITL p50/p90/p99 (steps)",
                  "preemptions", "mean batch size", "peak KV cache usage"):
        assert label in table
    assert len(table.splitlines()) == 13
    assert "abort=" in table and "error=" in table and "length=" in table and "stop=" in table


def test_an_empty_recording_summarizes_to_zeros(tmp_path):
    path = tmp_path / "empty.sqlite"
    with RecordingWriter(path, run_engine(None, SMALL_SEED, num_requests=0).run_info):
        pass
    summary = summarize(Reader(path))
    assert (summary.num_requests, summary.num_steps, summary.num_output_tokens,
            summary.num_preemptions) == (0, 0, 0, 0)
    assert summary.ttft.p50 is None and summary.output_tokens_per_s is None
    assert "-" in summary.format_table()
