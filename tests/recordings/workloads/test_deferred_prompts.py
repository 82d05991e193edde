"""Prompts made when a request is admitted, not when the workload is built (issue 18): the ids
equal the ones an eager build made (random ids from one generator, corpus windows, Mooncake hash
blocks), whatever order they are made in; the engine makes them on arrival only; and a replay's
memory grows with the requests in the engine, not with the trace's length."""
from __future__ import annotations

import array
import random
import tracemalloc

import numpy as np
import pytest

from app.workload_setup import add_workload
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import PromptIdsOnUse, SamplingParams
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


def test_prompt_ids_on_use_are_made_once_when_read():
    made = CountingPrompt(array.array("i", [5, 6, 7]))
    ids = PromptIdsOnUse(made, 3)
    assert len(ids) == 3 and not ids.is_made and made.num_made == 0
    assert ids[1] == 6 and list(ids) == [5, 6, 7] and ids[1:] == array.array("i", [6, 7])
    assert ids == array.array("i", [5, 6, 7]) and ids != [5, 6, 7]     # compares as the made ids do
    assert made.num_made == 1 and ids.is_made
    with pytest.raises(ValueError, match="of 4 tokens made 3 ids"):
        list(PromptIdsOnUse(CountingPrompt([1, 2, 3]), 4))


def conversation_trace(tmp_path, num_requests: int = 40):
    """Mooncake-style multi-turn rows: each turn repeats its conversation's hash ids and adds
    two, arriving faster than a small engine serves them (a queue builds up)."""
    rng, lines, conv = random.Random(3), [], {}
    for i in range(num_requests):
        c = rng.randrange(6)
        conv[c] = conv.get(c, [1000 * c]) + [10**6 + 2 * i, 10**6 + 2 * i + 1]
        n = 512 * (len(conv[c]) - 1) + rng.randrange(1, 512)
        lines.append({"timestamp": 50 * i, "input_length": n, "output_length": rng.randrange(2, 40),
                      "hash_ids": conv[c]})
    return load_trace(write_jsonl(tmp_path / "conv.jsonl", lines)).rows


def replay(trace, tmp_path, name: str, made_at_arrival: bool, monkeypatch):
    """Replay ``trace`` (sim clock, prefix caching, 4 slots) recorded to ``name``; returns the
    records and, after each step, how many live requests hold made prompt ids."""
    from recordings.file.writer import RecordingWriter
    from tests.support.engine_driver import make_config

    monkeypatch.setattr(WorkloadRequest, "ids_only", property(lambda self: not made_at_arrival
                                                              and self.is_deferred))
    config, run_info = make_config(clock="sim", max_num_seqs=4, max_num_batched_tokens=2048,
                                   enable_prefix_caching=True, num_gpu_blocks=1024, block_size=16,
                                   max_model_len=16384)
    wl = build_workload(trace, None, seed=2, block_size=config.block_size)
    records, made = [], []
    with RecordingWriter(tmp_path / name, run_info, store_prompt_token_ids=False) as writer:
        eng = LLMEngine(config, NullRunner(step_duration=lambda sched: 0.2), config.num_gpu_blocks,
                        recorder=writer)
        add_workload(eng, wl.requests, clock="sim")
        while eng.has_unfinished:
            records.append(eng.step())
            live = [r.prompt_token_ids for r in eng.requests.values()]
            made.append(sum(not isinstance(p, PromptIdsOnUse) or p.is_made for p in live))
    return records, made, len(wl.requests)


def test_an_overloaded_queue_holds_no_prompt_ids_and_the_run_is_the_same(tmp_path, monkeypatch):
    """Ids-only prompts (random ids, Mooncake hash blocks) are made when the scheduler first
    hashes the request's blocks, not on arrival: the queue of a replay that arrives faster than
    it is served holds none, and the run (schedule, prefix hits, block events) is the one that
    making them on arrival gives."""
    trace = conversation_trace(tmp_path)
    lazy, made, n = replay(trace, tmp_path, "lazy.sqlite", False, monkeypatch)
    eager, made_eager, _ = replay(trace, tmp_path, "eager.sqlite", True, monkeypatch)
    strip = lambda rs: [(r.scheduled, r.new_tokens, r.events, r.block_events, r.transitions,  # noqa: E731
                         r.prefix_cache_hits) for r in rs]
    assert strip(lazy) == strip(eager) and sum(r.prefix_cache_hits for r in lazy) > 0
    waiting = [r.num_waiting for r in lazy]
    assert max(waiting) >= 10                              # the queue did build up
    assert max(made) <= 4 + 2 < max(made_eager)            # running + a few looked up ahead
    assert lazy[-1].num_finished == n
