"""``batchscope export --format csv`` and ``--format json``: per-request and per-step CSV with the
recording's columns, and the summary as JSON."""
from __future__ import annotations
from tests.support.paths import FIXTURES

import csv
import json
from pathlib import Path

import pytest


from recordings.file.open_reader import open_reader
from recordings.metrics.run_metrics import summarize
from recordings.export import tables
from recordings.export.summary_json import export_json, summary_dict
from recordings.export.tables import csv_paths, export_csv

V1_FIXTURE = FIXTURES / "v1_small.sqlite"


def _read(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("out, expected", [
    ("run", ("run-requests.csv", "run-steps.csv")),
    ("run.csv", ("run-requests.csv", "run-steps.csv")),
    ("folder/", ("folder/requests.csv", "folder/steps.csv")),
])
def test_csv_paths(tmp_path, out, expected):
    assert csv_paths(f"{tmp_path}/{out}") == tuple(tmp_path / e for e in expected)


def test_csv_rows_are_the_recorded_requests_and_steps(recorded, tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "ROWS_PER_QUERY", 7)          # several chunks per table
    (tmp_path / "out").mkdir()
    with open_reader(recorded.path) as reader:
        req_path, n_req, step_path, n_steps = export_csv(reader, tmp_path / "out")
        table = reader.execute("SELECT request_id, arrival_time, num_prompt_tokens, max_tokens, "
                               "status, finish_step FROM requests ORDER BY seq")
    requests, steps = _read(req_path), _read(step_path)
    assert n_req == len(requests) == len(recorded.prompts) and n_steps == len(steps) == len(recorded.records)
    assert [(r["request_id"], float(r["arrival_time"]), int(r["num_prompt_tokens"]),
             int(r["max_tokens"]), r["status"]) for r in requests] == [row[:5] for row in table]
    end = {rec.step: rec.token_time for rec in recorded.records}
    for r, row in zip(requests, table):
        expected = end[row[5]] - row[1] if row[5] is not None else None
        assert (float(r["e2e_request_latency"]) if r["e2e_request_latency"] else None) == expected
        assert r["priority"] == "0"
    for s, rec in zip(steps, recorded.records):
        assert int(s["step"]) == rec.step and int(s["num_running"]) == rec.num_running
        assert int(s["num_waiting"]) == rec.num_waiting
        assert s["waiting_reason"] == (rec.waiting_reason if rec.num_waiting else "")   # nobody waits: no reason
        assert int(s["num_prefill_tokens"]) == sum(e.num_tokens for e in rec.scheduled if e.is_prefill)
        assert s["error"] == (rec.error or "")
    assert not any(name.endswith("_json") for name in steps[0]) and "prompt_token_ids" not in requests[0]


def test_csv_of_a_schema_1_recording(tmp_path):
    with open_reader(V1_FIXTURE) as reader:
        req_path, n_req, step_path, n_steps = export_csv(reader, tmp_path / "v1")
        assert (n_req, n_steps) == (len(reader.request_ids()), reader.latest_step() + 1)
    assert req_path.name == "v1-requests.csv" and _read(req_path)[0]["request_id"] == "r0"


def test_summary_json_holds_every_summary_field(recorded, tmp_path):
    with open_reader(recorded.path) as reader:
        run = summarize(reader)
        data = json.loads(export_json(reader, tmp_path / "s.json").read_text())
        assert data == summary_dict(reader)
    s = data["summary"]
    assert s["num_requests"] == run.num_requests and s["num_finished"] == run.num_finished
    assert s["ttft"]["p50"] == run.ttft.p50 and s["itl"]["num_samples"] == run.itl.num_samples
    assert s["preemptions_by_reason"] == run.preemptions_by_reason and s["time_unit"] == "steps"
    assert data["complete"] is True and data["run"]["config"]["max_num_seqs"] == 4
    assert set(data["batching"]) >= {"slot_occupancy", "tpot", "num_prefill_tokens"}


HOSTILE_IDS = ('=HYPERLINK("http://evil.example","click")', "+1+2", "-3+4", "@SUM(A1:A2)",
               "\t=1", "\r=1")


def test_neutralised_prefixes_text_only():
    row = [-1, -2.5, 0, None, "=x", "+", "-3", "@a", "\tb", "\rc", "ok", "a=b", " =x"]
    assert tables.neutralised(row) == [-1, -2.5, 0, None, "'=x", "'+", "'-3", "'@a", "'\tb", "'\rc",
                                       "ok", "a=b", " =x"]


def test_csv_cells_never_start_a_formula(tmp_path):
    import sqlite3

    from engine.engine import LLMEngine
    from engine.request import SamplingParams
    from tests.support.engine_driver import make_config
    from tests.support.fake_runner import NullRunner
    from recordings.file.writer import RecordingWriter

    config, run_info = make_config(num_gpu_blocks=32, max_num_seqs=8)
    path = tmp_path / "hostile.sqlite"
    with RecordingWriter(path, run_info) as writer:
        engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=writer)
        for rid in (*HOSTILE_IDS, "plain", "a=b"):
            engine.add_request([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True), request_id=rid)
        engine.run_until_done()
    # a hostile file: formulas in text columns, text in a number column, a negative number
    with sqlite3.connect(path) as db:
        db.execute("UPDATE steps SET error = '=1+1', waiting_reason = '@x', num_waiting = 1 WHERE step = 0")
        db.execute("UPDATE requests SET status = '-2+3', ttft = '=A1' WHERE request_id = 'plain'")
        db.execute("UPDATE requests SET ttft = -5 WHERE request_id = 'a=b'")
    db.close()
    with open_reader(path) as reader:
        req_path, _, step_path, _ = export_csv(reader, tmp_path / "out")
    requests, steps = _read(req_path), _read(step_path)
    assert [r["request_id"] for r in requests] == [f"'{rid}" for rid in HOSTILE_IDS] + ["plain", "a=b"]
    plain, negative = requests[-2], requests[-1]
    assert (plain["status"], plain["ttft"]) == ("'-2+3", "'=A1")
    assert float(negative["ttft"]) == -5                     # a number stays a number
    assert (steps[0]["error"], steps[0]["waiting_reason"]) == ("'=1+1", "'@x")
    # no cell starts like a formula unless it is a number
    for row in requests + steps:
        for cell in row.values():
            if cell.startswith(tables.FORMULA_PREFIXES):
                float(cell)
