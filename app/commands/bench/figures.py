"""The figures of ``batchscope bench``, computed from the engine's step records of the run.

- Roofline floor of a step: ``engine.sim.cost_model.CostModel.step_time`` of its scheduled
  requests (``num_tokens`` and ``num_computed_tokens`` each) and its sampled rows, under
  :data:`FLOOR_PARAMS`: both peaks fully reached and no overhead, i.e. the sum over the step's
  operators of ``max(FLOPs / peak_flops, bytes / mem_bandwidth)`` (the roofline, Williams et al.,
  CACM 2009). The run's floor is the sum over its steps; its efficiency the floor / measured time.
- TTFT = first token time - arrival time; TPOT = (last - first token time) / (output tokens - 1)
  for requests with at least two tokens (vLLM's definitions, as ``recordings.metrics.serving``);
  a token's time is its step's ``token_time`` (engine clock, seconds under the wall clock).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from engine.outputs import StepRecord
from engine.sim.cost_model import CostModel, CostParams
from recordings.metrics.stats import Percentiles

FLOOR_PARAMS = CostParams.floor()


def floor_s(cost: CostModel, records: Iterable[StepRecord]) -> float:
    """Seconds of the roofline floor of ``records`` on ``cost``'s shape and device (its params
    are replaced by :data:`FLOOR_PARAMS`). Steps that scheduled nothing add 0."""
    model = cost.with_params(FLOOR_PARAMS)
    return sum(model.step_time(r.scheduled, len(r.new_tokens)) for r in records)


@dataclass(frozen=True)
class BenchFigures:
    """What ``batchscope bench`` prints. Seconds for times; ``roofline_efficiency`` is
    ``roofline_floor_s / duration_s``; peaks in FLOP/s and bytes/s."""

    num_requests: int
    num_finished: int
    num_prompt_tokens: int
    num_output_tokens: int
    num_steps: int
    duration_s: float
    output_tokens_per_s: float
    steps_per_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    roofline_floor_s: float
    roofline_efficiency: float
    peak_flops: float
    mem_bandwidth: float
    num_preemptions: int

    def to_dict(self) -> dict:
        return asdict(self)


def latencies(records: Sequence[StepRecord]) -> tuple[list[float], list[float]]:
    """TTFT samples (one per request with a token) and TPOT samples (one per request with two or
    more tokens), in the records' clock units."""
    arrival: dict[str, float] = {}
    first: dict[str, float] = {}
    last: dict[str, tuple[float, int]] = {}
    for r in records:
        for a in r.arrivals:
            arrival[a.request_id] = a.arrival_time
        for t in r.new_tokens:
            first.setdefault(t.request_id, r.token_time)
            n = last[t.request_id][1] + 1 if t.request_id in last else 1
            last[t.request_id] = (r.token_time, n)
    ttft = [first[rid] - arrival[rid] for rid in first if rid in arrival]
    tpot = [(t - first[rid]) / (n - 1) for rid, (t, n) in last.items() if n > 1]
    return ttft, tpot


def bench_figures(records: Sequence[StepRecord], cost: CostModel, duration_s: float, *,
                  num_requests: int, num_prompt_tokens: int) -> BenchFigures:
    """The figures of a run of ``num_requests`` requests that took ``duration_s`` measured
    seconds (first submission to last completion) and made ``records``. Raises ``ValueError``
    for a non-positive duration."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ttft, tpot = latencies(records)
    t, p = Percentiles.of(ttft), Percentiles.of(tpot)
    floor = floor_s(cost, records)
    num_out = sum(len(r.new_tokens) for r in records)
    return BenchFigures(
        num_requests=num_requests, num_finished=records[-1].num_finished if records else 0,
        num_prompt_tokens=num_prompt_tokens, num_output_tokens=num_out, num_steps=len(records),
        duration_s=duration_s, output_tokens_per_s=num_out / duration_s, steps_per_s=len(records) / duration_s,
        ttft_p50_s=t.p50, ttft_p99_s=t.p99, tpot_p50_s=p.p50, tpot_p99_s=p.p99,
        roofline_floor_s=floor, roofline_efficiency=floor / duration_s,
        peak_flops=cost.device.peak_flops, mem_bandwidth=cost.device.mem_bandwidth,
        num_preemptions=sum(r.num_preemptions for r in records))


def format_figures(f: BenchFigures) -> list[str]:
    """Plain-text lines of ``f`` for the terminal."""
    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 1e3:.1f} ms"

    return [
        f"requests             {f.num_finished} of {f.num_requests} finished; {f.num_prompt_tokens:,} prompt "
        f"tokens, {f.num_output_tokens:,} output tokens, {f.num_preemptions} preemptions",
        f"time                 {f.duration_s:.3f} s (first submission to last completion)",
        f"output tokens/s      {f.output_tokens_per_s:,.1f}",
        f"TTFT p50 / p99       {ms(f.ttft_p50_s)} / {ms(f.ttft_p99_s)}",
        f"TPOT p50 / p99       {ms(f.tpot_p50_s)} / {ms(f.tpot_p99_s)}",
        f"steps/s              {f.steps_per_s:,.1f} ({f.num_steps} steps)",
        f"roofline floor       {f.roofline_floor_s:.4g} s at {f.peak_flops / 1e12:.4g} TFLOP/s, "
        f"{f.mem_bandwidth / 1e9:,.4g} GB/s (measured at start)",
        f"roofline efficiency  {f.roofline_efficiency:.2%} (floor / time)",
    ]
