"""Paged attention with our Triton kernels (:mod:`engine.runner.attention.triton_kernels`): the launchers,
the per-step plan they share across layers, and :func:`paged_attention_triton`, a drop-in for the
torch reference :func:`engine.runner.attention.reference.paged_attention` (same arguments, same result).

``triton`` is optional: nothing here imports it until a kernel is launched, and
:func:`triton_available` says whether it can be. On the CPU the kernels run only under the Triton
interpreter (``TRITON_INTERPRET=1`` set before triton is first imported), which the tests use; the
engine's CPU path stays on the torch reference.

Units: token counts and positions are in tokens, ``block_size`` in tokens per cache block, tensor
shapes as written (``T`` packed tokens of the step, ``R`` requests, ``H`` query heads, ``Hkv`` KV
heads, ``D`` head dim).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import torch

from engine.runner.attention.metadata import PagedAttentionMetadata

LOG2E = 1.4426950408889634
MAX_SPLITS = 32                 # decode split-K ceiling
SPLIT_BUCKETS = tuple(1 << i for i in range(MAX_SPLITS.bit_length()))   # 1, 2, 4, ..., 32: the only split counts
MIN_SPLIT_TOKENS = 256          # a decode split covers at least this many context tokens


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when ``triton`` imports (its kernels can then run on CUDA tensors, or on CPU tensors
    under ``TRITON_INTERPRET=1``). Checked once per process: the attention hook asks every layer."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:           # not installed, or a broken install: the reference serves
        return False
    return True


@functools.lru_cache(maxsize=1)
def _kernels():
    """The kernels module (imports triton). Under the interpreter, checks that triton itself was
    imported in interpreter mode: its own ``@jit`` helpers (``tl.cdiv``, ``tl.max``, ...) are
    decorated when triton is first imported, and compiled-mode ones cannot run in the interpreter."""
    import triton.language as tl
    if _interpreting():
        from triton.runtime.interpreter import InterpretedFunction
        if not isinstance(tl.standard.cdiv, InterpretedFunction):
            raise RuntimeError("TRITON_INTERPRET=1 was set after triton was imported (torch._dynamo imports "
                               "it): set it before importing torch/transformers (tests/conftest.py does)")
    from engine.runner.attention import triton_kernels
    return triton_kernels


def _interpreting() -> bool:
    """Whether kernels run under the Triton interpreter (``TRITON_INTERPRET=1``)."""
    import triton
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def _precision(dtype: torch.dtype) -> str:
    """fp32 inputs get exact fp32 dot products (as the reference); bf16/fp16 use the tensor cores
    with fp32 accumulation either way."""
    return "ieee" if dtype == torch.float32 else "tf32"


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes. ``tile_n``: keys per inner step (>= 16 for ``tl.dot``); ``block_q``: query
    tokens per prefill program (rows = ``block_q * next_pow2(group)``, at least 16)."""
    tile_n: int = 64
    block_q: int = 0            # 0: 128 rows' worth, i.e. 128 // next_pow2(group); raised to 16 rows
    num_warps: int = 4


