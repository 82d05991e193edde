"""A tiny random-weight Llama model folder for tests (seconds to build, megabytes on disk)."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_tiny_llama(
    folder: str | Path,
    seed: int = 0,
    *,
    vocab_size: int = 512,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 1024,
) -> Path:
    """Write a random-weight ``LlamaForCausalLM`` (fp32 safetensors + config.json) into ``folder``.

    The weights depend only on ``seed`` and the shape arguments; the global torch RNG is left as it
    was. No tokenizer is written: ``load_model`` then returns ``tokenizer=None`` and callers feed
    token ids in ``[0, vocab_size)``. EOS is token 2, BOS 1, PAD 0. Returns the folder's path.
    """
    folder = Path(folder)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    return folder
