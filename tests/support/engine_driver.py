"""The one engine driver of the tests: a real ``LLMEngine`` (scheduler, block pool) over the fake
runner of :mod:`tests.support.fake_runner` (no torch), stepped one step at a time, with requests
arriving and a user acting between steps, recorded to a file when asked.

:class:`EngineRun` is the loop's state: the engine, its runner and recorder, every
:class:`StepRecord`, the engine's state after each step (before the user acts), every prompt as
added and every finished request. Two kinds of workload drive it:

- a scripted one, :func:`run_workload`: :class:`Arrival` (added just before step ``arrive_step``
  is scheduled, in list order, as the cases README ``../shared/cases/README.md`` defines) and
  :class:`Action` (abort / pause / resume / ... applied just before step ``step``), with the
  invariants G1-G6 checked around every step (:class:`engine_invariants.InvariantChecker`) and
  outputs compared with the README's reference run (G7, :func:`reference_outputs`);
- a seeded random one, :func:`run_engine`: requests arriving over time (a few too long for the
  cache: rejected), chunked prefill, preemptions when the blocks run out, stop strings, a "user"
  who pauses, resumes and aborts requests and injects new ones between steps, and forward passes
  that fail at ``fail_steps``; the engine checks its own invariants every step
  (``check_invariants=True``). Under the virtual clock the same arguments give the same run, up to
  the wall-clock ``*_ns`` fields (:func:`without_wall_times`).
"""
from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import NewToken, StepRecord
from engine.request import Request, SamplingParams
from engine.run_info import RunInfo
from engine.sequence_group import sequence_ids, sequence_params
from engine.state.state import EngineState
from engine.vocab import RequestStatus
from recordings.file.writer import RecordingWriter
from tests.support.engine_invariants import FINISH_EVENTS, InvariantChecker
from tests.support.fake_runner import FakeRunner, ToyTokenizer, hash_next_token

ACTIONS = ("abort", "pause", "resume", "move_to_front")
# Actions with a value: a request's new priority (policy "priority"; refused under the others),
# and the live knob max_num_seqs (request_id unused).
VALUE_ACTIONS = ("set_priority", "max_num_seqs")
WALL_TIME_FIELDS = ("start_ns", "end_ns", "schedule_ns", "forward_ns", "update_ns", "recorder_wait_ns")

TOKENIZER = ToyTokenizer({i: chr(ord("a") + i % 26) for i in range(1000)})
STARTED_AT = "2024-01-01T00:00:00+00:00"
SMALL_SEED = 15  # a small run with arrival, rejection, preemption, pause/resume, abort, failed
#                  steps, length and stop-string finishes (test_small_run_covers_the_lifecycle)


@dataclass(frozen=True)
class Arrival:
    request_id: str
    arrive_step: int
    prompt: tuple[int, ...]
    params: SamplingParams


@dataclass(frozen=True)
class Action:
    step: int
    kind: str            # one of ACTIONS or VALUE_ACTIONS
    request_id: str
    value: int = 0       # the VALUE_ACTIONS' value


def without_wall_times(record: StepRecord) -> StepRecord:
    """``record`` with its wall-clock ``*_ns`` fields zeroed (what two identical runs share)."""
    return dataclasses.replace(record, **{k: 0 for k in WALL_TIME_FIELDS})


def distinct_prompt(index: int, length: int, vocab: int = 1000) -> tuple[int, ...]:
    """A prompt of ``length`` ids that differs from every other index's prompt from its first token."""
    return tuple((index * 131 + 17 * j + j * j) % vocab for j in range(length)) if length else ()


def solo_arrivals(arrivals: Sequence[Arrival]) -> list[Arrival]:
    """Each parallel-sampling prompt (``n`` > 1) as ``n`` separate requests with its sequences'
    ids and parameters (``engine.sequence_group``): the reference of a group's outputs."""
    return [Arrival(rid, a.arrive_step, a.prompt, sequence_params(a.params, k) if a.params.n > 1 else a.params)
            for a in arrivals for k, rid in enumerate(sequence_ids(a.request_id, a.params.n))]