@functools.lru_cache(maxsize=8)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def choose_num_splits(num_decodes: int, num_kv_heads: int, max_context: int, sm_count: int) -> int:
    """Decode split-K factor: enough (request, KV head, split) programs for about two waves of
    ``sm_count`` SMs, each split covering at least ``MIN_SPLIT_TOKENS`` tokens, at most ``MAX_SPLITS``,
    rounded down to one of :data:`SPLIT_BUCKETS` (the split count is a compile-time constant of the
    kernels: a handful of values, all compiled at warm-up, :func:`warm_up_kernels`, so a timed run
    never compiles; vLLM buckets its CUDA-graph batch sizes for the same reason)."""
    programs = max(1, num_decodes * num_kv_heads)
    want = -(-2 * sm_count // programs)
    useful = -(-max_context // MIN_SPLIT_TOKENS)
    n = max(1, min(want, useful, MAX_SPLITS))
    return 1 << (n.bit_length() - 1)


def prefill_block_q(group: int, tiles: "TileConfig | None" = None) -> int:
    """Query tokens per prefill program for ``group`` query heads per KV head: ``tiles.block_q``,
    else 128 rows' worth, at least 16 rows (``tl.dot``'s minimum)."""
    tiles = tiles or TileConfig()
    return max(tiles.block_q or 128 // _pow2(group), -(-16 // _pow2(group)))


@dataclass
class TritonStepPlan:
    """What every layer of one step launches, built once per step from the metadata.

    decode   int32 [Rd, 3]   query row, request index, context length (tokens) of each 1-token request
    qblocks  int32 [NQB, 4]  request index, first query row, rows (<= block_q), absolute position of
                             the first row, for each block of ``block_q`` query tokens of the others
    num_splits               decode split-K factor
    """
    decode: torch.Tensor | None
    qblocks: torch.Tensor | None
    num_splits: int
    block_q: int


def build_plan(meta: PagedAttentionMetadata, group: int, num_kv_heads: int, device: torch.device,
               tiles: TileConfig = TileConfig(), num_splits: int | None = None) -> TritonStepPlan:
    """Split the step's requests into decodes (one query token) and query blocks of the rest, and
    upload both tables in one host-to-device copy (:func:`stage_plan` with an upload of its own;
    the model runner stages them with the step's other inputs instead). ``num_splits`` forces the
    decode split count."""
    from engine.runner.buffers import StepUpload

    upload = StepUpload(device, pin=False)
    starts = np.asarray(meta.query_start_host, dtype=np.int64)
    staged = stage_plan(upload, np.diff(starts), meta.context_lens_host, group * num_kv_heads, num_kv_heads,
                        device, tiles)
    views = upload.send()
    return TritonStepPlan(views["triton_decode"] if staged.has_decode else None,
                          views["triton_qblocks"] if staged.has_qblocks else None,
                          num_splits or staged.num_splits, staged.block_q)


def stage_plan(upload, query_lens: np.ndarray, context_lens: np.ndarray, num_heads: int, num_kv_heads: int,
               device: torch.device, tiles: TileConfig = TileConfig()) -> "StagedPlan":
    """The host half of :func:`build_plan`, vectorized: the step's decode and query-block tables
    (``query_lens`` / ``context_lens`` int [R], tokens) added to ``upload`` (an
    ``engine.runner.buffers.StepUpload``) as ``triton_decode`` / ``triton_qblocks``, so they travel
    in the step's one host-to-device copy; :meth:`StagedPlan.attach` puts the plan on the metadata."""
    q = np.asarray(query_lens, dtype=np.int64)
    ctx = np.asarray(context_lens, dtype=np.int64)
    qs = np.zeros(len(q) + 1, dtype=np.int64)
    np.cumsum(q, out=qs[1:])
    group = num_heads // num_kv_heads
    block_q = prefill_block_q(group, tiles)
    dec = np.flatnonzero(q == 1)
    if len(dec):
        upload.add("triton_decode", np.stack([qs[dec], dec, ctx[dec]], axis=1), np.int32)
    pre = np.flatnonzero(q > 1)
    nb = -(-q[pre] // block_q)
    if len(pre):
        req = np.repeat(pre, nb)
        b = (np.arange(int(nb.sum())) - np.repeat(np.cumsum(nb) - nb, nb)) * block_q      # first row in the request
        upload.add("triton_qblocks", np.stack([req, qs[req] + b, np.minimum(block_q, q[req] - b),
                                               ctx[req] - q[req] + b], axis=1), np.int32)
    max_ctx = int(ctx[dec].max()) if len(dec) else 1
    num_splits = choose_num_splits(len(dec), num_kv_heads, max_ctx, _sm_count(device))
    return StagedPlan(bool(len(dec)), bool(len(pre)), num_splits, block_q, _plan_key(group, num_kv_heads, tiles, None))


@dataclass
class StagedPlan:
    """What :func:`stage_plan` staged: whether each table is there, the split count, ``block_q``
    and the key :func:`paged_attention_triton` looks the plan up by."""
    has_decode: bool
    has_qblocks: bool
    num_splits: int
    block_q: int
    key: tuple

    def attach(self, meta: PagedAttentionMetadata, views: dict[str, torch.Tensor]) -> None:
        """Put the plan over the sent tables ``views`` on ``meta``, where every layer finds it."""
        plan = TritonStepPlan(views["triton_decode"] if self.has_decode else None,
                              views["triton_qblocks"] if self.has_qblocks else None, self.num_splits, self.block_q)
        meta._triton_plan = (self.key, plan)


def _plan_key(group: int, num_kv_heads: int, tiles: TileConfig, num_splits: int | None) -> tuple:
    return (group, num_kv_heads, tiles, num_splits)


def _plan_for(meta: PagedAttentionMetadata, group: int, num_kv_heads: int, device: torch.device,
              tiles: TileConfig, num_splits: int | None) -> TritonStepPlan:
    """The step's plan: staged with the step's inputs (:func:`stage_plan`), or built by the first
    layer; kept on the metadata object for the others."""
    key = _plan_key(group, num_kv_heads, tiles, num_splits)
    plan = getattr(meta, "_triton_plan", None)
    if plan is None or plan[0] != key:
        plan = (key, build_plan(meta, group, num_kv_heads, device, tiles, num_splits))
        meta._triton_plan = plan
    return plan[1]


def _cache_strides(cache: torch.Tensor) -> tuple[int, int, int]:
    assert cache.dim() == 4 and cache.stride(3) == 1, "cache must be [blocks, block_size, Hkv, D], D contiguous"
    return cache.stride(0), cache.stride(1), cache.stride(2)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[T, heads, D]`` with a unit stride on D (a view when it already has one)."""
    return x if x.stride(-1) == 1 else x.contiguous()


def store_kvcache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  slot_mapping: torch.Tensor) -> None:
    """Write this step's keys/values ``[T, Hkv, D]`` (any dtype; cast to the cache's) into the paged
    caches ``[num_blocks, block_size, Hkv, D]`` at the flat slots ``slot_mapping`` (int ``[T]``,
    ``block_id * block_size + offset``; a negative slot, e.g. a padding token, is skipped)."""
    t = key.shape[0]
    if t == 0:
        return
    key, value = _rows(key), _rows(value)
    _, bs, hkv, d = k_cache.shape
    kcs, vcs = _cache_strides(k_cache), _cache_strides(v_cache)
    _kernels().store_kvcache_kernel[(t,)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1), *kcs, *vcs,
        BLOCK_SIZE=bs, NUM_KV_HEADS=hkv, HEAD_DIM=d, HKV_P=_pow2(hkv), D_P=_pow2(d), num_warps=1)


def _attention_args(out: torch.Tensor, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, tiles: TileConfig) -> tuple[tuple, dict]:
    """The strides (in the kernels' argument order) and the compile-time constants that the decode
    and prefill kernels share."""
    d = q.shape[2]
    strides = (q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
               *_cache_strides(k_cache), *_cache_strides(v_cache))
    consts = dict(HEAD_DIM=d, D_P=_pow2(d, 16), BLOCK_SIZE=k_cache.shape[1], TILE_N=tiles.tile_n,
                  PRECISION=_precision(q.dtype), INTERPRETED=_interpreting(), num_warps=tiles.num_warps)
    return strides, consts


def decode_attention(out: torch.Tensor, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_tables: torch.Tensor, decode: torch.Tensor, scale: float, num_splits: int = 1,
                     tiles: TileConfig = TileConfig()) -> None:
    """Attention of one query token per request over its whole paged context.

    ``q``/``out`` ``[T, H, D]`` (rows named by ``decode``; others untouched), caches ``[num_blocks,
    block_size, Hkv, D]``, ``block_tables`` int ``[R, Bmax]``, ``decode`` int32 ``[Rd, 3]`` (query row,
    block-table row, context length in tokens, this step's token included), ``scale`` the softmax
    scale. ``num_splits`` > 1 splits each context into that many shares of key tiles run in parallel
    and combined by a second kernel (partials in fp32, ``Rd * H * num_splits * D`` floats)."""
    rd = decode.shape[0]
    if rd == 0:
        return
    h, d, hkv = q.shape[1], q.shape[2], k_cache.shape[2]
    d_p = _pow2(d, 16)
    k = _kernels()
    if num_splits > 1:
        part_out = torch.empty(rd, h, num_splits, d_p, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(rd, h, num_splits, dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out           # not touched with one split
    strides, consts = _attention_args(out, q, k_cache, v_cache, block_tables, tiles)
    k.paged_decode_kernel[(rd, hkv, num_splits)](
        out, part_out, part_lse, q, k_cache, v_cache, block_tables, decode, scale * LOG2E, *strides,
        NUM_HEADS=h, GROUP=h // hkv, BLOCK_G=_pow2(h // hkv, 16), NUM_SPLITS=num_splits, **consts)
    if num_splits > 1:
        k.decode_reduce_kernel[(rd, h)](
            out, part_out, part_lse, decode, out.stride(0), out.stride(1),
            NUM_HEADS=h, HEAD_DIM=d, D_P=d_p, NUM_SPLITS=num_splits, SPLITS_P=_pow2(num_splits),
            num_warps=1)


def prefill_attention(out: torch.Tensor, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_tables: torch.Tensor, qblocks: torch.Tensor, block_q: int, scale: float,
                      tiles: TileConfig = TileConfig()) -> None:
    """Causal varlen attention of prefill chunks over the paged cache (prefix and chunk both read
    through the block tables: store this step's K/V first).

    ``q``/``out`` ``[T, H, D]`` (rows named by ``qblocks``; others untouched), ``qblocks`` int32
    ``[NQB, 4]`` (block-table row, first query row, rows <= ``block_q``, absolute position in tokens
    of the first row; see :func:`build_plan`). Query token at position ``p`` sees positions ``0..p``."""
    nqb = qblocks.shape[0]
    if nqb == 0:
        return
    h, hkv = q.shape[1], k_cache.shape[2]
    strides, consts = _attention_args(out, q, k_cache, v_cache, block_tables, tiles)
    _kernels().paged_prefill_kernel[(nqb, hkv)](
        out, q, k_cache, v_cache, block_tables, qblocks, scale * LOG2E, *strides,
        GROUP=h // hkv, GROUP_P=_pow2(h // hkv), BLOCK_Q=block_q, **consts)


def paged_attention_triton(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           meta: PagedAttentionMetadata, layer_idx: int, scaling: float, *,
                           num_splits: int | None = None, tiles: TileConfig = TileConfig()) -> torch.Tensor:
    """Same contract as :func:`engine.runner.attention.reference.paged_attention`: ``query`` ``[1, H, T, D]``,
    ``key``/``value`` ``[1, Hkv, T, D]`` (after RoPE); stores the new K/V into layer ``layer_idx``'s
    cache, then each request's queries attend causally to their whole context. Returns
    ``[1, T, H, D]`` in ``query``'s dtype. ``num_splits`` forces the decode split-K factor (default:
    :func:`choose_num_splits`); ``tiles`` the tile sizes."""
    k_cache, v_cache = meta.kv_caches[layer_idx]
    q = _rows(query[0].transpose(0, 1))                          # [T, H, D]
    store_kvcache(key[0].transpose(0, 1), value[0].transpose(0, 1), k_cache, v_cache, meta.slot_mapping)
    t, h, d = q.shape
    hkv = k_cache.shape[2]
    if h % hkv:
        raise ValueError(f"{h} query heads are not a multiple of {hkv} KV heads")
    plan = _plan_for(meta, h // hkv, hkv, q.device, tiles, num_splits)
    out = torch.empty(t, h, d, dtype=q.dtype, device=q.device)
    if plan.decode is not None:
        decode_attention(out, q, k_cache, v_cache, meta.block_tables, plan.decode, scaling,
                         plan.num_splits, tiles)
    if plan.qblocks is not None:
        prefill_attention(out, q, k_cache, v_cache, meta.block_tables, plan.qblocks, plan.block_q,
                          scaling, tiles)
    return out.unsqueeze(0)


def warm_up_kernels(kv_caches: list[tuple[torch.Tensor, torch.Tensor]], num_heads: int, scratch_block: int,
                    tiles: TileConfig = TileConfig()) -> None:
    """Compile every kernel variant the engine's steps launch, before any timed step: the K/V store,
    the decode kernel at each of :data:`SPLIT_BUCKETS` (with its reduction) and the prefill kernel,
    for the caches' dtype and ``num_heads`` query heads, run on the block ``scratch_block`` of the
    first layer (which no request owns: a few zeros land there). Arguments are laid out as the
    steps lay them out (int64 block tables and slots, int32 plans, 16-byte aligned), so Triton
    specializes them the same way and a step finds them compiled (vLLM compiles its kernels at
    start-up for the same reason: a compile in a timed step costs 0.5-2 s)."""
    k_cache, v_cache = kv_caches[0]
    dev, dtype = k_cache.device, k_cache.dtype
    _, bs, hkv, d = k_cache.shape
    t = 2
    q = torch.zeros(t, num_heads, d, dtype=dtype, device=dev)
    new_kv = torch.zeros(t, hkv, d, dtype=dtype, device=dev)
    slots = torch.arange(t, dtype=torch.int64, device=dev) + scratch_block * bs
    store_kvcache(new_kv, new_kv, k_cache, v_cache, slots)
    tables = torch.full((1, 1), scratch_block, dtype=torch.int64, device=dev)
    decode = torch.tensor([[0, 0, 1]], dtype=torch.int32, device=dev)
    for splits in SPLIT_BUCKETS:
        decode_attention(torch.empty_like(q), q, k_cache, v_cache, tables, decode, 1.0, splits, tiles)
    qblocks = torch.tensor([[0, 0, t, 0]], dtype=torch.int32, device=dev)
    prefill_attention(torch.empty_like(q), q, k_cache, v_cache, tables, qblocks,
                      prefill_block_q(num_heads // hkv, tiles), 1.0, tiles)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def compiled_variants() -> int | None:
    """How many compiled variants of our kernels this process holds (Triton's per-device JIT
    caches), or None when triton is not loaded or keeps them elsewhere (the interpreter, another
    version): a timed run compares it before and after."""
    if not triton_available() or _interpreting():
        return None
    k = _kernels()
    total = 0
    for fn in (k.store_kvcache_kernel, k.paged_decode_kernel, k.decode_reduce_kernel, k.paged_prefill_kernel):
        caches = getattr(fn, "device_caches", None)
        if not isinstance(caches, dict):
            return None
        total += sum(len(c[0]) for c in caches.values())
    return total


__all__ = ["TileConfig", "TritonStepPlan", "build_plan", "choose_num_splits", "decode_attention",
           "paged_attention_triton", "prefill_attention", "prefill_block_q", "stage_plan", "store_kvcache", "triton_available",
           "warm_up_kernels", "compiled_variants"]
