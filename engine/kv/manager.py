"""Paged KV-cache bookkeeping: per-request block tables over the block pool, and automatic prefix
caching. Pure Python (no torch): the tensors live in the model runner.

Follows vLLM's PagedAttention design (Kwon et al., SOSP 2023) and the v1 ``BlockPool`` /
``KVCacheManager`` split (vllm/v1/core/kv_cache_manager.py): the pool
(:mod:`engine.kv.block_pool`) hands out physical block ids; the manager maps each request to the
ordered list of blocks that hold its tokens (its block table). With prefix caching on, the
scheduler asks :meth:`KVCacheManager.get_computed_blocks` for the longest cached prefix of a
request it admits, passes it to :meth:`KVCacheManager.allocate_slots`, and after each completed
step calls :meth:`KVCacheManager.cache_full_blocks`: only then do the blocks filled in that step
become hits for others (their KV is written).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from engine.kv.block_pool import BlockPool, NoFreeBlocksError
from engine.outputs import BlockEvent
from engine.kv.prefix_explain import STOP_ALL, STOP_DIFFERS, STOP_EVICTED, STOP_SHORT, PrefixMatch
from engine.kv.prefix_hash import ROOT_HASH, extend_block_hashes, hash_block
from engine.plural import plural
from engine.vocab import BlockEventKind

EVICTION_LOG_SIZE = 1 << 16   # evicted prefix hashes remembered for the explainer

__all__ = ["BlockPool", "ComputedBlocks", "KVCacheManager", "NO_HIT", "NoFreeBlocksError"]


class ComputedBlocks(NamedTuple):
    """A request's longest cached prefix (:meth:`KVCacheManager.get_computed_blocks`):
    ``block_ids`` in table order, ``num_computed_tokens`` = ``len(block_ids) * block_size``
    tokens whose KV they hold, ``num_query_tokens`` = the request's tokens at the lookup (what
    ``prefix_cache_queries`` counts when it is admitted)."""

    block_ids: tuple[int, ...]
    num_computed_tokens: int
    num_query_tokens: int


NO_HIT = ComputedBlocks((), 0, 0)   # prefix caching off: nothing cached, nothing queried


class KVCacheManager:
    """Block tables of live requests over one :class:`BlockPool`.

    ``block_size`` tokens per block; a request whose KV covers ``T`` tokens holds
    ``ceil(T / block_size)`` blocks (no reserved null block). Every change of a block table or of
    a block's cache tag is logged in ``events`` (:class:`BlockEvent`, in order) until
    :meth:`take_events`. ``enable_caching`` turns on automatic prefix caching;
    ``prefix_cache_queries`` / ``prefix_cache_hits`` count, in tokens, the admitted requests'
    tokens looked up and found cached (vLLM's counters; reset by :meth:`take_prefix_cache_stats`).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.block_tables: dict[str, list[int]] = {}
        self.events: list[BlockEvent] = []
        self._frozen: dict[str, tuple[int, ...]] = {}    # block_table() copies, until a table changes
        # per request: num_computed_tokens at which its next block to offer to the cache is full
        # (the scheduler compares against it after each step, so a step costs O(1) per request)
        self.cache_at: dict[str, int] = {}
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        # For the explainer: the step each recently evicted prefix hash left the cache (bounded).
        self.step = -1
        self.evicted_at: OrderedDict[int, int] = OrderedDict()

    def take_events(self) -> list[BlockEvent]:
        """The block events since the last call, in order."""
        ev, self.events = self.events, []
        return ev

    def take_prefix_cache_stats(self) -> tuple[int, int]:
        """(queries, hits) in tokens since the last call."""
        out = (self.prefix_cache_queries, self.prefix_cache_hits)
        self.prefix_cache_queries = self.prefix_cache_hits = 0
        return out

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out: free and cached-free (evictable) ones."""
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests, in [0, 1] (cached-free blocks count as free)."""
        return 1.0 - self.pool.num_free_blocks / self.pool.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens of KV."""
        return -(-num_tokens // self.block_size)

    def block_ids(self, request_id: str) -> list[int]:
        return self.block_tables.get(request_id, [])

    def block_table(self, request_id: str) -> tuple[int, ...]:
        """An immutable copy of ``request_id``'s block table, made once per change of the table
        (a decoding request's table changes every ``block_size`` steps; the scheduler hands it
        to the runner every step)."""
        t = self._frozen.get(request_id)
        if t is None:
            table = self.block_tables.get(request_id)
            if table is None:
                return ()           # holds no blocks: nothing cached (memory follows live tables)
            t = self._frozen[request_id] = tuple(table)
        return t

    # --- prefix caching -------------------------------------------------------------------
    def get_computed_blocks(self, request) -> ComputedBlocks:
        """The longest prefix of ``request``'s tokens (prompt + output so far; a
        :class:`engine.request.Request` holding no blocks) whose KV is cached, in whole blocks,
        leaving at least its last token to compute: at most ``(num_tokens - 1) // block_size``
        blocks (vLLM's rule: the step that samples needs a token to run). :data:`NO_HIT` when
        caching is off. Changes no count (computes and keeps ``request.block_hashes``)."""
        if not self.enable_caching:
            return NO_HIT
        bs, num_tokens = self.block_size, request.num_tokens
        hashes = extend_block_hashes(request.block_hashes, request.token_ids, num_tokens, bs)
        cached = self.pool.cached_block
        blocks: list[int] = []
        for i in range((num_tokens - 1) // bs):
            b = cached.get(hashes[i])
            if b is None:
                break
            blocks.append(b)
        return ComputedBlocks(tuple(blocks), len(blocks) * bs, num_tokens)

    def _note_evictions(self) -> None:
        log = self.evicted_at
        for h in self.pool.evicted_hashes:
            log[h] = self.step
            log.move_to_end(h)
        self.pool.evicted_hashes.clear()
        while len(log) > EVICTION_LOG_SIZE:
            log.popitem(last=False)

    def explain(self, request, computed: ComputedBlocks) -> PrefixMatch:
        """Why the lookup ``computed`` (:meth:`get_computed_blocks` of ``request``) stopped
        where it did (see :mod:`engine.kv.prefix_explain`). O(1)."""
        bs = self.block_size
        lookup = (request.num_tokens - 1) // bs
        k = len(computed.block_ids)
        if lookup == 0:
            return PrefixMatch(0, 0, 0, STOP_SHORT)
        if k >= lookup:
            return PrefixMatch(k, lookup, k * bs, STOP_ALL)
        step = self.evicted_at.get(request.block_hashes[k], -1)
        return PrefixMatch(k, lookup, k * bs, STOP_EVICTED if step >= 0 else STOP_DIFFERS, k * bs, step)

    def num_blocks_to_admit(self, num_tokens: int, computed: ComputedBlocks = NO_HIT) -> int:
        """Free-queue blocks a request holding nothing takes to hold ``num_tokens`` tokens when
        it starts with the cached blocks ``computed``: the new ones, plus the cached-free ones
        among ``computed`` (they leave the free queue)."""
        return (max(0, self.blocks_for(num_tokens) - len(computed.block_ids))
                + self._num_evictable(computed.block_ids))

    @property
    def num_usable_blocks(self) -> int:
        """Blocks in use or usable: all of them unless the user shrank the pool."""
        return self.pool.num_blocks - len(self.pool.reserved)

    def blocks_held_outside(self, num_usable: int) -> set[str]:
        """Requests holding a block with id >= ``num_usable`` (what shrinking the pool to its
        first ``num_usable`` blocks must preempt first)."""
        return {rid for rid, t in self.block_tables.items() if t and max(t) >= num_usable}

    def set_usable_blocks(self, num_usable: int) -> None:
        """Use blocks ``[0, num_usable)`` only: blocks above are taken out of use (``reserved``
        event; they must be free or cached-free, cached ones lose their prefix) or given back
        (``unreserved``). Raises ``ValueError`` outside ``[1, num_blocks]`` or when a block to
        take out is held."""
        if not 1 <= num_usable <= self.pool.num_blocks:
            raise ValueError(f"num_usable_blocks must be in [1, {self.pool.num_blocks}] "
                             f"(the KV cache has {plural(self.pool.num_blocks, 'block')}), got {num_usable}")
        pool = self.pool
        out = [b for b in range(num_usable, pool.num_blocks) if b not in pool.reserved]
        back = sorted(b for b in pool.reserved if b < num_usable)
        if out:
            pool.reserve(out)
            self.events.append(BlockEvent(BlockEventKind.RESERVED, "", tuple(out)))
            self._note_evictions()
        if back:
            pool.unreserve(back)
            self.events.append(BlockEvent(BlockEventKind.UNRESERVED, "", tuple(back)))

    def num_blocks_freed_by(self, request_id: str) -> int:
        """Blocks that would return to the free queue if ``request_id`` released its table now
        (those it alone holds; shared ones only lose a reference)."""
        ref = self.pool.ref_cnt
        return sum(1 for b in self.block_tables.get(request_id, ()) if ref[b] == 1)

    def _num_evictable(self, block_ids) -> int:
        ref = self.pool.ref_cnt
        return sum(1 for b in block_ids if ref[b] == 0)

    def cache_full_blocks(self, request) -> None:
        """Offer the blocks of ``request`` filled since the last call (whole blocks within its
        ``num_computed_tokens``: KV written by a completed step) to the prefix cache, tagging
        each with its chained hash (``cached`` event); a block whose hash another block already
        caches stays untagged. Call after each step for every request that computed tokens
        with ``num_computed_tokens >= cache_at[request_id]`` (else it has nothing to offer)."""
        rid, bs = request.request_id, self.block_size
        if not self.enable_caching:
            return
        done = self.cache_at.get(rid, bs) // bs - 1        # blocks already offered
        num_full = request.num_computed_tokens // bs
        if num_full <= done:
            return
        table, pool, tokens_of = self.block_tables[rid], self.pool, request.token_ids
        hashes = request.block_hashes              # hashes[:done] are known (len >= done)
        parent = hashes[done - 1] if done else ROOT_HASH
        tagged: list[int] = []
        tags: list[int] = []
        for i in range(done, num_full):
            if i < len(hashes):                    # a prompt block: hashed at admission
                h = hashes[i]
            else:
                h = hash_block(parent, tuple(tokens_of(i * bs, (i + 1) * bs)))
                hashes.append(h)
            if pool.cache_block(table[i], h, parent):
                tagged.append(table[i])
                tags.append(h)
            parent = h
        self.cache_at[rid] = (num_full + 1) * bs
        if tagged:
            self.events.append(BlockEvent(BlockEventKind.CACHED, rid, tuple(tagged), tuple(tags)))

    # --- block tables ---------------------------------------------------------------------
    def allocate_slots(self, request_id: str, num_total_tokens: int,
                       new_computed_blocks: ComputedBlocks = NO_HIT) -> list[int] | None:
        """Grow ``request_id``'s block table to hold ``num_total_tokens`` tokens.

        ``new_computed_blocks`` (from :meth:`get_computed_blocks`, for a request holding no
        blocks) are shared into the table first (``hit`` event; reference counts + 1) and the
        lookup is counted in ``prefix_cache_queries`` / ``prefix_cache_hits``. Returns the block
        ids new to the table (shared ones first; possibly empty), or ``None`` -- changing
        nothing -- when the pool has too few free blocks. Raises ``ValueError`` when cached
        blocks are offered to a request that already holds blocks.
        """
        if new_computed_blocks is not NO_HIT:
            return self._admit(request_id, num_total_tokens, new_computed_blocks)
        table = self.block_tables.get(request_id)
        if table is None:
            table = self.block_tables[request_id] = []
        need = -(-num_total_tokens // self.block_size) - len(table)
        if need <= 0:
            return []
        if need > self.pool.num_free_blocks:
            if not table:
                del self.block_tables[request_id]
            return None
        new = self._take(request_id, need)
        table.extend(new)
        self._frozen.pop(request_id, None)
        return new

    def _take(self, request_id: str, n: int) -> list[int]:
        """``n`` blocks off the free queue for ``request_id`` (``evicted`` then ``allocated``)."""
        evicted: list[int] = []
        new = self.pool.allocate(n, evicted)
        if evicted:
            self.events.append(BlockEvent(BlockEventKind.EVICTED, request_id, tuple(evicted)))
            self._note_evictions()
        self.events.append(BlockEvent(BlockEventKind.ALLOCATED, request_id, tuple(new)))
        return new

    def _admit(self, request_id: str, num_total_tokens: int, computed: ComputedBlocks) -> list[int] | None:
        """:meth:`allocate_slots` for a request starting with the cached blocks ``computed``."""
        if self.block_tables.get(request_id):
            raise ValueError(f"{request_id} holds blocks: cached blocks only start a table")
        hit = computed.block_ids
        need = max(0, self.blocks_for(num_total_tokens) - len(hit))
        if need + self._num_evictable(hit) > self.pool.num_free_blocks:
            return None
        self.prefix_cache_queries += computed.num_query_tokens
        self.prefix_cache_hits += computed.num_computed_tokens
        table = self.block_tables[request_id] = list(hit)
        self.cache_at[request_id] = (len(hit) + 1) * self.block_size
        if hit:
            self.pool.touch(hit)
            self.events.append(BlockEvent(BlockEventKind.HIT, request_id, hit))
        if need:
            table.extend(self._take(request_id, need))
        self._frozen.pop(request_id, None)
        return list(table)

    def fork(self, parent_id: str, child, num_blocks: int) -> tuple[int, ...]:
        """Start the empty table of ``child`` (a :class:`engine.request.Request`, a sequence of
        ``parent_id``'s parallel-sampling group) with the first ``num_blocks`` blocks of
        ``parent_id``'s table, shared (reference counts + 1, a ``forked`` event): the full
        blocks of their common prompt. With prefix caching the child's block hashes are
        extended over those blocks and the cache is offered its blocks from there on.
        Returns the shared ids. Raises ``ValueError`` when the child already holds blocks or
        the parent holds fewer than ``num_blocks``."""
        cid = child.request_id
        if self.block_tables.get(cid):
            raise ValueError(f"{cid} holds blocks: a fork only starts a table")
        shared = tuple(self.block_tables.get(parent_id, ())[:num_blocks])
        if len(shared) != num_blocks:
            raise ValueError(f"{parent_id} holds {len(shared)} blocks, {num_blocks} to share asked")
        self.pool.share(shared)
        self.block_tables[cid] = list(shared)
        self._frozen.pop(cid, None)
        if self.enable_caching:
            extend_block_hashes(child.block_hashes, child.token_ids, num_blocks * self.block_size,
                                self.block_size)
            self.cache_at[cid] = (num_blocks + 1) * self.block_size
        if shared:
            self.events.append(BlockEvent(BlockEventKind.FORKED, cid, shared))
        return shared

    def free(self, request_id: str) -> list[int]:
        """Release every block of ``request_id``; returns its table (empty if it held none).
        Shared blocks only lose a reference; cached blocks reaching 0 stay cached (evictable)."""
        table = self.block_tables.pop(request_id, [])
        self._frozen.pop(request_id, None)
        self.cache_at.pop(request_id, None)
        # Free in reverse so the request's tail blocks are reused first (vLLM does the same):
        # a prefix's head blocks, the likeliest to be hit again, are evicted last.
        self.pool.free(list(reversed(table)))
        if table:
            self.events.append(BlockEvent(BlockEventKind.FREED, request_id, tuple(table)))
        return table

    def check_invariants(self, tokens_of_block=None) -> None:
        """G1, G2 and the hash map over every block table (raises ``AssertionError``; see
        :meth:`BlockPool.check_invariants` for ``tokens_of_block``), and the copies handed out
        by :meth:`block_table` are the tables."""
        self.pool.check_invariants(self.block_tables, tokens_of_block)
        for rid, t in self._frozen.items():
            assert list(t) == self.block_tables.get(rid, []), f"stale block table copy of {rid}"
        for rid, at in self.cache_at.items():
            n = at // self.block_size - 1
            assert n <= len(self.block_tables.get(rid, [])), f"{rid}: {n} blocks offered, table shorter"
