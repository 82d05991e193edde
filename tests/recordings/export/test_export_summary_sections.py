"""``batchscope export --format json`` carries the sections ``batchscope summary`` prints for
admission control, thrash (preemptions, recomputed tokens) and prefix-cache hits by source, with
the numbers ``summary`` shows for the same file."""
from __future__ import annotations

import json

from app.cli import main
from tests.support.export_runs import sim_demo


def test_admission_thrash_and_prefix_hits_are_what_summary_prints(tmp_path, capsys):
    rec = sim_demo(tmp_path / "run.sqlite", 60, "--enable-prefix-caching", "--max-queue-time", "0.05")
    capsys.readouterr()
    assert main(["export", str(rec), "--format", "json", "-o", str(tmp_path / "s.json")]) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    assert main(["summary", str(rec)]) == 0
    printed = capsys.readouterr().out
    lines = {line[:31].strip(): line[31:].strip() for line in printed.splitlines() if len(line) > 31}

    admission = doc["admission"]
    assert admission["is_on"] and admission["max_queue_time"] == 0.05
    assert admission["total_rejected"] == sum(admission["num_rejected"].values()) > 0
    assert lines["rejected by admission"].startswith(f"{admission['total_rejected']} (")
    assert admission["waited"]["num_samples"] == admission["num_rejected"]["queue_timeout"]

    thrash = doc["thrash"]
    per_request = thrash["preemptions_per_request"]
    assert per_request["num_samples"] > 0
    assert lines["preemptions per request"] == (f"p50 {per_request['p50']:.3g} / p99 {per_request['p99']:.3g} "
                                                f"over the {per_request['num_samples']} preempted")
    assert f"{thrash['recomputed_share']:.1%} of all computed tokens" in lines["recomputed per request"]
    assert 0 < thrash["num_recomputed_tokens"] < thrash["num_computed_tokens"]
    top = thrash["top"][0]
    assert lines["most preempted"].startswith(
        f"{top['request_id']} {top['num_preemptions']}x ({top['num_recomputed_tokens']:,} tokens again)")

    hits = doc["prefix_hits"]
    assert hits["num_hit_tokens"] > 0
    assert hits["num_hit_tokens"] == hits["num_shared_hit_tokens"] + hits["num_readmission_hit_tokens"]
    assert lines["prefill tokens saved"] == f"{hits['num_hit_tokens']:,}"
    assert lines["prefix hits from others"].startswith(f"{hits['num_shared_hit_tokens']:,} tokens")
    assert lines["prefix hits, own KV again"].startswith(f"{hits['num_readmission_hit_tokens']:,} tokens")


def test_without_prefix_caching_the_hits_section_is_null(recorded, tmp_path):
    assert main(["export", str(recorded.path), "--format", "json", "-o", str(tmp_path / "s.json")]) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["prefix_hits"] is None and doc["admission"]["is_on"] is False
    assert doc["thrash"]["preemptions_per_request"]["num_samples"] > 0
