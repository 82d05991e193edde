"""A tiny random-weight Llama model folder for tests (seconds to build, megabytes on disk)."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    seed: int = 0,
    *,
    vocab_size: int = 512,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 1024,
) -> LlamaForCausalLM:
    """A random-weight fp32 ``LlamaForCausalLM`` in memory, in eval mode, on the CPU.

    The weights depend only on ``seed`` and the shape arguments; the global torch RNG is left as it
    was. EOS is token 2, BOS 1, PAD 0; token ids are in ``[0, vocab_size)``.
    """
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
    return model.eval()


def make_tiny_llama(folder: str | Path, seed: int = 0, **shape) -> Path:
    """Write :func:`tiny_llama` ``(seed, **shape)`` (fp32 safetensors + config.json) into
    ``folder`` and return its path.

    No tokenizer is written: ``load_model`` then returns ``tokenizer=None`` and callers feed
    token ids in ``[0, vocab_size)``. Raises ``TypeError`` for an unknown shape argument.
    """
    folder = Path(folder)
    model = tiny_llama(seed, **shape)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    return folder
