"""Batch slots and preemption, a mixin of :class:`engine.sched.scheduler.Scheduler`: who takes a slot
(``_start_running`` / ``_leave_running``), who loses its KV (``_pick_victim``, priority
preemption, evicting paused requests' KV) and how (``_preempt``: swap to the CPU pool or
recompute, vLLM v0's two preemption modes), and swapped-out requests coming back
(``_resume_swapped``). Kept apart so the scheduling step reads on its own."""
from __future__ import annotations

import bisect
import heapq

from engine.outputs import RequestEvent, ScheduledRequest
from engine.sched.preemption import (FOR_PRIORITY, MODE_RECOMPUTE, MODE_SWAP, MODE_SWAP_FALLBACK, PAUSED_KV,
                               PreemptionInfo)
from engine.request import Request, RequestStatus
from engine.sched.queue import priority_key


class SchedulerPreemption:
    """Slots, preemption and swap-in of :class:`engine.sched.scheduler.Scheduler` (it uses the
    scheduler's queues, KV manager, swap space and parallel-sampling groups)."""

    def _resume_swapped(self, budget: int, scheduled: list[ScheduledRequest]) -> int:
        """Swap requests back in, oldest swap-out first, while a slot, budget and the GPU blocks
        for their KV plus this step's chunk are free; each is scheduled in this step. Returns
        the budget left."""
        kv, swap, c = self.kv, self.swap, self.config
        while self.swapped and len(self.running) < c.max_num_seqs and budget > 0:
            req = self.swapped[0]
            if req.group is not None:   # parallel sampling: the group's sequences come back together
                left = self.groups.resume_swapped(req, budget, scheduled)
                if left is None:
                    break
                budget = left
                continue
            computed = req.num_computed_tokens
            n = self._chunk(req, budget, computed)
            if not c.enable_chunked_prefill and computed + n < req.num_tokens:
                break
            held = swap.num_gpu_blocks_to_swap_in(req.request_id)
            if max(held, kv.blocks_for(computed + n)) > kv.num_free_blocks:
                break
            self.swapped.popleft()
            self._swap_in += swap.swap_in(req.request_id)
            grown = kv.allocate_slots(req.request_id, computed + n)
            assert grown is not None          # counted above
            self._start_running(req)
            table = kv.block_table(req.request_id)
            scheduled.append(ScheduledRequest(req.request_id, req.slot, n, computed, req.is_prefill, table))
            budget -= n
        return budget

    def _preempt_for_priority(self, head: Request, scheduled: list[ScheduledRequest],
                              budget: int) -> list[str]:
        """Policy priority: preempt running requests of strictly lower priority than ``head``
        (the first waiting request), worst first, when that lets ``head`` start now (a free slot,
        the blocks of its whole prefill and token budget, ``budget`` being what is left);
        nobody is preempted when it would not, or when ``head`` can start anyway. A victim
        already scheduled in this step is taken out of ``scheduled`` (its blocks, this step's
        included, are freed). A victim's parallel-sampling group goes with it, and a group
        ``head`` needs what its whole group needs (``engine.sched.groups``; a victim group's
        shared blocks are not counted as freed, so it may decline where it would help).
        Returns the victims' ids."""
        kv = self.kv
        width, extra_blocks, min_tokens = self.groups.admission_needs(head)
        need = kv.blocks_for(head.num_tokens) + extra_blocks
        need_budget = max(1 if self.config.enable_chunked_prefill else head.num_tokens, min_tokens)
        slots = self.config.max_num_seqs - len(self.running) - width + 1
        free = kv.num_free_blocks
        tokens = {x.request_id: x.num_tokens for x in scheduled}
        victims = []
        for r in reversed(self.running):
            if slots >= 1 and free >= need and budget >= need_budget:
                break
            if r.priority <= head.priority:
                break                                  # equal priority never preempts
            victims.append(r)
            slots += 1
            free += kv.num_blocks_freed_by(r.request_id)
            budget += tokens.get(r.request_id, 0)
        if not victims or slots < 1 or free < need or budget < need_budget:
            return []
        ids = [rid for v in victims for rid in self._preempt(v, FOR_PRIORITY, head.request_id)]
        gone = set(ids)
        scheduled[:] = [x for x in scheduled if x.request_id not in gone]
        return ids

    def _pick_victim(self, req: Request) -> Request | None:
        """Who loses its KV so that ``req`` can grow: the newest (lowest-priority) other running
        request (not of ``req``'s parallel-sampling group), else the most recently paused
        request holding KV, else ``req`` itself (with its group)."""
        last = self.running[-1] if self.running else req
        if last is not req and (last.group is None or last.group is not req.group):
            return last
        for p in reversed(self.paused):
            if self.kv.block_ids(p.request_id):
                return p
        return req if req in self.running else None

    def _evict_paused(self, num_free_needed: int, for_request: str) -> list[str]:
        """Drop the KV of paused requests, most recently paused first, until ``num_free_needed``
        blocks are free (or none is left to drop). Returns their ids."""
        out = []
        for p in reversed(list(self.paused)):
            if self.kv.num_free_blocks >= num_free_needed:
                break
            if self.kv.block_ids(p.request_id):
                out += self._preempt(p, PAUSED_KV, for_request)
        return out

    def _start_running(self, req: Request) -> None:
        req.status = RequestStatus.RUNNING
        req.slot = heapq.heappop(self._free_slots)
        if self.policy == "priority":       # running in (priority, arrival) order: victims last
            bisect.insort(self.running, req, key=priority_key)
        else:
            self.running.append(req)
        self.events.append(RequestEvent(req.request_id, "scheduled"))

    def _leave_running(self, req: Request) -> None:
        self.runner_sync.drop(req.request_id)       # the runner drops its state of req
        if req in self.running:
            self.running.remove(req)
        if req.slot is not None:
            heapq.heappush(self._free_slots, req.slot)
            req.slot = None

    def _preempt(self, req: Request, reason: str, for_request: str = "", mode: str | None = None,
                 num_shared: int = 0) -> list[str]:
        """Preempt ``req``. Swap mode (a running request, room in the CPU pool): its KV is copied
        to the CPU and it waits in ``swapped`` with its progress kept. Otherwise recompute: drop
        the KV, go back to the waiting queue (its front under FCFS); in swap mode that is the
        fallback, recorded as such. The event's detail is the :class:`PreemptionInfo`. The
        sequences of a parallel-sampling group are preempted together
        (``engine.sched.groups`` decides their ``mode`` and the ``num_shared`` blocks its
        head swaps out for each). Returns the ids preempted."""
        if req.group is not None and mode is None:
            return self.groups.preempt(req, reason, for_request)
        was_paused = req.status is RequestStatus.PAUSED
        tokens = req.num_computed_tokens
        self._leave_running(req)
        req.num_preemptions += 1
        num_blocks = self.kv.blocks_for(tokens)
        if mode is None:
            mode = MODE_RECOMPUTE                   # (also when no KV was computed: nothing to keep)
            if self.swap is not None and not was_paused and num_blocks:
                mode = MODE_SWAP if self.swap.can_swap_out(num_blocks) else MODE_SWAP_FALLBACK
        if mode == MODE_SWAP:
            self._swap_out += self.swap.swap_out(req.request_id, num_blocks, num_shared)
            req.status = RequestStatus.SWAPPED
            self.swapped.append(req)
        else:
            self.kv.free(req.request_id)
            req.num_computed_tokens = 0
        info = PreemptionInfo(mode, reason, for_request, tokens, req.num_preemptions)
        self.events.append(RequestEvent(req.request_id, "preempted", info.to_detail()))
        if mode != MODE_SWAP and not was_paused:
            req.status = RequestStatus.PREEMPTED
            self.waiting.prepend(req)
        return [req.request_id]