def action_call(engine: LLMEngine, kind: str):
    """The engine's call for action ``kind`` (one of :data:`ACTIONS`), request id -> bool.
    ``move_to_front`` under a policy other than ``fcfs`` must be refused with a ``ValueError``
    (asserted) and then changes nothing (False)."""
    if kind != "move_to_front":
        return getattr(engine, f"{kind}_request")
    if engine.config.policy == "fcfs":
        return engine.move_to_front

    def refused(request_id: str) -> bool:
        try:
            engine.move_to_front(request_id)
        except ValueError as e:
            assert "policy='fcfs'" in str(e), e
            return False
        raise AssertionError(f"move_to_front accepted under policy {engine.config.policy!r}")
    return refused


def apply_action(engine: LLMEngine, act: Action) -> bool:
    """Do a user action between steps; whether the engine took it. ``set_priority`` under a policy
    other than ``priority`` must be refused with ``ValueError`` naming the policy."""
    if act.kind == "max_num_seqs":
        return bool(engine.set_knobs(max_num_seqs=act.value))
    if act.kind == "set_priority":
        if engine.config.policy != "priority":
            with pytest.raises(ValueError, match="policy"):
                engine.set_priority(act.request_id, act.value)
            return False
        return engine.set_priority(act.request_id, act.value)
    return action_call(engine, act.kind)(act.request_id)


@dataclass
class EngineRun:
    """One engine driven step by step: ``records[k]`` is step k, ``states[k]`` the engine's state
    right after it (when kept), ``prompts`` every request as added, ``finished`` the requests that
    finished, in finishing order (``LLMEngine.collect_finished``; ``engine.on_finished`` stays
    free for a checker). ``writer records the run to ``path`` when one was given."""

    config: EngineConfig
    engine: LLMEngine
    runner: Any
    run_info: RunInfo | Mapping[str, Any]
    initial: EngineState
    writer: RecordingWriter | None = None
    path: Path | None = None
    records: list[StepRecord] = field(default_factory=list)
    states: list[EngineState] = field(default_factory=list)
    prompts: dict[str, list[int]] = field(default_factory=dict)
    finished: dict[str, Request] = field(default_factory=dict)
    prefixes: list[list[int]] = field(default_factory=list)       # shared prompt prefixes (run_engine)
    keep_requests: bool = True                                    # fill prompts and finished

    @classmethod
    def start(cls, config: EngineConfig, *, runner=None, next_token_fn=hash_next_token, fail_steps=(),
              tokenizer=None, eos_token_id: int | None = None, record_to: str | Path | None = None,
              run_info: RunInfo | Mapping[str, Any] | None = None, writer_kwargs: dict | None = None,
              keep_requests: bool = True) -> EngineRun:
        """An engine on ``config`` with ``runner`` (default: a :class:`FakeRunner` over
        ``config.num_gpu_blocks`` blocks with ``next_token_fn`` and ``fail_steps``), recorded to
        the new file ``record_to`` if given (``run_info``, default the config and model "fake";
        ``writer_kwargs`` go to :class:`RecordingWriter`). ``keep_requests=False``: ``prompts``
        and ``finished`` stay empty (long runs whose memory must follow the live requests, as the
        UI bench's). Raises ``ValueError`` when ``config.num_gpu_blocks`` is not set (it sizes
        the cache)."""
        blocks = config.num_gpu_blocks
        if blocks is None:
            raise ValueError("config.num_gpu_blocks is None: the driven engine needs a fixed cache size")
        if runner is None:
            runner = FakeRunner(blocks, config.block_size, next_token_fn, fail_steps=fail_steps,
                                num_cpu_blocks=config.num_cpu_blocks)
        info = {"config": config.to_dict(), "model": "fake"} if run_info is None else run_info
        writer = None if record_to is None else RecordingWriter(record_to, info, **(writer_kwargs or {}))
        try:
            engine = LLMEngine(config, runner, blocks, tokenizer=tokenizer, eos_token_id=eos_token_id,
                               recorder=writer)
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        return cls(config, engine, runner, info, engine.state(), writer,
                   None if record_to is None else Path(record_to),
                   finished=engine.collect_finished() if keep_requests else {}, keep_requests=keep_requests)

    @property
    def final(self) -> EngineState:
        return self.states[-1] if self.states else self.initial

    @property
    def settled(self) -> bool:
        """Nothing left to run and no change (an abort after the last step...) waiting for a step."""
        return not self.engine.has_unfinished and self.engine.state() == self.engine.timeline.snapshot()

    def add(self, prompt: Sequence[int], params: SamplingParams, *, request_id: str | None = None,
            arrival_time: float | None = None) -> str:
        """Add a request (engine clock ``arrival_time``; None = now); returns its id."""
        rid = self.engine.add_request(list(prompt), params, request_id=request_id, arrival_time=arrival_time)
        if self.keep_requests:
            self.prompts[rid] = list(prompt)
        return rid

    def act(self, act: Action) -> bool:
        """Do a user action between steps (:func:`apply_action`); whether the engine took it."""
        return apply_action(self.engine, act)

    def step(self, keep_state: bool = True) -> StepRecord:
        """One engine step; its record (and, with ``keep_state``, the state after it) is kept."""
        rec = self.engine.step()
        self.records.append(rec)
        if keep_state:
            self.states.append(self.engine.state())
        return rec

    def close(self) -> None:
        """Close the recording, if any."""
        if self.writer is not None:
            self.writer.close()


