"""Light step summaries: what the slot timeline, the metrics plots, the error banner and the
"why not admitted" column read of a step. From a recording they come in one light query per step
range (``Reader.step_batches``: no record decoded), from other sources out of their records; both
must equal what the records say. The run: the real engine with the fake runner, recorded by the
real writer, with a preemption, requests not admitted, chunked prefills, a failed step and idle
steps in it."""
from __future__ import annotations
from tests.support.paths import FIXTURES


import numpy as np
import pytest

from tests.support.fakes import FakeSource
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader
from recordings.file.step_batches import batch_columns
from ui import MainWindow
from ui.views.metrics_plots import metric_row
from ui.record_cache import RecordCache
from ui.step_summary import StepSummary, fetch_summaries, summarize

V1_FIXTURE = FIXTURES / "v1_small.sqlite"
RANGES = ((0, 61), (5, 17), (17, 18), (16, 19), (40, 45), (55, 100), (70, 80), (-5, 3))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("summary") / "run.sqlite"
    source = FakeSource(60, num_blocks=28, fail_steps=(17,), record_to=path)
    source.close()
    reader = open_reader(path)
    records = source.records(0, 61)
    # the run covers every path of the decoding
    assert any(r.preempted_ids for r in records) and any(r.not_admitted for r in records)
    assert any(e.is_prefill and e.num_tokens > 1 for r in records for e in r.scheduled)
    assert [r.step for r in records if r.error] == [17]
    assert any(not r.scheduled for r in records)
    yield source, reader
    reader.close()


def assert_same_columns(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype, key
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


def test_step_batches_equal_the_records(recorded):
    source, reader = recorded
    for start, stop in RANGES:
        light = reader.step_batches(start, stop)
        assert_same_columns(light, batch_columns(reader.records(start, stop)))
        assert_same_columns(light, batch_columns(source.records(max(start, 0), max(stop, 0))))
    assert len(reader.step_batches(70, 80)["step"]) == 0


def test_summaries_answer_what_the_records_answer(recorded):
    source, reader = recorded
    records = source.records(0, 61)
    light = fetch_summaries(reader, 0, 61)
    assert [s.step for s in light] == [r.step for r in records]
    for s, r in zip(light, records):
        assert isinstance(s, StepSummary)
        assert s.scheduled == r.scheduled
        assert (s.preempted_ids, s.not_admitted, s.error) == (tuple(r.preempted_ids), tuple(r.not_admitted), r.error)
        assert s.num_new_tokens == len(r.new_tokens) and s.total_num_scheduled_tokens == r.total_num_scheduled_tokens
        assert s.num_arrivals == len(r.arrivals)
        assert s.kv_cache_usage == r.kv_cache_usage and s.num_preemptions == r.num_preemptions
        for name in ("clock", "token_time", "start_ns", "end_ns", "num_waiting", "num_running",
                     "num_paused", "num_finished", "recorder_wait_ns"):
            assert getattr(s, name) == getattr(r, name), name
        for rid in {e.request_id for e in r.scheduled} | {rid for rid, _ in r.not_admitted}:
            assert s.not_admitted_reason(rid) == r.not_admitted_reason(rid)
        assert metric_row(s) == metric_row(summarize([r])[0])
    assert fetch_summaries(reader, 61, 70) == [] and fetch_summaries(source, 30, 30) == []


def test_a_v1_recording_is_summarised_from_its_records():
    reader = open_reader(V1_FIXTURE)
    try:
        last = reader.latest_step()
        assert_same_columns(reader.step_batches(0, last + 1), batch_columns(reader.records(0, last + 1)))
        assert [s.scheduled for s in fetch_summaries(reader, 0, last + 1)] == \
            [r.scheduled for r in reader.records(0, last + 1)]
    finally:
        reader.close()


class CountingSource:
    """The recording, logging every step range asked of it (light or full)."""

    def __init__(self, reader: Reader):
        self.reader, self.asked = reader, []

    def step_batches(self, start: int, stop: int):
        self.asked.append(("light", start, stop))
        return self.reader.step_batches(start, stop)

    def records(self, start: int, stop: int):
        self.asked.append(("records", start, stop))
        return self.reader.records(start, stop)


def test_the_cache_fetches_only_the_steps_it_lacks(recorded):
    _source, reader = recorded
    src = CountingSource(reader)
    cache = RecordCache(src)
    first = cache.get(0, 30)
    assert [s.step for s in first] == list(range(30)) and src.asked == [("light", 0, 30)]
    again = cache.get(10, 40)                          # a jump near the shown step
    assert src.asked[-1] == ("light", 30, 40)
    assert [s.step for s in again] == list(range(10, 40)) and again[:20] == first[10:]
    cache.get(11, 41)                                  # one step on: one step fetched
    assert src.asked[-1] == ("light", 40, 41)
    cache.get(20, 41)
    assert len(src.asked) == 3                         # all cached: nothing asked
    assert all(kind == "light" for kind, *_ in src.asked)


def test_the_window_replays_a_recording_without_decoding_records(qtbot, recorded):
    source, reader = recorded

    def no_records(start, stop):
        raise AssertionError(f"records({start}, {stop}) decoded for a frame")

    w = MainWindow(reader, None)
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    reader.records = no_records
    try:
        for k in (3, 17, 30, 12, 59, 0):
            w.show_step(k)
            assert w.state == source.state_at(k)
            assert [s.scheduled for s in w.records] == [r.scheduled for r in source.records(k - w.window, k + 1)]
            assert w.record.step == k and w.record.not_admitted == source.records(k, k + 1)[0].not_admitted
        w.show_step(17)
        assert w.banner.isVisible() and "step 17" in w.banner.text     # the failed step, from its summary
        assert w.jump_to("t=9") and w.shown_step == 9                      # the clock, from summaries
    finally:
        del reader.records
    w.close()
