"""Paged KV-cache bookkeeping: a block pool with reference counts and an LRU free queue, and the
per-request block tables built on it. Pure Python (no torch): the tensors live in the model runner.

Follows vLLM's PagedAttention design (Kwon et al., SOSP 2023) and the v1 ``BlockPool`` /
``KVCacheManager`` split: the pool hands out physical block ids; the manager maps each request to
the ordered list of blocks that hold its tokens (its block table).
"""
from __future__ import annotations

from collections import OrderedDict

from engine.outputs import BLOCKS_ALLOCATED, BLOCKS_FREED, BlockEvent


class NoFreeBlocksError(RuntimeError):
    """The pool has fewer free blocks than asked for."""


class BlockPool:
    """``num_blocks`` physical blocks with reference counts.

    Free blocks sit in an LRU queue: ``allocate`` takes from the least recently freed end and
    ``free`` appends to the most recently freed end, so a freed block is reused as late as possible
    (the property prefix caching will rely on). Raises ``ValueError`` on misuse (double free,
    freeing a block twice in one call, unknown ids) rather than corrupting counts.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def free_block_ids(self) -> list[int]:
        """Free block ids, least recently freed first."""
        return list(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks (ref count becomes 1). Raises :class:`NoFreeBlocksError`."""
        if n > len(self._free):
            raise NoFreeBlocksError(f"asked for {n} blocks, {len(self._free)} free of {self.num_blocks}")
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference to each block; blocks reaching 0 go to the free queue's tail.

        Raises ``ValueError`` if the list names a block twice, names an unknown block or a block
        that is already free; in that case no count is changed.
        """
        if len(set(block_ids)) != len(block_ids):
            raise ValueError(f"block list names a block twice: {block_ids}")
        for b in block_ids:
            if not 0 <= b < self.num_blocks:
                raise ValueError(f"unknown block id {b} (pool has {self.num_blocks})")
            if self.ref_cnt[b] <= 0:
                raise ValueError(f"block {b} is already free")
        for b in block_ids:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._free[b] = None

    def check_invariants(self, held: dict[str, list[int]]) -> None:
        """Assert G1 (conservation) and G2 (reference counts) against the block tables ``held``.

        Raises ``AssertionError`` naming the broken invariant.
        """
        in_use = {b for blocks in held.values() for b in blocks}
        assert len(self._free) + len(in_use) == self.num_blocks, (
            f"G1: free {len(self._free)} + held {len(in_use)} != total {self.num_blocks}")
        for b, c in enumerate(self.ref_cnt):
            assert c >= 0, f"G2: block {b} has negative count {c}"
            assert (c == 0) == (b in self._free), f"G2: block {b} count {c} vs free queue"
        for rid, blocks in held.items():
            assert len(set(blocks)) == len(blocks), f"G2: {rid} holds a block twice"
            for b in blocks:
                assert self.ref_cnt[b] >= 1 and b not in self._free, f"G2: {rid} holds free block {b}"


class KVCacheManager:
    """Block tables of live requests over one :class:`BlockPool`.

    ``block_size`` tokens per block; a request whose KV covers ``T`` tokens holds
    ``ceil(T / block_size)`` blocks (no reserved null block). Every change of a block table is
    logged in ``events`` (:class:`BlockEvent`, in order) until :meth:`take_events`.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.block_tables: dict[str, list[int]] = {}
        self.events: list[BlockEvent] = []
        self._frozen: dict[str, tuple[int, ...]] = {}    # block_table() copies, until a table changes

    def take_events(self) -> list[BlockEvent]:
        """The block events since the last call, in order."""
        ev, self.events = self.events, []
        return ev

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, in [0, 1]."""
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

    def allocate_slots(self, request_id: str, num_total_tokens: int) -> list[int] | None:
        """Grow ``request_id``'s block table to hold ``num_total_tokens`` tokens.

        Returns the newly allocated block ids (possibly empty), or ``None`` — changing nothing —
        when the pool has too few free blocks.
        """
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
        new = self.pool.allocate(need)
        table.extend(new)
        self._frozen.pop(request_id, None)
        self.events.append(BlockEvent(BLOCKS_ALLOCATED, request_id, tuple(new)))
        return new

    def free(self, request_id: str) -> list[int]:
        """Release every block of ``request_id``; returns the ids freed (empty if it held none)."""
        table = self.block_tables.pop(request_id, [])
        self._frozen.pop(request_id, None)
        # Free in reverse so the request's tail blocks are reused first (vLLM does the same).
        self.pool.free(list(reversed(table)))
        if table:
            self.events.append(BlockEvent(BLOCKS_FREED, request_id, tuple(table)))
        return table

    def check_invariants(self) -> None:
        """G1 and G2 over every block table (raises ``AssertionError``), and the copies handed
        out by :meth:`block_table` are the tables."""
        self.pool.check_invariants(self.block_tables)
        for rid, t in self._frozen.items():
            assert list(t) == self.block_tables.get(rid, []), f"stale block table copy of {rid}"
