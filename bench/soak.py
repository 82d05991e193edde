"""Soak: 20,000 requests through the real engine and the fake runner, invariants checked after
every step, every step recorded; memory and per-step time must stay flat (not a test).

A steady stream: ``--rate`` requests arrive per step (virtual clock), prompts 16-512 and outputs
8-96 tokens (seeded uniform, EOS ignored), ``max_num_seqs`` 64, 2,048 blocks of 16 tokens,
``max_num_batched_tokens`` 2,048, recompute preemption when the blocks run out. The engine is
``engine.engine.LLMEngine`` with ``tests/engine/fake_runner.FakeRunner`` (which also checks every
scheduled step against its own copy of the KV cache), ``check_invariants=True`` (the scheduler's
and the state's self-checks after each step) and a ``recordings.file.writer.RecordingWriter``.

Reported at the first, the middle and the last thousand finished requests: resident memory
(``VmRSS``), the engine's live requests, the mean and p99 wall time of a step (the step call, the
invariant checks included) over those steps, and the writer's queue depth. At the end: the
recording's size and ``batchscope check`` on it.

    .venv/bin/python bench/soak.py [--requests 20000] [--record /tmp/soak.sqlite] [--skip-check]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import numpy as np  # noqa: E402

from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from tests.support.fake_runner import FakeRunner  # noqa: E402
from recordings.file.writer import RecordingWriter  # noqa: E402


def rss_mib() -> float:
    """This process's resident memory (MiB), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=1.0, help="arrivals per step (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", help="recording path (default: a temporary file, deleted)")
    p.add_argument("--skip-check", action="store_true", help="do not run batchscope check at the end")
    args = p.parse_args()
    if args.requests < 3000:
        p.error("--requests must be >= 3000 (three windows of 1,000 finished requests)")

    config = EngineConfig(num_gpu_blocks=2048, block_size=16, max_num_seqs=64, max_num_batched_tokens=2048,
                          max_model_len=1024, clock="virtual", check_invariants=True)
    tmp = None if args.record else tempfile.TemporaryDirectory()
    path = Path(args.record) if args.record else Path(tmp.name) / "soak.sqlite"
    writer = RecordingWriter(path, {"config": config.to_dict(), "model": {"name": "fake"}, "soak": True},
                             overwrite=True)
    engine = LLMEngine(config, FakeRunner(config.num_gpu_blocks, config.block_size), config.num_gpu_blocks,
                       recorder=writer)
    rng = random.Random(args.seed)
    windows = {"start": (0, 1000), "middle": (args.requests // 2 - 500, args.requests // 2 + 500),
               "end": (args.requests - 1000, args.requests)}
    samples: dict[str, dict] = {name: {"step_s": []} for name in windows}
    added, due, t0 = 0, 0.0, time.perf_counter()
    while added < args.requests or engine.has_unfinished:
        due += args.rate
        while added < args.requests and due >= 1:
            prompt = [rng.randrange(100, 30000) for _ in range(rng.randint(16, 512))]
            engine.add_request(prompt, SamplingParams(max_tokens=rng.randint(8, 96), ignore_eos=True),
                               request_id=f"r{added:05d}")
            added, due = added + 1, due - 1
        start = time.perf_counter()
        engine.step()
        took = time.perf_counter() - start
        done = engine.scheduler.num_finished
        for name, (lo, hi) in windows.items():
            if lo <= done < hi:
                samples[name]["step_s"].append(took)
            elif done >= hi and "rss_mib" not in samples[name]:
                samples[name].update(rss_mib=rss_mib(), live=len(engine.scheduler.requests),
                                     queue=writer.queue_depth, step=engine.step_index)
    wall = time.perf_counter() - t0
    writer.close()
    print(f"soak: {args.requests:,} requests, {engine.step_index:,} steps in {wall:.0f} s "
          f"(invariants every step, recording on), {path.stat().st_size / 2**20:.1f} MiB recorded")
    print(f"{'window (finished requests)':28} {'at step':>8} {'RSS MiB':>8} {'live req':>8} "
          f"{'step mean ms':>12} {'step p99 ms':>11} {'writer queue':>12}")
    for name, (lo, hi) in windows.items():
        s = samples[name]
        times = np.array(s["step_s"]) * 1e3
        print(f"{name + f' ({lo:,}-{hi:,})':28} {s.get('step', 0):>8,} {s.get('rss_mib', float('nan')):>8.1f} "
              f"{s.get('live', 0):>8} {times.mean():>12.2f} {np.percentile(times, 99):>11.2f} {s.get('queue', 0):>12}")
    if not args.skip_check:
        from app.commands.check import check_lines
        t = time.perf_counter()
        lines, steps = check_lines(str(path))
        print(f"batchscope check: {steps:,} steps, {len(lines)} problems in {time.perf_counter() - t:.0f} s"
              + "".join(f"\n  {line}" for line in lines[:10]))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
