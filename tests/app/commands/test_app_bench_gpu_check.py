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


EQ = {"equal": {"eager": 16, "graphs": 16, "eager reference": 16}, "requests": 16, "skipped": {},
      "preemptions": 3, "steps": 90}
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


def test_the_old_defaults_run_is_a_row_with_the_speed_up_and_the_equality_line_names_each_mode():
    hf = {"hf_cb_graphs": {"out_tok_per_s": 972.0, "run_s": 80.1, "out_tokens": 77888}}
    eq = {**EQ, "equal": {"eager": 16, "graphs": 15}, "skipped": {"Triton": "no CUDA"}}
    text = gpu_check.summary_table(eq, TRI, _bench(10_000.0, 0.25), _bench(9_600.0, 0.24), hf,
                                   old=_bench(4_000.0, 0.1))
    assert any(line.startswith("BatchScope bench, old defaults") and "4,000" in line and "10.0%" in line
               for line in text.splitlines())
    assert "new / old defaults: 2.50x output tokens/s" in text
    assert "equality fp32: eager 16/16, graphs 15/16, Triton: skipped: no CUDA token-identical" in text
    assert not gpu_check.passed(eq, TRI, _bench(1.0, 0.1), _bench(1.0, 0.1))
    assert gpu_check.passed(EQ, TRI, _bench(1.0, 0.1), _bench(1.0, 0.1))


def test_compiles_during_the_timed_runs_are_reported_when_bench_counted_them():
    off = {**_bench(10_000.0, 0.25), "kernel_compiles_during_run": 0,
           "prediction": {"output_tokens_per_s": 20_000.0, "duration_s": 4.0}}
    on = {**_bench(9_600.0, 0.24), "kernel_compiles_during_run": 2}
    text = gpu_check.summary_table(EQ, TRI, off, on, {})
    assert "Triton compiles during the timed runs (0 expected after warm-up): off 0, on 2" in text
    assert "prediction (default calibration, measured peaks): 20,000 out tok/s; measured / predicted time 2.00" in text
    assert "Triton compiles" not in gpu_check.summary_table(EQ, TRI, _bench(1.0, 0.1), _bench(1.0, 0.1), {})


def test_the_transformers_forward_run_is_a_row_with_the_fused_forward_speed_up():
    text = gpu_check.summary_table(EQ, TRI, _bench(10_000.0, 0.25), _bench(9_600.0, 0.24), {},
                                   hf_fwd=_bench(8_000.0, 0.2))
    assert any(line.startswith("BatchScope bench, transformers fwd") and "8,000" in line for line in text.splitlines())
    assert "fused / transformers forward: 1.25x output tokens/s" in text
    assert "fused / transformers" not in gpu_check.summary_table(EQ, TRI, _bench(1.0, 0.1), _bench(1.0, 0.1), {})
