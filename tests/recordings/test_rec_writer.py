"""RecordingWriter: batching, flushing, closing, refusing, and surfacing writer-thread failures."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from recordings import Reader, RecordingError, RecordingWriter
from recordings.writer import BATCH_ITEMS
from synthetic import feed, generate, write_run


def wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_writes_are_queued_until_a_flush(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, small_run.run_info, flush_interval_s=60) as writer:
        reader = Reader(path)
        feed(writer, small_run, 0, 5)
        time.sleep(0.05)
        assert reader.latest_step() == -1  # nothing committed by write_step itself
        writer.flush()
        assert reader.latest_step() == 4 == writer.last_committed_step
        assert reader.state_at(4) == small_run.states[4]


def test_a_batch_commits_after_the_flush_interval(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, small_run.run_info, flush_interval_s=0.02) as writer:
        reader = Reader(path)
        feed(writer, small_run, 0, 3)
        assert wait_for(lambda: reader.latest_step() == 2)


def test_a_full_batch_commits_without_waiting(tmp_path):
    run = generate(seed=2, num_requests=80, num_gpu_blocks=60, max_steps=400)
    assert len(run.records) > BATCH_ITEMS // 2 and len(run.records) + 80 > BATCH_ITEMS + 50
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, run.run_info, flush_interval_s=60) as writer:
        reader = Reader(path)
        feed(writer, run, 0, len(run.records))
        assert wait_for(lambda: reader.latest_step() >= BATCH_ITEMS // 2)
        assert reader.latest_step() < len(run.records) - 1  # the tail waits for its batch
    assert Reader(path).records(0, len(run.records)) == run.records


def test_close_is_idempotent_and_leaves_one_complete_file(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    writer = write_run(small_run, path)
    writer.close()
    assert not Path(f"{path}-wal").exists()
    assert Reader(path).is_complete()
    with pytest.raises(RecordingError, match="closed"):
        writer.write_step(small_run.records[0])
    with pytest.raises(RecordingError, match="closed"):
        writer.flush()


def test_refuses_to_overwrite_an_existing_file(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    write_run(small_run, path, upto=3)
    with pytest.raises(RecordingError, match="already exists"):
        RecordingWriter(path, small_run.run_info)
    assert Reader(path).latest_step() == 2
    write_run(small_run, path, upto=5, overwrite=True)
    assert Reader(path).latest_step() == 4


def test_bad_arguments(tmp_path, small_run):
    info = dict(small_run.run_info, config={"block_size": 16})
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        RecordingWriter(tmp_path / "a.sqlite", info)
    with pytest.raises(ValueError, match="keyframe_interval"):
        RecordingWriter(tmp_path / "a.sqlite", small_run.run_info, keyframe_interval=0)
    with pytest.raises(RecordingError, match="cannot create"):
        RecordingWriter(tmp_path / "missing" / "dir" / "a.sqlite", small_run.run_info)


def test_run_info_keeps_what_json_cannot_hold_as_text(tmp_path, small_run):
    info = dict(small_run.run_info, weights=Path("/models/x.safetensors"), dims=(1, 2))
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, info):
        pass
    got = Reader(path).run_info()
    assert got["weights"] == "/models/x.safetensors" and got["dims"] == [1, 2]
    row = Reader(path).execute("SELECT model, device, dtype, seed, clock FROM runs")
    assert row == [("synthetic", "cpu", "float32", 1, "virtual")]


def test_a_writer_thread_failure_is_raised_not_swallowed(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    records = small_run.records
    bad_output = dataclasses.replace(records[3].scheduler_output, preempted_ids=(object(),))
    bad = dataclasses.replace(records[3], scheduler_output=bad_output)
    writer = RecordingWriter(path, small_run.run_info, flush_interval_s=60)
    feed(writer, small_run, 0, 3)
    writer.flush()
    writer.write_step(bad)
    with pytest.raises(RecordingError, match="writer failed.*TypeError") as info:
        writer.flush()
    assert str(path) in str(info.value) and isinstance(info.value.__cause__, TypeError)
    with pytest.raises(RecordingError, match="TypeError"):
        writer.write_step(records[4])  # sticky: nothing more is written
    with pytest.raises(RecordingError, match="TypeError"):
        writer.close()
    writer.close()  # reported once; closing again is a no-op
    reader = Reader(path)
    assert reader.latest_step() == 2 and not reader.is_complete()
    assert reader.state_at(2) == small_run.states[2]


def test_duplicate_steps_fail_the_writer(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with pytest.raises(RecordingError, match="writer failed"):
        with RecordingWriter(path, small_run.run_info) as writer:
            writer.write_step(small_run.records[0])
            writer.write_step(small_run.records[0])
    assert Reader(path).latest_step() == -1


def test_write_step_only_enqueues(tmp_path, small_run, monkeypatch):
    """The engine thread does no SQL and no JSON: serialising is patched to fail on it."""
    import threading

    from recordings import codec

    path = tmp_path / "run.sqlite"
    caller = threading.current_thread()
    real = codec.step_rows

    def guarded(record):
        assert threading.current_thread() is not caller
        return real(record)

    monkeypatch.setattr(codec, "step_rows", guarded)
    write_run(small_run, path)
    assert Reader(path).records(0, 10**6) == small_run.records
