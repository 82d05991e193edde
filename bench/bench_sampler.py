"""Sampler benchmark: the old per-row sampling loop vs the batched ``Sampler.sample_tensors`` (not a
timed test; speed lives here).

Rows are mixed in a fixed rotation: temperature 0.7 + top-p 0.9, greedy, temperature 0.8,
temperature 1.0 + top-k 50 (so N = 1 is a top-p row), each with its own seed. Logits are random
float32 ``[N, vocab]`` (standard normal times 3) on ``--device``. Penalties are off (they run
before either sampler, unchanged).

The peer is the algorithm ``engine/runner/sampler.py`` had before the batched rewrite, kept here only as
a baseline: greedy rows by one batched argmax, then per non-greedy row a Python loop with one
``torch.Generator`` per request (temperature, ``topk``, ``softmax``, a sort for top-p, and
``torch.multinomial``), one ``.item()`` per row.

    .venv/bin/python bench/bench_sampler.py                   # N = 1, 32, 256; vocab 49,152 and 128,256
    .venv/bin/python bench/bench_sampler.py --rows 1 8 --vocab 32000 --repeat 5 --device cuda

Prints one table: per (vocab, N) the median milliseconds per step of each and the speed-up.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from engine.request import SamplingParams  # noqa: E402
from engine.runner.sampler import Sampler  # noqa: E402
from engine.runner.sampling_tensors import SamplingTensors  # noqa: E402

MIX = [SamplingParams(temperature=0.7, top_p=0.9), SamplingParams(), SamplingParams(temperature=0.8),
       SamplingParams(temperature=1.0, top_k=50)]


def peer_sample(logits: torch.Tensor, params: list[SamplingParams], gens: list[torch.Generator]) -> list[int]:
    """The old per-row loop (the baseline): batched argmax, then one row at a time."""
    out = logits.argmax(dim=-1).tolist()
    for i, p in enumerate(params):
        if p.is_greedy:
            continue
        row = logits[i].float() / p.temperature
        if p.top_k and p.top_k < row.numel():
            kth = torch.topk(row, p.top_k).values[-1]
            row = row.masked_fill(row < kth, float("-inf"))
        probs = torch.softmax(row, dim=-1)
        if p.top_p < 1.0:
            sp, idx = torch.sort(probs, descending=True)
            sp = sp * (sp.cumsum(0) - sp < p.top_p)
            out[i] = int(idx[torch.multinomial(sp / sp.sum(), 1, generator=gens[i])])
        else:
            out[i] = int(torch.multinomial(probs, 1, generator=gens[i]))
    return out


def median_ms(fn, repeat: int, device: torch.device) -> float:
    """Median wall milliseconds of ``fn()`` over ``repeat`` runs, after one warm-up run."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def bench_one(rows: int, vocab: int, repeat: int, device: torch.device) -> list:
    """One table row: (vocab, N, old loop ms, sample_tensors ms, sample() ms, speed-up)."""
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows)).to(device) * 3
    params = [replace(MIX[i % len(MIX)], seed=i) for i in range(rows)]
    gens = [torch.Generator(device=device).manual_seed(i) for i in range(rows)]
    st = SamplingTensors.from_lists([p.temperature for p in params], [p.top_k for p in params],
                                    [p.top_p for p in params], [p.seed for p in params], [0] * rows, device)
    sampler = Sampler()
    peer = median_ms(lambda: peer_sample(logits, params, gens), repeat, device)
    tensors = median_ms(lambda: Sampler.sample_tensors(logits, st), repeat, device)
    wrapper = median_ms(lambda: sampler.sample(logits, params, [0] * rows), repeat, device)
    return [vocab, rows, f"{peer:.2f}", f"{tensors:.2f}", f"{wrapper:.2f}", f"{peer / tensors:.2f}x"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 32, 256], help="batch sizes N")
    ap.add_argument("--vocab", type=int, nargs="+", default=[49_152, 128_256], help="vocabulary sizes")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per cell (median; one warm-up first)")
    ap.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    args = ap.parse_args(argv)
    if min(args.rows) < 1 or min(args.vocab) < 2 or args.repeat < 1:
        ap.error("--rows must be >= 1, --vocab >= 2 and --repeat >= 1")
    device = torch.device(args.device)
    table = [bench_one(n, v, args.repeat, device) for v in args.vocab for n in args.rows]
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"rows rotate T=0.7+top_p=0.9 / greedy / T=0.8 / T=1+top_k=50")
    print(tabulate(table, headers=["vocab", "N", "old loop ms", "sample_tensors ms",
                                   "sample() wrapper ms", "speed-up (old / tensors)"],
                   colalign=("right",) * 6))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
