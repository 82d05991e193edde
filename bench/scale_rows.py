"""Measurements behind the rows of ``bench_scale.py`` other than the engine step: recording size
(page-accounted per step), recorder throughput, cold seeks, UI frames, memory. No assertion.

Times are wall (``perf_counter``) and CPU of the thread or process that does the work, since the
machine is shared: wall time there includes waiting for a core.
"""
from __future__ import annotations

import gc
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PER_STEP_TABLES = ("steps", "events", "block_events", "transitions")


def pct(values, q: float) -> float:
    a = np.asarray(values, dtype=np.float64)
    return float(np.percentile(a, q)) if len(a) else float("nan")


def load1() -> float:
    return os.getloadavg()[0]


def wait_for_load(max_load: float | None, what: str, timeout_s: float = 600.0) -> float:
    """Sleep until the 1-minute load average is at most ``max_load`` (or ``timeout_s`` passed);
    prints and returns the load the measurement starts at."""
    if max_load is not None:
        t0 = time.monotonic()
        while load1() > max_load and time.monotonic() - t0 < timeout_s:
            print(f"  (load {load1():.2f} > {max_load}: waiting before {what})", file=sys.stderr, flush=True)
            time.sleep(15)
    return load1()


def rss_mb(pid: int | str = "self") -> float:
    """Resident set size now (MB) of ``pid``; nan if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mb() -> float:
    """This process's peak RSS so far (MB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def count_live(cls) -> int:
    """Instances of ``cls`` the garbage collector knows (O(heap): sample, do not loop on it)."""
    return sum(1 for o in gc.get_objects() if type(o) is cls)


# --- recording size ----------------------------------------------------------------------------
def _varint_len(n: int) -> int:
    return 1 if n < 0x80 else 2 if n < 0x4000 else 3 if n < 0x200000 else 4


def _value_len(v) -> tuple[int, int]:
    """(body bytes, serial type) of one value in an SQLite record."""
    if v is None:
        return 0, 0
    if isinstance(v, float):
        return 8, 7
    if isinstance(v, int):
        if v in (0, 1):
            return 0, 8
        a = v if v >= 0 else -v - 1
        for n, t in ((1, 1), (2, 2), (3, 3), (4, 4), (6, 5)):
            if a < 1 << (8 * n - 1):
                return n, t
        return 8, 6
    n = len(v.encode()) if isinstance(v, str) else len(v)
    return n, 2 * n + 13


def record_bytes(row) -> int:
    """Bytes of one row as SQLite stores it in a b-tree cell (record header + body + ~4 bytes of
    cell header and pointer); used only to share a table's pages among its rows."""
    body = header = 0
    for v in row:
        n, t = _value_len(v)
        body += n
        header += _varint_len(t)
    return body + header + 1 + 4


@dataclass
class SizeReport:
    path: str
    file_bytes: int
    num_steps: int
    table_bytes: dict[str, int]            # pages of each table with its indexes
    busy_steps: int = 0                    # steps with >= busy running
    busy_bytes: float = 0.0                # their per-step tables (page-accounted) + keyframes
    busy_keyframe_bytes: float = 0.0
    decode_steps: int = 0                  # busy steps without a prefill entry
    decode_bytes: float = 0.0              # their rows (no keyframe) ...
    decode_table_bytes: dict[str, float] = field(default_factory=dict)
    num_keyframes: int = 0

    @property
    def kb_per_step(self) -> float:
        return self.file_bytes / 1e3 / max(self.num_steps, 1)

    @property
    def keyframe_share(self) -> float:
        return self.table_bytes.get("keyframes", 0) / max(self.file_bytes, 1)

    @property
    def busy_kb(self) -> float:
        return self.busy_bytes / 1e3 / max(self.busy_steps, 1)

    @property
    def decode_kb(self) -> float:
        """A decode step's rows plus the keyframe bytes per busy step (amortised)."""
        return (self.decode_bytes / max(self.decode_steps, 1)
                + self.busy_keyframe_bytes / max(self.busy_steps, 1)) / 1e3

    def lines(self) -> list[str]:
        mb = {k: f"{v / 1e6:.1f}" for k, v in sorted(self.table_bytes.items(), key=lambda kv: -kv[1])}
        out = [f"recording {self.path}: {self.file_bytes / 1e6:.1f} MB, {self.num_steps:,} steps, "
               f"{self.kb_per_step:.2f} kB/step over the whole file; {self.num_keyframes} keyframes = "
               f"{100 * self.keyframe_share:.1f}% of the file",
               "  MB per table (with its indexes, SQLite pages): "
               + ", ".join(f"{k} {v}" for k, v in mb.items())]
        if self.busy_steps:
            per = ", ".join(f"{k} {v / 1e3 / max(self.decode_steps, 1):.2f}"
                            for k, v in self.decode_table_bytes.items())
            out += [f"  {self.busy_steps:,} steps at >= busy running: {self.busy_kb:.2f} kB/step "
                    f"(keyframes {100 * self.busy_keyframe_bytes / max(self.busy_bytes, 1):.1f}% of it)",
                    f"  {self.decode_steps:,} of them decode-only: {self.decode_kb:.2f} kB/step = rows "
                    f"({per} kB) + keyframes {self.busy_keyframe_bytes / 1e3 / max(self.busy_steps, 1):.2f} kB"]
        return out


