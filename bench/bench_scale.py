"""Production-scale data path, engine part (issue 5's benchmark; not a timed test).

A runner that does no model work (``NullRunner`` of ``tests/engine/fake_runner.py``: one token per
request whose chunk ends its known tokens) drives the real engine: scheduler, block pool, step
records and the state timeline. Workload: ``--requests`` (2,000) arriving at once, prompts
16-2,000 and outputs 8-400 tokens (seeded uniform), ``max_num_seqs`` 256, 16,384 blocks of 16
tokens, ``max_num_batched_tokens`` 8,192, EOS ignored. Recorder off unless ``--recorder PATH``.

    .venv/bin/python bench/bench_scale.py [--requests 2000] [--recorder out.sqlite] [--profile]

Per step (engine phases as the engine times them, ``StepRecord.*_ns``), at >= 200 running:
``schedule`` = ``Scheduler.schedule()``; ``update`` = ``update_from_output()`` + tokens + events +
finished requests; ``record+state`` = building the ``StepRecord`` and applying it to the engine's
state timeline (the rest of ``step()`` outside the forward pass); ``engine step`` = all of
``step()`` but the forward pass, the issue's "schedule + update + state" (target <= 1 ms at ~250
running, 6.1 ms before the redesign). ``state()`` is the snapshot the UI pulls at its frame rate
(not per step). ``--profile`` prints cProfile's top functions of the steps at >= 200 running.

Others add rows: :func:`make_recorder` is the recorder hook (``--recorder``), and
:func:`extra_rows` the place for the recorder's and the UI's rows.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "engine")]

import numpy as np  # noqa: E402

from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from fake_runner import NullRunner  # noqa: E402

BUSY = 200      # steps with at least this many running requests are the ones measured


@dataclass
class Workload:
    num_requests: int = 2000
    prompt_range: tuple[int, int] = (16, 2000)
    output_range: tuple[int, int] = (8, 400)
    seed: int = 0

    def requests(self) -> list[tuple[list[int], int]]:
        """(prompt token ids, max_tokens) per request, seeded."""
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.num_requests):
            p = rng.randint(*self.prompt_range)
            out.append(([rng.randrange(1, 32000) for _ in range(p)], rng.randint(*self.output_range)))
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
    profile: str = ""

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
    """The recorder hook: a ``recordings.RecordingWriter`` on ``path``, or None (recorder off)."""
    if path is None:
        return None
    from recordings import RecordingWriter

    return RecordingWriter(path, {"config": config.to_dict(), "model": "null-runner", "executor": "null"},
                           overwrite=True)


def run_engine(workload: Workload, config: EngineConfig, recorder_path: str | None = None, sort: str = "tottime",
               profile: bool = False, state_every: int = 4) -> EngineRun:
    """Serve ``workload`` to the end; times every step and, every ``state_every`` steps, the
    state snapshot a UI frame would pull. Finished requests are counted and dropped."""
    recorder = make_recorder(recorder_path, config)
    engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=recorder)
    run = EngineRun()

    def finished(req) -> None:
        run.num_finished += 1
        run.num_output_tokens += req.num_output_tokens

    engine.on_finished = finished
    params = {}
    for prompt, max_tokens in workload.requests():
        sp = params.setdefault(max_tokens, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        engine.add_request(prompt, sp)
    timers = {"schedule()": CpuTimer(engine.scheduler, "schedule"),
              "update_from_output()": CpuTimer(engine.scheduler, "update_from_output"),
              "timeline.apply()": CpuTimer(engine.timeline, "apply"),
              "forward": CpuTimer(engine.runner, "execute")}
    run.cpu_ns = {k: [] for k in [*timers, "step"]}
    prof = cProfile.Profile() if profile else None
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
        if run.num_steps % state_every == 0:
            a = time.perf_counter_ns()
            engine.state()
            run.state_ns.append(time.perf_counter_ns() - a)
        run.num_steps += 1
    run.wall_s = time.perf_counter() - t0
    if recorder is not None:
        recorder.close()
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(sort).print_stats(40)
        run.profile = buf.getvalue()
    return run


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


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
    """Rows others add (recorder, UI). Today: the engine's wait for the recorder, if one ran."""
    if args.recorder is None:
        return []
    w = run.busy(run.recorder_wait_ns)
    size = Path(args.recorder).stat().st_size
    return [("recorder wait (write_step)", f"{pct(w, 50):.3f}", f"{pct(w, 90):.3f}", "", ""),
            (f"recording: {size / 1e6:.1f} MB, {size / 1e3 / max(run.num_steps, 1):.1f} kB/step", "", "", "", "")]


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
    cpu_s = sum(run.cpu_ns["step"]) / 1e9
    print(f"engine thread CPU: {cpu_s:.2f} s = {run.num_steps / cpu_s:,.0f} steps/s of CPU time "
          f"(wall steps/s also counts waiting for a core on a shared machine)")
    width = max(len(r[0]) for r in rows)
    print(f"{'per step, ms':<{width}}  {'wall p50':>8}  {'wall p90':>8}  {'CPU p50':>8}  {'CPU p90':>8}")
    for name, *vals in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{v:>8}" for v in vals))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="number of requests (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recorder", metavar="PATH", default=None,
                    help="record to PATH (recorder hook; default: recorder off)")
    ap.add_argument("--profile", action="store_true", help="cProfile the steps at >= --busy running")
    ap.add_argument("--busy", type=int, default=BUSY,
                    help=f"measure the steps with at least this many running requests (default {BUSY})")
    args = ap.parse_args(argv)
    globals()["BUSY"] = args.busy
    workload = Workload(num_requests=args.requests, seed=args.seed)
    config = scale_config()
    run = run_engine(workload, config, args.recorder, profile=args.profile)
    print_table(run, engine_rows(run) + extra_rows(run, args), workload, config)
    if run.profile:
        print(run.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
