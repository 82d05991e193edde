"""Building a ready engine from a config: model, device, dtype, KV cache size, recorder, provenance.

torch and transformers are imported only when a model is built: a simulated run
(``--executor sim``) never loads them (a few hundred MB of memory and seconds of start-up).
"""
from __future__ import annotations

import datetime as dt
import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.run_info import RunInfo

if TYPE_CHECKING:
    import torch

    from engine.sim.hardware import DevicePeaks


def resolve_device(spec: str) -> "torch.device":
    """``auto`` -> CUDA if available else CPU; otherwise ``torch.device(spec)``.
    Raises ``RuntimeError`` when CUDA is asked for but absent."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {spec!r} asked for, but torch sees no CUDA GPU "
                           f"(torch {torch.__version__}); use device 'cpu' (--device cpu)")
    return dev


def resolve_dtype(spec: str, device: "torch.device") -> "torch.dtype":
    """``auto`` -> float32 on CPU, bfloat16 on GPU."""
    import torch

    if spec == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec]


@dataclass
class BuiltEngine:
    """An engine with everything a front end shows about it."""

    engine: LLMEngine
    config: EngineConfig          # resolved: device, dtype, num_gpu_blocks, max_model_len filled in
    run_info: RunInfo
    tokenizer: Any
    vocab_size: int


def build_engine(config: EngineConfig, *, recorder_factory=None, trace: dict | None = None,
                 progress: bool = True, peaks: "DevicePeaks | None" = None) -> BuiltEngine:
    """Load the model named by ``config.model`` and build an :class:`LLMEngine` on it.

    ``recorder_factory(run_info) -> recorder`` (e.g. ``lambda info: RecordingWriter(path, info)``)
    is called once the provenance is known. ``trace`` (name, sha256, scaling notes) goes into the
    provenance, with the device's ``peaks`` (measured here first unless given:
    ``app.peaks.measure_peaks``, about a second on a GPU). Raises
    ``engine.model.loader.ModelLoadError`` when the model does not load and
    ``RuntimeError`` when the device or the KV cache cannot be set up. A ``SimConfig``
    (``--executor sim``) builds a simulated engine instead: see :func:`build_sim_engine`.
    """
    if getattr(config, "executor", "model") == "sim":
        return build_sim_engine(config, recorder_factory=recorder_factory, trace=trace)
    import torch
    import transformers

    from app.peaks import measure_peaks
    from engine.runner.kv_sizing import size_num_blocks
    from engine.model.loader import load_model, resolve_model
    from engine.runner.cuda_graphs import enable_cuda_graphs
    from engine.runner.model_runner import ModelRunner

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    peaks = peaks or measure_peaks(device, dtype)       # before the model: the whole device is free
    source = resolve_model(config.model, progress=progress)
    transformers.utils.logging.disable_progress_bar()   # the cached load takes ~1 s: no bar needed
    model, tokenizer = load_model(source, dtype, device)
    max_len = min(config.max_model_len, getattr(model.config, "max_position_embeddings", config.max_model_len))
    config = config.replace(device=str(device), dtype=str(dtype).removeprefix("torch."), max_model_len=max_len)
    num_blocks = config.num_gpu_blocks or size_num_blocks(model.config, config, device, dtype)
    config = config.replace(num_gpu_blocks=num_blocks)
    torch.manual_seed(config.seed)
    runner = ModelRunner.from_config(model, config)
    enable_cuda_graphs(runner, config)
    run_info = provenance(config, model, device, trace=trace, peaks=peaks,
                          model_info={"name": source.name, "path": str(source.folder),
                                      "weight_file_hash": source.weight_file_hash,
                                      "architecture": getattr(model.config, "model_type", "?")})
    recorder = recorder_factory(run_info) if recorder_factory else None
    eos = tokenizer.eos_token_id if tokenizer is not None else None
    engine = LLMEngine(config, runner, num_blocks, tokenizer=tokenizer, eos_token_id=eos, recorder=recorder,
                       step_time=slo_step_time(config, model.config.to_dict(), source.name, peaks))
    return BuiltEngine(engine, config, run_info, tokenizer, model.config.vocab_size)


def slo_step_time(config: EngineConfig, model_config: dict, name: str, peaks: "DevicePeaks"):
    """The step-time model SLO admission predicts with on a model run (``admission="slo"``;
    None otherwise): the simulator's roofline (``engine.sim.cost_model.CostModel`` with its
    default efficiencies) of this model's shape in the run's dtype on the measured ``peaks``.
    Raises ``RuntimeError`` for a model the cost model has no shape for."""
    if config.admission != "slo":
        return None
    from engine.sim.cost_model import CostModel
    from engine.sim.model_shapes import ModelShape
    try:
        shape = ModelShape.from_config(model_config, name).with_dtype(config.dtype)
    except ValueError as e:
        raise RuntimeError(f"--admission slo predicts step times from the model's shape: {e}") from e
    return CostModel(shape, peaks).predict_step_s


def provenance(config: EngineConfig, model, device: "torch.device", *, model_info: dict,
               trace: dict | None = None, peaks: "DevicePeaks | None" = None) -> RunInfo:
    """The :class:`engine.run_info.RunInfo` (the recording's provenance) of a model run: the config, ``model_info`` (name, path, weight
    hash, architecture...) plus the model's parameter count, the device and its name, torch's CPU
    threads (``torch_threads``), dtype,
    library versions, seed, ``trace`` and the start time (UTC, ISO 8601). With the device's
    measured ``peaks``, also ``roofline`` (``recordings.metrics.roofline.roofline_info``: the model's
    shape in the run's dtype and the peaks), from which each step's roofline efficiency follows."""
    import torch
    import transformers

    info = {
        "config": config.to_dict(),
        "model": {**model_info, "num_parameters": sum(p.numel() for p in model.parameters())},
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch_threads": torch.get_num_threads(),
        "dtype": config.dtype,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "seed": config.seed,
        "trace": trace,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if peaks is not None:
        from engine.sim.model_shapes import ModelShape
        from recordings.metrics.roofline import roofline_info

        try:
            shape = ModelShape.from_config(model.config.to_dict(), model_info["name"]).with_dtype(config.dtype)
            info["roofline"] = roofline_info(shape, peaks)
        except ValueError as e:                  # not a Llama-family config: the cost model has no shape
            info["roofline"] = {"error": str(e)}
    return RunInfo.from_json(info)


def build_sim_engine(config, *, recorder_factory=None, trace: dict | None = None) -> BuiltEngine:
    """An engine on the simulated executor for ``config`` (an ``engine.sim.config.SimConfig``): no
    weights, no tokenizer (prompts become random ids below the shape's vocabulary), step durations
    from the roofline cost model. ``num_gpu_blocks`` None is sized from the simulated device's
    memory (``engine.sim.config.sim_num_blocks``). The provenance says ``executor: sim`` and holds
    the model shape, device peaks and cost parameters. Raises ``RuntimeError`` if the cache is too
    small for one request."""
    import numpy as np

    from engine.sim.config import sim_num_blocks
    from engine.sim.executor import SimExecutor

    cost = config.cost_model()
    shape, peaks = cost.shape, cost.device
    config = config.replace(device=f"sim:{peaks.name}", dtype=config.sim_dtype())
    config = config.replace(num_gpu_blocks=config.num_gpu_blocks or sim_num_blocks(config, shape, peaks))
    runner = SimExecutor(cost, seed=config.seed, block_size=config.block_size)
    run_info = RunInfo.from_json({
        "config": config.to_dict(),
        "executor": "sim",
        "simulated": True,
        "model": {"name": shape.name, "path": config.sim_model, "weight_file_hash": None,
                  "architecture": "simulated (roofline cost model)", "num_parameters": shape.num_parameters},
        "device": config.device,
        "device_name": f"simulated {peaks.description or peaks.name}",
        "dtype": config.dtype,
        "sim": {"model": shape.to_dict(), "device": peaks.to_dict(), "cost": cost.params.to_dict(),
                "cost_file": config.sim_cost},
        "versions": {"numpy": np.__version__, "python": platform.python_version()},
        "seed": config.seed,
        "trace": trace,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    })
    recorder = recorder_factory(run_info) if recorder_factory else None
    engine = LLMEngine(config, runner, config.num_gpu_blocks, tokenizer=None, eos_token_id=None, recorder=recorder)
    return BuiltEngine(engine, config, run_info, None, shape.vocab_size)
