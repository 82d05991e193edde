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


def sim_num_blocks(config: EngineConfig, shape: ModelShape, device: DevicePeaks) -> int:
    """KV blocks that fit in ``SIM_MEMORY_UTILIZATION`` of the device memory after the weights,
    capped (like ``engine.runner.kv_sizing.size_num_blocks``) at what ``max_num_seqs`` requests of
    ``max_model_len`` tokens can use. Raises ``RuntimeError`` if one such request does not fit."""
    per_block = shape.kv_bytes_per_token * config.block_size
    free = SIM_MEMORY_UTILIZATION * device.memory_bytes - shape.weight_bytes
    by_memory = max(0, int(free // per_block))
    blocks_per_seq = -(-config.max_model_len // config.block_size)
    if by_memory < blocks_per_seq:
        raise RuntimeError(
            f"simulated KV cache too small: {shape.name} ({shape.weight_bytes / 1e9:.1f} GB of weights) on "
            f"{device.name} ({device.memory_bytes / 1e9:.0f} GB) leaves room for {by_memory} blocks of "
            f"{per_block} bytes, but one request of max_model_len={config.max_model_len} needs "
            f"{blocks_per_seq}; pass --num-gpu-blocks or a lower --max-model-len")
    return min(by_memory, config.max_num_seqs * blocks_per_seq)
