"""The compact layers of the engine's own Llama-family forward (:mod:`engine.runner.forward.llama`):
RMSNorm with the residual add fused in front of it, and rotary position embeddings read from a
precomputed cos/sin table, all on a flat token batch ``[T, ...]`` (no batch dimension, no padding).

RMSNorm: Zhang & Sennrich, "Root Mean Square Layer Normalization" (NeurIPS 2019), computed as
transformers' ``LlamaRMSNorm`` does (normalized in float32, cast back, then scaled by the weight),
in one ``torch.nn.functional.rms_norm`` call instead of its five elementwise kernels. The fused
residual add follows vLLM's ``RMSNorm.forward(x, residual)``. RoPE: Su et al., "RoFormer" (2021),
the rotate-half ("NeoX") layout of transformers' ``apply_rotary_pos_emb``, applied to the query and
key heads together in one pass.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension.

    ``x`` ``[..., n]`` in any float dtype, ``weight`` ``[n]`` in ``x``'s dtype. The normalization
    runs in float32 and is cast back to ``x``'s dtype before the weight multiplies it (as
    transformers' ``LlamaRMSNorm``). Returns a new tensor shaped and typed as ``x``."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), eps=eps) * weight
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype) * weight


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-norm block boundary: ``residual + x`` becomes the new residual stream and its
    RMSNorm (:func:`rms_norm`) the next sublayer's input. ``x`` and ``residual`` ``[T, n]``;
    returns ``(normed [T, n], new residual [T, n])``."""
    residual = residual + x
    return rms_norm(residual, weight, eps), residual


def rope_table(rotary_emb: torch.nn.Module, num_positions: int, dtype: torch.dtype,
               device: torch.device) -> torch.Tensor:
    """The cos/sin table ``[num_positions, head_dim]`` (``cos`` in the first half of the last
    dimension, ``sin`` in the second; each half ``head_dim / 2`` wide, in ``dtype`` on ``device``)
    from a transformers rotary embedding module (``model.model.rotary_emb``, any static RoPE
    variant: default, linear, llama3, yarn: its ``inv_freq`` and ``attention_scaling``). Values equal
    what the module gives per position, computed once instead of every step."""
    positions = torch.arange(num_positions, device=device)[None]
    probe = torch.empty(0, dtype=dtype, device=device)
    with torch.no_grad():
        cos, sin = rotary_emb(probe, positions)                # [1, P, head_dim], halves repeated
    half = cos.shape[-1] // 2
    return torch.cat((cos[0, :, :half], sin[0, :, :half]), dim=-1).contiguous()


def apply_rope(x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Rotate heads ``x`` ``[T, heads, head_dim]`` (query and key heads side by side, any strides
    with a unit stride on the last dimension) by their tokens' rows ``cos_sin`` ``[T, head_dim]``
    of :func:`rope_table` (rotate-half layout). Returns a new contiguous ``[T, heads, head_dim]``."""
    cos, sin = cos_sin[:, None].chunk(2, dim=-1)              # [T, 1, head_dim / 2] each
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
