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

import itertools
from collections import deque
from typing import Callable, Iterable

from engine.config import EngineConfig
from engine.sched.groups import GroupScheduling
from engine.kv.manager import KVCacheManager
from engine.outputs import (NOT_ADMITTED_BEHIND, NOT_ADMITTED_SWAPPED_FIRST, ModelRunnerOutput,
                            RequestEvent, ScheduledRequest, SchedulerOutput)
from engine.sched.preemption import NEEDED_BLOCKS, PAUSED_KV
from engine.request import Request, RequestStatus
from engine.sched.queue import make_queue
from engine.runner.sync import RunnerSync
from engine.sched.scheduler_admission import SchedulerAdmission
from engine.sched.scheduler_controls import SchedulerControls
from engine.sched.invariants import check_scheduler
from engine.sched.scheduler_preemption import SchedulerPreemption
from engine.kv.swap import SwapSpace


class Scheduler(SchedulerAdmission, SchedulerControls, SchedulerPreemption):
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
        self.swap = SwapSpace(config.num_cpu_blocks, self.kv) if config.preemption_mode == "swap" else None
        self.swapped: deque[Request] = deque()
        self._swap_out: list[tuple[int, int]] = []
        self._swap_in: list[tuple[int, int]] = []
        self.groups = GroupScheduling(self)     # parallel sampling (engine.sched.groups)
        self.runner_sync = RunnerSync()         # which requests the runner holds state for

    # --- admission ----------------------------------------------------------------------
    def admission_error(self, req: Request) -> str | None:
        """Why ``req`` can never be served, or None. Names the limit that is exceeded."""
        c = self.config
        p, m = req.num_prompt_tokens, req.sampling_params.max_tokens
        if p == 0:
            return "empty prompt: a request needs at least 1 prompt token"
        if m < 1:
            return f"max_tokens must be >= 1, got {m}"
        if req.priority and self.policy != "priority":
            return (f"priority={req.priority} needs policy='priority' (this engine runs "
                    f"policy={self.policy!r}, where every request has priority 0)")
        if p + m > c.max_model_len:
            return f"prompt ({p}) + max_tokens ({m}) = {p + m} tokens exceeds max_model_len {c.max_model_len}"
        usable = self.kv.num_usable_blocks
        cap = usable * self.kv.block_size
        if p + m > cap:
            return (f"prompt ({p}) + max_tokens ({m}) = {p + m} tokens needs {self.kv.blocks_for(p + m)} "
                    f"KV blocks but the whole cache has {usable} blocks ({cap} tokens)")
        return None if req.group is None else self.groups.admission_error(req)

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
        self.events.append(RequestEvent(req.request_id, "arrived"))
        err = self.admission_error(req)
        if err is not None:
            self._finish(req, RequestStatus.FINISHED_ERROR, error=err, kind="rejected")
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
                    gone = self._preempt(victim, PAUSED_KV if victim.status is RequestStatus.PAUSED
                                         else NEEDED_BLOCKS, "" if victim is req else rid)
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
        waiting_reason = NOT_ADMITTED_BEHIND
        # Policy priority: a waiting request of strictly higher priority than every swapped-out
        # one is not held behind them (nor is it behind running ones): admission goes first,
        # for the waiting requests that outrank them, and the swapped-out ones wait.
        outranked = bool(self.swapped and not preempted and self.policy == "priority" and self.waiting
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
            waiting_reason = NOT_ADMITTED_SWAPPED_FIRST
            if self.waiting:
                not_admitted.append((self.waiting.peek().request_id, NOT_ADMITTED_SWAPPED_FIRST))
        else:
            waiting_reason = self._admission(step, budget, scheduled, preempted, not_admitted,
                                             memory_preempted, outranked)

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
        finishes the request as stopped, not as length-capped (vLLM's rule)."""
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
            req = requests[rid]
            if req.status is not running:
                continue
            if errors:
                err = errors.get(rid)
                if err is not None:
                    self._finish(req, RequestStatus.FINISHED_ERROR, error=err, kind="failed")
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
                stop_reason: str | None = None, kind: str = "finished") -> None:
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
