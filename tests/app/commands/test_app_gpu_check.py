"""The GPU check script's code paths, run small on the CPU so they stay working between GPU sessions."""
from __future__ import annotations
from tests.support.paths import REPO

import sys

ROOT = REPO
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


def test_the_cpu_smoke_run_goes_through_every_stage_and_ends_with_the_table():
    """``gpu_check.py --cpu-smoke`` end to end, as CI runs it: exit 0, one final table with a row
    per system, and the stages that need CUDA said to be skipped rather than crashing."""
    import subprocess

    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--cpu-smoke"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.rindex("\nsystem "):]
    rows = {line.split("  ")[0]: line for line in table.splitlines()}
    for system in ("BatchScope bench, recording off", "BatchScope bench, recording on"):
        assert rows[system].split()[4].replace(",", "").isdigit(), rows[system]       # out tok/s
    assert "skipped: no CUDA" in rows["BatchScope bench, CUDA graphs on"]
    assert "hf_cb" in rows or "HF peer" in rows                  # the peer ran, or says why not
    assert "equality fp32: 4/4 token-identical to generate() (4/4 with CUDA graphs, " \
           "graphs + Triton decode: skipped: no CUDA)" in table
    assert "triton kernels: ok" in table and "compiled kernels: skipped: no CUDA" in table
