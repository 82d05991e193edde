"""The roofline cost model: shapes, device peaks, monotonicity, bounds, breakdown, JSON round trip."""
from __future__ import annotations
from tests.support.paths import REPO

import json
import subprocess
import sys

import pytest

from engine.config import ConfigError
from engine.outputs import ScheduledRequest
from engine.sim.config import SimConfig, activation_peak_bytes, sim_num_blocks
from engine.sim.cost_model import CostModel, CostParams
from engine.sim.hardware import DEVICES, get_device
from engine.sim.model_shapes import get_model_shape


def chunk(rid: str, num_tokens: int, computed: int) -> ScheduledRequest:
    return ScheduledRequest(rid, 0, num_tokens, computed, computed == 0, ())


H100_8B = CostModel(get_model_shape("llama-3.1-8b"), DEVICES["h100"], CostParams())


def test_builtin_shapes_have_their_published_sizes():
    assert get_model_shape("llama-3.1-8b").num_parameters == pytest.approx(8.03e9, rel=0.01)
    assert get_model_shape("Qwen/Qwen2.5-7B-Instruct").num_parameters == pytest.approx(7.6e9, rel=0.01)
    assert get_model_shape("meta-llama/Llama-3.2-1B").num_parameters == pytest.approx(1.24e9, rel=0.01)
    assert get_model_shape("SmolLM2-135M-Instruct") == get_model_shape("default")
    assert get_model_shape("default").num_parameters == pytest.approx(134.5e6, rel=0.01)
    assert get_model_shape("llama-3.1-8b").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_unknown_model_and_device_name_the_known_ones():
    with pytest.raises(ValueError, match="llama-3.1-8b.*qwen2.5-7b.*smollm2-135m"):
        get_model_shape("gpt-5")
    with pytest.raises(ValueError, match="a100, h100, h200, l40s, cpu"):
        get_device("tpu-v5")
    with pytest.raises(ConfigError, match="known devices"):
        SimConfig(sim_device="b200")
    with pytest.raises(ConfigError, match="known models"):
        SimConfig(sim_model="nope")


def test_config_json_from_a_folder_or_a_file(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = get_model_shape(str(tmp_path))
    assert (shape.head_dim, shape.bytes_per_param, shape.num_key_value_heads) == (16, 4, 2)
    assert get_model_shape(str(tmp_path / "config.json")) == shape
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 3}))
    with pytest.raises(ValueError, match="not a Llama-family"):
        get_model_shape(str(tmp_path / "bad.json"))


def test_monotone_in_tokens_and_context():
    by_tokens = [H100_8B.step_time([chunk("a", n, 100)]) for n in (1, 16, 256, 2048, 8192)]
    by_context = [H100_8B.step_time([chunk("a", 1, c)]) for c in (0, 1000, 10_000, 100_000)]
    by_batch = [H100_8B.step_time([chunk(f"r{i}", 1, 500) for i in range(n)]) for n in (1, 8, 64, 256)]
    for series in (by_tokens, by_context, by_batch):
        assert all(a < b for a, b in zip(series, series[1:])), series


def test_decode_is_bandwidth_bound_and_a_big_prefill_compute_bound_on_h100():
    decode = H100_8B.breakdown([chunk(f"r{i}", 1, 1000) for i in range(32)])
    assert all(op.bound == "memory" for op in decode.values())
    prefill = H100_8B.breakdown([chunk("p", 4096, 0)], num_sampled=1)
    for name in ("qkv_proj", "attention", "o_proj", "mlp"):
        assert prefill[name].bound == "compute", name
    # 2 * 8e9 FLOPs per token at 989.4 TFLOP/s * 0.5, give or take attention and the LM head
    assert H100_8B.step_time([chunk("p", 4096, 0)]) == pytest.approx(2 * 8.03e9 * 4096 / 494.7e12, rel=0.15)
    # one decode step of one request reads the 16 GB of weights at 3.35 TB/s * 0.8
    assert H100_8B.step_time([chunk("d", 1, 10)]) == pytest.approx(0.002 + 16.06e9 / 2.68e12, rel=0.05)
    assert H100_8B.overhead_s(0) == 0.0


