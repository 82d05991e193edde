"""The continuous-batching scheduler: FCFS, priority and static policies, chunked prefill,
recompute and swap preemption, prefix caching. Pure Python.

Follows vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py) in its essentials: one rule for
prefill and decode (each request's ``num_computed_tokens`` catches up to ``num_tokens`` under a per
step token budget ``max_num_batched_tokens`` and a cap ``max_num_seqs``), running requests are
scheduled before new admissions, and when the KV cache runs out the newest running request is
preempted and later recomputed (Orca, Yu et al., OSDI 2022, for iteration-level scheduling).

Policies (``EngineConfig.policy``):
- ``fcfs``: the waiting queue is served by arrival; a preempted request goes back to its front.
- ``priority``: the waiting queue is served by ``(priority, arrival)``, lower value first. Running
  requests are kept in the same order, so the victim of a preemption is always the lowest-priority
  running request, the latest arrival among equals. When the first waiting request cannot start
  because the batch slots, the token budget or the free blocks ran out, running requests of
  strictly lower priority (higher value) are preempted for it, worst first, but only if that lets
  it start; equal priority never preempts. A nonzero priority under another policy is rejected at admission.
- ``static``: the baseline continuous batching replaced. When nothing of the previous batch is left,
  the first ``max_num_seqs`` waiting requests form a batch; nobody else is admitted until every
  member finished (preempted members stay members; a paused one leaves the batch). The window shows
  the idle slots this costs.

Documented policy choices (see ``../shared/cases/README.md``):
- A request is rejected at admission (FINISHED_ERROR, ``error`` names the limit) when its prompt is
  empty, ``max_tokens`` < 1, ``prompt + max_tokens`` exceeds ``max_model_len``, or its full KV
  (``prompt + max_tokens`` tokens) exceeds the whole cache. So every admitted request fits the cache
  alone, and the oldest running request can always make progress (liveness, G5).
- A waiting (or preempted) request is admitted only when the blocks for its whole remaining prefill
  (prompt + output so far) are free, though it computes at most one chunk per step: a prefill that
  starts without room would be preempted before it ends and readmitted, over and over.
- No new request is admitted in a step that preempted one because the cache ran out (priority
  preemptions are made to admit, and do).
- When a running request needs a block and none is free, the newest (under ``priority``: the
  lowest-priority) other running request is preempted (recompute: its KV is dropped and it goes
  back to the waiting queue). Every preemption is an event with a :class:`PreemptionInfo` (reason,
  for whom, tokens to recompute, how many times so far).
- ``preemption_mode="swap"``: a victim's computed KV blocks are copied into the CPU pool of
  ``num_cpu_blocks`` (``engine.kv.swap``; the runner copies, ``SchedulerOutput.blocks_to_swap_*``)
  and it waits in ``swapped`` with its progress; when the pool lacks room the preemption falls
  back to recompute (``PreemptionInfo.mode == "recompute_fallback"``). Swapped requests resume
  oldest first, before any admission and not in a step that preempted; nobody is admitted in a
  step that began with swapped requests or swapped one out for memory (vLLM v0's rule), so a
  swapped request is never overtaken by a new prefill -- but under ``priority`` by one of strictly
  higher priority than every swapped-out request: such waiting requests are admitted first (as
  they would preempt running ones of lower priority), the swapped-out ones resume after them.
  A paused request's KV is never swapped
  (recompute), nor is a request with no computed KV. A priority preemption may swap its victim
  out and still admit the request it made room for. When nothing runs and the first swapped-out
  request cannot come back, paused requests' KV is taken for it (as for a waiting one) and it
  comes back in that step.
- A user-paused request keeps its KV but no batch slot. Its KV is taken (it recomputes on resume)
  when a running request needs a block and no other running request is left to preempt, or when
  nothing runs and the oldest waiting request cannot fit otherwise; so parked requests never stall
  the engine (G5). In the latter case that request starts in the same step (no step idles with
  requests waiting and free blocks). Such evictions are reported as preemptions of the paused
  request.
- Finished requests leave the scheduler at once (as vLLM's scheduler frees them): it holds live
  requests only, and the engine takes the finished ones with :meth:`Scheduler.take_finished`.
- Prefix caching (``enable_prefix_caching``): a request being admitted starts from the longest
  cached prefix of its tokens (whole blocks, at most ``num_tokens - 1`` tokens, so the step that
  samples computes at least one token) and needs free blocks only for the rest. A block becomes a
  hit only after the step that wrote its KV completed (``update_from_output`` offers it to the
  cache), so of two requests with the same prompt admitted in the same step the second gets 0
  cached tokens (it is not deferred). A request recomputing after preemption hits its own
  blocks unless they were evicted meanwhile.
- ``long_prefill_token_threshold`` caps the prefill chunk of one request per step (only with chunked
  prefill). Without it, one long prompt takes the whole token budget until its prefill is done and
  a short request arriving behind it waits (running requests are scheduled before new admissions).
- Parallel sampling (``SamplingParams.n`` > 1, ``engine.sched.groups``): a group's sequences
  are admitted together (a slot each; the head's whole prompt in the step: prefilled once) and
  fork onto the prompt's blocks (copy-on-write of the partial one); preempted, swapped, paused
  and resumed as a group; each finishes on its own. Without chunked prefill a running request's
  remaining prefill (a forked sequence recomputing its output) waits for a step with the budget
  for all of it rather than being split.
- Why a waiting request is not admitted is given for every waiting request at O(1) cost per step:
  ``SchedulerOutput.not_admitted`` names the reason of the requests the step looked at (the first
  blocked one, and under ``static`` the waiting members of the batch), and ``waiting_reason`` is
  the reason of everyone else (``behind_older``; ``static_batch`` while a static batch runs).
  Under ``priority`` a request behind a blocked one of higher priority is ``lower_priority``
  (:meth:`engine.outputs.StepRecord.not_admitted_reason`).
"""
from __future__ import annotations

