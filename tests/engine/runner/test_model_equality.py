"""The real model through the engine: greedy outputs of a mixed, chunked, preempting batch are
token-identical to transformers ``generate()`` on each request alone (fp32, CPU); seeded sampling
does not depend on the batch; a failing forward pass fails only its step's requests.

The model is a small random-weight Llama built in memory (a second copy runs inside the engine,
whose attention is switched to our paged attention). Torch runs on one thread here: on a busy
2-core machine the tiny matmuls are many times slower with two.
"""
from __future__ import annotations

import copy
import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.config import EngineConfig
from engine.runner.model_runner import ModelRunner
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.engine_driver import Arrival, distinct_prompt, run_workload
from tests.support.engine_cases import arrivals_and_actions, case, engine_config

VOCAB = 512


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def hf_model():
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=512)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
    return model


def generate(model, prompt, max_tokens: int, **kw) -> tuple[list[int], float]:
    """Greedy ``generate()`` on one request alone (``kw``: further generation options, e.g.
    ``repetition_penalty``); also the smallest top-1/top-2 gap of the processed logits seen."""
    ids = torch.tensor([list(prompt)], device=model.device)
    with torch.no_grad():
        # An explicit mask: else generate() infers one that hides prompt tokens equal to pad (0).
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_tokens,
                             eos_token_id=-1, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True, **kw)
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return out.sequences[0, len(prompt):].tolist(), min(gaps)


def references(model, arrivals, **kw) -> dict[str, list[int]]:
    refs = {}
    for a in arrivals:
        refs[a.request_id], gap = generate(model, a.prompt, a.params.max_tokens, **kw)
        assert len(refs[a.request_id]) == a.params.max_tokens
        # fp32 batching noise is ~1e-6: a closer race between the top two logits would make the
        # comparison meaningless (random weights make that unlikely; this checks it).
        assert gap > 1e-5, f"{a.request_id}: greedy near-tie ({gap:.2e}) in the reference"
    return refs


def run_real(hf_model, config: EngineConfig, arrivals, actions=(), seed: int = 0, model=None):
    model = model if model is not None else copy.deepcopy(hf_model)
    assert model is not hf_model       # the engine switches its model's attention implementation
    runner = ModelRunner(model, config.num_gpu_blocks, config.block_size, seed=seed,
                         num_cpu_blocks=config.num_cpu_blocks, model_impl=config.model_impl)
    return run_workload(config, arrivals, actions, runner=runner)


def mixed_workload(n: int = 16, seed: int = 0) -> list[Arrival]:
    rng = random.Random(seed)
    lens = [5, 120] + [rng.randint(5, 120) for _ in range(n - 2)]
    maxes = [24, 4] + [rng.randint(4, 24) for _ in range(n - 2)]
    return [Arrival(f"r{i}", rng.choice([0, 0, 0, 1, 3, 6]), tuple(rng.randrange(3, VOCAB) for _ in range(p)),
                    SamplingParams(max_tokens=m, ignore_eos=True))
            for i, (p, m) in enumerate(zip(lens, maxes))]


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
@pytest.mark.parametrize("model_impl", ["batchscope", "transformers"])
def test_greedy_batch_with_chunked_prefill_and_preemption_equals_generate(hf_model, device, model_impl):
    model = copy.deepcopy(hf_model).to(device)
    arrivals = mixed_workload()
    refs = references(model, arrivals)                   # generate() on the same device, alone
    config = EngineConfig(block_size=8, num_gpu_blocks=24, max_model_len=256, max_num_seqs=8,
                          max_num_batched_tokens=64, model_impl=model_impl)
    result = run_real(model, config, arrivals, model=copy.deepcopy(model))
    for a in arrivals:
        req = result.requests[a.request_id]
        assert req.status is RequestStatus.FINISHED_LENGTH, (a.request_id, req.error)
        assert req.output_token_ids == refs[a.request_id], a.request_id
    # The run really mixed what it claims to test.
    assert result.num_preemptions > 0
    scheduled = [s for r in result.records for s in r.scheduled]
    assert any(s.is_prefill and s.num_computed_tokens > 0 for s in scheduled), "no continued prefill chunk"
    assert any({s.is_prefill for s in r.scheduled} == {True, False} for r in result.records)
    assert max(len(r.scheduled) for r in result.records) >= 4
    assert len({tuple(v) for v in refs.values()}) == len(refs)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_swap_preemption_copies_kv_and_outputs_equal_generate(hf_model, device):
    """Swap preemption with the real model: victims' KV goes to the CPU pool tensors and back
    (runner copies), nothing is recomputed, and every greedy output equals ``generate()``."""
    model = copy.deepcopy(hf_model).to(device)
    arrivals = mixed_workload()
    refs = references(model, arrivals)
    config = EngineConfig(block_size=8, num_gpu_blocks=24, max_model_len=256, max_num_seqs=8,
                          max_num_batched_tokens=64, preemption_mode="swap", num_cpu_blocks=32)
    result = run_real(model, config, arrivals, model=copy.deepcopy(model))
    for a in arrivals:
        req = result.requests[a.request_id]
        assert req.status is RequestStatus.FINISHED_LENGTH, (a.request_id, req.error)
        assert req.output_token_ids == refs[a.request_id], a.request_id
    swaps = [(r.step, e.request_id) for r in result.records for e in r.events
             if e.kind == "preempted" and '"mode":"swap"' in e.detail]
    assert swaps, "the run never swapped"
    for step, rid in swaps:        # it resumes where it stopped: no chunk from 0 again
        resumed = next(s for r in result.records[step + 1:] for s in r.scheduled if s.request_id == rid)
        assert resumed.num_computed_tokens > 0, (step, rid, resumed)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_prefix_caching_hits_equal_generate(hf_model, device):
    """Prefix caching with the real model: requests starting with one of two shared prefixes read
    the KV other requests wrote (shared blocks, cached-free blocks, recompute after preemption),
    and every greedy output still equals ``generate()`` on the request alone."""
    model = copy.deepcopy(hf_model).to(device)
    rng = random.Random(1)
    prefixes = [tuple(rng.randrange(3, VOCAB) for _ in range(40)) for _ in range(2)]
    arrivals = [Arrival(f"r{i}", i // 2, prefixes[i % 2][:rng.randint(20, 40)]
                        + tuple(rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 12))),
                        SamplingParams(max_tokens=rng.randint(4, 16), ignore_eos=True)) for i in range(12)]
    refs = references(model, arrivals)
    config = EngineConfig(block_size=8, num_gpu_blocks=20, max_model_len=256, max_num_seqs=6,
                          max_num_batched_tokens=64, enable_prefix_caching=True)
    result = run_real(model, config, arrivals, model=copy.deepcopy(model))
    for a in arrivals:
        req = result.requests[a.request_id]
        assert req.status is RequestStatus.FINISHED_LENGTH, (a.request_id, req.error)
        assert req.output_token_ids == refs[a.request_id], a.request_id
    assert sum(r.prefix_cache_hits for r in result.records) > 0
    assert any(len(st.shared_block) for st in result.states), "no block shared by live requests"


