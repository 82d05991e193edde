"""Prefix-cache event details stored as packed arrays: the same detail text comes back, older
files' JSON objects read as they are, other kinds untouched."""
from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, strategies as st

from engine.kv.prefix_explain import PrefixMatch, describe_detail, prefix_match
from engine.vocab import EventKind, NotAdmittedReason
from recordings.file.event_details import STOPS, load_detail, store_detail
from recordings.file.open_reader import open_reader
from tests.support.engine_driver import run_engine

KINDS = (EventKind.PREFIX_CACHE, EventKind.PREFIX_CACHE_WAITING)
counts = st.integers(-1, 1 << 40)
matches = st.builds(PrefixMatch, counts, counts, counts, st.sampled_from(STOPS), counts, counts,
                    st.sampled_from(["", *NotAdmittedReason]))


@given(matches, st.sampled_from(KINDS))
def test_every_prefix_match_detail_comes_back_exactly_and_shorter(match, kind):
    detail = match.to_detail()
    stored = store_detail(kind, detail)
    assert stored.startswith("[") and len(stored) < len(detail) - 30
    assert load_detail(kind, stored) == detail
    assert prefix_match(load_detail(kind, stored)) == match


@pytest.mark.parametrize("detail", [
    '{"blocks":0,"of":23,"tokens":0,"stop":"block_differs"}',              # an older writer's keys
    '{"of":23,"blocks":0,"tokens":0,"stop":"block_differs","at_token":0,"evicted_step":-1}',
    '{"blocks":0,"of":2,"tokens":0,"stop":"some_new_reason","at_token":0,"evicted_step":-1}',
    '{"blocks": 0, "of": 2, "tokens": 0, "stop": "block_differs", "at_token": 0, "evicted_step": -1}',
    "free text", ""])
def test_details_that_would_not_come_back_exactly_are_stored_as_they_are(detail):
    assert store_detail(EventKind.PREFIX_CACHE, detail) == detail
    assert load_detail(EventKind.PREFIX_CACHE, detail) == detail


def test_other_kinds_are_never_packed():
    detail = PrefixMatch(0, 3, 0, STOPS[2], 0).to_detail()
    assert store_detail(EventKind.PREEMPTED, detail) == detail
    assert load_detail(EventKind.PREEMPTED, "[0,3,0,2,0]") == "[0,3,0,2,0]"


@pytest.mark.parametrize("stored", ["[0,3,0]", "[0,3,0,9,0]", "[0,3,0,\"x\"]", "[0,3,0,2,0,-1,\"\",1]", "[0,"])
def test_a_damaged_packed_detail_raises(stored):
    with pytest.raises(ValueError, match="prefix-cache detail|Expecting|Unterminated|value"):
        load_detail(EventKind.PREFIX_CACHE, stored)


def test_a_recording_stores_packed_details_and_reads_back_the_engines(tmp_path):
    path = tmp_path / "run.sqlite"
    run = run_engine(path, seed=5, num_requests=40, num_gpu_blocks=24, max_num_seqs=4,
                     num_prefixes=2, enable_prefix_caching=True, arrivals_per_step=1.0)
    live = [(r.step, e.request_id, e.detail) for r in run.records for e in r.events if e.kind in KINDS]
    assert live
    with sqlite3.connect(path) as conn:
        stored = [d for (d,) in conn.execute("SELECT detail FROM events WHERE kind IN (?, ?)", KINDS)]
    assert len(stored) == len(live) and all(d.startswith("[") for d in stored)
    with open_reader(path) as reader:
        step, rid, detail = live[-1]
        timeline = [e.detail for e in reader.request_timeline(rid) if e.kind in KINDS]
        assert detail in timeline
        assert describe_detail(detail).startswith(("prefix cache", "still waiting"))
