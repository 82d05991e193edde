"""``batchscope check`` speed on a 100k-step, 256-slot recording (issue 18, "tools that keep pace").

Each measurement runs in its own child process (its peak RSS is its own) on the same file, in this
one run, so the ratios hold under whatever load the machine has (printed):

- ``reference``: the invariants on the reference path (``StateTimeline`` replay + ``StateChecker``
  on every state, what ``check`` ran before the fast path), on the first ``--reference-steps``
  steps (its rate is flat over a file);
- ``fast``: the invariants on the fast path (``recordings.check.stream_check``), every step;
- ``check``: the whole ``batchscope check`` (integrity, schema, rows, invariants, metrics, cut short);
- ``quick``: ``batchscope check --quick``.

steps/s are per wall second and per CPU second of the child (CPU is what a busy shared machine does
not distort). The file is ``bench/scale_rows.make_seek_file``'s steady stream (made and cached
under /tmp if missing: ~25 min).

    python bench/bench_check.py [--file PATH] [--reference-steps 3000]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def measure(mode: str, path: str, steps: int) -> dict:
    """One measurement, in this process: steps checked, wall and CPU seconds, peak RSS (MB)."""
    from recordings.check.invariants import check_recording
    from recordings.file.open_reader import open_reader

    t, c = time.perf_counter(), time.process_time()
    if mode in ("check", "quick"):
        from app.cli import main
        with open(os.devnull, "w") as null:
            old, sys.stdout = sys.stdout, null
            try:
                main(["check", path] + (["--quick"] if mode == "quick" else []))
            finally:
                sys.stdout = old
        with open_reader(path) as reader:
            steps = reader.latest_step() + 1
    else:
        with open_reader(path) as reader:
            if mode == "reference":
                reader.keep_readable(SimpleNamespace(last_good_step=steps - 1))
            steps = reader.latest_step() + 1
            problems = check_recording(reader, fast=mode == "fast")
            assert not problems, problems[:3]
    return dict(mode=mode, steps=steps, wall=time.perf_counter() - t, cpu=time.process_time() - c,
                rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default="/tmp/bench_check_100k.sqlite")
    ap.add_argument("--steps", type=int, default=100_000, help="steps of the file made when missing")
    ap.add_argument("--reference-steps", type=int, default=3000)
    ap.add_argument("--modes", default="reference,fast,check,quick")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.file, args.reference_steps)))
        return
    if not Path(args.file).exists():
        from bench_scale import scale_config
        from scale_rows import make_seek_file
        print(make_seek_file(args.file, args.steps, scale_config())[1])
    print(f"file {args.file} ({Path(args.file).stat().st_size / 1e6:,.0f} MB); load {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    rows = {}
    for mode in args.modes.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", mode, "--file", args.file,
                              "--reference-steps", str(args.reference_steps)],
                             capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            print(f"{mode}: failed\n{out.stderr[-2000:]}")
            continue
        r = rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{mode:>9}: {r['steps']:,} steps in {r['wall']:,.1f} s wall, {r['cpu']:,.1f} s CPU: "
              f"{r['steps'] / r['wall']:,.0f} steps/s wall, {r['steps'] / r['cpu']:,.0f} per CPU-s; "
              f"peak RSS {r['rss']:,.0f} MB")
    if "reference" in rows and "fast" in rows:
        ref, fast = rows["reference"], rows["fast"]
        print(f"invariants: fast / reference = {(fast['steps'] / fast['cpu']) / (ref['steps'] / ref['cpu']):.1f}x "
              f"per CPU-s, {(fast['steps'] / fast['wall']) / (ref['steps'] / ref['wall']):.1f}x wall")
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
