"""Paged attention for a decode-only batch with static shapes: what a CUDA graph can capture.

A decode-only step has one query token per request. :class:`StaticDecodeMetadata` describes a batch
padded to ``B`` rows (a capture size of :mod:`engine.runner.cuda_graphs`) through tensors whose shapes and
addresses never change: every per-step quantity is derived on the device, in place, from the
positions and block tables staged in static buffers (:meth:`StaticDecodeMetadata.refresh`), and the
attention reads nothing from the host: no ``.item()``/``.tolist()``, no data-dependent shape, no
per-request Python. Padding rows sit at position 0 of a block table full of a scratch block that
no request owns, so they write their K/V there and attend to that one token (no empty softmax).

Design after vLLM v1's full-graph decode (``vllm/v1/worker/gpu/cudagraph_utils.py``: inputs in
persistent buffers, attention metadata built from them for a padded batch size) and nano-vllm's
``capture_cudagraph`` (static ``slot_mapping`` / ``context_lens`` / ``block_tables`` views per size).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.runner.attention.reference import gather_kv, write_kv

ATTENTION_BACKENDS = ("reference", "triton")


@dataclass
class StaticDecodeMetadata:
    """One decode batch of ``B`` rows (real requests first, then padding), in static buffers.

    Inputs (written by the caller before each forward pass, all on the model's device):
      positions     int64 [B]      position of each row's one query token (its context length - 1)
      block_tables  int64 [B, W]   block ids, ``W = ceil(max_model_len / block_size)``; entries past a
                                   row's blocks hold the scratch block (read only under a mask)
    Derived in place by :meth:`refresh` (inside the captured graph):
      slot_mapping  int64 [B]      flat cache slot of each row's new K/V
      context_lens  int64 [B]      tokens each row attends to (``positions + 1``)
      kv_mask       bool  [B, W * block_size]  key position < context length (reference backend)
      decode_plan   int32 [B, 3]   query row, block-table row, context length (Triton backend)
    ``kv_caches`` holds one ``(k_cache, v_cache)`` pair per layer, ``[num_blocks, block_size,
    num_kv_heads, head_dim]``. ``backend`` is ``reference`` (torch: the CPU path and the oracle) or
    ``triton`` (the kernels of :mod:`engine.runner.attention.triton_kernels`, split-K by ``num_splits``).
    """

    positions: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
    context_lens: torch.Tensor
    kv_mask: torch.Tensor | None
    decode_plan: torch.Tensor | None
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    block_size: int
    backend: str = "reference"
    num_splits: int = 1

    @classmethod
    def allocate(cls, positions: torch.Tensor, block_tables: torch.Tensor,
                 kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int,
                 backend: str = "reference") -> "StaticDecodeMetadata":
        """The metadata of the largest batch over the input buffers ``positions`` [B] and
        ``block_tables`` [B, W] (which must stay put), its derived buffers allocated once; smaller
        batches are its :meth:`head` views. Raises ``ValueError`` for an unknown ``backend`` or
        mismatched shapes."""
        if backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention backend must be one of {ATTENTION_BACKENDS}, got {backend!r}")
        b, w = block_tables.shape
        if positions.shape != (b,):
            raise ValueError(f"positions must be [{b}] like the block tables' rows, got {list(positions.shape)}")
        dev = positions.device
        plan = None
        if backend == "triton":
            plan = torch.zeros(b, 3, dtype=torch.int32, device=dev)
            plan[:, 0] = plan[:, 1] = torch.arange(b, dtype=torch.int32, device=dev)
        return cls(positions=positions, block_tables=block_tables,
                   slot_mapping=torch.zeros(b, dtype=torch.long, device=dev),
                   context_lens=torch.ones(b, dtype=torch.long, device=dev),
                   kv_mask=(torch.zeros(b, w * block_size, dtype=torch.bool, device=dev)
                            if backend == "reference" else None),
                   decode_plan=plan, kv_caches=kv_caches, block_size=block_size, backend=backend)

    def head(self, rows: int, num_splits: int = 1) -> "StaticDecodeMetadata":
        """The metadata of the first ``rows`` rows: views of the same buffers (contiguous, at
        fixed addresses), with the Triton decode split-K factor ``num_splits``."""
        def cut(t):
            return None if t is None else t[:rows]
        return dataclasses.replace(
            self, positions=self.positions[:rows], block_tables=self.block_tables[:rows],
            slot_mapping=self.slot_mapping[:rows], context_lens=self.context_lens[:rows],
            kv_mask=cut(self.kv_mask), decode_plan=cut(self.decode_plan), num_splits=num_splits)

    @property
    def num_rows(self) -> int:
        return self.positions.shape[0]

    def refresh(self) -> None:
        """Derive slot mapping, context lengths and the backend's mask or plan from the staged
        positions and block tables, in place (device ops on fixed shapes: capturable)."""
        bs, pos = self.block_size, self.positions
        block = self.block_tables.gather(1, (pos // bs).unsqueeze(1)).squeeze(1)
        torch.add(block * bs, pos % bs, out=self.slot_mapping)
        torch.add(pos, 1, out=self.context_lens)
        if self.kv_mask is not None:
            keys = torch.arange(self.kv_mask.shape[1], device=pos.device)
            torch.lt(keys.unsqueeze(0), self.context_lens.unsqueeze(1), out=self.kv_mask)
        if self.decode_plan is not None:
            self.decode_plan[:, 2].copy_(self.context_lens)


def static_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            meta: StaticDecodeMetadata, layer_idx: int, scaling: float) -> torch.Tensor:
    """Decode attention of ``B`` rows over the paged cache, every shape fixed by ``meta``.

    ``query`` ``[1, H, B, D]``, ``key``/``value`` ``[1, Hkv, B, D]`` (after RoPE). Stores the new
    K/V at ``meta.slot_mapping``, then each row's query attends to its ``context_lens`` tokens read
    through its block-table row. Returns ``[1, B, H, D]`` in ``query``'s dtype (the layout
    transformers' attention functions return). Same result as
    :func:`engine.runner.attention.reference.paged_attention` on the real rows."""
    k_cache, v_cache = meta.kv_caches[layer_idx]
    q = query[0].transpose(0, 1)                                          # [B, H, D]
    new_k, new_v = key[0].transpose(0, 1), value[0].transpose(0, 1)      # [B, Hkv, D]
    if meta.backend == "triton":
        from engine.runner.attention.triton_attention import decode_attention, store_kvcache
        store_kvcache(new_k, new_v, k_cache, v_cache, meta.slot_mapping)
        q = q.contiguous()
        out = torch.empty_like(q)
        decode_attention(out, q, k_cache, v_cache, meta.block_tables, meta.decode_plan, scaling,
                         meta.num_splits)
        return out.unsqueeze(0)
    write_kv(new_k, new_v, k_cache, v_cache, meta.slot_mapping)
    kd = gather_kv(k_cache, meta.block_tables).to(q.dtype).transpose(1, 2)   # [B, Hkv, W*bs, D]
    vd = gather_kv(v_cache, meta.block_tables).to(q.dtype).transpose(1, 2)
    h, hkv = q.shape[1], k_cache.shape[2]
    o = F.scaled_dot_product_attention(q.unsqueeze(2), kd, vd, attn_mask=meta.kv_mask[:, None, None, :],
                                       scale=scaling, enable_gqa=h != hkv)   # [B, H, 1, D]
    return o.squeeze(2).unsqueeze(0)