def recording_size(path: str | os.PathLike, busy: int) -> SizeReport:
    """Where a recording's bytes go. Each table's pages (SQLite's ``dbstat``, indexes counted with
    their table) are shared among its rows in proportion to the rows' record sizes, so the bytes
    of a set of steps include b-tree overhead and partly filled pages. Reads every per-step row:
    use it on files of tens of thousands of steps, not 100k."""
    import sqlite3
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"))
        table_bytes: dict[str, int] = defaultdict(int)
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table_bytes[owner.get(name, name)] += size
        steps = conn.execute("SELECT * FROM steps ORDER BY step").fetchall()
        cols = [d[0] for d in conn.execute("SELECT * FROM steps LIMIT 0").description]
        i_run = cols.index("num_running")
        if "num_prefill_tokens" in cols:      # schema 4
            i_pre, no_prefill = cols.index("num_prefill_tokens"), (0,)
        else:
            i_pre, no_prefill = cols.index("batch_prefill_json"), (None, "[]")
        rep = SizeReport(str(path), Path(path).stat().st_size, len(steps), dict(table_bytes))
        busy_steps = {r[0] for r in steps if r[i_run] >= busy}
        decode = {r[0] for r in steps if r[0] in busy_steps and r[i_pre] in no_prefill}
        rep.busy_steps, rep.decode_steps = len(busy_steps), len(decode)
        rep.decode_table_bytes = {t: 0.0 for t in PER_STEP_TABLES}
        for table in PER_STEP_TABLES:
            rows = steps if table == "steps" else conn.execute(f"SELECT * FROM {table}").fetchall()
            sizes = defaultdict(int)
            total = 0
            for r in rows:
                n = record_bytes(r)
                sizes[r[0]] += n
                total += n
            scale = table_bytes.get(table, 0) / max(total, 1)
            rep.busy_bytes += scale * sum(n for s, n in sizes.items() if s in busy_steps)
            rep.decode_table_bytes[table] = scale * sum(n for s, n in sizes.items() if s in decode)
        rep.decode_bytes = sum(rep.decode_table_bytes.values())
        kf = conn.execute("SELECT step, length(state_npz) + coalesce(length(finished_json), 0) + 16 "
                          "FROM keyframes").fetchall()
        rep.num_keyframes = len(kf)
        scale = table_bytes.get("keyframes", 0) / max(sum(n for _, n in kf), 1)
        rep.busy_keyframe_bytes = scale * sum(n for s, n in kf if s in busy_steps)
        rep.busy_bytes += rep.busy_keyframe_bytes
        return rep
    finally:
        conn.close()


# --- recorder throughput -----------------------------------------------------------------------
@dataclass
class WriterRun:
    num_steps: int
    num_requests: int
    wall_s: float
    writer_cpu_s: float       # process CPU minus the feeding thread's
    feeder_cpu_s: float
    max_queue_depth: int
    queue_bound: int
    file_bytes: int

    def lines(self) -> list[str]:
        return [f"writer replay: {self.num_steps:,} steps + {self.num_requests:,} requests fed as fast as "
                f"write_* accept them, committed and closed in {self.wall_s:.2f} s = "
                f"{self.num_steps / self.wall_s:,.0f} steps/s wall",
                f"  writer thread CPU {self.writer_cpu_s:.2f} s = {self.num_steps / self.writer_cpu_s:,.0f} "
                f"steps/s of CPU ({1e3 * self.writer_cpu_s / self.num_steps:.2f} ms/step); feeding thread "
                f"CPU {self.feeder_cpu_s:.2f} s; max queue depth {self.max_queue_depth:,} "
                f"(bound {self.queue_bound:,}); file {self.file_bytes / 1e6:.1f} MB"]


