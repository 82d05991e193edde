"""The live source keeps the newest state and a short ring of records in memory and reads older
history back from the recording being written (through recordings.file.reader.Reader): whatever step the
window asks for, it gets what the engine published for that step."""
from __future__ import annotations

import random

import numpy as np
import pytest


from engine.run_info import RunInfo  # noqa: E402
from app.live import source as live_source  # noqa: E402
from app.live.source import LiveSource  # noqa: E402
from app.live.step_ring import step_of  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from tests.support.fake_runner import FakeRunner, ToyTokenizer  # noqa: E402
from recordings.file.reader import Reader  # noqa: E402
from recordings.file.writer import RecordingWriter  # noqa: E402
from recordings.info import timeline_events  # noqa: E402


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setattr(live_source, "RING_STEPS", 8)      # most history must come from the file
    config = EngineConfig(block_size=4, num_gpu_blocks=24, max_model_len=64, max_num_seqs=4,
                          max_num_batched_tokens=16, check_invariants=True)
    path = tmp_path / "live.sqlite"
    run_info = RunInfo(config=config.to_dict(), model={"name": "fake"}, recording=str(path))
    writer = RecordingWriter(path, run_info, flush_interval_s=0.01)
    tokenizer = ToyTokenizer({i: chr(97 + i % 26) for i in range(1000)})
    engine = LLMEngine(config, FakeRunner(24, 4), 24, tokenizer=tokenizer, recorder=writer)
    source = LiveSource(open_reader=Reader)
    source.reset(engine.state(), run_info)
    rng = random.Random(3)
    for i in range(16):
        engine.add_request([rng.randrange(1, 900) for _ in range(rng.randrange(2, 20))],
                           SamplingParams(max_tokens=rng.randrange(2, 10), ignore_eos=True),
                           request_id=f"r{i}", arrival_time=float(i))
    states, records = {}, []
    while engine.has_unfinished:
        record = engine.step()
        records.append(record)
        states[record.step] = engine.state()
        # like the bridge: every record, a state only now and then
        if record.step % 3 == 0 or not engine.has_unfinished:
            source.publish(engine.state(), record)
        else:
            source.publish_record(record)
        if record.step % 5 == 0:
            writer.flush()                    # some steps committed, the newest ones maybe not
    yield source, states, records, writer
    writer.close()


def test_every_past_step_is_what_the_engine_published(run):
    source, states, records, _ = run
    last = source.latest_step()
    assert last == records[-1].step and len(records) > 3 * live_source.RING_STEPS
    for k in range(0, last + 1):
        assert source.state_at(k) == states[k], k
    assert list(source.records(0, last + 1)) == records
    assert list(source.records(5, 12)) == records[5:12]


def test_text_comes_from_the_file_and_the_ring(run):
    source, _, records, _ = run
    last = source.latest_step()
    for rid in ("r0", "r7", "r15"):
        whole = "".join(t.text for r in records for t in r.new_tokens if t.request_id == rid)
        assert source.request_text(rid, last) == whole and whole
        mid = records[len(records) // 2].step
        assert source.request_text(rid, mid) == "".join(
            t.text for r in records if r.step <= mid for t in r.new_tokens if t.request_id == rid)


def test_memory_holds_the_ring_not_the_run(run):
    source, _, records, _ = run
    assert len(source._ring) == live_source.RING_STEPS < len(records)


def test_request_timeline_comes_from_the_file_and_the_ring(run):
    source, _, records, writer = run
    every = sorted({e.request_id for r in records for e in r.events})
    assert len(every) == 16
    for flushed in (False, True):      # whatever the file holds yet, then all of it
        if flushed:
            writer.flush()
        for rid in every:
            assert source.request_timeline(rid) == timeline_events(records, rid), (rid, flushed)
    assert source.request_timeline("nobody") == []


def test_step_batches_read_the_file_and_the_ring(run):
    """What the window's step views fetch (without decoding old records) equals the columns of
    the records, for ranges in the file, in the ring and across the two."""
    from recordings.file.step_batches import batch_columns

    source, _, records, _ = run
    last = source.latest_step()
    first_in_ring = step_of(source._ring[0])
    for start, stop in ((0, 5), (first_in_ring - 4, first_in_ring + 3), (first_in_ring, last + 1),
                        (0, last + 1), (last - 1, last + 5), (first_in_ring + 2, first_in_ring + 2)):
        got = source.step_batches(start, stop)
        want = batch_columns([r for r in records if start <= r.step < stop])
        assert set(got) == set(want)
        for name, value in want.items():
            assert list(got[name]) == list(value), (start, stop, name)
            if isinstance(value, np.ndarray):
                assert got[name].dtype == value.dtype, (start, stop, name)
        assert list(got["step"]) == [r.step for r in records if start <= r.step < stop]
