"""Input preparation of one decode step at 256 running requests: the runner's own state
(``engine.runner.input_batch``: apply the step's diff, pack input ids / positions / slot mapping /
block tables with vectorized numpy, stage them, build the attention metadata) against the
per-token construction from live ``Request`` objects it replaced (kept here as the baseline).
No model: only what happens before the forward pass. Times are this thread's CPU time (stable
on a shared machine). Not a timed test.

    .venv/bin/python bench/bench_input_prep.py [--running 256] [--context 1024] [--steps 200]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.runner.attention import PagedAttentionMetadata  # noqa: E402
from engine.runner.input_batch import InputBatch  # noqa: E402
from engine.outputs import CachedRequestData, NewRequestData, ScheduledRequest, SchedulerOutput  # noqa: E402
from engine.request import Request, SamplingParams  # noqa: E402
from engine.runner.buffers import StepUpload  # noqa: E402

BLOCK_SIZE = 16
CPU = torch.device("cpu")


def legacy_prepare(scheduled, requests, block_tables) -> PagedAttentionMetadata:
    """The runner's inputs as built before the InputBatch: Python lists filled token by token
    from the live requests and their block tables (``block_tables``: request id -> table, as
    each step's ``ScheduledRequest`` carried it then), and a slot mapping filled token by token
    (the baseline)."""
    ids, pos, qlens, ctxs, tables, slots, starts = [], [], [], [], [], [], [0]
    for s in scheduled:
        req = requests[s.request_id]
        start, end = s.num_computed_tokens, s.num_computed_tokens + s.num_tokens
        ids.extend(req.token_ids(start, end))
        pos.extend(range(start, end))
        qlens.append(s.num_tokens)
        ctxs.append(end)
        table = block_tables[s.request_id]
        tables.append(list(table))
        starts.append(starts[-1] + s.num_tokens)
        for p in range(start, end):
            slots.append(table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE)
    torch.tensor([ids], dtype=torch.long)
    torch.tensor([pos], dtype=torch.long)
    width = max(len(t) for t in tables)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)
    meta = PagedAttentionMetadata.from_arrays(np.array(qlens), np.array(ctxs), padded.numpy(),
                                              np.array([len(t) for t in tables]),
                                              torch.tensor(slots, dtype=torch.long), [], BLOCK_SIZE, CPU)
    return meta


def new_prepare(batch: InputBatch, upload: StepUpload, sched: SchedulerOutput) -> PagedAttentionMetadata:
    """The runner's path today (``ModelRunner.execute`` up to the forward pass, sampling
    parameters left out): every input staged in one upload, sent at once."""
    batch.update(sched)
    inp = batch.prepare(sched.scheduled)
    upload.add("input_ids", inp.input_ids)
    upload.add("positions", inp.positions)
    upload.add("slot_mapping", inp.slot_mapping)
    upload.add("block_tables", inp.block_tables)
    staged = PagedAttentionMetadata.stage(upload, inp.query_lens, inp.context_lens, inp.block_tables,
                                          inp.num_blocks, BLOCK_SIZE)
    return staged.build(upload.send(), [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--context", type=int, default=1024, help="mean tokens per request (uniform 0.5x-1.5x)")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.running
    lens = rng.integers(args.context // 2, args.context * 3 // 2, n)
    blocks = rng.permutation(n * (int(lens.max()) // BLOCK_SIZE + 2))
    requests, new, scheduled, at, block_tables = {}, [], [], 0, {}
    for i, ctx in enumerate(lens.tolist()):
        nb = -(-(ctx + args.steps + 1) // BLOCK_SIZE)
        table = tuple(blocks[at:at + nb].tolist())
        at += nb
        req = Request(f"r{i}", rng.integers(0, 50_000, ctx - 1).tolist(), SamplingParams(max_tokens=args.steps + 2))
        req.output_token_ids.append(int(rng.integers(0, 50_000)))
        req.num_computed_tokens = ctx - 1
        requests[req.request_id] = req
        block_tables[req.request_id] = table
        new.append(NewRequestData(req.request_id, req.prompt_token_ids, tuple(req.output_token_ids),
                                  req.sampling_params, table, ctx - 1))
        scheduled.append(ScheduledRequest(req.request_id, i, 1, ctx - 1, False, ()))
    batch = InputBatch(n, int(lens.max()) + args.steps + 2, int(lens.max()) // BLOCK_SIZE + 4, BLOCK_SIZE)
    upload = StepUpload(CPU)
    batch.update(SchedulerOutput(0, (), scheduled_new_reqs=tuple(new)))
    legacy, current = [], []
    for step in range(args.steps):
        # the same decode step both ways; then every request gains the token it sampled
        sched = SchedulerOutput(step, tuple(scheduled), scheduled_cached_reqs=CachedRequestData(
            [s.request_id for s in scheduled], [()] * n, [s.num_computed_tokens for s in scheduled]))
        t0 = time.thread_time_ns()
        legacy_prepare(scheduled, requests, block_tables)
        t1 = time.thread_time_ns()
        new_prepare(batch, upload, sched)
        t2 = time.thread_time_ns()
        legacy.append(t1 - t0)
        current.append(t2 - t1)
        batch.append_tokens(np.arange(n), np.full(n, 7))
        for r in requests.values():
            r.output_token_ids.append(7)
            r.num_computed_tokens += 1
        scheduled = [s._replace(num_computed_tokens=s.num_computed_tokens + 1) for s in scheduled]
    med = lambda xs: statistics.median(xs) / 1e3  # noqa: E731
    print(f"input preparation, {n} running decode requests, ~{args.context} tokens each, "
          f"median of {args.steps} steps (thread CPU time):")
    print(f"  per-token from live Requests (before): {med(legacy):8.1f} us")
    print(f"  InputBatch, vectorized (now):          {med(current):8.1f} us   "
          f"({med(legacy) / med(current):.1f}x faster)")


if __name__ == "__main__":
    main()
