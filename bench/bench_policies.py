"""Issue 6's note: scheduling policies and prefix caching, measured (a benchmark, not a test).

    .venv/bin/python bench/bench_policies.py              # the three tables, one run (minutes)
    .venv/bin/python bench/bench_policies.py --skip-cpu   # without the SmolLM2 CPU runs (a minute)

Every run is ``batchscope run`` itself (``app.cli.main``, in this process, its output kept out of
the way) writing a recording under ``--out`` (default ``/tmp/bench_policies``); every figure comes
from the recording through ``recordings.metrics.run_metrics`` (``summarize``, ``summarize_batching``), the
code behind ``batchscope summary``. Durations and TTFT are on the run's clock: simulated seconds for
``--executor sim``, wall seconds for the model on this CPU.

a. Continuous (``--policy fcfs``) vs static batching (``--policy static``), first 200 requests of
   the Azure conv trace, arrivals x0.1 so a queue builds up (200 requests in 6 s; the runs serve
   for 20-35 s): (i) simulated Llama-3.1-8B on an H100, real lengths, 32 batch slots,
   8,192 tokens per step; (ii) SmolLM2-135M on this CPU with the demo's scaling and engine (prompts
   x1/12 clipped to 8-96 tokens, outputs x1/4 clipped to 8-64, 16 slots, 256 tokens per step, 112
   blocks), first ``--cpu-requests`` (64) requests only, one torch thread (``--cpu-threads``: two
   OpenMP threads on a busy 2-core machine wait on each other, 60x slower steps); wall-clock
   figures move with the load of this shared machine, printed with them. Columns: output tokens/s,
   TTFT p50/p99, TPOT p50, slot occupancy (running / max_num_seqs, mean over steps), steps (forward
   passes), share of steps that end with a waiting queue; then the ratio fcfs/static.

   Why the ratio is ~1.5x and not Anyscale's 23x-36x ("How continuous batching enables 23x
   throughput in LLM inference", Anyscale 2023): there the 23x is vLLM (continuous batching *and*
   PagedAttention) against Hugging Face pipelines' static batching, and continuous batching alone
   (TGI, Ray Serve) gave 8x. Their baseline padded every sequence of a batch and reserved KV for the
   longest, so memory capped its batch size; their workload (512-token prompts, outputs drawn from
   an exponential distribution up to 1,536 tokens, EOS ignored) maximises the spread of output
   lengths inside a batch. Our ``static`` keeps everything else of the engine -- paged KV blocks,
   chunked prefill, the same batch size and the same kernels -- and removes only iteration-level
   admission. What is left is the idle-slot effect: a static batch runs until its longest output,
   so its slots are busy (sum of outputs) / (batch size x longest output) of the decode steps. For
   Azure conv's outputs (mean 235, std 153, max 594 in these 200) that bound is printed with the
   table (about 0.55: at most ~1.8x from batching alone). Output tokens/s gains less, because only
   the decode steps get fuller: prefill is the same work under both policies and dilutes the ratio
   (the time in steps with prefill chunks and in decode-only steps is printed under the table; the
   sim's Azure prompts are long, 180,697 prompt tokens for 47,050 output tokens), and static's
   emptier decode steps are a little cheaper (no prefill chunks mixed in, fewer rows: lower TPOT),
   though a memory-bound decode step reads all the weights whatever the batch size. On the CPU
   prompt and output tokens are about as many (the demo's scaling) and the model is compute-bound,
   so a prompt token costs about what an output token does: prefill dilutes the ratio more, and the
   wall-clock figures move with the load of this shared machine (1.2x-1.6x in three runs at load
   2-4.7).

b. Automatic prefix caching on the Mooncake synthetic trace (all 3,993 requests, their
   ``hash_ids`` turned into shared 512-token blocks by ``recordings.workloads.prefix_blocks``), simulated
   Llama-3.1-8B on an H100, arrivals x3 slower (``--mooncake-time-scale``; at the trace's own rate
   one H100 is 2x overloaded and TTFT is all queueing): caching off, on with the KV cache the H100
   holds (26,674 blocks), and on with 10x the blocks. Columns: hit rate (vLLM's
   ``prefix_cache_hits / prefix_cache_queries``) against the workload's ideal (infinite cache, in
   arrival order, from the run's provenance), prefill tokens computed and saved against the run
   without caching, TTFT p50/p99 and their change, output tokens/s. The gap to the ideal is the
   cache size: the trace re-uses ~22M tokens of distinct prefixes over 17 minutes while one H100
   holds 0.43M tokens of KV, most of them held by running requests' prompts (15k tokens on average).

c. Scheduler cost per step at 256 running with prefix caching on: ``bench/bench_scale.py
   --engine-only``'s engine run (its ``run_engine`` and ``engine_rows``; 32,768 KV blocks instead of
   its 16,384, which hold 256 of its requests only when they share prefixes), caching off, on with
   distinct prompts and on with 8 shared prompt prefixes of 512 tokens; this thread's CPU time per
   step over the steps with 256 running (target <= 1 ms).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import numpy as np  # noqa: E402

from app.cli import main as batchscope  # noqa: E402
from engine.run_info import RunInfo  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.metrics.run_metrics import RunSummary, summarize  # noqa: E402
from recordings.metrics.run_metrics import BatchingSummary, summarize_batching  # noqa: E402
from scale_rows import load1, wait_for_load  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
AZURE = TRACES / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = TRACES / "mooncake-fast25" / "synthetic_trace.jsonl"
SIM = ("--executor", "sim", "--sim-model", "llama-3.1-8b", "--sim-device", "h100")
SIM_ENGINE = ("--max-num-seqs", "32", "--max-num-batched-tokens", "8192", "--max-model-len", "8192")
# The demo's scaling and engine (app/cli.py's demo defaults), on the wall clock
CPU_DEMO = ("--prompt-scale", str(1 / 12), "--min-prompt-tokens", "8", "--max-prompt-tokens", "96",
            "--output-scale", "0.25", "--min-output-tokens", "8", "--max-output-tokens", "64",
            "--num-gpu-blocks", "112", "--max-num-seqs", "16", "--max-num-batched-tokens", "256")
MOONCAKE_ENGINE = ("--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--max-model-len", "131072",
                   "--max-prompt-tokens", "130000")   # 10 of 3,993 prompts are longer than Llama's 128k


@dataclass
class Measured:
    """One recorded run and the metrics read back from its recording."""

    label: str
    path: Path
    summary: RunSummary
    batching: BatchingSummary
    run_info: RunInfo
    queued_share: float          # steps that ended with a waiting queue / all steps
    loads: tuple[float, float]   # 1-minute load average before and after the run
    wall_s: float                # how long the run took here


def record(out: Path, name: str, argv: list[str]) -> Measured:
    """``batchscope run ARGV --record OUT/NAME.sqlite`` (an older file of that name is replaced),
    then its metrics. Raises ``SystemExit`` with the run's output if it fails."""
    path = out / f"{name}.sqlite"
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)
    buf = io.StringIO()
    before, t0 = load1(), time.perf_counter()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = batchscope(["run", *argv, "--record", str(path)])
    wall = time.perf_counter() - t0
    if rc != 0:
        print(buf.getvalue(), file=sys.stderr)
        raise SystemExit(f"{name}: batchscope run exited {rc}")
    with open_reader(path) as reader:
        (queued,), = reader.execute("SELECT avg(num_waiting > 0) FROM steps")
        return Measured(name, path, summarize(reader), summarize_batching(reader), reader.run_info(),
                        float(queued), (before, load1()), wall)


