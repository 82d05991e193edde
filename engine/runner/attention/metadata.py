"""Per-step attention metadata, built once per step and shared by every layer: every tensor an
attention layer reads (slot mapping, block tables, decode groups and their masks, the prefill
chunks' causal masks) is made here, once per step (the masks by the first layer that needs them),
so a layer does no host work but launch kernels.

Built in two halves so the runner can move a whole step in one host-to-device copy
(:class:`engine.runner.buffers.StepUpload`): :meth:`PagedAttentionMetadata.stage` adds the host
arrays to the step's upload and returns a :class:`StagedMetadata`, whose :meth:`StagedMetadata.build`
takes the sent tensors."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.runner.input_batch import slot_mapping_of
from engine.runner.buffers import StepUpload

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
    do not pay for the longest one. ``prefill_ids`` lists the other requests (one call each);
    :meth:`prefill_mask` gives their causal masks, made by the first layer that asks and kept for
    the others (``prefill_masks``).
    """

    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    block_size: int
    query_start_host: list[int]
    context_lens_host: list[int]
    decode_groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    prefill_ids: list[int]
    prefill_masks: dict[int, torch.Tensor] = field(default_factory=dict)

    def prefill_mask(self, i: int) -> torch.Tensor:
        """The ``bool [nq, ctx]`` causal mask of request ``i``'s ``nq`` query tokens over its
        whole context of ``ctx`` tokens (query ``j`` sees keys ``0 .. ctx - nq + j``), on the
        block tables' device; made once per step (two device ops), then reused by every layer."""
        mask = self.prefill_masks.get(i)
        if mask is None:
            nq, ctx = self.query_start_host[i + 1] - self.query_start_host[i], self.context_lens_host[i]
            keys = torch.arange(ctx, device=self.block_tables.device)
            mask = self.prefill_masks[i] = keys[None, :] <= keys[ctx - nq:, None]
        return mask

    @classmethod
    def build(cls, query_lens: list[int], context_lens: list[int], block_tables: list[list[int]],
              kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int,
              device: torch.device) -> "PagedAttentionMetadata":
        """Build the metadata for requests with the given query lengths (tokens scheduled),
        context lengths (num_computed_tokens + query length) and block tables (lists; tests and
        tools: the runner uses :meth:`stage` on its ``InputBatch``'s arrays). The slot
        mapping is computed vectorized (``engine.runner.input_batch.slot_mapping_of``)."""
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
        """The metadata from host arrays, in one call: ``query_lens`` / ``context_lens`` /
        ``num_blocks`` int [R], ``block_tables`` int [R, W] (zero beyond each row's
        ``num_blocks``) and the step's ``slot_mapping`` int64 [T] already on ``device`` (as
        ``block_tables_device``, int64 [R, W], when the caller has it there; else it is copied
        here, with the decode groups, in one copy). :meth:`stage` + :meth:`StagedMetadata.build`
        with an upload of its own."""
        upload = StepUpload(device, pin=False)
        if block_tables_device is None:
            upload.add("block_tables", block_tables, np.int64)
        staged = cls.stage(upload, query_lens, context_lens, block_tables, num_blocks, block_size)
        views = upload.send()
        views["slot_mapping"] = slot_mapping
        if block_tables_device is not None:
            views["block_tables"] = block_tables_device
        return staged.build(views, kv_caches)

    @staticmethod
    def stage(upload: StepUpload, query_lens: np.ndarray, context_lens: np.ndarray,
              block_tables: np.ndarray, num_blocks: np.ndarray, block_size: int) -> "StagedMetadata":
        """The host half: add the decode groups' arrays to ``upload`` (query rows, block tables,
        and their masks on a CPU upload or context lengths elsewhere, under ``decode.<g>.*``) and
        return what :meth:`StagedMetadata.build` needs with the sent tensors. Decode groups are
        cut with numpy (sorted by block count, stable), per group, not per token. Arrays as in
        :meth:`from_arrays`; the caller stages ``slot_mapping`` and ``block_tables`` (int64)."""
        q = np.asarray(query_lens, dtype=np.int64)
        ctx = np.asarray(context_lens, dtype=np.int64)
        qs = np.zeros(len(q) + 1, dtype=np.int64)
        np.cumsum(q, out=qs[1:])
        groups = _stage_decode_groups(upload, q, qs, ctx, block_tables, np.asarray(num_blocks), block_size)
        return StagedMetadata(qs.tolist(), ctx.tolist(), np.flatnonzero(q != 1).tolist(), groups, block_size)


@dataclass
class StagedMetadata:
    """The host half of a step's :class:`PagedAttentionMetadata` (see its fields): the query
    starts and context lengths as lists, the prefill requests' indices, the number of decode
    groups staged and ``block_size``."""

    query_start_host: list[int]
    context_lens_host: list[int]
    prefill_ids: list[int]
    num_decode_groups: int
    block_size: int

    def build(self, views: dict[str, torch.Tensor],
              kv_caches: list[tuple[torch.Tensor, torch.Tensor]]) -> PagedAttentionMetadata:
        """The metadata over the sent tensors ``views`` (:meth:`StepUpload.send`'s result, with
        ``slot_mapping`` int64 [T] and ``block_tables`` int64 [R, W]): the decode groups' masks
        made on the device where their context lengths were sent."""
        bs = self.block_size
        tables = views["block_tables"]
        groups = []
        for g in range(self.num_decode_groups):
            rows, gt = views[f"decode.{g}.rows"], views[f"decode.{g}.tables"]
            mask = views.get(f"decode.{g}.mask")
            if mask is None:
                c = views[f"decode.{g}.ctx"]
                mask = torch.arange(gt.shape[1] * bs, device=c.device)[None, :] < c[:, None]
            groups.append((rows, gt, mask))
        return PagedAttentionMetadata(slot_mapping=views["slot_mapping"], block_tables=tables, kv_caches=kv_caches,
                                      block_size=bs, query_start_host=self.query_start_host,
                                      context_lens_host=self.context_lens_host, decode_groups=groups,
                                      prefill_ids=self.prefill_ids)


def _stage_decode_groups(upload: StepUpload, q: np.ndarray, qs: np.ndarray, ctx: np.ndarray,
                         block_tables: np.ndarray, num_blocks: np.ndarray, block_size: int) -> int:
    """Decode requests (one query token) sorted by block count, cut into up to
    MAX_DECODE_GROUPS equal batches, each padded to its own longest table, staged in ``upload``;
    returns the number of groups."""
    decode = np.flatnonzero(q == 1)
    if not len(decode):
        return 0
    order = decode[np.argsort(num_blocks[decode], kind="stable")]
    n = max(1, min(MAX_DECODE_GROUPS, len(order) // MIN_DECODE_GROUP))
    host_mask = upload.device.type == "cpu"      # numpy builds the host mask about twice as fast
    for g in range(n):
        ids = order[g * len(order) // n:(g + 1) * len(order) // n]
        width = max(1, int(num_blocks[ids].max()))
        upload.add(f"decode.{g}.rows", qs[ids], np.int64)
        upload.add(f"decode.{g}.tables", block_tables[ids, :width], np.int64)
        if host_mask:
            upload.add(f"decode.{g}.mask", np.arange(width * block_size)[None, :] < ctx[ids][:, None], np.bool_)
        else:
            upload.add(f"decode.{g}.ctx", ctx[ids], np.int64)
    return n
