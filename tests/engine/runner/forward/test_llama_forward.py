"""The engine's own Llama-family forward against transformers' forward on the same weights (fp32,
CPU, one torch thread): logits of whole prompts, and of a schedule of steps mixing new prompts,
continued prefill chunks and decodes over the paged cache, equal the logits of transformers' plain
forward over each whole sequence; GQA, tied embeddings, attention biases (Qwen2) and per-head Q/K
norms (Qwen3) included. And how the forward is chosen (``build_forward``)."""
from __future__ import annotations

import copy
import logging

import pytest
import torch
import transformers

from engine.config import ConfigError, EngineConfig
from engine.runner.attention.metadata import PagedAttentionMetadata
from engine.runner.forward import LlamaForward, TransformersForward, UnsupportedModel, build_forward

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 256
TOL = 1e-4
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=256)
CONFIGS = {
    "llama GQA, untied": (transformers.LlamaConfig, dict(num_key_value_heads=2, tie_word_embeddings=False)),
    "llama MHA, tied, attention bias": (transformers.LlamaConfig, dict(num_key_value_heads=4, tie_word_embeddings=True,
                                                                        attention_bias=True)),
    "llama3 RoPE scaling, head_dim 32": (transformers.LlamaConfig, dict(
        num_key_value_heads=1, head_dim=32, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "mistral": (transformers.MistralConfig, dict(num_key_value_heads=2, sliding_window=None)),
    "qwen2 (qkv bias), tied": (transformers.Qwen2Config, dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen3 (q/k norm)": (transformers.Qwen3Config, dict(num_key_value_heads=2, head_dim=16)),
}


def make_model(name: str, seed: int = 0) -> torch.nn.Module:
    config_cls, extra = CONFIGS[name]
    config = config_cls(**SMALL, **extra)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        for p in model.parameters():          # random biases and norm weights too (they start at 0 / 1)
            if p.dim() == 1:
                p.data.normal_(1.0 if p.shape[0] in (config.hidden_size, 16, 32) else 0.0, 0.1)
    return model


def kv_caches(model, num_blocks: int, block_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    shape = (num_blocks, block_size, cfg.num_key_value_heads, d)
    return [(torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.num_hidden_layers)]


def full_logits(model, ids: list[int]) -> torch.Tensor:
    """transformers' plain forward (its own attention) over one whole sequence: ``[L, vocab]``."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


# request -> tokens it schedules at each step (0: not scheduled): new prompts, continued prefill
# chunks and decodes in the same steps
SCHEDULE = {"a": [16, 10, 1, 1, 1], "b": [0, 7, 7, 1, 1], "c": [0, 0, 12, 1, 1], "d": [1, 1, 1, 1, 1]}
BLOCK_SIZE = 4


def run_schedule(forward, model) -> dict[str, torch.Tensor]:
    """Run :data:`SCHEDULE` through ``forward`` over its own paged cache (each request in blocks
    of its own, interleaved); returns each request's logits ``[L, vocab]`` for every token fed."""
    gen = torch.Generator().manual_seed(3)
    seqs = {r: torch.randint(3, VOCAB, (sum(n),), generator=gen).tolist() for r, n in SCHEDULE.items()}
    num_blocks = len(seqs) * max(-(-len(s) // BLOCK_SIZE) for s in seqs.values())
    caches = kv_caches(model, num_blocks, BLOCK_SIZE)
    ids = list(range(num_blocks))[::-1]
    tables = {r: ids[i::len(seqs)][:-(-len(s) // BLOCK_SIZE)] for i, (r, s) in enumerate(seqs.items())}
    done = dict.fromkeys(seqs, 0)
    out = {r: [] for r in seqs}
    for step in range(len(SCHEDULE["a"])):
        reqs = [r for r in seqs if SCHEDULE[r][step]]
        qlens = [SCHEDULE[r][step] for r in reqs]
        tokens = [t for r, n in zip(reqs, qlens) for t in seqs[r][done[r]:done[r] + n]]
        positions = [p for r, n in zip(reqs, qlens) for p in range(done[r], done[r] + n)]
        meta = PagedAttentionMetadata.build(qlens, [done[r] + n for r, n in zip(reqs, qlens)],
                                            [tables[r] for r in reqs], caches, BLOCK_SIZE, torch.device("cpu"))
        with torch.inference_mode():
            logits = forward.compute_logits(forward.hidden_states(torch.tensor(tokens), torch.tensor(positions), meta))
        for r, chunk in zip(reqs, logits.split(qlens)):
            out[r].append(chunk)
            done[r] += chunk.shape[0]
    return {r: torch.cat(v) for r, v in out.items()}, seqs


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_of_a_whole_prompt_equal_transformers(name):
    model = make_model(name)
    reference = copy.deepcopy(model)
    ours = LlamaForward(model)
    ids = torch.randint(3, VOCAB, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    caches = kv_caches(model, 10, BLOCK_SIZE)
    meta = PagedAttentionMetadata.build([40], [40], [list(range(10))], caches, BLOCK_SIZE, torch.device("cpu"))
    with torch.inference_mode():
        logits = ours.compute_logits(ours.hidden_states(torch.tensor(ids), torch.arange(40), meta))
    expected = full_logits(reference, ids)
    assert expected.std() > 0.1                      # the comparison has something to compare
    torch.testing.assert_close(logits, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_mixed_steps_with_chunked_prefill_and_decode_equal_transformers(name):
    """Both forwards over the same schedule of mixed steps: each token's logits equal transformers'
    plain forward over the request's whole sequence (so the paged cache holds the right K/V)."""
    model = make_model(name)
    reference = copy.deepcopy(model)
    ours, ours_seqs = run_schedule(LlamaForward(model), model)
    hooked_model = copy.deepcopy(reference)
    theirs, _ = run_schedule(TransformersForward(hooked_model), hooked_model)
    for r, ids in ours_seqs.items():
        expected = full_logits(reference, ids)
        torch.testing.assert_close(ours[r], expected, rtol=0, atol=TOL, msg=lambda m: f"{name} {r}: {m}")
        torch.testing.assert_close(theirs[r], expected, rtol=0, atol=TOL, msg=lambda m: f"{name} {r}: {m}")


def test_weights_are_shared_with_the_transformers_model():
    """Fusing makes the transformers model's projections views of the stacked weights: nothing
    held twice, and the transformers forward still gives the same logits."""
    model = make_model("llama MHA, tied, attention bias")
    ids = list(range(5, 25))
    before = full_logits(model, ids)
    ours = LlamaForward(model)
    layer, attn = ours.layers[0], model.model.layers[0].self_attn
    stacked = layer.qkv.untyped_storage().data_ptr()
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert proj.weight.untyped_storage().data_ptr() == stacked
        assert proj.bias.untyped_storage().data_ptr() == layer.qkv_bias.untyped_storage().data_ptr()
    assert model.model.layers[0].mlp.up_proj.weight.untyped_storage().data_ptr() == layer.gate_up.untyped_storage().data_ptr()
    assert ours.lm_head.data_ptr() == ours.embed.data_ptr()           # tied: one tensor
    torch.testing.assert_close(full_logits(model, ids), before, rtol=0, atol=0)


def test_auto_picks_ours_for_llama_and_transformers_otherwise(caplog):
    assert isinstance(build_forward(make_model("qwen2 (qkv bias), tied")), LlamaForward)
    assert isinstance(build_forward(make_model("mistral"), "transformers"), TransformersForward)
    gelu = transformers.LlamaConfig(**SMALL, hidden_act="gelu")
    model = transformers.LlamaForCausalLM(gelu).eval()
    with caplog.at_level(logging.INFO, logger="engine.runner.forward"):
        assert isinstance(build_forward(model, "auto"), TransformersForward)
    assert "model forward: transformers for LlamaForCausalLM (hidden_act 'gelu'" in caplog.text
    with pytest.raises(UnsupportedModel, match="hidden_act 'gelu'"):
        LlamaForward(transformers.LlamaForCausalLM(gelu).eval())
    with pytest.raises(ValueError, match="model_impl must be one of"):
        build_forward(model, "vllm")


def test_the_config_knob_is_validated():
    assert EngineConfig().model_impl == "auto"
    assert EngineConfig(model_impl="transformers").model_impl == "transformers"
    with pytest.raises(ConfigError, match="model_impl must be one of"):
        EngineConfig(model_impl="fused")