def md_table(header: tuple[str, ...], rows: list[tuple[str, ...]], num_text_columns: int = 1) -> str:
    """A Markdown table: the first ``num_text_columns`` columns left-aligned, the rest right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) if i >= num_text_columns else c.ljust(w)  # noqa: E731
                                        for i, (c, w) in enumerate(zip(r, widths))) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


# --- a. fcfs vs static ----------------------------------------------------------------------------
POLICY_HEADER = ("executor", "policy", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "slot occupancy",
                 "steps", "steps with a queue")


def policy_rows(label: str, runs: dict[str, Measured]) -> list[tuple[str, ...]]:
    """One row per policy, then fcfs/static."""
    rows = []
    for policy, m in runs.items():
        s, b = m.summary, m.batching
        rows.append((label, policy, f(s.output_tokens_per_s, ".1f"), f(s.ttft.p50), f(s.ttft.p99), f(b.tpot.p50, ".4f"),
                     f"{b.slot_occupancy:.1%}", f"{s.num_steps:,}", f"{m.queued_share:.0%}"))
    a, b = runs["fcfs"], runs["static"]
    rows.append((label, "fcfs / static", ratio(a.summary.output_tokens_per_s, b.summary.output_tokens_per_s),
                 ratio(a.summary.ttft.p50, b.summary.ttft.p50), ratio(a.summary.ttft.p99, b.summary.ttft.p99),
                 ratio(a.batching.tpot.p50, b.batching.tpot.p50),
                 ratio(a.batching.slot_occupancy, b.batching.slot_occupancy),
                 ratio(a.summary.num_steps, b.summary.num_steps), ""))
    return rows


def output_lengths(path: Path) -> list[int]:
    """Each request's ``max_tokens`` in arrival order (its output length: EOS is ignored)."""
    with open_reader(path) as reader:
        return [int(m) for (m,) in reader.execute("SELECT max_tokens FROM requests ORDER BY seq")]


