"""UI frame time at production scale: 16,384 KV blocks, 256 running, 10,000 waiting.

Live (the default): the window on the live data path of ``batchscope demo`` without its threads
(``bench/live_run.py``): the REAL engine (scheduler and block pool; the fake runner of
``tests/engine``, no model) records every step to a ``RecordingWriter`` and hands it to an
``app.live.source.LiveSource``, in steady churn (requests finish and waiting ones are admitted at
nearly every step, the queue topped up to 10,000). A frame is what the window's 30 Hz timer does
when new steps arrived (``MainWindow.refresh()``) plus the repaint it triggers
(``processEvents``); the engine's steps between frames are not timed. After the scenarios
the window scrubs back one step a frame from the newest step: a live run's past states come
from the live source's bounded state cache (``engine.state.cache``, filled ahead of the scrub;
its size and bound are printed).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/bench_ui_frame.py \
        [--frames 1000] [--steps-per-frame 1,7,20] [--blocks 200000] [--layouts physical,request]
        [--no-recording] [--profile OUT.prof] [--sections]
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/bench_ui_frame.py --recording REC.sqlite \
        [--steps 2000] [--back 0] [--jumps 50] [--seed 0] [--start K] [--breakdown] [--profile OUT.prof] [--sections]

The case of issue 18 (a live run at 200,000 blocks, 7 steps a frame, both layouts), against
the integrator's checkout in the same run (``--baseline``: the same arguments run there first,
then here, one after the other on the same machine):

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/bench_ui_frame.py --blocks 200000 \
        --steps-per-frame 7 --layouts physical,request --frames 60 --waiting 2000 --baseline ../main

``--layouts`` runs each live scenario once per block map layout (``physical``, ``request``: by
request; ``ui.views.block_map``), in the same run, so their frame times compare on the same
machine and load. Prints wall and CPU time p50 / p95 / p99 / max per scenario (``--steps-per-frame`` new steps a
frame, e.g. 7 at 200 steps/s and 30 frames/s; then scrubbing back one step a frame) with a
running request selected and the running table shown, and a per-view CPU breakdown. On a shared
machine read the CPU times: wall time there includes waiting for other processes. Every garbage
collection of the process is timed (``gc.callbacks``): per scenario, the count and the longest
pause of each generation, in a frame or between frames (the engine's steps allocate too: in the
app its thread shares the interpreter with the window, so a pause there stalls a frame just the
same), and the frames in which a full (generation 2) collection ran; then the process's RSS and
tracked objects, which must stay flat from scenario to scenario (memory grows with live requests,
not with history). No assertion: the target (a whole frame <= 16 ms p95) is read off the table.

``--recording PATH`` replays a recording instead (``ui.MainWindow(recordings.file.reader.Reader(path), None)``,
1600x1000 offscreen): ``--steps`` consecutive steps one frame each from a start drawn with
``--seed`` or given by ``--start`` (``show_step(k)`` plus the repaint it triggers), then ``--back`` steps back one a
frame from there (scrubbing back), then ``--jumps`` jumps to random steps, each timed the same
way. ``--breakdown`` then plays 200 more steps untimed with every paint event
timed (CPU and events per frame by area of the window and by widget), and times each view's
update at the last step (live: 200 more frames at the ``--steps-per-frame`` nearest 7, painting
timed the same way); ``--profile OUT`` writes a cProfile of the consecutive frames (live: of
the frames at the ``--steps-per-frame`` nearest 7).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import numpy as np  # noqa: E402

from host import host_speed, load  # noqa: E402


def stats(ms: list[float]) -> str:
    a = np.array(ms)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return f"p50 {p50:6.2f}  p95 {p95:6.2f}  p99 {p99:6.2f}  max {a.max():6.2f} ms"


class GcLog:
    """Every garbage collection of the process (``gc.callbacks``): generation, pause (wall ms,
    and CPU ms of the collecting thread: on a shared machine the wall time includes waiting for
    other processes) and whether it ran inside a timed frame (``Timer`` sets ``in_frame``)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float, bool]] = []
        self.full = 0                 # full (generation 2) collections so far: read in frames, O(1)
        self.in_frame = False
        self._t0 = (0.0, 0.0)
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = (time.perf_counter(), time.thread_time())
        else:
            self.full += info["generation"] == 2
            self.pauses.append((info["generation"], (time.perf_counter() - self._t0[0]) * 1e3,
                                (time.thread_time() - self._t0[1]) * 1e3, self.in_frame))

    def report(self, since: int, indent: str) -> None:
        """Collections since ``pauses[since]``: per generation, count, longest and total pause,
        how many fell inside frames."""
        for gen in (0, 1, 2):
            p = [q for q in self.pauses[since:] if q[0] == gen]
            if p:
                wall, cpu = [q[1] for q in p], [q[2] for q in p]
                print(f"{indent}GC gen {gen}: {len(p):5d} collections, max {max(wall):6.2f} ms "
                      f"(CPU {max(cpu):6.2f}), total {sum(wall):7.1f} ms (CPU {sum(cpu):7.1f}); "
                      f"{sum(1 for q in p if q[3])} inside frames")