def writer_throughput(records, prompts: dict, run_info: dict, path: str) -> WriterRun:
    """Feed a finished run's ``StepRecord``s (and, before each step, ``write_request`` for its
    arrivals, in order, with ``prompts[request_id] = (token ids, SamplingParams)``) into a fresh
    ``RecordingWriter`` as fast as it accepts them; time until ``close()`` returns."""
    import resource

    from recordings.file.writer import RecordingWriter
    from recordings.file.writer import MAX_QUEUE_ITEMS

    writer = RecordingWriter(path, run_info, overwrite=True)
    depth = 0
    n_req = 0
    gc.collect()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    c0 = time.thread_time()
    t0 = time.perf_counter()
    for rec in records:
        for a in rec.arrivals:
            prompt, sp = prompts[a.request_id]
            writer.write_request(a.request_id, a.arrival_step, a.arrival_time, prompt, None,
                                 {k: getattr(sp, k) for k in sp.__dataclass_fields__})
            n_req += 1
        writer.write_step(rec)
        d = writer.queue_depth
        if d > depth:
            depth = d
    c1 = time.thread_time()
    writer.close()
    wall = time.perf_counter() - t0
    c2 = time.thread_time()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    process = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    feeder = (c1 - c0) + (c2 - c1)
    return WriterRun(len(records), n_req, wall, process - feeder, feeder, depth, MAX_QUEUE_ITEMS,
                     Path(path).stat().st_size)


# --- cold seeks --------------------------------------------------------------------------------
@dataclass
class SeekRun:
    path: str
    num_steps: int
    file_bytes: int
    wall_ms: list[float]
    cpu_ms: list[float]
    open_ms: list[float]
    replayed: list[int]       # steps applied after the keyframe
    heap_objects: int = 0     # small objects held alive while seeking

    def lines(self) -> list[str]:
        heap = f", {self.heap_objects:,} objects on the heap" if self.heap_objects else ""
        return [f"cold state_at(k) on {self.path} ({self.num_steps:,} steps, {self.file_bytes / 1e6:,.0f} MB), "
                f"{len(self.wall_ms)} random steps, a new Reader each{heap}:",
                f"  wall p50 {pct(self.wall_ms, 50):.1f}  p90 {pct(self.wall_ms, 90):.1f}  max "
                f"{max(self.wall_ms):.1f} ms; CPU p50 {pct(self.cpu_ms, 50):.1f}  p90 {pct(self.cpu_ms, 90):.1f}"
                f"  max {max(self.cpu_ms):.1f} ms; Reader() open p50 {pct(self.open_ms, 50):.1f} ms; steps "
                f"replayed after the keyframe p50 {pct(self.replayed, 50):.0f}, max {max(self.replayed)}"]


def cold_seeks(path: str | os.PathLike, n: int = 50, seed: int = 0, heap_objects: int = 0) -> SeekRun:
    """``state_at(k)`` on a NEW ``Reader`` for each of ``n`` seeded random steps (timed: the
    ``state_at`` call; the open is reported apart). ``heap_objects``: first allocate that many
    small objects the garbage collector tracks and keep them until the seeks are done (the heap
    of a process such as ``bench_scale.py`` or the window, where a full collection costs tens of
    ms and lands inside whichever call allocates enough to start it)."""
    from recordings.file.open_reader import open_reader

    heap = [[i] for i in range(heap_objects)]     # noqa: F841 (kept alive until the return)

    with open_reader(path) as r:
        latest = r.latest_step()
        keyframes = [s for (s,) in r.execute("SELECT step FROM keyframes ORDER BY step")]
    ks = random.Random(seed).sample(range(latest + 1), min(n, latest + 1))
    wall, cpu, opens, replayed = [], [], [], []
    for k in ks:
        t = time.perf_counter()
        rd = open_reader(path)
        t0, c0 = time.perf_counter(), time.thread_time()
        rd.state_at(k)
        c1, t1 = time.thread_time(), time.perf_counter()
        rd.close()
        wall.append((t1 - t0) * 1e3)
        cpu.append((c1 - c0) * 1e3)
        opens.append((t0 - t) * 1e3)
        replayed.append(k - max(s for s in keyframes if s <= k))
    del heap
    return SeekRun(str(path), latest + 1, Path(path).stat().st_size, wall, cpu, opens, replayed,
                   heap_objects)


