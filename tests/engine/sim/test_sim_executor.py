"""The simulated executor: synthetic tokens only where a chunk ends, durations from the cost model,
determinism (alone and driving the real engine)."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import NewRequestData, ScheduledRequest, SchedulerOutput
from engine.kv.prefix_explain import prefix_match
from engine.request import SamplingParams
from engine.sim.cost_model import CostModel, CostParams
from engine.sim.executor import SimExecutor, num_key_tokens, synthetic_token
from engine.sim.hardware import DEVICES
from engine.sim.model_shapes import get_model_shape

MODEL = CostModel(get_model_shape("llama-3.2-1b"), DEVICES["a100"], CostParams(0.001, 2e-5, 0.6, 0.7))


def _new(rid: str, prompt_len: int, output=(), computed: int = 0) -> NewRequestData:
    return NewRequestData(rid, list(range(prompt_len)), tuple(output), SamplingParams(max_tokens=4), (), computed)


def _step() -> SchedulerOutput:
    """One step of three requests the executor has not seen (sent in full): a mid-prefill
    chunk, a last prefill chunk and a decode."""
    return SchedulerOutput(0, (ScheduledRequest("p", 0, 64, 0, True, ()),      # mid-prefill: no token
                               ScheduledRequest("q", 1, 40, 0, True, ()),      # last prefill chunk
                               ScheduledRequest("d", 2, 1, 11, False, ())),    # decode
                           scheduled_new_reqs=(_new("p", 100), _new("q", 40), _new("d", 10, (5, 6), 11)))


def test_tokens_only_where_a_chunk_ends_and_duration_from_the_cost_model():
    sched = _step()
    out = SimExecutor(MODEL, seed=3).execute(sched)
    assert set(out.sampled_token_ids) == {"q", "d"}
    assert out.sampled_token_ids["d"] == synthetic_token(3, "d", 2, 128256)
    assert out.step_duration_s == MODEL.step_time(sched.scheduled, num_sampled=2) > 0
    assert all(0 <= t < 128256 for t in out.sampled_token_ids.values())


def test_same_inputs_same_outputs_and_seed_matters():
    sched = _step()
    a = SimExecutor(MODEL, seed=1).execute(sched)
    b = SimExecutor(MODEL, seed=1).execute(sched)
    c = SimExecutor(MODEL, seed=2).execute(sched)
    assert a == b
    assert a.sampled_token_ids != c.sampled_token_ids and a.step_duration_s == c.step_duration_s


def test_never_the_eos_token():
    hits = [i for i in range(2000) if synthetic_token(0, "r", i, 7) == 3]
    assert hits                                       # without an EOS id, 3 comes up
    assert all(synthetic_token(0, "r", i, 7, eos_token_id=3) != 3 for i in range(2000))


def test_tokens_key_the_request_first_then_repeat_a_filler():
    vocab = 128256
    n = num_key_tokens(vocab)
    assert n == 4                                     # 4 x 17 bits >= 64
    ids = [f"r{i}" for i in range(3000)]
    heads = {tuple(synthetic_token(5, rid, i, vocab) for i in range(n)) for rid in ids}
    assert len(heads) == len(ids)                     # no two requests start their output alike
    assert [synthetic_token(5, "r7", i, vocab) for i in range(n)] == \
        [synthetic_token(5, "r7", i, vocab) for i in range(n)]
    tails = {synthetic_token(5, rid, i, vocab) for rid in ids[:50] for i in range(n, n + 40)}
    assert tails == {0}                               # then one filler id: decode steps compress
    assert synthetic_token(5, "r7", n + 3, vocab, eos_token_id=0) == 1   # never EOS, filler too
    assert num_key_tokens(7) == 32 and num_key_tokens(2) == 64
    with pytest.raises(ValueError, match="vocab_size"):
        num_key_tokens(1)


def test_equal_prompts_share_no_output_blocks():
    """Two requests with the same prompt run together: their outputs differ from the first token
    on, so a later prompt holding one's output after the other's first token hits the shared
    prompt's blocks only (with equal outputs it would hit all 40 tokens), while one holding a
    request's own output hits all of it."""
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=96, max_num_seqs=2,
                          max_num_batched_tokens=64, clock="sim", enable_prefix_caching=True)
    eng = LLMEngine(config, SimExecutor(MODEL), config.num_gpu_blocks)
    prompt = list(range(100, 117))                    # 17 tokens: 4 whole blocks to look up
    out: dict[str, list[int]] = {"a": [], "x": []}
    hits: dict[str, str] = {}

    def run() -> None:
        while eng.has_unfinished:
            rec = eng.step()
            for t in rec.new_tokens:
                out.setdefault(t.request_id, []).append(t.token_id)
            hits.update({e.request_id: e.detail for e in rec.events if e.kind == "prefix_cache"})
    for rid in out:
        eng.add_request(prompt, SamplingParams(max_tokens=24, ignore_eos=True), request_id=rid)
    run()
    eng.add_request(prompt + out["x"], SamplingParams(max_tokens=2, ignore_eos=True), request_id="own")
    eng.add_request(prompt + out["a"][:1] + out["x"][1:], SamplingParams(max_tokens=2, ignore_eos=True),
                    request_id="mixed")
    run()
    assert prefix_match(hits["own"]).num_matched_tokens == 40     # x's prompt + 23 computed outputs
    assert prefix_match(hits["mixed"]).num_matched_tokens == 16   # the shared prompt only


