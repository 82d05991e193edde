"""Reference paged attention in plain torch: correct on any device, used on the CPU and as the
oracle for faster kernels. Algorithm: PagedAttention (Kwon et al., SOSP 2023) — K/V live in
fixed-size blocks addressed through per-request block tables."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.runner.attention.metadata import PagedAttentionMetadata


def write_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Scatter this step's keys/values ``[T, num_kv_heads, head_dim]`` into the paged caches
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` at the flat slots ``slot_mapping [T]``."""
    kvh, d = k_cache.shape[-2:]
    k_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
    v_cache.view(-1, kvh, d).index_copy_(0, slot_mapping, value.to(v_cache.dtype))


def gather_kv(cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """Gather ``[R, Bmax * block_size, num_kv_heads, head_dim]`` from the paged cache."""
    r, bmax = block_tables.shape
    g = cache.index_select(0, block_tables.reshape(-1))
    return g.view(r, bmax * cache.shape[1], cache.shape[2], cache.shape[3])


def paged_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    meta: PagedAttentionMetadata, layer_idx: int, scaling: float) -> torch.Tensor:
    """Causal attention of a packed step over the paged KV cache.

    ``query`` ``[1, H, T, D]``, ``key``/``value`` ``[1, Hkv, T, D]`` (after RoPE) for the ``T``
    packed tokens. Writes the new K/V into layer ``layer_idx``'s cache first, then each request's
    queries attend to its whole context (earlier steps and this one), causally. Returns
    ``[1, T, H, D]`` (the layout transformers' attention functions return).
    """
    k_cache, v_cache = meta.kv_caches[layer_idx]
    write_kv(key[0].transpose(0, 1), value[0].transpose(0, 1), k_cache, v_cache, meta.slot_mapping)
    q = query[0]                                   # [H, T, D]
    h, t, d = q.shape
    hkv = k_cache.shape[2]
    out = torch.empty(t, h, d, dtype=q.dtype, device=q.device)
    bs = meta.block_size

    for rows, tables, mask in meta.decode_groups:
        kd = gather_kv(k_cache, tables).to(q.dtype)                       # [Rg, L, Hkv, D]
        vd = gather_kv(v_cache, tables).to(q.dtype)
        qd = q[:, rows].transpose(0, 1).unsqueeze(2)                      # [Rg, H, 1, D]
        o = F.scaled_dot_product_attention(
            qd, kd.transpose(1, 2), vd.transpose(1, 2), attn_mask=mask[:, None, None, :],
            scale=scaling, enable_gqa=h != hkv)                           # [Rg, H, 1, D]
        out[rows] = o[:, :, 0]

    for i in meta.prefill_ids:
        qs, qe = meta.query_start_host[i], meta.query_start_host[i + 1]
        ctx = meta.context_lens_host[i]
        nq = qe - qs
        qi = q[:, qs:qe].unsqueeze(0)                                                # [1, H, nq, D]
        if ctx == nq:
            # The whole context is this step's chunk: plain causal attention on it, no gather.
            o = F.scaled_dot_product_attention(qi, key[:, :, qs:qe], value[:, :, qs:qe], is_causal=True,
                                               scale=scaling, enable_gqa=h != hkv)
        else:
            table = meta.block_tables[i, :-(-ctx // bs)]
            kc = k_cache.index_select(0, table).view(-1, hkv, d)[:ctx].to(q.dtype)   # [ctx, Hkv, D]
            vc = v_cache.index_select(0, table).view(-1, hkv, d)[:ctx].to(q.dtype)
            o = F.scaled_dot_product_attention(
                qi, kc.transpose(0, 1).unsqueeze(0), vc.transpose(0, 1).unsqueeze(0),
                attn_mask=meta.prefill_mask(i), scale=scaling, enable_gqa=h != hkv)   # [1, H, nq, D]
        out[qs:qe] = o[0].transpose(0, 1)
    return out.unsqueeze(0)

