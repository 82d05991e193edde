"""The run summary of a live run worked out from the engine's requests and step records: what
``recordings.metrics.run_metrics.summarize`` must recompute from the recording's rows (the cases' "every metric
recomputed from the recording equals the live value")."""
from __future__ import annotations

import collections

from tests.support.preemption_totals import live_preemption_totals
from recordings.metrics.stats import Percentiles


def live_summary(result):
    """The ``RunSummary`` of a virtual-clock run computed from the live engine and its records
    (what ``summarize`` must recompute from the recording's rows)."""
    from recordings.metrics.run_metrics import RunSummary

    reqs = list(result.requests.values())
    recs = result.records
    ttft = [r.ttft for r in reqs if r.ttft is not None]
    itl = [b - a for r in reqs for a, b in zip(r.token_times, r.token_times[1:])]
    reasons = collections.Counter(r.finish_reason.value if r.finish_reason else None
                                  for r in reqs if r.is_finished)
    duration = (max(x.end_ns for x in recs) - min(x.start_ns for x in recs)) / 1e9
    num_out = sum(r.num_output_tokens for r in reqs)
    batches = [len(x.scheduled) for x in recs if x.scheduled]
    assert result.engine.config.clock == "virtual"
    return RunSummary(
        clock="virtual", time_unit="steps", num_requests=len(reqs),
        num_finished_by_reason={str(k): n for k, n in reasons.items()}, num_steps=len(recs),
        num_prompt_tokens=sum(r.num_prompt_tokens for r in reqs), num_output_tokens=num_out,
        wall_duration_s=duration, output_tokens_per_s=num_out / duration if duration > 0 else None,
        ttft=Percentiles.of(ttft), itl=Percentiles.of(itl),
        num_preemptions=sum(r.num_preemptions for r in reqs),
        mean_batch_size=sum(batches) / len(batches) if batches else 0.0,
        peak_kv_cache_usage=max(x.kv_cache_usage for x in recs),
        prefix_cache_queries=sum(x.prefix_cache_queries for x in recs),
        prefix_cache_hits=sum(x.prefix_cache_hits for x in recs),
        num_computed_tokens=sum(x.total_num_scheduled_tokens for x in recs),
        **live_preemption_totals(recs, reqs, result.engine.config.block_size))
