"""Issue 18's export benchmark: ``batchscope export REC --format perfetto`` of a baseline git ref
(``main`` unless told) and of this checkout, in the same run, on the same file (not a timed test).

Each export runs as its own process (``python -m app.cli export``) from a copy of its code: the
baseline's from ``git archive REF`` into a temporary folder, this checkout's as it is. Per
export: wall time, CPU time (user + system of the child, ``os.wait4``), steps/s on both, peak
RSS, and whether the two trace files are byte-identical (the export must not change what it
writes). The recording defaults to bench_scale.py's row-4 file: a 100,000-step steady stream on
256 slots, made (minutes) and cached under /tmp when missing.

    .venv/bin/python bench/bench_export.py
    .venv/bin/python bench/bench_export.py --recording run.sqlite --baseline-ref main~3 --keep

The machine is shared: the load is printed before each export, and steps/s of CPU time is the
number that compares across loads (wall steps/s also counts waiting for a core).
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from host import load  # noqa: E402

DEFAULT_RECORDING = "/tmp/bench_scale_seek_100k.sqlite"


@dataclass(frozen=True)
class ExportRun:
    """One export process: ``wall_s``, ``cpu_s`` (user + system), ``peak_rss_mb``, its exit code."""

    label: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    returncode: int

    def line(self, num_steps: int) -> str:
        return (f"{self.label:<10} wall {self.wall_s:7.1f} s = {num_steps / self.wall_s:7,.0f} steps/s   "
                f"CPU {self.cpu_s:7.1f} s = {num_steps / self.cpu_s:7,.0f} steps/s   "
                f"peak RSS {self.peak_rss_mb:5.0f} MB")


def export(label: str, code: Path, recording: Path, out: Path, python: str) -> ExportRun:
    """Run ``python -m app.cli export recording --format perfetto -o out`` with ``code`` as the
    working folder (its packages are imported)."""
    argv = [python, "-m", "app.cli", "export", str(recording), "--format", "perfetto", "-o", str(out), "--force"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=code, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(code)})
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        print(f"{label}: export failed ({proc.returncode})", file=sys.stderr)
    else:
        print(f"{label}: {stdout.decode().splitlines()[0]}")
    return ExportRun(label, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode)


def recording_file(path: str) -> Path:
    """``path``, made with bench_scale.py's row-4 recipe when it is the default and missing."""
    p = Path(path)
    if not p.exists() and path == DEFAULT_RECORDING:
        from bench_scale import scale_config
        from scale_rows import make_seek_file
        print(make_seek_file(p, 100_000, scale_config(), seed=0)[1])
    if not p.exists():
        raise SystemExit(f"bench_export: no recording at {p}")
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recording", default=DEFAULT_RECORDING, help="the recording to export (default: %(default)s)")
    ap.add_argument("--baseline-ref", default="main", help="git ref of the baseline code (default: %(default)s)")
    ap.add_argument("--out", default=None, help="folder for the two traces (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the traces and the baseline's code")
    ap.add_argument("--skip-baseline", action="store_true", help="export with this checkout only")
    args = ap.parse_args(argv)

    recording = recording_file(args.recording)
    from recordings.file.open_reader import open_reader
    with open_reader(recording) as reader:
        num_steps = reader.latest_step() + 1
        slots = reader.run_info().config.get("max_num_seqs")
    print(f"recording {recording}: {num_steps:,} steps, {slots} slots, {recording.stat().st_size / 1e6:,.0f} MB")
    work = Path(args.out or tempfile.mkdtemp(prefix="bench_export_"))
    work.mkdir(parents=True, exist_ok=True)
    runs: list[ExportRun] = []
    try:
        print(load())
        runs.append(export("this", ROOT, recording, work / "this.json", sys.executable))
        if not args.skip_baseline:
            base = work / "baseline_code"
            base.mkdir(exist_ok=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
            print(load())
            runs.append(export(args.baseline_ref, base, recording, work / "baseline.json", sys.executable))
        print()
        for run in runs:
            print(run.line(num_steps))
        if len(runs) == 2 and not any(r.returncode for r in runs):
            same = filecmp.cmp(work / "this.json", work / "baseline.json", shallow=False)
            print(f"CPU speed-up {runs[1].cpu_s / runs[0].cpu_s:.1f}x, wall {runs[1].wall_s / runs[0].wall_s:.1f}x; "
                  f"traces {'byte-identical' if same else 'DIFFER'}")
            if not same:
                return 1
        print(load())
    finally:
        if not args.keep and not args.out:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r.returncode for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
