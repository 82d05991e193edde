"""The GPU check script's code paths, run small on the CPU so they stay working between GPU sessions."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402


def test_equality_check_runs_mixed_batches_with_preemption_and_matches_generate():
    eq = gpu_check.check_equality("cpu", small=True)
    assert eq["rejected"] == 0
    assert eq["preemptions"] > 0
    assert eq["equal"] == eq["requests"] == 16
    assert eq["equal_graphs"] == 16            # decode steps on the padded static path (eager on a CPU)


def test_replay_reports_its_figures():
    rp = gpu_check.replay("cpu", small=True, n=8)
    assert rp["requests"] == 8 and rp["out_tokens"] > 0 and rp["steps"] > 0
    assert 0 < rp["forward_share"] <= 1
