"""With a recording, finished request ids leave the engine's memory and the duplicate check asks
the recording (``RecordingWriter.recorded_ids``): exact for ids committed to the file and for
ids still queued for the writer thread, and still for the file's ids after recording stopped."""
from __future__ import annotations

import pytest

from engine.engine import LLMEngine
from engine.request import SamplingParams
from tests.support.engine_driver import make_config
from tests.support.fake_runner import NullRunner
from recordings.file.writer import RecordingWriter

USED = ("a", "g", "g#0", "g#1", "too-long")


def recorded_engine(tmp_path, **writer_kwargs):
    config, run_info = make_config(num_gpu_blocks=32, max_num_seqs=8)
    writer = RecordingWriter(tmp_path / "run.sqlite", run_info, **writer_kwargs)
    engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=writer)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True), request_id="a")
    engine.add_request([1, 2], SamplingParams(max_tokens=2, n=2, ignore_eos=True), request_id="g")
    engine.add_request([1] * 100, SamplingParams(max_tokens=2), request_id="too-long")  # rejected
    engine.run_until_done()
    return engine, writer


def assert_used_refused(engine):
    for rid in USED:
        with pytest.raises(ValueError, match=f"duplicate request id '{rid}'"):
            engine.add_request([1], SamplingParams(max_tokens=1), request_id=rid)


@pytest.mark.parametrize("committed", [True, False])
def test_finished_ids_are_checked_through_the_recording(tmp_path, committed):
    # flush_interval_s long: nothing is committed before the flush below (ids stay queued)
    engine, writer = recorded_engine(tmp_path, flush_interval_s=3600)
    if committed:
        writer.flush()
    assert bool(writer._recorded.queued) is not committed
    assert writer._recorded._conn is None    # at finish each id was in the writer's memory: no query
    ids = engine._request_ids
    assert ids.live == {} and len(ids.hashes) == 0 and ids.lookups == [writer.recorded_ids]
    assert_used_refused(engine)
    engine.add_request([1], SamplingParams(max_tokens=1), request_id="fresh")
    assert writer.recorded_ids(["a", "g", "fresh", "nope", "g#1"]) == {"a", "g", "fresh", "g#1"}
    writer.close()
    assert writer.recorded_ids(["a", "nope"]) == {"a"}       # the closed file answers too


def test_after_recording_stops_the_file_still_answers_and_new_finished_ids_are_hashed(tmp_path):
    engine, writer = recorded_engine(tmp_path)
    engine._recorder_failed(RuntimeError("disk full"))        # as after a write error
    engine.add_request([4, 5], SamplingParams(max_tokens=1, ignore_eos=True), request_id="later")
    engine.run_until_done()
    ids = engine._request_ids
    assert engine.recorder is None and len(ids.hashes) == 1 and ids.lookups == [writer.recorded_ids]
    assert_used_refused(engine)
    with pytest.raises(ValueError, match="'later'"):
        engine.add_request([1], SamplingParams(max_tokens=1), request_id="later")
    writer.close()
