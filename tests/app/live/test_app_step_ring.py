"""The live source's ring keeps step records packed (app.live.step_ring): unpacking gives back the very
record, the window's step columns come out as from the records, and the garbage collector stops
tracking a packed step after one collection."""
from __future__ import annotations

import gc

import numpy as np
import pytest


from tests.support.engine_driver import SMALL_SEED, run_engine  # noqa: E402
from tests.support.fakes import FakeSource, swap_source  # noqa: E402

from app.live import step_ring  # noqa: E402
from engine.outputs import StepRecord  # noqa: E402
from recordings.file.step_batches import batch_columns  # noqa: E402


def _runs() -> dict[str, list[StepRecord]]:
    """Records with every kind of content: arrivals, rejections, chunked prefill, preemption,
    pause / resume / abort, failed steps, stop strings (the small random run); prefix-cache hits,
    cached and evicted blocks; swap-outs and swap-ins; parallel sampling (forks)."""
    return {
        "lifecycle": run_engine(None, SMALL_SEED).records,
        "prefix caching": run_engine(None, 5, num_requests=60, num_gpu_blocks=24, max_num_seqs=4,
                                     num_prefixes=2, enable_prefix_caching=True,
                                     arrivals_per_step=1.0).records,
        "swap": swap_source().history,
        "parallel sampling": _parallel().history,
    }


def _parallel() -> FakeSource:
    from engine.request import SamplingParams
    src = FakeSource(0, workload=())
    src.engine.add_request(list(range(1, 40)), SamplingParams(max_tokens=6, n=3, ignore_eos=True),
                           request_id="group")
    src.advance(12)
    return src


@pytest.fixture(scope="module")
def runs():
    return _runs()


def test_unpacking_gives_back_the_record(runs):
    for name, records in runs.items():
        assert records, name
        for r in records:
            back = step_ring.unpack(step_ring.pack(r))
            assert back == r, (name, r.step)
            for field in ("arrivals", "scheduled", "new_tokens", "events", "block_events",
                          "transitions"):
                assert [type(x) for x in getattr(back, field)] == \
                    [type(x) for x in getattr(r, field)], (name, r.step, field)
            assert step_ring.step_of(step_ring.pack(r)) == r.step


def test_the_runs_cover_what_a_record_can_hold(runs):
    every = [r for records in runs.values() for r in records]
    kinds = {e.kind for r in every for e in r.block_events}
    assert {"allocated", "freed", "hit", "cached", "evicted", "swapped_out", "swapped_in",
            "forked"} <= kinds
    assert any(r.error for r in every) and any(r.preempted_ids for r in every)
    assert any(r.not_admitted for r in every) and any(r.transitions for r in every)
    assert any(e.is_prefill for r in every for e in r.scheduled)


def test_batch_columns_equal_those_of_the_records(runs):
    for name, records in runs.items():
        packed = [step_ring.pack(r) for r in records]
        n = len(records)
        for lo, hi in ((0, n), (0, 1), (n // 3, n // 2), (n - 1, n), (2, 2)):
            got, want = step_ring.batch_columns(packed[lo:hi]), batch_columns(records[lo:hi])
            assert set(got) == set(want), name
            for key, value in want.items():
                assert list(got[key]) == list(value), (name, lo, hi, key)
                if isinstance(value, np.ndarray):
                    assert got[key].dtype == value.dtype, (name, key)


def test_token_texts_and_events_of_a_request(runs):
    records = runs["lifecycle"]
    ids = {t.request_id for r in records for t in r.new_tokens}
    for r in records:
        p = step_ring.pack(r)
        for rid in ids:
            assert step_ring.token_texts(p, rid) == [t.text for t in r.new_tokens
                                                     if t.request_id == rid]
            assert step_ring.has_events_of(p, rid) == any(e.request_id == rid for e in r.events)


def test_the_collector_stops_tracking_a_packed_step(runs):
    """A record's named tuples stay tracked through collections; its packed form is untracked
    after at most one collection per level of nesting (a packed step holds tuples of tuples of
    block ids), so a ring of packed steps adds nothing to a full collection's walk."""
    records = runs["prefix caching"] + runs["swap"]
    packed = [step_ring.pack(r) for r in records]
    for _ in range(3):
        gc.collect()
    assert any(gc.is_tracked(e) for r in records for e in r.scheduled)
    tracked = [step_ring.step_of(p) for p in packed if gc.is_tracked(p)]
    assert tracked == []
