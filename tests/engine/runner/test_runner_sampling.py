"""The runner's batched sampling from its InputBatch columns (engine.runner.sampling) draws what the
SamplingParams wrapper draws for the same rows: each row's own seed, its output length as the
counter, penalties from its own prompt and output; in any row order."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.runner.input_batch import InputBatch
from engine.outputs import NewRequestData
from engine.request import SamplingParams
from engine.runner.sampling import sample_rows
from engine.runner.sampler import Sampler

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine

VOCAB = 64
PARAMS = {
    "greedy": SamplingParams(),
    "seeded": SamplingParams(temperature=1.0, seed=11),
    "top_p": SamplingParams(temperature=0.8, top_p=0.9, seed=12),
    "top_k_rep": SamplingParams(temperature=1.2, top_k=5, seed=13, repetition_penalty=1.5),
    "freq": SamplingParams(temperature=1.0, seed=14, frequency_penalty=1.0, presence_penalty=0.5),
    "greedy_rep": SamplingParams(repetition_penalty=2.0),
}


def filled_batch():
    rng = np.random.default_rng(3)
    batch = InputBatch(2, 8, 1, block_size=4)          # grows as requests come
    history = {}
    for i, (rid, p) in enumerate(PARAMS.items()):
        prompt = rng.integers(0, VOCAB, 3 + 2 * i).tolist()
        output = tuple(rng.integers(0, VOCAB, i).tolist())
        batch.add(NewRequestData(rid, prompt, output, p, (0,), 0))
        history[rid] = (prompt, list(output))
    return batch, history


def test_runner_rows_draw_what_the_wrapper_draws_for_the_same_requests():
    batch, history = filled_batch()
    logits = torch.randn(len(PARAMS), VOCAB, generator=torch.Generator().manual_seed(1)) * 2
    for order in (list(range(len(PARAMS))), [4, 0, 5, 2, 1, 3]):
        rows = np.array(order, dtype=np.int64)
        ids = [batch.req_ids[r] for r in order]
        got = sample_rows(logits, batch, rows).tolist()
        want = Sampler().sample(logits, [PARAMS[i] for i in ids], None,
                                [history[i][0] for i in ids], [history[i][1] for i in ids])
        assert got == want, order


def test_the_counter_moves_with_each_appended_token():
    batch, _ = filled_batch()
    rows = np.array([batch.req_id_to_index["seeded"]])
    logits = torch.zeros(1, VOCAB)                     # uniform: the draw is the uniform itself
    draws = []
    for _ in range(8):
        tok = sample_rows(logits, batch, rows)
        draws.append(int(tok[0]))
        batch.append_tokens(rows, tok.numpy().astype(np.int32))
    assert len(set(draws)) > 4                          # a new uniform each step
    assert batch.output_token_ids(int(rows[0])).tolist()[-8:] == draws