def static_slot_bound(outputs: list[int], batch: int) -> float:
    """Share of decode slot-steps a static batch keeps busy when the queue is cut into arrival-order
    batches of ``batch``: sum of outputs / sum over batches of (size x longest output)."""
    chunks = [outputs[i:i + batch] for i in range(0, len(outputs), batch)]
    return sum(outputs) / sum(len(c) * max(c) for c in chunks)


def step_time_split(path: Path) -> tuple[float, float]:
    """(time in steps that ran a prefill chunk, time in decode-only steps) on the run's clock."""
    with open_reader(path) as reader:
        (prefill, decode), = reader.execute(
            "SELECT coalesce(sum(CASE WHEN batch_prefill_json != '[]' THEN token_time - clock END), 0), "
            "coalesce(sum(CASE WHEN batch_prefill_json = '[]' THEN token_time - clock END), 0) FROM steps")
    return float(prefill), float(decode)


def split_note(label: str, runs: dict[str, Measured]) -> str:
    """Where each policy's time went: steps with prefill chunks vs decode-only steps."""
    parts = {p: step_time_split(m.path) for p, m in runs.items()}
    return (f"{label}: time in steps with prefill chunks / decode-only steps: "
            + ", ".join(f"{p} {a:.1f} / {b:.1f} s" for p, (a, b) in parts.items())
            + f" (static spends {parts['static'][1] / parts['fcfs'][1]:.2f}x fcfs's time in decode-only steps)")


