"""LLMEngine: the step loop tying scheduler, model runner, detokenizer and recorder together.

Not thread-safe: one thread (the app's engine worker) calls every method. ``app.bridge`` turns
commands from the UI thread into calls on that thread.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import time
from typing import Protocol

from engine.config import EngineConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import ModelRunnerOutput, NewToken, RequestView, SchedulerOutput, StepRecord
from engine.request import Request, RequestStatus, SamplingParams
from engine.scheduler import Scheduler
from engine.state import EngineState

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What the engine needs from a model runner (``engine.model_runner.ModelRunner`` or a fake)."""

    def execute(self, sched: SchedulerOutput, requests: dict[str, Request]) -> ModelRunnerOutput: ...
    def release(self, request_id: str) -> None: ...


class Recorder(Protocol):
    """What the engine needs from a recorder (``recordings.RecordingWriter``)."""

    def write_request(self, request_id: str, arrival_step: int, arrival_time: float,
                      prompt_token_ids: list[int], prompt_text: str | None, sampling: dict) -> None: ...
    def write_step(self, record: StepRecord) -> None: ...


def request_view(req: Request) -> RequestView:
    """Immutable snapshot of ``req`` for the UI and the recording."""
    return RequestView(
        request_id=req.request_id, status=req.status.value, arrival_step=req.arrival_step,
        arrival_time=req.arrival_time, num_prompt_tokens=req.num_prompt_tokens,
        num_output_tokens=req.num_output_tokens, num_computed_tokens=req.num_computed_tokens,
        max_tokens=req.sampling_params.max_tokens, block_ids=req.block_ids,
        slot=req.slot, num_preemptions=req.num_preemptions, ttft=req.ttft, mean_itl=req.mean_itl,
        finish_reason=req.finish_reason.value if req.finish_reason else None, error=req.error)


