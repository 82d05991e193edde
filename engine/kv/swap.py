"""The CPU swap space of swap preemption: a second block pool and the swapped requests' tables.

Swap preemption (vLLM v0's ``preemption_mode="swap"``; Kwon et al., SOSP 2023, section 4.5) copies
a victim's KV blocks from the GPU cache into a CPU cache of ``num_cpu_blocks`` blocks and frees its
GPU blocks; resuming copies them back into fresh GPU blocks, so nothing is recomputed. This module
keeps the bookkeeping (pure Python): which CPU blocks hold whose KV, and the (source, destination)
block pairs the model runner must copy before the step's forward pass
(``SchedulerOutput.blocks_to_swap_out`` / ``blocks_to_swap_in``). Every change is a block event
in the GPU manager's event list (GPU side: ``freed`` / ``allocated``; CPU side:
``swapped_out`` / ``swapped_in`` naming the CPU block ids), so the recording rebuilds both pools.
"""
from __future__ import annotations

from engine.kv.block_pool import BlockPool
from engine.kv.manager import KVCacheManager
from engine.outputs import BlockEvent
from engine.vocab import BlockEventKind


class SwapSpace:
    """``num_cpu_blocks`` CPU blocks over a :class:`BlockPool` (no prefix caching on the CPU)
    and the CPU block table of every swapped-out request. ``kv`` is the GPU manager whose events
    list receives this space's events too (one ordered log)."""

    def __init__(self, num_cpu_blocks: int, kv: KVCacheManager) -> None:
        self.pool = BlockPool(num_cpu_blocks)
        self.kv = kv
        self.tables: dict[str, list[int]] = {}

    def can_swap_out(self, num_blocks: int) -> bool:
        """True when the CPU pool has room for ``num_blocks`` blocks."""
        return num_blocks <= self.pool.num_free_blocks

    def swap_out(self, request_id: str, num_blocks: int, num_shared: int = 0) -> list[tuple[int, int]]:
        """Give ``request_id`` a CPU block for each of the first ``num_blocks`` blocks of its GPU
        table (the blocks its computed KV fills; blocks given to it for the current step hold
        nothing yet) but its first ``num_shared`` (a parallel-sampling sequence whose group's
        head copies their shared prompt blocks once, ``engine.sched.groups``), and free its
        whole GPU table. Returns the ``(gpu_block, cpu_block)`` copies the runner makes before
        the next forward pass. Raises ``ValueError`` if its table is shorter, ``num_blocks`` < 1,
        ``num_shared`` is not in ``[0, num_blocks]``, or the CPU pool lacks room."""
        gpu = list(self.kv.block_ids(request_id))[:num_blocks] if num_blocks >= 1 else []
        if len(gpu) != num_blocks or num_blocks < 1 or not 0 <= num_shared <= num_blocks:
            raise ValueError(f"{request_id}: cannot swap out {num_blocks} blocks but its first "
                             f"{num_shared} (it holds {len(self.kv.block_ids(request_id))})")
        if request_id in self.tables:
            raise ValueError(f"{request_id} is already swapped out")
        gpu = gpu[num_shared:]
        if not self.can_swap_out(len(gpu)):
            raise ValueError(f"{request_id} needs {len(gpu)} CPU blocks, "
                             f"{self.pool.num_free_blocks} free of {self.pool.num_blocks}")
        cpu = self.pool.allocate(len(gpu))
        self.tables[request_id] = cpu
        self.kv.free(request_id)
        if cpu:
            self.kv.events.append(BlockEvent(BlockEventKind.SWAPPED_OUT, request_id, tuple(cpu)))
        return list(zip(gpu, cpu))

    def num_gpu_blocks_to_swap_in(self, request_id: str) -> int:
        """GPU blocks a swap-in of ``request_id`` takes (one per CPU block it holds)."""
        return len(self.tables.get(request_id, ()))

    def swap_in(self, request_id: str, num_shared: int = 0) -> list[tuple[int, int]] | None:
        """Copy ``request_id`` back: fresh GPU blocks for its CPU table (table order), appended
        to the ``num_shared`` blocks its GPU table already starts with (0, or the prompt blocks
        a parallel-sampling sequence shares with its group's head, forked just before), CPU
        blocks freed. Returns the ``(cpu_block, gpu_block)`` copies, or None -- changing
        nothing -- when the GPU pool has too few free blocks. Raises ``KeyError`` if it is not
        swapped out, ``ValueError`` if its GPU table does not hold exactly ``num_shared``."""
        cpu = self.tables[request_id]
        if len(self.kv.block_ids(request_id)) != num_shared:
            raise ValueError(f"{request_id} holds {len(self.kv.block_ids(request_id))} GPU blocks, "
                             f"a swap-in appends to exactly {num_shared}")
        gpu = self.kv.allocate_slots(request_id, (num_shared + len(cpu)) * self.kv.block_size)
        if gpu is None:
            return None
        del self.tables[request_id]
        self.pool.free(cpu)
        if cpu:
            self.kv.events.append(BlockEvent(BlockEventKind.SWAPPED_IN, request_id, tuple(cpu)))
        return list(zip(cpu, gpu))

    def hand_over(self, from_id: str, to_id: str, num_blocks: int) -> None:
        """``from_id`` leaves while swapped out (finished or aborted) and held the first
        ``num_blocks`` CPU blocks of KV it shares with ``to_id`` (the prompt blocks of their
        parallel-sampling group): those move to the front of ``to_id``'s CPU table, the rest of
        ``from_id``'s are freed. Events: ``swapped_in`` releasing both old tables, then
        ``swapped_out`` giving ``to_id`` its new one (nothing is copied). Raises ``KeyError``
        if either is not swapped out, ``ValueError`` if ``from_id`` holds fewer blocks."""
        src, dst = self.tables[from_id], self.tables[to_id]
        if len(src) < num_blocks:
            raise ValueError(f"{from_id} holds {len(src)} CPU blocks, {num_blocks} to hand over")
        del self.tables[from_id], self.tables[to_id]
        self.pool.free(src[num_blocks:])
        events = self.kv.events
        for rid, table in ((from_id, src), (to_id, dst)):
            if table:
                events.append(BlockEvent(BlockEventKind.SWAPPED_IN, rid, tuple(table)))
        self.tables[to_id] = src[:num_blocks] + dst
        if self.tables[to_id]:
            events.append(BlockEvent(BlockEventKind.SWAPPED_OUT, to_id, tuple(self.tables[to_id])))

    def drop(self, request_id: str) -> list[int]:
        """Release a swapped-out request's CPU blocks (it finished or was aborted): a
        ``swapped_in`` event with nothing copied. Returns them (empty if it held none)."""
        cpu = self.tables.pop(request_id, [])
        if cpu:
            self.pool.free(cpu)
            self.kv.events.append(BlockEvent(BlockEventKind.SWAPPED_IN, request_id, tuple(cpu)))
        return cpu

    def check_invariants(self) -> None:
        """G1 and G2 on the CPU pool (raises ``AssertionError``)."""
        self.pool.check_invariants(self.tables)