import bisect
import heapq
import itertools
from collections import deque
from typing import Callable, Iterable

from engine.config import EngineConfig
from engine.kv.manager import NO_HIT, KVCacheManager
from engine.kv.swap import SwapSpace
from engine.outputs import ModelRunnerOutput, RequestEvent, ScheduledRequest, SchedulerOutput
from engine.request import Request
from engine.vocab import Policy, RequestStatus
from engine.runner.sync import RunnerSync
from engine.sched.groups import GroupScheduling
from engine.sched.invariants import check_scheduler
from engine.sched.preemption import PreemptionInfo
from engine.sched.queue import make_queue, priority_key
from engine.plural import plural
from engine.vocab import EventKind, NotAdmittedReason, PreemptionMode, PreemptionReason


class Scheduler:
    """Decides, step by step, which requests run and how many tokens each computes.

    ``num_gpu_blocks`` is the resolved size of the paged cache. ``requests`` holds the live
    requests only, each in exactly one of ``waiting`` (WAITING/PREEMPTED; a
    :mod:`engine.sched.queue` queue of the policy), ``running`` or ``paused`` (invariant G3); a
    request that finishes leaves them and waits in :meth:`take_finished` for the engine.
    ``num_finished`` counts finished requests. Events of the current step accumulate in
    ``events`` until :meth:`take_events`.
    """

    def __init__(self, config: EngineConfig, num_gpu_blocks: int) -> None:
        self.config = config
        self.policy = config.policy
        self.kv = KVCacheManager(num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.requests: dict[str, Request] = {}
        self.waiting = make_queue(config.policy)
        self.running: list[Request] = []
        self.paused: list[Request] = []
        self.num_finished = 0
        self._finished: list[Request] = []
        self.events: list[RequestEvent] = []
        self._free_slots = list(range(config.max_num_seqs))   # a heap: lowest free slot first
        self._seq = itertools.count()
        self.static_batch: set[str] = set()     # policy static: ids of the current batch
        # preemption_mode swap: the CPU pool and the swapped-out requests, resumed FIFO
        self.swap = SwapSpace(config.num_cpu_blocks, self.kv) if config.preemption_mode == PreemptionMode.SWAP else None
        self.swapped: deque[Request] = deque()
        self._swap_out: list[tuple[int, int]] = []
        self._swap_in: list[tuple[int, int]] = []
        self.groups = GroupScheduling(self)     # parallel sampling (engine.sched.groups)
        self.runner_sync = RunnerSync()         # which requests the runner holds state for
        self._waiting_lookups: dict[str, str] = {}   # waiting id -> its last recorded lookup

    # --- admission ----------------------------------------------------------------------
    def admission_error(self, req: Request) -> str | None:
        """Why ``req`` can never be served, or None. Names the limit that is exceeded."""
        c = self.config
        p, m = req.num_prompt_tokens, req.sampling_params.max_tokens
        if p == 0:
            return "empty prompt: a request needs at least 1 prompt token"
        if m < 1:
            return f"max_tokens must be >= 1, got {m}"
        refused = self.priority_error(req.priority)
        if refused:
            return refused
        if p + m > c.max_model_len:
            return f"prompt ({p}) + max_tokens ({m}) = {p + m} tokens exceeds max_model_len {c.max_model_len}"
        usable = self.kv.num_usable_blocks
        cap = usable * self.kv.block_size
        if p + m > cap:
            return (f"prompt ({p}) + max_tokens ({m}) = {p + m} tokens needs {self.kv.blocks_for(p + m)} "
                    f"KV blocks but the whole cache has {plural(usable, 'block')} ({plural(cap, 'token')})")
        return None if req.group is None else self.groups.admission_error(req)

    def priority_error(self, priority: int) -> str | None:
        """Why a request of ``priority`` cannot be served by this policy, or None: a nonzero
        priority needs ``policy="priority"``."""
        if priority and self.policy != Policy.PRIORITY:
            return (f"priority={priority} needs policy='priority' (this engine runs "
                    f"policy={str(self.policy)!r}, where every request has priority 0)")
        return None

    def add_request(self, req: Request) -> bool:
        """Queue ``req`` (by the policy), or reject it at once. Returns False if rejected.

        Raises ``ValueError`` if the request id is already known.
        """
        if req.request_id in self.requests:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        self.requests[req.request_id] = req
        req.seq = next(self._seq)
        if req.group is not None:
            self.groups.add(req)
        self.events.append(RequestEvent(req.request_id, EventKind.ARRIVED))
        err = self.admission_error(req)
        if err is not None:
            self._finish(req, RequestStatus.FINISHED_ERROR, error=err, kind=EventKind.REJECTED)
            return False
        req.status = RequestStatus.WAITING
        self.waiting.add(req)
        return True

    # --- one step -----------------------------------------------------------------------
    def _chunk(self, req: Request, budget: int, num_computed_tokens: int) -> int:
        """Tokens ``req`` may compute this step from ``num_computed_tokens``: what it lacks, capped
        by the long-prefill threshold (only with chunked prefill: without it a prefill is never
        split) and ``budget``."""
        n = req.num_tokens - num_computed_tokens
        thr = self.config.long_prefill_token_threshold
        if thr and n > thr and self.config.enable_chunked_prefill:
            n = thr
        return min(n, budget)

    def schedule(self, step: int) -> SchedulerOutput:
        """Decide step ``step``. Allocates blocks, may preempt; returns a frozen decision."""
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledRequest] = []
        preempted: list[str] = []
        had_swapped = bool(self.swapped)
        kv = self.kv
        kv.step = step

        # The hot loop (every running request, every step): locals, _chunk and is_prefill inlined.
        running = self.running
        chunked = self.config.enable_chunked_prefill
        thr = self.config.long_prefill_token_threshold if chunked else 0
        memory_preempted = False
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            rid, computed = req.request_id, req.num_computed_tokens
            lacking = len(req.prompt_token_ids) + len(req.output_token_ids) - computed
            n = thr if thr and lacking > thr else lacking
            if n > budget:
                if not chunked:      # a prefill is never split (a forked sequence's): next step
                    i += 1
                    continue
                n = budget
            new_blocks = kv.allocate_slots(rid, computed + n)
            if new_blocks is None:
                while new_blocks is None:
                    victim = self._pick_victim(req)
                    if victim is None:
                        break
                    gone = self._preempt(victim, PreemptionReason.PAUSED_KV if victim.status is RequestStatus.PAUSED
                                         else PreemptionReason.NEEDED_BLOCKS, "" if victim is req else rid)
                    preempted += gone
                    memory_preempted = True
                    if rid in gone:              # req itself (or its parallel-sampling group)
                        break
                    new_blocks = kv.allocate_slots(rid, computed + n)
                if new_blocks is None or req.status is not RequestStatus.RUNNING:
                    break
            # is_prefill as Request.is_prefill: unless it decodes the one token sampled last.
            scheduled.append(ScheduledRequest(rid, req.slot, n, computed,
                                              not (req.output_token_ids and lacking == 1),
                                              tuple(new_blocks) if new_blocks else ()))
            budget -= n
            i += 1
        if preempted and self.groups:       # a group preempted after some of it was scheduled
            budget += self.groups.drop_preempted(scheduled, self.requests)

        not_admitted: list[tuple[str, str]] = []
        waiting_reason = NotAdmittedReason.BEHIND
        # Policy priority: a waiting request of strictly higher priority than every swapped-out
        # one is not held behind them (nor is it behind running ones): admission goes first,
        # for the waiting requests that outrank them, and the swapped-out ones wait.
        outranked = bool(self.swapped and not preempted and self.policy == Policy.PRIORITY and self.waiting
                         and self.waiting.peek().priority < self._best_swapped_priority())
        if self.swapped and not preempted and not outranked:
            # Swapped-out requests resume (FIFO) before anyone is admitted, and not in a step
            # that preempted (the cache just ran out).
            budget = self._resume_swapped(budget, scheduled)
            if self.swapped and not self.running and self.paused:
                # liveness (G5): nothing runs and parked KV keeps the swapped-out requests out
                first = self.swapped[0]
                need = sum(max(self.swap.num_gpu_blocks_to_swap_in(r.request_id),
                               kv.blocks_for(r.num_computed_tokens + 1))
                           for r in (first.group.live() if first.group else (first,)))
                evicted = self._evict_paused(need, first.request_id)
                if evicted:             # ... and it comes back in this step, not the next
                    preempted += evicted
                    budget = self._resume_swapped(budget, scheduled)
        if (self.swapped or had_swapped) and not outranked:
            # Nobody is admitted in a step that began with swapped-out requests or swapped one
            # out (vLLM v0's rule: admissions only with an empty swapped queue).
            waiting_reason = NotAdmittedReason.SWAPPED_FIRST
            if self.waiting:
                not_admitted.append((self.waiting.peek().request_id, NotAdmittedReason.SWAPPED_FIRST))
        else:
            waiting_reason = self._admission(step, budget, scheduled, preempted, not_admitted,
                                             memory_preempted, outranked)

        if kv.enable_caching and not_admitted:
            self._note_waiting_lookups(not_admitted)
        # swap copies of this step, and of swap-outs made between steps (live knobs)
        swap_out, swap_in = tuple(self._swap_out), tuple(self._swap_in)
        self._swap_out, self._swap_in = [], []
        copies, samples, forked = self.groups.take_step_outputs()       # parallel sampling
        new, cached, finished = self.runner_sync.step_diff(scheduled, forked, self.requests, kv.block_table)
        return SchedulerOutput(step=step, scheduled=tuple(scheduled), preempted_ids=tuple(preempted),
                               not_admitted=tuple(not_admitted), waiting_reason=waiting_reason,
                               blocks_to_swap_out=swap_out, blocks_to_swap_in=swap_in,
                               blocks_to_copy=copies, parallel_samples=samples, forked=forked,
                               scheduled_new_reqs=new, scheduled_cached_reqs=cached,
                               finished_req_ids=finished)

    def _note_waiting_lookups(self, not_admitted: list[tuple[str, str]]) -> None:
        """Prefix caching: for each waiting request this step looked at and did not admit, what
        its prefix-cache lookup finds now, as a ``prefix_cache_waiting`` event when it differs
        from the last one since it began waiting (``engine.kv.prefix_explain``). O(its blocks)
        for the few requests of ``not_admitted``; changes no prefix-cache count."""
        kv, last = self.kv, self._waiting_lookups
        for rid, reason in not_admitted:
            req = self.requests.get(rid)
            if req is None or req.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                continue
            detail = kv.explain(req, kv.get_computed_blocks(req))._replace(not_admitted=reason).to_detail()
            if last.get(rid) != detail:
                last[rid] = detail
                self.events.append(RequestEvent(rid, EventKind.PREFIX_CACHE_WAITING, detail))

    def _best_swapped_priority(self) -> int:
        """The lowest ``priority`` value (the most urgent) among the swapped-out requests."""
        return min(r.priority for r in self.swapped)

    # --- after the forward pass -----------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, runner_out: ModelRunnerOutput,
                           now: float, step: int,
                           check_stop: Callable[[Request], str | None] | None = None) -> list[Request]:
        """Advance ``num_computed_tokens``, append sampled tokens, finish on EOS / stop string /
        max_tokens and fail requests the runner reported errors for. Returns the requests that got
        a token. ``check_stop(req)`` (the engine's detokenizer) is called once per new token and
        returns the stop string it completed, or None; a stop string in the last allowed token
        finishes the request as stopped, not as length-capped (vLLM's rule).

        A request of ``out`` that was aborted, paused, preempted or otherwise left the running
        set after ``schedule`` (a control call while the step was in flight) gets nothing from
        this step: its output is dropped, as vLLM drops the output of a request aborted during
        its step; it recomputes those tokens if it runs again."""
        got_token = []
        requests, errors, sampled = self.requests, runner_out.errors, runner_out.sampled_token_ids
        running = RequestStatus.RUNNING
        caching, cache_at, cache_full_blocks = (self.kv.enable_caching, self.kv.cache_at,
                                                self.kv.cache_full_blocks)
        scheduled = out.scheduled
        if self.groups.forks:       # parallel sampling: sequences forked in this step
            scheduled = scheduled + self.groups.check_forks(out, runner_out)
        for s in scheduled:
            rid = s.request_id
            req = requests.get(rid)
            if req is None or req.status is not running:
                continue        # it left the running set while the step was in flight: dropped
            if errors:
                err = errors.get(rid)
                if err is not None:
                    self._finish(req, RequestStatus.FINISHED_ERROR, error=err, kind=EventKind.FAILED)
                    continue
            req.num_computed_tokens += s.num_tokens
            if caching and req.num_computed_tokens >= cache_at.get(rid, 0):
                cache_full_blocks(req)      # blocks this completed step filled become hits
            tok = sampled.get(rid)
            if tok is None:
                continue
            output = req.output_token_ids
            output.append(tok)
            req.token_times.append(now)
            req.last_token_time = now
            if req.first_token_time is None:
                req.first_token_time = now
                req.first_token_step = step
            got_token.append(req)
            sp = req.sampling_params
            stop = check_stop(req) if check_stop is not None else None
            if not sp.ignore_eos and req.eos_token_id is not None and tok == req.eos_token_id:
                self._finish(req, RequestStatus.FINISHED_STOPPED, stop_reason="eos")
            elif stop is not None:
                self._finish(req, RequestStatus.FINISHED_STOPPED, stop_reason=stop)
            elif len(output) >= sp.max_tokens:
                self._finish(req, RequestStatus.FINISHED_LENGTH)
        return got_token

    def _finish(self, req: Request, status: RequestStatus, *, error: str | None = None,
                stop_reason: str | None = None, kind: EventKind = EventKind.FINISHED) -> None:
        if req.group is not None:
            self.groups.before_finish(req)
        if req.status is RequestStatus.RUNNING or req in self.running:
            self._leave_running(req)
        elif req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED) and req in self.waiting:
            self.waiting.remove(req)
        elif req in self.paused:
            self.paused.remove(req)
        elif req.status is RequestStatus.SWAPPED:
            self.swapped.remove(req)
            self.swap.drop(req.request_id)
        self.static_batch.discard(req.request_id)
        self._waiting_lookups.pop(req.request_id, None)
        self.kv.free(req.request_id)
        req.status = status
        req.error = error
        req.stop_reason = stop_reason
        del self.requests[req.request_id]
        self._finished.append(req)
        self.num_finished += 1
        detail = error or stop_reason or (req.finish_reason.value if req.finish_reason else "")
        self.events.append(RequestEvent(req.request_id, kind, detail))

    # --- introspection --------------------------------------------------------------------
    def take_events(self) -> list[RequestEvent]:
        ev, self.events = self.events, []
        return ev

    def take_finished(self) -> list[Request]:
        """Requests that finished since the last call (they are no longer in ``requests``)."""
        done, self._finished = self._finished, []
        return done

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.paused or self.swapped)

    def live_requests(self) -> Iterable[Request]:
        yield from self.running
        yield from self.waiting
        yield from self.paused
        yield from self.swapped

    def check_invariants(self) -> None:
        """Assert G1, G2, G3 and G4 (raises ``AssertionError`` naming the invariant); see
        :func:`engine.sched.invariants.check_scheduler`."""
        check_scheduler(self)

    # ---- Admission: which waiting requests start this step, and why the others do not ----
    def _admission(self, step: int, budget: int, scheduled: list, preempted: list,
                   not_admitted: list, memory_preempted: bool, outranked: bool = False) -> str:
        """The admission phase of a step (no swapped request waits, or, with ``outranked``, the
        first waiting request has strictly higher priority than every swapped-out one): admit
        by the policy, or, after a preemption for memory, nobody. Fills ``not_admitted``;
        returns the step's ``waiting_reason``."""
        waiting_reason = NotAdmittedReason.BEHIND
        static = self.policy == Policy.STATIC
        if static and self.waiting:
            waiting_reason = self._static_admission_open()
        if memory_preempted:
            # After a preemption for memory nobody is admitted: the cache is what ran out.
            if self.waiting:
                head = self.waiting.peek().request_id
                not_admitted.append((head, NotAdmittedReason.STATIC_BATCH
                                     if static and head not in self.static_batch
                                     else NotAdmittedReason.NO_FREE_BLOCKS))
        elif waiting_reason == NotAdmittedReason.BEHIND:
            self._admit(step, budget, scheduled, preempted, not_admitted, outranked)
            if self.waiting and not not_admitted:     # static: the rest waits for the next batch
                not_admitted.append((self.waiting.peek().request_id, NotAdmittedReason.STATIC_BATCH))
        if static and self.static_batch and self.waiting:
            # waiting members of the batch (at most max_num_seqs) are behind the blocked one;
            # everyone else waits for the batch to finish
            listed = {rid for rid, _ in not_admitted}
            not_admitted += [(r.request_id, NotAdmittedReason.BEHIND)
                             for r in itertools.islice(self.waiting, self.config.max_num_seqs)
                             if r.request_id in self.static_batch and r.request_id not in listed]
            waiting_reason = NotAdmittedReason.STATIC_BATCH
        return waiting_reason

    def _admit(self, step: int, budget: int, scheduled: list, preempted: list,
               not_admitted: list, outranked: bool = False) -> int:
        """Admit waiting requests in queue order while slots, budget and blocks allow; the first
        that cannot start is listed in ``not_admitted`` with its reason. With ``outranked``
        (policy priority, swapped-out requests wait) only requests of strictly higher priority
        than every swapped-out one start. Returns the budget left."""
        kv, c = self.kv, self.config
        static = self.policy == Policy.STATIC
        while self.waiting:
            req = self.waiting.peek()
            if static and req.request_id not in self.static_batch:
                break                              # the rest waits for the next static batch
            if outranked and req.priority >= self._best_swapped_priority():
                not_admitted.append((req.request_id, NotAdmittedReason.SWAPPED_FIRST))
                break                              # the swapped-out requests come back first
            # parallel sampling: a group's waiting sequences start together (engine.sched.groups)
            width, extra_blocks, min_tokens = self.groups.admission_needs(req)
            reason = None
            if req.request_id in preempted:
                # displaced this step by a higher-priority request: not back before the next step
                reason = NotAdmittedReason.LOWER_PRIORITY
            elif len(self.running) + width > c.max_num_seqs:
                reason = NotAdmittedReason.SEQ_CAP
            elif budget <= 0:
                reason = NotAdmittedReason.TOKEN_BUDGET
            # Prefix caching: start from the longest cached prefix (NO_HIT when it is off).
            hit = kv.get_computed_blocks(req) if reason is None else NO_HIT
            num_cached = hit.num_computed_tokens
            n = self._chunk(req, budget, num_cached) if reason is None else 0
            if reason is None and ((not c.enable_chunked_prefill and n < req.num_tokens - num_cached)
                                   or num_cached + n < min_tokens):
                reason = NotAdmittedReason.TOKEN_BUDGET
            new_blocks = None
            if reason in (None, NotAdmittedReason.SEQ_CAP, NotAdmittedReason.TOKEN_BUDGET) and self.policy == Policy.PRIORITY:
                freed = self._preempt_for_priority(req, scheduled, budget)
                if freed:                               # made room for req: look at it again
                    preempted += freed
                    budget = c.max_num_batched_tokens - sum(x.num_tokens for x in scheduled)
                    continue
            if reason is None and kv.num_blocks_to_admit(req.num_tokens, hit) + extra_blocks > kv.num_free_blocks:
                # Its whole prefill must fit the free blocks, not only this chunk: a prefill
                # started without room would be preempted before it ends, over and over.
                reason = NotAdmittedReason.NO_FREE_BLOCKS
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
                    reason = NotAdmittedReason.NO_FREE_BLOCKS
            if reason is not None:
                not_admitted.append((req.request_id, reason))
                break
            self.waiting.pop()
            req.num_computed_tokens = num_cached
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = num_cached
            if kv.enable_caching:         # how much hit, and why the match stopped there
                self.events.append(RequestEvent(req.request_id, EventKind.PREFIX_CACHE, kv.explain(req, hit).to_detail()))
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
            return NotAdmittedReason.BEHIND
        return NotAdmittedReason.STATIC_BATCH

    # ---- User controls between steps: finish (abort), pause, resume, limits, priority, move to front ----
    def finish_request(self, request_id: str, status: RequestStatus, *, error: str | None = None,
                       stop_reason: str | None = None) -> None:
        """Finish a live request (abort, stop string, failure). No-op if already finished."""
        req = self.requests.get(request_id)
        if req is None or req.is_finished:
            return
        kind = {RequestStatus.FINISHED_ABORTED: EventKind.ABORTED,
                RequestStatus.FINISHED_ERROR: EventKind.FAILED}.get(status, EventKind.FINISHED)
        self._finish(req, status, error=error, stop_reason=stop_reason, kind=kind)

    def pause_request(self, request_id: str) -> bool:
        """Park a waiting or running request: it keeps its KV but no batch slot."""
        req = self.requests[request_id]
        if req.group is not None and not self.groups.busy:      # parallel sampling: the group
            return self.groups.pause(req)
        if req.status is RequestStatus.RUNNING:
            self._leave_running(req)
        elif req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            self.waiting.remove(req)
        else:
            return False
        self.static_batch.discard(request_id)      # a parked request leaves its static batch
        req.status = RequestStatus.PAUSED
        self.paused.append(req)
        self.events.append(RequestEvent(request_id, EventKind.PAUSED))
        return True

    def resume_request(self, request_id: str) -> bool:
        """Un-park: back to running if a slot is free, else to the front of the waiting queue
        (dropping its KV, to be recomputed) so it does not wait behind later arrivals. Under
        ``priority`` it rejoins the queue at its priority; under ``static`` it waits for the next
        batch (its KV is dropped, it is no member of the running batch)."""
        req = self.requests[request_id]
        if req.group is not None and not self.groups.busy:      # parallel sampling: the group
            return self.groups.resume(req)
        if req.status is not RequestStatus.PAUSED:
            return False
        self.paused.remove(req)
        self.events.append(RequestEvent(request_id, EventKind.RESUMED))
        if (self.policy != Policy.STATIC and self.kv.block_ids(request_id)
                and len(self.running) < self.config.max_num_seqs):
            self._start_running(req)
            return True
        self.kv.free(request_id)
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        if self.policy == Policy.STATIC:
            self.waiting.add(req)
        else:
            self.waiting.prepend(req)
        return True

    def set_limits(self, *, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                   num_usable_blocks: int | None = None) -> list[tuple[str, int]]:
        """Change knobs between steps (the window's live knobs while paused). Lowering
        ``max_num_seqs`` preempts the running requests whose batch slot is gone; shrinking the
        usable KV pool to its first ``num_usable_blocks`` blocks preempts every request holding a
        block above (swap mode: swapped out if the CPU pool has room) and takes those blocks out
        of use; a live request that can then never fit fails with an error naming the limit.
        Returns the (knob, value) changes made. Raises ``ConfigError`` / ``ValueError`` naming
        the knob and its limit; then nothing changes."""
        changes = {k: v for k, v in (("max_num_seqs", max_num_seqs),
                                     ("max_num_batched_tokens", max_num_batched_tokens)) if v is not None}
        new = self.config.replace(**changes)                # validated (raises ConfigError)
        if num_usable_blocks is not None and not 1 <= num_usable_blocks <= self.kv.num_blocks:
            raise ValueError(f"num_usable_blocks must be in [1, {self.kv.num_blocks}] (the KV cache "
                             f"has {plural(self.kv.num_blocks, 'block')}), got {num_usable_blocks}")
        cap = new.max_num_seqs
        for r in [r for r in self.running if r.slot >= cap]:
            self._preempt(r, PreemptionReason.SLOTS_CUT)
        self._free_slots = sorted(set(range(cap)) - {r.slot for r in self.running})
        self.config = new
        if num_usable_blocks is not None:
            changes["num_usable_blocks"] = num_usable_blocks
            outside = self.kv.blocks_held_outside(num_usable_blocks)
            for r in [r for r in self.live_requests() if r.request_id in outside]:
                self._preempt(r, PreemptionReason.POOL_SHRUNK)
            self.kv.set_usable_blocks(num_usable_blocks)
            for r in list(self.live_requests()):
                err = self.admission_error(r)
                if err is not None:
                    self._finish(r, RequestStatus.FINISHED_ERROR, kind=EventKind.FAILED,
                                 error=f"{err} (num_usable_blocks was lowered to {num_usable_blocks})")
        if self.groups:         # parallel sampling: a group may no longer fit the new slots or budget
            self.groups.fail_impossible(", ".join(f"{k} was set to {v}" for k, v in changes.items()))
        return list(changes.items())

    def set_priority(self, request_id: str, priority: int) -> bool:
        """Change a live request's priority (policy ``priority`` only): a waiting request moves
        in the queue at once; a running one keeps running and is ordered by it for later
        preemptions. Returns False if the request is not live. Raises ``ValueError`` under
        another policy."""
        if self.policy != Policy.PRIORITY:
            raise ValueError(f"set_priority needs policy='priority' (this engine runs "
                             f"policy={str(self.policy)!r})")
        req = self.requests.get(request_id)
        if req is None or req.is_finished:
            return False
        if req.group is not None and not self.groups.busy:      # parallel sampling: the group
            return self.groups.set_priority(req, priority)
        req.priority = int(priority)
        if req in self.waiting:
            self.waiting.reorder(req)
        elif req.status is RequestStatus.RUNNING:
            self.running.sort(key=priority_key)
        self.events.append(RequestEvent(request_id, EventKind.PRIORITY, str(req.priority)))
        return True

    def move_to_front(self, request_id: str) -> bool:
        """Serve a waiting request next (policy ``fcfs``): it leaves its place in the waiting
        queue for the front, ahead of everyone waiting (preempted requests too), and is admitted
        by the usual rules from there. A parallel-sampling sequence moves its whole group, the
        group keeping its order. Recorded as a ``moved_to_front`` event of each moved request,
        with the next step. Returns False if the request is not waiting (running, paused,
        swapped, finished or unknown). Raises ``ValueError`` under another policy (``priority``:
        use :meth:`set_priority`; ``static``: the batch decides)."""
        if self.policy != Policy.FCFS:
            raise ValueError(f"move_to_front needs policy='fcfs' (this engine runs policy="
                             f"{self.policy!r}; under 'priority' give the request a lower "
                             "priority value instead)")
        req = self.requests.get(request_id)
        if req is None or req.is_finished:
            return False
        members = req.group.live() if req.group is not None else [req]
        if any(m not in self.waiting for m in members):
            return False
        for m in reversed(members):
            self.waiting.remove(m)
            self.waiting.prepend(m)
        self.events.extend(RequestEvent(m.request_id, EventKind.MOVED_TO_FRONT) for m in members)
        return True

    # ---- Batch slots, preemption and swap-in ----
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
        ids = [rid for v in victims for rid in self._preempt(v, PreemptionReason.FOR_PRIORITY, head.request_id)]
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
                out += self._preempt(p, PreemptionReason.PAUSED_KV, for_request)
        return out

    def _start_running(self, req: Request) -> None:
        self._waiting_lookups.pop(req.request_id, None)
        req.status = RequestStatus.RUNNING
        req.slot = heapq.heappop(self._free_slots)
        if self.policy == Policy.PRIORITY:       # running in (priority, arrival) order: victims last
            bisect.insort(self.running, req, key=priority_key)
        else:
            self.running.append(req)
        self.events.append(RequestEvent(req.request_id, EventKind.SCHEDULED))

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
            mode = PreemptionMode.RECOMPUTE                   # (also when no KV was computed: nothing to keep)
            if self.swap is not None and not was_paused and num_blocks:
                mode = PreemptionMode.SWAP if self.swap.can_swap_out(num_blocks) else PreemptionMode.SWAP_FALLBACK
        if mode == PreemptionMode.SWAP:
            self._swap_out += self.swap.swap_out(req.request_id, num_blocks, num_shared)
            req.status = RequestStatus.SWAPPED
            self.swapped.append(req)
        else:
            self.kv.free(req.request_id)
            req.num_computed_tokens = 0
        info = PreemptionInfo(mode, reason, for_request, tokens, req.num_preemptions)
        self.events.append(RequestEvent(req.request_id, EventKind.PREEMPTED, info.to_detail()))
        if mode != PreemptionMode.SWAP and not was_paused:
            req.status = RequestStatus.PREEMPTED
            self.waiting.prepend(req)
        return [req.request_id]
