"""Per-step attention metadata, built once per step and shared by every layer."""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_DECODE_GROUPS = 4
MIN_DECODE_GROUP = 8


@dataclass
class PagedAttentionMetadata:
    """Where each scheduled token's K/V goes and what each query attends to.

    The step packs ``T`` tokens of ``R`` requests into one row (no padding). Request ``i`` owns
    query rows ``query_start_host[i]:query_start_host[i+1]`` and, after this step's writes, has
    ``context_lens_host[i]`` tokens of KV in its blocks ``block_tables[i, :]``.

    Tensors (all on the model's device):
      slot_mapping  int64 [T]        flat cache slot (block_id * block_size + offset) per token
      block_tables  int64 [R, Bmax]  block ids, padded with 0 beyond each request's table
    ``kv_caches`` holds one ``(k_cache, v_cache)`` pair per layer, each
    ``[num_blocks, block_size, num_kv_heads, head_dim]``.
    ``decode_groups`` holds the requests with exactly one query token, sorted by context length
    and cut into up to ``MAX_DECODE_GROUPS`` batches of ``(query rows [Rg], block tables [Rg, Bg],
    mask [Rg, Bg * block_size])``, each padded only to its own longest context so short requests
    do not pay for the longest one. ``prefill_ids`` lists the other requests (one call each).
    """

    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    block_size: int
    query_start_host: list[int]
    context_lens_host: list[int]
    decode_groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    prefill_ids: list[int]

    @classmethod
    def build(cls, query_lens: list[int], context_lens: list[int], block_tables: list[list[int]],
              kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int,
              device: torch.device) -> "PagedAttentionMetadata":
        """Build the metadata for requests with the given query lengths (tokens scheduled),
        context lengths (num_computed_tokens + query length) and block tables."""
        starts = [0]
        slots: list[int] = []
        for q, ctx, table in zip(query_lens, context_lens, block_tables):
            starts.append(starts[-1] + q)
            for pos in range(ctx - q, ctx):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
        decode = [i for i, q in enumerate(query_lens) if q == 1]
        return cls(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
            block_tables=_padded(block_tables, device),
            kv_caches=kv_caches,
            block_size=block_size,
            query_start_host=starts,
            context_lens_host=list(context_lens),
            decode_groups=_decode_groups(decode, starts, context_lens, block_tables, block_size, device),
            prefill_ids=[i for i, q in enumerate(query_lens) if q != 1],
        )


def _padded(tables: list[list[int]], device: torch.device) -> torch.Tensor:
    """``[len(tables), longest]`` int64 tensor, rows padded with block 0."""
    width = max((len(t) for t in tables), default=1) or 1
    return torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long, device=device)


def _decode_groups(decode: list[int], starts: list[int], context_lens: list[int],
                   block_tables: list[list[int]], block_size: int, device: torch.device):
    """Decode requests sorted by block count, cut into up to MAX_DECODE_GROUPS equal batches."""
    if not decode:
        return []
    order = sorted(decode, key=lambda i: len(block_tables[i]))
    n = max(1, min(MAX_DECODE_GROUPS, len(order) // MIN_DECODE_GROUP))
    groups = []
    for g in range(n):
        ids = order[g * len(order) // n:(g + 1) * len(order) // n]
        tables = _padded([block_tables[i] for i in ids], device)
        ctx = torch.tensor([context_lens[i] for i in ids], dtype=torch.long, device=device)
        mask = torch.arange(tables.shape[1] * block_size, device=device)[None, :] < ctx[:, None]
        rows = torch.tensor([starts[i] for i in ids], dtype=torch.long, device=device)
        groups.append((rows, tables, mask))
    return groups
