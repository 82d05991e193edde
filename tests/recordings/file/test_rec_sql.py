"""A recording answers plain SQL (any SQLite client, no BatchScope code): ``steps``, ``events``
and ``requests`` are tables, ``requests`` names the arrival numbers the other tables use, and
the binary batch and block-event blobs decode with zlib and numpy alone, following
docs/recording.md (the decoder below is written from that page, not from BatchScope's code)."""
from __future__ import annotations

import json
import sqlite3
import zlib

import numpy as np
import pytest

DTYPES = ["<u1", "<u2", "<u4", "<i1", "<i2", "<i4", "<i8"]    # docs/recording.md, "Blobs"
KINDS = ["allocated", "freed", "hit", "cached", "evicted", "swapped_out", "swapped_in", "reserved",
         "unreserved", "forked"]


def unpack(blob: bytes) -> list[np.ndarray]:
    """A packed blob's arrays, as docs/recording.md describes them."""
    payload = zlib.decompress(blob[1:]) if blob[:1] == b"z" else blob[1:]
    out, at = [], 0
    while at < len(payload):
        code, count = payload[at], int.from_bytes(payload[at + 1:at + 5], "little")
        dtype = np.dtype(DTYPES[code])
        out.append(np.frombuffer(payload, dtype, count, at + 5).astype(np.int64))
        at += 5 + count * dtype.itemsize
    return out


@pytest.fixture
def sql(recorded):
    conn = sqlite3.connect(recorded.path)
    yield conn.execute
    conn.close()


def arrival_numbers(run) -> dict[str, int]:
    return {a.request_id: i for i, a in enumerate(a for r in run.records for a in r.arrivals)}


def batch_rows(sql) -> tuple[list[tuple], list[tuple]]:
    """(step_requests rows, tokens rows) decoded from ``steps.batch`` by the documented layout."""
    prompt = dict(sql("SELECT seq, num_prompt_tokens FROM requests").fetchall())
    names = dict(sql("SELECT seq, request_id FROM requests").fetchall())
    entries, tokens = [], []
    for step, blob, token_time in sql("SELECT step, batch, token_time FROM steps "
                                      "WHERE batch IS NOT NULL ORDER BY step"):
        seq_delta, slot, num_tokens, computed, prefill, token_id, index = unpack(blob)
        seq = np.cumsum(seq_delta)
        num_prompt = np.array([prompt[s] for s in seq.tolist()])
        num_computed = computed
        if not len(index):
            index = num_computed + num_tokens - num_prompt
        for i, s in enumerate(seq.tolist()):
            entries.append((step, i, names[s], s, int(slot[i]), int(num_tokens[i]),
                            int(num_computed[i]), int(prefill[i])))
            if token_id[i] > 0:
                tokens.append((step, i, names[s], s, int(index[i]), int(token_id[i]) - 1, token_time))
    return entries, tokens


def test_the_batch_blobs_decode_by_the_documented_layout(recorded, sql):
    seq = arrival_numbers(recorded)
    entries, tokens = batch_rows(sql)
    assert entries == [(r.step, i, e.request_id, seq[e.request_id], e.slot, e.num_tokens,
                        e.num_computed_tokens, int(e.is_prefill))
                       for r in recorded.records for i, e in enumerate(r.scheduled)]
    assert len(entries) > 50
    expected = []
    for r in recorded.records:
        batch = [e.request_id for e in r.scheduled]
        for t in r.new_tokens:
            expected.append((r.step, batch.index(t.request_id), t.request_id, seq[t.request_id],
                             t.index, t.token_id, r.token_time))
    assert tokens == expected and len(tokens) > 50
    assert sql("SELECT count(*) FROM steps WHERE (batch IS NULL) != (num_scheduled_requests = 0)"
               ).fetchone()[0] == 0


def test_the_token_texts_are_in_token_order(recorded, sql):
    texts: dict[str, str] = {}
    _, tokens = batch_rows(sql)
    by_step: dict[int, list[str]] = {}
    for step, _, rid, *_ in tokens:
        by_step.setdefault(step, []).append(rid)
    for step, text_json in sql("SELECT step, token_text_json FROM steps WHERE token_text_json "
                               "IS NOT NULL ORDER BY step"):
        for rid, text in zip(by_step[step], json.loads(text_json), strict=True):
            texts[rid] = texts.get(rid, "") + text
    for rid, req in recorded.finished.items():
        assert texts.get(rid, "") == req.output_text


def test_select_star_from_events(recorded, sql):
    seq = arrival_numbers(recorded)
    rows = sql("SELECT * FROM events ORDER BY step, ord").fetchall()
    assert [d[0] for d in sql("SELECT * FROM events LIMIT 0").description] == [
        "step", "ord", "seq", "kind", "detail"]
    assert rows == [(r.step, i, seq[e.request_id], e.kind, e.detail)
                    for r in recorded.records for i, e in enumerate(r.events)]
    named = sql("SELECT e.step, r.request_id, e.kind FROM events e JOIN requests r USING (seq) "
                "WHERE e.kind = 'preempted' ORDER BY e.step, e.ord").fetchall()
    assert named == [(r.step, e.request_id, e.kind) for r in recorded.records for e in r.events
                     if e.kind == "preempted"] != []


def test_steps_requests_and_block_events_in_plain_sql(recorded, sql):
    steps = sql("SELECT step, clock, token_time, num_scheduled_tokens, num_running, "
                "num_free_blocks, num_preemptions, error FROM steps ORDER BY step").fetchall()
    assert steps == [(r.step, r.clock, r.token_time, r.total_num_scheduled_tokens, r.num_running,
                      r.num_free_blocks, r.num_preemptions, r.error) for r in recorded.records]
    outcome = dict(sql("SELECT request_id, num_output_tokens FROM requests").fetchall())
    assert outcome == {rid: req.num_output_tokens for rid, req in recorded.finished.items()}
    counts = {kind: 0 for kind in KINDS}
    events = []
    for step, blob in sql("SELECT step, data FROM block_events ORDER BY step"):
        kinds, seq_delta, num_ids, id_delta, num_hashes, hashes = unpack(blob)
        ids = np.cumsum(id_delta).tolist()
        at = 0
        for kind, n in zip(kinds.tolist(), num_ids.tolist()):
            counts[KINDS[kind]] += n
            events.append((step, KINDS[kind], tuple(ids[at:at + n])))
            at += n
    assert events == [(r.step, b.kind, b.block_ids) for r in recorded.records for b in r.block_events]
    assert counts["allocated"] == counts["freed"] > 0  # the run ends with every block free again
