"""Direct tests of prefix caching in the block pool and the KV-cache manager, in the style of
vLLM's tests/v1/core/test_prefix_caching.py: build a manager, ask for hits, assert block ids,
reference counts, the free queue and the block events. No scheduler, no runner."""
from __future__ import annotations

import pytest

from engine.kv.block_pool import BlockPool
from engine.kv.manager import NO_HIT, KVCacheManager
from engine.outputs import BlockEvent
from engine.kv.prefix_hash import ROOT_HASH, extend_block_hashes, hash_block
from engine.request import Request, SamplingParams

BS = 4


def make_request(rid: str, prompt, output=()) -> Request:
    req = Request(rid, list(prompt), SamplingParams(max_tokens=16))
    req.output_token_ids.extend(output)
    return req


def run_step(kv: KVCacheManager, req: Request, num_new_tokens: int, computed=NO_HIT) -> list[int]:
    """Admit or grow ``req`` by ``num_new_tokens`` and complete the step: what the scheduler does
    (allocate_slots) and what update_from_output does (num_computed_tokens, cache_full_blocks)."""
    if computed is not NO_HIT:
        req.num_computed_tokens = computed.num_computed_tokens
    new = kv.allocate_slots(req.request_id, req.num_computed_tokens + num_new_tokens, computed)
    assert new is not None
    req.num_computed_tokens += num_new_tokens
    kv.cache_full_blocks(req)
    return new


def test_hashes_are_chained_over_full_blocks_only():
    tokens = list(range(10))
    hashes = extend_block_hashes([], lambda s, e: tokens[s:e], len(tokens), BS)
    assert len(hashes) == 2                                  # 10 tokens: 2 full blocks
    assert hashes[0] == hash_block(ROOT_HASH, (0, 1, 2, 3))
    assert hashes[1] == hash_block(hashes[0], (4, 5, 6, 7))
    # The same block after another prefix hashes differently (the parent is in the hash).
    other = extend_block_hashes([], lambda s, e: ([9, 9, 9, 9] + tokens[4:])[s:e], 10, BS)
    assert other[1] != hashes[1]
    # Extending computes only the new blocks and keeps the old ones.
    more = extend_block_hashes(list(hashes), lambda s, e: (tokens + [10, 11])[s:e], 12, BS)
    assert more[:2] == hashes and len(more) == 3


def test_hit_only_after_the_step_that_wrote_the_blocks():
    kv = KVCacheManager(num_blocks=10, block_size=BS, enable_caching=True)
    a = make_request("a", range(10))
    hit = kv.get_computed_blocks(a)
    assert hit.block_ids == () and hit.num_computed_tokens == 0
    blocks = kv.allocate_slots("a", 10, hit)
    assert len(blocks) == 3
    # Allocated but not yet computed: another request with the same prompt gets nothing.
    b = make_request("b", range(10))
    assert kv.get_computed_blocks(b).block_ids == ()
    a.num_computed_tokens = 10
    kv.cache_full_blocks(a)                                   # the step completed
    hit = kv.get_computed_blocks(b)
    assert hit.block_ids == tuple(blocks[:2]) and hit.num_computed_tokens == 8
    assert kv.take_events()[-1] == BlockEvent("cached", "a", tuple(blocks[:2]), tuple(b.block_hashes[:2]))
    kv.check_invariants()


def test_hit_shares_blocks_with_reference_counts_and_free_keeps_them_cached():
    kv = KVCacheManager(num_blocks=10, block_size=BS, enable_caching=True)
    a = make_request("a", range(12))
    a_blocks = run_step(kv, a, 12, kv.get_computed_blocks(a))
    b = make_request("b", [*range(8), 100, 101, 102])
    hit = kv.get_computed_blocks(b)
    assert hit.block_ids == tuple(a_blocks[:2])               # the common 8 tokens
    b_blocks = run_step(kv, b, 3, hit)
    assert b_blocks[:2] == a_blocks[:2] and b_blocks[2] not in a_blocks
    assert [kv.pool.ref_cnt[x] for x in a_blocks] == [2, 2, 1]
    assert kv.prefix_cache_queries == 12 + 11 and kv.prefix_cache_hits == 8
    kv.check_invariants()
    kv.free("a")
    assert [kv.pool.ref_cnt[x] for x in a_blocks] == [1, 1, 0]
    assert kv.pool.num_cached_free_blocks == 1                # a's 3rd block: free but cached
    kv.free("b")
    assert kv.num_free_blocks == 10 and min(kv.pool.ref_cnt) == 0
    kv.check_invariants()
    # All of a's blocks are still cached: a request with its prompt + 1 token hits all three.
    c = make_request("c", range(13))
    assert kv.get_computed_blocks(c).block_ids == tuple(a_blocks)


def test_full_hit_leaves_the_last_token_to_compute():
    kv = KVCacheManager(num_blocks=10, block_size=BS, enable_caching=True)
    a = make_request("a", range(8))
    run_step(kv, a, 8, kv.get_computed_blocks(a))
    same = make_request("same", range(8))
    hit = kv.get_computed_blocks(same)
    assert hit.num_computed_tokens == 4 and len(hit.block_ids) == 1   # capped at 7, whole blocks
    longer = make_request("longer", range(9))
    assert kv.get_computed_blocks(longer).num_computed_tokens == 8


