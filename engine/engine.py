"""LLMEngine: the step loop tying scheduler, model runner, detokenizer and recorder together.

Thread-safe as vLLM's engine core is for its callers: one thread steps the engine, and any thread
(a UI, a server, the runner's own callback) may add, abort, pause, resume and reprioritise
requests at any time, also while a step is in flight (between ``Scheduler.schedule`` and
``Scheduler.update_from_output``; the engine's lock is not held during the forward pass). A request
that leaves the running set while its step is in flight has that step's output dropped (an aborted
one ends FINISHED_ABORTED, its blocks freed once); every other request's result is applied.
``app.live.bridge`` still queues the window's commands onto the engine thread.

Memory follows what is live: a finished request is handed to ``on_finished`` (if set), written
once by the recorder and dropped. The engine keeps its state as an
:class:`engine.state.timeline.StateTimeline` fed by its own step records, so the state it publishes is
the state a replay of its recording rebuilds.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import numbers
import sys
import threading
import time
from typing import Callable, Protocol, Sequence

from engine.config import EngineConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import Arrival, BatchEntry, ModelRunnerOutput, NewToken, SchedulerOutput, StepRecord, Transition
from engine.request import DeferredPrompt, PromptIdsOnUse, Request, SamplingParams
from engine.vocab import Clock, RequestStatus
from engine.request_ids import RequestIds
from engine.sched.admission import StepTimeFn
from engine.sched.scheduler import Scheduler
from engine.sequence_group import make_sequences, sequence_ids
from engine.state.check import check_engine_state
from engine.state.state import EngineState
from engine.state.timeline import StateTimeline

log = logging.getLogger("engine.engine")

class Recorder(Protocol):
    """What the engine needs from a recorder (``recordings.file.writer.RecordingWriter``)."""

    def write_request(self, request_id: str, arrival_step: int, arrival_time: float,
                      prompt_token_ids: list[int], prompt_text: str | None, sampling: dict) -> None: ...
    def write_step(self, record: StepRecord) -> None: ...


log = logging.getLogger(__name__)
# Builds a NamedTuple from a tuple of its fields without its Python-level __new__ (the hot path
# makes one per scheduled request and one per token every step). A ScheduledRequest's first five
# fields are a BatchEntry's.
_new = tuple.__new__


class Runner(Protocol):
    """What the engine needs from a model runner (``engine.runner.model_runner.ModelRunner`` or a fake)."""

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput: ...
    def release(self, request_id: str) -> None: ...


def transition_of(req: Request) -> Transition:
    """The authoritative after-step values of ``req`` (see :class:`Transition`)."""
    return Transition(req.request_id, req.status.value, -1 if req.slot is None else req.slot,
                      req.num_computed_tokens, req.num_preemptions, req.error)



def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an accelerator out-of-memory error (``torch.OutOfMemoryError``, or
    the ``RuntimeError`` older torch and other backends raise with "out of memory" in it)."""
    return type(error).__name__ == "OutOfMemoryError" or (
        isinstance(error, RuntimeError) and "out of memory" in str(error).lower())


def release_cached_memory() -> None:
    """Hand torch's cached CUDA blocks back after an out-of-memory step (no-op without torch or
    CUDA), so the next steps can allocate again."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()

CLOCK_UNITS = {Clock.VIRTUAL: "steps", Clock.WALL: "seconds since the engine started",
               Clock.SIM: "simulated seconds"}


def _locked(method):
    """Run ``method`` under the engine's lock (callers on any thread, see the module docstring)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return call


