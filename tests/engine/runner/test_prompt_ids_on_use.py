"""A prompt made on first use (``engine.request.PromptIdsOnUse``) on the real model (the tiny
random fp32 Llama, CPU, one torch thread): the runner reads the made ids, so outputs equal the
same prompt given as ids -- greedy, seeded sampling with penalties that read the prompt, and a
parallel-sampling group sharing one prompt."""
from __future__ import annotations

import array
import copy

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model.tiny_model import tiny_llama
from engine.request import SamplingParams
from engine.runner.model_runner import ModelRunner
from tests.support.engine_driver import distinct_prompt

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_seqs=4, max_num_batched_tokens=32,
                      enable_prefix_caching=True)


class IdsOnly:
    """A deferred prompt without text, counting how often it is made."""
    ids_only = True

    def __init__(self, ids) -> None:
        self.ids, self.num_prompt_tokens, self.num_made = array.array("i", ids), len(ids), 0

    def make_prompt(self):
        self.num_made += 1
        return self.ids, None


@pytest.fixture(scope="module")
def model(one_torch_thread):
    return tiny_llama(seed=0)


PARAMS = [SamplingParams(max_tokens=8, ignore_eos=True),
          SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.9, seed=3, repetition_penalty=1.3,
                         presence_penalty=0.5),
          SamplingParams(max_tokens=6, ignore_eos=True, temperature=1.0, seed=5, n=2)]


def outputs(model, deferred: bool):
    eng = LLMEngine(CONFIG, ModelRunner(copy.deepcopy(model), CONFIG.num_gpu_blocks, CONFIG.block_size),
                    CONFIG.num_gpu_blocks)
    made = []
    for i, params in enumerate(PARAMS):
        ids = distinct_prompt(i, 11 + 5 * i, 500)
        if deferred:
            made.append(IdsOnly(ids))
            eng.add_request(None, params, request_id=f"r{i}", deferred=made[-1])
        else:
            eng.add_request(ids, params, request_id=f"r{i}")
    done = eng.collect_finished()
    eng.run_until_done()
    return {rid: list(r.output_token_ids) for rid, r in done.items()}, made


def test_outputs_equal_the_given_prompt(model):
    lazy, made = outputs(model, True)
    eager, _ = outputs(model, False)
    assert lazy == eager and len(lazy) == 4
    assert [m.num_made for m in made] == [1, 1, 1]          # each made once, a group's too