# --- scripted workloads, checked every step -------------------------------------------------------
@dataclass
class RunResult:
    engine: LLMEngine
    runner: object
    records: list[StepRecord]
    action_results: list[tuple[Action, bool]]
    streamed: dict[str, list[NewToken]]
    rejected: set[str]
    states: list[EngineState] = field(default_factory=list)   # live state after each step
    recording: Path | None = None                             # the file, if recorded
    all_requests: dict[str, Request] = field(default_factory=dict)

    @property
    def requests(self) -> dict[str, Request]:
        """Every request of the run (live ones and those handed to ``on_finished``), arrival order."""
        return self.all_requests

    def outputs(self) -> dict[str, list[int]]:
        return {rid: list(r.output_token_ids) for rid, r in self.requests.items()}

    def scheduled_steps(self, request_id: str) -> list[int]:
        return [r.step for r in self.records if any(s.request_id == request_id for s in r.scheduled)]

    def finish_step(self, request_id: str) -> int | None:
        for r in self.records:
            if any(e.request_id == request_id and e.kind in FINISH_EVENTS for e in r.events):
                return r.step
        return None

    def token_steps(self, request_id: str) -> list[int]:
        return [r.step for r in self.records for t in r.new_tokens if t.request_id == request_id]

    @property
    def num_preemptions(self) -> int:
        return sum(r.num_preemptions for r in self.records)


def run_workload(config: EngineConfig, arrivals: Sequence[Arrival], actions: Sequence[Action] = (), *,
                 runner=None, tokenizer=None, eos_token_id: int | None = None,
                 next_token_fn=hash_next_token, max_steps: int = 5000,
                 resume_paused_at_end: bool = True, record_to: str | Path | None = None,
                 keyframe_interval: int = 16) -> RunResult:
    """Run ``arrivals`` and ``actions`` to completion with invariant checks after every step.

    ``config.num_gpu_blocks`` sizes the cache. ``runner`` defaults to a :class:`FakeRunner`.
    Once no arrival or action is left, paused requests are resumed (if ``resume_paused_at_end``)
    so the run drains. Raises ``AssertionError`` if it has not drained after ``max_steps`` (G5).
    ``record_to``: also record the run to this (new) file, closed before returning.
    """
    run = EngineRun.start(config, runner=runner, next_token_fn=next_token_fn, tokenizer=tokenizer,
                          eos_token_id=eos_token_id, record_to=record_to,
                          writer_kwargs={"keyframe_interval": keyframe_interval})
    try:
        return _drive(run, arrivals, actions, max_steps, resume_paused_at_end)
    finally:
        run.close()


