"""Issue 5's benchmark: the production-scale data path, now vs before vs target (not a timed test).

A runner that does no model work (``NullRunner`` of ``tests/support/fake_runner.py``: one token per
request whose chunk ends its known tokens) drives the real engine: scheduler, block pool, step
records and the state timeline. Workload: ``--requests`` (2,000) arriving at once, prompts
16-2,000 and outputs 8-400 tokens (seeded uniform), ``max_num_seqs`` 256, 16,384 blocks of 16
tokens, ``max_num_batched_tokens`` 8,192, EOS ignored.

    .venv/bin/python bench/bench_scale.py                 # the issue's first table (a few minutes)
    .venv/bin/python bench/bench_scale.py --azure ../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv
    .venv/bin/python bench/bench_scale.py --engine-only [--recorder out.sqlite] [--profile]

The first table, each row with its details printed before it (helpers in ``bench/scale_rows.py``):
1. engine step at >= 200 running, recorder off (engine phases as the engine times them,
   ``StepRecord.*_ns``, and this thread's CPU time per phase): ``schedule`` =
   ``Scheduler.schedule()``; ``update`` = ``update_from_output()`` + tokens + events + finished
   requests; ``record+state`` = building the ``StepRecord`` and applying it to the engine's state
   timeline; ``engine step`` = all of ``step()`` but the forward pass, the issue's "schedule +
   update + state". ``state()`` is the snapshot the UI pulls at its frame rate (not per step).
   ``--profile`` prints cProfile's top functions of those steps.
2. recording size: the same workload with the recorder on; each table's SQLite pages (indexes
   included) shared among its rows by record size, so kB/step of the steps at >= 200 running and
   of the decode-only ones among them, with the keyframes cut there, and the keyframe share.
3. recorder throughput: that run's StepRecords (``write_request`` for each arrival first) fed
   into a fresh ``RecordingWriter`` as fast as it takes them, until ``close()`` returns; the writer
   thread's CPU (process CPU minus the feeding thread's), the deepest queue seen, and how long
   the live run waited for the writer (``recorder_wait_ns``).
4. cold ``Reader.state_at(k)``: a 100,000-step recording of a steady stream (cached under /tmp),
   a new Reader for each of 50 seeded random steps.
5. UI frame: ``bench/bench_ui_frame.py`` run as is (offscreen), its lines quoted.
6. memory: peak RSS of run 1, live ``Request`` objects and state rows every 256 steps.
Before each timed part it waits until the 1-minute load average is <= ``--max-load`` (2.5).

``--azure TRACE`` prints the second table: ``batchscope run --executor sim`` (llama-3.1-8b on h100,
time-scale 0.1, 256 seqs, 16,384 blocks, 8,192 tokens/step, max_model_len 16,384) under
``/usr/bin/time -v`` (``--enable-prefix-caching``: with prefix caching on): wall time, steps, file size, kB/step, cold seeks, peak RSS (and RSS over
time), then UI frames while playing the recording back offscreen (2,000 consecutive steps from the
longest waiting queue, then 50 random jumps).
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import re
import subprocess
import pstats
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import numpy as np  # noqa: E402

from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import Request, SamplingParams  # noqa: E402
from tests.support.fake_runner import NullRunner  # noqa: E402
from scale_rows import (RssSampler, cold_seeks, count_live, make_seek_file, pct, peak_rss_mb,  # noqa: E402
                        recording_progress, recording_size, rss_mb, ui_frame_bench, ui_playback, wait_for_load,
                        writer_throughput)

BUSY = 200      # steps with at least this many running requests are the ones measured


@dataclass
class Workload:
    num_requests: int = 2000
    prompt_range: tuple[int, int] = (16, 2000)
    output_range: tuple[int, int] = (8, 400)
    seed: int = 0
    shared_prefix_len: int = 0      # > 0: each prompt starts with one of 8 shared prefixes this long

    def requests(self) -> list[tuple[list[int], int]]:
        """(prompt token ids, max_tokens) per request, seeded."""
        rng = random.Random(self.seed)
        prefixes = [[rng.randrange(1, 32000) for _ in range(self.shared_prefix_len)] for _ in range(8)]
        out = []
        for _ in range(self.num_requests):
            p = rng.randint(*self.prompt_range)
            head = rng.choice(prefixes)[:p] if self.shared_prefix_len else []
            out.append((head + [rng.randrange(1, 32000) for _ in range(p - len(head))],
                        rng.randint(*self.output_range)))
        return out


def scale_config(**overrides) -> EngineConfig:
    return EngineConfig(**({"block_size": 16, "num_gpu_blocks": 16384, "max_num_seqs": 256,
                            "max_num_batched_tokens": 8192, "max_model_len": 4096} | overrides))


@dataclass
class EngineRun:
    """What one engine run measured: per step (ns) and totals."""

    num_running: list[int] = field(default_factory=list)
    schedule_ns: list[int] = field(default_factory=list)
    update_ns: list[int] = field(default_factory=list)
    forward_ns: list[int] = field(default_factory=list)
    step_ns: list[int] = field(default_factory=list)         # all of engine.step()
    cpu_ns: dict[str, list[int]] = field(default_factory=dict)   # thread CPU time per phase
    recorder_wait_ns: list[int] = field(default_factory=list)
    state_ns: list[int] = field(default_factory=list)        # engine.state() snapshots
    wall_s: float = 0.0
    num_steps: int = 0
    num_finished: int = 0
    num_preemptions: int = 0
    num_output_tokens: int = 0
    prefix_cache_queries: int = 0         # tokens (vLLM's counters), summed over the steps
    prefix_cache_hits: int = 0
    profile: str = ""
    # memory samples every ``memory_every`` steps: (step, finished, live Request objects, scheduler's
    # live requests, rows of engine.state(), RSS MB); their cost is not in wall_s
    memory: list[tuple[int, int, int, int, int, float]] = field(default_factory=list)
    rss_before_mb: float = 0.0
    peak_rss_mb: float = 0.0
    engine_cpu_s: float = 0.0            # this thread's CPU over the whole loop
    process_cpu_s: float = 0.0           # all threads (the recorder's writer thread included)

    def busy(self, values: list[int]) -> np.ndarray:
        """``values`` (ns) of the steps with >= BUSY running requests, in ms."""
        mask = np.array(self.num_running) >= BUSY
        return np.asarray(values, dtype=np.float64)[mask] / 1e6

    def busy_running(self) -> np.ndarray:
        running = np.array(self.num_running)
        return running[running >= BUSY]


class CpuTimer:
    """Wraps ``obj.name`` to add its thread CPU time to ``acc[0]`` (CPU time, unlike wall time,
    does not count waiting for a core on a shared machine)."""

    def __init__(self, obj, name: str) -> None:
        fn = getattr(obj, name)
        self.acc = [0]

        def timed(*a, **kw):
            t = time.thread_time_ns()
            try:
                return fn(*a, **kw)
            finally:
                self.acc[0] += time.thread_time_ns() - t
        setattr(obj, name, timed)

    def take(self) -> int:
        v, self.acc[0] = self.acc[0], 0
        return v


def make_recorder(path: str | None, config: EngineConfig):
    """A ``recordings.file.writer.RecordingWriter`` on ``path``, or None (recorder off)."""
    if path is None:
        return None
    from recordings.file.writer import RecordingWriter

    return RecordingWriter(path, {"config": config.to_dict(), "model": "null-runner", "executor": "null"},
                           overwrite=True)


def memory_sample(engine: LLMEngine, step: int, finished: int) -> tuple[int, int, int, int, int, float]:
    """(step, finished, live Request objects, scheduler's live requests, rows of the engine's
    state, RSS MB): O(heap), so only every few hundred steps."""
    return (step, finished, count_live(Request), len(engine.scheduler.requests), len(engine.state()),
            rss_mb())


def run_engine(workload: Workload, config: EngineConfig, recorder_path: str | None = None, sort: str = "tottime",
               profile: bool = False, state_every: int = 4, memory_every: int = 0,
               records: list | None = None, prompts: dict | None = None) -> EngineRun:
    """Serve ``workload`` to the end; times every step and, every ``state_every`` steps, the
    state snapshot a UI frame would pull. Finished requests are counted and dropped.
    ``memory_every`` > 0 samples live ``Request`` objects and RSS that often (untimed);
    ``records`` / ``prompts`` (if given) collect every StepRecord and request id -> (prompt,
    SamplingParams), to replay into a writer (they keep memory alive: not in a memory run)."""
    import resource

    gc.collect()
    run = EngineRun(rss_before_mb=rss_mb())
    recorder = make_recorder(recorder_path, config)
    engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=recorder)

    def finished(req) -> None:
        run.num_finished += 1
        run.num_output_tokens += req.num_output_tokens

    engine.on_finished = finished
    params = {}
    for prompt, max_tokens in workload.requests():
        sp = params.setdefault(max_tokens, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        rid = engine.add_request(prompt, sp)
        if prompts is not None:
            prompts[rid] = (prompt, sp)
    prompt = None       # the engine holds the prompts now; finished ones must be freeable
    timers = {"schedule()": CpuTimer(engine.scheduler, "schedule"),
              "update_from_output()": CpuTimer(engine.scheduler, "update_from_output"),
              "timeline.apply()": CpuTimer(engine.timeline, "apply"),
              "forward": CpuTimer(engine.runner, "execute")}
    run.cpu_ns = {k: [] for k in [*timers, "step"]}
    prof = cProfile.Profile() if profile else None
    untimed = 0.0
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    e0 = time.thread_time()
    t0 = time.perf_counter()
    while engine.has_unfinished:
        busy = len(engine.scheduler.running) >= BUSY
        if prof is not None and busy:
            prof.enable()
        c0 = time.thread_time_ns()
        s0 = time.perf_counter_ns()
        rec = engine.step()
        s1 = time.perf_counter_ns()
        c1 = time.thread_time_ns()
        if prof is not None and busy:
            prof.disable()
        for k, t in timers.items():
            run.cpu_ns[k].append(t.take())
        run.cpu_ns["step"].append(c1 - c0)
        run.num_running.append(rec.num_running)
        run.schedule_ns.append(rec.schedule_ns)
        run.update_ns.append(rec.update_ns)
        run.forward_ns.append(rec.forward_ns)
        run.step_ns.append(s1 - s0)
        run.recorder_wait_ns.append(rec.recorder_wait_ns)
        run.num_preemptions += rec.num_preemptions
        run.prefix_cache_queries += rec.prefix_cache_queries
        run.prefix_cache_hits += rec.prefix_cache_hits
        if run.num_steps % state_every == 0:
            a = time.perf_counter_ns()
            engine.state()
            run.state_ns.append(time.perf_counter_ns() - a)
        run.num_steps += 1
        if records is not None:
            records.append(rec)
        if memory_every and run.num_steps % memory_every == 0:
            a = time.perf_counter()
            run.memory.append(memory_sample(engine, rec.step, run.num_finished))
            untimed += time.perf_counter() - a
    run.wall_s = time.perf_counter() - t0 - untimed
    if recorder is not None:
        recorder.close()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    run.engine_cpu_s = time.thread_time() - e0
    run.process_cpu_s = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    if memory_every:
        gc.collect()
        run.memory.append(memory_sample(engine, run.num_steps - 1, run.num_finished))
    run.peak_rss_mb = peak_rss_mb()
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(sort).print_stats(40)
        run.profile = buf.getvalue()
    return run


def engine_rows(run: EngineRun) -> list[tuple[str, ...]]:
    """(what, wall p50, wall p90, CPU p50, CPU p90) rows in ms, over the steps with >= BUSY
    running. Wall phases are the engine's own ``*_ns``; CPU times are this thread's."""
    sched, upd, fwd, step = (run.busy(v) for v in (run.schedule_ns, run.update_ns, run.forward_ns, run.step_ns))
    cpu = {k: run.busy(v) for k, v in run.cpu_ns.items()}
    engine_step = step - fwd
    cpu_step = cpu["step"] - cpu["forward"]
    nan = np.array([])
    rows = []
    for name, wall, c in (
            ("schedule()", sched, cpu["schedule()"]),
            ("update_from_output()", nan, cpu["update_from_output()"]),
            ("update phase (update_from_output + tokens + finished)", upd, nan),
            ("timeline.apply() (state)", nan, cpu["timeline.apply()"]),
            ("rest of step (admit, record, bookkeeping)", engine_step - sched - upd,
             cpu_step - cpu["schedule()"] - cpu["update_from_output()"] - cpu["timeline.apply()"]),
            ("ENGINE STEP: schedule + update + state (target <= 1 ms)", engine_step, cpu_step)):
        rows.append((name, f"{pct(wall, 50):.3f}", f"{pct(wall, 90):.3f}", f"{pct(c, 50):.3f}", f"{pct(c, 90):.3f}"))
    st = np.asarray(run.state_ns, np.float64) / 1e6
    rows.append(("engine.state() snapshot (per UI frame, all steps)", f"{pct(st, 50):.3f}",
                 f"{pct(st, 90):.3f}", "", ""))
    return rows


def extra_rows(run: EngineRun, args) -> list[tuple[str, ...]]:
    """Rows of the engine table from a run with the recorder on: the engine's wait for it."""
    if not any(run.recorder_wait_ns):
        return []
    w = run.busy(run.recorder_wait_ns)
    return [("recorder wait (write_step)", f"{pct(w, 50):.3f}", f"{pct(w, 90):.3f}", "", "")]


