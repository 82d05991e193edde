"""Prefix-cache hits split by where they come from: hits on KV other requests computed (the
sharing a prefix cache exists for) and hits of a request re-reading its own KV when it is admitted
again after a recompute preemption (the cache softening thrash), each as a share of the prompt
tokens, next to the trace's ideal (``recordings.workloads.prefix_blocks``: an infinite cache in
arrival order, counting only hits between requests). From the steps' ``prefix_cache_hits`` and
the ``hit`` block events of re-admissions (``recordings.metrics.run_metrics.recompute_rows``). No Qt."""
from __future__ import annotations

from dataclasses import dataclass

from recordings.file.reader import Reader
from recordings.metrics.run_metrics import recompute_rows


@dataclass(frozen=True)
class PrefixHitSplit:
    """Tokens found in the prefix cache: ``num_hit_tokens`` in all, ``num_readmission_hit_tokens``
    of them at re-admissions after a preemption (the request's own KV, mostly), out of the run's
    ``num_prompt_tokens``; ``ideal_hit_rate``: the trace's ideal share of prompt tokens (None
    when the trace has no prefix structure or the run was not a trace replay). Every hit is a
    prefill token not computed: ``num_hit_tokens`` is the prefill saved."""

    num_prompt_tokens: int
    num_hit_tokens: int
    num_readmission_hit_tokens: int
    ideal_hit_rate: float | None = None

    @property
    def num_shared_hit_tokens(self) -> int:
        """Hits on other requests' KV (first admissions)."""
        return max(self.num_hit_tokens - self.num_readmission_hit_tokens, 0)

    def share(self, tokens: int) -> float | None:
        return tokens / self.num_prompt_tokens if self.num_prompt_tokens else None

    @property
    def shared_rate(self) -> float | None:
        """Hits from other requests as a share of the prompt tokens (comparable to the ideal)."""
        return self.share(self.num_shared_hit_tokens)

    @property
    def readmission_rate(self) -> float | None:
        """Own-KV hits after preemption as a share of the prompt tokens."""
        return self.share(self.num_readmission_hit_tokens)

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in ``RunSummary.format_table``'s two-column style."""
        def pct(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1%}"
        ideal = "" if self.ideal_hit_rate is None else f" (trace ideal {pct(self.ideal_hit_rate)})"
        return [f"{'prefix hits from others':<{width}}  {self.num_shared_hit_tokens:,} tokens, "
                f"{pct(self.shared_rate)} of prompt tokens{ideal}",
                f"{'prefix hits, own KV again':<{width}}  {self.num_readmission_hit_tokens:,} tokens, "
                f"{pct(self.readmission_rate)} of prompt tokens (re-admissions after preemption)",
                f"{'prefill tokens saved':<{width}}  {self.num_hit_tokens:,}"]


def summarize_prefix_hits(reader: Reader) -> PrefixHitSplit | None:
    """The :class:`PrefixHitSplit` of ``reader``'s run; None when prefix caching was off or the
    file predates the prefix-cache counters (schema < 3)."""
    info = reader.run_info()
    if not info.config.get("enable_prefix_caching") or reader.execute("PRAGMA user_version")[0][0] < 3:
        return None
    block_size = int(info.config.get("block_size", 16))
    (hits,), = reader.execute("SELECT coalesce(sum(prefix_cache_hits), 0) FROM steps")
    (prompt,), = reader.execute("SELECT coalesce(sum(num_prompt_tokens), 0) FROM requests")
    again = sum(hit for _, _, back, hit in recompute_rows(reader) if back is not None)
    sharing = ((info.trace or {}).get("prefix_sharing") or {})
    return PrefixHitSplit(int(prompt), int(hits), min(int(again) * block_size, int(hits)),
                          sharing.get("workload_ideal_hit_rate"))
