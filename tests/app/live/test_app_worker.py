"""The engine worker thread (app.live.bridge.EngineWorker) on the real engine with the fake runner:
a recorder failure is shown through last_error while the engine serves on, and user actions
made after the last step reach the recording when the worker stops; extra sampling fields and
priority changes reach the engine, and a refused priority change comes back in last_error."""
from __future__ import annotations

import time
from pathlib import Path

import pytest


from engine.run_info import RunInfo  # noqa: E402
from app.live.bridge import EngineWorker  # noqa: E402
from app.factory import BuiltEngine  # noqa: E402
from app.live.source import LiveSource  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from engine.model.files import ModelLoadError  # noqa: E402
from tests.support.fake_runner import FakeRunner  # noqa: E402
from tests.support.disk_full import fill_disk_at  # noqa: E402
from recordings.file.reader import Reader  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.file.writer import RecordingWriter  # noqa: E402

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=32, max_model_len=64, max_num_seqs=4,
                      max_num_batched_tokens=16)


def start(path: Path, *, paused: bool, num_requests: int = 6, max_tokens: int = 20) -> tuple[EngineWorker, dict]:
    done: dict = {}

    def build() -> BuiltEngine:
        run_info = RunInfo(config=CONFIG.to_dict(), model={"name": "fake"}, recording=str(path))
        writer = RecordingWriter(path, run_info, flush_interval_s=0.01)
        engine = LLMEngine(CONFIG, FakeRunner(32, 4), 32, recorder=writer)
        done.update(finished=engine.collect_finished())
        for i in range(num_requests):
            engine.add_request([1 + i, 2, 3, 4], SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                               request_id=f"r{i}")
        return BuiltEngine(engine, CONFIG, run_info, None, 1000)

    worker = EngineWorker(build, LiveSource(open_reader=Reader), start_paused=paused, idle_wait_s=0.01)
    worker.start()
    deadline = time.monotonic() + 30
    while worker.built is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return worker, done


