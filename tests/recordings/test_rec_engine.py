"""The real LLMEngine (scheduler + block pool, fake model runner) recorded and replayed."""
from __future__ import annotations

import random

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import ModelRunnerOutput
from engine.request import SamplingParams
from recordings import Reader, RecordingWriter, summarize


class FakeRunner:
    """Samples a random token for every request whose chunk reaches the end of its tokens."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def execute(self, sched, requests):
        return ModelRunnerOutput(sampled_token_ids={
            s.request_id: self.rng.randrange(1, 1000) for s in sched.scheduled
            if s.num_computed_tokens + s.num_tokens >= requests[s.request_id].num_tokens})

    def release(self, request_id: str) -> None:
        pass


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_steps_replay_exactly(tmp_path, seed):
    cfg = EngineConfig(num_gpu_blocks=12, block_size=4, max_num_seqs=3,
                       max_num_batched_tokens=16, max_model_len=48)
    path = tmp_path / "engine.sqlite"
    rng = random.Random(seed)
    records, states = [], []
    with RecordingWriter(path, {"config": cfg.to_dict(), "model": "fake"},
                         keyframe_interval=5) as writer:
        engine = LLMEngine(cfg, FakeRunner(seed), cfg.num_gpu_blocks, recorder=writer)
        for _ in range(12):
            engine.add_request([rng.randrange(1000) for _ in range(rng.randint(1, 20))],
                               SamplingParams(max_tokens=rng.randint(1, 15)),
                               arrival_time=float(rng.randrange(0, 20)))
        while engine.has_unfinished and len(records) < 500:
            records.append(engine.step())
            states.append(engine.state())
            if len(records) == 7:
                engine.abort_request(next(iter(engine.requests)))
    reader = Reader(path)
    assert reader.records(0, 10**6) == records
    for k, state in enumerate(states):
        assert reader.state_at(k) == state
    # metrics from rows agree with the engine's own per-request TTFT (virtual clock)
    summary = summarize(reader)
    ttfts = [v.ttft for v in states[-1].requests.values() if v.ttft is not None]
    assert summary.ttft.num_samples == len(ttfts)
    assert [summary.ttft.p50, summary.ttft.p90, summary.ttft.p99] == pytest.approx(
        list(np.percentile(ttfts, [50, 90, 99])))
    assert summary.num_preemptions == sum(e.kind == "preempted"
                                          for r in records for e in r.events)
