"""The KV block map with prefix caching: shared blocks (reference count > 1) and cached-free
blocks are marked in the pixels, and the tooltip names owners, reference count, token range and
prefix hash. States come from the real engine with the fake runner."""
from __future__ import annotations

import numpy as np

from engine.config import EngineConfig
from engine.request import SamplingParams
from tests.support.engine_driver import Arrival, distinct_prompt, run_workload
from ui.views.block_image import CACHED_FREE, SHARED
from ui.style.colors import packed
from ui.views.block_map import KVBlockMap


def shared_prefix_states():
    """States after each step of 6 requests sharing one 12-token prefix, arriving a step apart
    (so each hits what the earlier ones wrote), over 16 blocks of 4 tokens."""
    config = EngineConfig(block_size=4, num_gpu_blocks=16, max_model_len=64, max_num_seqs=3,
                          max_num_batched_tokens=32, enable_prefix_caching=True)
    arrivals = [Arrival(f"r{i}", 2 * i, distinct_prompt(100, 12) + distinct_prompt(i, 3),
                        SamplingParams(max_tokens=6)) for i in range(6)]
    return run_workload(config, arrivals).states


def top_and_bottom(w: KVBlockMap, block: int) -> tuple[int, int]:
    x, y = w.cell_origin(block)
    mid = x + (w.px - 1) // 2
    return int(w.image[y, mid]), int(w.image[y + w.px - 2, mid])


def test_shared_and_cached_free_blocks_are_marked_and_described(qtbot):
    states = shared_prefix_states()
    shared_state = next(s for s in states if len(s.shared_block))
    free_state = next(s for s in states if s.cached_free_mask().any())
    w = KVBlockMap()
    qtbot.addWidget(w)

    w.set_state(shared_state)
    ref = shared_state.block_ref_cnt()
    for b in range(shared_state.num_total_blocks):
        top, _ = top_and_bottom(w, b)
        assert (top == packed(SHARED)) == (ref[b] > 1), b
    b = int(np.flatnonzero(ref > 1)[0])
    lines = w.describe(b).split("\n")
    holders = shared_state.block_holders(b)
    assert lines[1] == f"owner {holders[0]}" and len(holders) == ref[b] > 1
    assert f"shared: reference count {ref[b]} ({', '.join(holders)})" in lines
    pos = int(shared_state.block_pos[b])
    assert f"tokens {pos * 4}-{pos * 4 + 3}" in lines            # a shared block is full
    assert any(line.startswith("prefix hash ") for line in lines)
    assert all(b in shared_state.block_ids(rid) for rid in holders)

    w.set_state(free_state)
    cached_free = free_state.cached_free_mask()
    for b in range(free_state.num_total_blocks):
        _, bottom = top_and_bottom(w, b)
        assert (bottom == packed(CACHED_FREE)) == bool(cached_free[b]), b
    b = int(np.flatnonzero(cached_free)[0])
    lines = w.describe(b).split("\n")
    assert lines[1] == "cached-free (evictable, reusable on a hit)"
    assert lines[3] == f"prefix hash {int(free_state.block_hash[b]) & (2**64 - 1):016x}"