def make_seek_file(path: str | os.PathLike, num_steps: int, config, seed: int = 0,
                   waiting: int = 64) -> tuple[bool, str]:
    """A ``num_steps``-step recording of a steady stream (the null runner, ``config``): before
    each step the waiting queue is topped up to ``waiting`` requests with prompts 16-2,000 and
    outputs 8-400 tokens (seeded). Reused when ``path`` already holds a closed recording of
    ``num_steps`` steps. Returns (made now, a line about it)."""
    from tests.support.fake_runner import NullRunner

    from engine.engine import LLMEngine
    from engine.request import SamplingParams
    from recordings.file.open_reader import open_reader
    from recordings.errors import RecordingError
    from recordings.file.writer import RecordingWriter

    p = Path(path)
    if p.exists():
        try:
            with open_reader(p) as r:
                if r.latest_step() == num_steps - 1 and r.is_complete() \
                        and (r.run_info().workload or {}).get("seed") == seed:
                    return False, f"reused {p} ({num_steps:,} steps, {p.stat().st_size / 1e6:,.0f} MB)"
        except RecordingError:
            pass
    info = {"config": config.to_dict(), "model": "null-runner", "executor": "null",
            "workload": {"kind": "steady stream", "waiting": waiting, "prompts": [16, 2000],
                         "outputs": [8, 400], "seed": seed}}
    rng = np.random.default_rng(seed)
    rss: list[tuple[int, int, float]] = []      # (step, finished, RSS MB) every 10,000 steps
    t0 = time.perf_counter()
    with RecordingWriter(p, info, overwrite=True) as writer:
        engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=writer)
        params: dict[int, SamplingParams] = {}
        sched = engine.scheduler
        while engine.step_index < num_steps:
            while len(sched.waiting) < waiting:
                n, m = int(rng.integers(16, 2001)), int(rng.integers(8, 401))
                sp = params.setdefault(m, SamplingParams(max_tokens=m, ignore_eos=True))
                engine.add_request(rng.integers(1, 32000, n).tolist(), sp)
            rec = engine.step()
            if rec.step % 10_000 == 9_999:
                rss.append((rec.step + 1, rec.num_finished, rss_mb()))
                print(f"  seek file: step {rec.step + 1:,} / {num_steps:,}, {rec.num_running} running, "
                      f"{rec.num_finished:,} finished, {time.perf_counter() - t0:.0f} s, RSS "
                      f"{rss[-1][2]:,.0f} MB", file=sys.stderr, flush=True)
    grew = (f"; RSS {rss[0][2]:,.0f} MB at step {rss[0][0]:,} ({rss[0][1]:,} finished), {rss[-1][2]:,.0f} MB "
            f"at step {rss[-1][0]:,} ({rss[-1][1]:,} finished)") if rss else ""
    return True, (f"made {p} in {time.perf_counter() - t0:.0f} s ({num_steps:,} steps, "
                  f"{p.stat().st_size / 1e6:,.0f} MB){grew}")


