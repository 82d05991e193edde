"""UI frame time at production scale: 16,384 KV blocks, 256 running, 10,000 waiting.

The state comes from the REAL engine (``engine.engine.LLMEngine``, scheduler and block pool) with
the fake runner of ``tests/engine`` (no model), through the in-memory ``StepSource`` of the UI
tests. The main window runs offscreen; a frame is what the window's 30 Hz timer does when a new
step arrived (``MainWindow.refresh()``) plus the repaint it triggers (``processEvents``).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/bench_ui_frame.py [--frames 60]
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/bench_ui_frame.py --recording REC.sqlite \
        [--steps 2000] [--jumps 50] [--seed 0] [--breakdown] [--profile OUT.prof]

Prints wall and CPU time p50 / p95 / max per scenario (live: one new step a frame with the
waiting or the running table shown, or 7 steps a frame as at 200 steps/s; scrub: the previous
step every frame), with a running request selected, and a per-view CPU breakdown; then (unless
``--no-churn``) 7 steps a frame of a second run in steady churn, as a production engine serves:
requests finish and waiting ones are admitted at nearly every step (``churn_source``). On a shared machine read the CPU times: wall
time there includes waiting for other processes. Frames in which Python ran a full garbage
collection are counted apart (with their times): it scans the whole heap, the benchmark's own
engine and its kept history included, and lands in whichever frame allocates at the wrong moment.
No assertion: the target (a whole frame <= 16 ms p95) is read off the table.

``--recording PATH`` replays a recording instead (``ui.MainWindow(recordings.Reader(path), None)``,
1600x1000 offscreen): ``--steps`` consecutive steps one frame each from a start drawn with
``--seed`` (``show_step(k)`` plus the repaint it triggers), then ``--jumps`` jumps to random steps,
each timed the same way. ``--breakdown`` then plays 200 more steps untimed with every paint event
timed (CPU and events per frame by area of the window and by widget), and times each view's
update at the last step; ``--profile OUT`` writes a cProfile of the consecutive frames.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "ui"), str(ROOT / "tests" / "engine")]

import numpy as np  # noqa: E402


def build_source(num_blocks: int, running: int, waiting: int, output: int):
    """``fakes.big_source``: ``running`` requests decoding ``output`` tokens each over ~all
    ``num_blocks`` blocks at the end, and ``waiting`` more behind the slot cap, from the real
    engine."""
    from fakes import big_source
    t0 = time.perf_counter()
    src = big_source(num_blocks, running, waiting, output)
    st = src.state_at(src.latest_step())
    print(f"built in {time.perf_counter() - t0:.1f} s: step {st.step}, {len(st.queue_rows('running'))} "
          f"running, {len(st.queue_rows('waiting')):,} waiting, {st.num_used_blocks:,}/"
          f"{st.num_total_blocks:,} blocks used", flush=True)
    return src


def churn_source(num_blocks: int, running: int, waiting: int, warmup: int = 150):
    """A run in steady churn, as a production engine serves: ``running`` requests with
    staggered outputs (prompts filling about half of ``num_blocks``, outputs 100, 101, ...
    tokens), so from about step 100 one finishes and a waiting one is admitted (prefill) at
    nearly every step, behind ``waiting`` more of mixed lengths; ``warmup`` steps run first."""
    from fakes import FakeSource
    t0 = time.perf_counter()
    prompt = max(16, num_blocks * 16 // (2 * running))
    workload = ([(prompt, 100 + i, 0) for i in range(running)]
                + [(200 + (37 * i) % 800, 50 + (53 * i) % 250, 0) for i in range(waiting)])
    src = FakeSource(0, num_blocks=num_blocks, block_size=16, max_num_seqs=running, budget=8192,
                     workload=workload, max_model_len=4096, tokenizer=None,
                     next_token_fn=lambda ctx, n: 1)
    src.advance(warmup)
    st = src.state_at(src.latest_step())
    print(f"churn run built in {time.perf_counter() - t0:.1f} s: step {st.step}, "
          f"{len(st.queue_rows('running'))} running, {len(st.queue_rows('waiting')):,} waiting, "
          f"{st.num_used_blocks:,}/{st.num_total_blocks:,} blocks used", flush=True)
    return src


def stats(ms: list[float]) -> str:
    a = np.array(ms)
    return f"p50 {np.percentile(a, 50):6.2f}  p95 {np.percentile(a, 95):6.2f}  max {a.max():6.2f} ms"


_FULL_GCS = [0]      # full (generation 2) garbage collections so far
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                    and _FULL_GCS.__setitem__(0, _FULL_GCS[0] + 1))


class Timer:
    """Wall and CPU time (this process) of what runs inside ``with``, appended in ms, and the
    times of the frames in which Python ran a full garbage collection (it scans the whole heap,
    the benchmark's engine and its history included: tens of ms, in whichever frame it falls)."""

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.gc_cpu: list[float] = []

    def __enter__(self):
        self._t = (time.perf_counter(), time.process_time(), _FULL_GCS[0])

    def __exit__(self, *exc):
        self.wall.append((time.perf_counter() - self._t[0]) * 1e3)
        self.cpu.append((time.process_time() - self._t[1]) * 1e3)
        if _FULL_GCS[0] != self._t[2]:
            self.gc_cpu.append(self.cpu[-1])

    def report(self, label: str) -> None:
        gcs = (f"; {len(self.gc_cpu)} of {len(self.cpu)} frames ran a full GC "
               f"({', '.join(f'{c:.0f}' for c in self.gc_cpu)} ms CPU)" if self.gc_cpu else "")
        print(f"{label:38s} wall {stats(self.wall)}\n{'':38s} cpu  {stats(self.cpu)}{gcs}")


def load() -> str:
    """``uptime``'s load averages (other processes share the CPUs)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average %.2f, %.2f, %.2f" % os.getloadavg()


def areas(w) -> dict:
    """The window's areas whose painting is timed separately."""
    return {"block map": w.block_map.plot, "slot timeline": w.timeline.plot,
            "metrics plots": w.metrics.layout_widget, "queue tables": w.queues,
            "inspector": w.inspector, "transport": w.transport, "status bar": w.statusBar()}


def timing_app():
    """A QApplication whose ``notify`` times each Paint event while ``app.paints`` is a dict
    (widget -> [events, CPU s]); a Python ``notify`` slows every event down, so it is used only
    with ``--breakdown`` and the frames it times are not the timed ones."""
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    class App(QApplication):
        paints: dict | None = None

        def notify(self, obj, ev):
            if self.paints is None or ev.type() != QEvent.Paint:
                return super().notify(obj, ev)
            t = time.process_time()
            try:
                return super().notify(obj, ev)
            finally:
                entry = self.paints.setdefault(obj, [0, 0.0])
                entry[0] += 1
                entry[1] += time.process_time() - t

    return App([])


def paint_breakdown(paints: dict, w, frames: int) -> None:
    """Paint events and CPU per frame, by area of the window and by widget class."""
    by_area: dict[str, list] = {}
    by_class: dict[str, list] = {}
    named = areas(w)
    for obj, (n, cpu) in paints.items():
        area, o = "rest of the window", obj
        while o is not None and area == "rest of the window":
            area = next((name for name, a in named.items() if a is o), area)
            o = o.parent()
        for table, key in ((by_area, area), (by_class, f"{type(obj).__name__} ({area})")):
            e = table.setdefault(key, [0, 0.0])
            e[0] += n
            e[1] += cpu
    total = sum(c for _, c in by_area.values())
    print(f"\npainting, CPU per frame over {frames} frames: {1e3 * total / frames:.2f} ms")
    for name, (n, cpu) in sorted(by_area.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:20s} {1e3 * cpu / frames:6.2f} ms  ({n / frames:.1f} paint events)")
    print("  by widget (top 8):")
    for name, (n, cpu) in sorted(by_class.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"    {name:44s} {1e3 * cpu / frames:6.2f} ms  ({n / frames:.1f} paint events)")


def bench_recording(args) -> None:
    """Replay ``args.recording`` in the window: consecutive frames, then random jumps."""
    from PySide6.QtWidgets import QApplication

    from recordings import Reader
    from ui import MainWindow

    print(f"before: {load()}", flush=True)
    app = QApplication.instance() or (timing_app() if args.breakdown else QApplication([]))
    t0 = time.perf_counter()
    reader = Reader(args.recording)
    latest = reader.latest_step()
    rng = random.Random(args.seed)
    first = rng.randrange(0, max(1, latest + 1 - args.steps))
    w = MainWindow(reader, None)
    w.timer.stop()
    w.show()
    w.show_step(first - 1)
    app.processEvents()
    print(f"{args.recording}: {latest + 1:,} steps, opened and first frame in "
          f"{time.perf_counter() - t0:.2f} s; consecutive steps {first}..{first + args.steps - 1}",
          flush=True)
    consecutive, jumps = Timer(), Timer()
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    for k in range(first, min(first + args.steps, latest + 1)):
        with consecutive:
            w.show_step(k)
            app.processEvents()
    if prof:
        prof.disable()
        prof.dump_stats(args.profile)
    k = w.shown_step
    st = w.state
    for j in rng.sample(range(latest + 1), min(args.jumps, latest + 1)):
        with jumps:
            w.show_step(j)
            app.processEvents()
    print(f"\nwindow {w.width()}x{w.height()} offscreen; at step {k}: {st.num_total_blocks:,} "
          f"blocks ({100 * st.kv_cache_usage:.0f}% used), {len(st.queue_rows('running'))} running, "
          f"{len(st.queue_rows('waiting')):,} waiting; {os.cpu_count()} CPUs")
    consecutive.report(f"{len(consecutive.cpu):,} consecutive steps, 1 step/frame")
    jumps.report(f"{len(jumps.cpu)} jumps to random steps")
    if args.breakdown:
        # untimed: 200 more consecutive frames, painting timed per widget
        n = min(200, latest - k)
        app.paints = {}
        for j in range(k + 1, k + 1 + n):
            w.show_step(j)
            app.processEvents()
        paints, app.paints = app.paints, None
        paint_breakdown(paints, w, max(n, 1))
        k = w.shown_step
        latest, state, records = reader.latest_step(), w.state, w.records
        parts = {
            "state_at (cached)": lambda: reader.state_at(k),
            "block map": lambda: w.block_map.set_state(state),
            "queue tables": lambda: w.queues.set_state(state, w.record),
            "slot timeline": lambda: w.timeline.set_records(records, k, state.max_num_seqs, latest),
            "metrics": lambda: w.metrics.set_records(records, k, latest),
            "inspector": lambda: w.inspector.set_state(state, k, w.record),
        }
        print(f"\nat step {k}, CPU per call (same state each call, caches warm):")
        for name, fn in parts.items():
            t = Timer()
            for _ in range(20):
                with t:
                    fn()
            print(f"  {name:24s} {stats(t.cpu)}")
    print(f"\nafter: {load()}")
    w.close()
    reader.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=40, help="frames per scenario")
    ap.add_argument("--fast-frames", type=int, default=None,
                    help="frames of the 7-steps-a-frame scenario (default: --frames). It starts "
                    "at step ~107: its first ~13 frames are the run's first 200 steps, while the "
                    "step axes still grow, the later ones page the timeline every 50 steps. (It "
                    "had a third of --frames before: 13 frames, whose p95 is nearly their max.)")
    ap.add_argument("--no-churn", dest="churn", action="store_false",
                    help="skip the scenario of a run in steady churn (requests finishing and "
                    "admitted every step, 7 steps a frame; its run takes ~10 s to build)")
    ap.add_argument("--blocks", type=int, default=16_384)
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--waiting", type=int, default=10_000)
    ap.add_argument("--recording", help="replay this recording instead of the fake engine")
    ap.add_argument("--steps", type=int, default=2000, help="--recording: consecutive steps")
    ap.add_argument("--jumps", type=int, default=50, help="--recording: random jumps")
    ap.add_argument("--seed", type=int, default=0, help="--recording: start and jumps")
    ap.add_argument("--breakdown", action="store_true",
                    help="--recording: paint and per-view times after the timed frames (slows every "
                    "event a little: quote timed frames from a run without it)")
    ap.add_argument("--profile", help="--recording: cProfile the consecutive frames to this file")
    args = ap.parse_args()
    if args.recording:
        bench_recording(args)
        return
    fast = args.fast_frames or args.frames          # frames of the 7-steps-a-frame scenario
    # enough output tokens that no request finishes while frames are measured
    src = build_source(args.blocks, args.running, args.waiting, 2 * args.frames + 7 * fast + 16)

    from PySide6.QtWidgets import QApplication

    from fakes import FakeControl
    from ui import MainWindow
    app = QApplication.instance() or QApplication([])
    w = MainWindow(src, FakeControl(src))
    w.timer.stop()
    w.show()
    app.processEvents()
    st = src.state_at(src.latest_step())
    selected = st.request_ids[int(st.queue_rows("running")[len(st.queue_rows("running")) // 2])]
    w.select_request(selected)

    live = {("waiting", 1): Timer(), ("running", 1): Timer(), ("running", 7): Timer()}
    for (tab, steps), timer in live.items():
        w.queues.tabs.setCurrentWidget(w.queues.views[tab])
        app.processEvents()
        for _ in range(args.frames if steps == 1 else fast):
            src.advance(steps)               # the engine's steps: not part of the frame
            with timer:
                w.refresh()
                app.processEvents()
    scrub = Timer()
    latest = src.latest_step()
    for i in range(args.frames):
        with scrub:
            w.show_step(latest - 1 - (i % latest))          # back one step per frame
            app.processEvents()
    st = w.state
    print(f"\nwindow 1600x1000 offscreen, {st.num_total_blocks:,} blocks "
          f"({100 * st.kv_cache_usage:.0f}% used), {len(st.queue_rows('running'))} running, "
          f"{len(st.queue_rows('waiting')):,} waiting, {selected} selected, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for (tab, steps), timer in live.items():
        timer.report(f"live, {tab} table, {steps} step{'s' if steps > 1 else ''}/frame")
    scrub.report("scrub back, running table shown")
    state, records, k = w.state, w.records, w.shown_step
    parts = {
        "block map": lambda: w.block_map.set_state(state),
        "queue tables": lambda: w.queues.set_state(state, records[-1]),
        "slot timeline": lambda: w.timeline.set_records(records, k, state.max_num_seqs, latest),
        "metrics": lambda: w.metrics.set_records(records, k, latest),
        "inspector": lambda: w.inspector.set_state(state, k, records[-1]),
        "repaint": lambda: (w.update(), w.repaint()),
    }
    print("\nper view, CPU (same state each call, so caches are warm):")
    for name, fn in parts.items():
        t = Timer()
        for _ in range(args.frames):
            with t:
                fn()
        print(f"  {name:14s} {stats(t.cpu)}")
    if args.churn:
        churn = Timer()
        # requests finish and are admitted every step: the queues, block map and timeline change
        # everywhere, not only in the decoding requests' last blocks and rows
        src = live = None                   # only the churn run in memory (a full GC scans it all)
        gc.collect()
        csrc = churn_source(args.blocks, args.running, args.waiting)
        w.set_source(csrc, FakeControl(csrc))
        st = csrc.state_at(csrc.latest_step())
        w.select_request(st.request_ids[int(st.queue_rows("running")[len(st.queue_rows("running")) // 2])])
        w.queues.tabs.setCurrentWidget(w.queues.views["running"])
        app.processEvents()
        for _ in range(fast):
            csrc.advance(7)
            with churn:
                w.refresh()
                app.processEvents()
        st = w.state
        churn.report("live churn, running table, 7 steps/fr.")
        print(f"{'':38s} (steps {st.step - 7 * fast + 1}..{st.step}: "
              f"{csrc.history[-1].num_finished - csrc.history[-7 * fast - 1].num_finished} requests "
              f"finished; at the end {len(st.queue_rows('running'))} running, "
              f"{len(st.queue_rows('waiting')):,} waiting)")

    w.close()


if __name__ == "__main__":
    main()