def table_a(args) -> None:
    print("\n## a. continuous (fcfs) vs static batching: Azure conv, first 200 requests, arrivals x0.1\n")
    common = ["--trace", str(AZURE), "--time-scale", "0.1"]
    runs = {p: record(args.out, f"azure_sim_{p}", [*common, "--limit", "200", *SIM, *SIM_ENGINE, "--policy", p])
            for p in ("fcfs", "static")}
    rows = policy_rows("sim Llama-3.1-8B / H100 (s)", runs)
    outputs = output_lengths(runs["fcfs"].path)
    notes = [f"sim: 200 requests, real lengths ({sum(outputs):,} output tokens, mean {np.mean(outputs):.0f}, "
             f"std {np.std(outputs):.0f}, max {max(outputs)}); 32 slots, 8,192 tokens/step; static batches of 32 "
             f"in arrival order keep {static_slot_bound(outputs, 32):.0%} of their decode slot-steps busy",
             split_note("sim", runs)]
    if not args.skip_cpu:
        import torch

        torch.set_num_threads(args.cpu_threads)
        cpu = {}
        for p in ("fcfs", "static"):
            load = wait_for_load(args.max_load, f"the CPU {p} run")
            cpu[p] = record(args.out, f"azure_cpu_{p}", [*common, "--limit", str(args.cpu_requests), *CPU_DEMO,
                                                          "--policy", p])
            print(f"  (CPU {p}: {cpu[p].wall_s:.0f} s here, load {load:.2f} -> {cpu[p].loads[1]:.2f})",
                  file=sys.stderr, flush=True)
        rows += policy_rows("SmolLM2-135M / this CPU (s)", cpu)
        out_cpu = output_lengths(cpu["fcfs"].path)
        notes.append(f"CPU: first {args.cpu_requests} requests, the demo's scaling: prompts x1/12 clipped to 8-96, "
                     f"outputs x1/4 clipped to 8-64 ({sum(out_cpu):,} output tokens, mean {np.mean(out_cpu):.0f}); "
                     f"16 slots, 256 tokens/step, 112 blocks; {args.cpu_threads} torch thread(s); wall clock, "
                     f"load average "
                     + ", ".join(f"{p} {m.loads[0]:.1f}->{m.loads[1]:.1f}" for p, m in cpu.items())
                     + f"; static batches of 16 keep {static_slot_bound(out_cpu, 16):.0%} of decode slot-steps busy")
        notes.append(split_note("CPU", cpu))
    print(md_table(POLICY_HEADER, rows, num_text_columns=2))
    print()
    for n in notes:
        print(f"- {n}")


# --- b. prefix caching ----------------------------------------------------------------------------
CACHE_HEADER = ("prefix caching", "KV blocks", "hit rate", "ideal", "prefill computed", "prefill saved",
                "TTFT p50 (s)", "TTFT p99 (s)", "TTFT p50 / p99 vs off", "output tok/s")


def table_b(args) -> None:
    print(f"\n## b. prefix caching: Mooncake synthetic trace, simulated Llama-3.1-8B / H100, "
          f"arrivals x{args.mooncake_time_scale:g}\n")
    common = ["--trace", str(MOONCAKE), "--time-scale", str(args.mooncake_time_scale), *SIM, *MOONCAKE_ENGINE]
    if args.mooncake_limit:
        common += ["--limit", str(args.mooncake_limit)]
    off = record(args.out, "mooncake_off", common)
    blocks = off.run_info.config["num_gpu_blocks"]
    runs = [("off", off), ("on", record(args.out, "mooncake_on", [*common, "--enable-prefix-caching"])),
            ("on, 10x blocks", record(args.out, "mooncake_on_10x",
                                      [*common, "--enable-prefix-caching", "--num-gpu-blocks", str(10 * blocks)]))]
    sharing = off.run_info.trace["prefix_sharing"]
    rows = []
    for label, m in runs:
        s, b = m.summary, m.batching
        rows.append((label, f"{m.run_info.config['num_gpu_blocks']:,}",
                     "-" if s.prefix_cache_hit_rate is None else f"{s.prefix_cache_hit_rate:.1%}",
                     f"{sharing['workload_ideal_hit_rate']:.1%}", f"{b.num_prefill_tokens:,}",
                     f"{off.batching.num_prefill_tokens - b.num_prefill_tokens:,}"
                     f" ({1 - b.num_prefill_tokens / off.batching.num_prefill_tokens:.0%})",
                     f(s.ttft.p50, ".2f"), f(s.ttft.p99, ".1f"),
                     f"{ratio(s.ttft.p50, off.summary.ttft.p50)} / {ratio(s.ttft.p99, off.summary.ttft.p99)}",
                     f(s.output_tokens_per_s, ".1f")))
    print(md_table(CACHE_HEADER, rows))
    print()
    s = off.summary
    print(f"- {s.num_requests:,} requests, {s.num_prompt_tokens:,} prompt and {s.num_output_tokens:,} output "
          f"tokens; {MOONCAKE_ENGINE[1]} slots, {int(MOONCAKE_ENGINE[3]):,} tokens/step; ideal hit rate (infinite "
          f"cache, arrival order): {sharing['trace_ideal_hit_rate']:.1%} of the trace's "
          f"{sharing['trace_block_tokens']}-token hash blocks, {sharing['workload_ideal_hit_rate']:.1%} of the "
          f"prompt tokens in {sharing['block_size']}-token KV blocks")
    print(f"- prefill saved: tokens the run without caching computed and this one did not (hits, less the "
          f"recompute of preempted requests); hits: "
          + ", ".join(f"{label} {m.summary.prefix_cache_hits:,}" for label, m in runs[1:]))
    print(f"- simulated {s.wall_duration_s:,.0f} s of serving took " + ", ".join(
        f"{label} {m.wall_s:.0f} s" for label, m in runs) + " here")


