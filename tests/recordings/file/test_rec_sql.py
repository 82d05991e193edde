"""A recording answers plain SQL (any SQLite client, no BatchScope code): the ``tokens`` and
``step_requests`` views expand the steps' arrays, ``events`` is a table, ``requests`` names the
arrival numbers the other tables use."""
from __future__ import annotations

import sqlite3

import pytest


@pytest.fixture
def sql(recorded):
    conn = sqlite3.connect(recorded.path)
    yield conn.execute
    conn.close()


def arrival_numbers(run) -> dict[str, int]:
    return {a.request_id: i for i, a in enumerate(a for r in run.records for a in r.arrivals)}


def test_select_star_from_tokens(recorded, sql):
    seq = arrival_numbers(recorded)
    rows = sql("SELECT * FROM tokens ORDER BY step, ord").fetchall()
    names = [d[0] for d in sql("SELECT * FROM tokens LIMIT 0").description]
    assert names == ["step", "ord", "request_id", "seq", "idx", "token_id", "text", "token_time"]
    expected = []
    for r in recorded.records:
        batch = [e.request_id for e in r.scheduled]
        for t in r.new_tokens:
            expected.append((r.step, batch.index(t.request_id), t.request_id, seq[t.request_id],
                             t.index, t.token_id, t.text, r.token_time))
    assert rows == expected and len(rows) > 50
    by_request = dict(sql("SELECT request_id, group_concat(text, '') FROM "
                          "(SELECT * FROM tokens ORDER BY step) GROUP BY request_id").fetchall())
    for rid, req in recorded.finished.items():
        assert by_request.get(rid, "") == req.output_text


def test_select_star_from_step_requests(recorded, sql):
    seq = arrival_numbers(recorded)
    rows = sql("SELECT * FROM step_requests ORDER BY step, ord").fetchall()
    names = [d[0] for d in sql("SELECT * FROM step_requests LIMIT 0").description]
    assert names == ["step", "ord", "request_id", "seq", "slot", "num_tokens",
                     "num_computed_tokens", "is_prefill"]
    expected = [(r.step, i, e.request_id, seq[e.request_id], e.slot, e.num_tokens,
                 e.num_computed_tokens, int(e.is_prefill))
                for r in recorded.records for i, e in enumerate(r.scheduled)]
    assert rows == expected and len(rows) > 50
    assert sql("SELECT count(*) FROM step_requests s JOIN steps t USING (step) "
               "GROUP BY step HAVING count(*) != t.num_scheduled_requests").fetchall() == []


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
    allocated = sql("SELECT sum(json_array_length(block_ids_json)) FROM block_events "
                    "WHERE kind = 'allocated'").fetchone()[0]
    freed = sql("SELECT sum(json_array_length(block_ids_json)) FROM block_events "
                "WHERE kind = 'freed'").fetchone()[0]
    assert allocated == freed > 0  # the run ends with every block free again
