"""``batchscope export --format mooncake``: the recorded workload as a Mooncake trace that the
trace importer reads back with the same lengths and arrivals, and that ``batchscope run``
replays."""
from __future__ import annotations

import json

import pytest

from app.cli import main
from tests.support.export_runs import sim_demo
from recordings.file.open_reader import open_reader
from recordings.export.mooncake import HashIds, export_mooncake
from recordings.workloads.traces import load_mooncake_jsonl


def _requests(path):
    with open_reader(path) as reader:
        return reader.execute("SELECT arrival_step, arrival_time, num_prompt_tokens, max_tokens "
                              "FROM requests ORDER BY seq")


def test_hash_ids_number_chained_prefix_blocks_in_order_of_first_use():
    ids = HashIds(block_tokens=4)
    assert ids.of([1, 2, 3, 4, 5, 6, 7, 8]) == [0, 1]
    assert ids.of([1, 2, 3, 4, 9, 9, 9, 9, 7]) == [0, 2, 3]     # same first block, then new ones
    assert ids.of([5, 6, 7, 8, 1, 2, 3, 4]) == [4, 5]           # equal blocks, other prefix: new ids
    assert ids.of([1, 2, 3, 4, 5, 6, 7, 8, 1]) == [0, 1, 6]
    assert ids.of([]) == []


def test_virtual_clock_round_trip_through_the_importer(recorded, tmp_path):
    with open_reader(recorded.path) as reader:
        result = export_mooncake(reader, tmp_path / "w.jsonl", steps_per_second=4)
    load = load_mooncake_jsonl(result.path)
    rows = _requests(recorded.path)
    assert not load.errors and result.num_rows == len(load.rows) == len(rows)
    first = rows[0][0]
    assert [(r.arrival_s * 4, r.num_prompt_tokens, r.num_output_tokens) for r in load.rows] == [
        (step - first, n, m) for step, _, n, m in rows]
    prompts = list(recorded.prompts.values())         # stored: every line has hash ids
    assert result.num_with_hash_ids == len(rows)
    by_prompt = {}
    for prompt, row in zip(prompts, load.rows):
        assert len(row.hash_ids) == -(-len(prompt) // 512)
        assert by_prompt.setdefault(tuple(prompt), row.hash_ids) == row.hash_ids
    assert len({r.hash_ids for r in load.rows}) == len(set(map(tuple, prompts)))
    assert any("virtual clock" in n for n in result.notes)


def test_sim_run_replays_with_the_same_workload(tmp_path, capsys):
    rec = sim_demo(tmp_path / "a.sqlite", limit=40)
    out = tmp_path / "a.jsonl"
    assert main(["export", str(rec), "--format", "mooncake", "-o", str(out)]) == 0
    report = capsys.readouterr().out
    assert "40 requests, 0 with hash_ids" in report and "did not store their prompt token ids" in report
    assert all("hash_ids" not in json.loads(line) for line in out.read_text().splitlines())
    again = tmp_path / "b.sqlite"
    assert main(["run", "--trace", str(out), "--record", str(again), "--executor", "sim",
                 "--sim-model", "smollm2-135m", "--sim-device", "a100", "--num-gpu-blocks", "48"]) == 0
    before, after = _requests(rec), _requests(again)
    assert [(n, m) for *_, n, m in after] == [(n, m) for *_, n, m in before]
    t0, u0 = before[0][1], after[0][1]
    assert [t - u0 for _, t, _, _ in after] == pytest.approx(      # timestamps kept to 1 us
        [t - t0 for _, t, _, _ in before], abs=1.5e-6)