# --- c. scheduler cost per step -------------------------------------------------------------------
SCALE_BLOCKS = 32768    # bench_scale's 16,384 hold 256 of its requests only when prefixes are shared
def table_c(args) -> None:
    import bench_scale

    bench_scale.BUSY = 256           # EngineRun.busy() reads the module's threshold
    print("\n## c. engine step at 256 running (bench_scale --engine-only's run), CPU ms per step\n")
    rows = []
    for label, caching, shared in (("off", False, 0), ("on, distinct prompts", True, 0),
                                   ("on, 8 shared 512-token prefixes", True, 512)):
        workload = bench_scale.Workload(num_requests=args.scale_requests, shared_prefix_len=shared)
        config = bench_scale.scale_config(enable_prefix_caching=caching, num_gpu_blocks=SCALE_BLOCKS)
        load = wait_for_load(args.max_load, f"the engine run ({label})")
        run = bench_scale.run_engine(workload, config)
        by_name = {r[0]: r for r in bench_scale.engine_rows(run)}
        step = next(r for name, r in by_name.items() if name.startswith("ENGINE STEP"))
        sched = by_name["schedule()"]
        hits = run.prefix_cache_hits / run.prefix_cache_queries if run.prefix_cache_queries else None
        rows.append((label, f"{int((np.array(run.num_running) >= 256).sum()):,}",
                     "-" if not caching else f"{hits:.1%}", sched[3], sched[4], step[3], step[4], f"{load:.2f}"))
    print(md_table(("prefix caching", "steps at 256 running", "hit rate", "schedule() p50", "schedule() p90",
                    "engine step p50", "engine step p90", "load"), rows))
    print(f"\n- {args.scale_requests:,} requests arriving at once, prompts 16-2,000, outputs 8-400 tokens "
          f"(bench_scale's Workload), 256 slots, {SCALE_BLOCKS:,} blocks of 16, 8,192 tokens/step; engine step = "
          "schedule + update + state, without the (null) forward pass; target <= 1 ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_policies"), help="folder of the recordings")
    ap.add_argument("--skip-cpu", action="store_true", help="no SmolLM2 CPU runs in table a")
    ap.add_argument("--cpu-requests", type=int, default=64, help="Azure requests of the CPU runs (default 64)")
    ap.add_argument("--cpu-threads", type=int, default=1,
                    help="torch threads of the CPU runs (default 1: on a busy 2-core machine two OpenMP threads "
                         "wait on each other, and a 16-request decode step took 7.5 s instead of 0.13 s)")
    ap.add_argument("--mooncake-time-scale", type=float, default=3.0,
                    help="multiply the Mooncake arrival times (default 3: one H100 near its capacity)")
    ap.add_argument("--mooncake-limit", type=int, default=0, help="first N Mooncake requests (default: all)")
    ap.add_argument("--scale-requests", type=int, default=2000, help="requests of table c's engine runs")
    ap.add_argument("--max-load", type=float, default=2.5,
                    help="wait (up to 10 min) for the 1-min load average to be at most this before the CPU "
                         "model runs and table c (0 = do not wait)")
    ap.add_argument("--tables", default="abc", help="which tables to print (default abc)")
    args = ap.parse_args(argv)
    args.max_load = args.max_load or None
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.tables:
        {"a": table_a, "b": table_b, "c": table_c}[name](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
