"""Roofline cost model of one engine step (after Vidur, Agrawal et al., MLSys 2024: operator-level
time predictions; here from the roofline instead of profiles).

For the step's scheduled requests (request i: ``q_i`` query tokens this step, ``c_i`` =
``num_computed_tokens`` before it), with T = sum q_i tokens, S sampled rows, and the shape's
h = hidden, i = intermediate, q = heads * head_dim, kv = kv_heads * head_dim, V = vocab,
b = bytes per element, L = layers, each operator costs ``max(FLOPs / (peak_flops * flops_efficiency),
bytes / (mem_bandwidth * bw_efficiency))`` and the step costs

    step_time = per_step_overhead_s + per_seq_overhead_s * (number of scheduled requests)
                + sum over operators (layer operators counted L times)

The two overheads are the runtime's own time (a fixed cost per step; input preparation, attention
metadata and sampling per request: what Vidur models as CPU overheads).

per layer:
  qkv_proj   FLOPs 2 T h (q + 2 kv)           bytes b [h (q + 2 kv) + T (h + q + 2 kv)]
  attention  FLOPs 4 q P, P = sum_i (q_i c_i + q_i (q_i + 1) / 2)   (causal QK^T and PV pairs)
             bytes b [2 kv sum_i (c_i + q_i)  (K/V read) + 2 kv T (K/V written) + 2 q T (Q, out)]
  o_proj     FLOPs 2 T q h                    bytes b [q h + T (q + h)]
  mlp        FLOPs 2 T 3 h i                  bytes b [3 h i + T (2 h + 3 i)]
  elementwise (norms, residuals, rotary, SiLU): FLOPs T (10 h + 4 i)   bytes b T (10 h + 3 i)
once:
  lm_head    FLOPs 2 S h V                    bytes b [h V (only if S > 0) + S (h + V) + T h (embedding gather)]

Weights are read once per step (whatever T), which makes decode bandwidth-bound and a long prefill
compute-bound. Times are seconds; FLOPs are floating-point operations; bytes are bytes.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

from engine.sim.hardware import CPU, DevicePeaks, get_device, host_memory_bytes
from engine.sim.model_shapes import ModelShape, get_model_shape


def _as_float(x):
    """A count as a float, or an integer array as float64."""
    return np.asarray(x, float) if isinstance(x, np.ndarray) else float(x)


class Scheduled(Protocol):
    num_tokens: int
    num_computed_tokens: int


@dataclass(frozen=True)
class CostParams:
    """Calibration of the roofline: seconds of fixed cost per step and per scheduled request, and
    the fraction of each peak reached. ``device``/``peak_flops``/``mem_bandwidth`` record what a fit was made against; a fit
    on ``cpu`` pins those measured peaks (the measurement is noisy; see :meth:`CostModel.build`)."""

    per_step_overhead_s: float = 0.002
    per_seq_overhead_s: float = 1e-5
    flops_efficiency: float = 0.5
    bw_efficiency: float = 0.8
    device: str | None = None
    peak_flops: float | None = None
    mem_bandwidth: float | None = None

    def __post_init__(self) -> None:
        for k in ("per_step_overhead_s", "per_seq_overhead_s"):
            if not getattr(self, k) >= 0:
                raise ValueError(f"{k} must be >= 0, got {getattr(self, k)}")
        for k in ("flops_efficiency", "bw_efficiency"):
            if not getattr(self, k) > 0:
                raise ValueError(f"{k} must be > 0, got {getattr(self, k)}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def floor(cls) -> "CostParams":
        """The roofline floor: both peaks fully reached, no per-step or per-request overhead.
        A step then costs the sum over its operators of ``max(FLOPs / peak_flops, bytes /
        mem_bandwidth)`` (Williams et al., CACM 2009), the least time the device could take."""
        return cls(per_step_overhead_s=0.0, per_seq_overhead_s=0.0, flops_efficiency=1.0, bw_efficiency=1.0)

    @classmethod
    def from_dict(cls, d: dict) -> "CostParams":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown cost parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "CostParams":
        """Read a ``batchscope fit`` output. Raises ``ValueError`` naming the file."""
        try:
            d = json.loads(Path(path).read_text())
            if not isinstance(d, dict):
                raise ValueError("expected a JSON object")
            return cls.from_dict(d)
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"{path}: not a cost-parameter file: {e}") from e


@dataclass(frozen=True)
class StepWork:
    """What a step computes, summed over its requests (see the module docstring for P)."""

    num_tokens: int
    num_seqs: int
    num_sampled: int
    attn_pairs: int
    context_tokens: int

    @classmethod
    def of(cls, scheduled: Iterable[Scheduled], num_sampled: int | None = None) -> "StepWork":
        """``num_sampled`` defaults to one row per scheduled request (every chunk ends its tokens)."""
        t = pairs = ctx = n = 0
        for s in scheduled:
            q, c = s.num_tokens, s.num_computed_tokens
            t += q
            pairs += q * c + q * (q + 1) // 2
            ctx += c + q
            n += 1
        return cls(t, n, n if num_sampled is None else num_sampled, pairs, ctx)

    @classmethod
    def of_batches(cls, num_tokens: np.ndarray, num_computed_tokens: np.ndarray, batch_start: np.ndarray,
                   num_sampled: np.ndarray) -> "StepWork":
        """The sums of :meth:`of` for many steps at once, as one ``StepWork`` whose fields are
        int64 arrays (one entry per step; :meth:`CostModel.work_times` prices them), without a
        Python loop: the steps' batches concatenated as aligned integer arrays (one entry per
        scheduled request: tokens this step ``q_i``, ``num_computed_tokens`` before it ``c_i``),
        step ``k``'s entries at ``batch_start[k]:batch_start[k + 1]`` (``len(num_sampled) + 1``
        offsets), and each step's sampled rows."""
        q = np.asarray(num_tokens, np.int64)
        c = np.asarray(num_computed_tokens, np.int64)
        start = np.asarray(batch_start, np.int64)

        def per_step(x: np.ndarray) -> np.ndarray:
            total = np.concatenate(([0], np.cumsum(x)))
            return total[start[1:]] - total[start[:-1]]

        return cls(per_step(q), np.diff(start), np.asarray(num_sampled, np.int64),
                   per_step(q * c + q * (q + 1) // 2), per_step(c + q))


@dataclass(frozen=True)
class OpCost:
    """One operator over the whole step (all layers): work, its two roofline times and the max
    (floats; float64 arrays, one entry per step, when priced for many steps at once)."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


class CostModel:
    """Step-time predictions for ``shape`` on ``device`` under ``params``."""

    def __init__(self, shape: ModelShape, device: DevicePeaks, params: CostParams = CostParams()) -> None:
        self.shape, self.device, self.params = shape, device, params

    @classmethod
    def build(cls, model: str, device: str, params: CostParams = CostParams(),
              dtype: str | None = None) -> "CostModel":
        """From names: a fit made on ``cpu`` reuses its recorded peaks when ``device`` is ``cpu``."""
        shape = get_model_shape(model)
        shape = shape.with_dtype(dtype) if dtype else shape
        if device.strip().lower() == CPU and params.device == CPU and params.peak_flops and params.mem_bandwidth:
            peaks = DevicePeaks(CPU, params.peak_flops, params.mem_bandwidth, host_memory_bytes(),
                                "this CPU, peaks pinned by the cost fit")
        else:
            peaks = get_device(device)
        return cls(shape, peaks, params)

    def with_params(self, params: CostParams) -> "CostModel":
        return CostModel(self.shape, self.device, params)

    def overhead_s(self, num_seqs: int) -> float:
        """The runtime's time in a step of ``num_seqs`` scheduled requests (0 for an empty step)."""
        return self.params.per_step_overhead_s + self.params.per_seq_overhead_s * num_seqs if num_seqs else 0.0

    def breakdown(self, scheduled: Iterable[Scheduled], num_sampled: int | None = None) -> dict[str, OpCost]:
        """Cost of each operator of the step; ``step_time`` = ``overhead_s`` + the sum of their ``time_s``."""
        return self._ops(StepWork.of(scheduled, num_sampled))

    def _ops(self, w: StepWork) -> dict[str, OpCost]:
        m, L = self.shape, self.shape.num_hidden_layers
        h, i, q, kv, V, T, S = (m.hidden_size, m.intermediate_size, m.q_size, m.kv_size, m.vocab_size,
                                w.num_tokens, w.num_sampled)
        work = {  # name: (FLOPs, elements moved) over all layers
            "qkv_proj": (L * 2 * T * m.qkv_params, L * (m.qkv_params + T * (h + q + 2 * kv))),
            "attention": (L * 4 * q * w.attn_pairs, L * (2 * kv * (w.context_tokens + T) + 2 * q * T)),
            "o_proj": (L * 2 * T * m.o_params, L * (m.o_params + T * (q + h))),
            "mlp": (L * 2 * T * m.mlp_params, L * (m.mlp_params + T * (2 * h + 3 * i))),
            "elementwise": (L * T * (10 * h + 4 * i), L * T * (10 * h + 3 * i)),
            "lm_head": (2 * S * m.lm_head_params,       # the head's weights are read only if S > 0
                        m.lm_head_params * (S > 0) + S * (h + V) + T * h),
        }
        peak = self.device.peak_flops * self.params.flops_efficiency
        bw = self.device.mem_bandwidth * self.params.bw_efficiency
        out = {}
        for name, (flops, elems) in work.items():
            flops, nbytes = _as_float(flops), _as_float(elems * m.bytes_per_param)
            out[name] = OpCost(flops, nbytes, flops / peak, nbytes / bw)
        return out

    def swap_time_s(self, num_blocks: int, block_size: int) -> float:
        """Seconds to copy ``num_blocks`` KV blocks of ``block_size`` tokens over the device's
        host link (swap preemption), every layer's K and V."""
        return num_blocks * block_size * self.shape.kv_bytes_per_token / self.device.host_bandwidth

    def copy_time_s(self, num_blocks: int, block_size: int) -> float:
        """Seconds to copy ``num_blocks`` KV blocks of ``block_size`` tokens within device memory
        (parallel sampling's copy-on-write), every layer's K and V: each byte read and written
        once at the achievable memory bandwidth."""
        nbytes = 2 * num_blocks * block_size * self.shape.kv_bytes_per_token
        return nbytes / (self.device.mem_bandwidth * self.params.bw_efficiency)

    def step_time(self, scheduled: Iterable[Scheduled], num_sampled: int | None = None) -> float:
        """Predicted seconds of the step; 0.0 for an empty step (nothing runs)."""
        return self.work_time(StepWork.of(scheduled, num_sampled))

    def work_times(self, w: StepWork) -> np.ndarray:
        """:meth:`work_time` of many steps at once (float64, one entry per step): ``w``'s fields
        are aligned integer arrays, as :meth:`StepWork.of_batches` gives them."""
        seqs = np.asarray(w.num_seqs)
        roofline = sum(np.maximum(op.compute_s, op.memory_s) for op in self._ops(w).values())
        overhead = self.params.per_step_overhead_s + self.params.per_seq_overhead_s * seqs
        return np.where(seqs > 0, overhead + roofline, 0.0)

    def predict_step_s(self, num_tokens: int, num_seqs: int, attn_pairs: int, context_tokens: int) -> float:
        """Seconds of a step of ``num_tokens`` tokens over ``num_seqs`` requests, each sampling
        one token, with ``attn_pairs`` and ``context_tokens`` as :class:`StepWork` sums them:
        the step-time model of SLO admission (``engine.sched.admission.StepTimeFn``)."""
        return self.work_time(StepWork(num_tokens, num_seqs, num_seqs, attn_pairs, context_tokens))

    def work_time(self, w: StepWork) -> float:
        """Predicted seconds of a step that does ``w``; 0.0 when it schedules nothing."""
        if not w.num_seqs:
            return 0.0
        return self.overhead_s(w.num_seqs) + sum(op.time_s for op in self._ops(w).values())
