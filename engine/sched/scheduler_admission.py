"""Admission, a mixin of :class:`engine.sched.scheduler.Scheduler`: which waiting requests start in a
step (FCFS / priority / static policies, prefix-cache hits, the free-block rule), and why the
others do not (``not_admitted``, ``waiting_reason``). The rules are documented in
``engine.sched.scheduler``'s module docstring; the scheduler provides ``waiting``, ``running``,
``kv``, ``config``, ``policy``, ``groups``, ``static_batch``, ``events`` and the helpers called
here."""
from __future__ import annotations

import itertools

from engine.kv.manager import NO_HIT
from engine.outputs import (NOT_ADMITTED_BEHIND, NOT_ADMITTED_LOWER_PRIORITY,
                            NOT_ADMITTED_NO_FREE_BLOCKS, NOT_ADMITTED_SEQ_CAP,
                            NOT_ADMITTED_STATIC_BATCH, NOT_ADMITTED_SWAPPED_FIRST,
                            NOT_ADMITTED_TOKEN_BUDGET, RequestEvent,
                            ScheduledRequest)
from engine.kv.prefix_explain import EVENT_KIND as PREFIX_EVENT


class SchedulerAdmission:
    """Admission of waiting requests into the running batch (see the module docstring)."""

    def _admission(self, step: int, budget: int, scheduled: list, preempted: list,
                   not_admitted: list, memory_preempted: bool, outranked: bool = False) -> str:
        """The admission phase of a step (no swapped request waits, or, with ``outranked``, the
        first waiting request has strictly higher priority than every swapped-out one): admit
        by the policy, or, after a preemption for memory, nobody. Fills ``not_admitted``;
        returns the step's ``waiting_reason``."""
        waiting_reason = NOT_ADMITTED_BEHIND
        static = self.policy == "static"
        if static and self.waiting:
            waiting_reason = self._static_admission_open()
        if memory_preempted:
            # After a preemption for memory nobody is admitted: the cache is what ran out.
            if self.waiting:
                head = self.waiting.peek().request_id
                not_admitted.append((head, NOT_ADMITTED_STATIC_BATCH
                                     if static and head not in self.static_batch
                                     else NOT_ADMITTED_NO_FREE_BLOCKS))
        elif waiting_reason == NOT_ADMITTED_BEHIND:
            self._admit(step, budget, scheduled, preempted, not_admitted, outranked)
            if self.waiting and not not_admitted:     # static: the rest waits for the next batch
                not_admitted.append((self.waiting.peek().request_id, NOT_ADMITTED_STATIC_BATCH))
        if static and self.static_batch and self.waiting:
            # waiting members of the batch (at most max_num_seqs) are behind the blocked one;
            # everyone else waits for the batch to finish
            listed = {rid for rid, _ in not_admitted}
            not_admitted += [(r.request_id, NOT_ADMITTED_BEHIND)
                             for r in itertools.islice(self.waiting, self.config.max_num_seqs)
                             if r.request_id in self.static_batch and r.request_id not in listed]
            waiting_reason = NOT_ADMITTED_STATIC_BATCH
        return waiting_reason

    def _admit(self, step: int, budget: int, scheduled: list, preempted: list,
               not_admitted: list, outranked: bool = False) -> int:
        """Admit waiting requests in queue order while slots, budget and blocks allow; the first
        that cannot start is listed in ``not_admitted`` with its reason. With ``outranked``
        (policy priority, swapped-out requests wait) only requests of strictly higher priority
        than every swapped-out one start. Returns the budget left."""
        kv, c = self.kv, self.config
        static = self.policy == "static"
        while self.waiting:
            req = self.waiting.peek()
            if static and req.request_id not in self.static_batch:
                break                              # the rest waits for the next static batch
            if outranked and req.priority >= self._best_swapped_priority():
                not_admitted.append((req.request_id, NOT_ADMITTED_SWAPPED_FIRST))
                break                              # the swapped-out requests come back first
            # parallel sampling: a group's waiting sequences start together (engine.sched.groups)
            width, extra_blocks, min_tokens = self.groups.admission_needs(req)
            reason = None
            if req.request_id in preempted:
                # displaced this step by a higher-priority request: not back before the next step
                reason = NOT_ADMITTED_LOWER_PRIORITY
            elif len(self.running) + width > c.max_num_seqs:
                reason = NOT_ADMITTED_SEQ_CAP
            elif budget <= 0:
                reason = NOT_ADMITTED_TOKEN_BUDGET
            # Prefix caching: start from the longest cached prefix (NO_HIT when it is off).
            hit = kv.get_computed_blocks(req) if reason is None else NO_HIT
            num_cached = hit.num_computed_tokens
            n = self._chunk(req, budget, num_cached) if reason is None else 0
            if reason is None and ((not c.enable_chunked_prefill and n < req.num_tokens - num_cached)
                                   or num_cached + n < min_tokens):
                reason = NOT_ADMITTED_TOKEN_BUDGET
            new_blocks = None
            if reason in (None, NOT_ADMITTED_SEQ_CAP, NOT_ADMITTED_TOKEN_BUDGET) and self.policy == "priority":
                freed = self._preempt_for_priority(req, scheduled, budget)
                if freed:                               # made room for req: look at it again
                    preempted += freed
                    budget = c.max_num_batched_tokens - sum(x.num_tokens for x in scheduled)
                    continue
            if reason is None and kv.num_blocks_to_admit(req.num_tokens, hit) + extra_blocks > kv.num_free_blocks:
                # Its whole prefill must fit the free blocks, not only this chunk: a prefill
                # started without room would be preempted before it ends, over and over.
                reason = NOT_ADMITTED_NO_FREE_BLOCKS
                if not self.running:
                    # Only parked KV stands in the way: take it (liveness) and look at req again
                    # in this step (its blocks are free now: no step idles with free blocks).
                    evicted = self._evict_paused(kv.blocks_for(req.num_tokens) + extra_blocks,
                                                 req.request_id)
                    if evicted:
                        preempted += evicted
                        continue
            if reason is None:
                new_blocks = kv.allocate_slots(req.request_id, num_cached + n, hit)
                if new_blocks is None:
                    reason = NOT_ADMITTED_NO_FREE_BLOCKS
            if reason is not None:
                not_admitted.append((req.request_id, reason))
                break
            self.waiting.pop()
            req.num_computed_tokens = num_cached
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = num_cached
            if kv.enable_caching:         # how much hit, and why the match stopped there
                self.events.append(RequestEvent(req.request_id, PREFIX_EVENT, kv.explain(req, hit).to_detail()))
            self._start_running(req)
            scheduled.append(ScheduledRequest(req.request_id, req.slot, n, req.num_computed_tokens,
                                              req.is_prefill, tuple(new_blocks)))
            budget -= n
            if req.group is not None:       # parallel sampling: the other sequences fork onto it
                self.groups.fork(req)
        return budget

    def _static_admission_open(self) -> str:
        """Policy static: form a new batch from the first ``max_num_seqs`` waiting requests when
        nothing of the previous one is left. Returns ``behind_older`` when admission is open
        (the head of the queue is a member), else ``static_batch``."""
        if not self.static_batch and not self.running:
            self.static_batch = {r.request_id for r in
                                 itertools.islice(self.waiting, self.config.max_num_seqs)}
            if self.groups:                 # parallel sampling: whole groups only
                self.static_batch = self.groups.whole_groups(self.static_batch)
        if self.waiting.peek().request_id in self.static_batch:
            return NOT_ADMITTED_BEHIND
        return NOT_ADMITTED_STATIC_BATCH