class LLMEngine:
    """A continuous-batching engine over one paged KV cache of ``num_gpu_blocks`` blocks.

    ``runner`` executes steps (a real :class:`engine.model_runner.ModelRunner` or a fake for
    tests); ``tokenizer`` (optional) gives streamed text and stop strings; ``recorder`` (optional)
    receives every request and :class:`StepRecord`. Under ``config.clock == "virtual"`` times are
    steps (a token made in step s has time s + 1); under ``"wall"`` they are seconds since start.
    """

    def __init__(self, config: EngineConfig, runner: Runner, num_gpu_blocks: int, *,
                 tokenizer=None, eos_token_id: int | None = None, recorder: Recorder | None = None) -> None:
        self.config = config
        self.runner = runner
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.recorder = recorder
        self.scheduler = Scheduler(config, num_gpu_blocks)
        self.num_gpu_blocks = num_gpu_blocks
        self.step_index = 0
        self._t0_ns = time.perf_counter_ns()
        self._frozen_at_ns: int | None = None
        self._frozen_ns = 0
        self._future: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        self._detok: dict[str, IncrementalDetokenizer] = {}
        self._dirty: set[str] = set()
        self._state = EngineState(-1, 0.0, num_gpu_blocks, config.block_size, config.max_num_seqs)
        self._ids = itertools.count()
        self._order: dict[str, int] = {}
        self._released: set[str] = set()
        self._deltas: dict[str, str] = {}

    # --- clock ----------------------------------------------------------------------------
    def now(self) -> float:
        """Engine clock: the step index (virtual) or seconds since start (wall)."""
        if self.config.clock == "virtual":
            return float(self.step_index)
        now_ns = self._frozen_at_ns if self._frozen_at_ns is not None else time.perf_counter_ns()
        return (now_ns - self._t0_ns - self._frozen_ns) / 1e9

    def freeze_clock(self) -> None:
        """Stop the wall clock (while the user pauses the engine, arrivals wait too)."""
        if self._frozen_at_ns is None:
            self._frozen_at_ns = time.perf_counter_ns()

    def thaw_clock(self) -> None:
        """Restart the wall clock; the frozen interval is not counted."""
        if self._frozen_at_ns is not None:
            self._frozen_ns += time.perf_counter_ns() - self._frozen_at_ns
            self._frozen_at_ns = None

    # --- requests -------------------------------------------------------------------------
    def add_request(self, prompt_token_ids: list[int], params: SamplingParams, *,
                    request_id: str | None = None, arrival_time: float | None = None,
                    prompt_text: str | None = None) -> str:
        """Add a request arriving at ``arrival_time`` (engine clock; None = now). Returns its id.

        An impossible request (empty prompt, over ``max_model_len`` or the whole cache) is kept and
        finished at once with FINISHED_ERROR and an error naming the limit; others keep running.
        Raises ``ValueError`` for a duplicate id or stop strings without a tokenizer.
        """
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer; this engine runs on token ids only")
        if rid in self.scheduler.requests or any(r.request_id == rid for _, _, r in self._future):
            raise ValueError(f"duplicate request id {rid!r}")
        now = self.now()
        at = now if arrival_time is None else arrival_time
        req = Request(rid, list(prompt_token_ids), params, arrival_time=at, prompt_text=prompt_text,
                      eos_token_id=self.eos_token_id)
        if at <= now:
            self._admit(req)
        else:
            heapq.heappush(self._future, (at, next(self._seq), req))
        return rid

    def _admit(self, req: Request) -> None:
        req.arrival_step = self.step_index
        self._order[req.request_id] = len(self._order)
        if self.recorder is not None:
            sp = req.sampling_params
            self.recorder.write_request(req.request_id, req.arrival_step, req.arrival_time,
                                        req.prompt_token_ids, req.prompt_text,
                                        {k: getattr(sp, k) for k in sp.__dataclass_fields__})
        if not self.scheduler.add_request(req):
            self._released.add(req.request_id)
            req.finished_time = self.now()
        self._sync_blocks(req)
        if self.tokenizer is not None and not req.is_finished:
            sp = req.sampling_params
            self._detok[req.request_id] = IncrementalDetokenizer(self.tokenizer, sp.stop,
                                                                 sp.include_stop_str_in_output)
        self._dirty.add(req.request_id)

    def admit_due(self) -> None:
        """Move requests whose arrival time has come into the scheduler's waiting queue."""
        self._admit_due()

    def _admit_due(self) -> None:
        now = self.now()
        while self._future and self._future[0][0] <= now:
            self._admit(heapq.heappop(self._future)[2])

    def abort_request(self, request_id: str) -> bool:
        """Abort a live request (frees its blocks at once). Returns False if unknown or finished."""
        req = self.scheduler.requests.get(request_id)
        if req is None or req.is_finished:
            return False
        self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        self._after_finish(req, self.now())
        return True

    def pause_request(self, request_id: str) -> bool:
        """Park a request: it keeps its KV but no batch slot. Returns False if not possible."""
        ok = request_id in self.scheduler.requests and self.scheduler.pause_request(request_id)
        if ok:
            self._dirty.add(request_id)
        return ok

    def resume_request(self, request_id: str) -> bool:
        """Un-park a paused request. Returns False if it is not paused."""
        ok = request_id in self.scheduler.requests and self.scheduler.resume_request(request_id)
        if ok:
            self._sync_blocks(self.scheduler.requests[request_id])
            self._dirty.add(request_id)
        return ok

    # --- state ----------------------------------------------------------------------------
    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished or bool(self._future)

    @property
    def next_arrival_time(self) -> float | None:
        return self._future[0][0] if self._future else None

    @property
    def requests(self) -> dict[str, Request]:
        return self.scheduler.requests

    def state(self) -> EngineState:
        """Current state: the last step's state plus any change made since (adds, aborts...)."""
        if not self._dirty:
            return self._state
        return self._state.with_views([request_view(self.requests[r])
                                       for r in sorted(self._dirty, key=self._order.__getitem__)],
                                      self._state.step, self._state.clock)

    def _sync_blocks(self, req: Request) -> None:
        req.block_ids = tuple(self.scheduler.kv.block_ids(req.request_id))

    def _after_finish(self, req: Request, when: float) -> None:
        self._released.add(req.request_id)
        req.finished_time = when
        self._sync_blocks(req)
        self.runner.release(req.request_id)
        det = self._detok.pop(req.request_id, None)
        if det is not None:
            # Equal to det.output_text after a stop / length finish (flushed with the last token);
            # after an abort or failure the held-back characters were never streamed: drop them.
            req.output_text = det.streamed_text
        self._dirty.add(req.request_id)

    # --- the step -------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """Run one scheduler iteration: schedule, ONE forward pass, update. Returns its record.

        An exception raised by the forward pass fails the step's requests (FINISHED_ERROR with the
        message, recorded in ``StepRecord.error``); the engine stays usable.
        """
        self._admit_due()
        step, clock = self.step_index, self.now()
        t0 = time.perf_counter_ns()
        sched = self.scheduler.schedule(step)
        t1 = time.perf_counter_ns()
        error = None
        try:
            out = self.runner.execute(sched, self.scheduler.requests)
        except Exception as e:  # noqa: BLE001 - a failing step must not take the engine down
            log.exception("step %d failed", step)
            error = f"{type(e).__name__}: {e}"
            out = ModelRunnerOutput(errors={s.request_id: error for s in sched.scheduled})
        t2 = time.perf_counter_ns()
        token_time = float(step + 1) if self.config.clock == "virtual" else self.now()
        got = self.scheduler.update_from_output(sched, out, token_time, step, self._check_stop)
        new_tokens = [self._detokenize(req) for req in got]
        touched = set(self._dirty)
        touched.update(s.request_id for s in sched.scheduled)
        touched.update(sched.preempted_ids)
        events = tuple(self.scheduler.take_events())
        touched.update(e.request_id for e in events)
        for rid in touched:
            req = self.requests[rid]
            if req.is_finished and rid not in self._released:
                self._after_finish(req, token_time)
            self._sync_blocks(req)
        changed = []
        for rid in sorted(touched, key=self._order.__getitem__):
            v = request_view(self.requests[rid])
            if self._state.requests.get(rid) != v:
                changed.append(v)
        t3 = time.perf_counter_ns()
        s = self.scheduler
        record = StepRecord(
            step=step, start_ns=t0 - self._t0_ns, end_ns=t3 - self._t0_ns, clock=clock,
            scheduler_output=sched, new_tokens=tuple(new_tokens), events=events,
            changed=tuple(changed), num_waiting=len(s.waiting), num_running=len(s.running),
            num_paused=len(s.paused), num_finished=len(s.finished_ids),
            num_free_blocks=s.kv.num_free_blocks, num_total_blocks=s.kv.num_blocks,
            schedule_ns=t1 - t0, forward_ns=t2 - t1, update_ns=t3 - t2, error=error)
        self._state = self._state.apply(record)
        self._dirty.clear()
        self.step_index += 1
        if self.recorder is not None:
            self.recorder.write_step(record)
        if self.config.check_invariants:
            s.check_invariants()
        return record

    def _check_stop(self, req: Request) -> str | None:
        """Detokenize ``req``'s newest token (called by the scheduler once per new token); keeps
        the streamable delta for :meth:`_detokenize` and returns the stop string that fired."""
        det = self._detok.get(req.request_id)
        if det is None:
            return None
        text, stop = det.update(req.output_token_ids)
        self._deltas[req.request_id] = text
        return stop

    def _detokenize(self, req: Request) -> NewToken:
        idx = req.num_output_tokens - 1
        det = self._detok.get(req.request_id)
        text = self._deltas.pop(req.request_id, "")
        if det is not None:
            if req.is_finished:
                text += det.flush()
            req.output_text = det.output_text
        return NewToken(req.request_id, idx, req.output_token_ids[-1], text)

    def run_until_done(self, max_steps: int | None = None) -> list[StepRecord]:
        """Step until every request (including future arrivals) finished; returns the records."""
        records = []
        while self.has_unfinished and (max_steps is None or len(records) < max_steps):
            records.append(self.step())
        return records
