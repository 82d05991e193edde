"""The model runner: packs one scheduler step into ONE forward pass of a transformers model over
every scheduled token of every request (no padding), with K/V read and written through block tables
in one preallocated paged cache, then samples."""
from __future__ import annotations

from typing import Mapping

import torch

from engine.attention import ATTN_IMPLEMENTATION, PagedAttentionMetadata, register_paged_attention
from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.request import Request
from engine.sampler import Sampler
from engine.sequence_group import parallel_sample_rows


def kv_bytes_per_block(config, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of K and V for one block across all layers of a transformers ``config``."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * block_size * config.num_key_value_heads * head_dim * elem


class ModelRunner:
    """Runs steps of a Llama-family transformers model over a paged KV cache.

    ``model`` must be an eval-mode causal LM on ``device``; its attention implementation is switched
    to our paged attention. The cache is ``num_hidden_layers`` pairs of tensors
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` in the model's dtype, allocated once.
    """

    def __init__(self, model: torch.nn.Module, num_blocks: int, block_size: int, seed: int = 0,
                 num_cpu_blocks: int = 0) -> None:
        self.model = model
        cfg = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.block_size = block_size
        self.num_blocks = num_blocks
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scratch_block = num_blocks
        shape = (num_blocks + 1, block_size, cfg.num_key_value_heads, head_dim)
        self.kv_caches = [(torch.zeros(shape, dtype=self.dtype, device=self.device),
                           torch.zeros(shape, dtype=self.dtype, device=self.device))
                          for _ in range(cfg.num_hidden_layers)]
        # The CPU swap pool of swap preemption: the same layout, in (pinned, on a GPU) host memory.
        pin = self.device.type == "cuda"
        cpu_shape = (num_cpu_blocks, *shape[1:])
        self.cpu_caches = [(torch.zeros(cpu_shape, dtype=self.dtype, pin_memory=pin),
                            torch.zeros(cpu_shape, dtype=self.dtype, pin_memory=pin))
                           for _ in range(cfg.num_hidden_layers)] if num_cpu_blocks else []
        model.set_attn_implementation(register_paged_attention())
        assert model.config._attn_implementation == ATTN_IMPLEMENTATION
        self.sampler = Sampler(seed)
        self.graphs = None

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput, requests: Mapping[str, Request]) -> ModelRunnerOutput:
        """Run the step ``sched``; returns the token sampled for each request whose chunk reached
        the end of its known tokens. Raises whatever the model raises (the engine fails the step's
        requests and keeps serving). Copies first: copy-on-write blocks, then swap-outs, then
        swap-ins (each may read a block the next one writes)."""
        self.copy_blocks(sched.blocks_to_copy)
        self.swap_blocks(sched.blocks_to_swap_out, to_cpu=True)
        self.swap_blocks(sched.blocks_to_swap_in, to_cpu=False)
        if sched.is_empty:
            return ModelRunnerOutput()
        ids: list[int] = []
        pos: list[int] = []
        qlens, ctxs, tables = [], [], []
        sample_rows, sample_reqs = [], []
        for s in sched.scheduled:
            req = requests[s.request_id]
            start, end = s.num_computed_tokens, s.num_computed_tokens + s.num_tokens
            ids.extend(req.token_ids(start, end))
            pos.extend(range(start, end))
            qlens.append(s.num_tokens)
            ctxs.append(end)
            tables.append(list(s.block_ids))
            if end == req.num_tokens:
                sample_rows.append(len(ids) - 1)
                sample_reqs.append(req)
        if self.graphs is not None and self.graphs.handles(len(qlens), len(ids)):   # decode-only step
            hidden = self.graphs.run(ids, pos, tables)
            return self._sample(self.model.lm_head(hidden[sample_rows]), sched, requests, sample_reqs)
        meta = PagedAttentionMetadata.build(qlens, ctxs, tables, self.kv_caches, self.block_size, self.device)
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        position_ids = torch.tensor([pos], dtype=torch.long, device=self.device)
        if not sample_rows:
            self.model.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                             paged_meta=meta)
            return ModelRunnerOutput()
        keep = torch.tensor(sample_rows, dtype=torch.long, device=self.device)
        logits = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                            logits_to_keep=keep, paged_meta=meta).logits[0]   # [N, vocab]
        return self._sample(logits, sched, requests, sample_reqs)

    def _sample(self, logits: torch.Tensor, sched: SchedulerOutput, requests: Mapping[str, Request],
                sample_reqs: list[Request]) -> ModelRunnerOutput:
        """One token per row of ``logits`` ``[len(sample_reqs), vocab]``, plus the parallel samples
        that take their first token from a head's row."""
        if not sample_reqs:
            return ModelRunnerOutput()
        if sched.parallel_samples:      # further sequences sample from their head's last row
            extra = parallel_sample_rows(sched.parallel_samples, requests, sample_reqs)
            logits = torch.cat([logits, logits[[row for row, _ in extra]]])
            sample_reqs = sample_reqs + [r for _, r in extra]
        toks = self.sampler.sample(logits, [r.request_id for r in sample_reqs],
                                   [r.sampling_params for r in sample_reqs],
                                   [r.prompt_token_ids for r in sample_reqs],
                                   [r.output_token_ids for r in sample_reqs])
        return ModelRunnerOutput(sampled_token_ids={r.request_id: t for r, t in zip(sample_reqs, toks)})

    def copy_blocks(self, pairs) -> None:
        """Copy KV blocks within the GPU cache, every layer: ``pairs`` of (source block,
        destination block) (parallel sampling's copy-on-write). One indexed copy per layer and
        tensor (K and V); sources are read before any destination is written."""
        if not pairs:
            return
        src, dst = (torch.tensor(x, dtype=torch.long, device=self.device) for x in zip(*pairs))
        for k, v in self.kv_caches:
            k[dst] = k[src]
            v[dst] = v[src]

    def swap_blocks(self, pairs, to_cpu: bool) -> None:
        """Copy KV blocks between the GPU cache and the CPU swap pool, every layer: ``pairs`` of
        (GPU block, CPU block) when ``to_cpu``, else (CPU block, GPU block). One indexed copy per
        layer and tensor (K and V)."""
        if not pairs:
            return
        src, dst = (torch.tensor(x, dtype=torch.long) for x in zip(*pairs))
        for (gk, gv), (ck, cv) in zip(self.kv_caches, self.cpu_caches):
            if to_cpu:
                gpu_idx = src.to(self.device)
                ck[dst] = gk[gpu_idx].to("cpu")
                cv[dst] = gv[gpu_idx].to("cpu")
            else:
                gpu_idx = dst.to(self.device)
                gk[gpu_idx] = ck[src].to(self.device, non_blocking=True)
                gv[gpu_idx] = cv[src].to(self.device, non_blocking=True)

    def release(self, request_id: str) -> None:
        """Drop per-request state (the sampling generator) once a request finished."""
        self.sampler.forget(request_id)