def test_repetition_penalty_under_preemption_equals_generate(hf_model):
    """Penalties read each row's prompt and output so far from the runner's own state (its
    InputBatch, rebuilt in full after a recompute preemption): greedy outputs with a
    repetition penalty equal ``generate(repetition_penalty=...)`` (the same CTRL rule) alone."""
    penalized = [Arrival(a.request_id, a.arrive_step, a.prompt,
                         SamplingParams(max_tokens=a.params.max_tokens, ignore_eos=True, repetition_penalty=1.8))
                 for a in mixed_workload()]
    refs = references(hf_model, penalized, repetition_penalty=1.8)
    assert refs != references(hf_model, mixed_workload())       # the penalty changes outputs
    config = EngineConfig(block_size=8, num_gpu_blocks=24, max_model_len=256, max_num_seqs=8,
                          max_num_batched_tokens=64)
    result = run_real(hf_model, config, penalized)
    assert result.num_preemptions > 0
    for a in penalized:
        assert result.requests[a.request_id].output_token_ids == refs[a.request_id], a.request_id


@pytest.mark.parametrize("case_id", ["recompute-keeps-output-split", "pressure-many-small"])
def test_preempting_cases_equal_generate(hf_model, case_id):
    """Two shared cases whose point is output after preemption, with the real model."""
    c = case(case_id)
    config = engine_config(c)
    arrivals = [Arrival(a.request_id, a.arrive_step, distinct_prompt(i, len(a.prompt), VOCAB), a.params)
                for i, a in enumerate(arrivals_and_actions(c)[0])]
    refs = references(hf_model, arrivals)
    result = run_real(hf_model, config, arrivals)
    assert result.num_preemptions > 0
    for a in arrivals:
        assert result.requests[a.request_id].output_token_ids == refs[a.request_id], a.request_id


SAMPLED = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True)


def test_seeded_sampling_does_not_depend_on_the_batch(hf_model):
    prompt = tuple(range(40, 70))
    config = EngineConfig(block_size=8, num_gpu_blocks=20, max_model_len=256, max_num_seqs=6,
                          max_num_batched_tokens=48)
    alone = run_real(hf_model, config, [Arrival("x", 0, prompt, SAMPLED)]).requests["x"].output_token_ids

    busy = mixed_workload(8, seed=1)
    busy = [Arrival(a.request_id, a.arrive_step, a.prompt,
                    SamplingParams(max_tokens=a.params.max_tokens, temperature=1.0, seed=100 + i, ignore_eos=True)
                    if i % 2 else a.params) for i, a in enumerate(busy)]
    result = run_real(hf_model, config, busy + [Arrival("x", 1, prompt, SAMPLED)], seed=123)
    x = result.requests["x"]
    assert x.status is RequestStatus.FINISHED_LENGTH
    assert x.output_token_ids == alone
    assert result.num_preemptions > 0
    # It really sampled: greedy and another seed give other tokens.
    assert alone != generate(hf_model, prompt, SAMPLED.max_tokens)[0]
    other = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.9, seed=8, ignore_eos=True)
    assert run_real(hf_model, config, [Arrival("x", 0, prompt, other)]).requests["x"].output_token_ids != alone


