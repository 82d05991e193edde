"""Triton kernels for paged attention (the ``@triton.jit`` functions only; the launchers, shapes and
the step plan live in :mod:`engine.runner.attention.triton_attention`). Importing this module imports
``triton``: only :mod:`engine.runner.attention.triton_attention` does, lazily.

Cache layout (one pair per layer): ``k_cache``/``v_cache`` ``[num_blocks, block_size, num_kv_heads,
head_dim]``; token at position ``p`` of request ``r`` lives in block ``block_tables[r, p // block_size]``
at offset ``p % block_size``. Every kernel gathers K/V one token at a time through the block table,
so the key tile (``TILE_N`` tokens) is independent of the cache block size.

Grouped-query attention: the ``GROUP = num_heads // num_kv_heads`` query heads that share a KV head
are processed by the same program as rows of one matrix, so each K/V tile is loaded once per group
(rows padded to a power of two, at least 16 for ``tl.dot``). Softmax is the online (streaming) one
of FlashAttention in base 2 (``exp2`` with the scale pre-multiplied by log2(e)), accumulated in fp32.
Masked scores are ``-inf``; a row whose running maximum is still ``-inf`` uses 0 as its shift so no
``inf - inf`` (NaN) can appear.
"""
from __future__ import annotations

import triton
import triton.language as tl

# Integer arguments Triton must not specialize on (it compiles a variant per "== 1" and "% 16 == 0"
# of each integer): the block-table row stride is the step's widest table, different every step.
UNSPECIALIZED = ["stride_bt"]


