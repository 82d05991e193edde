"""Per-step attention metadata, built once per step and shared by every layer."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PagedAttentionMetadata:
    """Where each scheduled token's K/V goes and what each query attends to.

    The step packs ``T`` tokens of ``R`` requests into one row (no padding). Request ``i`` owns
    query rows ``query_start_loc[i]:query_start_loc[i+1]`` and, after this step's writes, has
    ``context_lens[i]`` tokens of KV in its blocks ``block_tables[i, :]``.

    Tensors (all on the model's device):
      slot_mapping    int64 [T]        flat cache slot (block_id * block_size + offset) per token
      query_start_loc int64 [R + 1]    prefix sums of query lengths (host copy in ``query_start_host``)
      context_lens    int64 [R]        KV length per request after the step
      block_tables    int64 [R, Bmax]  block ids, padded with 0 beyond each request's table
    ``kv_caches`` holds one ``(k_cache, v_cache)`` pair per layer, each
    ``[num_blocks, block_size, num_kv_heads, head_dim]``.
    ``decode_ids``/``decode_mask`` describe the requests with exactly one query token;
    ``decode_groups`` splits them, sorted by context length, into up to ``MAX_DECODE_GROUPS``
    batches of ``(query rows [Rg], block tables [Rg, Bg], mask [Rg, Bg*bs])`` each padded only to its
    own longest context, so short requests do not pay for the longest one. ``prefill_ids`` lists
    the other requests (one call each).
    """

    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    context_lens: torch.Tensor
    block_tables: torch.Tensor
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    block_size: int
    query_start_host: list[int]
    context_lens_host: list[int]
    decode_ids: torch.Tensor
    decode_mask: torch.Tensor | None
    prefill_ids: list[int]
    decode_groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]

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
        bmax = max((len(t) for t in block_tables), default=1) or 1
        padded = [t + [0] * (bmax - len(t)) for t in block_tables]
        decode = [i for i, q in enumerate(query_lens) if q == 1]
        prefill = [i for i, q in enumerate(query_lens) if q != 1]
        ctx_t = torch.tensor(context_lens, dtype=torch.long, device=device)
        decode_ids = torch.tensor(decode, dtype=torch.long, device=device)
        mask = None
        if decode:
            pos = torch.arange(bmax * block_size, device=device)
            mask = pos[None, :] < ctx_t[decode_ids][:, None]        # [Rd, Bmax*bs] True = attend
        return cls(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
            query_start_loc=torch.tensor(starts, dtype=torch.long, device=device),
            context_lens=ctx_t,
            block_tables=torch.tensor(padded, dtype=torch.long, device=device),
            kv_caches=kv_caches,
            block_size=block_size,
            query_start_host=starts,
            context_lens_host=list(context_lens),
            decode_ids=decode_ids,
            decode_mask=mask,
            prefill_ids=prefill,
            decode_groups=_decode_groups(decode, starts, context_lens, block_tables, block_size, device),
        )


MAX_DECODE_GROUPS = 4
MIN_DECODE_GROUP = 8


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
        bmax = max(len(block_tables[i]) for i in ids)
        tables = torch.tensor([block_tables[i] + [0] * (bmax - len(block_tables[i])) for i in ids],
                              dtype=torch.long, device=device)
        ctx = torch.tensor([context_lens[i] for i in ids], dtype=torch.long, device=device)
        mask = torch.arange(bmax * block_size, device=device)[None, :] < ctx[:, None]
        rows = torch.tensor([starts[i] for i in ids], dtype=torch.long, device=device)
        groups.append((rows, tables, mask))
    return groups
