"""In-memory sources for UI tests and the UI benchmark, built on the REAL engine.

``FakeSource`` runs ``engine.engine.LLMEngine`` with the fake runner through the tests' engine
driver (``engine_driver.EngineRun``; no model; virtual clock, so arrivals are counted in steps)
and keeps every step's record and state in memory: a ``StepSource`` the window cannot tell from
a live engine or a recording.
``FakeControl`` is an ``EngineControl`` over the same engine that also logs its calls;
``big_source()`` builds the production-sized state of the UI benchmark (16k blocks, 256 running,
10k waiting).
"""
from __future__ import annotations



from engine.config import EngineConfig  # noqa: E402
from engine.outputs import StepRecord  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from engine.run_info import RunInfo  # noqa: E402
from engine.state.source import check_knobs, current_knobs  # noqa: E402
from engine.state.state import EngineState  # noqa: E402
from tests.support.engine_driver import EngineRun  # noqa: E402
from tests.support.fake_runner import VOCAB_SIZE, ToyTokenizer, hash_next_token  # noqa: E402
from recordings.file.step_batches import batch_columns  # noqa: E402
from recordings.info import TimelineEvent, timeline_events  # noqa: E402

WORDS = ("the", " cache", " fills", " one", " block", " at", " a", " time", " while", " new",
         " requests", " wait", " their", " turn", ",", " and", " tokens", " stream", " out", ".")
TOKENIZER = ToyTokenizer({i: WORDS[i % len(WORDS)] for i in range(VOCAB_SIZE)})

# (prompt tokens, max_tokens, arrival step): six requests through 4 slots, 64 blocks of 16,
# a 96-token budget, so prefill is chunked, slots fill up and requests wait for them.
WORKLOAD = ((120, 18, 0), (260, 14, 0), (64, 30, 2), (150, 20, 5), (230, 16, 8), (180, 22, 11))


def prompt_ids(n: int, salt: int, shared_prefix: int = 0) -> list[int]:
    """``n`` deterministic prompt token ids (different per ``salt`` after the first
    ``shared_prefix``, which every prompt shares)."""
    return [(7 * i + (0 if i < shared_prefix else 13 * salt)) % VOCAB_SIZE for i in range(n)]


