"""Sampling penalties (repetition, frequency, presence; vLLM semantics): validation in
``SamplingParams``, ``engine.runner.penalties.apply_penalties`` against a per-token loop written from the
definitions, and the ``Sampler``'s argmax on small hand-computed logits."""
from __future__ import annotations

import array
import random
import re

import pytest
import torch

from engine.runner.penalties import apply_penalties, token_ids_tensor
from engine.request import SamplingParams
from engine.runner.sampler import Sampler

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine


def greedy(logits, prompt, output, **penalties) -> int:
    """The Sampler's greedy token for one row of ``logits`` with these penalties."""
    lg = torch.tensor([logits])
    return Sampler().sample(lg, [SamplingParams(**penalties)], prompt_token_ids=[prompt], output_token_ids=[output])[0]


# --- argmax computed by hand ---------------------------------------------------------------------
def test_repetition_penalty_divides_a_positive_logit_of_a_prompt_token():
    # token 0 (2.0) is in the prompt: 2.0 / 2 = 1.0 < token 1's 1.5
    assert greedy([2.0, 1.5, -1.0, 0.5], [0], []) == 0
    assert greedy([2.0, 1.5, -1.0, 0.5], [0], [], repetition_penalty=2.0) == 1


def test_repetition_penalty_multiplies_a_negative_logit():
    # token 0 (-0.5) was generated: -0.5 * 1.5 = -0.75 < token 1's -0.6. Dividing would have
    # made it -0.33 and kept it first.
    assert greedy([-0.5, -0.6, -3.0, -3.0], [3], [0], repetition_penalty=1.5) == 1
    # A penalty below 1 favours seen tokens: -0.6 * 0.5 = -0.3 > -0.5
    assert greedy([-0.5, -0.6, -3.0, -3.0], [3], [1], repetition_penalty=0.5) == 1
    assert greedy([-0.5, -0.6, -3.0, -3.0], [3], [2], repetition_penalty=0.5) == 0


def test_frequency_penalty_counts_output_occurrences_and_ignores_the_prompt():
    logits = [3.0, 2.0, 1.9, 0.0]
    # output [0, 0, 1], f = 0.6: 3 - 1.2 = 1.8, 2 - 0.6 = 1.4, token 2 untouched (only in the prompt)
    assert greedy(logits, [2], [0, 0, 1], frequency_penalty=0.6) == 2
    # presence counts each output token once: 3 - 0.6 = 2.4 stays first
    assert greedy(logits, [2], [0, 0, 1], presence_penalty=0.6) == 0
    # negative penalties reward repetition: 2.0 + 2 * 0.6 = 3.2 beats token 0's 3.0
    assert greedy(logits, [], [1, 1], frequency_penalty=-0.6) == 1


def test_repetition_is_applied_before_frequency():
    # token 0: 3 / 2 - 1 = 0.5 < token 1's 0.75 (the other order would give (3 - 1) / 2 = 1.0)
    assert greedy([3.0, 0.75], [], [0], repetition_penalty=2.0, frequency_penalty=1.0) == 1


def test_penalties_steer_sampling_too():
    # Temperature sampling draws from the penalized distribution: token 0 (5.0, generated 10
    # times) drops to 5 - 2 * 10 = -15 and is (practically) never drawn; without the penalty
    # it has probability e^5 / (e^5 + 3) = 0.98.
    lg = torch.tensor([[5.0, 0.0, 0.0, 0.0]])
    s = Sampler()

    def draws(**penalty):
        return [s.sample(lg, [SamplingParams(temperature=1.0, seed=i, **penalty)], None, [[]], [[0] * 10])[0]
                for i in range(20)]

    assert 0 not in draws(frequency_penalty=2.0)
    assert draws().count(0) >= 15


# --- the batched operation against the definitions ------------------------------------------------
def reference_penalties(logits: list[float], prompt, output, r: float, f: float, p: float) -> list[float]:
    """The definitions, one token at a time."""
    out = []
    for t, x in enumerate(logits):
        if t in prompt or t in output:
            x = x / r if x > 0 else x * r
        n = output.count(t)
        out.append(x - f * n - p * (n > 0))
    return out


def test_batched_penalties_equal_the_per_token_definition():
    rng = random.Random(0)
    vocab, rows = 40, 9
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1))
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(0, 30))] for _ in range(rows)]
    outputs = [[rng.randrange(vocab) for _ in range(rng.randint(0, 30))] for _ in range(rows)]
    pens = [(rng.choice([1.0, 0.7, 1.3]), rng.uniform(-2, 2), rng.uniform(-2, 2)) for _ in range(rows)]
    before = logits.clone()
    got = apply_penalties(logits, [token_ids_tensor(x) for x in prompts],
                          [token_ids_tensor(x) for x in outputs],
                          *[[p[k] for p in pens] for k in range(3)])
    assert torch.equal(logits, before), "the input logits were modified"
    assert got.dtype == torch.float32 and got.shape == logits.shape
    for i in range(rows):
        want = reference_penalties(logits[i].tolist(), prompts[i], outputs[i], *pens[i])
        assert got[i].tolist() == pytest.approx(want, rel=1e-6, abs=1e-6), i


def test_sampler_penalizes_only_the_rows_that_ask_for_it():
    lg = torch.tensor([[2.0, 1.9, 0.0], [2.0, 1.9, 0.0], [2.0, 1.9, 0.0]], dtype=torch.bfloat16)
    params = [SamplingParams(), SamplingParams(presence_penalty=0.5), SamplingParams()]
    prompts, outputs = [[0], [2], [0]], [[0], [0], [0]]
    assert Sampler().sample(lg, params, None, prompts, outputs) == [0, 1, 0]
    assert lg.dtype == torch.bfloat16 and lg[1, 0] == 2.0                  # the caller's tensor kept


def test_compact_prompt_arrays_and_missing_history():
    prompt = array.array("i", [0, 0, 3])
    assert token_ids_tensor(prompt).tolist() == [0, 0, 3]
    assert greedy([2.0, 1.5, 0.0, 0.0], prompt, [], repetition_penalty=2.0) == 1
    with pytest.raises(ValueError, match="prompt and output token ids"):
        Sampler().sample(torch.zeros(1, 4), [SamplingParams(repetition_penalty=1.2)])
    with pytest.raises(ValueError, match=r"token id 9 is outside the vocabulary \[0, 4\)"):
        greedy([0.0] * 4, [], [9], frequency_penalty=1.0)


def test_greedy_without_penalties_needs_no_history():
    lg = torch.tensor([[0.0, 1.0]])
    assert Sampler().sample(lg, [SamplingParams()]) == [1]


# --- validation -----------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, limit", [
    ("repetition_penalty", 0.0, "> 0"), ("repetition_penalty", -1.0, "> 0"),
    ("repetition_penalty", float("inf"), "> 0"), ("repetition_penalty", float("nan"), "> 0"),
    ("frequency_penalty", 2.5, "[-2, 2]"), ("frequency_penalty", -2.01, "[-2, 2]"),
    ("presence_penalty", 3.0, "[-2, 2]"), ("presence_penalty", float("nan"), "[-2, 2]"),
])
def test_out_of_range_penalties_are_refused_naming_the_limit(field, value, limit):
    with pytest.raises(ValueError, match=f"{field} must be .*{re.escape(limit)}"):
        SamplingParams(**{field: value})


def test_defaults_are_off_and_limits_are_inclusive():
    assert not SamplingParams().has_penalties
    for kw in ({"repetition_penalty": 1.01}, {"frequency_penalty": -2.0}, {"presence_penalty": 2.0}):
        assert SamplingParams(**kw).has_penalties
