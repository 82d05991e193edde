"""Parallel sampling (``SamplingParams.n`` > 1): the ``n`` sequences of one prompt as a group.

A prompt added with ``n`` > 1 becomes ``n`` requests, the group's *sequences*, with ids
``<id>#0`` ... ``<id>#<n-1>`` (:func:`sequence_id`; ``<id>`` itself names the whole group in the
engine's abort, pause, resume and set-priority calls). Sequence ``k`` samples with its own
random stream: ``seed + k`` when the prompt is seeded (vLLM v1's rule in
``vllm/v1/engine/parallel_sampling.py``), else a stream of its own from the runner's base seed;
with greedy sampling every sequence equals the single-sequence output.

How the scheduler serves a group (``engine.sched.groups``; vLLM v0's ``SequenceGroup`` with
``fork`` and copy-on-write ``blocks_to_copy``, Kwon et al., SOSP 2023, section 4.4): the group
is admitted as a whole, every sequence taking a batch slot; its *head* (the first sequence not
finished) prefills the prompt once, in one step; the others are forked onto it in that step:
they share the prompt's full blocks (reference counts) and get a block of their own for its
last, partial block, which the runner copies from the head's (``SchedulerOutput.blocks_to_copy``)
before the next forward pass. In the prefill step each sequence samples its first token from
the head's last logits row (``SchedulerOutput.parallel_samples``). The group is preempted,
swapped, resumed and paused as a whole; each sequence finishes on its own.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from engine.request import Request, SamplingParams

SEPARATOR = "#"


def sequence_id(parent_id: str, index: int) -> str:
    """The request id of sequence ``index`` of the group ``parent_id``: ``<parent_id>#<index>``."""
    return f"{parent_id}{SEPARATOR}{index}"


def sequence_ids(parent_id: str, n: int) -> list[str]:
    """The request ids of a prompt added as ``parent_id`` with ``SamplingParams.n = n``:
    ``[parent_id]`` itself when ``n`` is 1, else ``n`` sequence ids."""
    return [parent_id] if n == 1 else [sequence_id(parent_id, k) for k in range(n)]


def parent_id_of(request_id: str) -> str:
    """The group id of a sequence id (the part before the last ``#``), or the id itself."""
    return request_id.rpartition(SEPARATOR)[0] or request_id


def sequence_params(params: SamplingParams, index: int) -> SamplingParams:
    """Sampling parameters of sequence ``index``: ``params`` with ``n = 1`` and, when seeded,
    ``seed + index``."""
    seed = None if params.seed is None else params.seed + index
    return dataclasses.replace(params, n=1, seed=seed)


class SequenceGroup:
    """The ``n`` sequences (:class:`engine.request.Request`, ``members`` in index order) sampled
    from one prompt, added as ``parent_id``. Finished members stay listed (their outputs are
    the group's); :meth:`live` are the others, and the first of them is the group's head.
    ``error`` is set once the group can never be served (every sequence fails with it)."""

    __slots__ = ("parent_id", "members", "error")

    def __init__(self, parent_id: str, members: Sequence[Request] = ()) -> None:
        self.parent_id = parent_id
        self.members: list[Request] = list(members)
        self.error: str | None = None

    @property
    def n(self) -> int:
        return len(self.members)

    def live(self) -> list[Request]:
        """The members not finished, in index order."""
        return [m for m in self.members if not m.is_finished]

    @property
    def is_finished(self) -> bool:
        """True once every sequence finished (the prompt's parallel sampling is done)."""
        return all(m.is_finished for m in self.members)

    def head(self) -> Request | None:
        """The first member not finished (None once all are)."""
        return next((m for m in self.members if not m.is_finished), None)

    def __repr__(self) -> str:
        return f"SequenceGroup({self.parent_id!r}, {[m.request_id for m in self.members]})"


def make_sequences(request_id: str, prompt_token_ids: Sequence[int], params: SamplingParams,
                   **request_fields) -> list[Request]:
    """The requests of one prompt: one :class:`Request` named ``request_id`` when
    ``params.n`` is 1 (no group), else ``params.n`` sequences (ids :func:`sequence_ids`,
    parameters :func:`sequence_params`) linked by one :class:`SequenceGroup`.
    ``request_fields`` are further ``Request`` fields (arrival time, prompt text, EOS id,
    priority), the same for every sequence."""
    if params.n == 1:
        return [Request(request_id, prompt_token_ids, params, **request_fields)]
    group = SequenceGroup(request_id)
    group.members = [Request(rid, prompt_token_ids, sequence_params(params, k), group=group,
                             **request_fields)
                     for k, rid in enumerate(sequence_ids(request_id, params.n))]
    return group.members


def parallel_sample_rows(parallel_samples, sampled_ids: Sequence[str]) -> list[tuple[int, str]]:
    """For a runner: ``(row, sequence id)`` for every sequence of
    ``SchedulerOutput.parallel_samples``, ``row`` being the index in ``sampled_ids`` (the
    requests the runner samples this step, in its row order) of the request whose last logits
    row the sequence samples its first token from. Raises ``KeyError`` if that request is not
    sampled (a scheduler bug: its chunk must end its prompt)."""
    position = {rid: i for i, rid in enumerate(sampled_ids)}
    return [(position[head], rid) for head, rids in parallel_samples for rid in rids]