class FakeSource:
    """A ``StepSource`` over a real engine with the fake runner, stepped ``num_steps`` times.

    ``states`` (kept unless ``keep_states=False``) and ``history`` hold every step; the state of
    the newest step is ``engine.state()`` itself, so changes made between steps (an injected
    request, an abort) show up at once, as with a live engine. ``workload`` entries are
    ``(prompt tokens, max_tokens, arrival step[, priority])``; every prompt starts with the same
    ``shared_prefix`` tokens; ``config`` are further ``EngineConfig`` knobs (``policy``,
    ``enable_prefix_caching``...)."""

    def __init__(self, num_steps: int = 40, *, num_blocks: int = 64, block_size: int = 16,
                 max_num_seqs: int = 4, budget: int = 96, workload=WORKLOAD, fail_steps=(),
                 max_model_len: int = 2048, keep_states: bool = True, tokenizer=TOKENIZER,
                 next_token_fn=hash_next_token, record_to=None, shared_prefix: int = 0, **config):
        self.config = EngineConfig(block_size=block_size, num_gpu_blocks=num_blocks,
                                   max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                                   max_model_len=max_model_len, clock="virtual", **config)
        self.shared_prefix = shared_prefix
        self.run = EngineRun.start(self.config, next_token_fn=next_token_fn, fail_steps=fail_steps,
                                   tokenizer=tokenizer, record_to=record_to,
                                   run_info=None if record_to is None else self.run_info(),
                                   writer_kwargs={"keyframe_interval": 8}, keep_requests=False)
        self.engine, self.runner, self.writer = self.run.engine, self.run.runner, self.run.writer
        self.history: list[StepRecord] = self.run.records
        self.keep_states = keep_states
        self.num_added = 0
        for prompt, max_tokens, at, *priority in workload:
            self.add(prompt, max_tokens, float(at), *priority)
        self.states: list[EngineState] = [self.engine.state()]
        self._text: dict[str, list[tuple[int, str]]] = {}
        self.advance(num_steps)

    def add(self, num_prompt_tokens: int, max_tokens: int, arrival_time: float | None = None,
            priority: int = 0) -> str:
        """Add ``req-<n>`` (n = requests added so far); arrival on the virtual clock."""
        rid = f"req-{self.num_added}"
        self.run.add(prompt_ids(num_prompt_tokens, self.num_added, self.shared_prefix),
                     SamplingParams(max_tokens=max_tokens, ignore_eos=True, priority=priority),
                     request_id=rid, arrival_time=arrival_time)
        self.num_added += 1
        return rid

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            rec = self.run.step(keep_state=False)
            for t in rec.new_tokens:
                if t.text:
                    self._text.setdefault(t.request_id, []).append((rec.step, t.text))
            if self.keep_states:
                self.states.append(self.engine.state())

    def close(self) -> None:
        """Close the recording (with ``record_to``)."""
        self.run.close()

    # --- StepSource ----------------------------------------------------------------------
    def run_info(self) -> RunInfo:
        return RunInfo(model="fake/SmolLM2-135M", device="cpu", dtype="float32",
                       started_at="2025-01-01T00:00:00", config=self.config.to_dict())

    def latest_step(self) -> int:
        return len(self.history) - 1

    def state_at(self, step: int) -> EngineState:
        step = max(-1, min(step, self.latest_step()))
        if step == self.latest_step():
            return self.engine.state()
        return self.states[step + 1]

    def records(self, start: int, stop: int) -> list[StepRecord]:
        return self.history[max(start, 0):max(stop, 0)]

    def request_text(self, request_id: str, step: int) -> str:
        return "".join(t for s, t in self._text.get(request_id, ()) if s <= step)

    def request_timeline(self, request_id: str) -> list[TimelineEvent]:
        return timeline_events(self.history, request_id)

    def step_batches(self, start: int, stop: int) -> dict:
        return batch_columns(self.records(start, stop))

    def request_info(self, request_id: str) -> None:
        """None: no recording to look a request up in (as a live run without a file)."""
        return None


def big_source(num_blocks: int = 16_384, running: int = 256, waiting: int = 10_000,
                output: int = 192) -> FakeSource:
    """A production-sized state from the real engine: ``running`` requests decoding over all
    but a few of ``num_blocks`` blocks (16 tokens each), ``waiting`` more behind the slot cap;
    the fake model samples token 1 and does no hashing, so it builds in seconds."""
    prompt = num_blocks * 16 // running - output
    workload = [(prompt, output, 0)] * running + [(32, 16, 0)] * waiting
    src = FakeSource(0, num_blocks=num_blocks, block_size=16, max_num_seqs=running, budget=8192,
                     workload=workload, max_model_len=prompt + output, tokenizer=None,
                     next_token_fn=lambda ctx, n: 1)
    while src.latest_step() < 0 or any(e.is_prefill for e in src.history[-1].scheduled):
        src.advance(1)
    return src


# (prompt tokens, max_tokens, arrival step): four requests grow over 20 blocks of 16 until the
# cache runs out; with swap preemption and 6 CPU blocks, req-3 is swapped out at step 21 (5
# blocks), and at step 38 req-2 needs 6 while req-3 still holds 5: a recompute fallback
SWAP_WORKLOAD = ((60, 40, 0), (60, 40, 0), (60, 40, 0), (60, 40, 0), (50, 30, 3), (40, 20, 6))


