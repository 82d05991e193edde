"""Admission control: who is turned away before being served, and why. Pure Python.

Two rules, each off by default (``EngineConfig``; vLLM has neither: its scheduler queues every
request until it is served or the client gives up):

- **Queue timeout** (``max_queue_time``): a request still waiting for its *first* admission
  ``max_queue_time`` after its arrival (engine clock: seconds, steps under the virtual clock) is
  rejected at the start of the next step. A request that was admitted once (running, preempted,
  swapped, paused and resumed) is never timed out: it has been served and holds its place.
  :class:`QueueDeadlines` finds the expired ones in O(log n) per request (a heap by deadline).
- **SLO admission** (``admission="slo"``): when a request arrives, :class:`TtftPredictor` predicts
  its time to first token from what is ahead of it (the running requests' remaining prefill, the
  waiting requests it queues behind, the batch slots and KV blocks it must wait for) and a
  step-time model (the simulator's roofline, or the cost fitted by ``batchscope fit``); the request
  is rejected at once when the prediction exceeds ``slo_ttft_ms``. This is Mooncake's early
  rejection (Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST 2025, §7:
  prediction-based early rejection under overload): a request that would miss its SLO anyway is
  refused before it takes prefill time from requests that can still meet theirs.

Every rejection is recorded twice, so old and new readers both understand it: an
``admission_rejected`` event whose detail is the compact JSON of a :class:`Rejection` (reason,
prediction or time waited, the limit, the queue ahead), then the usual ``rejected`` finish event
(``FINISHED_ERROR``, the error naming the rule and its numbers: :meth:`Rejection.describe`).

The prediction model (:meth:`TtftPredictor.predict`), in steps of the scheduler's own rules:

- compute: the prefill tokens ahead ``Q`` (running requests' remaining prefill + every waiting
  request it queues behind + its own prompt) are computed ``C = max_num_batched_tokens - D``
  per step, ``D`` being the running requests that decode one token each per step; that is
  ``ceil(Q / C)`` mixed steps of one ``C``-token chunk plus ``D`` decodes.
- capacity: when the slots (``max_num_seqs``) or free KV blocks cannot hold the requests ahead
  and its own prompt, it waits for running requests to finish, shortest remaining output first
  (``max_tokens`` is taken as the output length: exact for trace replays, which ignore EOS, an
  upper bound otherwise); past what the running requests free, each further round of
  ``max_num_seqs`` requests (or of the whole cache) costs the mean output length of the requests
  ahead in decode steps. Then its own prefill.
- TTFT = time already spent since arrival + ``max(compute, capacity)``.

It is deliberately coarse (one step shape, no prefix-cache hits, no growth of the running
requests' KV): a prediction is made once per arrival in O(running + priorities) Python work, the
queue ahead summed once per step.
"""
from __future__ import annotations

import heapq
import itertools
import json
import math
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple

from engine.vocab import AdmissionRejection

if TYPE_CHECKING:
    from engine.request import Request


# step_time(num_tokens, num_seqs, attn_pairs, context_tokens) -> seconds of one step, as
# ``engine.sim.cost_model.CostModel.predict_step_s`` prices it
StepTimeFn = Callable[[int, int, int, int], float]


class Rejection(NamedTuple):
    """Why a request was turned away. ``reason`` is an ``AdmissionRejection`` (``queue_timeout``,
    ``slo_ttft``);
    ``value`` is the time waited (timeout) or the predicted TTFT (SLO) and ``limit`` the
    ``max_queue_time`` or the SLO, both on the engine clock (seconds; steps under the virtual
    clock); ``num_ahead`` / ``num_tokens_ahead`` are the requests and prefill tokens it queued
    behind (running requests' remaining prefill included)."""

    reason: str
    value: float
    limit: float
    num_ahead: int = 0
    num_tokens_ahead: int = 0

    def to_detail(self) -> str:
        """The ``admission_rejected`` event's detail: compact JSON."""
        return json.dumps({"reason": self.reason, "value": round(self.value, 6), "limit": self.limit,
                           "ahead": self.num_ahead, "tokens_ahead": self.num_tokens_ahead},
                          separators=(",", ":"))

    def describe(self, unit: str = "s") -> str:
        """One line for people (the request's ``error``): 'rejected at arrival: predicted TTFT
        12.4 s exceeds the TTFT SLO of 2 s (31 requests, 40,210 prefill tokens ahead)'."""
        ahead = f"{self.num_ahead} requests, {self.num_tokens_ahead} prefill tokens ahead"
        if self.reason == AdmissionRejection.SLO_TTFT:
            return (f"rejected at arrival: predicted TTFT {self.value:.3g} {unit} exceeds the TTFT SLO "
                    f"of {self.limit:g} {unit} ({ahead})")
        if self.reason == AdmissionRejection.QUEUE_TIMEOUT:
            return (f"timed out: waited {self.value:.3g} {unit} without being admitted, over "
                    f"max_queue_time {self.limit:g} {unit} ({self.num_ahead} requests ahead)")
        return f"rejected by admission control: {self.reason}"


