"""The engine's self-check under ``EngineConfig.check_invariants``: the state it publishes (built
by its :class:`engine.state.timeline.StateTimeline` from its own step records) equals the scheduler's
truth."""
from __future__ import annotations

import numpy as np


def check_engine_state(engine) -> None:
    """Assert that ``engine``'s (an :class:`engine.engine.LLMEngine`) published state equals its
    scheduler's truth for every live request (status, slot, progress, preemptions, block table).
    Raises ``AssertionError``."""
    tl = engine.timeline
    assert tl.num_live == len(engine.scheduler.requests), (
        f"state holds {tl.num_live} live requests, scheduler {len(engine.sched.scheduler.requests)}")
    snap = tl.snapshot()
    # Every block table at once (O(live + blocks)): held blocks by owner row, then position.
    rows = snap.owner_rows()
    held = np.flatnonzero(rows >= 0)
    assert np.array_equal(snap.columns["seq"][rows[held]], snap.block_owner[held]), (
        "a block is owned by a request that is not live")
    tables: dict[str, list[int]] = {}
    for r, b in zip(rows[held].tolist(), held.tolist()):
        tables.setdefault(snap.request_ids[r], []).append(b)
    # Prefix-shared blocks: the further holders of blocks owned by their oldest holder.
    shared_rows = np.searchsorted(snap.columns["seq"], snap.shared_seq)
    for r, b in zip(shared_rows.tolist(), snap.shared_block.tolist()):
        assert snap.block_owner[b] >= 0, f"block {b} is shared but has no owner"
        tables.setdefault(snap.request_ids[r], []).append(b)
    pool = engine.scheduler.kv.pool
    assert snap.block_ref_cnt().tolist() == pool.ref_cnt, "block reference counts differ from the pool's"
    assert snap.block_hash.tolist() == pool.block_hash, "block hashes differ from the pool's"
    for rid, blocks in tables.items():
        i = snap.row(rid)
        blocks.sort(key=lambda b: int(snap.block_pos[b]))
        assert [int(snap.block_pos[b]) for b in blocks] == list(range(len(blocks))), (
            f"block positions of {rid}")
        assert len(blocks) == int(snap.columns["num_blocks"][i]), f"block count of {rid}"
    for rid, req in engine.scheduler.requests.items():
        want = (req.status.value, -1 if req.slot is None else req.slot, req.num_computed_tokens,
                req.num_output_tokens, req.num_preemptions)
        assert tl.values(rid) == want, f"state of {rid}: {tl.values(rid)} != engine {want}"
        blocks = engine.scheduler.kv.block_ids(rid)
        got = tables.pop(rid, [])
        assert got == blocks, f"blocks of {rid}: {got} != {blocks}"
    assert not tables, f"blocks held in the state by requests the scheduler does not hold: {list(tables)}"
