"""Plugging our paged attention into transformers models through their attention-function
registry (``AttentionInterface``) and a matching no-op mask (``AttentionMaskInterface``).

The model runner passes the step's :class:`PagedAttentionMetadata` as the extra forward keyword
``paged_meta``; transformers forwards unknown keywords down to the attention function.
"""
from __future__ import annotations

import os

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from engine.runner.attention.decode_static import StaticDecodeMetadata, static_decode_attention
from engine.runner.attention.metadata import PagedAttentionMetadata
from engine.runner.attention.reference import paged_attention
from engine.runner.attention.triton_attention import paged_attention_triton, triton_available

ATTN_IMPLEMENTATION = "batchscope_paged"


def select_paged_attention(query: torch.Tensor):
    """The paged attention for ``query``'s device: our Triton kernels on CUDA when triton imports
    (they read only each request's context through its block table), unless
    ``BATCHSCOPE_ATTENTION=reference`` asks for the torch reference; the torch reference on the
    CPU (the CPU path, and the oracle the kernels are tested against)."""
    return paged_attention_triton if triton_selected(query.device) else paged_attention


def triton_selected(device: torch.device) -> bool:
    """Whether steps on ``device`` run our Triton kernels (see :func:`select_paged_attention`)."""
    return device.type == "cuda" and os.environ.get("BATCHSCOPE_ATTENTION", "") != "reference" and triton_available()


def _paged_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask, scaling: float | None = None,
                             dropout: float = 0.0, **kwargs):
    meta = kwargs.get("paged_meta")
    if meta is None:
        raise RuntimeError(f"{ATTN_IMPLEMENTATION} attention called without paged_meta: "
                           "run the model through engine.runner.model_runner.ModelRunner")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return attend(query, key, value, meta, module.layer_idx, scale), None


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           meta: PagedAttentionMetadata | StaticDecodeMetadata, layer_idx: int, scale: float) -> torch.Tensor:
    """Layer ``layer_idx``'s paged attention for the step described by ``meta``: the padded
    decode-only path (:func:`static_decode_attention`) for a :class:`StaticDecodeMetadata` (CUDA
    graphs, ``engine.runner.cuda_graphs``), else the device's backend (:func:`select_paged_attention`).
    ``query`` ``[1, H, T, D]``, ``key``/``value`` ``[1, Hkv, T, D]`` after RoPE (views of any
    strides with a unit stride on ``D``); stores the new K/V, returns ``[1, T, H, D]``. Used by the
    transformers hook here and by the engine's own forward (``engine.runner.forward.llama``)."""
    if isinstance(meta, StaticDecodeMetadata):      # a padded decode-only batch (engine.runner.cuda_graphs)
        return static_decode_attention(query, key, value, meta, layer_idx, scale)
    return select_paged_attention(query)(query, key, value, meta, layer_idx, scale)


def _no_mask(*args, **kwargs):
    """Masking is done inside the paged attention from the block tables: no dense mask."""
    return None


def register_paged_attention() -> str:
    """Register the paged attention and its mask under :data:`ATTN_IMPLEMENTATION`; idempotent.
    Returns the name to pass to ``model.set_attn_implementation``."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, _paged_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _no_mask)
    return ATTN_IMPLEMENTATION
