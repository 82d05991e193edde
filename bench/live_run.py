"""The live window's data path without its threads, for bench/bench_ui_frame.py.

``LiveRun`` steps the REAL engine (``engine.engine.LLMEngine``, scheduler and block pool) with the
fake runner of ``tests/engine`` (no model, token 1 always) and hands each step over as the app's
engine worker (``app.live.bridge.EngineWorker``) does: the record to a ``recordings.file.writer.RecordingWriter``
(the file ``LiveSource`` reads older history from) and to an ``app.live.source.LiveSource`` (its
ring of newest records), the newest state with the last step of each burst. A ``FakeControl`` over
it makes the window live. Prompts are compact ``array('i')`` s, as the app's synthetic trace workloads
(``recordings.workloads.workload``) hand them to the engine: a list of ints would cost the garbage collector
a visit per token of every waiting prompt in each full collection. The run is in steady churn, as a production engine serves: requests of
staggered lengths finish and waiting ones are admitted at nearly every step, and the waiting queue
is topped up to its starting length after each burst, so any number of steps keeps the same shape.
"""
from __future__ import annotations

import array
from pathlib import Path

from app.live.source import LiveSource
from app.long_lived import freeze_long_lived
from engine.request import SamplingParams
from recordings.file.reader import Reader
from recordings.file.writer import RecordingWriter
from tests.support.fakes import FakeControl, FakeSource, prompt_ids


class LiveRun:
    """``running`` requests with staggered outputs (prompts filling about half of ``num_blocks``
    blocks of 16 tokens; outputs 100, 101, ... tokens) behind which ``waiting`` more of mixed
    lengths (prompts 200-999, outputs 50-299 tokens) queue. ``recording``: the file the engine
    records to (None: no recorder, and the live source has no history beyond its ring).
    ``warmup`` steps run before the first frame; then ``app.long_lived.freeze_long_lived()`` as the
    engine worker does after start-up (model and workload out of the full collections)."""

    def __init__(self, num_blocks: int, running: int, waiting: int, recording: Path | None,
                 warmup: int = 150) -> None:
        prompt = max(16, num_blocks * 16 // (2 * running))
        self.fake = FakeSource(0, num_blocks=num_blocks, block_size=16, max_num_seqs=running,
                               budget=8192, workload=(), max_model_len=max(4096, prompt + 1024),
                               tokenizer=None, next_token_fn=lambda ctx, n: 1)
        self.engine = self.fake.engine
        self.waiting = waiting
        run_info = self.fake.run_info()
        if recording is not None:        # as app.commands.window: the recorder before the first request
            run_info = run_info.replace(recording=str(recording))
            self.engine.recorder = RecordingWriter(recording, run_info)
        self.num_added = 0
        for i in range(running):
            self._add(prompt, 100 + i)
        self.source = LiveSource(self.engine.state(), open_reader=Reader)
        self.source.reset(self.engine.state(), run_info)
        self._top_up()
        self.advance(warmup)
        freeze_long_lived()

    def control(self) -> FakeControl:
        """An ``EngineControl`` over the engine (pause / abort / knobs act on it directly)."""
        return FakeControl(self.fake)

    def advance(self, n: int) -> None:
        """Run ``n`` engine steps, handing each record over; the state with the last one; wait
        for the recorder (its thread must not run inside the next timed frame); top the waiting
        queue up again."""
        rec = None
        for i in range(n):
            rec = self.engine.step()
            if i < n - 1:
                self.source.publish_record(rec)
        if rec is not None:
            self.source.publish(self.engine.state(), rec)
        if self.engine.recorder is not None:
            self.engine.recorder.flush()
        self._top_up()

    def _top_up(self) -> None:
        k = self.num_added
        for i in range(k, k + max(0, self.waiting - len(self.engine.scheduler.waiting))):
            self._add(200 + (37 * i) % 800, 50 + (53 * i) % 250)

    def _add(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Add ``req-<n>`` now (n = requests added so far)."""
        self.engine.add_request(array.array("i", prompt_ids(num_prompt_tokens, self.num_added)),
                                SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                                request_id=f"req-{self.num_added}")
        self.num_added += 1

    def close(self) -> None:
        """Close the recorder (the file stays)."""
        if self.engine.recorder is not None:
            self.engine.recorder.close()
