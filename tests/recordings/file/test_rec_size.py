"""Recording size: a decode step of 256 running requests (16,384 KV blocks) adds at most 2 kB to
the file, keyframes and block events included. Measured as the growth of the closed file between
two identical virtual-clock runs of different lengths, with a runner that does no model work."""
from __future__ import annotations

import pytest

import os

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import ModelRunnerOutput
from engine.runner.lengths import RunnerLengths
from engine.request import SamplingParams
from recordings.file.writer import RecordingWriter

MAX_BYTES_PER_STEP = 2_000    # schema 4 (binary batch and block events); 8 kB as JSON
NUM_RUNNING = 256
NUM_BLOCKS = 16_384
BLOCK_SIZE = 16


class NoModel:
    """Samples a token (a 5-digit id, as real vocabularies have) for every request whose chunk
    reaches its last known token (its token counts kept from the scheduler's diffs); no model
    work."""

    def __init__(self):
        self.lengths = RunnerLengths()

    def execute(self, sched):
        self.lengths.update(sched)
        return ModelRunnerOutput(sampled_token_ids={
            rid: 10_000 + (index * 7919) % 40_000 for rid, index in self.lengths.sampling(sched)})

    def release(self, request_id):
        pass


def record(path, num_steps: int) -> list[int]:
    """Record ``num_steps`` steps of the workload; returns the number running after each."""
    config = EngineConfig(num_gpu_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE,
                          max_num_seqs=NUM_RUNNING, max_num_batched_tokens=8192,
                          max_model_len=4096)
    running = []
    with RecordingWriter(path, {"config": config.to_dict(), "model": "none"}) as writer:
        engine = LLMEngine(config, NoModel(), NUM_BLOCKS, recorder=writer)
        engine.on_finished = lambda req: None
        # 10,000 requests rejected at once first, so the live ones have 5-digit arrival numbers
        for _ in range(10_000):
            engine.add_request([1], SamplingParams(max_tokens=5000))
        for i in range(NUM_RUNNING):  # 20..275 prompt tokens; never finish within the run
            engine.add_request([(i * 31 + j) % 30_000 + 1 for j in range(20 + i)],
                               SamplingParams(max_tokens=3000, ignore_eos=True))
        for _ in range(num_steps):
            running.append(engine.step().num_running)
    assert engine.recorder_error is None
    return running


@pytest.mark.slow
def test_a_256_running_decode_step_costs_at_most_2_kb(tmp_path):
    short, long = 150, 550
    record(tmp_path / "short.sqlite", short)
    running = record(tmp_path / "long.sqlite", long)
    assert set(running[short - 50:]) == {NUM_RUNNING}  # the window decodes 256 requests
    growth = os.path.getsize(tmp_path / "long.sqlite") - os.path.getsize(tmp_path / "short.sqlite")
    per_step = growth / (long - short)
    print(f"{per_step / 1e3:.2f} kB per 256-running decode step")
    assert per_step <= MAX_BYTES_PER_STEP