GC = GcLog()


class Timer:
    """Wall and CPU time (this process) of what runs inside ``with``, appended in ms, and the
    times of the frames in which Python ran a full garbage collection (it scans the whole heap:
    tens of ms, in whichever frame it falls)."""

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.gc_cpu: list[float] = []

    def __enter__(self):
        GC.in_frame = True
        full = GC.full                                 # before the clocks start
        self._t = (time.perf_counter(), time.process_time(), full)

    def __exit__(self, *exc):
        self.wall.append((time.perf_counter() - self._t[0]) * 1e3)
        self.cpu.append((time.process_time() - self._t[1]) * 1e3)
        GC.in_frame = False
        if GC.full != self._t[2]:
            self.gc_cpu.append(self.cpu[-1])

    def report(self, label: str) -> None:
        gcs = (f"; {len(self.gc_cpu)} of {len(self.cpu)} frames ran a full GC "
               f"(max {max(self.gc_cpu):.0f} ms CPU)" if self.gc_cpu else "")
        print(f"{label:38s} wall {stats(self.wall)}\n{'':38s} cpu  {stats(self.cpu)}{gcs}")


def memory() -> str:
    """This process's resident memory and the objects the cyclic GC tracks (frozen ones apart)."""
    rss = next((line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS:")), "?")
    return (f"RSS {int(rss) / 1024:.0f} MiB, {len(gc.get_objects()):,} tracked objects "
            f"(+{gc.get_freeze_count():,} frozen)")


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


class _NoSections:
    """``--sections`` off: frames are not broken down."""

    @contextlib.contextmanager
    def frame(self):
        yield

    def paint(self) -> None:
        from PySide6.QtWidgets import QApplication
        QApplication.processEvents()

    def report(self, totals, indent) -> None:
        pass


def sections(args, w, app):
    """A ``frame_sections.Sections`` on ``w`` with ``--sections``, else a stand-in that only
    processes events."""
    if not args.sections:
        return _NoSections()
    from frame_sections import Sections
    return Sections(w, app, areas(w))


def replay_scenarios(args, w, app, first: int, latest: int, rng, layout: str):
    """The timed replay frames of one block map layout: consecutive steps, scrubbing back,
    random jumps; returns the last consecutive step and its state."""
    consecutive, jumps, sec = Timer(), Timer(), sections(args, w, app)
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    for k in range(first, min(first + args.steps, latest + 1)):
        with consecutive, sec.frame():
            w.show_step(k)
            sec.paint()
    if prof:
        prof.disable()
        prof.dump_stats(args.profile)
    k = w.shown_step
    st = w.state
    print(f"before scrubbing back: {memory()}", flush=True)
    back, back_sec, gcs = Timer(), sections(args, w, app), len(GC.pauses)
    for j in range(k - 1, max(-1, k - 1 - args.back), -1):       # scrub back, a step a frame
        with back, back_sec.frame():
            w.show_step(j)
            back_sec.paint()
    for j in rng.sample(range(latest + 1), min(args.jumps, latest + 1)):
        with jumps:
            w.show_step(j)
            app.processEvents()
    print(f"\nwindow {w.width()}x{w.height()} offscreen; at step {k}: {st.num_total_blocks:,} "
          f"blocks ({100 * st.kv_cache_usage:.0f}% used), {len(st.queue_rows('running'))} running, "
          f"{len(st.queue_rows('waiting')):,} waiting; {os.cpu_count()} CPUs")
    consecutive.report(f"{len(consecutive.cpu):,} consecutive steps, 1 step/frame, {layout}")
    sec.report(consecutive.cpu, " " * 38)
    if back.cpu:
        back.report(f"scrub back {len(back.cpu):,} steps, 1 step/frame")
        GC.report(gcs, " " * 38)
        back_sec.report(back.cpu, " " * 38)
        print(f"{'':38s} after scrubbing back: {memory()}", flush=True)
    if jumps.cpu:
        jumps.report(f"{len(jumps.cpu)} jumps to random steps, {layout}")
    return k, st


def bench_recording(args) -> None:
    """Replay ``args.recording`` in the window: consecutive frames, then random jumps."""
    from PySide6.QtWidgets import QApplication

    from app.commands.window import freeze_startup
    from recordings.file.open_reader import open_reader
    from ui import MainWindow

    print(f"before: {load()}; {host_speed()}", flush=True)
    app = QApplication.instance() or (timing_app() if args.breakdown or args.sections
                                      else QApplication([]))
    t0 = time.perf_counter()
    reader = open_reader(args.recording)
    latest = reader.latest_step()
    rng = random.Random(args.seed)
    first = (rng.randrange(0, max(1, latest + 1 - args.steps)) if args.start is None
             else max(0, min(args.start, latest + 1 - args.steps)))
    w = MainWindow(reader, None)
    w.timer.stop()
    w.show()
    w.show_step(first - 1)
    app.processEvents()
    freeze_startup()                      # as app.commands.window does for a replay
    print(f"{args.recording}: {latest + 1:,} steps, opened and first frame in "
          f"{time.perf_counter() - t0:.2f} s; consecutive steps {first}..{first + args.steps - 1}",
          flush=True)
    for layout in args.layouts or ["auto"]:
        w.block_map.set_layout(layout)
        w.show_step(first - 1)
        app.processEvents()
        k, st = replay_scenarios(args, w, app, first, latest, random.Random(args.seed + 1), layout)
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
    print(f"\nafter: {load()}; {host_speed()}")
    w.close()
    reader.close()


def bench_live(args) -> None:
    """The window on a live run in steady churn (``bench/live_run.py``)."""
    import tempfile

    from PySide6.QtWidgets import QApplication

    from live_run import LiveRun
    from ui import MainWindow

    print(f"before: {load()}; {host_speed()}", flush=True)
    tmp = tempfile.TemporaryDirectory(prefix="bench_ui_frame_")
    t0 = time.perf_counter()
    run = LiveRun(args.blocks, args.running, args.waiting,
                  None if args.no_recording else Path(tmp.name) / "live.sqlite")
    st = run.source.latest_state()
    print(f"live run built in {time.perf_counter() - t0:.1f} s: step {st.step}, "
          f"{len(st.queue_rows('running'))} running, {len(st.queue_rows('waiting')):,} waiting, "
          f"{st.num_used_blocks:,}/{st.num_total_blocks:,} blocks used", flush=True)
    app = QApplication.instance() or (timing_app() if args.breakdown or args.sections
                                      else QApplication([]))
    w = MainWindow(run.source, run.control())
    w.timer.stop()
    w.show()
    w.queues.tabs.setCurrentWidget(w.queues.views["running"])
    app.processEvents()
    print(f"window {w.width()}x{w.height()} offscreen; {os.cpu_count()} CPUs; {memory()}\n")
    profile_at = min(args.steps_per_frame, key=lambda n: abs(n - 7))
    layouts = args.layouts or ["physical"]
    for spf, layout in [(spf, layout) for spf in args.steps_per_frame for layout in layouts]:
        w.block_map.set_layout(layout)
        st = w.state
        w.select_request(st.request_ids[int(st.queue_rows("running")[len(st.queue_rows("running")) // 2])])
        app.processEvents()
        first, gcs = st.step + 1, len(GC.pauses)
        prof = None
        if args.profile and spf == profile_at and layout == layouts[-1]:
            import cProfile
            prof = cProfile.Profile()
        timer, sec = Timer(), sections(args, w, app)
        done0 = run.num_added - len(run.engine.requests)
        for _ in range(args.frames):
            run.advance(spf)                 # the engine's steps: not part of the frame
            if prof:
                prof.enable()
            with timer, sec.frame():
                w.refresh()
                sec.paint()
            if prof:
                prof.disable()
        if prof:
            prof.dump_stats(args.profile)
        st = w.state
        timer.report(f"live, {spf} step{'s' if spf > 1 else ''}/frame, {layout}")
        done = run.num_added - len(run.engine.requests) - done0
        print(f"{'':38s} steps {first}..{st.step}: {done:,} requests finished; at the end "
              f"{len(st.queue_rows('running'))} running, {len(st.queue_rows('waiting')):,} waiting")
        GC.report(gcs, " " * 38)
        sec.report(timer.cpu, " " * 38)
        print(f"{'':38s} {memory()}; {load()}", flush=True)
    if args.breakdown:
        # untimed: 200 more frames at the scenario nearest 7 steps a frame, painting timed
        app.paints = {}
        for _ in range(200):
            run.advance(profile_at)
            w.refresh()
            app.processEvents()
        paints, app.paints = app.paints, None
        print(f"\n{profile_at} steps/frame:", end="")
        paint_breakdown(paints, w, 200)
        print()
    scrub, gcs, sec = Timer(), len(GC.pauses), sections(args, w, app)
    latest = run.source.latest_step()
    for i in range(min(args.frames, latest)):
        with scrub, sec.frame():
            w.show_step(latest - 1 - i)          # back one step per frame
            sec.paint()
    scrub.report("scrub back, 1 step/frame")
    GC.report(gcs, " " * 38)
    sec.report(scrub.cpu, " " * 38)
    cache = getattr(run.source, "states", None)       # engine.state.cache.StateCache (bounded)
    if cache is not None:
        print(f"{'':38s} state cache: {len(cache)} states, {cache.nbytes / 2**20:.0f} MiB "
              f"(bound {cache.max_bytes / 2**20:.0f} MiB); {memory()}")
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
        for _ in range(40):
            with t:
                fn()
        print(f"  {name:14s} {stats(t.cpu)}")
    print(f"\nafter: {load()}; {host_speed()}")
    w.close()
    run.close()
    tmp.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=1000, help="live: frames per scenario")
    ap.add_argument("--steps-per-frame", type=lambda v: [int(x) for x in v.split(",")],
                    default=[1, 7, 20], help="live: the scenarios' new engine steps per frame, "
                    "comma-separated (7: 200 steps/s at 30 frames/s)")
    ap.add_argument("--no-recording", action="store_true",
                    help="live: no recorder (the live source keeps only its ring of records)")
    ap.add_argument("--blocks", type=int, default=16_384, help="live: KV cache blocks")
    ap.add_argument("--layouts", type=lambda v: v.split(","), default=None,
                    help="block map layouts, comma-separated (physical, request, auto): each "
                    "scenario once per layout (default: live physical, replay the window's auto)")
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--waiting", type=int, default=10_000)
    ap.add_argument("--recording", help="replay this recording instead of a live run")
    ap.add_argument("--steps", type=int, default=2000, help="--recording: consecutive steps")
    ap.add_argument("--jumps", type=int, default=50, help="--recording: random jumps")
    ap.add_argument("--back", type=int, default=0,
                    help="--recording: then scrub back this many steps, one a frame")
    ap.add_argument("--seed", type=int, default=0, help="--recording: start and jumps")
    ap.add_argument("--start", type=int, help="--recording: the first consecutive step "
                    "(default: drawn with --seed)")
    ap.add_argument("--breakdown", action="store_true",
                    help="paint (and with --recording per-view) times after the timed frames "
                    "(slows every event a little: quote timed frames from a run without it)")
    ap.add_argument("--profile", help="cProfile the consecutive frames to this file")
    ap.add_argument("--sections", action="store_true",
                    help="per-frame CPU by section (state fetch, back fill, each view's update, "
                    "paint by area), mean over all frames and over the p95 frames "
                    "(bench/frame_sections.py; the paint timing slows events a little)")
    ap.add_argument("--baseline", help="a checkout of the same project (e.g. main's): run "
                    "these arguments there first, then here (before and after, one machine)")
    args = ap.parse_args()
    if args.baseline:
        import subprocess
        argv, rest = sys.argv[1:], []
        while argv:                                  # the arguments but --baseline's
            a = argv.pop(0)
            if a == "--baseline":
                argv.pop(0)
            elif not a.startswith("--baseline="):
                rest.append(a)
        base = Path(args.baseline).resolve()
        print(f"=== baseline: {base}", flush=True)
        done = subprocess.run([sys.executable, str(base / "bench" / "bench_ui_frame.py"), *rest],
                              cwd=base)
        if done.returncode:          # e.g. an older bench that fails after the timed frames
            print(f"=== baseline exited with status {done.returncode}", flush=True)
        print(f"\n=== this checkout: {ROOT}", flush=True)
    if args.recording:
        bench_recording(args)
    else:
        bench_live(args)


if __name__ == "__main__":
    main()