def test_breakdown_sums_to_the_total_and_empty_steps_cost_nothing():
    sched = [chunk("a", 300, 0), chunk("b", 1, 900), chunk("c", 64, 128)]
    ops = H100_8B.breakdown(sched, num_sampled=2)
    assert H100_8B.overhead_s(3) == pytest.approx(0.002 + 3e-5)
    assert H100_8B.step_time(sched, 2) == pytest.approx(H100_8B.overhead_s(3) + sum(op.time_s for op in ops.values()))
    assert H100_8B.step_time([]) == 0.0
    no_sample = H100_8B.breakdown(sched, num_sampled=0)["lm_head"]
    assert no_sample.flops == 0 and no_sample.bytes < ops["lm_head"].bytes


def test_many_steps_at_once_do_the_work_of_each_alone():
    """``StepWork.of_batches`` (a recording's batch arrays) sums as ``StepWork.of`` does per step,
    empty steps included; under the floor parameters a step costs its operators' roofline only."""
    import random

    import numpy as np

    from engine.sim.cost_model import StepWork

    rng = random.Random(3)
    steps = [[chunk(f"r{i}", rng.choice((1, 1, 7, 300)), rng.randrange(0, 2000))
              for i in range(rng.randrange(0, 6))] for _ in range(40)]
    sampled = [rng.randrange(0, len(s) + 1) for s in steps]
    flat = [c for s in steps for c in s]
    start = np.cumsum([0] + [len(s) for s in steps])
    work = StepWork.of_batches(np.array([c.num_tokens for c in flat], int),
                               np.array([c.num_computed_tokens for c in flat], int), start, np.array(sampled))
    alone = [StepWork.of(s, n) for s, n in zip(steps, sampled)]
    for field in ("num_tokens", "num_seqs", "num_sampled", "attn_pairs", "context_tokens"):
        assert getattr(work, field).tolist() == [getattr(w, field) for w in alone], field
    for model in (H100_8B, H100_8B.with_params(CostParams.floor())):
        times = model.work_times(work)
        np.testing.assert_allclose(times, [model.step_time(s, n) for s, n in zip(steps, sampled)], rtol=1e-12)
        assert (times[[not s for s in steps]] == 0).all() and (times[[bool(s) for s in steps]] > 0).all()
    floor = H100_8B.with_params(CostParams.floor())
    for s, n, w in zip(steps, sampled, alone):    # the floor: each operator's roofline, no overhead
        ops = floor.breakdown(s, n)
        assert floor.work_time(w) == pytest.approx(sum(max(o.compute_s, o.memory_s) for o in ops.values()) if s else 0.0)


def test_cost_params_json_round_trip(tmp_path):
    p = CostParams(0.0123, 0.004, 0.37, 0.91, device="cpu", peak_flops=5e10, mem_bandwidth=1.5e10)
    p.save(tmp_path / "fit.json")
    assert CostParams.load(tmp_path / "fit.json") == p
    (tmp_path / "bad.json").write_text('{"overhead": 1}')
    with pytest.raises(ValueError, match="unknown cost parameter"):
        CostParams.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="must be > 0"):
        CostParams(flops_efficiency=0)
    with pytest.raises(ValueError, match="must be >= 0"):
        CostParams(per_seq_overhead_s=-1)


def test_a_cpu_fit_pins_its_measured_peaks():
    p = CostParams(0.01, 0.0, 0.5, 0.5, device="cpu", peak_flops=1e11, mem_bandwidth=2e10)
    m = CostModel.build("default", "cpu", p, dtype="float32")
    assert (m.device.peak_flops, m.device.mem_bandwidth, m.shape.bytes_per_param) == (1e11, 2e10, 4)


def test_kv_blocks_sized_from_device_memory():
    cfg = SimConfig(max_num_seqs=256, max_model_len=16384, sim_model="llama-3.1-8b", sim_device="h100")
    shape = get_model_shape("llama-3.1-8b")
    n = sim_num_blocks(cfg, shape, DEVICES["h100"])
    activations = activation_peak_bytes(shape, cfg.max_num_batched_tokens, cfg.max_num_seqs)
    assert n == int((0.9 * 80e9 - shape.weight_bytes - activations) // (16 * 131072))
    with pytest.raises(RuntimeError, match="too small"):
        sim_num_blocks(cfg.replace(max_model_len=10**7), get_model_shape("llama-3.1-8b"), DEVICES["l40s"])


def test_the_simulator_imports_no_torch():
    code = ("import sys, engine.sim, engine.sim.config, engine.sim.fitting; "
            "assert 'torch' not in sys.modules, 'engine.sim pulled in torch'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
