"""The scheduler's own invariant check (G1-G4 of ``../shared/cases/README.md`` on its queues,
block tables and both KV pools), run after every step under ``EngineConfig.check_invariants``."""
from __future__ import annotations

from engine.sched.queue import priority_key
from engine.vocab import Policy


def check_scheduler(s) -> None:
    """Assert G1 (block conservation on the GPU and CPU pools), G2 (reference counts), G3 (every
    live request in exactly one queue) and G4 (limits) on the scheduler ``s``, plus the order of
    running requests under ``priority``, the static batch and the parallel-sampling groups.
    Raises ``AssertionError`` naming the broken invariant."""
    s.kv.check_invariants()
    seen: dict[str, str] = {}
    for name, reqs in (("waiting", list(s.waiting)), ("running", s.running),
                       ("paused", s.paused), ("swapped", s.swapped)):
        for r in reqs:
            assert r.request_id not in seen, f"G3: {r.request_id} in {seen[r.request_id]} and {name}"
            assert not r.is_finished, f"G3: finished {r.request_id} back in {name}"
            seen[r.request_id] = name
    for rid, r in s.requests.items():
        assert not r.is_finished, f"G3: finished {rid} still held by the scheduler"
        assert rid in seen, f"G3: {rid} ({r.status}) is in no queue"
    assert len(seen) == len(s.requests), "G3: a queued request is not in requests"
    for rid in s.kv.block_tables:
        assert rid in s.requests, f"G1: {rid} holds blocks but is not live"
    if s.swap is not None:
        s.swap.check_invariants()
        assert set(s.swap.tables) == {r.request_id for r in s.swapped}, (
            "G1: CPU swap blocks held by requests that are not swapped out")
        for r in s.swapped:
            assert not s.kv.block_ids(r.request_id), f"G1: swapped {r.request_id} holds GPU blocks"
    assert len(s.running) <= s.config.max_num_seqs, "G4: running > max_num_seqs"
    slots = [r.slot for r in s.running]
    assert None not in slots and len(set(slots)) == len(slots), f"slots not unique: {slots}"
    if s.policy == Policy.PRIORITY:
        keys = [priority_key(r) for r in s.running]
        assert keys == sorted(keys), "running requests out of (priority, arrival) order"
    assert s.static_batch <= set(s.requests), "static batch names a finished request"
    s.groups.check_invariants()
