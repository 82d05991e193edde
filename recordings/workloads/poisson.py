"""Poisson arrival times for a synthetic request stream (``--request-rate``).

Follows vLLM's ``benchmarks/benchmark_serving.py`` request generator (burstiness 1): the first
request is sent at t = 0 and each next one after an exponentially distributed gap of mean
``1 / rate`` seconds, so arrivals form a Poisson process of ``rate`` requests per second; a rate
of ``inf`` sends every request at t = 0. No torch, no Qt.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from recordings.workloads.traces import TraceRow


def check_request_rate(rate: float) -> None:
    """Raise ``ValueError`` naming the limit unless ``rate`` is > 0 (``inf`` allowed, NaN not)."""
    if not (rate > 0):          # also refuses NaN
        raise ValueError(f"--request-rate must be > 0 requests/s (inf = all at t=0), got {rate}")


def poisson_arrivals(num_requests: int, rate: float, seed: int = 0) -> np.ndarray:
    """Arrival times in seconds, shape ``(num_requests,)``, float64, non-decreasing, first 0.0.

    Gaps are ``numpy.random.default_rng(seed).exponential(1 / rate)`` draws (``num_requests - 1``
    of them), cumulated; ``rate = inf`` gives all zeros. The same ``(num_requests, rate, seed)``
    gives the same times. Raises ``ValueError`` for ``num_requests < 0`` or a rate that is not > 0.
    """
    check_request_rate(rate)
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    times = np.zeros(num_requests, dtype=np.float64)
    if num_requests > 1 and math.isfinite(rate):
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, num_requests - 1)
        times[1:] = np.cumsum(gaps)
    return times


def with_poisson_arrivals(rows: Sequence[TraceRow], rate: float, seed: int = 0) -> list[TraceRow]:
    """``rows`` in their order with arrival times replaced by :func:`poisson_arrivals` (one per
    row); everything else (lengths, ``hash_ids``, ``line_no``, a JSONL row's ``spec``) is kept,
    so prefix sharing survives resampling.
    Raises ``ValueError`` as :func:`poisson_arrivals`."""
    times = poisson_arrivals(len(rows), rate, seed)
    return [dataclasses.replace(row, arrival_s=float(t)) for row, t in zip(rows, times)]


def arrival_note(num_requests: int, rate: float, seed: int, replaced: str | None = None) -> str:
    """A plain-words provenance line: 'arrivals: Poisson process, 2 req/s (seed 0), ...'."""
    what = (f"all {num_requests} requests arrive at t=0 (--request-rate inf)" if math.isinf(rate)
            else f"arrivals: Poisson process at {rate:g} requests/s (exponential gaps, "
                 f"numpy default_rng seed {seed}), {num_requests} requests")
    return f"{what}; replaces {replaced}" if replaced else what
