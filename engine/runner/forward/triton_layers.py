"""Launchers of the forward's Triton kernels (:mod:`engine.runner.forward.triton_kernels`): the same
contracts as :func:`engine.runner.forward.layers.add_rms_norm` and
:func:`engine.runner.forward.layers.apply_rope`, one kernel each. Used on CUDA when triton imports
(:func:`fused_kernels_selected`); on the CPU only under the Triton interpreter (tests).
"""
from __future__ import annotations

import functools
import os

import torch

from engine.runner.attention.triton_attention import triton_available


def fused_kernels_selected(device: torch.device) -> bool:
    """Whether the forward on ``device`` runs these kernels: on CUDA when triton imports, unless
    ``BATCHSCOPE_FUSED_KERNELS=0`` asks for the torch ops."""
    return device.type == "cuda" and os.environ.get("BATCHSCOPE_FUSED_KERNELS", "1") != "0" and triton_available()


@functools.lru_cache(maxsize=1)
def _kernels():
    from engine.runner.forward import triton_kernels
    return triton_kernels


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual) * weight, x + residual)`` in one kernel; ``residual`` None: the
    norm of ``x`` alone and ``x`` itself as the residual. ``x``/``residual`` ``[T, N]`` with a unit
    last stride, ``weight`` ``[N]``; results new ``[T, N]`` tensors in ``x``'s dtype."""
    t, n = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    if t == 0:
        return out, res_out
    r = residual if residual is not None else x
    block = _pow2(n)
    _kernels().add_rms_norm_kernel[(t,)](
        x, r, weight, out, res_out, x.stride(0), r.stride(0), out.stride(0), res_out.stride(0), eps,
        N=n, BLOCK_N=block, HAS_RESIDUAL=residual is not None, num_warps=8 if block >= 4096 else 4)
    return out, res_out


def apply_rope_triton(x: torch.Tensor, table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate heads ``x`` ``[T, heads, D]`` (unit last stride) by the rows ``positions`` (int64
    ``[T]``) of the cos/sin ``table`` ``[P, D]`` (:func:`engine.runner.forward.layers.rope_table`), in
    one kernel. Returns a new contiguous ``[T, heads, D]``."""
    t, heads, d = x.shape
    out = torch.empty((t, heads, d), dtype=x.dtype, device=x.device)
    if t == 0:
        return out
    half = d // 2
    _kernels().rope_kernel[(t,)](x, table, positions, out, x.stride(0), x.stride(1),
                                 HEADS=heads, HALF=half, HEADS_P=_pow2(heads), HALF_P=_pow2(half), num_warps=4)
    return out


__all__ = ["add_rms_norm_triton", "apply_rope_triton", "fused_kernels_selected"]
