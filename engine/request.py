"""Requests, their sampling parameters, states and finish reasons (vLLM v1 names). No torch."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence as SequenceABC
from typing import TYPE_CHECKING, Protocol, Sequence

from engine.vocab import FINISH_REASON_OF, FinishReason, RequestStatus

if TYPE_CHECKING:
    from engine.sequence_group import SequenceGroup


class DeferredPrompt(Protocol):
    """A prompt made when its request arrives at the engine (``LLMEngine.add_request(None, ...,
    deferred=...)``), so requests that have not arrived hold no token ids: a trace replay's
    memory then follows the live requests, not the trace
    (``recordings.workloads.workload.WorkloadRequest`` is one).

    One that also has ``ids_only`` True (its text is always None) and ``num_prompt_tokens`` is
    made later still, on first use (:class:`PromptIdsOnUse`): a request waiting in an overloaded
    queue holds no ids either."""

    def make_prompt(self) -> tuple[Sequence[int], str | None]:
        """(token ids, text or None); the same every call."""
        ...


class PromptIdsOnUse(SequenceABC):
    """A request's prompt token ids, made by ``deferred.make_prompt()`` the first time anything
    reads them (not their length): under prefix caching when the scheduler first hashes the
    request's blocks, else when a runner reads its tokens, or a recorder that stores prompts. A
    simulated request that never leaves the waiting queue of an overloaded replay never makes them
    (a Mooncake conversation prompt is ~12k tokens, 48 kB as ``array('i')``). Once made they are
    kept until the request is dropped. ``len()`` is ``num_prompt_tokens``; equality compares the
    made ids with ``other`` as the made sequence does (``array('i')`` or list)."""

    __slots__ = ("_deferred", "_n", "_ids")

    def __init__(self, deferred: DeferredPrompt, num_prompt_tokens: int) -> None:
        self._deferred, self._n, self._ids = deferred, num_prompt_tokens, None

    @property
    def is_made(self) -> bool:
        """True once the ids exist."""
        return self._ids is not None

    @property
    def ids(self) -> Sequence[int]:
        """The made ids (made now if they were not). Raises ``ValueError`` if the deferred prompt
        makes a different number of ids than its ``num_prompt_tokens``."""
        if self._ids is None:
            ids = self._deferred.make_prompt()[0]
            if len(ids) != self._n:
                raise ValueError(f"a deferred prompt of {self._n} tokens made {len(ids)} ids")
            self._ids = ids
        return self._ids

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        return self.ids[index]

    def __iter__(self):
        return iter(self.ids)

    def __eq__(self, other) -> bool:
        return self.ids == (other.ids if isinstance(other, PromptIdsOnUse) else other)

    __hash__ = None   # equal to a list: unhashable like one

    def __repr__(self) -> str:
        return f"PromptIdsOnUse({self._n} tokens, {'made' if self.is_made else 'not made'})"


MAX_PENALTY = 2.0   # |frequency_penalty| and |presence_penalty| limit (vLLM, OpenAI)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each output token.

    ``temperature`` 0 means greedy. ``top_k`` 0 and ``top_p`` 1.0 disable those filters.
    ``seed`` makes one request's sampling reproducible whatever else is in the batch.
    ``ignore_eos`` keeps generating past EOS (trace replays use it so lengths follow the trace).
    ``stop`` strings end the request; the matched string is cut from the output unless
    ``include_stop_str_in_output``. ``priority`` orders the waiting queue under
    ``policy="priority"`` (lower value first, ties by arrival; any other policy rejects a nonzero
    value at admission). ``n`` > 1 samples ``n`` sequences from the one prompt (parallel
    sampling, ``engine.sequence_group``: the prompt is prefilled once and its KV blocks shared).

    Penalties, with vLLM's names and meanings (applied to the logits before temperature, top-k and
    top-p, so they also steer greedy decoding; see ``engine.runner.penalties``):
    ``repetition_penalty`` > 0 (1.0 = off) divides the positive logits and multiplies the negative
    ones of every token seen in the prompt or the output so far (Keskar et al., CTRL, 2019);
    ``frequency_penalty`` in [-2, 2] (0 = off) subtracts ``penalty * count`` for each token's
    count in the output so far; ``presence_penalty`` in [-2, 2] (0 = off) subtracts ``penalty``
    once for every token present in the output (OpenAI's API semantics).

    Raises ``ValueError`` naming the field and its limit on out-of-range values.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    priority: int = 0
    n: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"n (sequences sampled per prompt) must be an integer >= 1, got {self.n!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be > 0 (1.0 disables it), got {self.repetition_penalty}")
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not -MAX_PENALTY <= value <= MAX_PENALTY:   # also refuses NaN
                raise ValueError(f"{name} must be in [-{MAX_PENALTY:g}, {MAX_PENALTY:g}] (0 disables it), "
                                 f"got {value}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        """True when any of the three penalties changes the logits."""
        return (self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0
                or self.presence_penalty != 0.0)


@dataclass(eq=False)
class Request:
    """One generation request and its progress.

    ``num_computed_tokens`` counts tokens whose KV is in the cache; it catches up to
    ``num_tokens`` (prompt + output so far) one scheduled chunk at a time, which covers prefill,
    chunked prefill, recompute after preemption and decode with one rule (vLLM v1).
    Times are seconds on the engine clock (steps under the virtual clock). ``priority`` starts as
    ``sampling_params.priority`` and may be changed while the request waits; ``seq`` is its
    arrival number in the scheduler (ties of equal priority go by it).
    ``block_hashes`` are the prefix hashes of its full blocks (``engine.kv.prefix_hash``), computed
    once as its tokens become known and kept across preemptions (vLLM keeps them the same way).
    A request is an entity: equal only to itself (and hashable), so the scheduler's queue
    operations compare identities, not every field. ``group`` is the
    :class:`engine.sequence_group.SequenceGroup` of a sequence of a parallel-sampling prompt
    (``SamplingParams.n`` > 1), None otherwise.
    """

    request_id: str
    prompt_token_ids: Sequence[int]   # a list, or a compact array('i') for synthetic prompts
    sampling_params: SamplingParams
    arrival_time: float = 0.0
    arrival_step: int = 0
    prompt_text: str | None = None
    eos_token_id: int | None = None
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    num_computed_tokens: int = 0
    slot: int | None = None
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    first_token_step: int | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    error: str | None = None
    stop_reason: str | None = None
    priority: int | None = None
    seq: int = -1
    num_cached_tokens: int = -1       # prefix-cache hit (tokens) at its first admission; -1 before
    block_hashes: list[int] = field(default_factory=list)   # chained hashes of its full blocks
    group: SequenceGroup | None = None                        # parallel sampling: its sequence group

    def __post_init__(self) -> None:
        if self.priority is None:
            self.priority = self.sampling_params.priority

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt + output token ids as one new list (O(num_tokens))."""
        return [*self.prompt_token_ids, *self.output_token_ids]

    def token_ids(self, start: int, end: int) -> list[int]:
        """Token ids ``[start, end)`` of prompt + output, without building the whole sequence
        (a decode step asks for one token of a long prompt + output)."""
        p = len(self.prompt_token_ids)
        if end <= p:
            return list(self.prompt_token_ids[start:end])
        head = list(self.prompt_token_ids[start:p]) if start < p else []
        return head + self.output_token_ids[max(0, start - p):end - p]

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def is_prefill(self) -> bool:
        """True until the prompt (or, after a recompute preemption, prompt + output) is in the KV
        cache; afterwards each step decodes the one token sampled last."""
        out = self.output_token_ids
        return not (out and self.num_computed_tokens == len(self.prompt_token_ids) + len(out) - 1)

    @property
    def finish_reason(self) -> FinishReason | None:
        return FINISH_REASON_OF.get(self.status)

    @property
    def ttft(self) -> float | None:
        """Time to first token: arrival -> first output token (engine clock units)."""
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def mean_itl(self) -> float | None:
        """Mean inter-token latency between consecutive output tokens (engine clock units)."""
        if len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (len(self.token_times) - 1)
