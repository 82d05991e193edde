"""Triton kernels of the engine's own Llama-family forward (the ``@triton.jit`` functions only; the
launchers live in :mod:`engine.runner.forward.triton_layers`). Importing this module imports
``triton``: only the launchers do, lazily.

``add_rms_norm_kernel``: residual add + RMSNorm (Zhang & Sennrich 2019) of one token row per
program, in one pass over the row (the torch version is five to seven kernels). ``rope_kernel``:
rotary embedding (Su et al. 2021, rotate-half layout) of every query and key head of one token per
program, its cos/sin row gathered from the table by the token's position inside the kernel. Both
compute in float32 and round where transformers' Llama rounds (the residual sum and the normalized
row in the model's dtype before the weight multiplies it; cos and sin in the model's dtype): every
operation on float32 values, rounded by casting to the model's dtype and back (the Triton
interpreter does arithmetic on bf16 values as their raw bits, so none is done on them).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr,     # [T, N] input, [T, N] residual (if HAS_RESIDUAL), [N] weight
    out_ptr, residual_out_ptr,           # [T, N] normed output, [T, N] x + residual (if HAS_RESIDUAL)
    stride_x, stride_r, stride_o, stride_ro,
    eps,
    N: tl.constexpr, BLOCK_N: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):
    """One program per row: ``s = x (+ residual)``, stored as the new residual; ``out =
    (s / sqrt(mean(s**2) + eps)).to(dtype) * weight``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    dtype = out_ptr.dtype.element_ty
    s = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        s += tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        s = s.to(dtype).to(tl.float32)                   # the sum in the model's dtype, as torch's add
        tl.store(residual_out_ptr + row * stride_ro + cols, s.to(dtype), mask=mask)
    inv = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / N + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (s * inv).to(dtype).to(tl.float32) * w
    tl.store(out_ptr + row * stride_o + cols, y.to(dtype), mask=mask)


@triton.jit
def rope_kernel(
    x_ptr,                               # [T, HEADS, D] query and key heads (any strides, last dim 1)
    table_ptr,                           # [P, D] cos (first half) | sin (second half), model dtype
    pos_ptr,                             # int64 [T] positions
    out_ptr,                             # [T, HEADS, D] contiguous
    stride_xt, stride_xh,
    HEADS: tl.constexpr, HALF: tl.constexpr, HEADS_P: tl.constexpr, HALF_P: tl.constexpr,
):
    """One program per token: ``[x1 * cos - x2 * sin, x2 * cos + x1 * sin]`` for every head, with
    ``x1``/``x2`` the two halves of the head and cos/sin the table row of the token's position."""
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    h = tl.arange(0, HEADS_P)[:, None]
    d = tl.arange(0, HALF_P)[None, :]
    mask = (h < HEADS) & (d < HALF)
    cos = tl.load(table_ptr + pos * (2 * HALF) + d, mask=d < HALF, other=0.0).to(tl.float32)
    sin = tl.load(table_ptr + pos * (2 * HALF) + HALF + d, mask=d < HALF, other=0.0).to(tl.float32)
    base = x_ptr + t * stride_xt + h * stride_xh + d
    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    # each product rounded to the model's dtype before the sum, as transformers' q * cos + rotate_half(q) * sin
    a1 = (x1 * cos).to(dtype).to(tl.float32)
    b1 = (x2 * sin).to(dtype).to(tl.float32)
    a2 = (x2 * cos).to(dtype).to(tl.float32)
    b2 = (x1 * sin).to(dtype).to(tl.float32)
    out = out_ptr + t * (HEADS * 2 * HALF) + h * (2 * HALF) + d
    tl.store(out, (a1 - b1).to(dtype), mask=mask)
    tl.store(out + HALF, (a2 + b2).to(dtype), mask=mask)
