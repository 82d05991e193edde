"""The engine worker thread and the thread-safe control surface the UI calls.

The engine lives on one ``threading.Thread``; the UI thread never touches it. Commands
(add/abort/pause/resume/step) go through a queue and run on the engine thread between steps;
results come back through :class:`app.live.source.LiveSource`.
"""
from __future__ import annotations

import itertools
import logging
import queue
import sys
import threading
import time
import traceback
from dataclasses import fields
from typing import Any, Callable

from app.factory import BuiltEngine
from app.live.source import LiveSource
from app.long_lived import freeze_long_lived
from engine.config import ConfigError
from engine.model.files import ModelLoadError
from engine.request import Request, SamplingParams
from engine.state.source import check_knobs, current_knobs
from engine.state.state import EngineState

log = logging.getLogger(__name__)


class EngineWorker(threading.Thread):
    """Builds the engine with ``build()`` (slow: model loading) and then steps it.

    ``on_ready(built)`` runs on the engine thread right after the build (e.g. to queue a demo
    workload). Starts paused if ``start_paused``. ``stop()`` ends the loop and closes the recorder.
    Any exception in a step is shown through ``last_error`` and the loop keeps going. When the
    recording fails (a full disk) the engine pauses before its next step and ``last_error`` names
    the last step the file holds; resuming serves on without recording.
    ``threads`` (an :class:`app.threads.ThreadGovernor`) is re-checked between steps and shown by
    :meth:`threads_status`.
    """

    def __init__(self, build: Callable[[], BuiltEngine], source: LiveSource, *,
                 on_ready: Callable[[BuiltEngine], None] | None = None, start_paused: bool = False,
                 idle_wait_s: float = 0.05, started_at: float | None = None, threads=None) -> None:
        super().__init__(name="batchscope-engine", daemon=True)
        self._build = build
        self.source = source
        self._on_ready = on_ready
        self._commands: queue.Queue[Callable[[], None]] = queue.Queue()
        self._paused = start_paused
        self._steps_requested = 0
        self._stop_event = threading.Event()
        self._idle_wait_s = idle_wait_s
        self._error: str | None = None
        self._recording_failed = False
        self._status = "loading model…"
        self.built: BuiltEngine | None = None
        self._started_at = started_at if started_at is not None else time.perf_counter()
        self.first_token_s: float | None = None   # seconds from started_at to the first generated token
        self.build_s: float | None = None         # seconds spent loading the model and building
        self._ids = itertools.count()
        self._threads = threads

    # --- EngineControl (any thread) ---------------------------------------------------------
    def pause(self) -> None:
        self._commands.put(self._do_pause)

    def resume(self) -> None:
        self._commands.put(self._do_resume)

    def step_once(self) -> None:
        self._commands.put(self._do_step)

    def is_paused(self) -> bool:
        return self._paused

    def last_error(self) -> str | None:
        return self._error

    def threads_status(self) -> str | None:
        """torch's thread count and why, for the status bar (None when no governor runs)."""
        return None if self._threads is None else self._threads.describe()

    def status(self) -> str:
        """One line for the status bar: loading / running / paused / idle / failed."""
        return self._status

    def add_request(self, prompt: str, max_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, seed: int | None = None, **sampling: Any) -> str:
        """Queue a text request; ``sampling``: further :class:`SamplingParams` fields by name
        (``priority``, penalties...). Raises ``ValueError`` at once for an unknown field, a value
        out of range, or (once the engine is built) a request it could never serve: the
        scheduler's admission check, e.g. prompt + max_tokens over ``max_model_len``. Other
        errors come from the engine thread (``last_error``)."""
        params = sampling_params(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                 seed=seed, **sampling)
        rid = f"inj-{next(self._ids)}"
        built = self.built
        ids = None
        if built is not None:                   # the limits only read the config: refuse now
            ids = encode_prompt(built.tokenizer, prompt)
            problem = built.engine.scheduler.admission_error(Request(rid, ids, params))
            if problem:
                raise ValueError(f"it can never be served: {problem}")

        def add() -> None:
            built = self.built
            tokens = ids if ids is not None else encode_prompt(built.tokenizer, prompt)
            built.engine.add_request(tokens, params, request_id=rid, prompt_text=prompt)
        self._commands.put(add)
        return rid

    def abort_request(self, request_id: str) -> None:
        self._commands.put(lambda: self.built.engine.abort_request(request_id))

    def pause_request(self, request_id: str) -> None:
        self._commands.put(lambda: self.built.engine.pause_request(request_id))

    def resume_request(self, request_id: str) -> None:
        self._commands.put(lambda: self.built.engine.resume_request(request_id))

    def set_priority(self, request_id: str, priority: int) -> None:
        """Change a live request's priority (``LLMEngine.set_priority``); under another policy
        the engine's refusal shows in ``last_error``."""
        value = int(priority)
        self._commands.put(lambda: self.built.engine.set_priority(request_id, value))

    def move_to_front(self, request_id: str) -> None:
        """Serve a waiting request next (``LLMEngine.move_to_front``, policy ``fcfs``); a
        refusal shows in ``last_error``."""
        self._commands.put(lambda: self.built.engine.move_to_front(request_id))

    def set_knobs(self, **changes: int) -> None:
        """Change live knobs (``engine.state.source.LIVE_KNOBS``) on the engine thread, between steps
        (``LLMEngine.set_knobs``). Raises ``ValueError`` at once for an unknown knob or a value
        that is not an int; a value the engine refuses (``ConfigError`` / ``ValueError`` naming
        the knob and its limit) shows in ``last_error``, and nothing changes."""
        values = check_knobs(changes)
        if values:
            self._commands.put(lambda: self.built.engine.set_knobs(**values))

    def knobs(self) -> dict[str, int]:
        """The live knobs' current values by name ({} before the engine is built)."""
        built = self.built
        return {} if built is None else current_knobs(built.engine)

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop, flush and close the recorder; waits up to ``timeout`` seconds."""
        self._stop_event.set()
        self._commands.put(lambda: None)
        if self.is_alive():
            self.join(timeout)

    # --- engine thread ----------------------------------------------------------------------
    def _do_pause(self) -> None:
        self._paused = True
        if self.built:
            self.built.engine.freeze_clock()

    def _do_resume(self) -> None:
        self._paused = False
        if self.built:
            self.built.engine.thaw_clock()

    def _do_step(self) -> None:
        self._steps_requested += 1

    def run(self) -> None:
        t0 = time.perf_counter()
        try:
            self.built = self._build()
            self.build_s = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - shown in the window
            if isinstance(e, (ModelLoadError, ConfigError, OSError)):   # the user's input: one line
                log.error("engine build failed: %s", e)
            else:                                                       # a bug: its traceback
                log.exception("engine build failed")
            self._error = f"{type(e).__name__}: {e}"
            self._status = "failed to start"
            return
        eng = self.built.engine
        if self._paused:
            eng.freeze_clock()
        if self._on_ready:
            self._on_ready(self.built)
        # Model, tokenizer and workload live for the whole run: keep them out of the cyclic
        # collector's full passes (vLLM does the same after start-up), so a full collection with
        # thousands of queued requests does not stall a frame; full passes then run rarely
        # (app.long_lived: the threshold and why).
        freeze_long_lived()
        self.source.reset(eng.state(), self.built.run_info)
        self._status = "paused" if self._paused else "running"
        try:
            self._loop()
        finally:
            if eng.recorder is not None and eng.has_pending_changes:
                eng.step(run_batch=False)        # the last user actions reach the recording
            rec = eng.recorder
            if rec is not None and hasattr(rec, "close"):
                try:
                    rec.close()
                except Exception as e:  # noqa: BLE001
                    self._error = f"recording: {e}"

    def _loop(self) -> None:
        eng = self.built.engine
        while not self._stop_event.is_set():
            changed = self._drain()
            if self._threads is not None:
                self._threads.maybe_recheck()        # other work on the machine came or went
            eng.admit_due()
            if eng.poll_recorder() and not self._recording_failed:
                self._recording_failed = True        # pause before the next step: the user decides
                self._do_pause()
                self._error = (f"{eng.recorder_error}. The engine is paused: resume to serve on "
                               "without recording.")
            stepping = self._steps_requested > 0 or not self._paused
            s = eng.scheduler
            if stepping and (s.waiting or s.running):
                if self._steps_requested > 0:
                    self._steps_requested -= 1
                try:
                    record = eng.step()
                except Exception as e:  # noqa: BLE001 - the window must stay up
                    log.exception("engine step failed")
                    self._error = f"step failed: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
                    self._paused = True
                    continue
                if record.error:
                    self._error = f"step {record.step}: {record.error}"

                if self.first_token_s is None and record.new_tokens:
                    self.first_token_s = time.perf_counter() - self._started_at
                    print(f"batchscope: first token after {self.first_token_s:.1f} s (model load and "
                          f"engine build {self.build_s or 0.0:.1f} s)", file=sys.stderr, flush=True)
                if self._paused or self.source.wants_state():
                    self.source.publish(eng.state(), record)
                else:
                    self.source.publish_record(record)
                self._status = "paused" if self._paused else "running"
                continue
            if self._steps_requested and not (s.waiting or s.running):
                self._steps_requested = 0        # nothing to step: do not bank the request
            if changed or self.source.latest_step() != eng.step_index - 1:
                self.source.publish(eng.state())
            self._status = "paused" if self._paused else ("idle" if not eng.has_unfinished else "waiting for arrivals")
            try:
                self._commands.get(timeout=self._idle_wait_s)()
                self.source.publish(eng.state())
            except queue.Empty:
                pass
            except Exception as e:  # noqa: BLE001
                self._error = f"{type(e).__name__}: {e}"

    def _drain(self) -> bool:
        n = 0
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return n > 0
            n += 1
            try:
                cmd()
            except Exception as e:  # noqa: BLE001 - bad input must not kill the engine thread
                log.warning("command failed: %s", e)
                self._error = f"{type(e).__name__}: {e}"


SAMPLING_FIELDS = frozenset(f.name for f in fields(SamplingParams))


def sampling_params(**values: Any) -> SamplingParams:
    """``SamplingParams(**values)``, with an unknown field name refused as ``ValueError`` naming
    it and the known ones (out-of-range values: ``SamplingParams``' own ``ValueError``)."""
    unknown = sorted(set(values) - SAMPLING_FIELDS)
    if unknown:
        raise ValueError(f"unknown sampling parameter(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(SAMPLING_FIELDS))}")
    return SamplingParams(**values)


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Token ids of a user prompt: the model's chat template when it has one, else plain text.
    Raises ``ValueError`` for an empty prompt."""
    if not prompt.strip():
        raise ValueError("empty prompt: type some text")
    if tokenizer is None:
        raise ValueError("this model has no tokenizer: text prompts are not possible")
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer.encode(prompt)


def empty_state(max_num_seqs: int = 1) -> EngineState:
    """What the window shows before the engine exists."""
    return EngineState(-1, 0.0, 0, 16, max_num_seqs)
