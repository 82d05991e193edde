"""Random-weight ("dummy") models for ``batchscope bench``: a transformers ``LlamaForCausalLM``
of a named shape, built in memory (no download, no files), and an engine on it.

Dummy weights are how serving benchmarks measure speed without a checkpoint (vLLM's
``--load-format dummy``); the anchor workload of ``../shared/bench/README.md`` uses the
Llama-3.2-1B shape with ``torch.manual_seed(0)``, as ``hf_peer.py`` does.
"""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from app.factory import BuiltEngine, provenance
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.runner.kv_sizing import size_num_blocks
from engine.runner.cuda_graphs import enable_cuda_graphs
from engine.runner.model_runner import ModelRunner
from engine.sim.model_shapes import MODELS, ModelShape

# hf_peer.py --tiny's model: 2 layers, hidden 128, for CPU smoke runs (bytes_per_param set at build)
TINY = ModelShape("tiny", 2, 128, 256, 4, 2, 32, 1000)
ROPE_THETA = 500000.0          # Llama 3's; the anchor's LlamaConfig sets it
MAX_POSITION_EMBEDDINGS = 8192


def llama_config(shape: ModelShape) -> LlamaConfig:
    """The transformers config of ``shape`` (a Llama: SiLU gated MLP, RMSNorm, rotary)."""
    return LlamaConfig(hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                       num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
                       num_key_value_heads=shape.num_key_value_heads, head_dim=shape.head_dim,
                       vocab_size=shape.vocab_size, max_position_embeddings=MAX_POSITION_EMBEDDINGS,
                       tie_word_embeddings=shape.tie_word_embeddings, rope_theta=ROPE_THETA)


def get_shape(name: str) -> ModelShape:
    """``tiny`` or a name of ``engine.sim.model_shapes.MODELS``. Raises ``KeyError``."""
    return TINY if name == TINY.name else MODELS[name]


def random_model(name: str, device: torch.device, dtype: torch.dtype) -> LlamaForCausalLM:
    """An eval-mode ``LlamaForCausalLM`` of shape ``name`` with random weights drawn after
    ``torch.manual_seed(0)`` (the global RNG is left as it was), built directly on ``device`` in ``dtype``."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        with torch.device(device):
            model = LlamaForCausalLM(llama_config(get_shape(name))).to(dtype)
    return model.eval()


def random_engine(name: str, config: EngineConfig, device: torch.device, dtype: torch.dtype) -> BuiltEngine:
    """An engine on :func:`random_model` ``(name)`` with ``config``'s knobs (``num_gpu_blocks``
    None: sized from free memory, ``engine.runner.kv_sizing``). No tokenizer: prompts are token ids.
    The provenance (``RunInfo``) says the weights are random."""
    model = random_model(name, device, dtype)
    max_len = min(config.max_model_len, MAX_POSITION_EMBEDDINGS)
    config = config.replace(device=str(device), dtype=str(dtype).removeprefix("torch."), max_model_len=max_len,
                            model=f"random:{name}")
    config = config.replace(num_gpu_blocks=config.num_gpu_blocks or size_num_blocks(model.config, config, device, dtype))
    runner = ModelRunner.from_config(model, config)
    enable_cuda_graphs(runner, config)
    run_info = provenance(config, model, device, model_info={
        "name": f"random {name}", "path": None, "weight_file_hash": None, "architecture": "llama",
        "weights": "random (torch.manual_seed(0)), a dummy-weight benchmark model"})
    engine = LLMEngine(config, runner, config.num_gpu_blocks)
    return BuiltEngine(engine, config, run_info, None, model.config.vocab_size)
