"""What the scheduler tells the runner about its requests: the diff-shaped half of a
:class:`engine.outputs.SchedulerOutput` (vLLM v1's ``NewRequestData`` / ``CachedRequestData`` /
``finished_req_ids``, vllm/v1/core/sched/output.py). Pure Python, no torch.

The runner keeps its own per-request state (``engine.runner.input_batch.InputBatch``). This object
mirrors which requests it holds: a request scheduled while the runner holds nothing of it is
sent in full (its tokens so far, sampling parameters, whole block table, ``num_computed_tokens``)
and is then held; a held request gets only what changed (new block ids, ``num_computed_tokens``);
a held request that leaves the running set for any reason (finished, aborted, failed, preempted,
swapped out, paused, its slot cut) is dropped: its id goes to the next step's
``finished_req_ids``, and it is sent in full again if it comes back. So the runner never needs a
live ``Request`` object, and a request's prompt crosses over once per admission, not per step.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Callable, Mapping, Sequence

from engine.outputs import CachedRequestData, NewRequestData, ScheduledRequest
from engine.request import PromptIdsOnUse, Request

# fields of a ScheduledRequest by position (a NamedTuple): itemgetter is the fastest read
_REQUEST_ID, _NEW_BLOCK_IDS, _NUM_COMPUTED = (itemgetter(ScheduledRequest._fields.index(f)) for f in
                                              ("request_id", "new_block_ids", "num_computed_tokens"))


class RunnerSync:
    """The scheduler's record of the requests the runner holds state for.

    ``held`` are their ids. :meth:`drop` is called whenever a request leaves the running set;
    :meth:`step_diff` builds a step's (new, cached, finished) part of the scheduler output and
    marks the new requests held.
    """

    __slots__ = ("held", "_dropped")

    def __init__(self) -> None:
        self.held: set[str] = set()
        self._dropped: list[str] = []

    @property
    def pending_drops(self) -> tuple[str, ...]:
        """Ids dropped since the last :meth:`step_diff` (the next step's ``finished_req_ids``)."""
        return tuple(self._dropped)

    def drop(self, request_id: str) -> None:
        """``request_id`` left the running set: the runner must drop its state (if it holds it)."""
        if request_id in self.held:
            self.held.remove(request_id)
            self._dropped.append(request_id)

    def step_diff(self, scheduled: Sequence[ScheduledRequest], forked: Sequence[ScheduledRequest],
                  requests: Mapping[str, Request], block_table: Callable[[str], tuple[int, ...]]
                  ) -> tuple[tuple[NewRequestData, ...], CachedRequestData, tuple[str, ...]]:
        """(``scheduled_new_reqs``, ``scheduled_cached_reqs``, ``finished_req_ids``) of a step
        whose batch entries are ``scheduled`` then ``forked`` (parallel-sampling sequences that
        sample in this step without computing). Requests not held are sent in full (their whole
        block table from ``block_table(request_id)``, e.g. ``KVCacheManager.block_table``) and
        become held. The drops collected since the last call are returned and forgotten. O(scheduled)
        plus the tokens of the requests sent in full."""
        held = self.held
        finished, self._dropped = tuple(self._dropped), []
        ids = list(map(_REQUEST_ID, scheduled))
        if not forked and held.issuperset(ids):        # the common step: nobody new, no loop
            return (), CachedRequestData(ids, list(map(_NEW_BLOCK_IDS, scheduled)),
                                         list(map(_NUM_COMPUTED, scheduled))), finished
        new: list[NewRequestData] = []
        ids = []
        blocks: list[tuple[int, ...]] = []
        computed: list[int] = []
        for s in scheduled:
            rid = s.request_id
            if rid in held:
                ids.append(rid)
                blocks.append(s.new_block_ids)
                computed.append(s.num_computed_tokens)
            else:
                new.append(self._full(requests[rid], s, block_table(rid)))
        for s in forked:
            if s.request_id not in held:
                new.append(self._full(requests[s.request_id], s, block_table(s.request_id)))
        return tuple(new), CachedRequestData(ids, blocks, computed), finished

    def _full(self, req: Request, s: ScheduledRequest, table: tuple[int, ...]) -> NewRequestData:
        self.held.add(req.request_id)
        prompt = req.prompt_token_ids
        if isinstance(prompt, PromptIdsOnUse):
            prompt = prompt.ids          # the runner gets the made ids (a buffer numpy/torch read at once)
        return NewRequestData(req.request_id, prompt, tuple(req.output_token_ids),
                              req.sampling_params, table, s.num_computed_tokens)
