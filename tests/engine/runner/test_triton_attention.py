"""Our Triton paged-attention kernels against the torch reference (the oracle): the K/V store, decode
with grouped-query attention and split-K, and varlen (chunked) prefill over the paged cache.

Without a GPU the kernels run on CPU tensors through the Triton interpreter: ``TRITON_INTERPRET=1``
must be set before triton is first imported (tests/conftest.py does it for a pytest session; the
line below covers running this file's functions on their own). With CUDA and no interpreter they run
compiled on the GPU. Shapes are tiny: the interpreter executes every program instance in Python.
Skipped where triton is not installed.
"""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")

from engine.runner.attention import PagedAttentionMetadata  # noqa: E402
from engine.runner.attention.reference import paged_attention, write_kv  # noqa: E402
from engine.runner.attention.triton_attention import (  # noqa: E402
    SPLIT_BUCKETS, TileConfig, build_plan, choose_num_splits, decode_attention, paged_attention_triton, store_kvcache)

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRET else "cpu")
# Small tiles so that a few dozen tokens span several key tiles and query blocks; tl.dot needs >= 16.
TILES = TileConfig(tile_n=16, block_q=8)

# (new tokens this step, context length after the step). Block sizes 4 and 16 make these: a whole
# prompt over several blocks (and 3 query blocks), a chunk starting mid-block after a cached prefix,
# decodes whose contexts span several blocks and key tiles, a 1-token prompt, a chunk ending exactly
# on a block boundary, a chunk starting at a block boundary.
MIXED = [(20, 20), (7, 21), (1, 45), (1, 5), (1, 1), (12, 32), (5, 37), (1, 16)]
DECODES = [(1, c) for c in (1, 3, 17, 40, 64, 71)]