def _drive(run: EngineRun, arrivals: Sequence[Arrival], actions: Sequence[Action],
           max_steps: int, resume_paused_at_end: bool) -> RunResult:
    engine = run.engine
    checker = InvariantChecker(engine, run.runner)
    by_step: dict[int, list] = defaultdict(list)
    for a in arrivals:
        by_step[a.arrive_step].append(a)
    for act in actions:
        by_step[act.step].append(act)
    last = max(by_step, default=-1)
    results: list[tuple[Action, bool]] = []
    step = 0
    while True:
        for item in by_step.get(step, []):
            if isinstance(item, Arrival):
                run.add(item.prompt, item.params, request_id=item.request_id)
                checker.after_add(item)
            else:
                results.append((item, run.act(item)))
                checker.after_action(item, results[-1][1])
        if step > last:
            s = engine.scheduler
            if s.paused and not s.running and not s.waiting and resume_paused_at_end:
                for r in list(s.paused):
                    if r.status is RequestStatus.PAUSED:     # (a group resumes as a whole)
                        assert engine.resume_request(r.request_id)
            if not engine.has_unfinished or (s.paused and not s.running and not s.waiting):
                break
        assert step < max_steps, f"G5: not drained after {max_steps} steps"
        checker.before_step()
        rec = run.step(keep_state=False)      # (the checker keeps the states it checked)
        assert rec.step == step
        checker.after_step(rec)
        step += 1
    if not engine.scheduler.paused:
        checker.at_end()
    return RunResult(engine, run.runner, run.records, results, dict(checker.streamed), checker.rejected,
                     checker.states, recording=run.path, all_requests=checker.all_requests())


def reference_outputs(config: EngineConfig, arrivals: Sequence[Arrival], **kw) -> dict[str, list[int]]:
    """The cases README's reference run: the same workload with 10x the KV blocks, no actions,
    no prefix cache."""
    ref = run_workload(config.replace(num_gpu_blocks=10 * config.num_gpu_blocks,
                                      enable_prefix_caching=False), arrivals, **kw)
    return ref.outputs()


def assert_outputs_match(result: RunResult, reference: dict[str, list[int]]) -> None:
    """G7: every request that finished by length (or stop) has exactly the reference tokens; an
    aborted or failed request has a prefix of them."""
    assert result.requests, "no request in the run"
    for rid, req in result.requests.items():
        if rid in result.rejected:
            continue
        ref = reference[rid]
        if req.status in (RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_STOPPED):
            assert req.output_token_ids == ref[:len(req.output_token_ids)], f"G7: {rid} differs from reference"
            if req.status is RequestStatus.FINISHED_LENGTH:
                assert req.output_token_ids == ref, f"G7: {rid} differs from reference"
        else:
            assert req.output_token_ids == ref[:req.num_output_tokens], f"G7: {rid} is not a prefix of reference"


# --- seeded random workloads ----------------------------------------------------------------------
def make_config(seed: int = 0, *, num_gpu_blocks: int = 14, block_size: int = 4,
                max_num_seqs: int = 4, max_num_batched_tokens: int = 16, max_model_len: int = 48,
                clock: str = "virtual", enable_prefix_caching: bool = False,
                preemption_mode: str = "recompute", num_cpu_blocks: int = 0,
                policy: str = "fcfs") -> tuple[EngineConfig, dict[str, Any]]:
    """An engine config (invariants checked every step) and the ``run_info`` to record it with."""
    config = EngineConfig(seed=seed, num_gpu_blocks=num_gpu_blocks, block_size=block_size,
                          max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          max_model_len=max_model_len, clock=clock, check_invariants=True,
                          enable_prefix_caching=enable_prefix_caching,
                          preemption_mode=preemption_mode, num_cpu_blocks=num_cpu_blocks, policy=policy)
    run_info = {"config": config.to_dict(), "model": "fake", "device": "cpu", "dtype": "none",
                "seed": seed, "trace": {"name": f"random-{seed}", "hash": "0" * 8},
                "started_at": STARTED_AT}
    return config, run_info