@triton.jit
def store_kvcache_kernel(
    key_ptr, value_ptr,                  # [T, Hkv, D] new keys / values (any strides, last dim 1)
    k_cache_ptr, v_cache_ptr,            # [num_blocks, block_size, Hkv, D]
    slot_ptr,                            # int64 [T] flat slot block_id * block_size + offset; < 0: skip
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
    BLOCK_SIZE: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    HKV_P: tl.constexpr, D_P: tl.constexpr,
):
    """One program per token: copy its ``[Hkv, D]`` key and value rows into their cache slot."""
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        blk = slot // BLOCK_SIZE
        off = slot % BLOCK_SIZE
        h = tl.arange(0, HKV_P)[:, None]
        d = tl.arange(0, D_P)[None, :]
        mask = (h < NUM_KV_HEADS) & (d < HEAD_DIM)
        k = tl.load(key_ptr + t * stride_kt + h * stride_kh + d, mask=mask)
        v = tl.load(value_ptr + t * stride_vt + h * stride_vh + d, mask=mask)
        tl.store(k_cache_ptr + blk * stride_kcb + off * stride_kcs + h * stride_kch + d,
                 k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + blk * stride_vcb + off * stride_vcs + h * stride_vch + d,
                 v.to(v_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, INTERPRETED: tl.constexpr):
    """``a @ b`` accumulated in fp32. ``INTERPRETED`` (True under the Triton interpreter only, whose
    ``tl.dot`` multiplies bf16 operands as their raw uint16 bits) casts both operands to fp32 first:
    exact for bf16/fp16 values, so the result is what the GPU's bf16 dot with fp32 accumulation gives.
    The kernels also loop with ``while`` under the interpreter: Triton 3.6's cannot take tensor bounds
    in ``range()`` with NumPy >= 2.5 (``int()`` of a 1-element array); compiled code keeps the ``for``
    loops, which Triton software-pipelines."""
    if INTERPRETED:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _attend_tile(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_row_ptr, kv_head, start, kv_end,
                 q_pos, scale_log2,
                 stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
                 HEAD_DIM: tl.constexpr, D_P: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                 TILE_N: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                 INTERPRETED: tl.constexpr):
    """One step of the online softmax: keys/values at positions ``start .. start + TILE_N - 1``
    (those < ``kv_end``; with ``CAUSAL`` also <= the row's ``q_pos``) of one request and KV head,
    gathered through the request's block-table row. ``q`` ``[M, D_P]`` (input dtype), running max
    ``m_i`` and sum ``l_i`` ``[M]`` (log2 domain, fp32), ``acc`` ``[M, D_P]`` fp32."""
    pos = start + tl.arange(0, TILE_N)
    valid = pos < kv_end
    d = tl.arange(0, D_P)
    d_ok = d < HEAD_DIM
    blk = tl.load(table_row_ptr + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
    off = pos % BLOCK_SIZE
    k_t = tl.load(k_cache_ptr + blk[None, :] * stride_kcb + off[None, :] * stride_kcs
                  + kv_head * stride_kch + d[:, None],
                  mask=valid[None, :] & d_ok[:, None], other=0.0)                    # [D_P, TILE_N]
    s = _dot(q, k_t.to(q.dtype), PRECISION, INTERPRETED) * scale_log2         # [M, TILE_N] fp32
    if CAUSAL:
        keep = valid[None, :] & (pos[None, :] <= q_pos[:, None])
    else:
        keep = valid[None, :]
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - shift)
    p = tl.exp2(s - shift[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_cache_ptr + blk[:, None] * stride_vcb + off[:, None] * stride_vcs
                + kv_head * stride_vch + d[None, :],
                mask=valid[:, None] & d_ok[None, :], other=0.0)                      # [TILE_N, D_P]
    v = v.to(q.dtype)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION, INTERPRETED)
    return m_new, l_i, acc


@triton.jit(do_not_specialize=UNSPECIALIZED)
def paged_decode_kernel(
    out_ptr,                   # [T, H, D] output rows (only this kernel's rows are written)
    part_out_ptr,              # fp32 [Rd, H, NUM_SPLITS, D_P]   per-split normalised outputs
    part_lse_ptr,              # fp32 [Rd, H, NUM_SPLITS]        per-split log2-sum-exp2 (-inf: empty)
    q_ptr,                     # [T, H, D]
    k_cache_ptr, v_cache_ptr,  # [num_blocks, block_size, Hkv, D]
    block_tables_ptr,          # int [R, Bmax]
    decode_ptr,                # int32 [Rd, 3]: query row, request index (block-table row), context length
    scale_log2,                # softmax scale * log2(e)
    stride_qt, stride_qh, stride_ot, stride_oh, stride_bt,
    stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
    NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr, D_P: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, PRECISION: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Grid ``(Rd, Hkv, NUM_SPLITS)``: one decode request, one KV head (its GROUP query heads as
    rows), one contiguous share of the context's key tiles. With one split the output is written
    directly; otherwise the split's normalised output and log-sum-exp go to the partial buffers and
    :func:`decode_reduce_kernel` combines them."""
    r = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    row = tl.load(decode_ptr + r * 3).to(tl.int64)
    req = tl.load(decode_ptr + r * 3 + 1).to(tl.int64)
    ctx = tl.load(decode_ptr + r * 3 + 2)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D_P)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    head = kv_head * GROUP + g
    q = tl.load(q_ptr + row * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)                      # [BLOCK_G, D_P]

    num_tiles = tl.cdiv(ctx, TILE_N)
    per_split = tl.cdiv(num_tiles, NUM_SPLITS)
    lo = split * per_split
    hi = tl.minimum(lo + per_split, num_tiles)
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, D_P], dtype=tl.float32)
    q_pos = tl.zeros([BLOCK_G], dtype=tl.int32)            # unused: not causal (one query, last position)
    table_row = block_tables_ptr + req * stride_bt
    if INTERPRETED:                     # see _dot
        j = lo
        while j < hi:
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_row, kv_head,
                                         j * TILE_N, ctx, q_pos, scale_log2,
                                         stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
                                         HEAD_DIM, D_P, BLOCK_SIZE, TILE_N, False, PRECISION, INTERPRETED)
            j += 1
    else:
        for j in range(lo, hi):
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_row, kv_head,
                                         j * TILE_N, ctx, q_pos, scale_log2,
                                         stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
                                         HEAD_DIM, D_P, BLOCK_SIZE, TILE_N, False, PRECISION, INTERPRETED)

    has = l_i > 0.0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    if NUM_SPLITS == 1:
        tl.store(out_ptr + row * stride_ot + head[:, None] * stride_oh + d[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])
    else:
        part = (r.to(tl.int64) * NUM_HEADS + head) * NUM_SPLITS + split                # [BLOCK_G]
        tl.store(part_out_ptr + part[:, None] * D_P + d[None, :], o, mask=g_ok[:, None])
        lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + part, lse, mask=g_ok)


@triton.jit
def decode_reduce_kernel(
    out_ptr,                   # [T, H, D]
    part_out_ptr,              # fp32 [Rd, H, NUM_SPLITS, D_P]
    part_lse_ptr,              # fp32 [Rd, H, NUM_SPLITS]
    decode_ptr,                # int32 [Rd, 3]
    stride_ot, stride_oh,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, D_P: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLITS_P: tl.constexpr,
):
    """Grid ``(Rd, H)``: combine one head's split partials, weighting each split's normalised
    output by ``2 ** (lse_s - max lse)`` (empty splits weigh 0; a row whose context is 0 tokens,
    e.g. padding, gets zeros)."""
    r = tl.program_id(0)
    head = tl.program_id(1)
    row = tl.load(decode_ptr + r * 3).to(tl.int64)
    s = tl.arange(0, SPLITS_P)
    d = tl.arange(0, D_P)
    s_ok = s < NUM_SPLITS
    base = (r.to(tl.int64) * NUM_HEADS + head) * NUM_SPLITS
    lse = tl.load(part_lse_ptr + base + s, mask=s_ok, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)        # all empty (a 0-token padding row): zeros
    w = tl.exp2(lse - top)
    o = tl.load(part_out_ptr + (base + s)[:, None] * D_P + d[None, :], mask=s_ok[:, None], other=0.0)
    total = tl.sum(w, axis=0)
    res = tl.sum(o * w[:, None], axis=0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + row * stride_ot + head * stride_oh + d, res.to(out_ptr.dtype.element_ty),
             mask=d < HEAD_DIM)


@triton.jit(do_not_specialize=UNSPECIALIZED)
def paged_prefill_kernel(
    out_ptr,                   # [T, H, D]
    q_ptr,                     # [T, H, D]
    k_cache_ptr, v_cache_ptr,  # [num_blocks, block_size, Hkv, D] (this step's K/V already stored)
    block_tables_ptr,          # int [R, Bmax]
    qblock_ptr,                # int32 [NQB, 4]: request index, first query row, rows (<= BLOCK_Q),
                               #                 absolute position of the first row
    scale_log2,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_bt,
    stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
    GROUP: tl.constexpr, GROUP_P: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr, D_P: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
    PRECISION: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Grid ``(NQB, Hkv)``: one block of up to ``BLOCK_Q`` consecutive query tokens of one request
    times the GROUP query heads of one KV head, as ``BLOCK_Q * GROUP_P`` rows (row ``m`` = token
    ``m // GROUP_P``, head ``m % GROUP_P``). Query token at absolute position ``p`` attends to the
    request's cache positions ``0 .. p`` (the cached prefix plus this chunk, read through the block
    table); key tiles beyond the block's last position are never visited."""
    qb = tl.program_id(0)
    kv_head = tl.program_id(1)
    req = tl.load(qblock_ptr + qb * 4).to(tl.int64)
    row0 = tl.load(qblock_ptr + qb * 4 + 1).to(tl.int64)
    nrows = tl.load(qblock_ptr + qb * 4 + 2)
    pos0 = tl.load(qblock_ptr + qb * 4 + 3)

    m = tl.arange(0, BLOCK_Q * GROUP_P)
    t = m // GROUP_P
    g = m % GROUP_P
    row_ok = (t < nrows) & (g < GROUP)
    d = tl.arange(0, D_P)
    d_ok = d < HEAD_DIM
    head = kv_head * GROUP + g
    io_mask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + (row0 + t)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=io_mask, other=0.0)                                            # [M, D_P]
    q_pos = pos0 + t
    kv_end = pos0 + nrows

    m_i = tl.full([BLOCK_Q * GROUP_P], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q * GROUP_P], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_P, D_P], dtype=tl.float32)
    table_row = block_tables_ptr + req * stride_bt
    if INTERPRETED:                     # see _dot
        start = 0
        while start < kv_end:
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_row, kv_head,
                                         start, kv_end, q_pos, scale_log2,
                                         stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
                                         HEAD_DIM, D_P, BLOCK_SIZE, TILE_N, True, PRECISION, INTERPRETED)
            start += TILE_N
    else:
        for start in range(0, kv_end, TILE_N):
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_row, kv_head,
                                         start, kv_end, q_pos, scale_log2,
                                         stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
                                         HEAD_DIM, D_P, BLOCK_SIZE, TILE_N, True, PRECISION, INTERPRETED)
    o = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(out_ptr + (row0 + t)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
             o.to(out_ptr.dtype.element_ty), mask=io_mask)