def _reason(word: str) -> AdmissionRejection | str:
    """A reason as its member; a word of a newer file stays text."""
    try:
        return AdmissionRejection(word)
    except ValueError:
        return word


def rejection_info(detail: str) -> Rejection | None:
    """The :class:`Rejection` of an ``admission_rejected`` event's detail, or None for damaged
    JSON."""
    try:
        d = json.loads(detail)
        return Rejection(_reason(str(d["reason"])), float(d["value"]), float(d["limit"]),
                         int(d.get("ahead", 0)), int(d.get("tokens_ahead", 0)))
    except (ValueError, KeyError, TypeError):
        return None


class QueueDeadlines:
    """The ``max_queue_time`` deadlines of requests waiting for their first admission: a heap of
    (arrival + max_queue_time, arrival number, request). Entries of requests admitted or finished
    meanwhile are dropped when they reach the top (they are checked, not removed eagerly), so
    the heap holds at most the requests that arrived within the last ``max_queue_time``."""

    def __init__(self, max_queue_time: float) -> None:
        self.max_queue_time = max_queue_time
        self._heap: list[tuple[float, int, Request]] = []

    def add(self, req: Request) -> None:
        heapq.heappush(self._heap, (req.arrival_time + self.max_queue_time, req.seq, req))

    def expired(self, now: float, is_waiting_first: Callable[[Request], bool]) -> list[Request]:
        """The requests whose deadline is before ``now`` and that still wait for their first
        admission (``is_waiting_first``), in deadline order."""
        out = []
        heap = self._heap
        while heap and heap[0][0] < now:
            req = heapq.heappop(heap)[2]
            if is_waiting_first(req):
                out.append(req)
        return out


class _Ahead:
    """Sums over a set of waiting requests: how many, their prefill tokens, the KV blocks of
    their whole prefill and their remaining output tokens."""

    __slots__ = ("count", "tokens", "blocks", "output")

    def __init__(self) -> None:
        self.count = self.tokens = self.blocks = self.output = 0

    def add(self, num_tokens: int, blocks: int, output: int) -> None:
        self.count += 1
        self.tokens += num_tokens
        self.blocks += blocks
        self.output += output


class _Load:
    """The scheduler's load as the predictor sees it, summed once per step."""

    def __init__(self, running: list, waiting: Iterable, swapped: Iterable, blocks_for, by_priority: bool):
        self.num_running = len(running)
        self.num_decoding = sum(1 for r in running if not r.is_prefill)
        self.prefill_left = sum(r.num_tokens - r.num_computed_tokens for r in running if r.is_prefill)
        self.context = sum(r.num_computed_tokens for r in running)
        # (remaining output tokens, blocks held when it finishes): who frees what, and when
        self.finishes = sorted((max(1, r.sampling_params.max_tokens - r.num_output_tokens),
                                blocks_for(r.num_prompt_tokens + r.sampling_params.max_tokens))
                               for r in running)
        self.by_priority = by_priority
        self.ahead: dict[int, _Ahead] = {}
        for r in itertools.chain(swapped, waiting):
            self.add(r, blocks_for)

    def add(self, r: Request, blocks_for) -> None:
        key = r.priority if self.by_priority else 0
        a = self.ahead.get(key)
        if a is None:
            a = self.ahead[key] = _Ahead()
        a.add(r.num_tokens - r.num_computed_tokens, blocks_for(r.num_tokens),
              max(1, r.sampling_params.max_tokens - r.num_output_tokens))

    def ahead_of(self, priority: int) -> _Ahead:
        """Sums over the requests a new arrival of ``priority`` queues behind (all of them,
        unless the queue is by priority: those of equal or higher priority)."""
        total = _Ahead()
        for key, a in self.ahead.items():
            if not self.by_priority or key <= priority:
                total.count += a.count
                total.tokens += a.tokens
                total.blocks += a.blocks
                total.output += a.output
        return total