def test_eviction_drops_the_hash_lru_first_and_no_stale_hit():
    kv = KVCacheManager(num_blocks=4, block_size=BS, enable_caching=True)
    x = make_request("x", range(8))
    x_blocks = run_step(kv, x, 8, kv.get_computed_blocks(x))
    kv.free("x")
    kv.take_events()
    assert kv.pool.free_block_ids()[-2:] == list(reversed(x_blocks))  # tail first: head evicted last
    y = make_request("y", range(50, 62))                      # 3 blocks: 2 never used + 1 of x's
    y_blocks = run_step(kv, y, 12, kv.get_computed_blocks(y))
    events = kv.take_events()
    assert events[0] == BlockEvent("evicted", "y", (x_blocks[1],))
    assert x_blocks[1] in y_blocks and kv.pool.block_hash[x_blocks[1]] != 0   # re-tagged with y's
    again = make_request("again", range(9))
    hit = kv.get_computed_blocks(again)
    assert hit.block_ids == (x_blocks[0],)                    # block 0 still cached, block 1 gone
    kv.check_invariants()


def test_refused_admission_changes_nothing():
    kv = KVCacheManager(num_blocks=4, block_size=BS, enable_caching=True)
    a = make_request("a", range(8))
    a_blocks = run_step(kv, a, 8, kv.get_computed_blocks(a))
    kv.free("a")
    other = make_request("o", range(20, 24))
    run_step(kv, other, 4, kv.get_computed_blocks(other))
    kv.take_events()
    b = make_request("b", [*range(8), *range(30, 38)])       # hits 2 cached-free blocks, needs 2 more
    hit = kv.get_computed_blocks(b)
    assert hit.block_ids == tuple(a_blocks)
    assert kv.num_blocks_to_admit(b.num_tokens, hit) == 4 > kv.num_free_blocks == 3
    before = (list(kv.pool.ref_cnt), kv.pool.free_block_ids(), kv.prefix_cache_queries)
    assert kv.allocate_slots("b", 16, hit) is None
    assert (list(kv.pool.ref_cnt), kv.pool.free_block_ids(), kv.prefix_cache_queries) == before
    assert "b" not in kv.block_tables and kv.take_events() == []
    kv.check_invariants()


def test_recompute_after_preemption_rehits_its_own_blocks():
    kv = KVCacheManager(num_blocks=8, block_size=BS, enable_caching=True)
    a = make_request("a", range(6))
    first = run_step(kv, a, 6, kv.get_computed_blocks(a))
    a.output_token_ids.extend([7, 8, 9])                       # three decoded tokens...
    for _ in range(2):
        run_step(kv, a, 1)                                     # ...two of them computed: 8 tokens
    table = list(kv.block_ids("a"))
    kv.free("a")                                               # preempted (recompute)
    a.num_computed_tokens = 0
    hit = kv.get_computed_blocks(a)                            # 9 tokens: at most 2 blocks
    assert hit.block_ids == tuple(table[:2]) and table[:2] == first[:2]
    # generated tokens are cached too: block 1 holds prompt tokens 4-5 and outputs 7, 8
    assert hit.num_computed_tokens == 8


def test_duplicate_full_block_stays_untagged_and_misuse_is_rejected():
    kv = KVCacheManager(num_blocks=8, block_size=BS, enable_caching=True)
    a, b = make_request("a", range(4)), make_request("b", range(4))
    a_blocks = run_step(kv, a, 4, kv.get_computed_blocks(a))
    b_blocks = run_step(kv, b, 4, NO_HIT)                      # the same block, computed again
    assert kv.pool.block_hash[a_blocks[0]] != 0 and kv.pool.block_hash[b_blocks[0]] == 0
    with pytest.raises(ValueError, match="twice"):
        kv.pool.touch([a_blocks[0], a_blocks[0]])
    with pytest.raises(ValueError, match="caches no prefix"):
        kv.pool.touch([b_blocks[0]])
    with pytest.raises(ValueError, match="holds blocks"):
        kv.allocate_slots("a", 8, kv.get_computed_blocks(make_request("a", range(9))))
    kv.check_invariants()


def test_invariants_catch_a_stale_or_wrong_hash_entry():
    pool = BlockPool(4)
    [b] = pool.allocate(1)
    content = {b: (1, 2)}                                      # what the block really holds
    h = hash_block(ROOT_HASH, (1, 2))
    assert pool.cache_block(b, h, ROOT_HASH)
    pool.check_invariants({"r": [b]}, content.__getitem__)
    content[b] = (1, 3)                                        # overwritten: a stale tag
    with pytest.raises(AssertionError, match="do not hash"):
        pool.check_invariants({"r": [b]}, content.__getitem__)
    content[b] = (1, 2)
    pool.block_hash[b] = 0                                     # map entry naming an untagged block
    with pytest.raises(AssertionError, match="hash map"):
        pool.check_invariants({"r": [b]}, content.__getitem__)


def test_caching_off_is_the_old_manager():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    a = make_request("a", range(8))
    assert kv.get_computed_blocks(a) is NO_HIT and a.block_hashes == []
    run_step(kv, a, 8)
    assert not any(kv.pool.block_hash) and kv.take_prefix_cache_stats() == (0, 0)
    assert [e.kind for e in kv.take_events()] == ["allocated"]
