"""The least per-request state a runner without a model keeps (the simulated executor, the test
and bench fakes): each held request's token count and output count, kept from
:class:`engine.outputs.SchedulerOutput` diffs alone, as the real runner's ``InputBatch`` keeps
its tokens. Pure Python, no numpy or torch."""
from __future__ import annotations

from engine.outputs import SchedulerOutput


class RunnerLengths:
    """``lengths[request_id] = [num_tokens, num_output_tokens]`` of every request the runner
    holds. :meth:`update` applies a step's diff; :meth:`sampling` says which requests sample
    in it and counts the token each will get."""

    __slots__ = ("lengths",)

    def __init__(self) -> None:
        self.lengths: dict[str, list[int]] = {}

    def update(self, sched: SchedulerOutput) -> None:
        """Drop ``finished_req_ids``, hold ``scheduled_new_reqs`` (their prompt and output so
        far) and count tokens the runner did not sample itself (``new_token_ids``)."""
        lengths = self.lengths
        for rid in sched.finished_req_ids:
            lengths.pop(rid, None)
        for new in sched.scheduled_new_reqs:
            n_out = len(new.output_token_ids)
            lengths[new.request_id] = [len(new.prompt_token_ids) + n_out, n_out]
        for rid, toks in sched.scheduled_cached_reqs.new_token_ids.items():
            held = lengths[rid]
            held[0] += len(toks)
            held[1] += len(toks)

    def sampling(self, sched: SchedulerOutput) -> list[tuple[str, int]]:
        """``(request_id, output index)`` of every request that samples in ``sched``: those
        whose chunk reaches their last known token, in batch order, then the sequences of
        ``parallel_samples``. Each one's counts grow by the token it is about to get. Raises
        ``KeyError`` for a request not held (call :meth:`update` first)."""
        lengths = self.lengths
        out = []
        for s in sched.scheduled:
            held = lengths[s.request_id]
            if s.num_computed_tokens + s.num_tokens == held[0]:
                out.append((s.request_id, held[1]))
                held[0] += 1
                held[1] += 1
        for _, rids in sched.parallel_samples:
            for rid in rids:
                held = lengths[rid]
                out.append((rid, held[1]))
                held[0] += 1
                held[1] += 1
        return out
