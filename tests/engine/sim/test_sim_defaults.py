"""``--executor sim`` without a preset starts as vLLM would on the simulated model and device:
256 slots, 8,192 tokens per step, max_model_len from the model's config.json, and a KV pool of
90% of the device memory minus the weights and the activation peak (issue 18). Flags and presets
still win."""
from __future__ import annotations

import json

import pytest

from app.cli import engine_config, parse_args
from app.factory import build_sim_engine
from engine.sim.config import SIM_MEMORY_UTILIZATION, SimConfig, activation_peak_bytes, sim_num_blocks
from engine.sim.hardware import DEVICES
from engine.sim.model_shapes import derived_max_model_len, get_model_shape

LLAMA_LIKE = {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 8,
              "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 12288,
              "torch_dtype": "bfloat16"}


@pytest.fixture
def model_config(tmp_path):
    path = tmp_path / "toy" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA_LIKE))
    return path


def run_args(*extra: str) -> list[str]:
    return ["run", "--trace", "t.csv", "--record", "r.sqlite", *extra]


@pytest.mark.parametrize("cfg, want", [
    ({"max_position_embeddings": 4096}, 4096),
    ({"max_position_embeddings": 4096, "n_positions": 2048}, 2048),             # the smallest key wins
    ({"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 16384),
    ({"max_position_embeddings": 131072,                                         # llama3: already scaled
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}, 131072),
    ({"max_position_embeddings": 32768,                                          # yarn: from the original
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),
    ({"hidden_size": 64}, None),
])
def test_max_model_len_is_derived_from_the_config_as_vllm_does(cfg, want):
    assert derived_max_model_len(cfg) == want


def test_sim_knobs_default_to_vllms_and_the_models_length(model_config):
    c = engine_config(parse_args(run_args("--executor", "sim", "--sim-model", str(model_config))))
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.max_model_len) == (256, 8192, 12288)
    named = engine_config(parse_args(run_args("--executor", "sim", "--sim-model", "llama-3.1-8b")))
    assert named.max_model_len == 131072 and named.num_gpu_blocks is None     # sized when built


def test_flags_and_presets_win_over_the_sim_defaults(model_config):
    sim = ("--executor", "sim", "--sim-model", str(model_config))
    c = engine_config(parse_args(run_args(*sim, "--max-num-seqs", "8", "--max-model-len", "4096")))
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.max_model_len) == (8, 8192, 4096)
    whole = engine_config(parse_args(run_args(*sim, "--no-chunked-prefill")))
    assert whole.max_num_batched_tokens == whole.max_model_len == 12288      # a whole prompt per step
    preset = engine_config(parse_args(run_args("--preset", "demo", *sim)))
    assert (preset.max_num_seqs, preset.max_num_batched_tokens) == (16, 256)   # the preset's values
    assert preset.max_model_len == 12288                                     # the demo preset sets none


def test_the_model_executor_keeps_its_small_defaults():
    c = engine_config(parse_args(run_args()))
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.max_model_len) == (16, 256, 2048)


def test_kv_pool_leaves_the_weights_and_the_activation_peak_out(model_config):
    shape = get_model_shape("llama-3.1-8b")
    cfg = SimConfig(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072)
    n = sim_num_blocks(cfg, shape, DEVICES["h100"])
    per_block = shape.kv_bytes_per_token * cfg.block_size
    weights_only = int((SIM_MEMORY_UTILIZATION * DEVICES["h100"].memory_bytes - shape.weight_bytes) // per_block)
    activations = activation_peak_bytes(shape, 8192, 256)
    assert 0.5 * 2**30 < activations < 1.5 * 2**30        # vLLM logged 1.26 GiB for Llama-3-8B on an H100
    assert weights_only - n == pytest.approx(activations / per_block, abs=1)
    smaller_steps = sim_num_blocks(cfg.replace(max_num_batched_tokens=2048), shape, DEVICES["h100"])
    assert n < smaller_steps <= weights_only
    built = build_sim_engine(engine_config(parse_args(run_args("--executor", "sim", "--sim-model", "llama-3.1-8b"))))
    assert built.config.num_gpu_blocks == n == built.engine.num_gpu_blocks


def test_a_model_longer_than_the_device_holds_is_refused_with_the_numbers():
    cfg = SimConfig(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=10**7)
    with pytest.raises(RuntimeError, match="too small.*activations.*max_model_len=10000000"):
        sim_num_blocks(cfg, get_model_shape("llama-3.1-8b"), DEVICES["l40s"])
