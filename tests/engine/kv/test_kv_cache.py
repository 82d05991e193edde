"""Block pool and KV-cache manager: allocation, LRU reuse, misuse rejected without damage, and the
G1/G2 invariant checks catching corruption."""
from __future__ import annotations

import pytest

from engine.kv.manager import BlockPool, KVCacheManager, NoFreeBlocksError


def snapshot(pool: BlockPool):
    return list(pool.ref_cnt), pool.free_block_ids(), pool.num_free_blocks


def test_allocate_and_free_round_trip():
    pool = BlockPool(6)
    assert pool.num_free_blocks == 6
    a = pool.allocate(4)
    assert len(a) == len(set(a)) == 4
    assert pool.num_free_blocks == 2
    assert all(pool.ref_cnt[b] == 1 for b in a)
    assert not set(a) & set(pool.free_block_ids())
    pool.free(a)
    assert pool.num_free_blocks == 6
    assert pool.ref_cnt == [0] * 6
    assert sorted(pool.free_block_ids()) == list(range(6))
    assert pool.allocate(0) == []


def test_lru_order_least_recently_freed_first():
    pool = BlockPool(5)
    blocks = pool.allocate(5)
    assert pool.num_free_blocks == 0
    order = [blocks[3], blocks[0], blocks[4], blocks[1], blocks[2]]
    for b in order:
        pool.free([b])
    assert pool.free_block_ids() == order
    assert pool.allocate(2) == order[:2]
    pool.free([order[0]])                      # freed again: now the most recently freed
    assert pool.free_block_ids() == order[2:] + [order[0]]
    assert pool.allocate(4) == order[2:] + [order[0]]


def test_double_free_rejected_counts_unchanged():
    pool = BlockPool(4)
    a = pool.allocate(2)
    pool.free([a[0]])
    before = snapshot(pool)
    with pytest.raises(ValueError, match="already free"):
        pool.free([a[1], a[0]])                # a[1] is valid, a[0] already free: nothing changes
    assert snapshot(pool) == before
    assert pool.ref_cnt[a[1]] == 1


def test_duplicate_ids_in_one_free_rejected_counts_unchanged():
    pool = BlockPool(4)
    a = pool.allocate(3)
    before = snapshot(pool)
    with pytest.raises(ValueError, match="twice"):
        pool.free([a[0], a[1], a[0]])
    assert snapshot(pool) == before
    pool.free(a)
    assert pool.ref_cnt == [0] * 4


@pytest.mark.parametrize("bad", [-1, 4, 100])
def test_unknown_block_rejected(bad):
    pool = BlockPool(4)
    a = pool.allocate(1)
    before = snapshot(pool)
    with pytest.raises(ValueError, match="unknown"):
        pool.free([a[0], bad])
    assert snapshot(pool) == before


def test_no_free_blocks_error_changes_nothing():
    pool = BlockPool(3)
    pool.allocate(2)
    before = snapshot(pool)
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    assert snapshot(pool) == before
    assert len(pool.allocate(1)) == 1
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(1)


def test_pool_size_validated():
    with pytest.raises(ValueError):
        BlockPool(0)


def test_check_invariants_accepts_consistent_state():
    pool = BlockPool(5)
    a, b = pool.allocate(2), pool.allocate(1)
    pool.check_invariants({"A": a, "B": b})


@pytest.mark.parametrize("corrupt, match", [
    (lambda pool, held: held.__setitem__("B", held["A"][:1]), "G1|G2"),          # two owners of a block
    (lambda pool, held: held["A"].append(held["A"][0]), "G2"),                   # held twice by one
    (lambda pool, held: held.__setitem__("C", [pool.free_block_ids()[0]]), "G1|G2"),  # holds a free block
    (lambda pool, held: held.pop("B"), "G1"),                                    # leaked block
    (lambda pool, held: pool.ref_cnt.__setitem__(held["B"][0], -1), "G2"),       # negative count
    (lambda pool, held: pool._free.__setitem__(held["A"][0], None), "G1|G2"),    # held block on free list
    (lambda pool, held: pool._free.pop(pool.free_block_ids()[0]), "G1|G2"),      # free block lost
    (lambda pool, held: pool.ref_cnt.__setitem__(pool.free_block_ids()[0], 1), "G2"),  # count on a free block
])
def test_check_invariants_catches_corruption(corrupt, match):
    pool = BlockPool(6)
    held = {"A": pool.allocate(2), "B": pool.allocate(2)}
    pool.check_invariants(held)
    corrupt(pool, held)
    with pytest.raises(AssertionError, match=match):
        pool.check_invariants(held)


def test_manager_allocates_ceil_blocks_and_grows_tables():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    assert kv.blocks_for(0) == 0 and kv.blocks_for(1) == 1 and kv.blocks_for(4) == 1 and kv.blocks_for(5) == 2
    new = kv.allocate_slots("A", 5)
    assert len(new) == 2 and kv.block_ids("A") == new
    assert kv.allocate_slots("A", 8) == []                 # still fits in 2 blocks
    more = kv.allocate_slots("A", 9)
    assert len(more) == 1 and kv.block_ids("A") == new + more
    assert kv.num_free_blocks == 5
    assert kv.usage == pytest.approx(3 / 8)
    kv.check_invariants()


def test_manager_refuses_without_changing_anything():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    kv.allocate_slots("A", 12)                              # 3 blocks
    before = (dict(kv.block_tables), kv.num_free_blocks)
    assert kv.allocate_slots("B", 8) is None               # needs 2, 1 free
    assert "B" not in kv.block_tables
    assert kv.allocate_slots("A", 20) is None              # needs 2 more, 1 free
    assert (dict(kv.block_tables), kv.num_free_blocks) == before
    kv.check_invariants()


def test_manager_free_releases_whole_table_tail_first():
    kv = KVCacheManager(num_blocks=6, block_size=2)
    a = kv.allocate_slots("A", 6)                           # 3 blocks
    b = kv.allocate_slots("B", 2)
    assert kv.free("A") == a
    assert kv.block_ids("A") == [] and kv.free("A") == []  # freeing again is a no-op
    # Free blocks never used come first, then A's blocks with its tail block before its head.
    assert kv.pool.free_block_ids()[-3:] == list(reversed(a))
    assert kv.num_free_blocks == 5
    kv.check_invariants()
    kv.free("B")
    assert kv.num_free_blocks == 6 and b[0] in kv.pool.free_block_ids()


def test_manager_check_invariants_catches_shared_block():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    kv.allocate_slots("A", 8)
    kv.allocate_slots("B", 4)
    kv.block_tables["B"] = [kv.block_tables["A"][0]]       # B now points at A's block
    with pytest.raises(AssertionError):
        kv.check_invariants()