def swap_source(num_steps: int = 70, num_cpu_blocks: int = 6, **config) -> FakeSource:
    """A run with swap preemption under memory pressure (:data:`SWAP_WORKLOAD`): 20 GPU blocks,
    4 slots, ``num_cpu_blocks`` CPU blocks."""
    return FakeSource(num_steps, num_blocks=20, max_num_seqs=4, budget=96, workload=SWAP_WORKLOAD,
                      preemption_mode="swap", num_cpu_blocks=num_cpu_blocks, **config)


def shown_window(qtbot, source, control=None):
    """A ``ui.MainWindow`` on ``source`` (live with ``control``), shown, its frame timer
    stopped: tests draw frames with ``refresh()`` / ``show_step()``."""
    from ui import MainWindow
    w = MainWindow(source, control)
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def show(w, k: int) -> None:
    """Show step ``k`` and let the window settle: a frame that follows another draw updates the
    queue tables or the metrics + inspector, not both (``ui.frame_pacer``); once frames with
    nothing new show the stream stopped, the other catches up."""
    w.show_step(k)
    settle(w)


def settle(w) -> None:
    """Frames with nothing new to draw until the stream of draws has stopped
    (``ui.frame_pacer.STILL_FRAMES``): the views left a draw behind catch up."""
    from ui.frame_pacer import STILL_FRAMES
    for _ in range(STILL_FRAMES):
        w.refresh()


class FakeControl:
    """``EngineControl`` over a FakeSource's engine; ``calls`` logs every call in order."""

    def __init__(self, source: FakeSource):
        self.source = source
        self.calls: list[tuple] = []
        self.paused = False
        self.error: str | None = None

    def pause(self) -> None:
        self.calls.append(("pause",))
        self.paused = True

    def resume(self) -> None:
        self.calls.append(("resume",))
        self.paused = False

    def step_once(self) -> None:
        self.calls.append(("step_once",))
        self.source.advance(1)

    def is_paused(self) -> bool:
        return self.paused

    def add_request(self, prompt: str, max_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, seed: int | None = None, **sampling) -> str:
        self.calls.append(("add_request", prompt, max_tokens, temperature, top_p, seed, sampling))
        return self.source.add(max(1, len(prompt.split())), max_tokens,
                               priority=sampling.get("priority", 0))

    def abort_request(self, request_id: str) -> None:
        self.calls.append(("abort_request", request_id))
        self.source.engine.abort_request(request_id)

    def pause_request(self, request_id: str) -> None:
        self.calls.append(("pause_request", request_id))
        self.source.engine.pause_request(request_id)

    def resume_request(self, request_id: str) -> None:
        self.calls.append(("resume_request", request_id))
        self.source.engine.resume_request(request_id)

    def set_priority(self, request_id: str, priority: int) -> None:
        """As the engine worker: a refusal goes to ``last_error``, never raised."""
        self.calls.append(("set_priority", request_id, priority))
        try:
            self.source.engine.set_priority(request_id, priority)
        except ValueError as e:
            self.error = f"{type(e).__name__}: {e}"

    def move_to_front(self, request_id: str) -> None:
        """As the engine worker: a refusal goes to ``last_error``, never raised."""
        self.calls.append(("move_to_front", request_id))
        try:
            self.source.engine.move_to_front(request_id)
        except ValueError as e:
            self.error = f"{type(e).__name__}: {e}"

    def set_knobs(self, **changes: int) -> None:
        """As the engine worker: bad names or types raise at once, a refusal goes to
        ``last_error``."""
        self.calls.append(("set_knobs", changes))
        values = check_knobs(changes)
        try:
            self.source.engine.set_knobs(**values)
        except ValueError as e:                          # ConfigError is a ValueError
            self.error = f"{type(e).__name__}: {e}"

    def knobs(self) -> dict[str, int]:
        return current_knobs(self.source.engine)

    def last_error(self) -> str | None:
        return self.error

    def status(self) -> None:
        """None: the transport says paused or running."""
        return None

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]
