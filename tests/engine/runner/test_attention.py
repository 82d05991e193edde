"""The torch reference paged attention against dense causal SDPA on the same packed sequences
(mixed prefill chunks and decodes, GQA, non-contiguous block tables), and the step metadata."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.runner.attention import PagedAttentionMetadata
from engine.runner.attention.reference import paged_attention
from engine.runner.attention.registry import _paged_attention_forward

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine

H, HKV, D, BS, NUM_BLOCKS = 4, 2, 16, 4, 160


def test_metadata_slot_mapping_by_hand():
    # A: 3 new tokens at positions 3..5 over blocks [7, 2]; B: a decode at position 4 over [5, 1];
    # C: a 2-token prompt in block [3].
    meta = PagedAttentionMetadata.build([3, 1, 2], [6, 5, 2], [[7, 2], [5, 1], [3]], [], BS, torch.device("cpu"))
    assert meta.slot_mapping.tolist() == [7 * 4 + 3, 2 * 4 + 0, 2 * 4 + 1, 1 * 4 + 0, 3 * 4 + 0, 3 * 4 + 1]
    assert meta.query_start_host == [0, 3, 4, 6]
    assert meta.context_lens_host == [6, 5, 2]
    assert meta.block_tables.tolist() == [[7, 2], [5, 1], [3, 0]]
    assert meta.prefill_ids == [0, 2]
    [(rows, tables, mask)] = meta.decode_groups                 # B's one query row, its own width
    assert rows.tolist() == [3] and tables.tolist() == [[5, 1]]
    assert mask.tolist() == [[True] * 5 + [False] * 3]


def test_metadata_without_decodes_has_no_mask():
    meta = PagedAttentionMetadata.build([4], [4], [[9]], [], BS, torch.device("cpu"))
    assert meta.decode_groups == [] and meta.prefill_ids == [0]
    assert meta.slot_mapping.tolist() == [36, 37, 38, 39]


# (new tokens this step, context length after the step): a whole prompt, a later prefill chunk,
# decodes with different context lengths, a 1-token prompt and a chunk ending exactly on a block.
REQUESTS = [(10, 10), (7, 20), (1, 33), (1, 5), (1, 1), (4, 16), (9, 9)]
# enough decodes of spread-out lengths to be split into several length-sorted decode groups
MANY_DECODES = [(1, c) for c in (3, 50, 7, 18, 33, 1, 64, 12, 5, 40, 27, 9, 16, 17, 2, 45, 30, 11,
                                 8, 21, 60, 4, 13, 36)] + [(6, 6), (5, 22)]


def dense_reference(q_full, k_full, v_full, nq, scale):
    """Causal SDPA over the whole sequence (GQA expanded), keeping the last ``nq`` query rows."""
    rep = H // HKV
    q = q_full.transpose(0, 1)[None]                                  # [1, H, ctx, D]
    k = k_full.repeat_interleave(rep, dim=1).transpose(0, 1)[None]
    v = v_full.repeat_interleave(rep, dim=1).transpose(0, 1)[None]
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return o[0].transpose(0, 1)[-nq:]                                 # [nq, H, D]


@pytest.mark.parametrize("requests", [REQUESTS, MANY_DECODES], ids=["mixed", "many-decodes"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paged_attention_matches_dense_causal_sdpa(seed, requests):
    g = torch.Generator().manual_seed(seed)
    scale = D ** -0.5
    # Noise everywhere, so reading an unwritten slot or an unmasked padding block shows.
    k_cache = torch.randn(NUM_BLOCKS, BS, HKV, D, generator=g)
    v_cache = torch.randn(NUM_BLOCKS, BS, HKV, D, generator=g)
    perm = (torch.randperm(NUM_BLOCKS - 1, generator=g) + 1).tolist()   # block 0 is only padding
    tables, seqs = [], []
    for nq, ctx in requests:
        nblk = -(-ctx // BS)
        tables.append([perm.pop() for _ in range(nblk)])
        seqs.append((torch.randn(ctx, H, D, generator=g), torch.randn(ctx, HKV, D, generator=g),
                     torch.randn(ctx, HKV, D, generator=g)))
    # Earlier steps' K/V are already in the cache, written by hand through the block tables.
    for (nq, ctx), table, (_, k, v) in zip(requests, tables, seqs):
        for pos in range(ctx - nq):
            k_cache[table[pos // BS], pos % BS] = k[pos]
            v_cache[table[pos // BS], pos % BS] = v[pos]
    meta = PagedAttentionMetadata.build([nq for nq, _ in requests], [ctx for _, ctx in requests], tables,
                                        [(k_cache, v_cache)], BS, torch.device("cpu"))
    query = torch.cat([q[ctx - nq:] for (nq, ctx), (q, _, _) in zip(requests, seqs)])       # [T, H, D]
    key = torch.cat([k[ctx - nq:] for (nq, ctx), (_, k, _) in zip(requests, seqs)])
    value = torch.cat([v[ctx - nq:] for (nq, ctx), (_, _, v) in zip(requests, seqs)])
    out = paged_attention(query.transpose(0, 1)[None], key.transpose(0, 1)[None],
                          value.transpose(0, 1)[None], meta, layer_idx=0, scaling=scale)
    assert out.shape == (1, query.shape[0], H, D)
    start = 0
    for (nq, ctx), table, (q, k, v) in zip(requests, tables, seqs):
        expected = dense_reference(q, k, v, nq, scale)
        torch.testing.assert_close(out[0, start:start + nq], expected, rtol=1e-5, atol=1e-5)
        start += nq
        # This step's K/V landed in the request's blocks.
        for pos in range(ctx):
            torch.testing.assert_close(k_cache[table[pos // BS], pos % BS], k[pos], rtol=0, atol=0)
            torch.testing.assert_close(v_cache[table[pos // BS], pos % BS], v[pos], rtol=0, atol=0)


def test_registered_attention_requires_metadata():
    class Layer(torch.nn.Module):
        layer_idx = 0

    q = torch.zeros(1, H, 2, D)
    kv = torch.zeros(1, HKV, 2, D)
    with pytest.raises(RuntimeError, match="paged_meta"):
        _paged_attention_forward(Layer(), q, kv, kv, None, scaling=1.0)


def test_decode_groups_cover_every_decode_once_padded_to_their_own_length():
    tables = [[i] * -(-c // BS) for i, (_, c) in enumerate(MANY_DECODES)]
    meta = PagedAttentionMetadata.build([q for q, _ in MANY_DECODES], [c for _, c in MANY_DECODES],
                                        tables, [], BS, torch.device("cpu"))
    assert len(meta.decode_groups) > 1
    rows = sorted(r for g in meta.decode_groups for r in g[0].tolist())
    assert rows == sorted(meta.query_start_host[i] for i, (q, _) in enumerate(MANY_DECODES) if q == 1)
    for rows_g, tables_g, mask_g in meta.decode_groups:
        ctxs = [MANY_DECODES[meta.query_start_host.index(r)][1] for r in rows_g.tolist()]
        assert tables_g.shape[1] == max(-(-c // BS) for c in ctxs)       # padded to the group, not the step
        assert mask_g.sum(dim=1).tolist() == ctxs