# --- UI frames ---------------------------------------------------------------------------------
def ui_frame_bench(frames: int = 40) -> tuple[list[str], dict[str, tuple[float, float, float, float]]]:
    """Run ``bench/bench_ui_frame.py`` (offscreen); its output lines and, per scenario,
    (wall p50, wall p95, CPU p50, CPU p95) in ms."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_ui_frame.py"), "--frames", str(frames)],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    lines = (out.stdout + out.stderr).rstrip().splitlines()
    scenarios: dict[str, tuple[float, float, float, float]] = {}
    label, wall = None, None
    for line in lines:
        m = re.match(r"^(\S.*?)\s+wall p50\s+([\d.]+)\s+p95\s+([\d.]+)", line)
        if m:
            label, wall = m.group(1).strip(), (float(m.group(2)), float(m.group(3)))
            continue
        m = re.match(r"^\s+cpu\s+p50\s+([\d.]+)\s+p95\s+([\d.]+)", line)
        if m and label is not None:
            scenarios[label] = (*wall, float(m.group(1)), float(m.group(2)))
            label = None
    if out.returncode != 0:
        lines.append(f"(bench_ui_frame.py exited with {out.returncode})")
    return lines, scenarios


@dataclass
class PlaybackRun:
    consecutive_wall: list[float]
    consecutive_cpu: list[float]
    jump_wall: list[float]
    jump_cpu: list[float]
    first_step: int
    open_s: float

    def lines(self) -> list[str]:
        def s(a):
            return f"p50 {pct(a, 50):6.2f}  p95 {pct(a, 95):6.2f}  max {max(a):7.2f} ms"
        return [f"UI playback offscreen (window opened in {self.open_s:.1f} s): "
                f"{len(self.consecutive_wall):,} consecutive steps from step {self.first_step:,}, "
                f"then {len(self.jump_wall)} random jumps; a frame = show_step(k) + processEvents()",
                f"  consecutive  wall {s(self.consecutive_wall)}   CPU {s(self.consecutive_cpu)}",
                f"  jumps        wall {s(self.jump_wall)}   CPU {s(self.jump_cpu)}"]


def ui_playback(path: str | os.PathLike, consecutive: int = 2000, jumps: int = 50,
                seed: int = 0) -> PlaybackRun:
    """Open ``ui.MainWindow(Reader(path), None)`` offscreen and play ``consecutive`` steps one
    frame each, from the stretch with the longest waiting queue, then ``jumps`` random steps.
    A frame is timed as ``bench_ui_frame.py`` times one: the window's update for the step
    (``show_step``) plus the repaint it triggers (``processEvents``)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication


    from recordings.file.open_reader import open_reader
    from ui import MainWindow

    app = QApplication.instance() or QApplication([])
    t0 = time.perf_counter()
    reader = open_reader(path)
    latest = reader.latest_step()
    (peak,) = reader.execute("SELECT step FROM steps ORDER BY num_waiting DESC, step LIMIT 1")[0]
    first = max(0, min(peak - consecutive // 2, latest - consecutive))
    w = MainWindow(reader, None)
    w.timer.stop()
    w.show()
    w.show_step(first - 1)
    app.processEvents()
    open_s = time.perf_counter() - t0

    def frame(k: int, wall: list, cpu: list) -> None:
        t, c = time.perf_counter(), time.process_time()
        w.show_step(k)
        app.processEvents()
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)

    cw, cc, jw, jc = [], [], [], []
    for k in range(first, min(first + consecutive, latest + 1)):
        frame(k, cw, cc)
    for k in random.Random(seed).sample(range(latest + 1), min(jumps, latest + 1)):
        frame(k, jw, jc)
    w.close()
    reader.close()
    return PlaybackRun(cw, cc, jw, jc, first, open_s)


# --- a child process's memory over time --------------------------------------------------------
def recording_progress(path: str | os.PathLike):
    """A probe for :class:`RssSampler`: (last step, its num_waiting) of the recording ``path``
    being written, or None before its first step."""
    import sqlite3

    def probe():
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1)
            try:
                return conn.execute("SELECT step, num_waiting FROM steps ORDER BY step DESC LIMIT 1").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return None
    return probe


class RssSampler:
    """Samples the RSS of ``pid``'s process tree (the process and its descendants) every
    ``interval_s`` in a thread, with what ``probe()`` says then; ``samples`` = [(seconds since
    start, MB, probe())]."""

    def __init__(self, pid: int, interval_s: float = 0.5, probe=lambda: None) -> None:
        self.pid, self.interval_s, self.probe = pid, interval_s, probe
        self.samples: list[tuple[float, float, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="RssSampler")
        self._thread.start()

    def _tree(self) -> list[int]:
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            try:
                for t in os.listdir(f"/proc/{p}/task"):
                    todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                pass
        return out

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self.interval_s):
            mb = sum(v for v in (rss_mb(p) for p in self._tree()) if v == v)
            self.samples.append((time.monotonic() - t0, mb, self.probe()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def lines(self, every_s: float = 5.0) -> list[str]:
        """RSS over time, a line every ``every_s`` and at the peak."""
        if not self.samples:
            return []
        peak = max(self.samples, key=lambda s: s[1])
        out, next_t = [], 0.0
        for s in self.samples:
            if s[0] >= next_t or s is peak:
                what = f"step {s[2][0]:>6,}, {s[2][1]:>6,} waiting" if s[2] else "no step yet"
                out.append(f"  {s[0]:6.1f} s  RSS {s[1]:7,.0f} MB  {what}{'   <- peak sample' if s is peak else ''}")
                next_t = s[0] + every_s
        return out
