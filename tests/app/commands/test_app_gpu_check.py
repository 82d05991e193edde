"""The GPU check script's code paths, run small on the CPU so they stay working between GPU sessions."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_check  # noqa: E402


def test_equality_check_runs_mixed_batches_with_preemption_and_matches_generate():
    eq = gpu_check.check_equality("cpu", small=True)
    assert eq["rejected"] == 0
    assert eq["preemptions"] > 0
    assert eq["requests"] == 16
    # graphs: the padded static path, eager on a CPU; each with our fused forward and transformers'
    assert eq["equal"] == {"eager": 16, "graphs": 16, "eager transformers-fwd": 16, "graphs transformers-fwd": 16}
    assert eq["skipped"] == {"Triton": "no CUDA"}


def test_each_stage_gets_its_cap_or_what_is_left_after_the_later_stages_reserves():
    budget = gpu_check.Budget(480)
    assert budget.timeout("kernels") == gpu_check.STAGES["kernels"][0]
    budget.started -= 400                          # 80 s left: the peer keeps the later stages' reserves
    later = gpu_check.STAGES["bench transformers"][1] + gpu_check.STAGES["bench old"][1]
    assert budget.timeout("peer") == pytest.approx(80 - later, abs=1)
    assert budget.timeout("bench off") == 10.0     # the floor, when the reserves eat everything
    slow = gpu_check.Budget(4 * gpu_check.BUDGET_S)       # a CPU smoke run: every share 4x
    assert slow.timeout("kernels") == 4 * gpu_check.STAGES["kernels"][0]


@pytest.mark.slow
def test_the_cpu_smoke_run_goes_through_every_stage_and_writes_its_json_and_table(tmp_path):
    """``gpu_check.py --cpu-smoke --out DIR`` end to end: exit 0, the table with a row per system in
    gpu_check.txt and on stdout, every stage's result in gpu_check.json."""
    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--cpu-smoke", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=1900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (tmp_path / "gpu_check.txt").read_text()
    assert table.strip() in done.stdout
    rows = {line.split("  ")[0]: line for line in table.splitlines()}
    for system in ("BatchScope bench, recording off", "BatchScope bench, recording on"):
        assert rows[system].split()[4].replace(",", "").isdigit(), rows[system]       # out tok/s
    assert "hf_cb" in rows or "HF peer" in rows                  # the peer ran, or says why not
    assert ("equality fp32: eager 4/4, graphs 4/4, eager transformers-fwd 4/4, graphs transformers-fwd 4/4, "
            "Triton: skipped: no CUDA" in table)            # both forwards, eager and graphs
    assert "triton kernels: ok" in table and "compiled kernels: skipped: no CUDA" in table
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert res["passed"] and res["kernels"]["ok"]
    assert res["bench_off"]["figures"]["num_output_tokens"] == res["bench_on"]["figures"]["num_output_tokens"] > 0
