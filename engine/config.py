"""Engine configuration: one frozen, validated dataclass with vLLM's knob names."""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from engine.vocab import Admission, Clock, ModelImpl, Policy, PreemptionMode, values

POLICIES = values(Policy)
PREEMPTION_MODES = (PreemptionMode.RECOMPUTE.value, PreemptionMode.SWAP.value)   # the knob; SWAP_FALLBACK is an outcome
CLOCKS = values(Clock)
ADMISSION_MODES = values(Admission)
MODEL_IMPLS = values(ModelImpl)
DTYPES = ("auto", "float32", "bfloat16", "float16")


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the knob and its limit."""


def knob(default, help: str, *, choices: tuple | None = None, metavar: str | None = None):  # noqa: A002
    """A config field with what the command line says of it: ``help`` (plain text, no argparse
    ``%`` escapes), the allowed ``choices`` and a ``metavar``, kept in the field's ``metadata``
    (read by ``app.args``, which generates the engine flags from the fields, as vLLM's
    ``EngineArgs.add_cli_args`` does from its dataclass). ``default`` is the field's default."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, "metavar": metavar})


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
    on for a CUDA device, off elsewhere. ``model_impl`` picks the forward pass (vLLM's
    ``--model-impl``, ``engine.runner.forward``): ``batchscope`` the engine's own fused Llama-family
    forward, ``transformers`` transformers' model with our paged attention, ``auto`` ours for a
    supported architecture, else transformers'.

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

    model: str = knob("default", "'default' = embedded SmolLM2-135M-Instruct, or a local transformers "
                                 "Llama-family model folder")
    dtype: str = knob("auto", "auto = float32 on CPU, bfloat16 on GPU", choices=DTYPES)
    device: str = knob("auto", "auto | cpu | cuda | cuda:N")
    seed: int = knob(0, "engine seed")
    block_size: int = knob(16, "tokens per KV block")
    num_gpu_blocks: int | None = knob(None, "physical KV blocks; omit to size from free memory")
    kv_cache_memory_fraction: float = knob(
        0.25, "fraction of the free device memory the automatic KV sizing may use (when num_gpu_blocks is None)")
    max_model_len: int = knob(2048, "max prompt + output tokens per request")
    max_num_seqs: int = knob(16, "batch slots: running requests per step")
    max_num_batched_tokens: int = knob(256, "token budget of one step")
    enable_chunked_prefill: bool = knob(True, "split long prompts over steps; off: admit only whole prompts")
    enable_prefix_caching: bool = knob(
        False, "reuse the KV of full blocks whose whole prefix an earlier step computed (automatic prefix "
               "caching, vLLM v1 style; off by default)")
    long_prefill_token_threshold: int = knob(0, "cap on one request's prefill chunk per step, 0 = none")
    policy: Policy = knob(
        Policy.FCFS, "which waiting request gets a batch slot: fcfs = by arrival (continuous batching); priority = by "
                "the request's priority, lower value first, ties by arrival, and a strictly higher-priority "
                "waiting request may preempt the lowest-priority running one (trace requests all have priority "
                "0, so a replay runs as fcfs); static = the baseline without continuous batching: a batch of up "
                "to --max-num-seqs requests is admitted only when the whole previous batch finished",
        choices=POLICIES)
    preemption_mode: PreemptionMode = knob(
        PreemptionMode.RECOMPUTE, "what happens to a request preempted when the KV cache runs out: recompute = its KV is "
                     "dropped and computed again; swap = copied to a CPU pool of --num-cpu-blocks blocks and "
                     "back (recompute when that pool is full)", choices=PREEMPTION_MODES)
    num_cpu_blocks: int = knob(0, "KV blocks of the CPU swap pool (only with --preemption-mode swap)")
    clock: Clock = knob(
        Clock.VIRTUAL, "wall: arrivals in real seconds; virtual: arrivals in steps, reproducible schedules; sim: "
                   "simulated seconds from --executor sim's step times, idle gaps skipped; with --executor "
                   "sim, wall means sim", choices=CLOCKS)
    check_invariants: bool = knob(
        False, "check the global invariants (block conservation, queue exclusivity, limits; G1-G4 of the "
               "scheduler cases) after every step; the first violation stops the run with its step and "
               "invariant (slower; the recording keeps the steps so far)")
    cuda_graphs: bool | None = knob(
        None, "decode-only steps run padded to a ladder of batch sizes (1, 2, 4, 8, 16, 24, ... up to "
              "--max-num-seqs) and replay CUDA graphs captured at start-up, decoding with our Triton kernel "
              "(BATCHSCOPE_ATTENTION=reference: the torch reference); on a CPU the same padded path runs "
              "without graphs, slower (it is there to be tested); auto: on for a CUDA device, off elsewhere")
    model_impl: ModelImpl = knob(
        ModelImpl.AUTO, "the model's forward pass: batchscope = the engine's own (merged QKV and gate-up "
                        "matmuls, compact RMSNorm and RoPE; Llama, Mistral, Qwen2, Qwen3), transformers = "
                        "transformers' model with our paged attention, auto = batchscope for a supported "
                        "architecture, else transformers", choices=MODEL_IMPLS)

    max_queue_time: float | None = knob(
        None, "reject a request still waiting for its first admission S after its arrival (engine clock: "
              "seconds, steps under --clock virtual), recorded as timed out; None = wait forever, as vLLM",
        metavar="S")
    admission: Admission = knob(
        Admission.ALL, "all = admit every request that fits (vLLM); slo = at arrival predict the request's TTFT "
                       "from the queue ahead and the step-time model (--sim-cost's fit, else the simulator's "
                       "roofline) and reject it when over --slo-ttft, as Mooncake's early rejection",
        choices=ADMISSION_MODES)
    slo_ttft_ms: float | None = knob(None, "the TTFT SLO of admission='slo', in milliseconds (flag: --slo-ttft)")
    kv_watermark: float = knob(
        0.0, "fraction of the KV blocks kept free when a request is admitted while others run: room for "
             "their decode, less thrash (vLLM v0's watermark, 0.01 there)", metavar="F")
    max_preemptions_per_request: int = knob(
        0, "a request preempted N times is no longer chosen as the victim when the KV cache runs out "
           "(another running request is), 0 = no cap", metavar="N")

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
        need(self.dtype in DTYPES,
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        need(self.max_queue_time is None or 0 < self.max_queue_time < math.inf,
             f"max_queue_time must be a positive number (seconds; steps under the virtual clock) "
             f"or None, got {self.max_queue_time}")
        need(self.admission in ADMISSION_MODES,
             f"admission must be one of {ADMISSION_MODES}, got {self.admission!r}")
        object.__setattr__(self, "admission", Admission(self.admission))
        need(self.model_impl in MODEL_IMPLS, f"model_impl must be one of {MODEL_IMPLS}, got {self.model_impl!r}")
        object.__setattr__(self, "model_impl", ModelImpl(self.model_impl))
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
