"""The scheduler's user-facing controls between steps: finish (abort), pause, resume, live
knobs, priority changes and moving a waiting request to the front of the queue. A mixin of :class:`engine.sched.scheduler.Scheduler` (it uses the
scheduler's queues, KV manager and preemption); kept apart so the scheduling step reads on its own.
"""
from __future__ import annotations

from engine.outputs import RequestEvent
from engine.sched.preemption import POOL_SHRUNK, SLOTS_CUT
from engine.request import RequestStatus
from engine.sched.queue import priority_key


class SchedulerControls:
    """Pause / resume / finish / ``set_limits`` / ``set_priority`` / ``move_to_front`` of
    :class:`engine.sched.scheduler.Scheduler`."""

    def finish_request(self, request_id: str, status: RequestStatus, *, error: str | None = None,
                       stop_reason: str | None = None) -> None:
        """Finish a live request (abort, stop string, failure). No-op if already finished."""
        req = self.requests.get(request_id)
        if req is None or req.is_finished:
            return
        kind = {RequestStatus.FINISHED_ABORTED: "aborted",
                RequestStatus.FINISHED_ERROR: "failed"}.get(status, "finished")
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
        self.events.append(RequestEvent(request_id, "paused"))
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
        self.events.append(RequestEvent(request_id, "resumed"))
        if (self.policy != "static" and self.kv.block_ids(request_id)
                and len(self.running) < self.config.max_num_seqs):
            self._start_running(req)
            return True
        self.kv.free(request_id)
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        if self.policy == "static":
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
                             f"has {self.kv.num_blocks} blocks), got {num_usable_blocks}")
        cap = new.max_num_seqs
        for r in [r for r in self.running if r.slot >= cap]:
            self._preempt(r, SLOTS_CUT)
        self._free_slots = sorted(set(range(cap)) - {r.slot for r in self.running})
        self.config = new
        if num_usable_blocks is not None:
            changes["num_usable_blocks"] = num_usable_blocks
            outside = self.kv.blocks_held_outside(num_usable_blocks)
            for r in [r for r in self.live_requests() if r.request_id in outside]:
                self._preempt(r, POOL_SHRUNK)
            self.kv.set_usable_blocks(num_usable_blocks)
            for r in list(self.live_requests()):
                err = self.admission_error(r)
                if err is not None:
                    self._finish(r, RequestStatus.FINISHED_ERROR, kind="failed",
                                 error=f"{err} (num_usable_blocks was lowered to {num_usable_blocks})")
        if self.groups:         # parallel sampling: a group may no longer fit the new slots or budget
            self.groups.fail_impossible(", ".join(f"{k} was set to {v}" for k, v in changes.items()))
        return list(changes.items())

    def set_priority(self, request_id: str, priority: int) -> bool:
        """Change a live request's priority (policy ``priority`` only): a waiting request moves
        in the queue at once; a running one keeps running and is ordered by it for later
        preemptions. Returns False if the request is not live. Raises ``ValueError`` under
        another policy."""
        if self.policy != "priority":
            raise ValueError(f"set_priority needs policy='priority' (this engine runs "
                             f"policy={self.policy!r})")
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
        self.events.append(RequestEvent(request_id, "priority", str(req.priority)))
        return True

    def move_to_front(self, request_id: str) -> bool:
        """Serve a waiting request next (policy ``fcfs``): it leaves its place in the waiting
        queue for the front, ahead of everyone waiting (preempted requests too), and is admitted
        by the usual rules from there. A parallel-sampling sequence moves its whole group, the
        group keeping its order. Recorded as a ``moved_to_front`` event of each moved request,
        with the next step. Returns False if the request is not waiting (running, paused,
        swapped, finished or unknown). Raises ``ValueError`` under another policy (``priority``:
        use :meth:`set_priority`; ``static``: the batch decides)."""
        if self.policy != "fcfs":
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
        self.events.extend(RequestEvent(m.request_id, "moved_to_front") for m in members)
        return True