def _engine_run(seed: int) -> tuple[list, dict]:
    config = EngineConfig(block_size=4, num_gpu_blocks=40, max_model_len=96, max_num_seqs=3,
                          max_num_batched_tokens=24, clock="sim", seed=seed)
    runner = SimExecutor(MODEL, seed=seed)
    eng = LLMEngine(config, runner, config.num_gpu_blocks)
    for i in range(8):
        eng.add_request(list(range(5 + 7 * i)), SamplingParams(max_tokens=3 + i, ignore_eos=True),
                        request_id=f"r{i}", arrival_time=0.002 * i)
    steps = []
    while eng.has_unfinished and len(steps) < 500:
        rec = eng.step()
        steps.append((rec.clock, tuple((s.request_id, s.num_tokens) for s in rec.scheduled),
                      tuple((t.request_id, t.token_id) for t in rec.new_tokens)))
    return steps, {"num_steps": runner.num_steps, "total_time_s": runner.total_time_s}


def test_the_engine_on_the_sim_executor_is_deterministic():
    first, totals = _engine_run(seed=0)
    assert not first[-1] or totals["num_steps"] == len(first)
    assert sum(len(tokens) for *_, tokens in first) == sum(3 + i for i in range(8))
    assert _engine_run(seed=0) == (first, totals)


def test_swap_copies_cost_host_link_time():
    """A step that swaps blocks takes longer by exactly blocks * block_size * KV bytes per token
    / the device's host bandwidth (PCIe 5 on an H100: 64 GB/s)."""
    import dataclasses

    from engine.outputs import SchedulerOutput

    runner = SimExecutor(MODEL, seed=0, block_size=16)
    base = SchedulerOutput(step=0, scheduled=())
    swapping = dataclasses.replace(base, blocks_to_swap_out=((0, 0), (1, 1)), blocks_to_swap_in=((2, 5),))
    extra = runner.execute(swapping).step_duration_s - runner.execute(base).step_duration_s
    want = 3 * 16 * MODEL.shape.kv_bytes_per_token / MODEL.device.host_bandwidth
    assert extra == pytest.approx(want) and extra > 0


def test_forked_sequences_get_first_tokens_and_copies_cost_device_memory_time():
    """Parallel sampling: each sequence of ``parallel_samples`` gets its synthetic first token
    (sampled rows count in the step's cost); copy-on-write copies add 2 x KV bytes (read and
    write) over the achievable device memory bandwidth."""
    import dataclasses

    sched = _step()
    runner = SimExecutor(MODEL, seed=3, block_size=16)
    forked = dataclasses.replace(sched, parallel_samples=(("q", ("q#1", "q#2")),),
                                 scheduled_new_reqs=sched.scheduled_new_reqs + (_new("q#1", 40, (), 40),
                                                                                _new("q#2", 40, (), 40)))
    out = runner.execute(forked)
    assert set(out.sampled_token_ids) == {"q", "d", "q#1", "q#2"}
    assert out.sampled_token_ids["q#2"] == synthetic_token(3, "q#2", 0, 128256)
    assert out.step_duration_s == MODEL.step_time(sched.scheduled, num_sampled=4)
    copying = dataclasses.replace(sched, blocks_to_copy=((0, 7), (0, 8)))
    extra = runner.execute(copying).step_duration_s - runner.execute(sched).step_duration_s
    want = 2 * 2 * 16 * MODEL.shape.kv_bytes_per_token / (MODEL.device.mem_bandwidth * MODEL.params.bw_efficiency)
    assert extra == pytest.approx(want) and extra > 0
