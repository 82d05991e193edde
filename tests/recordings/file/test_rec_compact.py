"""Schema 4's binary coding round-trips: packed integer arrays, random block-event sequences
(property-based), batches, and the hash tags replayed from block events."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine.outputs import BatchEntry, BlockEvent, NewToken, StepRecord
from engine.vocab import BlockEventKind
from recordings.file import compact, packing

INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(INT64, max_size=40), max_size=6))
def test_packed_arrays_round_trip(arrays):
    back = packing.unpack(packing.pack(arrays))
    assert [a.tolist() for a in back] == arrays
    assert all(a.dtype == np.int64 for a in back)


def test_small_values_take_one_byte_and_compressible_ones_are_deflated():
    assert packing.narrowest(np.array([0, 255])) == np.dtype("<u1")
    assert packing.narrowest(np.array([-1, 127])) == np.dtype("<i1")
    assert packing.narrowest(np.array([0, 2**40])) == np.dtype("<i8")
    ones = packing.pack([np.ones(1000, np.int64)])
    assert ones[:1] == packing.COMPRESSED and len(ones) < 40
    tiny = packing.pack([[3]])
    assert tiny[:1] == packing.RAW and len(tiny) == 1 + 5 + 1


@pytest.mark.parametrize("blob, match", [
    (b"", "empty"), (b"q123", "format byte"), (b"z\x00\x01", "damaged"),
    (b"r\x09\x01\x00\x00\x00\x00", "dtype code"), (b"r\x01\x05\x00\x00\x00\x00", "shorter"),
    (b"r\x01\x05", "header")])
def test_a_damaged_blob_is_a_value_error(blob, match):
    with pytest.raises(ValueError, match=match):
        packing.unpack(blob)


block_event = st.builds(
    lambda kind, seq, ids, hashes: BlockEvent(
        kind, "" if seq < 0 else f"r{seq}", tuple(ids),
        tuple((hashes * (len(ids) // max(1, len(hashes)) + 1))[:len(ids)]) if kind == "cached" and hashes else ()),
    st.sampled_from(list(BlockEventKind)), st.integers(-1, 5000),
    st.one_of(st.lists(st.integers(0, 600_000), max_size=30),
              st.builds(lambda a, n: list(range(a, a + n)), st.integers(0, 500_000), st.integers(0, 200))),
    st.lists(INT64.filter(bool), min_size=1, max_size=30))


@settings(max_examples=300, deadline=None)
@given(st.lists(block_event, max_size=12))
def test_random_block_event_sequences_round_trip(events):
    seq_of = lambda rid: int(rid[1:])          # noqa: E731
    blob = compact.block_events_blob(events, seq_of)
    if not events:
        assert blob is None
        return
    back = compact.block_events_from_blob(blob, lambda s: f"r{s}")
    assert back == tuple(events)


def test_runs_of_consecutive_blocks_cost_a_few_bytes():
    events = [BlockEvent("allocated", "r1", tuple(range(1000, 1500)))]
    assert len(compact.block_events_blob(events, lambda r: 1)) < 60


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(
    lambda kind, seq, ids, hashes: BlockEvent(kind, "" if seq < 0 else f"r{seq}", tuple(ids),
                                              tuple(hashes[:len(ids)]) if kind == "cached" else ()),
    st.sampled_from(["cached", "evicted", "reserved", "unreserved", "allocated"]), st.integers(-1, 50),
    st.lists(st.integers(0, 63), max_size=20), st.lists(INT64.filter(bool), min_size=20, max_size=20)),
    max_size=10),
       st.lists(INT64, min_size=64, max_size=64))
def test_hash_tags_replayed_from_block_events_follow_the_events_in_order(events, start):
    hashes = np.array(start, np.int64)
    expected = hashes.copy()
    for e in events:
        ids = list(e.block_ids)
        if e.kind == "cached":
            expected[ids] = e.block_hashes
        elif e.kind in ("evicted", "reserved", "unreserved"):
            expected[ids] = 0
    if events:
        compact.apply_hash_events(hashes, compact.block_events_blob(events, lambda r: int(r[1:]) if r else -1))
    assert hashes.tolist() == expected.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 1023), st.integers(1, 8192),
                          st.integers(0, 131_072), st.booleans(), st.one_of(st.none(), st.integers(0, 200_000))),
                min_size=1, max_size=40, unique_by=lambda t: t[0]),
       st.integers(1, 131_072), st.booleans())
def test_batches_round_trip(entries, num_prompt, odd_index):
    prompt = {f"r{s}": num_prompt + s for s, *_ in entries}
    scheduled = tuple(BatchEntry(f"r{s}", slot, n, nc, pre) for s, slot, n, nc, pre, _ in entries)
    tokens = tuple(NewToken(f"r{s}", nc + n - prompt[f"r{s}"] + (3 if odd_index else 0), tok, "")
                   for s, slot, n, nc, pre, tok in entries if tok is not None)
    record = StepRecord(step=7, start_ns=0, end_ns=0, clock=0.0, token_time=1.0, arrivals=(),
                        scheduled=scheduled, new_tokens=tokens, events=(), block_events=(),
                        transitions=(), preempted_ids=(), not_admitted=(), num_waiting=0,
                        num_running=0, num_paused=0, num_finished=0, num_free_blocks=0,
                        num_total_blocks=0)
    blob = compact.batch_blob(record, lambda r: int(r[1:]), prompt.__getitem__)
    batch = compact.Batch(blob, lambda seqs: np.array([num_prompt + s for s in seqs.tolist()], np.int64))
    assert batch.entries([e.request_id for e in scheduled]) == (scheduled, tokens)
    assert len(packing.unpack(blob)[6]) == (len(entries) if odd_index and tokens else 0)
    light = compact.Batch(blob)
    assert light.seq.tolist() == [s for s, *_ in entries]
    assert light.num_computed_tokens.tolist() == [e.num_computed_tokens for e in scheduled]
    assert (light.token_index is None) == (not odd_index or not tokens)
