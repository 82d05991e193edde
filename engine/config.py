"""Engine configuration: one frozen, validated dataclass with vLLM's knob names."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from engine.vocab import Clock, Policy, PreemptionMode, values

POLICIES = values(Policy)
PREEMPTION_MODES = (PreemptionMode.RECOMPUTE.value, PreemptionMode.SWAP.value)   # the knob; SWAP_FALLBACK is an outcome
CLOCKS = values(Clock)


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
    ``engine.runner.cuda_graphs``; vLLM's ``cudagraph_mode`` FULL_DECODE_ONLY); ``None`` (the default):
    on for a CUDA device, off elsewhere.
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
    policy: Policy = Policy.FCFS
    preemption_mode: PreemptionMode = PreemptionMode.RECOMPUTE
    num_cpu_blocks: int = 0
    clock: Clock = Clock.VIRTUAL
    check_invariants: bool = False
    cuda_graphs: bool | None = None

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
        need(self.clock in CLOCKS, f"clock must be one of {CLOCKS}, got {self.clock!r}")
        # the words as members of the vocabulary (each equals its string: stored and printed alike)
        object.__setattr__(self, "policy", Policy(self.policy))
        object.__setattr__(self, "preemption_mode", PreemptionMode(self.preemption_mode))
        object.__setattr__(self, "clock", Clock(self.clock))
        need(self.num_cpu_blocks >= 0, f"num_cpu_blocks must be >= 0, got {self.num_cpu_blocks}")
        need(self.preemption_mode != PreemptionMode.SWAP or self.num_cpu_blocks >= 1,
             "preemption_mode='swap' needs num_cpu_blocks >= 1 (the CPU swap pool), got "
             f"{self.num_cpu_blocks}")
        need(self.preemption_mode == PreemptionMode.SWAP or self.num_cpu_blocks == 0,
             f"num_cpu_blocks={self.num_cpu_blocks} is only used with preemption_mode='swap' "
             f"(this config has preemption_mode='{self.preemption_mode}')")
        need(re.fullmatch(r"auto|cpu|cuda(:\d+)?|sim:\S+", self.device) is not None,   # sim: SimConfig
             f"device must be auto, cpu, cuda or cuda:N (the engine runs on CUDA GPUs and CPUs), "
             f"got {self.device!r}")
        need(self.dtype in ("auto", "float32", "bfloat16", "float16"),
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")

    def replace(self, **changes) -> "EngineConfig":
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain dict of every field, for the recording's provenance."""
        return dataclasses.asdict(self)
