"""UI frame time at production scale: 16,384 KV blocks, 256 running, 10,000 waiting.

The state comes from the REAL engine (``engine.engine.LLMEngine``, scheduler and block pool) with
the fake runner of ``tests/engine`` (no model), through the in-memory ``StepSource`` of the UI
tests. The main window runs offscreen; a frame is what the window's 30 Hz timer does when a new
step arrived (``MainWindow.refresh()``) plus the repaint it triggers (``processEvents``).

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/bench_ui_frame.py [--frames 60]

Prints wall and CPU time p50 / p95 / max per scenario (live: one new step a frame with the
waiting or the running table shown, or 7 steps a frame as at 200 steps/s; scrub: the previous
step every frame), with a running request selected, and a per-view CPU breakdown. On a shared machine read the CPU times: wall
time there includes waiting for other processes. No assertion: the target (a whole frame <= 16 ms p95) is read off the table.
"""
from __future__ import annotations

import argparse
import os
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


def stats(ms: list[float]) -> str:
    a = np.array(ms)
    return f"p50 {np.percentile(a, 50):6.2f}  p95 {np.percentile(a, 95):6.2f}  max {a.max():6.2f} ms"


class Timer:
    """Wall and CPU time (this process) of what runs inside ``with``, appended in ms."""

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self):
        self._t = (time.perf_counter(), time.process_time())

    def __exit__(self, *exc):
        self.wall.append((time.perf_counter() - self._t[0]) * 1e3)
        self.cpu.append((time.process_time() - self._t[1]) * 1e3)

    def report(self, label: str) -> None:
        print(f"{label:38s} wall {stats(self.wall)}\n{'':38s} cpu  {stats(self.cpu)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=40, help="frames per scenario")
    ap.add_argument("--blocks", type=int, default=16_384)
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--waiting", type=int, default=10_000)
    args = ap.parse_args()
    fast = max(1, args.frames // 3)          # frames of the 7-steps-a-frame scenario
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
    w.close()


if __name__ == "__main__":
    main()
