"""The preemption totals of ``recordings.metrics.run_metrics.RunSummary`` worked out from a live run (its
``StepRecord`` s and the engine's requests), for the tests that compare them with what
``recordings.metrics.run_metrics.summarize`` recomputes from the recording with SQL."""
from __future__ import annotations

from collections import Counter

from engine.sched.preemption import preemption_info
from engine.vocab import BlockEventKind, PreemptionMode


def live_preemption_totals(records, requests, block_size: int) -> dict:
    """``num_preempted_requests``, ``max_preemptions_per_request`` and ``preemptions_by_reason``
    from the engine's requests and the events; ``num_preempted_tokens`` (KV dropped by recompute
    preemptions) and ``num_recomputed_tokens`` (of those, what the request's next admission
    computes again: all but the blocks it hit in the prefix cache; nothing if it never came
    back) from the records."""
    counts = [r.num_preemptions for r in requests if r.num_preemptions]
    reasons: Counter = Counter()
    dropped = recomputed = 0
    for i, rec in enumerate(records):
        for e in rec.events:
            if e.kind != "preempted":
                continue
            info = preemption_info(e.detail)
            reasons[info.reason] += 1
            if info.mode not in (PreemptionMode.RECOMPUTE, PreemptionMode.SWAP_FALLBACK):
                continue
            dropped += info.num_tokens
            back = next((later for later in records[i + 1:] if any(
                x.kind == "scheduled" and x.request_id == e.request_id for x in later.events)), None)
            if back is not None:
                hit = sum(len(b.block_ids) for b in back.block_events
                          if b.kind == BlockEventKind.HIT and b.request_id == e.request_id)
                recomputed += max(info.num_tokens - hit * block_size, 0)
    return {"num_preempted_requests": len(counts), "max_preemptions_per_request": max(counts, default=0),
            "preemptions_by_reason": dict(reasons), "num_preempted_tokens": dropped,
            "num_recomputed_tokens": recomputed}