class TtftPredictor:
    """Predicts a new request's TTFT (see the module docstring for the model) in the
    scheduler's current config (live knob changes included). ``step_time`` prices one step (:data:`StepTimeFn`, seconds). The queue ahead is summed on the first
    prediction after :meth:`invalidate` (the scheduler calls it every step) and kept up to date
    by :meth:`accepted` for the arrivals admitted meanwhile."""

    def __init__(self, step_time: StepTimeFn) -> None:
        self.step_time = step_time
        self._load: _Load | None = None

    def invalidate(self) -> None:
        self._load = None

    def load(self, scheduler) -> _Load:
        if self._load is None:
            self._load = _Load(scheduler.running, scheduler.waiting, scheduler.swapped,
                               scheduler.kv.blocks_for, scheduler.policy == "priority")
        return self._load

    def accepted(self, scheduler, req: Request) -> None:
        """``req`` joined the waiting queue: later arrivals of this step queue behind it."""
        if self._load is not None:
            self._load.add(req, scheduler.kv.blocks_for)

    def predict(self, scheduler, req: Request, now: float) -> Rejection:
        """The predicted TTFT of ``req`` arriving now (engine clock), as a :class:`Rejection` of
        reason ``slo_ttft`` (``value`` the prediction, ``limit`` the SLO in seconds); the
        caller rejects when ``value > limit``."""
        c, kv = scheduler.config, scheduler.kv
        load = self.load(scheduler)
        ahead = load.ahead_of(req.priority)
        own = req.num_tokens
        budget = c.max_num_batched_tokens
        decoding = min(load.num_decoding, budget - 1)
        per_step = max(1, budget - decoding)                   # prefill tokens per step
        tokens = load.prefill_left + ahead.tokens + own
        chunk = min(per_step, tokens)
        mixed = self.step_time(decoding + chunk, decoding + 1,
                               load.context + decoding + chunk * (chunk + 1) // 2,
                               load.context + decoding + chunk)
        num_steps = math.ceil(tokens / per_step)           # steps that carry the prefill ahead
        wait = 0.0
        slots_short = load.num_running + ahead.count + 1 - c.max_num_seqs
        watermark = int(c.kv_watermark * kv.num_usable_blocks) if load.num_running else 0
        blocks_short = ahead.blocks + kv.blocks_for(own) + watermark - kv.num_free_blocks
        if slots_short > 0 or blocks_short > 0:             # steps until the running free enough
            for remaining, blocks in load.finishes:
                slots_short -= 1
                blocks_short -= blocks
                if slots_short <= 0 and blocks_short <= 0:
                    wait = remaining
                    break
            else:                       # past what the running requests free: rounds of the queue
                mean_output = ahead.output / ahead.count if ahead.count else req.sampling_params.max_tokens
                rounds = math.ceil(max(slots_short / c.max_num_seqs, blocks_short / kv.num_usable_blocks, 0))
                wait = (load.finishes[-1][0] if load.finishes else 0) + rounds * mean_output
            wait += math.ceil(own / per_step)                 # then its own prefill
        # every step decodes; num_steps of them also carry a prefill chunk
        n = max(load.num_running, 1)
        decode = self.step_time(n, n, load.context + n, load.context + n)
        predicted = max(num_steps, wait) * decode + num_steps * max(mixed - decode, 0.0)
        waited = max(0.0, now - req.arrival_time)
        return Rejection(AdmissionRejection.SLO_TTFT, waited + predicted, c.slo_ttft_ms / 1e3,
                         load.num_running + ahead.count, load.prefill_left + ahead.tokens)
