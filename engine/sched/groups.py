"""How the scheduler serves parallel-sampling groups (``SamplingParams.n`` > 1). Pure Python.

The :class:`engine.sched.scheduler.Scheduler` owns one :class:`GroupScheduling` and calls it at a few
hooks; a request with ``group`` None never reaches it, so ``n = 1`` costs nothing on the hot
path. A group's sequences (``engine.sequence_group``) move between the queues together: all its
live sequences are waiting (WAITING / PREEMPTED), or all running, or all swapped, or all paused
(finished ones have left). The *head* is the first live sequence in index order; ``f`` is the
number of FULL blocks of the prompt (``prompt_len // block_size``).

- Admission (``Scheduler._admit``): the group starts as a whole when its head is first in the
  waiting queue: a batch slot for every waiting sequence, the token budget for the head's whole
  prompt (it is prefilled once, in one step; the other sequences compute nothing this step), and
  free blocks for the head's whole prefill plus, for each other sequence, its blocks beyond the
  ``f`` shared ones. Then :meth:`GroupScheduling.fork`: every other sequence starts running with
  the head's first ``f`` blocks (``forked`` block event, reference counts + 1) and, when the
  prompt ends inside a block, a new block of its own that the runner copies from the head's
  partial block before the NEXT step's forward pass (``SchedulerOutput.blocks_to_copy``; the
  head writes that block in this step). Its ``num_computed_tokens`` is the prompt length. A
  sequence with no output yet samples its first token from the head's last logits row
  (``SchedulerOutput.parallel_samples``); one recomputing after a preemption computes its own
  output tokens in the next steps, as a prefill chunk.
- Preemption (``Scheduler._preempt``): preempting one sequence preempts every running (or
  paused, holding KV) sequence of its group. Recompute: each drops its KV and waits, the head
  first; the group is admitted again as above, so the prompt is prefilled once more by the head
  alone. Swap: decided for the group (the CPU pool must hold it all, else recompute for all,
  recorded as the fallback): the head copies all its computed blocks, each other sequence only
  its blocks beyond the ``f`` shared ones; swapping back in (``Scheduler._resume_swapped``) the
  group needs a slot for each sequence, and the sequences share the head's new first ``f``
  blocks again. If the head finishes while swapped out (an abort), its CPU copies of the shared
  blocks pass to the next sequence (:meth:`engine.kv.swap.SwapSpace.hand_over`).
- Pause, resume and set-priority act on the whole group; abort and finishing on one sequence.
- Rejected at admission (every sequence, with an error naming the knob): ``n`` >
  ``max_num_seqs``, a prompt longer than ``max_num_batched_tokens`` (or, with chunked prefill,
  ``long_prefill_token_threshold``), or a group whose KV with the prompt's full blocks shared
  (``blocks(prompt + max_tokens) + (n - 1) * (blocks(prompt + max_tokens) - f)``) exceeds the
  usable cache. A live knob change that makes a group impossible fails its live sequences.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from engine.outputs import ModelRunnerOutput, RequestEvent, ScheduledRequest, SchedulerOutput
from engine.request import Request
from engine.vocab import Policy, EventKind, RequestStatus
from engine.sequence_group import SequenceGroup
from engine.plural import plural
from engine.vocab import PreemptionMode

if TYPE_CHECKING:
    from engine.sched.scheduler import Scheduler

_WAITING = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
NO_FIRST_TOKEN = "the runner sampled no first token for this sequence of a parallel-sampling group"


class GroupScheduling:
    """The parallel-sampling part of one :class:`engine.sched.scheduler.Scheduler` (see the module
    docstring for the rules). ``groups`` maps each live group's parent id to its
    :class:`SequenceGroup`; false when there is none, so the scheduler skips its group work."""

    def __init__(self, scheduler: "Scheduler") -> None:
        self.s = scheduler
        self.groups: dict[str, SequenceGroup] = {}
        self._copies: list[tuple[int, int]] = []       # copy-on-write pairs of this step's forks
        self._copies_due: list[tuple[int, int]] = []   # ... of the last step's: copied in this one
        self._samples: list[tuple[str, tuple[str, ...]]] = []   # this step's first tokens
        self._entries: list[ScheduledRequest] = []              # ... their batch entries
        self._forking: list[tuple[str, tuple[str, ...]]] = []   # (head, forked) of this step
        self.forks: list[tuple[str, tuple[str, ...]]] = []      # ... of the step scheduled last
        self._busy = False              # a group action is calling back into the scheduler

    def __bool__(self) -> bool:
        return bool(self.groups)

    @property
    def busy(self) -> bool:
        """True while a group action applies a per-sequence scheduler call to each sequence."""
        return self._busy

    def num_shared_blocks(self, req: Request) -> int:
        """``f``: the full blocks of ``req``'s prompt, shared by its group's sequences."""
        return req.num_prompt_tokens // self.s.kv.block_size

    def add(self, req: Request) -> None:
        """Register the group of a sequence entering the scheduler."""
        self.groups.setdefault(req.group.parent_id, req.group)

    def live_ids(self, parent_id: str) -> list[str]:
        """The ids of the live sequences of group ``parent_id`` (empty if it is no live group)."""
        group = self.groups.get(parent_id)
        return [] if group is None else [m.request_id for m in group.live()]

    # --- admission ------------------------------------------------------------------------
    def admission_error(self, req: Request) -> str | None:
        """Why ``req``'s group can never be served (naming the knob), or None. Once a group is
        found impossible (its first sequence rejected) it stays so: every sequence gets the
        same error."""
        if req.group.error is None:
            req.group.error = self._group_error(req)
        return req.group.error

    def _group_error(self, req: Request) -> str | None:
        c, kv = self.s.config, self.s.kv
        n = len(req.group.live())
        p, m = req.num_prompt_tokens, req.sampling_params.max_tokens
        if n > c.max_num_seqs:
            return f"n={n} sequences take {n} batch slots but max_num_seqs is {c.max_num_seqs}"
        if p > c.max_num_batched_tokens:
            return (f"n={n}: the prompt ({p} tokens) is prefilled in one step, but "
                    f"max_num_batched_tokens is {c.max_num_batched_tokens}")
        thr = c.long_prefill_token_threshold
        if c.enable_chunked_prefill and thr and p > thr:
            return (f"n={n}: the prompt ({p} tokens) is prefilled in one step, but "
                    f"long_prefill_token_threshold is {thr}")
        f, each = p // kv.block_size, kv.blocks_for(p + m)
        need, usable = each + (n - 1) * (each - f), kv.num_usable_blocks
        if need > usable:
            return (f"n={n} sequences of prompt ({p}) + max_tokens ({m}) tokens need {need} KV blocks "
                    f"(the prompt's {plural(f, 'full block')} shared) but the whole cache has {plural(usable, 'block')}")
        return None

    def fail_impossible(self, why: str) -> None:
        """Fail every live sequence of a group that can no longer be served (after live knob
        changes, ``why``), with the admission error naming the knob."""
        for group in list(self.groups.values()):
            for m in group.live():
                err = self.admission_error(m)
                if err is not None:
                    self.s._finish(m, RequestStatus.FINISHED_ERROR, kind=EventKind.FAILED, error=f"{err} ({why})")

    def admission_needs(self, head: Request) -> tuple[int, int, int]:
        """What admitting the waiting ``head`` takes beyond a single request: (batch slots,
        free blocks for the other sequences, tokens the head must compute this step counting
        its prefix-cache hit). ``(1, 0, 0)`` for a request without a group."""
        if head.group is None:
            return 1, 0, 0
        kv, f = self.s.kv, self.num_shared_blocks(head)
        others = [m for m in head.group.live() if m is not head and m.status in _WAITING]
        return (1 + len(others), sum(kv.blocks_for(m.num_tokens) - f for m in others),
                head.num_prompt_tokens)

    def fork(self, head: Request) -> None:
        """``head`` was just admitted with its whole prompt in this step: start its group's
        other waiting sequences on its prompt blocks (counted by :meth:`admission_needs`)."""
        s, kv = self.s, self.s.kv
        p, f = head.num_prompt_tokens, self.num_shared_blocks(head)
        src = kv.block_ids(head.request_id)[f] if p % kv.block_size else None
        first: list[str] = []
        forked: list[str] = []
        for m in head.group.live():
            if m is head or m.status not in _WAITING:
                continue
            s.waiting.remove(m)
            s._start_running(m)
            kv.fork(head.request_id, m, f)
            if src is not None:                 # copy-on-write of the prompt's partial block
                new = kv.allocate_slots(m.request_id, p)
                assert new is not None and len(new) == 1, (m.request_id, new)
                self._copies.append((src, new[0]))
            m.num_computed_tokens = p
            if m.num_cached_tokens < 0:
                m.num_cached_tokens = 0
            s.events.append(RequestEvent(m.request_id, EventKind.FORKED, head.request_id))
            forked.append(m.request_id)
            if not m.output_token_ids:
                first.append(m.request_id)
                table = kv.block_table(m.request_id)
                self._entries.append(ScheduledRequest(m.request_id, m.slot, 0, p, False, table))
        if first:
            self._samples.append((head.request_id, tuple(first)))
        if forked:
            self._forking.append((head.request_id, tuple(forked)))

    def take_step_outputs(self) -> tuple[tuple, tuple, tuple]:
        """(``blocks_to_copy``, ``parallel_samples``, ``forked``) of the step being scheduled:
        the copies of the forks made in the step before (the head wrote the source block in
        that step's forward pass), and the first tokens of this step's forks with their batch
        entries. Call once at the end of every ``schedule()``."""
        if not (self._copies_due or self._copies or self._forking or self.forks):
            return (), (), ()               # no fork in this step or the last (n = 1: always)
        copies, self._copies_due, self._copies = tuple(self._copies_due), self._copies, []
        samples, self._samples = tuple(self._samples), []
        entries, self._entries = tuple(self._entries), []
        self.forks, self._forking = self._forking, []
        return copies, samples, entries

    def check_forks(self, out: SchedulerOutput, runner_out: ModelRunnerOutput) -> tuple[ScheduledRequest, ...]:
        """For ``update_from_output`` of the step scheduled last (``out``, its :attr:`forks`):
        a sequence forked onto a head whose step failed (its prompt KV is not written) fails
        with that error, as does one the runner gave no first token. Returns the entries of
        ``out.forked`` left, to update like any batch entry (their first token)."""
        s, errors, sampled = self.s, runner_out.errors, runner_out.sampled_token_ids
        forks, self.forks = self.forks, []
        first = {x.request_id for x in out.forked}
        for head_id, rids in forks:
            for rid in rids:
                m = s.requests.get(rid)
                if m is None or m.status is not RequestStatus.RUNNING:
                    continue
                err = errors.get(head_id) or (NO_FIRST_TOKEN if rid in first and rid not in sampled else None)
                if err is not None:
                    s._finish(m, RequestStatus.FINISHED_ERROR, error=err, kind=EventKind.FAILED)
        return tuple(x for x in out.forked if x.request_id in s.requests)

    # --- preemption -----------------------------------------------------------------------
    def preempt(self, req: Request, reason: str, for_request: str) -> list[str]:
        """Preempt ``req`` with the rest of its group: every running sequence (or, for a paused
        one, every paused sequence holding KV). Returns their ids, or [] when ``req`` is no
        longer running or parked with KV (preempted with its group already)."""
        s, kv = self.s, self.s.kv
        if req.status is RequestStatus.RUNNING:
            members = [m for m in req.group.live() if m.status is RequestStatus.RUNNING]
        elif req.status is RequestStatus.PAUSED and kv.block_ids(req.request_id):
            members = [m for m in req.group.live()
                       if m.status is RequestStatus.PAUSED and kv.block_ids(m.request_id)]
        else:
            return []
        ids = [m.request_id for m in members]
        if for_request in ids:
            for_request = ""
        head, f = members[0], self.num_shared_blocks(req)
        shared = {m.request_id: 0 if m is head else f for m in members}
        mode = PreemptionMode.RECOMPUTE
        if s.swap is not None and req.status is RequestStatus.RUNNING:
            need = sum(kv.blocks_for(m.num_computed_tokens) - shared[m.request_id] for m in members)
            mode = PreemptionMode.SWAP if s.swap.can_swap_out(need) else PreemptionMode.SWAP_FALLBACK
        # swapped-out sequences queue in index order; recomputing ones are put back at the
        # front of the waiting queue one by one, the head last so it is first
        order = members if mode == PreemptionMode.SWAP else reversed(members)
        for m in order:
            s._preempt(m, reason, for_request, mode=mode, num_shared=shared[m.request_id])
        return ids

    @staticmethod
    def drop_preempted(scheduled: list[ScheduledRequest], requests: dict[str, Request]) -> int:
        """Take the sequences of a group preempted later in the same step out of ``scheduled``
        (the running loop had reached them before); returns the tokens they had been given."""
        keep = [x for x in scheduled if requests[x.request_id].status is RequestStatus.RUNNING]
        tokens = sum(x.num_tokens for x in scheduled) - sum(x.num_tokens for x in keep)
        scheduled[:] = keep
        return tokens

    def resume_swapped(self, req: Request, budget: int, scheduled: list[ScheduledRequest]) -> int | None:
        """Swap ``req``'s group back in (its sequences head the swapped queue, in index order)
        if a slot for each, the budget for each one's chunk and the GPU blocks are there; each
        is scheduled in this step. Returns the budget left, or None (nothing changed)."""
        s, kv, swap, c = self.s, self.s.kv, self.s.swap, self.s.config
        members = req.group.live()
        if len(s.running) + len(members) > c.max_num_seqs:
            return None
        head, f = members[0], self.num_shared_blocks(req)
        chunks, need, left = [], 0, budget
        for m in members:
            n = s._chunk(m, left, m.num_computed_tokens) if left > 0 else 0
            if n < 1 or (not c.enable_chunked_prefill and m.num_computed_tokens + n < m.num_tokens):
                return None
            shared = 0 if m is head else f
            need += max(swap.num_gpu_blocks_to_swap_in(m.request_id),
                        kv.blocks_for(m.num_computed_tokens + n) - shared)
            chunks.append((m, n, shared))
            left -= n
        if need > kv.num_free_blocks:
            return None
        for m, n, shared in chunks:
            s.swapped.remove(m)
            if shared:
                kv.fork(head.request_id, m, shared)
            s._swap_in += swap.swap_in(m.request_id, shared)
            grown = kv.allocate_slots(m.request_id, m.num_computed_tokens + n)
            assert grown is not None            # counted above
            s._start_running(m)
            table = kv.block_table(m.request_id)
            scheduled.append(ScheduledRequest(m.request_id, m.slot, n, m.num_computed_tokens,
                                              m.is_prefill, table))
        return left

    # --- user actions ---------------------------------------------------------------------
    def _each(self, call, members: Iterable[Request], *args) -> bool:
        self._busy = True
        try:
            return all([call(m.request_id, *args) for m in members])
        finally:
            self._busy = False

    def pause(self, req: Request) -> bool:
        """Pause ``req``'s whole group (every live sequence waiting or running)."""
        members = req.group.live()
        if any(m.status not in (RequestStatus.RUNNING, *_WAITING) for m in members):
            return False
        return self._each(self.s.pause_request, members)

    def resume(self, req: Request) -> bool:
        """Resume ``req``'s paused group: back to running when every sequence holds its KV and
        gets a slot (not under ``static``), else every one drops its KV and waits, the head
        first."""
        s = self.s
        members = req.group.live()
        if any(m.status is not RequestStatus.PAUSED for m in members):
            return False
        to_running = (s.policy != Policy.STATIC and all(s.kv.block_ids(m.request_id) for m in members)
                      and len(s.running) + len(members) <= s.config.max_num_seqs)
        if not to_running:
            for m in members:
                s.kv.free(m.request_id)
                m.num_computed_tokens = 0
        # a resumed sequence that waits is put back at the queue's front (but under static)
        order = members if to_running or s.policy == Policy.STATIC else reversed(members)
        return self._each(s.resume_request, order)

    def set_priority(self, req: Request, priority: int) -> bool:
        """Give every live sequence of ``req``'s group ``priority``."""
        return self._each(self.s.set_priority, req.group.live(), priority)

    # --- finishing --------------------------------------------------------------------------
    def before_finish(self, req: Request) -> None:
        """``req`` is about to finish: a swapped-out head hands its CPU copies of the shared
        prompt blocks to the next sequence; the last live sequence unregisters the group."""
        group, s = req.group, self.s
        others = [m for m in group.live() if m is not req]
        f = self.num_shared_blocks(req)
        if (req.status is RequestStatus.SWAPPED and others and f
                and others[0].status is RequestStatus.SWAPPED and group.head() is req):
            s.swap.hand_over(req.request_id, others[0].request_id, f)
        if not others:
            self.groups.pop(group.parent_id, None)

    def whole_groups(self, batch: set[str]) -> set[str]:
        """Policy static: ``batch`` without the sequences of groups it does not hold whole."""
        out = set(batch)
        for rid in batch:
            group = self.s.requests[rid].group
            if group is not None:
                ids = {m.request_id for m in group.live()}
                if not ids <= batch:
                    out -= ids
        return out

    # --- checks ---------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Every live sequence's group is registered; a group's live sequences are in one queue
        (consecutive in the running list and the swapped queue, in index order); those holding
        GPU blocks share the head's first ``f``; swapped ones hold CPU copies of their computed
        blocks, the head of all, the others beyond ``f``. Raises ``AssertionError``."""
        s, kv = self.s, self.s.kv
        for r in s.requests.values():
            if r.group is not None:
                assert self.groups.get(r.group.parent_id) is r.group, f"{r.request_id}: group not registered"
        for pid, group in self.groups.items():
            live = group.live()
            assert live, f"group {pid} has no live sequence but is registered"
            phases = {"waiting" if m.status in _WAITING else m.status.value for m in live}
            assert len(phases) == 1, f"group {pid}: sequences in {phases}"
            head, f = live[0], self.num_shared_blocks(live[0])
            for queue in (s.running, s.swapped):
                at = [i for i, r in enumerate(queue) if r.group is group]
                assert at == list(range(at[0], at[0] + len(at))) if at else True, (
                    f"group {pid} not consecutive")
                assert [queue[i] for i in at] in ([], live), f"group {pid} out of index order"
            prefix = kv.block_ids(head.request_id)[:f]
            for m in live:
                table = kv.block_ids(m.request_id)
                if table:
                    assert table[:f] == prefix, f"{m.request_id} does not share {pid}'s prompt blocks"
                if m.status is RequestStatus.SWAPPED:
                    want = kv.blocks_for(m.num_computed_tokens) - (0 if m is head else f)
                    assert len(s.swap.tables[m.request_id]) == want, (m.request_id, "CPU blocks")
