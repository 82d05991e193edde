"""A schema-1 recording (written by the previous release, ``fixtures/v1_small.sqlite``) opens
read-only through ``Reader`` and gives what the v1 reader gave (``fixtures/v1_small_states.json``:
per step, each live request's status, num_computed_tokens, num_output_tokens, slot, block_ids,
num_preemptions) in today's shapes."""
from __future__ import annotations
from tests.support.paths import FIXTURES

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.state.state import EngineState
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError
from recordings.metrics.run_metrics import summarize
from recordings.file.v1_reader import V1Reader

FIXTURES = FIXTURES


@pytest.fixture
def v1_path(tmp_path):
    path = tmp_path / "v1.sqlite"
    shutil.copy(FIXTURES / "v1_small.sqlite", path)
    return path


@pytest.fixture
def expected() -> dict[int, dict[str, list]]:
    data = json.loads((FIXTURES / "v1_small_states.json").read_text())
    return {int(k): v for k, v in data.items()}


def test_the_v1_fixture_opens_through_reader(v1_path):
    reader = open_reader(v1_path)
    assert isinstance(reader, V1Reader) and isinstance(reader, Reader)
    assert reader.latest_step() == 32
    assert reader.is_complete()
    assert reader.run_info().config["num_gpu_blocks"] == 14
    assert reader.request_ids() == ["r0", "r1", "r2", "too-long", *(f"r{i}" for i in range(3, 12))]


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_every_state_equals_what_the_v1_reader_gave(v1_path, expected, order):
    reader = open_reader(v1_path, cache_size=2)
    assert sorted(expected) == list(range(-1, 33))
    steps = sorted(expected, reverse=order == "backward")
    for k in steps:
        state = reader.state_at(k)
        assert isinstance(state, EngineState) and state.step == k
        got = {rid: [v.status, v.num_computed_tokens, v.num_output_tokens, v.slot,
                     list(state.block_ids(rid)), v.num_preemptions]
               for rid, v in state.requests.items()}
        assert got == expected[k], f"state after step {k}"
        assert list(got) == list(expected[k])  # arrival order
        # the columnar state is consistent: block arrays, fills, queues
        held = state.block_owner >= 0
        assert state.num_used_blocks == sum(len(v[4]) for v in expected[k].values())
        assert set(state.block_owner[held].tolist()) <= set(state.columns["seq"].tolist())
        assert np.all(state.block_fill() <= state.block_size)
        assert list(state.columns["num_blocks"]) == [len(v[4]) for v in expected[k].values()]
        assert all(v.is_finished for v in state.finished)
    assert reader.state_at(10**6) == reader.state_at(32) and len(reader.state_at(32)) == 0
    assert reader.state_at(-5).step == -1


def test_token_times_come_from_ttft_and_mean_itl(v1_path):
    reader = open_reader(v1_path)
    for k in range(33):
        state = reader.state_at(k)
        for v in state.views():
            info = reader.request_info(v.request_id)
            if v.num_output_tokens and info.num_preemptions == 0 and v.status == "RUNNING":
                tokens = [r.token_time for r in reader.records(0, k + 1)
                          for t in r.new_tokens if t.request_id == v.request_id]
                assert v.ttft == pytest.approx(tokens[0] - v.arrival_time)
                if len(tokens) > 1:
                    assert v.mean_itl == pytest.approx((tokens[-1] - tokens[0]) / (len(tokens) - 1))
    last = reader.state_at(32).finished
    assert len(last) == 13 and {v.finish_reason for v in last} == {"length", "abort", "error"}


def test_records_in_todays_shape(v1_path):
    reader = open_reader(v1_path)
    records = reader.records(0, 100)
    assert [r.step for r in records] == list(range(33))
    rows = reader.execute("SELECT step, num_scheduled_requests, num_scheduled_tokens, "
                          "num_preemptions, clock FROM steps ORDER BY step")
    assert [(r.step, len(r.scheduled), r.total_num_scheduled_tokens, r.num_preemptions, r.clock)
            for r in records] == rows
    assert sum(len(r.new_tokens) for r in records) == 89
    assert sum(r.num_preemptions for r in records) == 3
    assert all(r.token_time == r.clock + 1 for r in records)  # virtual clock
    # v1 stored no arrivals, block events or transitions per step
    assert not any(r.arrivals or r.block_events or r.transitions for r in records)
    assert any(r.not_admitted for r in records)
    assert reader.records(5, 8) == records[5:8]
    assert reader.records(40, 50) == []


def test_requests_text_timeline_and_info(v1_path):
    reader = open_reader(v1_path)
    info = reader.request_info("r5")
    assert info.status == "FINISHED_ABORTED" and info.prompt_token_ids is not None
    assert info.sampling["max_tokens"] == info.max_tokens
    kinds = [e.kind for e in reader.request_timeline("r5")]
    assert kinds[0] == "arrived" and kinds[-1] == "aborted"
    assert [e.kind for e in reader.request_timeline("too-long")] == ["arrived", "rejected"]
    records = reader.records(0, 100)
    text = "".join(t.text for r in records for t in r.new_tokens if t.request_id == "r4")
    assert reader.request_text("r4", 10**6) == text
    assert reader.request_info("nope") is None and reader.request_timeline("nope") == []
    assert reader.request_text("nope", 3) == ""


def test_summary_of_the_v1_fixture_is_what_the_previous_release_printed(v1_path):
    summary = summarize(open_reader(v1_path))
    assert summary.num_requests == 13
    assert summary.num_steps == 33
    assert summary.num_output_tokens == 89
    assert summary.time_unit == "steps"
    assert (summary.ttft.p50, summary.ttft.p90, summary.ttft.p99) == pytest.approx(
        (7.0, 18.2, 19.89))
    assert summary.itl.p50 == pytest.approx(1.0)
    assert summary.num_preemptions == 3
    assert summary.num_finished_by_reason == {"abort": 1, "error": 1, "length": 11}
    assert "7.000 / 18.200 / 19.890" in summary.format_table()


def test_the_v1_file_is_only_read(v1_path):
    before = v1_path.read_bytes()
    with open_reader(v1_path) as reader:
        for k in range(-1, 33):
            reader.state_at(k)
        summarize(reader)
        with pytest.raises(RecordingError, match="readonly|read-only"):
            reader.execute("DELETE FROM steps")
    assert v1_path.read_bytes() == before
    assert not Path(f"{v1_path}-wal").exists()
