"""RecordingWriter: batching, flushing, closing, refusing, a bounded queue that makes the engine
wait, and writer-thread failures that stop the recording but not the engine."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.engine_driver import SMALL_SEED, feed, run_engine, without_wall_times
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError
from recordings.file.writer import RecordingWriter
from recordings.file import codec, packing
from recordings.file.writer import BATCH_ITEMS, PAGE_SIZE


def wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture(scope="module")
def small_run():
    """A small run (not recorded): its records and arrivals are fed to writers by hand."""
    return run_engine(None, SMALL_SEED)


def test_writes_are_queued_until_a_flush(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, small_run.run_info, flush_interval_s=60) as writer:
        reader = open_reader(path)
        feed(writer, small_run, 0, 5)
        time.sleep(0.05)
        assert reader.latest_step() == -1  # nothing committed by write_step itself
        writer.flush()
        assert reader.latest_step() == 4 == writer.last_committed_step
        assert reader.state_at(4) == small_run.states[4]


def test_a_batch_commits_after_the_flush_interval(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, small_run.run_info, flush_interval_s=0.02) as writer:
        reader = open_reader(path)
        feed(writer, small_run, 0, 3)
        assert wait_for(lambda: reader.latest_step() == 2)


def test_a_full_batch_commits_without_waiting(tmp_path):
    run = run_engine(None, 2, num_requests=150, num_gpu_blocks=40, max_num_seqs=8)
    n = len(run.records)
    assert n > BATCH_ITEMS // 2 and n + len(run.prompts) > BATCH_ITEMS + 50
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, run.run_info, flush_interval_s=60) as writer:
        reader = open_reader(path)
        feed(writer, run, 0, n)
        assert wait_for(lambda: reader.latest_step() >= BATCH_ITEMS // 3)
        assert reader.latest_step() < n - 1  # the tail waits for its batch
    assert open_reader(path).records(0, n) == run.records


def test_close_is_idempotent_and_leaves_one_complete_file(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    writer = RecordingWriter(path, small_run.run_info)
    feed(writer, small_run, 0, len(small_run.records))
    writer.close()
    writer.close()
    assert not Path(f"{path}-wal").exists()
    assert open_reader(path).is_complete()
    assert open_reader(path).execute("PRAGMA page_size") == [(PAGE_SIZE,)]
    with pytest.raises(RecordingError, match="closed"):
        writer.write_step(small_run.records[0])
    with pytest.raises(RecordingError, match="closed"):
        writer.flush()


def test_refuses_to_overwrite_an_existing_file(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, small_run.run_info) as writer:
        feed(writer, small_run, 0, 3)
    with pytest.raises(RecordingError, match="already exists"):
        RecordingWriter(path, small_run.run_info)
    assert open_reader(path).latest_step() == 2
    with RecordingWriter(path, small_run.run_info, overwrite=True) as writer:
        feed(writer, small_run, 0, 5)
    assert open_reader(path).latest_step() == 4


def test_bad_arguments(tmp_path, small_run):
    info = small_run.run_info.replace(config={"block_size": 16})
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        RecordingWriter(tmp_path / "a.sqlite", info)
    with pytest.raises(ValueError, match="keyframe_interval"):
        RecordingWriter(tmp_path / "a.sqlite", small_run.run_info, keyframe_interval=0)
    with pytest.raises(RecordingError, match="cannot create"):
        RecordingWriter(tmp_path / "missing" / "dir" / "a.sqlite", small_run.run_info)
    with pytest.raises(ValueError, match="page_size must be a power of two from 512 to 65536 bytes, got 5000"):
        RecordingWriter(tmp_path / "a.sqlite", small_run.run_info, page_size=5000)


def test_run_info_keeps_what_json_cannot_hold_as_text(tmp_path, small_run):
    info = {**small_run.run_info.to_json(), "weights": Path("/models/x.safetensors"), "dims": (1, 2)}
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, info):
        pass
    got = open_reader(path).run_info()
    assert got.extra["weights"] == "/models/x.safetensors" and got.extra["dims"] == [1, 2]
    row = open_reader(path).execute("SELECT model, device, dtype, seed, clock FROM runs")
    assert row == [("fake", "cpu", "none", SMALL_SEED, "virtual")]


def failing_at(monkeypatch, step: int, exc: Exception) -> None:
    """Make the writer thread fail when it converts step ``step`` (a full disk, a bug...)."""
    real = codec.step_rows

    def step_rows(record, *args):
        if record.step == step:
            raise exc
        return real(record, *args)

    monkeypatch.setattr(codec, "step_rows", step_rows)


def test_a_writer_thread_failure_is_raised_not_swallowed(tmp_path, small_run, monkeypatch):
    path = tmp_path / "run.sqlite"
    records = small_run.records
    failing_at(monkeypatch, 3, OSError(28, "No space left on device"))
    writer = RecordingWriter(path, small_run.run_info, flush_interval_s=0.01)
    feed(writer, small_run, 0, 3)
    writer.flush()
    feed(writer, small_run, 3, 4)
    def write_fails() -> bool:
        try:
            writer.write_step(records[4])
        except RecordingError:
            return True
        return False

    assert wait_for(write_fails)  # the next write after the failure raises
    with pytest.raises(RecordingError, match="writer failed.*OSError.*No space") as info:
        writer.flush()
    assert str(path) in str(info.value) and isinstance(info.value.__cause__, OSError)
    with pytest.raises(RecordingError, match="OSError"):
        writer.write_request("x", 5, 5.0, [1], None, {})  # sticky: nothing more is written
    with pytest.raises(RecordingError, match="OSError"):
        writer.close()
    writer.close()  # reported once; closing again is a no-op
    reader = open_reader(path)
    assert reader.latest_step() == 2 and not reader.is_complete()
    assert reader.state_at(10**6) == small_run.states[2]
    assert reader.records(0, 10**6) == records[:3]


def test_a_writer_failure_stops_the_recording_not_the_engine(tmp_path, monkeypatch):
    """The engine catches the writer's error (``recorder_error``), drops the recorder and serves
    on exactly as an unrecorded run; the file opens up to its last committed step."""
    path = tmp_path / "run.sqlite"
    failing_at(monkeypatch, 12, OSError(28, "No space left on device"))

    def commit_then_wait(run):
        if len(run.records) == 6:
            run.writer.flush()      # steps 0..5 committed
        if len(run.records) == 13:
            time.sleep(0.2)         # the writer thread reaches step 12 and fails

    run = run_engine(path, SMALL_SEED, between_steps=commit_then_wait, close=False,
                     writer_kwargs={"flush_interval_s": 0.01})
    engine = run.engine
    assert engine.recorder is None
    assert "No space left on device" in engine.recorder_error
    with pytest.raises(RecordingError, match="No space"):
        run.writer.close()
    unrecorded = run_engine(None, SMALL_SEED)
    assert [without_wall_times(r) for r in run.records] == [
        without_wall_times(r) for r in unrecorded.records]
    assert len(run.finished) == len(run.prompts)  # every request served to the end
    reader = open_reader(path)
    latest = reader.latest_step()
    assert 5 <= latest < 12 and not reader.is_complete()
    for k in range(latest + 1):
        assert reader.state_at(k) == run.states[k]
    assert reader.records(0, 10**6) == run.records[:latest + 1]


def test_a_step_naming_an_unannounced_request_fails_the_writer(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    writer = RecordingWriter(path, small_run.run_info)
    feed(writer, small_run, 0, 8, skip={small_run.records[0].arrivals[0].request_id})
    with pytest.raises(RecordingError, match="writer failed.*KeyError"):
        writer.close()
    assert open_reader(path).latest_step() == -1


def test_duplicate_steps_fail_the_writer(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    with pytest.raises(RecordingError, match="writer failed"):
        with RecordingWriter(path, small_run.run_info) as writer:
            feed(writer, small_run, 0, 1)
            writer.write_step(small_run.records[0])
    assert open_reader(path).latest_step() == -1


def test_write_step_only_enqueues(tmp_path, monkeypatch):
    """The engine thread does no SQL and no JSON: serialising is patched to fail on it."""
    caller = threading.current_thread()
    real = codec.step_rows

    def guarded(record, *args):
        assert threading.current_thread() is not caller
        return real(record, *args)

    monkeypatch.setattr(codec, "step_rows", guarded)
    run = run_engine(tmp_path / "run.sqlite", SMALL_SEED)
    assert run.engine.recorder_error is None
    assert open_reader(run.path).records(0, 10**6) == run.records


def test_a_full_queue_makes_the_engine_wait_and_nothing_is_dropped(tmp_path, monkeypatch):
    """With a slow writer and ``max_queue_items=2``, ``write_step`` blocks (the engine records
    the wait in the next step's ``recorder_wait_ns``) and every step reaches the file."""
    real = codec.step_rows
    delay_s = 0.005

    def slow(record, *args):
        time.sleep(delay_s)
        return real(record, *args)

    monkeypatch.setattr(codec, "step_rows", slow)
    depths = []
    run = run_engine(tmp_path / "run.sqlite", SMALL_SEED,
                     between_steps=lambda run: depths.append(run.writer.queue_depth),
                     writer_kwargs={"max_queue_items": 2, "flush_interval_s": 0.001})
    n = len(run.records)
    assert max(depths) <= 2
    waits = [r.recorder_wait_ns / 1e9 for r in run.records]
    assert max(waits) > delay_s / 2 and sum(waits) > delay_s * n / 3
    reader = open_reader(run.path)
    assert reader.is_complete()
    assert reader.records(0, 10**6) == run.records
    assert reader.execute("SELECT sum(recorder_wait_ns) FROM steps")[0][0] == sum(
        r.recorder_wait_ns for r in run.records)


def test_the_queue_is_bounded_in_bytes_too(tmp_path, monkeypatch):
    """With a slow writer and a byte budget of three of the run's biggest steps, the queued
    steps never weigh more than the budget (many items fit the item bound), the engine waits for
    the writer instead, and every step reaches the file."""
    from recordings.file.writer import _weight

    small = run_engine(tmp_path / "first.sqlite", SMALL_SEED)
    budget = 3 * max(_weight(r) for r in small.records)
    real = codec.step_rows

    def slow(record, *args):
        time.sleep(0.003)
        return real(record, *args)

    monkeypatch.setattr(codec, "step_rows", slow)
    queued = []
    run = run_engine(tmp_path / "run.sqlite", SMALL_SEED,
                     between_steps=lambda run: queued.append(run.writer.queued_bytes),
                     writer_kwargs={"max_queue_bytes": budget, "flush_interval_s": 0.001})
    assert 0 < max(queued) <= budget
    assert max(r.recorder_wait_ns for r in run.records) > 0
    reader = open_reader(run.path)
    assert reader.is_complete() and reader.records(0, 10**6) == run.records
    assert run.writer.queued_bytes == 0


def test_values_that_do_not_follow_from_the_batch_are_stored_as_they_are(tmp_path, small_run):
    """The writer leaves out token indexes only when they follow from the batch; a record where
    they do not (a future engine), or a decode of several tokens, still round-trips exactly."""
    import dataclasses

    records = list(small_run.records)
    k = next(i for i, r in enumerate(records) if r.new_tokens and len(r.scheduled) > 1)
    odd = records[k]
    first = odd.new_tokens[0]
    entry = next(e for e in odd.scheduled if not e.is_prefill)
    odd = dataclasses.replace(
        odd, new_tokens=(first._replace(index=first.index + 7), *odd.new_tokens[1:]),
        scheduled=tuple(e._replace(num_tokens=3) if e is entry else e for e in odd.scheduled))
    run = dataclasses.replace(small_run, records=[*records[:k], odd, *records[k + 1:]])
    path = tmp_path / "run.sqlite"
    with RecordingWriter(path, run.run_info) as writer:
        feed(writer, run, 0, len(run.records))
    reader = open_reader(path)
    assert reader.records(0, 10**6) == run.records
    explicit = [step for step, blob in reader.execute("SELECT step, batch FROM steps")
                if blob is not None and len(packing.unpack(blob)[6])]    # the token indexes
    assert explicit == [k]
    batch = reader.batches(k, k + 1)[0][1]
    assert batch.num_tokens.tolist() == [e.num_tokens for e in odd.scheduled]


def test_prompt_token_blobs():
    assert codec.tokens_from_blob(codec.token_blob([1, 2, 65535])) == (1, 2, 65535)
    assert len(codec.token_blob([1, 2, 65535])) == 7  # 2 bytes a token when they fit
    assert codec.tokens_from_blob(codec.token_blob([1, 128_000])) == (1, 128_000)
    assert codec.tokens_from_blob(codec.token_blob([])) == ()
    legacy = bytes(range(8))  # plain int32, as files written before the tag hold them
    assert codec.tokens_from_blob(legacy) == (0x03020100, 0x07060504)
    with pytest.raises(ValueError, match="tag"):
        codec.tokens_from_blob(b"\x07ab")
