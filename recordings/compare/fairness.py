"""Fairness of a run's latencies: Jain's index and latency per prompt-length bucket.

Jain's fairness index (R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and
Discrimination for Resource Allocation in Shared Computer Systems", DEC-TR-301, 1984) of ``n``
non-negative allocations ``x_i`` is ``(sum x_i)^2 / (n * sum x_i^2)``: 1 when every ``x_i`` is
equal, ``1/n`` when one request gets everything. We apply it to *normalised latency*, a
request's end-to-end latency divided by its output tokens (the measure Orca, vLLM and
Sarathi-Serve plot as "normalized latency"), so long and short requests are compared per token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def jain_index(values: Sequence[float] | np.ndarray) -> float | None:
    """Jain's fairness index of ``values`` (float64 [n], each >= 0), in [1/n, 1]; None when
    there are no values or all are 0. Raises ``ValueError`` for a negative or non-finite value."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return None
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("Jain's index needs finite values >= 0")
    sq = float(np.sum(x * x))
    if sq == 0.0:
        return None
    return float(np.sum(x)) ** 2 / (x.size * sq)


@dataclass(frozen=True)
class Bucket:
    """Requests whose prompt length is in ``[lo, hi]`` tokens: how many, and the p50 / p99 of
    their E2E latency and of their normalised latency (E2E / output tokens), on the run's clock
    (``None`` each when the bucket holds no finished request)."""

    lo: int
    hi: int
    num_requests: int
    e2e_p50: float | None
    e2e_p99: float | None
    norm_p50: float | None

    @property
    def label(self) -> str:
        return f"{self.lo}-{self.hi}"


def bucket_edges(num_prompt_tokens: Sequence[int] | np.ndarray, num_buckets: int = 4) -> list[int]:
    """Integer bucket edges ``[e0, e1, ..., ek]`` (k <= ``num_buckets``) at the quantiles of
    ``num_prompt_tokens`` (int [n]): bucket i holds lengths in ``[e_i, e_{i+1})``, the last one
    ``[e_{k-1}, e_k]``. The same workload gives the same edges, so runs are bucketed alike.
    Raises ``ValueError`` for ``num_buckets < 1``."""
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    x = np.asarray(num_prompt_tokens, dtype=np.int64)
    if x.size == 0:
        return []
    edges = np.unique(np.quantile(x, np.linspace(0, 1, num_buckets + 1), method="lower").astype(np.int64))
    edges = list(map(int, edges))
    if edges[-1] != int(x.max()) or len(edges) == 1:
        edges.append(int(x.max()))
    return edges


def latency_by_prompt_bucket(num_prompt_tokens: np.ndarray, e2e: np.ndarray, num_output_tokens: np.ndarray,
                             edges: Sequence[int]) -> list[Bucket]:
    """One :class:`Bucket` per pair of ``edges`` (from :func:`bucket_edges`). ``e2e`` (float64
    [n], NaN = the request did not finish) and ``num_output_tokens`` (int [n]) are aligned with
    ``num_prompt_tokens`` (int [n])."""
    prompt = np.asarray(num_prompt_tokens, np.int64)
    e2e = np.asarray(e2e, np.float64)
    out_tokens = np.maximum(np.asarray(num_output_tokens, np.float64), 1.0)
    buckets = []
    for i, (lo, hi) in enumerate(zip(edges, edges[1:])):
        last = i == len(edges) - 2
        inside = (prompt >= lo) & ((prompt <= hi) if last else (prompt < hi))
        done = inside & np.isfinite(e2e)
        lat, norm = e2e[done], e2e[done] / out_tokens[done]
        pct = (lambda v, q: float(np.percentile(v, q)) if v.size else None)
        buckets.append(Bucket(int(lo), int(hi if last else hi - 1), int(inside.sum()),
                              pct(lat, 50), pct(lat, 99), pct(norm, 50)))
    return buckets
