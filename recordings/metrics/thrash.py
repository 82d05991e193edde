"""Thrash, per request: how often each request was preempted and how many tokens it computed
again, from a recording's ``preempted`` events (``engine.sched.preemption.PreemptionInfo``) and
the prefix-cache hits of the re-admissions (``recordings.metrics.run_metrics.recompute_rows``). A
request preempted over and over while its KV is recomputed each time is the thrash a watermark
or a re-preemption cap (``kv_watermark``, ``max_preemptions_per_request``) prevents. No Qt."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from recordings.file.reader import Reader
from recordings.metrics.run_metrics import recompute_rows
from recordings.metrics.stats import Percentiles
from recordings.numbers import number_text


@dataclass(frozen=True)
class ThrashSummary:
    """``preemptions_per_request``: percentiles of the preemption count over the requests
    preempted at least once; ``recomputed_per_request``: of the tokens each of them computed
    again; ``top``: the most preempted requests as (request id, preemptions, tokens recomputed),
    most first; ``num_recomputed_tokens`` of the run's ``num_computed_tokens`` (all tokens
    scheduled) and their share."""

    preemptions_per_request: Percentiles
    recomputed_per_request: Percentiles
    top: list[tuple[str, int, int]] = field(default_factory=list)
    num_recomputed_tokens: int = 0
    num_computed_tokens: int = 0

    @property
    def recomputed_share(self) -> float | None:
        """Share of all computed tokens that were computed again after a preemption, in [0, 1]."""
        return self.num_recomputed_tokens / self.num_computed_tokens if self.num_computed_tokens else None

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in ``RunSummary.format_table``'s two-column style ([] without preemptions)."""
        p, r = self.preemptions_per_request, self.recomputed_per_request
        if not p.num_samples:
            return []
        share = self.recomputed_share
        lines = [f"{'preemptions per request':<{width}}  p50 {number_text(p.p50)} / p99 {number_text(p.p99)} over the "
                 f"{p.num_samples} preempted",
                 f"{'recomputed per request':<{width}}  p50 {r.p50:,.0f} / p99 {r.p99:,.0f} tokens"
                 + (f"; {share:.1%} of all computed tokens" if share is not None else "")]
        if self.top:
            most = ", ".join(f"{rid} {n}x ({tok:,} tokens again)" for rid, n, tok in self.top)
            lines.append(f"{'most preempted':<{width}}  {most}")
        return lines


def summarize_thrash(reader: Reader, top: int = 3) -> ThrashSummary:
    """The :class:`ThrashSummary` of ``reader``'s run (schema >= 2; a schema-1 file has none)."""
    (computed,), = reader.execute("SELECT coalesce(sum(num_scheduled_tokens), 0) FROM steps")
    if reader.execute("PRAGMA user_version")[0][0] < 2:
        return ThrashSummary(Percentiles.of([]), Percentiles.of([]), num_computed_tokens=int(computed))
    counts = Counter(dict(reader.execute(
        "SELECT seq, count(*) FROM events WHERE kind = 'preempted' GROUP BY seq")))
    block_size = int(reader.run_info().config.get("block_size", 16))
    again: Counter = Counter()
    for seq, dropped, back, hit in recompute_rows(reader):
        if back is not None:
            again[seq] += max(dropped - hit * block_size, 0)
    most = sorted(counts, key=lambda q: (-counts[q], -again[q], q))[:top]
    ids = dict(reader.execute(f"SELECT seq, request_id FROM requests WHERE seq IN ({','.join('?' * len(most))})",
                              most)) if most else {}
    return ThrashSummary(Percentiles.of(list(counts.values())), Percentiles.of([again[q] for q in counts]),
                         [(str(ids.get(q, q)), int(counts[q]), int(again[q])) for q in most],
                         int(sum(again.values())), int(computed))