def print_table(run: EngineRun, rows: list[tuple[str, ...]], workload: Workload,
                config: EngineConfig) -> None:
    busy = int((np.array(run.num_running) >= BUSY).sum())
    print(f"{workload.num_requests:,} requests, prompts {workload.prompt_range[0]}-{workload.prompt_range[1]}, "
          f"outputs {workload.output_range[0]}-{workload.output_range[1]} tokens (seed {workload.seed}); "
          f"max_num_seqs {config.max_num_seqs}, {config.num_gpu_blocks:,} blocks of {config.block_size}, "
          f"max_num_batched_tokens {config.max_num_batched_tokens}")
    print(f"{run.num_steps:,} steps in {run.wall_s:.2f} s = {run.num_steps / run.wall_s:,.0f} steps/s; "
          f"{run.num_output_tokens:,} output tokens, {run.num_preemptions:,} preemptions; "
          f"{busy:,} steps at >= {BUSY} running (median {np.median(run.busy_running()):.0f} running there)")
    if config.enable_prefix_caching:
        rate = run.prefix_cache_hits / run.prefix_cache_queries if run.prefix_cache_queries else 0.0
        print(f"prefix caching on (shared prefixes of {workload.shared_prefix_len} tokens): "
              f"{run.prefix_cache_hits:,} of {run.prefix_cache_queries:,} prompt tokens hit = {rate:.1%}")
    cpu_s = sum(run.cpu_ns["step"]) / 1e9
    print(f"engine thread CPU: {cpu_s:.2f} s = {run.num_steps / cpu_s:,.0f} steps/s of CPU time "
          f"(wall steps/s also counts waiting for a core on a shared machine)")
    width = max(len(r[0]) for r in rows)
    print(f"{'per step, ms':<{width}}  {'wall p50':>8}  {'wall p90':>8}  {'CPU p50':>8}  {'CPU p90':>8}")
    for name, *vals in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{v:>8}" for v in vals))


