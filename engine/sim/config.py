"""Configuration of a simulated run: an :class:`EngineConfig` plus what the simulated executor needs."""
from __future__ import annotations

from dataclasses import dataclass

from engine.config import ConfigError, EngineConfig, knob
from engine.sim.cost_model import CostModel, CostParams
from engine.sim.hardware import CPU, DevicePeaks, check_device_name, known_devices
from engine.sim.model_shapes import ModelShape, get_model_shape, known_models
from engine.vocab import Executor, values

# Fraction of the device memory the weights and the KV cache may use together (vLLM's default
# ``gpu_memory_utilization``); the rest is left to activations and the runtime.
SIM_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class SimConfig(EngineConfig):
    """An engine run whose steps are simulated: ``sim_model`` (a name of
    ``engine.sim.model_shapes.MODELS`` or a transformers folder / config.json), ``sim_device`` (a
    name of ``engine.sim.hardware``, ``cpu`` = this machine) and ``sim_cost`` (path of a
    ``batchscope fit`` JSON; None = the built-in :class:`CostParams`). ``executor`` is always
    ``"sim"`` (it marks the recording's provenance). Names are checked on construction
    (:class:`ConfigError` lists the known ones)."""

    executor: Executor = knob(Executor.SIM, "model: run the model's forward pass; sim: the real scheduler and KV cache with "
                                "simulated step times, to replay big traces fast", choices=values(Executor))
    sim_model: str = knob("llama-3.1-8b", f"architecture to simulate: {', '.join(known_models())}, or a "
                                          f"transformers folder / config.json", metavar="NAME")
    sim_device: str = knob("h100", f"device to simulate: {', '.join(known_devices())} (cpu = this machine, "
                                   f"measured at start; GPU peaks from the vendors' datasheets)", metavar="NAME")
    sim_cost: str | None = knob(
        None, "overheads (per step, per scheduled request) and efficiency factors written by 'batchscope fit' "
              "(default: 2 ms per step, 10 us per request, 50% of peak FLOP/s, 80% of peak bandwidth)",
        metavar="FIT.json")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.executor != Executor.SIM:
            raise ConfigError(f"SimConfig.executor must be 'sim', got {self.executor!r}")
        try:
            get_model_shape(self.sim_model)
            check_device_name(self.sim_device)
            params = self.cost_params()
        except ValueError as e:
            raise ConfigError(str(e)) from e
        fitted_on = (params.device or "").strip().lower()
        if fitted_on and fitted_on != self.sim_device.strip().lower():
            raise ConfigError(
                f"--sim-cost {self.sim_cost} was fitted on device {params.device!r}, but this run simulates "
                f"{self.sim_device!r}: a fit's overheads and efficiencies hold for the device it was measured "
                f"on. Use --sim-device {params.device}, or fit a recording made on {self.sim_device}")

    def cost_params(self) -> CostParams:
        return CostParams.load(self.sim_cost) if self.sim_cost else CostParams()

    def sim_dtype(self) -> str:
        """``dtype``, with ``auto`` = float32 on the ``cpu`` device and bfloat16 on a GPU."""
        if self.dtype != "auto":
            return self.dtype
        return "float32" if self.sim_device.strip().lower() == CPU else "bfloat16"

    def cost_model(self) -> CostModel:
        """The cost model of this run (measures the CPU when ``sim_device`` is ``cpu``)."""
        return CostModel.build(self.sim_model, self.sim_device, self.cost_params(), self.sim_dtype())


# vLLM's defaults for one GPU (its engine arguments: ``max_num_seqs`` 256, ``max_num_batched_tokens``
# 8192 with chunked prefill), which ``--executor sim`` uses where no flag or preset sets them.
SIM_MAX_NUM_SEQS = 256
SIM_MAX_NUM_BATCHED_TOKENS = 8192
FALLBACK_MAX_MODEL_LEN = 2048          # vLLM's assumption for a config that names no length