def make_step(requests, *, heads=4, kv_heads=2, head_dim=32, block_size=4, dtype=torch.float32, seed=0):
    """Random caches full of noise (so a wrong slot or an unmasked padding position shows), earlier
    steps' K/V written by hand through shuffled block tables, and this step's packed q/k/v in the
    layouts the model hands over (``[1, H, T, D]`` views of ``[T, H, D]`` memory)."""
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-ctx // block_size) for _, ctx in requests) + 4
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g)
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()     # block 0 only pads tables
    tables = [[perm.pop() for _ in range(-(-ctx // block_size))] for _, ctx in requests]
    t = sum(nq for nq, _ in requests)
    q = torch.randn(t, heads, head_dim, generator=g)
    k = torch.randn(t, kv_heads, head_dim, generator=g)
    v = torch.randn(t, kv_heads, head_dim, generator=g)
    for (nq, ctx), table in zip(requests, tables):
        for pos in range(ctx - nq):
            k_cache[table[pos // block_size], pos % block_size] = torch.randn(kv_heads, head_dim, generator=g)
            v_cache[table[pos // block_size], pos % block_size] = torch.randn(kv_heads, head_dim, generator=g)
    cast = dict(dtype=dtype, device=DEVICE)
    return dict(requests=requests, tables=tables, block_size=block_size,
                q=q.to(**cast), k=k.to(**cast), v=v.to(**cast),
                k_cache=k_cache.to(**cast), v_cache=v_cache.to(**cast))


def run(fn, step, dtype=None, **kw):
    """Run ``fn`` (reference or Triton) on fresh copies of the step's caches (in ``dtype``, default
    the step's); returns (output ``[T, H, D]``, k_cache, v_cache)."""
    dtype = dtype or step["q"].dtype
    caches = [(step["k_cache"].to(dtype).clone(), step["v_cache"].to(dtype).clone())]
    req = step["requests"]
    meta = PagedAttentionMetadata.build([nq for nq, _ in req], [ctx for _, ctx in req], step["tables"],
                                        caches, step["block_size"], DEVICE)
    as_model = [step[n].to(dtype).transpose(0, 1)[None] for n in ("q", "k", "v")]   # [1, heads, T, D]
    d = step["q"].shape[-1]
    out = fn(*as_model, meta, 0, d ** -0.5, **kw)[0]
    return out, caches[0][0], caches[0][1]


def rel_err(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kvcache_matches_reference_write(dtype):
    step = make_step(MIXED, block_size=4, dtype=dtype)
    meta = PagedAttentionMetadata.build([nq for nq, _ in MIXED], [c for _, c in MIXED], step["tables"],
                                        [], 4, DEVICE)
    key = step["k"].transpose(0, 1).contiguous().transpose(0, 1)          # strided like the model's
    want_k, want_v = step["k_cache"].clone(), step["v_cache"].clone()
    write_kv(key, step["v"], want_k, want_v, meta.slot_mapping)
    got_k, got_v = step["k_cache"].clone(), step["v_cache"].clone()
    store_kvcache(key, step["v"], got_k, got_v, meta.slot_mapping)
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


def test_store_kvcache_skips_negative_slots():
    step = make_step([(3, 3)], block_size=4)
    before = step["k_cache"].clone()
    slots = torch.tensor([5, -1, 6], dtype=torch.long, device=DEVICE)
    store_kvcache(step["k"], step["v"], step["k_cache"], step["v_cache"], slots)
    flat, old = step["k_cache"].view(-1, 2, 32), before.view(-1, 2, 32)
    assert torch.equal(flat[5], step["k"][0]) and torch.equal(flat[6], step["k"][2])
    untouched = [i for i in range(flat.shape[0]) if i not in (5, 6)]
    assert torch.equal(flat[untouched], old[untouched])


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_mixed_step_fp32_matches_reference(block_size, num_splits):
    step = make_step(MIXED, block_size=block_size, seed=block_size + num_splits)
    ref, ref_k, ref_v = run(paged_attention, step)
    out, k_cache, v_cache = run(paged_attention_triton, step, num_splits=num_splits, tiles=TILES)
    assert torch.equal(k_cache, ref_k) and torch.equal(v_cache, ref_v)
    assert not out.isnan().any()
    assert (out - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("num_splits", [2, 5])
def test_decode_split_k_matches_reference(num_splits):
    # 5 splits of a 1..5-tile context leave some splits empty; 2 splits share 5 tiles 3 + 2.
    step = make_step(DECODES, head_dim=64, block_size=8, seed=num_splits)
    ref, _, _ = run(paged_attention, step)
    out, _, _ = run(paged_attention_triton, step, num_splits=num_splits, tiles=TILES)
    assert not out.isnan().any()
    assert (out - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_row_with_empty_context_gives_zeros_not_nan(num_splits):
    # A padded decode row (context 0, as a captured batch would pad with) next to a real one.
    step = make_step([(1, 9), (1, 1)], block_size=4)
    q = step["q"]
    out = torch.full_like(q, 7.0)
    decode = torch.tensor([[0, 0, 9], [1, 1, 0]], dtype=torch.int32, device=DEVICE)
    tables = torch.tensor([t + [0] * (3 - len(t)) for t in step["tables"]], device=DEVICE)
    decode_attention(out, q, step["k_cache"], step["v_cache"], tables, decode, 0.25, num_splits, TILES)
    assert not out.isnan().any() and torch.equal(out[1], torch.zeros_like(out[1]))
    assert out[0].abs().sum() > 0


def test_odd_group_and_head_dim_fp32():
    # 3 query heads per KV head and head_dim 24: both padded to powers of two inside the kernels.
    step = make_step(MIXED[:4], heads=6, kv_heads=2, head_dim=24, block_size=4, seed=7)
    ref, _, _ = run(paged_attention, step)
    out, _, _ = run(paged_attention_triton, step, num_splits=2, tiles=TILES)
    assert (out - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("block_size", [4, 16])
def test_mixed_step_bf16_close_to_fp32_reference(block_size):
    step = make_step(MIXED, block_size=block_size, dtype=torch.bfloat16, seed=11)
    ref, _, _ = run(paged_attention, step, dtype=torch.float32)    # oracle: fp32 on the same inputs
    out, _, _ = run(paged_attention_triton, step, num_splits=2, tiles=TILES)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert rel_err(out, ref) < 1e-2


def test_default_tiles_match_reference():
    # The production tile sizes (64-token key tiles, 128-row query blocks) on the same tiny step.
    step = make_step(MIXED, block_size=16, seed=3)
    ref, _, _ = run(paged_attention, step)
    out, _, _ = run(paged_attention_triton, step)
    assert (out - ref).abs().max().item() < 1e-4


def test_plan_splits_requests_into_decodes_and_query_blocks():
    meta = PagedAttentionMetadata.build([20, 1, 3], [25, 9, 3], [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10], [11]],
                                        [], 4, torch.device("cpu"))
    plan = build_plan(meta, group=2, num_kv_heads=2, device=torch.device("cpu"),
                      tiles=TileConfig(block_q=8), num_splits=1)
    assert plan.decode.tolist() == [[20, 1, 9]]
    # request 0: rows 0..19 at positions 5..24 in blocks of 8; request 2: rows 21..23 at 0..2
    assert plan.qblocks.tolist() == [[0, 0, 8, 5], [0, 8, 8, 13], [0, 16, 4, 21], [2, 21, 3, 0]]


def test_choose_num_splits():
    assert choose_num_splits(256, 8, 4096, 132) == 1            # enough programs already
    assert choose_num_splits(4, 8, 4096, 132) == 8              # 32 programs -> 2 waves of 132 SMs want 9: bucket 8
    assert choose_num_splits(4, 8, 900, 132) == 4               # 4 splits of >= 256 tokens
    assert choose_num_splits(4, 8, 300, 132) == 2               # at least 256 tokens per split
    assert choose_num_splits(1, 1, 100_000, 132) == 32          # capped
    assert choose_num_splits(1, 8, 1, 132) == 1
    assert {choose_num_splits(n, 8, c, 132) for n in range(1, 300, 7) for c in range(1, 9000, 97)} \
        <= set(SPLIT_BUCKETS)                                    # only the split counts compiled at warm-up
