"""The physical KV block pool: reference counts, an LRU free queue and the prefix-cache hash map.
Pure Python (no torch): the tensors live in the model runner.

Follows vLLM v1's ``BlockPool`` (vllm/v1/core/block_pool.py): a block is *held* (reference count
>= 1: in one or more requests' block tables), *free* (count 0, no hash) or *cached-free* (count 0
but tagged with the hash of the full block of tokens whose KV it still holds). Free and
cached-free blocks share one LRU queue; allocation takes the least recently freed block and, if
it was cached, evicts it (drops its hash) first. A cached block can be shared into another
request's table (:meth:`BlockPool.touch`), which takes it off the free queue if it was there.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, Mapping, Sequence

from engine.kv.prefix_hash import hash_block


class NoFreeBlocksError(RuntimeError):
    """The pool has fewer free blocks than asked for."""


class BlockPool:
    """``num_blocks`` physical blocks with reference counts.

    Free blocks sit in an LRU queue: ``allocate`` takes from the least recently freed end and
    ``free`` appends to the most recently freed end, so a freed block (and the prefix it caches)
    is reused as late as possible. ``block_hash[b]`` is the hash a cached block is tagged with
    (0 = none); ``cached_block`` maps each hash to its one block (a second full block with the
    same content is left untagged, vLLM keeps both); ``block_parent[b]`` is the hash of the
    block before it in its prefix, so its hash can be checked against its contents. Hashes are
    trusted as vLLM trusts them (a 64-bit chained hash: two different prefixes of N cached blocks
    collide with probability about N^2 / 2^65). Raises ``ValueError`` on misuse (double free, a
    list naming a block twice, unknown ids) rather than corrupting counts.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.block_hash = [0] * num_blocks
        self.block_parent = [0] * num_blocks
        self.cached_block: dict[int, int] = {}
        self.reserved: set[int] = set()       # taken out of use (the user shrank the pool)
        self.evicted_hashes: list[int] = []   # hashes evicted since the owner last took them

    @property
    def num_free_blocks(self) -> int:
        """Blocks on the free queue (cached-free ones included: they can be handed out)."""
        return len(self._free)

    def free_block_ids(self) -> list[int]:
        """Free block ids, least recently freed first."""
        return list(self._free)

    @property
    def num_cached_free_blocks(self) -> int:
        """Blocks on the free queue that still cache a prefix (O(free blocks): tests, stats)."""
        return sum(1 for b in self._free if self.block_hash[b])

    def allocate(self, n: int, evicted: list[int] | None = None) -> list[int]:
        """Take ``n`` free blocks (ref count becomes 1), evicting the cached ones among them
        (their ids are appended to ``evicted``). Raises :class:`NoFreeBlocksError`."""
        if n > len(self._free):
            raise NoFreeBlocksError(f"asked for {n} blocks, {len(self._free)} free of {self.num_blocks}")
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            if self.block_hash[b]:
                self._evict(b)
                if evicted is not None:
                    evicted.append(b)
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def _evict(self, b: int) -> None:
        h = self.block_hash[b]
        if self.cached_block.get(h) == b:
            del self.cached_block[h]
            self.evicted_hashes.append(h)
        self.block_hash[b] = 0
        self.block_parent[b] = 0

    def touch(self, block_ids: Sequence[int]) -> None:
        """Add one reference to each (cached) block, taking cached-free ones off the free queue
        (a prefix-cache hit). Raises ``ValueError`` for a list naming a block twice or a block
        that caches nothing; then no count is changed."""
        if len(set(block_ids)) != len(block_ids):
            raise ValueError(f"block list names a block twice: {list(block_ids)}")
        for b in block_ids:
            if not 0 <= b < self.num_blocks or not self.block_hash[b]:
                raise ValueError(f"block {b} caches no prefix: it cannot be shared")
        for b in block_ids:
            if self.ref_cnt[b] == 0:
                del self._free[b]
            self.ref_cnt[b] += 1

    def share(self, block_ids: Sequence[int]) -> None:
        """Add one reference to each held block (a parallel-sampling sequence forked onto its
        group's prompt blocks; copy-on-write in PagedAttention, Kwon et al., SOSP 2023, 4.4).
        Raises ``ValueError`` for a list naming a block twice or a block that is not held; then
        no count is changed."""
        if len(set(block_ids)) != len(block_ids):
            raise ValueError(f"block list names a block twice: {list(block_ids)}")
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref_cnt[b] < 1:
                raise ValueError(f"block {b} is not held: only a held block can be shared")
        for b in block_ids:
            self.ref_cnt[b] += 1

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference to each block; blocks reaching 0 go to the free queue's tail (a
        cached block keeps its hash there: cached-free, evictable).

        Raises ``ValueError`` if the list names a block twice, names an unknown block or a block
        that is already free; in that case no count is changed.
        """
        if len(set(block_ids)) != len(block_ids):
            raise ValueError(f"block list names a block twice: {list(block_ids)}")
        for b in block_ids:
            if not 0 <= b < self.num_blocks:
                raise ValueError(f"unknown block id {b} (pool has {self.num_blocks})")
            if self.ref_cnt[b] <= 0:
                raise ValueError(f"block {b} is already free")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._free[b] = None

    def reserve(self, block_ids: Sequence[int]) -> None:
        """Take free blocks out of use (a cached one loses its prefix). Raises ``ValueError``
        for a block that is held or already reserved; then nothing changes."""
        for b in block_ids:
            if b not in self._free:
                raise ValueError(f"block {b} is {'reserved' if b in self.reserved else 'held'}: "
                                 "only free blocks can be taken out of use")
        for b in block_ids:
            del self._free[b]
            if self.block_hash[b]:
                self._evict(b)
            self.reserved.add(b)

    def unreserve(self, block_ids: Sequence[int]) -> None:
        """Return reserved blocks to the free queue. Raises ``ValueError`` for one that is not
        reserved; then nothing changes."""
        if not set(block_ids) <= self.reserved:
            raise ValueError(f"blocks {sorted(set(block_ids) - self.reserved)} are not reserved")
        for b in block_ids:
            self.reserved.discard(b)
            self._free[b] = None

    # --- the prefix cache -----------------------------------------------------------------
    def cache_block(self, b: int, block_hash: int, parent_hash: int) -> bool:
        """Tag held block ``b`` as holding the full block whose chained hash is ``block_hash``
        (``hash_block(parent_hash, its tokens)``). Returns False, tagging nothing, when another
        block already caches that hash or ``b`` is already tagged."""
        if self.ref_cnt[b] < 1:
            raise ValueError(f"block {b} is free: only a written, held block can be cached")
        if self.block_hash[b] or block_hash in self.cached_block:
            return False
        self.block_hash[b] = block_hash
        self.block_parent[b] = parent_hash
        self.cached_block[block_hash] = b
        return True

    # --- checks ---------------------------------------------------------------------------
    def check_invariants(self, held: Mapping[str, Iterable[int]],
                         tokens_of_block: Callable[[int], tuple[int, ...]] | None = None) -> None:
        """Assert G1 (conservation: free + cached-evictable + distinct held == total), G2
        (reference counts: each block's count is the number of tables ``held`` naming it, never
        negative, 0 exactly on the free queue) and the hash map (each ``hash -> block`` entry
        names a block tagged with that hash; with ``tokens_of_block(b)``, the tokens the block
        really holds -- a test runner's paged cache -- must hash to it after its parent) against
        the block tables ``held``. Raises ``AssertionError`` naming the broken invariant."""
        holders = [0] * self.num_blocks
        for rid, blocks in held.items():
            blocks = list(blocks)
            assert len(set(blocks)) == len(blocks), f"G2: {rid} holds a block twice"
            for b in blocks:
                assert 0 <= b < self.num_blocks, f"G2: {rid} holds unknown block {b}"
                holders[b] += 1
        num_held = sum(1 for n in holders if n)
        cached_free = self.num_cached_free_blocks
        reserved = len(self.reserved)
        assert (len(self._free) - cached_free) + cached_free + num_held + reserved == self.num_blocks, (
            f"G1: free {len(self._free) - cached_free} + cached-evictable {cached_free} + "
            f"held {num_held} + out of use {reserved} != total {self.num_blocks}")
        for b, c in enumerate(self.ref_cnt):
            assert c >= 0, f"G2: block {b} has negative count {c}"
            assert (c == 0) == (b in self._free or b in self.reserved), (
                f"G2: block {b} count {c} vs free queue")
            assert not (b in self._free and b in self.reserved), f"G1: block {b} free and out of use"
            assert c == holders[b], f"G2: block {b} count {c} but held by {holders[b]} tables"
        for h, b in self.cached_block.items():
            assert self.block_hash[b] == h, f"hash map: {h} -> block {b} tagged {self.block_hash[b]}"
            if tokens_of_block is not None:
                assert hash_block(self.block_parent[b], tuple(tokens_of_block(b))) == h, (
                    f"hash map: block {b}'s tokens do not hash to {h}")
        tagged = sum(1 for h in self.block_hash if h)
        assert tagged == len(self.cached_block), (
            f"hash map: {tagged} tagged blocks, {len(self.cached_block)} map entries")