class LLMEngine:
    """A continuous-batching engine over one paged KV cache of ``num_gpu_blocks`` blocks.

    ``runner`` executes steps (a real :class:`engine.runner.model_runner.ModelRunner` or a fake for
    tests, or a simulated executor); ``tokenizer`` (optional) gives streamed text and stop
    strings; ``recorder`` (optional) receives every request and :class:`StepRecord`;
    ``on_finished(request)`` (optional) is called once per finished request, after which the
    engine forgets it. Under ``config.clock == "virtual"`` times are steps (a token made in step s
    has time s + 1); under ``"wall"`` seconds since start; under ``"sim"`` simulated seconds: the
    clock advances by each step's ``ModelRunnerOutput.step_duration_s`` and jumps over idle gaps
    to the next arrival. Request ids are unique per engine (a finished request's id is not reused).
    ``step_time`` prices a step for ``admission="slo"`` (``engine.sched.admission.StepTimeFn``,
    e.g. ``engine.sim.cost_model.CostModel.predict_step_s``); default: the runner's
    ``cost_model`` (the simulated executor's). Raises ``ValueError`` when that needs one and
    there is none.
    """

    def __init__(self, config: EngineConfig, runner: Runner, num_gpu_blocks: int, *,
                 tokenizer=None, eos_token_id: int | None = None, recorder: Recorder | None = None,
                 step_time: StepTimeFn | None = None) -> None:
        self.config = config
        self.runner = runner
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.recorder = recorder
        if step_time is None and hasattr(getattr(runner, "cost_model", None), "predict_step_s"):
            step_time = runner.cost_model.predict_step_s     # a simulated executor's own model
        self.scheduler = Scheduler(config, num_gpu_blocks, step_time)
        self.num_gpu_blocks = num_gpu_blocks
        self.step_index = 0
        self._t0_ns = time.perf_counter_ns()
        self._frozen_at_ns: int | None = None
        self._frozen_ns = 0
        self._future: list[tuple[float, int, tuple]] = []   # (arrival, order, add_request arguments)
        self._seq = itertools.count()
        self._detok: dict[str, IncrementalDetokenizer] = {}
        self._ids = itertools.count()
        self._request_ids = RequestIds()
        self._deltas: dict[str, str] = {}
        self._sim_time = 0.0
        self.on_finished = None
        self._finished_listeners: list = []
        # Any thread may call the request API; one thread steps. The lock is not held during
        # the forward pass, so a control call may land while a step is in flight (_in_flight):
        # then the runner's state of a request that finishes is released after the pass.
        self._lock = threading.RLock()
        self._in_flight = False
        self._deferred_releases: list[str] = []
        self.recorder_error: str | None = None
        self.timeline = StateTimeline(num_gpu_blocks, config.block_size, config.max_num_seqs,
                                      config.num_cpu_blocks)
        self._state: EngineState | None = self.timeline.snapshot()
        # changes since the last step (recorded with the next step)
        self._arrivals: list[Arrival] = []
        self._arrival_index: dict[str, int] = {}
        self._touched: set[str] = set()
        self._finished_now: list[Request] = []
        self._knobs: list[tuple[str, int]] = []
        self._recorder_wait_ns = 0

    # --- clock ----------------------------------------------------------------------------
    def now(self) -> float:
        """Engine clock: the step index (virtual) or seconds since start (wall)."""
        if self.config.clock == Clock.VIRTUAL:
            return float(self.step_index)
        if self.config.clock == Clock.SIM:
            return self._sim_time
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

    # --- state ----------------------------------------------------------------------------
    @property
    def lock(self) -> threading.RLock:
        """The engine's lock: held by every control call and by a step except during its forward
        pass. Hold it to read ``requests`` or the scheduler consistently from another thread."""
        return self._lock

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished or bool(self._future)

    @property
    def next_arrival_time(self) -> float | None:
        return self._future[0][0] if self._future else None

    @property
    def requests(self) -> dict[str, Request]:
        """The live requests (waiting, running, paused) by id; finished ones are gone."""
        return self.scheduler.requests

    @_locked
    def state(self) -> EngineState:
        """Current state: the last step's state plus any change made since (adds, aborts...).

        O(live requests) when something changed since the last call, else cached."""
        if self._state is None:
            pending = self._pending_changes()
            if any(pending):
                tl = StateTimeline.from_state(self.timeline.snapshot())
                tl.apply_changes(*pending, events=tuple(self.scheduler.events), knobs=tuple(self._knobs))
                self._state = tl.snapshot()
            else:
                self._state = self.timeline.snapshot()
        return self._state

    def _pending_changes(self):
        """(arrivals, block events, transitions) made since the last step, not yet recorded."""
        blocks = tuple(self.scheduler.kv.events)
        return tuple(self._arrivals), blocks, tuple(self._transitions(self._touched))

    def _transitions(self, request_ids) -> list[Transition]:
        """Transitions of the given requests (live or finished since the last step), in
        arrival order of the timeline (then finished ones)."""
        live = self.scheduler.requests
        done = {r.request_id: r for r in self._finished_now}
        out = []
        for rid in sorted(request_ids, key=self._order_key):
            req = live.get(rid) or done.get(rid)
            if req is not None:
                out.append(transition_of(req))
        return out

    def _order_key(self, request_id: str):
        # Deterministic order: by arrival number where known (already in the timeline), else by
        # position among this step's arrivals.
        seq = self.timeline.seq_of(request_id)
        if seq is not None:
            return (0, seq)
        return (1, self._arrival_index.get(request_id, -1))

    def _collect_finished(self, when: float | None = None, release: bool = True) -> None:
        """Take finished requests from the scheduler: stamp ``finished_time`` (``when``, default
        now), release runner state (unless ``release`` is False), keep their final text; they are
        reported with the next step and then dropped, their ids checked from then on through
        the recording (``engine.request_ids``)."""
        finished = []
        for req in self.scheduler.take_finished():
            req.finished_time = self.now() if when is None else when
            if release and self._in_flight:
                self._deferred_releases.append(req.request_id)     # the runner is busy
            elif release:
                self.runner.release(req.request_id)
            det = self._detok.pop(req.request_id, None)
            if det is not None:
                # Equal to det.output_text after a stop / length finish (flushed with the last
                # token); after an abort or failure the held-back characters were never streamed.
                req.output_text = det.streamed_text
            self._touched.add(req.request_id)
            self._finished_now.append(req)
            finished.append((req.request_id, None if req.group is None else req.group.parent_id))
        if finished:
            self._request_ids.finish(finished, self.recorder)

    # --- the step -------------------------------------------------------------------------
    @property
    def has_pending_changes(self) -> bool:
        """True when arrivals or user actions since the last step are not recorded yet."""
        return bool(self._arrivals or self._touched or self._finished_now or self.scheduler.kv.events
                    or self._knobs)

    def step(self, *, run_batch: bool = True) -> StepRecord:
        """Run one scheduler iteration: schedule, ONE forward pass, update. Returns its record.

        ``run_batch=False`` records only the changes made since the last step (arrivals, aborts,
        pauses...) in a step that schedules nothing: how a run's last user actions reach the
        recording when it ends. An exception raised by the forward pass fails the step's requests
        (FINISHED_ERROR with the message, recorded in ``StepRecord.error``); the engine stays usable.
        Out of memory (``torch.OutOfMemoryError``, or a ``RuntimeError`` saying "out of memory")
        is such an exception: the step's requests fail (not retried: a client resubmits), their
        blocks are freed, torch's CUDA cache is emptied, and the other requests are served on.
        """
        with self._lock:
            self._admit_due()
            step, clock = self.step_index, self.now()
            if self.scheduler.deadlines is not None and self.scheduler.expire_waiting(clock):
                self._collect_finished(release=False)       # timed out: the runner never saw them
            t0 = time.perf_counter_ns()
            sched = self.scheduler.schedule(step) if run_batch else SchedulerOutput(step, ())
            t1 = time.perf_counter_ns()
            self._in_flight = run_batch
        error = None
        try:
            out = self.runner.execute(sched) if run_batch else ModelRunnerOutput()
        except Exception as e:  # noqa: BLE001 - a failing step must not take the engine down
            log.exception("step %d failed", step)
            error = f"{type(e).__name__}: {e}"
            out = ModelRunnerOutput(errors={s.request_id: error for s in sched.scheduled})
            if is_out_of_memory(e):
                release_cached_memory()
        t2 = time.perf_counter_ns()
        with self._lock:
            self._in_flight = False
            released, self._deferred_releases = self._deferred_releases, []
            for rid in released:
                self.runner.release(rid)
            return self._finish_step(sched, out, step, clock, error, t0, t1, t2)

    def _finish_step(self, sched: SchedulerOutput, out: ModelRunnerOutput, step: int, clock: float,
                     error: str | None, t0: int, t1: int, t2: int) -> StepRecord:
        """The second half of :meth:`step` (under the lock): apply the runner's output, record."""
        if self.config.clock == Clock.SIM and out.step_duration_s is not None:
            self._sim_time += out.step_duration_s
        token_time = float(step + 1) if self.config.clock == Clock.VIRTUAL else self.now()
        detok = bool(self._detok)       # no detokenizer live: no per-token text work at all
        got = self.scheduler.update_from_output(sched, out, token_time, step,
                                                self._check_stop if detok else None)
        if detok:
            new_tokens = tuple([self._detokenize(req) for req in got])
        else:
            new_tokens = tuple([_new(NewToken, (r.request_id, len(r.output_token_ids) - 1,
                                                r.output_token_ids[-1], "")) for r in got])
        events = tuple(self.scheduler.take_events())
        self._collect_finished(token_time)
        touched = self._touched
        touched.update(sched.preempted_ids)
        touched.update(e.request_id for e in events)
        queries, hits = self.scheduler.kv.take_prefix_cache_stats()
        t3 = time.perf_counter_ns()
        record = StepRecord(
            step=step, start_ns=t0 - self._t0_ns, end_ns=t3 - self._t0_ns, clock=clock,
            token_time=token_time,
            arrivals=tuple(self._arrivals),
            scheduled=tuple([_new(BatchEntry, s[:5]) for s in
                             (sched.scheduled + sched.forked if sched.forked else sched.scheduled)]),
            new_tokens=new_tokens, events=events,
            block_events=tuple(self.scheduler.kv.take_events()),
            transitions=tuple(self._transitions(touched)),
            preempted_ids=sched.preempted_ids, not_admitted=sched.not_admitted,
            waiting_reason=sched.waiting_reason, knobs=tuple(self._knobs),
            num_waiting=len(self.scheduler.waiting), num_running=len(self.scheduler.running),
            num_paused=len(self.scheduler.paused), num_finished=self.scheduler.num_finished,
            num_free_blocks=self.scheduler.kv.num_free_blocks,
            num_total_blocks=self.scheduler.kv.num_blocks,
            schedule_ns=t1 - t0, forward_ns=t2 - t1, update_ns=t3 - t2,
            recorder_wait_ns=self._recorder_wait_ns, error=error,
            prefix_cache_queries=queries, prefix_cache_hits=hits)
        self.timeline.apply(record)
        finished, self._finished_now = self._finished_now, []
        self._arrivals, self._arrival_index, self._touched = [], {}, set()
        self._knobs = []
        self._state = None
        self.step_index += 1
        if self.recorder is not None:
            t4 = time.perf_counter_ns()
            try:
                self.recorder.write_step(record)
            except Exception as e:  # noqa: BLE001 - a full disk must not stop serving
                self._recorder_failed(e)
            self._recorder_wait_ns = time.perf_counter_ns() - t4
        if self.on_finished is not None:
            for req in finished:
                self.on_finished(req)
        for listener in tuple(self._finished_listeners):
            for req in finished:
                listener(req)
        if self.config.check_invariants:
            self.scheduler.check_invariants()
            self.check_state()
        return record

    def add_finished_listener(self, listener: Callable[[Request], None]) -> Callable[[], None]:
        """Call ``listener(request)`` once for every request that finishes from now on (after
        ``on_finished``, in the order listeners were added), on the stepping thread, right after
        the step that finished it is recorded. Any number of listeners may be added. Returns a
        function that removes this one."""
        with self._lock:
            self._finished_listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._finished_listeners:
                    self._finished_listeners.remove(listener)
        return remove

    def collect_finished(self) -> dict[str, Request]:
        """Keep every request that finishes from now on in the returned dict, by id (scripts,
        tests and benchmarks; a listener of its own beside ``on_finished`` and any other
        listener, see :meth:`add_finished_listener`; the dict grows with the run)."""
        done: dict[str, Request] = {}
        self.add_finished_listener(lambda req: done.__setitem__(req.request_id, req))
        return done

    def check_state(self) -> None:
        """Assert that the published state equals the scheduler's truth for every live request
        (see :func:`engine.state.check.check_engine_state`). Raises ``AssertionError``."""
        check_engine_state(self)

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

    # ---- Adding requests and admitting due arrivals (with a detokenizer per request) ----
    @_locked
    def add_request(self, prompt_token_ids: Sequence[int] | None, params: SamplingParams, *,
                    request_id: str | None = None, arrival_time: float | None = None,
                    prompt_text: str | None = None, priority: int | None = None,
                    deferred: DeferredPrompt | None = None) -> str:
        """Add a request arriving at ``arrival_time`` (engine clock; None = now). Returns its id.
        ``priority`` (default ``params.priority``) orders it under ``policy="priority"``. With
        ``params.n`` > 1 the prompt's ``n`` sequences are requests ``<id>#0`` ... and ``<id>``
        names them all in :meth:`abort_request` and the other calls (``engine.sequence_group``).

        The prompt is ``prompt_token_ids`` (with its ``prompt_text``), or, with
        ``prompt_token_ids`` None, ``deferred`` (a :class:`engine.request.DeferredPrompt`): its
        ids and text are made when the request arrives, so a trace's future requests hold no
        tokens; until then only the arguments wait (no ``Request`` object either).

        An impossible request (empty prompt, over ``max_model_len`` or the whole cache) is kept and
        finished at once with FINISHED_ERROR and an error naming the limit; others keep running.
        Raises ``ValueError`` for a duplicate id, stop strings without a tokenizer, a nonzero
        priority under a policy other than ``priority`` (refused here, not at admission), an
        ``arrival_time`` that is not a finite number >= 0, or neither or both of
        ``prompt_token_ids`` and ``deferred``. A past ``arrival_time`` is honoured: the request's
        queue time and latencies count from it (it is served in the order added); a future one
        holds the request back until the clock reaches it. Ids are unique within a run: checked
        against live and future requests in memory and against finished ones through the
        recording, or without one through 64-bit hashes (``engine.request_ids``).
        """
        if (prompt_token_ids is None) == (deferred is None):
            raise ValueError("give the prompt's token ids or a deferred prompt, exactly one")
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer; this engine runs on token ids only")
        refused = self.scheduler.priority_error(params.priority if priority is None else priority)
        if refused:
            raise ValueError(f"request {rid!r}: {refused}")
        if arrival_time is not None and not (isinstance(arrival_time, numbers.Real)
                                             and 0 <= arrival_time < math.inf):
            raise ValueError(f"request {rid!r}: arrival_time must be a finite number >= 0 on the engine "
                             f"clock ({self.config.clock}: {CLOCK_UNITS[self.config.clock]}), "
                             f"got {arrival_time!r}")
        now = self.now()
        at = now if arrival_time is None else arrival_time
        self._request_ids.add([rid, *sequence_ids(rid, params.n)])
        # The caller's sequence is kept as is: a compact array('i') stays 4 bytes per token.
        pending = (rid, prompt_token_ids, params, prompt_text, priority, deferred)
        if at <= now:
            self._arrive(at, pending)
        else:
            heapq.heappush(self._future, (at, next(self._seq), pending))
        return rid

    def _arrive(self, at: float, pending: tuple) -> None:
        """Make the requests of an added prompt (its deferred prompt first) and admit them."""
        rid, ids, params, text, priority, deferred = pending
        if deferred is not None and getattr(deferred, "ids_only", False):
            ids = PromptIdsOnUse(deferred, deferred.num_prompt_tokens)    # made on first use
        elif deferred is not None:
            ids, text = deferred.make_prompt()
        for req in make_sequences(rid, ids, params, arrival_time=at, prompt_text=text,
                                  eos_token_id=self.eos_token_id, priority=priority):
            self._admit(req)

    def _admit(self, req: Request) -> None:
        req.arrival_step = self.step_index
        if self.recorder is not None:
            sp = req.sampling_params
            try:
                self.recorder.write_request(req.request_id, req.arrival_step, req.arrival_time,
                                            req.prompt_token_ids, req.prompt_text,
                                            {**{k: getattr(sp, k) for k in sp.__dataclass_fields__},
                                             "priority": req.priority})
            except Exception as e:  # noqa: BLE001
                self._recorder_failed(e)
        self._arrival_index[req.request_id] = len(self._arrivals)
        # The Arrival alone says "WAITING, nothing computed": no transition unless something
        # else happens to the request (rejection, admission) before the step is recorded.
        self._arrivals.append(Arrival(req.request_id, req.arrival_step, req.arrival_time,
                                      req.num_prompt_tokens, req.sampling_params.max_tokens,
                                      req.priority))
        self._state = None
        if not self.scheduler.add_request(req, self.now()):
            self._collect_finished(release=False)   # rejected: the runner never saw it
            return
        if self.tokenizer is not None:
            sp = req.sampling_params
            self._detok[req.request_id] = IncrementalDetokenizer(self.tokenizer, sp.stop,
                                                                 sp.include_stop_str_in_output)

    @_locked
    def admit_due(self) -> None:
        """Move requests whose arrival time has come into the scheduler's waiting queue."""
        self._admit_due()

    def _admit_due(self) -> None:
        if (self.config.clock == Clock.SIM and self._future and not self.scheduler.waiting
                and not self.scheduler.running):
            # Simulated time: nothing can run until the next arrival, so jump to it.
            self._sim_time = max(self._sim_time, self._future[0][0])
        now = self.now()
        while self._future and self._future[0][0] <= now:
            at, _, pending = heapq.heappop(self._future)
            self._arrive(at, pending)

    # ---- User controls between steps: abort, pause, resume, knobs, priority, move to front ----
    @_locked
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

    @_locked
    def pause_request(self, request_id: str) -> bool:
        """Park a request: it keeps its KV but no batch slot (a parallel-sampling group as a
        whole). Returns False if not possible."""
        request_id, ids = self._group_of(request_id)
        ok = request_id in self.scheduler.requests and self.scheduler.pause_request(request_id)
        if ok:
            self._touched.update(ids)
            self._state = None
        return ok

    @_locked
    def resume_request(self, request_id: str) -> bool:
        """Un-park a paused request (a parallel-sampling group as a whole). Returns False if it
        is not paused."""
        request_id, ids = self._group_of(request_id)
        ok = request_id in self.scheduler.requests and self.scheduler.resume_request(request_id)
        if ok:
            self._touched.update(ids)
            self._state = None
        return ok

    @_locked
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

    @_locked
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

    @_locked
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

    # ---- Recording: the recorder and its failure path (the engine keeps serving) ----
    @_locked
    def poll_recorder(self) -> str | None:
        """Notice a recorder that failed in its own thread since the last write (a full disk):
        stop recording and return ``recorder_error``. Call it while idle; ``step`` notices on its
        next write anyway."""
        failure = getattr(self.recorder, "failure", None) if self.recorder is not None else None
        if failure:
            self._recorder_failed(RuntimeError(failure))
        return self.recorder_error

    def _recorder_failed(self, exc: Exception) -> None:
        """Stop recording after a recorder failure (full disk, writer thread died): the engine
        keeps serving; ``recorder_error`` says what happened (the file stays readable up to its
        last committed step, which the message names: the recorder's ``last_committed_step``,
        not the engine's step, which a queued writer trails)."""
        log.error("recording stopped: %s", exc)
        last = getattr(self.recorder, "last_committed_step", None)
        held = ("" if not isinstance(last, int) else
                "; the file holds no step" if last < 0 else f"; the file holds steps 0..{last}")
        self.recorder_error = (f"recording stopped: {exc}{held} (the engine was at step "
                               f"{self.step_index - 1})")
        self.recorder = None