def md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, rows)])


def section(title: str, max_load: float | None) -> float:
    load = wait_for_load(max_load, title)
    print(f"\n## {title} (load {load:.2f})", flush=True)
    return load


def scale_table(args) -> int:
    """Every row of issue 5's first table (now vs before vs target); details first."""
    workload = Workload(num_requests=args.requests, seed=args.seed)
    config = scale_config()
    rows: list[tuple[str, str, str, str]] = []
    loads = []

    # 1 + 6: the engine step, recorder off; live objects sampled every 256 steps
    loads.append(section("engine step, recorder off (rows 1 and 6)", args.max_load))
    run = run_engine(workload, config, profile=args.profile, memory_every=256)
    print_table(run, engine_rows(run), workload, config)
    if run.profile:
        print(run.profile)
    cpu_step = run.busy(run.cpu_ns["step"]) - run.busy(run.cpu_ns["forward"])
    wall_step = run.busy(run.step_ns) - run.busy(run.forward_ns)
    rows.append(("`schedule()` + `update_from_output()` + state, per step at ~250 running", "6.1 ms",
                 f"{pct(cpu_step, 50):.2f} ms CPU p50 (p90 {pct(cpu_step, 90):.2f}; wall p50 "
                 f"{pct(wall_step, 50):.2f}) at median {np.median(run.busy_running()):.0f} running",
                 "<= 1 ms"))
    mem = run.memory
    print(f"memory every 256 steps (RSS {run.rss_before_mb:.0f} MB before the engine was built, the workload's "
          f"prompts included; peak {run.peak_rss_mb:.0f} MB):")
    for step, fin, objs, live, rows_, rss in mem:
        print(f"  step {step:>5}  finished {fin:>5}  Request objects {objs:>5}  scheduler's live requests "
              f"{live:>5}  state rows {rows_:>5}  RSS {rss:6.0f} MB")
    same = all(m[2] == m[3] == m[4] for m in mem)
    mem_row = (f"peak RSS {run.peak_rss_mb:,.0f} MB; Request objects {'=' if same else '!='} live requests "
               f"{'=' if same else '!='} state rows at every 256th step (max {max(m[2] for m in mem):,}), "
               f"{mem[-1][2]} left after {run.num_finished:,} finished")

    # 2 + 3: recorder on (size, engine's wait); then the same records into a fresh writer
    loads.append(section("engine step, recorder on (rows 2 and 3)", args.max_load))
    records: list = []
    prompts: dict = {}
    rec_run = run_engine(workload, config, args.recorder, records=records, prompts=prompts)
    print_table(rec_run, engine_rows(rec_run) + extra_rows(rec_run, args), workload, config)
    wait_ms = sum(rec_run.recorder_wait_ns) / 1e6
    writer_cpu = rec_run.process_cpu_s - rec_run.engine_cpu_s
    print(f"recorder wait (engine blocked on a full queue), whole run: {wait_ms:.1f} ms over "
          f"{rec_run.num_steps:,} steps; writer thread CPU during the run ~{writer_cpu:.2f} s "
          f"(process CPU {rec_run.process_cpu_s:.2f} s - engine thread {rec_run.engine_cpu_s:.2f} s) = "
          f"{1e3 * writer_cpu / rec_run.num_steps:.2f} ms/step")
    size = recording_size(args.recorder, BUSY)
    print(*size.lines(), sep="\n")
    rows.append(("recording size per step at ~250 running", "292 kB",
                 f"{size.decode_kb:.1f} kB per decode step at >= {BUSY} running ({size.busy_kb:.1f} over all "
                 f"{size.busy_steps:,} such steps; {size.kb_per_step:.1f} over the whole file, prompts "
                 f"included); keyframes {100 * size.keyframe_share:.0f}% of the file", "<= 8 kB"))
    run_info = {"config": config.to_dict(), "model": "null-runner", "executor": "null"}
    loads.append(section("recorder throughput (row 3)", args.max_load))
    wr = writer_throughput(records, prompts, run_info, args.writer_out)
    del records, prompts
    print(*wr.lines(), sep="\n")
    rows.append(("recorder throughput", "~38 steps/s",
                 f"{wr.num_steps / wr.wall_s:,.0f} steps/s wall, {wr.num_steps / wr.writer_cpu_s:,.0f} per "
                 f"writer CPU-second; max queue {wr.max_queue_depth:,} of {wr.queue_bound:,}; the live run "
                 f"waited {wait_ms:.0f} ms in all", ">= 500 steps/s, queue bounded"))

    # 4: cold seeks on a 100k-step file
    loads.append(section(f"cold state_at(k) on a {args.seek_steps:,}-step file (row 4)", None))
    made, line = make_seek_file(args.seek_file, args.seek_steps, config, seed=args.seed)
    print(line)
    loads.append(wait_for_load(args.max_load, "cold seeks"))
    seeks = cold_seeks(args.seek_file, args.seeks, seed=args.seed)
    print(*seeks.lines(), sep="\n")
    rows.append(("cold `Reader.state_at(k)`", "p50 119 ms, max 264 ms (2k steps)",
                 f"p50 {pct(seeks.wall_ms, 50):.0f} ms, max {max(seeks.wall_ms):.0f} ms wall (CPU p50 "
                 f"{pct(seeks.cpu_ms, 50):.0f}, max {max(seeks.cpu_ms):.0f}) on {seeks.num_steps:,} steps, "
                 f"{seeks.file_bytes / 1e6:,.0f} MB", "p50 <= 30 ms, max <= 100 ms on 100k steps"))

    # 5: the UI engineer's frame bench, as it prints
    loads.append(section("UI frame: bench/bench_ui_frame.py (row 5)", args.max_load))
    lines, scen = ui_frame_bench(args.ui_frames)
    for line in lines:
        if "propagateSizeHints" not in line:        # Qt's offscreen plugin, once per window
            print(f"  {line}")
    if scen:
        worst = max(scen, key=lambda k: scen[k][3])
        w_wall = max(scen, key=lambda k: scen[k][1])
        rows.append(("UI frame (16,384 blocks, 256 running, 10k waiting)", "block_map() alone 55 ms",
                     f"p95 {scen[worst][3]:.1f} ms CPU ({worst}), worst wall p95 {scen[w_wall][1]:.1f} ms "
                     f"({w_wall})", "whole frame <= 16 ms p95"))
    else:
        rows.append(("UI frame", "block_map() alone 55 ms", "bench_ui_frame.py printed no times",
                     "whole frame <= 16 ms p95"))
    rows.append(("memory of a live run", "every StepRecord and request kept", mem_row,
                 "flat: grows with live requests"))

    print(f"\n## issue 5, table 1: {args.requests:,} requests (prompts 16-2,000, outputs 8-400), null runner, "
          f"max_num_seqs 256, 16,384 blocks; {os.cpu_count()} CPUs, load {min(loads):.2f}-{max(loads):.2f}")
    print(md_table(("what", "before", "now", "target"), rows))
    return 0