def sim_default_knobs(sim_model: str, *, enable_chunked_prefill: bool = True,
                      max_model_len: int | None = None) -> dict[str, int]:
    """The knobs a simulated run takes when neither a flag nor a preset sets them, as vLLM would
    start ``sim_model``: ``max_num_seqs`` :data:`SIM_MAX_NUM_SEQS`, ``max_num_batched_tokens``
    :data:`SIM_MAX_NUM_BATCHED_TOKENS` (without chunked prefill at least ``max_model_len``, as vLLM
    raises it), ``max_model_len`` derived from the model's config
    (``engine.sim.model_shapes.derived_max_model_len``, :data:`FALLBACK_MAX_MODEL_LEN` when it names
    none; ``max_model_len`` when given). Raises ``ValueError`` for an unknown model."""
    max_len = max_model_len or get_model_shape(sim_model).max_model_len or FALLBACK_MAX_MODEL_LEN
    budget = SIM_MAX_NUM_BATCHED_TOKENS if enable_chunked_prefill else max(SIM_MAX_NUM_BATCHED_TOKENS, max_len)
    return {"max_num_seqs": SIM_MAX_NUM_SEQS, "max_num_batched_tokens": budget, "max_model_len": max_len}


def activation_peak_bytes(shape: ModelShape, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Bytes of activations at the peak of vLLM's start-up profiling run, estimated from the shape:
    vLLM runs one forward pass of ``max_num_batched_tokens`` tokens and then samples
    ``min(max_num_seqs, tokens)`` rows, and subtracts the allocator's peak from the memory it gives
    the KV cache (``gpu_worker.determine_available_memory``). With T tokens, S rows, ``b`` bytes per
    element, the forward pass peaks in an MLP: residual, normed input, gate|up output and the
    activated product, ``b·T·(2h + 3i)``; sampling holds the last hidden states and S rows of
    vocabulary-wide logits in the dtype and in float32, float32 probabilities and int64 sort indices
    (top-p/top-k), ``b·T·h + S·V·(b + 16)``. The larger of the two. Llama-3.1-8B in bf16 at 8,192
    tokens and 256 rows: 0.84 GB; vLLM logged 1.26 GiB for Llama-3-8B on an H100 (vLLM PR #10511),
    the rest being the allocator's rounding and kernels' workspaces, which this leaves out."""
    t, b = max_num_batched_tokens, shape.bytes_per_param
    rows = min(max_num_seqs, t)
    forward = b * t * (2 * shape.hidden_size + 3 * shape.intermediate_size)
    sampler = b * t * shape.hidden_size + rows * shape.vocab_size * (b + 16)
    return max(forward, sampler)


def sim_num_blocks(config: EngineConfig, shape: ModelShape, device: DevicePeaks) -> int:
    """KV blocks as vLLM sizes its pool: ``SIM_MEMORY_UTILIZATION`` of the device memory, minus the
    weights and the activation peak of a step of ``max_num_batched_tokens``
    (:func:`activation_peak_bytes`), divided by the bytes of one block; capped (like
    ``engine.runner.kv_sizing.size_num_blocks``) at what ``max_num_seqs`` requests of
    ``max_model_len`` tokens can use. Memory outside torch's allocator (the CUDA context, NCCL:
    0.1-1.8 GiB in vLLM's logs) is not modelled. Raises ``RuntimeError`` if one request of
    ``max_model_len`` tokens does not fit."""
    per_block = shape.kv_bytes_per_token * config.block_size
    activations = activation_peak_bytes(shape, config.max_num_batched_tokens, config.max_num_seqs)
    free = SIM_MEMORY_UTILIZATION * device.memory_bytes - shape.weight_bytes - activations
    by_memory = max(0, int(free // per_block))
    blocks_per_seq = -(-config.max_model_len // config.block_size)
    if by_memory < blocks_per_seq:
        raise RuntimeError(
            f"simulated KV cache too small: {shape.name} ({shape.weight_bytes / 1e9:.1f} GB of weights, "
            f"{activations / 1e9:.2f} GB of activations) on {device.name} ({device.memory_bytes / 1e9:.0f} GB "
            f"x {SIM_MEMORY_UTILIZATION}) leaves room for {by_memory} blocks of {per_block} bytes, but one "
            f"request of max_model_len={config.max_model_len} needs {blocks_per_seq}; pass --num-gpu-blocks "
            f"or a lower --max-model-len")
    return min(by_memory, config.max_num_seqs * blocks_per_seq)
