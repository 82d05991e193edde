"""The user-facing controls of :class:`engine.engine.LLMEngine` between steps: abort, pause,
resume, live knobs, priority and move-to-front, each marking what it touched so the next step
records it. A mixin (it calls the scheduler's controls, ``engine.sched.scheduler_controls``); kept apart
so the step loop reads on its own.
"""
from __future__ import annotations

from engine.request import RequestStatus


class EngineControls:
    """Abort / pause / resume / ``set_knobs`` / ``set_priority`` / ``move_to_front`` of
    :class:`engine.engine.LLMEngine`."""

    def abort_request(self, request_id: str) -> bool:
        """Abort a live request (frees its blocks at once); a parallel-sampling prompt's id aborts
        every sequence. Returns False if unknown or finished."""
        members = self.scheduler.groups.live_ids(request_id)
        if members:
            return all([self.abort_request(m) for m in members])
        req = self.scheduler.requests.get(request_id)
        if req is None or req.is_finished:
            return False
        self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        self._touched.add(request_id)
        self._state = None
        self._collect_finished()
        return True

    def pause_request(self, request_id: str) -> bool:
        """Park a request: it keeps its KV but no batch slot (a parallel-sampling group as a
        whole). Returns False if not possible."""
        request_id, ids = self._group_of(request_id)
        ok = request_id in self.scheduler.requests and self.scheduler.pause_request(request_id)
        if ok:
            self._touched.update(ids)
            self._state = None
        return ok

    def resume_request(self, request_id: str) -> bool:
        """Un-park a paused request (a parallel-sampling group as a whole). Returns False if it
        is not paused."""
        request_id, ids = self._group_of(request_id)
        ok = request_id in self.scheduler.requests and self.scheduler.resume_request(request_id)
        if ok:
            self._touched.update(ids)
            self._state = None
        return ok

    def set_knobs(self, *, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                  num_usable_blocks: int | None = None) -> list[tuple[str, int]]:
        """Change live knobs between steps (the window does it while paused): the batch slots,
        the token budget, and the usable KV pool (its first ``num_usable_blocks`` blocks;
        shrinking preempts the requests holding blocks above: a demo of memory pressure).
        Recorded with the next step (``StepRecord.knobs``). Returns the changes. Raises
        ``ConfigError`` / ``ValueError`` naming the knob and its limit (nothing changes)."""
        changes = self.scheduler.set_limits(max_num_seqs=max_num_seqs,
                                            max_num_batched_tokens=max_num_batched_tokens,
                                            num_usable_blocks=num_usable_blocks)
        self.config = self.scheduler.config
        self._knobs += changes
        self._touched.update(e.request_id for e in self.scheduler.events)
        self._collect_finished()          # requests that can no longer ever fit failed
        self._state = None
        return changes

    def set_priority(self, request_id: str, priority: int) -> bool:
        """Change a live request's priority (``policy="priority"`` only; a waiting request moves
        in the queue at once). Returns False if it is not live; raises ``ValueError`` under
        another policy."""
        request_id, ids = self._group_of(request_id)
        ok = self.scheduler.set_priority(request_id, priority)
        if ok:
            self._touched.update(ids)
            self._state = None
        return ok

    def move_to_front(self, request_id: str) -> bool:
        """Serve a waiting request next (``policy="fcfs"`` only; a parallel-sampling prompt's
        id or sequence moves its group): ``Scheduler.move_to_front``, recorded with the next
        step. Returns False if it is not waiting; raises ``ValueError`` under another policy."""
        request_id, ids = self._group_of(request_id)
        ok = self.scheduler.move_to_front(request_id)
        if ok:
            self._touched.update(ids)
            self._state = None
        return ok

    def _group_of(self, request_id: str) -> tuple[str, list[str]]:
        """(a live request to act on, the ids the action touches): a parallel-sampling group's
        head and live sequences for its prompt's id or any of its sequences, else the id itself."""
        req = self.scheduler.requests.get(request_id)
        parent = req.group.parent_id if req is not None and req.group is not None else request_id
        ids = self.scheduler.groups.live_ids(parent)
        return (ids[0], ids) if ids else (request_id, [request_id])