def run_engine(path=None, seed: int = 0, *, num_requests: int = 14, fail_steps=(1, 17),
               max_prompt: int = 24, max_output: int = 12, arrivals_per_step: float = 0.5,
               p_action: float = 0.06, max_steps: int | None = None, keep_states: bool = True,
               between_steps: Callable[[EngineRun], None] | None = None, close: bool = True,
               writer_kwargs: dict | None = None, num_prefixes: int = 0, run_info: dict | None = None,
               **config_kwargs) -> EngineRun:
    """Run a seeded random workload to the end (or ``max_steps``), recorded to ``path`` if given
    (``writer_kwargs`` go to :class:`RecordingWriter`, closed at the end unless ``close`` is
    false). ``config_kwargs`` go to :func:`make_config`. ``between_steps(run)`` is called after
    each step (after the user's actions). ``num_prefixes`` > 0: every prompt starts with one of
    that many shared prefixes (cut at a random length), so a prefix cache has hits. ``run_info``:
    entries added to the recorded provenance."""
    rng = random.Random(seed)
    config, info = make_config(seed, **config_kwargs)
    run = EngineRun.start(config, fail_steps=fail_steps, tokenizer=TOKENIZER, record_to=path,
                          run_info=RunInfo.from_json({**info, **(run_info or {})}), writer_kwargs=writer_kwargs)
    run.prefixes = [[rng.randrange(1, 1000) for _ in range(max_prompt)] for _ in range(num_prefixes)]
    # arrivals in steps (virtual clock) or seconds (wall: a step takes about a millisecond here)
    unit = 1.0 if config.clock == "virtual" else 0.002
    for i in range(num_requests):
        at = unit * int(i / arrivals_per_step) if arrivals_per_step else 0.0
        add(run, rng, max_prompt, max_output, arrival_time=at)
    while max_steps is None or len(run.records) < max_steps:
        if run.settled:
            break
        run.step(keep_state=keep_states)
        user_actions(run, rng, p_action, max_prompt, max_output)
        if between_steps is not None:
            between_steps(run)
    if close:
        run.close()
    return run


def add(run: EngineRun, rng: random.Random, max_prompt: int, max_output: int,
        arrival_time: float | None = None) -> str:
    """Add one random request (1 in 12 too long for ``max_model_len``: rejected at admission)."""
    prompt = [rng.randrange(1, 1000) for _ in range(rng.randint(1, max_prompt))]
    if run.prefixes:
        prefix = rng.choice(run.prefixes)
        prompt = (prefix[:rng.randint(0, len(prefix))] + prompt)[:max_prompt]
    max_tokens = rng.randint(1, max_output)
    if rng.random() < 1 / 12:
        max_tokens = run.config.max_model_len
    stop = ("q",) if rng.random() < 0.3 else ()
    return run.add(prompt, SamplingParams(max_tokens=max_tokens, stop=stop), arrival_time=arrival_time)


def user_actions(run: EngineRun, rng: random.Random, p: float, max_prompt: int, max_output: int) -> None:
    """Between steps: sometimes abort a live request, pause a running one, resume a paused one,
    inject a new request."""
    engine, step = run.engine, len(run.records)
    state = engine.state()
    if rng.random() < p and len(state):
        run.act(Action(step, "abort", rng.choice(state.request_ids)))
    running = [v.request_id for v in engine.state().running]
    if running and rng.random() < p:
        run.act(Action(step, "pause", rng.choice(running)))
    for v in engine.state().paused:
        if rng.random() < 0.25:
            run.act(Action(step, "resume", v.request_id))
    if rng.random() < p:
        add(run, rng, max_prompt, max_output)


def feed(writer: RecordingWriter, run: EngineRun, start: int, stop: int, skip=()) -> None:
    """Hand steps ``start <= k < stop`` of ``run`` to ``writer`` the way the engine does: each
    request's arrival (``write_request``) before the step that first holds it, then the step.
    Requests in ``skip`` are never announced."""
    for record in run.records[start:stop]:
        for a in record.arrivals:
            if a.request_id not in skip:
                writer.write_request(a.request_id, a.arrival_step, a.arrival_time,
                                     run.prompts[a.request_id], None,
                                     {"max_tokens": a.max_tokens})
        writer.write_step(record)
