"""summarize() recomputes the run's metrics from rows; they equal the live engine's own values."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from engine.vocab import FINISH_REASON_OF
from tests.support.engine_driver import SMALL_SEED, run_engine
from tests.support.fake_runner import FakeRunner  # noqa: E402
from tests.support.preemption_totals import live_preemption_totals  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.file.writer import RecordingWriter
from recordings.metrics.run_metrics import summarize
from engine.vocab import PreemptionReason


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
    summary = summarize(open_reader(path))
    records = run.records

    preempted_events = sum(e.kind == "preempted" for r in records for e in r.events)
    assert preempted_events > 0
    assert summary.num_preemptions == preempted_events == sum(r.num_preemptions for r in records)
    assert summary.num_requests == len(run.prompts) >= 30
    assert summary.num_finished_by_reason == dict(
        Counter(FINISH_REASON_OF[r.status] for r in run.finished.values()))
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
    assert_preemption_totals(summary, run.records, run.finished.values(), run.config.block_size)


def assert_preemption_totals(summary, records, finished, block_size: int) -> None:
    """The summary's preemption forensics equal the live run's (its records' events and the
    engine's own per-request preemption counts)."""
    live = live_preemption_totals(records, finished, block_size)
    for name, value in live.items():
        assert getattr(summary, name) == value, name
    per_request = Counter(e.request_id for r in records for e in r.events if e.kind == "preempted")
    assert per_request == Counter({r.request_id: r.num_preemptions for r in finished
                                   if r.num_preemptions})
    assert summary.num_preempted_tokens > 0
    assert summary.num_computed_tokens == sum(r.total_num_scheduled_tokens for r in records)
    rows = dict(line.split("  ", 1) for line in summary.format_table().splitlines())
    rows = {name.strip(): value.strip() for name, value in rows.items()}
    assert rows["wasted by preemption"].startswith(
        f"{live['num_preempted_tokens']} KV tokens dropped, {live['num_recomputed_tokens']} computed again (")
    n = len(per_request)
    assert rows["preemptions"].startswith(f"{summary.num_preemptions:,} in {n:,} request{'' if n == 1 else 's'}")


def test_priority_preemptions_are_totalled_from_the_events(tmp_path):
    """Priority preemptions (for whom, how many tokens, how many came back from the prefix
    cache) recomputed from the events tables with SQL equal the live run's."""
    config = EngineConfig(block_size=4, num_gpu_blocks=48, max_model_len=64, max_num_seqs=3,
                          max_num_batched_tokens=16, policy="priority", check_invariants=True,
                          enable_prefix_caching=True)
    path = tmp_path / "prio.sqlite"
    writer = RecordingWriter(path, {"config": config.to_dict(), "model": "fake"})
    engine = LLMEngine(config, FakeRunner(48, 4), 48, recorder=writer)
    finished = {}
    engine.on_finished = lambda req: finished.__setitem__(req.request_id, req)
    rng = random.Random(2)
    for i in range(24):
        engine.add_request([rng.randrange(1, 900) for _ in range(rng.randrange(4, 24))],
                           SamplingParams(max_tokens=rng.randrange(4, 16), ignore_eos=True,
                                          priority=rng.randrange(0, 4)),
                           request_id=f"r{i}", arrival_time=float(i // 3))
    records = engine.run_until_done()
    writer.close()
    summary = summarize(open_reader(path))
    assert summary.preemptions_by_reason.get(PreemptionReason.FOR_PRIORITY, 0) > 0
    assert_preemption_totals(summary, records, finished.values(), config.block_size)
    assert summary.num_recomputed_tokens < summary.num_preempted_tokens   # the cache gave some back


def test_format_table_names_every_metric(recorded):
    summary = summarize(open_reader(recorded.path))
    table = summary.format_table()
    for label in ("requests", "finished", "steps", "prompt tokens", "output tokens",
                  "output tokens/s", "TTFT p50/p90/p99 (steps)", "ITL p50/p90/p99 (steps)",
                  "preemptions", "mean batch size", "peak KV cache usage"):
        assert label in table
    assert len(table.splitlines()) == 13 + bool(summary.num_preemptions)   # + tokens recomputed
    assert "abort=" in table and "error=" in table and "length=" in table and "stop=" in table


def test_an_empty_recording_summarizes_to_zeros(tmp_path):
    path = tmp_path / "empty.sqlite"
    with RecordingWriter(path, run_engine(None, SMALL_SEED, num_requests=0).run_info):
        pass
    summary = summarize(open_reader(path))
    assert (summary.num_requests, summary.num_steps, summary.num_output_tokens,
            summary.num_preemptions) == (0, 0, 0, 0)
    assert summary.ttft.p50 is None and summary.output_tokens_per_s is None
    assert "-" in summary.format_table()
