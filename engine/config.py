"""Engine configuration: one frozen, validated dataclass with vLLM's knob names."""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

POLICIES = ("fcfs", "priority", "static")
PREEMPTION_MODES = ("recompute", "swap")
CLOCKS = ("virtual", "wall", "sim")
ADMISSION_MODES = ("all", "slo")


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the knob and its limit."""


@dataclass(frozen=True)
class EngineConfig:
    """Every knob of one engine run. Validated on construction (raises :class:`ConfigError`).

    Names follow vLLM: ``block_size`` (tokens per KV block), ``num_gpu_blocks`` (physical KV
    blocks in the paged cache; ``None`` sizes it from free memory, see
    ``engine.runner.kv_sizing.size_num_blocks``), ``max_model_len`` (prompt + output tokens of one
    request), ``max_num_seqs`` (running requests per step = batch slots),
    ``max_num_batched_tokens`` (token budget of one step), ``enable_chunked_prefill``,
    ``long_prefill_token_threshold`` (0 = no per-request prefill cap), ``enable_prefix_caching``
    (reuse the KV of full blocks whose whole prefix was computed before, see
    ``engine.kv.manager``), ``policy`` (``fcfs``: by arrival; ``priority``: by
    ``SamplingParams.priority``, lower first, a strictly higher priority may preempt; ``static``:
    the baseline without continuous batching, a new batch is admitted only when the whole
    previous one finished), ``preemption_mode`` (``recompute``: a victim's KV is dropped and
    computed again; ``swap``: copied into a CPU pool of ``num_cpu_blocks`` blocks and back, with
    recompute as the fallback when that pool is full). ``clock`` is ``virtual`` (arrivals counted in steps, reproducible) or
    ``wall`` (live, seconds) or ``sim`` (simulated seconds from a simulated executor's step
    durations; idle gaps jump to the next arrival). ``kv_cache_memory_fraction`` bounds the automatic sizing.
    ``dtype`` ``auto`` means float32 on the CPU and bfloat16 on a GPU; ``device`` ``auto`` picks
    CUDA when available. ``check_invariants`` asserts G1-G4 after every step (tests, debugging).
    ``cuda_graphs`` runs decode-only steps padded to a ladder of batch sizes, from CUDA graphs
    captured at start-up on a GPU (the same padded path eagerly on a CPU; see
    ``engine.runner.cuda_graphs``; vLLM's ``cudagraph_mode`` FULL_DECODE_ONLY); off until verified on a GPU.

    Admission control and thrash (``engine.sched.admission``; vLLM has neither a queue timeout
    nor an SLO check): ``max_queue_time`` (engine clock units: seconds, steps under the virtual
    clock; None = wait forever) rejects a request still waiting for its first admission that
    long after its arrival; ``admission`` ``slo`` predicts each arrival's TTFT from the queue
    ahead and a step-time model and rejects it at once when the prediction exceeds
    ``slo_ttft_ms`` (Mooncake's prediction-based early rejection; needs the wall or sim clock),
    ``all`` admits everyone. ``kv_watermark`` is the fraction of the KV blocks kept free when a
    waiting request is admitted while others run (vLLM v0's ``BlockSpaceManager`` watermark,
    0.01 there): headroom for the running requests' decode, so long outputs thrash less.
    ``max_preemptions_per_request`` (0 = no cap) stops choosing a request as a preemption victim
    once it was preempted that many times (another running request is taken instead, unless
    none is left).
    """

    model: str = "default"
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0
    block_size: int = 16
    num_gpu_blocks: int | None = None
    kv_cache_memory_fraction: float = 0.25
    max_model_len: int = 2048
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 256
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    preemption_mode: str = "recompute"
    num_cpu_blocks: int = 0
    clock: str = "virtual"
    check_invariants: bool = False
    cuda_graphs: bool = False
    max_queue_time: float | None = None
    admission: str = "all"
    slo_ttft_ms: float | None = None
    kv_watermark: float = 0.0
    max_preemptions_per_request: int = 0

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(msg)

        need(self.block_size >= 1, f"block_size must be >= 1, got {self.block_size}")
        need(self.num_gpu_blocks is None or self.num_gpu_blocks >= 1,
             f"num_gpu_blocks must be >= 1 (or None to size from memory), got {self.num_gpu_blocks}")
        need(0.0 < self.kv_cache_memory_fraction <= 0.95,
             f"kv_cache_memory_fraction must be in (0, 0.95], got {self.kv_cache_memory_fraction}")
        need(self.max_model_len >= 2, f"max_model_len must be >= 2, got {self.max_model_len}")
        need(self.max_num_seqs >= 1, f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        need(self.max_num_batched_tokens >= 1,
             f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        need(self.enable_chunked_prefill or self.max_num_batched_tokens >= self.max_model_len,
             "without chunked prefill max_num_batched_tokens must be >= max_model_len "
             f"({self.max_num_batched_tokens} < {self.max_model_len})")
        need(self.long_prefill_token_threshold >= 0,
             f"long_prefill_token_threshold must be >= 0, got {self.long_prefill_token_threshold}")
        need(self.policy in POLICIES, f"policy must be one of {POLICIES}, got {self.policy!r}")
        need(self.preemption_mode in PREEMPTION_MODES,
             f"preemption_mode must be one of {PREEMPTION_MODES}, got {self.preemption_mode!r}")
        need(self.num_cpu_blocks >= 0, f"num_cpu_blocks must be >= 0, got {self.num_cpu_blocks}")
        need(self.preemption_mode != "swap" or self.num_cpu_blocks >= 1,
             "preemption_mode='swap' needs num_cpu_blocks >= 1 (the CPU swap pool), got "
             f"{self.num_cpu_blocks}")
        need(self.preemption_mode == "swap" or self.num_cpu_blocks == 0,
             f"num_cpu_blocks={self.num_cpu_blocks} is only used with preemption_mode='swap' "
             f"(this config has preemption_mode={self.preemption_mode!r})")
        need(self.clock in CLOCKS, f"clock must be one of {CLOCKS}, got {self.clock!r}")
        need(re.fullmatch(r"auto|cpu|cuda(:\d+)?|sim:\S+", self.device) is not None,   # sim: SimConfig
             f"device must be auto, cpu, cuda or cuda:N (the engine runs on CUDA GPUs and CPUs), "
             f"got {self.device!r}")
        need(self.dtype in ("auto", "float32", "bfloat16", "float16"),
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        need(self.max_queue_time is None or 0 < self.max_queue_time < math.inf,
             f"max_queue_time must be a positive number (seconds; steps under the virtual clock) "
             f"or None, got {self.max_queue_time}")
        need(self.admission in ADMISSION_MODES,
             f"admission must be one of {ADMISSION_MODES}, got {self.admission!r}")
        need(self.slo_ttft_ms is None or 0 < self.slo_ttft_ms < math.inf,
             f"slo_ttft_ms must be a positive number of milliseconds or None, got {self.slo_ttft_ms}")
        need(self.admission != "slo" or self.slo_ttft_ms is not None,
             "admission='slo' needs slo_ttft_ms (--slo-ttft MS): the TTFT a prediction must meet")
        need(self.admission != "slo" or self.clock != "virtual",
             "admission='slo' needs the wall or sim clock (a TTFT SLO in milliseconds means nothing "
             "under the virtual clock, whose time unit is a step)")
        need(0.0 <= self.kv_watermark < 1.0,
             f"kv_watermark must be in [0, 1) (a fraction of the KV blocks), got {self.kv_watermark}")
        need(self.max_preemptions_per_request >= 0,
             f"max_preemptions_per_request must be >= 0 (0 = no cap), got {self.max_preemptions_per_request}")

    def replace(self, **changes) -> "EngineConfig":
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain dict of every field, for the recording's provenance."""
        return dataclasses.asdict(self)
