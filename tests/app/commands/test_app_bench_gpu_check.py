"""The GPU check's final table (bench/gpu_check.py): the rows and ratios it derives from the results
of ``batchscope bench`` and ``hf_peer.py`` (their real runs are exercised by test_app_bench.py and on
the GPU)."""
from __future__ import annotations
from tests.support.paths import REPO

import sys

ROOT = REPO
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402


def _bench(tok_s: float, eff: float) -> dict:
    return {"figures": {"output_tokens_per_s": tok_s, "ttft_p50_s": 0.5, "ttft_p99_s": 1.25, "tpot_p50_s": 0.01,
                        "tpot_p99_s": 0.02, "steps_per_s": 100.0, "roofline_efficiency": eff, "duration_s": 8.0,
                        "num_output_tokens": 77888},
            "peaks": {"peak_flops": 8e14, "mem_bandwidth": 4.2e12}}


EQ = {"equal": 16, "requests": 16}
TRI = {"ok": True, "rc": 0, "seconds": 40.0}


def test_the_table_has_a_row_per_system_and_the_ratios_against_the_best_peer():
    hf = {"hf_cb_graphs": {"out_tok_per_s": 972.0, "run_s": 80.1, "out_tokens": 77888},
          "hf_cb": {"error": "RuntimeError('boom')"}, "bf16_TFLOPs": 790.0, "copy_TBps_rw": 4.24}
    text = gpu_check.summary_table(EQ, TRI, _bench(10_000.0, 0.25), _bench(9_600.0, 0.24), hf)
    lines = text.splitlines()
    assert any(line.startswith("BatchScope bench, recording off") and "10,000" in line and "25.0%" in line
               for line in lines)
    assert any(line.startswith("hf_cb_graphs") and "972" in line for line in lines)
    assert any(line.startswith("hf_cb ") and "boom" in line for line in lines)
    assert "engine / HF best: 10.3x" in text
    assert "recording cost: 4.0% of throughput" in text
    assert "500.0 / 1250.0" in text                      # TTFT in ms


def test_a_failed_bench_is_a_row_not_a_crash_and_small_runs_give_no_ratio():
    off = {"error": "exit 1 after 3 s: CUDA out of memory"}
    text = gpu_check.summary_table(EQ, {**TRI, "ok": False, "rc": 1}, off, _bench(50.0, 0.01),
                                   {"hf_cb": {"out_tok_per_s": 40.0, "run_s": 1.0, "out_tokens": 40}},
                                   same_workload=False)
    assert "CUDA out of memory" in text and "engine / HF best" not in text and "recording cost" not in text
    assert "triton kernels: FAILED (exit 1)" in text


def test_the_cuda_graphs_run_is_a_row_with_its_speed_up_or_says_why_it_did_not_run():
    hf = {"hf_cb_graphs": {"out_tok_per_s": 972.0, "run_s": 80.1, "out_tokens": 77888}}
    eq = {**EQ, "equal_graphs": 15}
    text = gpu_check.summary_table(eq, TRI, _bench(10_000.0, 0.25), _bench(9_600.0, 0.24), hf,
                                   graphs={**_bench(12_500.0, 0.31), "backend": "triton"})
    assert any(line.startswith("BatchScope bench, CUDA graphs on") and "12,500" in line and "31.0%" in line
               for line in text.splitlines())
    assert "CUDA graphs on / off: 1.25x output tokens/s (recording off; graphs' decode attention: triton)" in text
    assert "(15/16 with CUDA graphs)" in text
    skipped = {"error": "skipped: 20 s left of the 8-minute budget"}
    text = gpu_check.summary_table(eq, TRI, _bench(10_000.0, 0.25), _bench(9_600.0, 0.24), hf, graphs=skipped)
    assert "skipped: 20 s left" in text and "CUDA graphs on / off" not in text