def sampled_busy(seed: int) -> list[Arrival]:
    """A mixed workload where every other request samples with a seed of its own."""
    return [Arrival(a.request_id, a.arrive_step, a.prompt,
                    SamplingParams(max_tokens=a.params.max_tokens, temperature=1.0, seed=100 * seed + i,
                                   ignore_eos=True) if i % 2 else a.params)
            for i, a in enumerate(mixed_workload(8, seed=seed))]


def test_a_seeded_request_preempted_by_recompute_continues_its_stream_in_any_batch(hf_model):
    """The runner draws a request's token k from (its seed, k): runs with other co-scheduled
    requests, one of them preempting it (recompute: its row rebuilt from the output so far),
    give the tokens of the run where it is alone."""
    prompt = tuple(range(40, 70))
    config = EngineConfig(block_size=8, num_gpu_blocks=20, max_model_len=256, max_num_seqs=6,
                          max_num_batched_tokens=48)
    alone = run_real(hf_model, config, [Arrival("x", 0, prompt, SAMPLED)]).requests["x"].output_token_ids
    preempted = set()
    for busy_seed in (1, 2, 3):
        result = run_real(hf_model, config, sampled_busy(busy_seed) + [Arrival("x", 0, prompt, SAMPLED)],
                          seed=busy_seed)
        assert result.requests["x"].output_token_ids == alone, busy_seed
        preempted |= {busy_seed for r in result.records if "x" in r.preempted_ids}
    assert preempted, "x was never preempted: the test lost its point"


def test_unseeded_sampling_is_reproducible_and_survives_recompute_preemption(hf_model):
    """Unseeded sampled requests draw from seeds derived from the runner's base seed in order
    of arrival: the same run twice gives the same tokens, a run short of KV blocks (requests
    preempted and recomputed) too, and another base seed gives others."""
    arrivals = [Arrival(a.request_id, a.arrive_step, a.prompt,
                        SamplingParams(max_tokens=a.params.max_tokens, temperature=1.0, top_k=50, ignore_eos=True))
                for a in mixed_workload()]

    def outputs(num_blocks: int, seed: int = 5):
        config = EngineConfig(block_size=8, num_gpu_blocks=num_blocks, max_model_len=256, max_num_seqs=8,
                              max_num_batched_tokens=64)
        result = run_real(hf_model, config, arrivals, seed=seed)
        return {rid: r.output_token_ids for rid, r in result.requests.items()}, result.num_preemptions

    roomy, none = outputs(200)
    tight, some = outputs(20)
    assert none == 0 and some > 0
    assert tight == roomy == outputs(200)[0]
    assert outputs(200, seed=6)[0] != roomy


def test_runner_exception_fails_only_that_steps_requests(hf_model):
    model = copy.deepcopy(hf_model)
    fail_at_call, calls = 2, []

    def boom(module, args, kwargs):
        calls.append(1)
        if len(calls) == fail_at_call + 1:
            raise RuntimeError("boom in the forward pass")

    model.model.register_forward_pre_hook(boom, with_kwargs=True)     # a hook on transformers' forward
    config = EngineConfig(block_size=8, num_gpu_blocks=32, max_model_len=256, max_num_seqs=2,
                          max_num_batched_tokens=64, model_impl="transformers")
    arrivals = [Arrival("a", 0, tuple(range(10, 30)), SamplingParams(max_tokens=8, ignore_eos=True)),
                Arrival("b", 0, tuple(range(50, 62)), SamplingParams(max_tokens=8, ignore_eos=True)),
                Arrival("c", 0, tuple(range(70, 85)), SamplingParams(max_tokens=6, ignore_eos=True)),
                Arrival("late", fail_at_call + 3, tuple(range(90, 101)), SamplingParams(max_tokens=6, ignore_eos=True))]
    refs = references(hf_model, arrivals)
    result = run_real(hf_model, config, arrivals, model=model)

    bad = result.records[fail_at_call]
    assert "boom in the forward pass" in bad.error
    assert [r.step for r in result.records if r.error] == [fail_at_call]
    failed = {s.request_id for s in bad.scheduled}
    assert failed == {"a", "b"}                       # c waits for a slot: not in the failing step
    for rid in failed:
        req = result.requests[rid]
        assert req.status is RequestStatus.FINISHED_ERROR and "boom in the forward pass" in req.error
        assert req.output_token_ids == refs[rid][:req.num_output_tokens]
        assert any(e.request_id == rid and e.kind == "failed" for e in bad.events)
    assert bad.num_free_blocks == config.num_gpu_blocks                  # their blocks came back
    for rid in ("c", "late"):                                            # the engine serves on
        req = result.requests[rid]
        assert req.status is RequestStatus.FINISHED_LENGTH and req.output_token_ids == refs[rid], rid
    assert result.finish_step("late") > fail_at_call
