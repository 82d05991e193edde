"""``summarize_batching``: slot occupancy, TPOT and prefill tokens from a recording's rows, against
the same quantities computed from the live run's StepRecords and requests."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.engine_driver import run_engine
from recordings.file.open_reader import open_reader
from recordings.metrics.run_metrics import summarize_batching


@pytest.mark.parametrize("caching", [False, True])
def test_batching_metrics_match_the_live_run(tmp_path, caching):
    run = run_engine(tmp_path / "run.sqlite", seed=4, num_requests=24, fail_steps=(), p_action=0.0,
                     num_gpu_blocks=60, num_prefixes=2 * caching, enable_prefix_caching=caching)
    with open_reader(run.path) as reader:
        got = summarize_batching(reader)
    records = run.records
    assert got.time_unit == "steps"
    assert got.slot_occupancy == pytest.approx(np.mean([r.num_running for r in records]) / run.config.max_num_seqs)
    # TPOT per finished request with >= 2 tokens, from the token times of the live records
    times: dict[str, list[float]] = {}
    for r in records:
        for t in r.new_tokens:
            times.setdefault(t.request_id, []).append(r.token_time)
    tpot = sorted((ts[-1] - ts[0]) / (len(ts) - 1) for rid, ts in times.items()
                  if len(ts) >= 2 and rid in run.finished)
    assert got.tpot.num_samples == len(tpot) and got.tpot.p50 == pytest.approx(float(np.median(tpot)))
    # prefill work: every prefill chunk's tokens; with no preemption, the prompts minus the cache hits
    prefill = sum(e.num_tokens for r in records for e in r.scheduled if e.is_prefill)
    assert got.num_prefill_tokens == prefill
    hits = sum(r.prefix_cache_hits for r in records)
    assert (hits > 0) == caching
    assert not any(r.num_preemptions for r in records)      # 60 blocks: room for everyone
    admitted = sum(len(p) for rid, p in run.prompts.items()
                   if rid in run.finished and run.finished[rid].num_output_tokens)
    assert prefill == admitted - hits
