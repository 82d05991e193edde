"""The model runner: packs one scheduler step into ONE forward pass of a transformers model over
every scheduled token of every request (no padding), with K/V read and written through block tables
in one preallocated paged cache, then samples. Its inputs come from its own per-request state
(``engine.runner.input_batch``), kept from the scheduler's diffs, built with vectorized numpy."""
from __future__ import annotations

import numpy as np
import torch

from engine.runner.attention import PagedAttentionMetadata
from engine.runner.attention.registry import triton_selected
from engine.runner.attention.triton_attention import stage_plan, warm_up_kernels
from engine.runner.input_batch import InputBatch
from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.runner.buffers import StepUpload
from engine.runner.forward import build_forward
from engine.runner.sampling import SamplePlan
from engine.vocab import ModelImpl


def kv_bytes_per_block(config, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of K and V for one block across all layers of a transformers ``config``."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * block_size * config.num_key_value_heads * head_dim * elem


class ModelRunner:
    """Runs steps of a Llama-family transformers model over a paged KV cache.

    ``model`` must be an eval-mode causal LM on ``device``. ``model_impl`` (an
    :class:`engine.vocab.ModelImpl` value) picks the forward pass over its weights
    (:func:`engine.runner.forward.build_forward`, kept as ``self.forward``): the engine's own fused
    Llama-family forward, or transformers' with its attention switched to our paged attention. The cache is ``num_hidden_layers`` pairs of tensors
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` in the model's dtype, allocated once.
    The runner keeps its own per-request state in an :class:`engine.runner.input_batch.InputBatch`
    (sized by ``max_num_seqs``, ``max_model_len``; it grows if live knobs raise them), fed only by
    :class:`engine.outputs.SchedulerOutput` diffs: it never reads live ``Request`` objects.
    Every per-step input, sampling parameters included, goes through one
    :class:`engine.runner.buffers.StepUpload` (sized for ``max_num_batched_tokens`` tokens, pinned
    host memory on a GPU): one host-to-device copy per step (two for a decode step replayed
    from a CUDA graph: its inputs have static buffers of their own).
    """

    def __init__(self, model: torch.nn.Module, num_blocks: int, block_size: int, seed: int = 0,
                 num_cpu_blocks: int = 0, *, max_num_seqs: int = 16, max_model_len: int = 2048,
                 max_num_batched_tokens: int = 256, model_impl: str = ModelImpl.AUTO) -> None:
        self.model = model
        cfg = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.block_size = block_size
        self.num_blocks = num_blocks
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scratch_block = num_blocks        # one more block, owned by no request: CUDA-graph padding rows
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
        self.forward = build_forward(model, model_impl)
        self.input_batch = InputBatch(max_num_seqs, max_model_len, -(-max_model_len // block_size),
                                      block_size, base_seed=seed)
        # every per-step input (token ids, positions, slots, tables, decode groups, sampling
        # parameters) in one preallocated buffer: one host-to-device copy per step
        self.upload = StepUpload(self.device, capacity_bytes=64 * max_num_batched_tokens + (1 << 16))
        self.graphs = None                     # engine.runner.cuda_graphs.DecodeGraphs when enabled
        self._triton = triton_selected(self.device)
        if self._triton:                       # every kernel variant compiled now, none in a timed step
            warm_up_kernels(self.kv_caches, cfg.num_attention_heads, self.scratch_block)

    @classmethod
    def from_config(cls, model: torch.nn.Module, config) -> "ModelRunner":
        """A runner sized by an ``engine.config.EngineConfig`` whose ``num_gpu_blocks`` is
        resolved (``block_size``, ``seed``, ``num_cpu_blocks``, ``max_num_seqs``,
        ``max_model_len``, ``max_num_batched_tokens``, ``model_impl``)."""
        return cls(model, config.num_gpu_blocks, config.block_size, seed=config.seed,
                   num_cpu_blocks=config.num_cpu_blocks, max_num_seqs=config.max_num_seqs,
                   max_model_len=config.max_model_len,
                   max_num_batched_tokens=config.max_num_batched_tokens, model_impl=config.model_impl)

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        """Run the step ``sched``; returns the token sampled for each request whose chunk reached
        the end of its known tokens (and each sequence of ``parallel_samples``), appended to the
        runner's own state too. Raises whatever the model raises (the engine fails the step's
        requests and keeps serving), ``ValueError`` when ``sched`` names a request the runner
        does not hold. Applies the diff first, then copies: copy-on-write blocks, then swap-outs,
        then swap-ins (each may read a block the next one writes)."""
        batch = self.input_batch
        batch.update(sched)
        self.copy_blocks(sched.blocks_to_copy)
        self.swap_blocks(sched.blocks_to_swap_out, to_cpu=True)
        self.swap_blocks(sched.blocks_to_swap_in, to_cpu=False)
        if sched.is_empty:
            return ModelRunnerOutput()
        inp = batch.prepare(sched.scheduled)
        up = self.upload
        up.reset()                      # nothing left over from a step that failed while staging
        plan = SamplePlan.stage(up, batch, inp.rows[inp.sample_idx], sched.parallel_samples) \
            if len(inp.sample_idx) else None
        every_row = len(inp.sample_idx) == len(inp.input_ids)     # each packed token samples (decodes)
        if plan is not None and not every_row:
            up.add("logits_idx", inp.logits_idx, np.int64)
        if self.graphs is not None and self.graphs.handles(len(inp.query_lens), len(inp.input_ids)):
            views = up.send()           # sampling only: the graph's inputs have static buffers of their own
            hidden = self.graphs.run(inp.input_ids, inp.positions, inp.block_tables)   # decode-only step
            if plan is None:
                return ModelRunnerOutput()
            return self._sample(self.forward.compute_logits(hidden if every_row else hidden[views["logits_idx"]]),
                                plan, views)
        up.add("input_ids", inp.input_ids, np.int64)
        up.add("positions", inp.positions, np.int64)
        up.add("slot_mapping", inp.slot_mapping, np.int64)
        up.add("block_tables", inp.block_tables, np.int64)
        staged = PagedAttentionMetadata.stage(up, inp.query_lens, inp.context_lens, inp.block_tables,
                                              inp.num_blocks, self.block_size)
        cfg = self.model.config
        tplan = stage_plan(up, inp.query_lens, inp.context_lens, cfg.num_attention_heads, cfg.num_key_value_heads,
                           self.device) if self._triton else None
        views = up.send()               # the step's one host-to-device copy
        meta = staged.build(views, self.kv_caches)
        if tplan is not None:
            tplan.attach(meta, views)
        hidden = self.forward.hidden_states(views["input_ids"], views["positions"], meta)   # [T, hidden]
        if plan is None:
            return ModelRunnerOutput()
        logits = self.forward.compute_logits(hidden if every_row else hidden[views["logits_idx"]])  # [S, vocab]
        return self._sample(logits, plan, views)

    def _sample(self, logits: torch.Tensor, plan: SamplePlan, views: dict[str, torch.Tensor]) -> ModelRunnerOutput:
        """One token per row of ``plan`` from the heads' ``logits`` ``[S, vocab]``, parallel
        samples included, in one batched sampling call (``engine.runner.sampling``) over the
        parameters sent with the step (``views``) and one device -> host read; appended to the
        runner's own state."""
        toks = plan.sample(logits, self.input_batch, views).tolist()        # the step's one host sync
        self.input_batch.append_tokens(plan.rows, np.asarray(toks, dtype=np.int32))
        return ModelRunnerOutput(sampled_token_ids=dict(zip(plan.req_ids, toks)))

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
        """Drop what the runner keeps for a finished request beyond its row (its derived
        sampling seed: ``InputBatch.forget``)."""
        self.input_batch.forget(request_id)
