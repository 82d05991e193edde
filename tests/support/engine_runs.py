"""Recorded runs of the real engine for the recording tests: ``LLMEngine`` with the scheduler and
block pool, ``tests/engine/fake_runner.FakeRunner`` as the model (no torch), invariants checked
after every step.

``run_engine(path, ...)`` plays a seeded random workload: requests arriving over time (a few too
long for the cache: rejected), chunked prefill, preemptions when the blocks run out, stop strings,
a "user" who pauses, resumes and aborts requests and injects new ones between steps, and forward
passes that fail at ``fail_steps``. It keeps every :class:`StepRecord` and the engine's state right
after each step (before the user acts), so a test can compare them with what a ``Reader`` gives.
Under the virtual clock the same arguments give the same run, up to the wall-clock ``*_ns`` fields
(:func:`without_wall_times`).
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


from engine.run_info import RunInfo  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.outputs import StepRecord  # noqa: E402
from engine.request import Request, SamplingParams  # noqa: E402
from engine.state.state import EngineState  # noqa: E402
from tests.support.fake_runner import FakeRunner, ToyTokenizer  # noqa: E402
from recordings.file.writer import RecordingWriter  # noqa: E402

WALL_TIME_FIELDS = ("start_ns", "end_ns", "schedule_ns", "forward_ns", "update_ns",
                    "recorder_wait_ns")
TOKENIZER = ToyTokenizer({i: chr(ord("a") + i % 26) for i in range(1000)})
STARTED_AT = "2024-01-01T00:00:00+00:00"
SMALL_SEED = 15  # a small run with arrival, rejection, preemption, pause/resume, abort, failed
#                  steps, length and stop-string finishes (test_small_run_covers_the_lifecycle)


def without_wall_times(record: StepRecord) -> StepRecord:
    """``record`` with its wall-clock nanosecond fields zeroed (what two identical runs share)."""
    return dataclasses.replace(record, **{k: 0 for k in WALL_TIME_FIELDS})


@dataclass
class Run:
    """One engine run: ``records[k]`` is step k, ``states[k]`` the engine's state after it."""

    config: EngineConfig
    run_info: RunInfo
    initial: EngineState
    engine: LLMEngine
    records: list[StepRecord] = field(default_factory=list)
    states: list[EngineState] = field(default_factory=list)
    prompts: dict[str, list[int]] = field(default_factory=dict)   # every request, as added
    finished: dict[str, Request] = field(default_factory=dict)     # in finishing order
    writer: RecordingWriter | None = None
    path: Path | None = None
    prefixes: list[list[int]] = field(default_factory=list)       # shared prompt prefixes

    @property
    def final(self) -> EngineState:
        return self.states[-1] if self.states else self.initial


def make_config(seed: int = 0, *, num_gpu_blocks: int = 14, block_size: int = 4,
                max_num_seqs: int = 4, max_num_batched_tokens: int = 16, max_model_len: int = 48,
                clock: str = "virtual", enable_prefix_caching: bool = False,
                preemption_mode: str = "recompute", num_cpu_blocks: int = 0) -> tuple[EngineConfig, dict[str, Any]]:
    """An engine config (invariants checked every step) and the ``run_info`` to record it with."""
    config = EngineConfig(seed=seed, num_gpu_blocks=num_gpu_blocks, block_size=block_size,
                          max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          max_model_len=max_model_len, clock=clock, check_invariants=True,
                          enable_prefix_caching=enable_prefix_caching,
                          preemption_mode=preemption_mode, num_cpu_blocks=num_cpu_blocks)
    run_info = {"config": config.to_dict(), "model": "fake", "device": "cpu", "dtype": "none",
                "seed": seed, "trace": {"name": f"random-{seed}", "hash": "0" * 8},
                "started_at": STARTED_AT}
    return config, run_info


def run_engine(path=None, seed: int = 0, *, num_requests: int = 14, fail_steps=(1, 17),
               max_prompt: int = 24, max_output: int = 12, arrivals_per_step: float = 0.5,
               p_action: float = 0.06, max_steps: int | None = None, keep_states: bool = True,
               between_steps: Callable[[Run], None] | None = None, close: bool = True,
               writer_kwargs: dict | None = None, num_prefixes: int = 0, run_info: dict | None = None,
               **config_kwargs) -> Run:
    """Run a seeded random workload to the end (or ``max_steps``), recorded to ``path`` if given
    (``writer_kwargs`` go to :class:`RecordingWriter`, closed at the end unless ``close`` is
    false). ``config_kwargs`` go to :func:`make_config`. ``between_steps(run)`` is called after
    each step (after the user's actions). ``num_prefixes`` > 0: every prompt starts with one of
    that many shared prefixes (cut at a random length), so a prefix cache has hits. ``run_info``:
    entries added to the recorded provenance."""
    rng = random.Random(seed)
    config, info = make_config(seed, **config_kwargs)
    run_info = RunInfo.from_json({**info, **(run_info or {})})
    writer = None if path is None else RecordingWriter(path, run_info, **(writer_kwargs or {}))
    blocks = config.num_gpu_blocks
    engine = LLMEngine(config, FakeRunner(blocks, config.block_size, fail_steps=fail_steps,
                                               num_cpu_blocks=config.num_cpu_blocks),
                       blocks, tokenizer=TOKENIZER, recorder=writer)
    run = Run(config, run_info, engine.state(), engine, writer=writer,
              path=None if path is None else Path(path))
    run.prefixes = [[rng.randrange(1, 1000) for _ in range(max_prompt)] for _ in range(num_prefixes)]
    engine.on_finished = lambda req: run.finished.__setitem__(req.request_id, req)
    # arrivals in steps (virtual clock) or seconds (wall: a step takes about a millisecond here)
    unit = 1.0 if config.clock == "virtual" else 0.002
    for i in range(num_requests):
        at = unit * int(i / arrivals_per_step) if arrivals_per_step else 0.0
        add(run, rng, max_prompt, max_output, arrival_time=at)
    while max_steps is None or len(run.records) < max_steps:
        if not engine.has_unfinished and engine.state() == engine.timeline.snapshot():
            break  # done, and no change (an abort after the last step...) waits for a step
        run.records.append(engine.step())
        if keep_states:
            run.states.append(engine.state())
        user_actions(run, rng, p_action, max_prompt, max_output)
        if between_steps is not None:
            between_steps(run)
    if writer is not None and close:
        writer.close()
    return run


def add(run: Run, rng: random.Random, max_prompt: int, max_output: int,
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
    rid = run.engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, stop=stop),
                                 arrival_time=arrival_time)
    run.prompts[rid] = prompt
    return rid


def user_actions(run: Run, rng: random.Random, p: float, max_prompt: int, max_output: int) -> None:
    """Between steps: sometimes abort a live request, pause a running one, resume a paused one,
    inject a new request."""
    engine = run.engine
    state = engine.state()
    if rng.random() < p and len(state):
        engine.abort_request(rng.choice(state.request_ids))
    running = [v.request_id for v in engine.state().running]
    if running and rng.random() < p:
        engine.pause_request(rng.choice(running))
    for v in engine.state().paused:
        if rng.random() < 0.25:
            engine.resume_request(v.request_id)
    if rng.random() < p:
        add(run, rng, max_prompt, max_output)


def feed(writer: RecordingWriter, run: Run, start: int, stop: int, skip=()) -> None:
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
