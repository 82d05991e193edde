"""Per-step attention metadata, built once per step and shared by every layer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.input_batch import slot_mapping_of

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
        context lengths (num_computed_tokens + query length) and block tables (lists; tests and
        tools: the runner uses :meth:`from_arrays` on its ``InputBatch``'s arrays). The slot
        mapping is computed vectorized (``engine.input_batch.slot_mapping_of``)."""
        q = np.asarray(query_lens, dtype=np.int64).reshape(-1)
        ctx = np.asarray(context_lens, dtype=np.int64).reshape(-1)
        num_blocks = np.array([len(t) for t in block_tables], dtype=np.int64)
        table = np.zeros((len(block_tables), max(1, int(num_blocks.max(initial=0)))), dtype=np.int64)
        for i, t in enumerate(block_tables):            # per request, not per token
            table[i, :len(t)] = t
        qs = np.zeros(len(q) + 1, dtype=np.int64)
        np.cumsum(q, out=qs[1:])
        positions = np.repeat(ctx - q - qs[:-1], q) + np.arange(int(qs[-1]))
        slots = slot_mapping_of(positions, np.repeat(np.arange(len(q)), q), table, block_size)
        return cls.from_arrays(q, ctx, table, num_blocks, torch.from_numpy(slots).to(device),
                               kv_caches, block_size, device)

    @classmethod
    def from_arrays(cls, query_lens: np.ndarray, context_lens: np.ndarray, block_tables: np.ndarray,
                    num_blocks: np.ndarray, slot_mapping: torch.Tensor,
                    kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int,
                    device: torch.device, block_tables_device: torch.Tensor | None = None
                    ) -> "PagedAttentionMetadata":
        """The metadata from host arrays: ``query_lens`` / ``context_lens`` / ``num_blocks``
        int [R], ``block_tables`` int [R, W] (zero beyond each row's ``num_blocks``) and the
        step's ``slot_mapping`` int64 [T] already on ``device`` (as ``block_tables_device``,
        int64 [R, W], when the caller staged it; else it is copied here). Decode groups are cut
        with numpy (sorted by block count, stable), per group, not per token."""
        q = np.asarray(query_lens, dtype=np.int64)
        ctx = np.asarray(context_lens, dtype=np.int64)
        qs = np.zeros(len(q) + 1, dtype=np.int64)
        np.cumsum(q, out=qs[1:])
        tables = block_tables_device
        if tables is None:
            tables = torch.from_numpy(np.ascontiguousarray(block_tables, dtype=np.int64)).to(device)
        return cls(
            slot_mapping=slot_mapping,
            block_tables=tables,
            kv_caches=kv_caches,
            block_size=block_size,
            query_start_host=qs.tolist(),
            context_lens_host=ctx.tolist(),
            decode_groups=_decode_groups(q, qs, ctx, block_tables, np.asarray(num_blocks), block_size, device),
            prefill_ids=np.flatnonzero(q != 1).tolist(),
        )


def _decode_groups(q: np.ndarray, qs: np.ndarray, ctx: np.ndarray, block_tables: np.ndarray,
                   num_blocks: np.ndarray, block_size: int, device: torch.device):
    """Decode requests (one query token) sorted by block count, cut into up to
    MAX_DECODE_GROUPS equal batches, each padded to its own longest table."""
    decode = np.flatnonzero(q == 1)
    if not len(decode):
        return []
    order = decode[np.argsort(num_blocks[decode], kind="stable")]
    n = max(1, min(MAX_DECODE_GROUPS, len(order) // MIN_DECODE_GROUP))
    groups = []
    for g in range(n):
        ids = order[g * len(order) // n:(g + 1) * len(order) // n]
        width = max(1, int(num_blocks[ids].max()))
        tables = torch.from_numpy(np.ascontiguousarray(block_tables[ids, :width], dtype=np.int64)).to(device)
        if device.type == "cpu":       # numpy builds the host mask about twice as fast
            mask = torch.from_numpy(np.arange(width * block_size)[None, :] < ctx[ids][:, None])
        else:
            c = torch.from_numpy(ctx[ids]).to(device)
            mask = torch.arange(width * block_size, device=device)[None, :] < c[:, None]
        rows = torch.from_numpy(qs[ids]).to(device)
        groups.append((rows, tables, mask))
    return groups
