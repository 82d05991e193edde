"""Prompts made when a request is admitted, not when the workload is built (issue 18): the ids
equal the ones an eager build made (random ids from one generator, corpus windows, Mooncake hash
blocks), whatever order they are made in; the engine makes them on arrival only; and a replay's
memory grows with the requests in the engine, not with the trace's length."""
from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from app.workload_setup import add_workload
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from recordings.workloads.prefix_blocks import SharedPrefixPrompts
from recordings.workloads.traces import TraceRow, load_trace
from recordings.workloads.workload import WorkloadRequest, _CorpusPrompts, build_workload
from tests.support.fake_runner import NullRunner
from tests.support.jsonl_files import write_jsonl

CORPUS = "Alpha beta gamma. Delta epsilon zeta eta! Kappa lambda mu? Omicron pi rho sigma tau.\n"


class CharTokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, token_ids) -> str:
        return "".join(map(chr, token_ids))


def rows(lengths, gap_s: float = 1.0, hash_ids=None) -> list[TraceRow]:
    return [TraceRow(i + 2, i * gap_s, n, 3, tuple(hash_ids[i]) if hash_ids else ())
            for i, n in enumerate(lengths)]


LENGTHS = [5, 700, 1, 64, 3000, 17]


def test_random_ids_are_the_eager_draws_in_any_order():
    wl = build_workload(rows(LENGTHS), None, seed=7, vocab_size=1000)
    assert all(r.is_deferred for r in wl.requests)
    eager = np.random.default_rng(7)                 # what the eager build drew, request by request
    want = [eager.integers(100, 999 + 1, max(4, n), dtype=np.int32).tolist() for n in LENGTHS]
    made = {r.request_id: list(r.prompt_token_ids) for r in reversed(wl.requests)}   # last first
    assert [made[r.request_id] for r in wl.requests] == want
    assert [r.num_prompt_tokens for r in wl.requests] == [len(w) for w in want]
    assert wl.requests[1].prompt_token_ids.itemsize == 4 and wl.requests[1].prompt_text is None
    assert wl.num_prompt_tokens == sum(map(len, want))


def test_corpus_windows_are_the_eager_windows():
    tok = CharTokenizer()
    wl = build_workload(rows(LENGTHS), tok, seed=3, corpus=CORPUS)
    eager, rng = _CorpusPrompts(tok, CORPUS), random.Random(3)
    want = [eager.window(rng, max(4, n)) for n in LENGTHS]
    for r, ids in reversed(list(zip(wl.requests, want))):
        assert r.make_prompt() == (ids, tok.decode(ids))


def test_hash_blocks_are_the_eager_blocks(tmp_path):
    hashes = [[1, 2, 3], [1, 2], [9], [1, 2, 3, 4, 5, 6, 7]]
    lines = [{"timestamp": i, "input_length": n, "output_length": 2, "hash_ids": h}
             for i, (n, h) in enumerate(zip([1300, 1024, 100, 3000], hashes))]
    path = write_jsonl(tmp_path / "mc.jsonl", lines)
    trace = load_trace(path).rows
    wl = build_workload(trace, None, seed=5, prompt_scale=0.5, max_prompt_tokens=1200, block_size=16)
    eager = SharedPrefixPrompts(16, 0.5, 5, 100, 40000)
    want = []
    for i, row in enumerate(trace):
        n = min(1200, max(4, eager.length(row.num_prompt_tokens, row.hash_ids)))
        want.append(eager.prompt(row.num_prompt_tokens, row.hash_ids, n, i).tolist())
    assert [list(r.prompt_token_ids) for r in reversed(wl.requests)] == want[::-1]
    assert wl.prefix_sharing == eager.sharing()


def test_given_prompts_stay_given():
    r = WorkloadRequest("a", 0.0, prompt_text="hi", prompt_token_ids=[104, 105], max_tokens=3)
    assert not r.is_deferred and r.make_prompt() == ([104, 105], "hi") and r.num_prompt_tokens == 2
    with pytest.raises(ValueError, match="exactly one"):
        WorkloadRequest("b", 0.0, max_tokens=3)


class CountingPrompt:
    def __init__(self, ids) -> None:
        self.ids, self.num_made = ids, 0

    def make_prompt(self):
        self.num_made += 1
        return self.ids, None


def test_the_engine_makes_a_deferred_prompt_when_the_request_arrives():
    eng = LLMEngine(EngineConfig(clock="virtual", max_num_seqs=4, max_num_batched_tokens=64), NullRunner(), 64)
    now, later = CountingPrompt([5, 6, 7]), CountingPrompt([8, 9])
    eng.add_request(None, SamplingParams(max_tokens=2), request_id="now", deferred=now)
    eng.add_request(None, SamplingParams(max_tokens=2), request_id="later", arrival_time=3, deferred=later)
    assert (now.num_made, later.num_made) == (1, 0) and list(eng.requests) == ["now"]
    done = eng.collect_finished()
    for _ in range(3):
        eng.step()
    assert later.num_made == 0                          # not arrived yet: no ids, no Request
    eng.run_until_done()
    assert (now.num_made, later.num_made) == (1, 1)
    assert done["later"].prompt_token_ids == [8, 9] and done["later"].arrival_time == 3
    for ids, deferred in ((None, None), ([1], now)):
        with pytest.raises(ValueError, match="exactly one"):
            eng.add_request(ids, SamplingParams(), deferred=deferred)


def traced_peak(num_requests: int, prompt_len: int = 2000) -> int:
    """Bytes Python allocated at the peak of building and replaying ``num_requests`` requests of
    ``prompt_len`` tokens arriving 0.2 s apart (a few live at a time), above what it held before."""
    trace = rows([prompt_len] * num_requests, gap_s=0.2)
    eng = LLMEngine(EngineConfig(clock="sim", max_num_seqs=16, max_num_batched_tokens=4096),
                    NullRunner(step_duration=lambda sched: 0.05), 4096)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        wl = build_workload(trace, None, seed=1)
        add_workload(eng, wl.requests, clock="sim")
        while eng.has_unfinished:
            eng.step()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_replay_memory_follows_the_live_requests_not_the_trace():
    small, large = traced_peak(300), traced_peak(1200)
    eager_growth = 900 * 2000 * 4                       # the 900 more prompts as array('i')
    assert large - small < eager_growth / 8, (small, large)