def wait_for(cond, timeout=30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_recorder_failure_pauses_the_engine_and_resume_serves_on(tmp_path, monkeypatch):
    fill_disk_at(monkeypatch, 8)
    real_step = LLMEngine.step

    def step(self, *args, **kwargs):       # a step of a real model takes time: the writer thread
        time.sleep(0.002)                  # fails while the engine is still serving (~180 steps)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(LLMEngine, "step", step)
    worker, done = start(tmp_path / "full.sqlite", paused=False, num_requests=12, max_tokens=60)
    wait_for(worker.is_paused)                                    # paused at once, by itself
    error = worker.last_error() or ""
    assert "No space left on device" in error and "paused" in error
    step = worker.built.engine.step_index
    time.sleep(0.2)
    assert worker.built.engine.step_index == step and len(done["finished"]) < 12
    worker.resume()
    wait_for(lambda: len(done["finished"]) == 12)
    assert all(r.num_output_tokens == 60 for r in done["finished"].values())   # served to the end
    worker.stop()
    last = open_reader(tmp_path / "full.sqlite").latest_step()
    assert last < 8 and (f"the file holds steps 0..{last} " if last >= 0 else "holds no step") in error


def test_actions_after_the_last_step_reach_the_recording(tmp_path):
    path = tmp_path / "paused.sqlite"
    worker, _ = start(path, paused=True)
    worker.step_once()
    wait_for(lambda: worker.source.latest_step() == 0)
    worker.abort_request("r5")
    worker.pause_request("r0")
    wait_for(lambda: worker.source.latest_state().view("r0").status == "PAUSED")
    worker.stop()
    reader = open_reader(path)
    assert reader.latest_step() == 1                       # one bookkeeping step, nothing ran in it
    assert reader.records(1, 2)[0].scheduled == ()
    assert reader.request_info("r5").status == "FINISHED_ABORTED"
    assert reader.state_at(1).view("r0").status == "PAUSED"


class WordTokenizer:
    """Token ids of whitespace-separated words (what ``encode_prompt`` needs of a tokenizer)."""

    chat_template = None

    def encode(self, text: str) -> list[int]:
        return [1 + len(w) for w in text.split()]


def start_policy(policy: str) -> EngineWorker:
    config = EngineConfig(block_size=4, num_gpu_blocks=32, max_model_len=64, max_num_seqs=4,
                          max_num_batched_tokens=16, policy=policy)

    def build() -> BuiltEngine:
        engine = LLMEngine(config, FakeRunner(32, 4), 32)
        return BuiltEngine(engine, config, {"config": config.to_dict()}, WordTokenizer(), 1000)

    worker = EngineWorker(build, LiveSource(), start_paused=True, idle_wait_s=0.01)
    worker.start()
    wait_for(lambda: worker.built is not None)
    return worker


def priority_of(worker: EngineWorker, rid: str):
    state = worker.source.latest_state()
    row = state.row(rid)
    return None if row is None else int(state.columns["priority"][row])


def test_sampling_fields_and_set_priority_reach_the_engine():
    worker = start_policy("priority")
    try:
        rid = worker.add_request("a few words here", 4, priority=-1, presence_penalty=0.5)
        wait_for(lambda: priority_of(worker, rid) == -1)
        req = worker.built.engine.scheduler.requests[rid]
        assert req.sampling_params.presence_penalty == 0.5
        worker.set_priority(rid, 3)
        wait_for(lambda: priority_of(worker, rid) == 3)
        assert worker.last_error() is None
        with pytest.raises(ValueError, match="unknown sampling parameter.*bogus"):
            worker.add_request("x", 4, bogus=1)
        with pytest.raises(ValueError, match="presence_penalty"):
            worker.add_request("x", 4, presence_penalty=9.0)
        limit = worker.built.config.max_model_len
        with pytest.raises(ValueError, match=f"never be served.*exceeds max_model_len {limit}"):
            worker.add_request("some words", limit + 1)          # refused at once, never queued
        assert worker.last_error() is None
    finally:
        worker.stop()


def test_set_priority_under_fcfs_is_refused_in_last_error_not_raised():
    worker = start_policy("fcfs")
    try:
        rid = worker.add_request("some words", 4)
        wait_for(lambda: priority_of(worker, rid) == 0)
        worker.set_priority(rid, 2)                   # returns at once, raises nothing
        wait_for(lambda: worker.last_error() is not None)
        assert "policy='priority'" in worker.last_error() and priority_of(worker, rid) == 0
    finally:
        worker.stop()


def test_set_knobs_reach_the_engine_and_a_refused_value_is_in_last_error():
    worker = start_policy("fcfs")
    try:
        assert worker.knobs() == {"max_num_seqs": 4, "max_num_batched_tokens": 16,
                                  "num_usable_blocks": 32}
        worker.set_knobs(max_num_seqs=2, num_usable_blocks=20)          # returns at once
        wait_for(lambda: worker.source.latest_state().max_num_seqs == 2)
        assert worker.knobs() == {"max_num_seqs": 2, "max_num_batched_tokens": 16,
                                  "num_usable_blocks": 20}
        assert int((worker.source.latest_state().block_owner == -2).sum()) == 12
        assert worker.last_error() is None
        worker.set_knobs(num_usable_blocks=33)                          # over the cache's 32
        wait_for(lambda: worker.last_error() is not None)
        assert "num_usable_blocks must be in [1, 32]" in worker.last_error()
        assert worker.knobs()["num_usable_blocks"] == 20                # nothing changed
        with pytest.raises(ValueError, match="unknown live knob.*block_size"):
            worker.set_knobs(block_size=8)
        with pytest.raises(ValueError, match="max_num_seqs must be an int"):
            worker.set_knobs(max_num_seqs=2.5)
    finally:
        worker.stop()


@pytest.mark.parametrize("error, traceback_logged", [
    (ModelLoadError("/models/x: no weight files (*.safetensors, *.bin)"), False),
    (ZeroDivisionError("a bug"), True)])
def test_a_build_that_fails_says_so_in_one_line_unless_it_is_a_bug(caplog, error, traceback_logged):
    """A model that does not load is the user's input: the log says it in one line (the window's
    banner shows it); an unexpected error keeps its traceback."""
    def build():
        raise error

    worker = EngineWorker(build, LiveSource(), idle_wait_s=0.01)
    with caplog.at_level("ERROR"):
        worker.start()
        worker.join(10)
    assert worker.status() == "failed to start" and str(error) in worker.last_error()
    (record,) = [r for r in caplog.records if "engine build failed" in r.getMessage()]
    assert (record.exc_info is not None) == traceback_logged
