"""Model forward passes the runner can use, chosen by ``EngineConfig.model_impl``
(:func:`build_forward`): the engine's own fused Llama-family forward
(:class:`engine.runner.forward.llama.LlamaForward`) or transformers' forward with our attention
(:class:`engine.runner.forward.transformers_forward.TransformersForward`). Both take one step's flat
token batch and the paged KV cache's metadata and give hidden states, then logits."""
from __future__ import annotations

import logging
from typing import Protocol

import torch

from engine.runner.forward.llama import LlamaForward, UnsupportedModel, unsupported_reason
from engine.runner.forward.transformers_forward import TransformersForward
from engine.vocab import ModelImpl, values

log = logging.getLogger(__name__)


class ModelForward(Protocol):
    """What the model runner and the CUDA graphs need of a forward pass."""

    name: str
    hidden_size: int

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, meta) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


def build_forward(model: torch.nn.Module, impl: str = ModelImpl.AUTO) -> ModelForward:
    """The forward pass ``impl`` (a :class:`engine.vocab.ModelImpl` value) over the loaded
    transformers ``model``: ``batchscope`` the engine's own (raises :class:`UnsupportedModel` naming
    why when the model is outside it), ``transformers`` transformers' with our paged attention,
    ``auto`` ours when the architecture is supported, else transformers' (a log line says which and
    why). Raises ``ValueError`` for another ``impl``."""
    if impl not in values(ModelImpl):
        raise ValueError(f"model_impl must be one of {values(ModelImpl)}, got {impl!r}")
    arch = type(model).__name__
    if impl == ModelImpl.TRANSFORMERS:
        return TransformersForward(model)
    if impl == ModelImpl.BATCHSCOPE:
        return LlamaForward(model)
    reason = unsupported_reason(model)
    if reason is None:
        log.info("model forward: batchscope (fused Llama-family forward) for %s", arch)
        return LlamaForward(model)
    log.info("model forward: transformers for %s (%s)", arch, reason)
    return TransformersForward(model)


__all__ = ["LlamaForward", "ModelForward", "TransformersForward", "UnsupportedModel", "build_forward"]