def azure_table(args) -> int:
    """Issue 5's second table: the whole trace through ``batchscope run --executor sim`` under
    ``/usr/bin/time -v``, then cold seeks and an offscreen UI playback of its recording."""
    out = Path(args.azure_out)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    exe = Path(sys.executable).parent / "batchscope"
    cmd = [str(exe) if exe.exists() else "batchscope", "run", "--executor", "sim", "--sim-model",
           "llama-3.1-8b", "--sim-device", "h100", "--trace", args.azure, "--time-scale", "0.1",
           "--max-num-seqs", "256", "--num-gpu-blocks", "16384", "--max-num-batched-tokens", "8192",
           "--max-model-len", "16384", "--record", str(out)]
    if args.enable_prefix_caching:
        cmd.append("--enable-prefix-caching")
    load = section("Azure replay: " + " ".join(["/usr/bin/time", "-v", *cmd]), args.max_load)
    err_path = out.with_suffix(".stderr.txt")
    t0 = time.perf_counter()
    with open(err_path, "w") as err:
        proc = subprocess.Popen(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=err,
                                text=True, cwd=ROOT)
        sampler = RssSampler(proc.pid, probe=recording_progress(out))
        stdout, _ = proc.communicate()
        sampler.stop()
    wall = time.perf_counter() - t0
    print(stdout.rstrip())
    err_text = Path(err_path).read_text()
    if proc.returncode != 0:
        print(err_text[-3000:])
        print(f"batchscope run exited with {proc.returncode}")
        return 1
    tv = dict(re.findall(r"^\s*(.+?): (.+)$", err_text[err_text.rfind("Command being timed"):], re.M))
    peak = int(tv["Maximum resident set size (kbytes)"]) / 1024
    cpu = float(tv["User time (seconds)"]) + float(tv["System time (seconds)"])
    from recordings.file.open_reader import open_reader
    with open_reader(out) as r:
        num_steps = r.latest_step() + 1
        peak_step = r.execute("SELECT step, num_waiting, num_running FROM steps ORDER BY num_waiting DESC LIMIT 1")[0]
    print(f"\n/usr/bin/time: elapsed {tv.get('Elapsed (wall clock) time (h:mm:ss or m:ss)')}, user+sys "
          f"{cpu:.1f} s, peak RSS {peak:,.0f} MB; most requests waiting: {peak_step[1]:,} at step "
          f"{peak_step[0]:,}; RSS of the process tree (after the last step: the CLI's summary, "
          f"recomputed from the file):")
    print(*sampler.lines(), sep="\n")
    done = [t for t, _, pr in sampler.samples if pr and pr[0] == num_steps - 1]
    t_done = done[0] if done else wall
    run_rss = max((mb for t, mb, _ in sampler.samples if t < t_done), default=float("nan"))
    end_rss = max((mb for t, mb, _ in sampler.samples if t >= t_done), default=float("nan"))
    size = recording_size(out, BUSY)
    print(*size.lines(), sep="\n")
    loads = [load, section("cold seeks on the Azure recording", args.max_load)]
    seeks = cold_seeks(out, args.seeks, seed=args.seed)
    print(*seeks.lines(), sep="\n")
    loads.append(section("UI playback of the Azure recording (offscreen)", args.max_load))
    play = ui_playback(out, args.play_steps, args.seeks, seed=args.seed)
    print(*play.lines(), sep="\n")
    frames_wall = play.consecutive_wall + play.jump_wall
    frames_cpu = play.consecutive_cpu + play.jump_cpu
    rows = [
        ("wall time", f"{wall:.0f} s (CPU user+sys {cpu:.0f} s); last step recorded at ~{t_done:.0f} s, "
                      f"then the CLI's summary", "< 10 min"),
        ("steps", f"{num_steps:,}", ""),
        ("steps/s", f"{num_steps / wall:,.0f} over the whole command, {num_steps / t_done:,.0f} until the "
                    f"last step", ""),
        ("file size", f"{size.file_bytes / 1e6:,.1f} MB ({size.num_keyframes:,} keyframes = "
                      f"{100 * size.keyframe_share:.0f}%)", ""),
        ("kB/step", f"{size.kb_per_step:.1f} over the file; {size.decode_kb:.1f} per decode step at >= {BUSY} "
                    f"running", "<= 8 kB at ~250 running"),
        ("cold seek p50 / max (50 random steps, new Reader each)",
         f"{pct(seeks.wall_ms, 50):.0f} / {max(seeks.wall_ms):.0f} ms wall (CPU {pct(seeks.cpu_ms, 50):.0f} / "
         f"{max(seeks.cpu_ms):.0f})", "<= 30 / <= 100 ms"),
        ("peak RSS", f"{peak:,.0f} MB (sampled every 0.5 s: {run_rss:,.0f} MB until the last step, "
                     f"{end_rss:,.0f} MB in the summary)", "< 1.5 GB"),
        ("UI frame p50 / p95 (playback, offscreen)",
         f"{pct(frames_wall, 50):.1f} / {pct(frames_wall, 95):.1f} ms wall, {pct(frames_cpu, 50):.1f} / "
         f"{pct(frames_cpu, 95):.1f} ms CPU ({len(play.consecutive_wall):,} consecutive steps + "
         f"{len(play.jump_wall)} jumps; consecutive p95 {pct(play.consecutive_cpu, 95):.1f}, jumps p95 "
         f"{pct(play.jump_cpu, 95):.1f} ms CPU)", "<= 16 ms p95"),
    ]
    print(f"\n## issue 5, table 2: {Path(args.azure).name} replayed with --executor sim (llama-3.1-8b, h100), "
          f"time-scale 0.1, max_num_seqs 256, 16,384 blocks, 8,192 tokens/step"
          f"{', prefix caching on' if args.enable_prefix_caching else ''}; {os.cpu_count()} CPUs, "
          f"load {min(loads):.2f}-{max(loads):.2f}")
    print(md_table(("what", "now", "target"), rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="number of requests (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine-only", action="store_true",
                    help="only the engine table (the recorder too with --recorder)")
    ap.add_argument("--recorder", metavar="PATH", default=None,
                    help="record to PATH (default: off with --engine-only, else /tmp/bench_scale_rec.sqlite)")
    ap.add_argument("--profile", action="store_true", help="cProfile the steps at >= --busy running")
    ap.add_argument("--busy", type=int, default=BUSY,
                    help=f"measure the steps with at least this many running requests (default {BUSY})")
    ap.add_argument("--writer-out", default="/tmp/bench_scale_writer.sqlite",
                    help="file of the recorder-throughput replay")
    ap.add_argument("--seek-file", default="/tmp/bench_scale_seek_100k.sqlite",
                    help="the long recording for cold seeks (reused when it has --seek-steps steps)")
    ap.add_argument("--seek-steps", type=int, default=100_000)
    ap.add_argument("--seeks", type=int, default=50, help="random cold seeks (and UI jumps)")
    ap.add_argument("--ui-frames", type=int, default=40, help="--frames of bench_ui_frame.py")
    ap.add_argument("--max-load", type=float, default=2.5,
                    help="wait (up to 10 min) until the 1-min load average is at most this before each "
                         "timed part (default 2.5; 0 = do not wait)")
    ap.add_argument("--enable-prefix-caching", action="store_true",
                    help="with --engine-only or --azure: the engine with prefix caching on")
    ap.add_argument("--shared-prefix-len", type=int, default=0,
                    help="with --engine-only: prompts start with one of 8 shared prefixes of this many tokens")
    ap.add_argument("--azure", metavar="TRACE", default=None,
                    help="instead: issue 5's second table, replaying TRACE with --executor sim")
    ap.add_argument("--azure-out", default="/tmp/azure_full.sqlite", help="recording of --azure (replaced)")
    ap.add_argument("--play-steps", type=int, default=2000, help="consecutive steps played back in --azure")
    args = ap.parse_args(argv)
    globals()["BUSY"] = args.busy
    if args.max_load <= 0:
        args.max_load = None
    if args.azure:
        return azure_table(args)
    if not args.engine_only:
        args.recorder = args.recorder or "/tmp/bench_scale_rec.sqlite"
        return scale_table(args)
    workload = Workload(num_requests=args.requests, seed=args.seed, shared_prefix_len=args.shared_prefix_len)
    config = scale_config(enable_prefix_caching=args.enable_prefix_caching)
    run = run_engine(workload, config, args.recorder, profile=args.profile)
    rows = engine_rows(run) + extra_rows(run, args)
    print_table(run, rows, workload, config)
    if args.recorder is not None:
        print(*recording_size(args.recorder, BUSY).lines(), sep="\n")
    if run.profile:
        print(run.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
