"""Counts people read say "1 KV block", "1 malformed row", "1 keyframe", never "1 KV blocks"
(``engine.plural.plural`` wherever a count is printed: a run's provenance, a salvage, a check)."""
from __future__ import annotations

from pathlib import Path

from app.commands.run import describe_run
from engine.run_info import RunInfo
from recordings.damage.report import DamageReport
from recordings.damage.salvage import SalvageResult


def test_a_runs_provenance_counts_in_the_singular_and_the_plural():
    one = RunInfo(config={"num_gpu_blocks": 1, "block_size": 1, "max_num_seqs": 1, "clock": "sim"},
                  model={"name": "m"}, trace={"name": "t.csv", "num_rows": 1, "num_malformed_rows": 1})
    lines = describe_run(one)
    assert "1 KV block of 1 token," in lines[0]
    assert lines[1] == "trace: t.csv (1 request, 1 malformed row skipped)"
    many = one.replace(config={"num_gpu_blocks": 26274, "block_size": 16, "clock": "sim"},
                       trace={"name": "t.csv", "num_rows": 8819, "num_malformed_rows": 0})
    lines = describe_run(many)
    assert "26,274 KV blocks of 16 tokens," in lines[0]
    assert lines[1] == "trace: t.csv (8,819 requests, 0 malformed rows skipped)"
    assert "None KV blocks of None tokens" in describe_run(RunInfo())[0]     # an older file: not known


def test_a_salvage_counts_in_the_singular():
    report = DamageReport(Path("x.sqlite"), 5, last_step=9, readable=[(0, 5)], last_saved_step=5)
    result = SalvageResult(Path("y.sqlite"), 5, 10, 1, 1, 0, 1, 1, report)
    text = "\n".join(result.lines())
    assert "6 of 10), 1 request, 1 keyframe" in text
    assert "dropped 1 request that arrived after step 5" in text
    assert "re-derived 1 keyframe whose rows" in text
