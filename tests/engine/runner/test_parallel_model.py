"""Parallel sampling on the real model (the tiny random fp32 Llama, CPU, torch on one thread):
the runner samples each sequence's first token from its head's last logits row, copies the
prompt's partial block for each before the next forward pass, and swaps a group with its
shared blocks once. Sequence ``k`` of a seeded prompt equals a run of its own with ``seed + k``;
greedy sequences all equal the single-sequence output -- with the group preempted (recompute:
the prompt prefilled again by its head alone; swap) under a tight cache."""
from __future__ import annotations

import copy

import pytest
import torch

from engine.config import EngineConfig
from engine.runner.model_runner import ModelRunner
from engine.request import SamplingParams
from engine.model.tiny_model import tiny_llama
from tests.support.engine_driver import Arrival, assert_outputs_match, distinct_prompt, run_workload, solo_arrivals


@pytest.fixture(scope="module")
def model(one_torch_thread):
    return tiny_llama(seed=0)


def run(model, config: EngineConfig, arrivals):
    runner = ModelRunner(copy.deepcopy(model), config.num_gpu_blocks, config.block_size,
                         num_cpu_blocks=config.num_cpu_blocks)
    return run_workload(config, arrivals, runner=runner)


def workload(params: SamplingParams) -> list[Arrival]:
    """A request, then a group arriving behind it: the group is the newest, so it is the one
    preempted when the cache runs out."""
    return [Arrival("s", 0, distinct_prompt(1, 9, 500), SamplingParams(max_tokens=12, ignore_eos=True)),
            Arrival("g", 1, distinct_prompt(0, 13, 500), params)]


TIGHT = {"recompute": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=4, max_num_batched_tokens=32),
         "swap": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=4, max_num_batched_tokens=32,
                              preemption_mode="swap", num_cpu_blocks=16)}


@pytest.mark.parametrize("mode", list(TIGHT))
def test_seeded_sequences_equal_solo_runs_with_their_seeds(model, mode):
    arrivals = workload(SamplingParams(max_tokens=12, n=3, temperature=1.0, seed=7, ignore_eos=True))
    result = run(model, TIGHT[mode], arrivals)
    outs = [result.requests[f"g#{k}"].output_token_ids for k in range(3)]
    assert len({tuple(o) for o in outs}) == 3
    assert {rid for r in result.records for rid in r.preempted_ids} >= {"g#0", "g#1", "g#2"}
    roomy = TIGHT[mode].replace(num_gpu_blocks=64)
    assert_outputs_match(result, run(model, roomy, solo_arrivals(arrivals)).outputs())


def test_greedy_sequences_equal_the_single_sequence_output(model):
    arrivals = workload(SamplingParams(max_tokens=12, n=3, ignore_eos=True))
    result = run(model, TIGHT["recompute"], arrivals)
    assert {rid for r in result.records for rid in r.preempted_ids} >= {"g#0", "g#1", "g#2"}
    single = run(model, TIGHT["recompute"].replace(num_gpu_blocks=64),
                 [Arrival("g", 0, arrivals[1].prompt, SamplingParams(max_tokens=12, ignore_eos=True))])
    want = single.requests["g"].output_token_ids
    assert [result.requests[f"g#{k}"].output_token_ids for k in range(3)] == [want] * 3


def test_copy_blocks_copies_every_layer(model):
    runner = ModelRunner(copy.deepcopy(model), 6, 4)
    for k, v in runner.kv_caches:
        k.normal_()
        v.normal_()
    before = [(k.clone(), v.clone()) for k, v in runner.kv_caches]
    runner.copy_blocks([(1, 4), (1, 5), (2, 0)])
    for (k, v), (k0, v0) in zip(runner.kv_caches, before):
        for t, t0 in ((k, k0), (v, v0)):
            assert torch.equal(t[4], t0[1]) and torch.equal(t[5], t0[1]) and torch.equal(t[0], t0[2])
            assert torch.equal(t[1:4], t0[1:4])
