"""``batchscope compare``: run one workload under several configs (or take existing
recordings of one workload), print the headline ratios, per-request deltas and fairness, write
an HTML report and open the compare window.

Exit codes: 0 done; 2 usage error (bad flags or ``--configs``, fewer than two runs); 1 runtime
failure (a run failed, a recording does not read, or the recordings hold different workloads).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import sys
from pathlib import Path

from app.commands.compare.configs import RunConfig, parse_configs, policy_configs, run_args
from app.presets import add_preset_arg, apply_preset
from app.commands.compare.rejections import rejection_lines

HELP = "compare runs of one workload: static vs continuous batching, or any two configs"
DESCRIPTION = """Compare runs of one workload. Run it under several configs (--policies static,fcfs or
--configs), each recorded with `batchscope run`'s machinery, or take two or more existing
recordings of one workload. Prints output tokens/s, requests/s, TTFT p50/p99, TPOT p50/p99 and slot
occupancy with the ratio of each run to the first, who got slower and why (queueing, preemption,
prefill chunking, decode batch), fairness (Jain's index, latency per prompt-length bucket), then
opens the compare window (runs stacked, one transport, synced by time or step). See docs/compare.md."""
EPILOG = """examples:
  batchscope compare --preset demo --limit 100 --policies static,fcfs
                                                        the demo workload, static vs continuous
  batchscope compare --preset sim --trace conv.csv --policies static,fcfs --no-window
                                                        the whole trace on a simulated H100
  batchscope compare --trace conv.csv --limit 300 --executor sim --sim-model llama-3.1-8b \\
      --policies static,fcfs --no-window                simulated H100, no model loaded
  batchscope compare --configs "policy=fcfs;policy=fcfs,enable_prefix_caching=1" --trace mooncake.jsonl
  batchscope compare A.sqlite B.sqlite --report ab.html  two existing recordings

exit codes: 0 done; 2 usage error (bad flag or --configs, fewer than two runs); 1 runtime failure
(a run failed, a recording does not read, or the recordings are of different workloads)."""


def add_compare_parser(sub, engine_args, workload_args, slo_args,
                       preset: str | None = None) -> argparse.ArgumentParser:
    """Register ``compare`` on the subparsers ``sub``; ``engine_args(p, ...)``,
    ``workload_args(p, ...)`` and ``slo_args(p)`` add the flags ``run`` has (app.cli's helpers),
    and ``--preset`` as ``run``'s: ``preset`` (a name of ``app.presets.PRESETS``, read from the
    command line before the parse) becomes the defaults; flags given on the command line win."""
    p = sub.add_parser("compare", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recordings", nargs="*", metavar="REC.sqlite",
                   help="two or more recordings of one workload to compare (instead of running)")
    g = p.add_argument_group("what to run (without recordings)")
    g.add_argument("--trace", help="Azure CSV or Mooncake JSONL trace (default: the built-in demo slice)")
    g.add_argument("--limit", type=int, help="first N requests only")
    g.add_argument("--policies", metavar="P1,P2", help="one run per scheduling policy (default, without --configs: static,fcfs)")
    g.add_argument("--configs", metavar="'K=V,...;K=V,...'",
                   help="one run per ';'-separated config of knob=value overrides, knobs named as their "
                        "flags (policy, max_num_seqs, enable_prefix_caching=1, enable_chunked_prefill=0, "
                        "preemption_mode, sim_device, ...)")
    add_preset_arg(g)
    g.add_argument("--out", metavar="DIR", help="folder for the runs' recordings and logs (default: a new "
                                                "compare-* folder under the runs folder)")
    o = p.add_argument_group("output")
    o.add_argument("--no-window", action="store_true", help="print the comparison only, open no window")
    o.add_argument("--report", metavar="OUT.html", help="also write a self-contained HTML report")
    o.add_argument("--top", type=int, default=10, help="requests listed as most slowed down / sped up "
                                                        "(default: %(default)s)")
    engine_args(p, num_gpu_blocks=None, clock="wall")
    workload_args(p, time_scale=1.0)
    slo_args(p)
    apply_preset(p, preset)
    return p


def _fail(message: str, code: int = 1) -> int:
    print(f"batchscope compare: {message}", file=sys.stderr)
    return code


def default_out_dir() -> Path:
    """A new ``compare-<time>`` folder next to the live recordings (the runs folder)."""
    from app.commands.window import default_recording_path
    return default_recording_path().parent / f"compare-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def plan_runs(args: argparse.Namespace) -> list[RunConfig]:
    """The configs to run, checked (values, and each whole engine config). Raises ``ValueError``
    or ``engine.config.ConfigError`` naming the problem."""
    from app.args import engine_config
    from app.workload_setup import check_args

    if args.policies and args.configs:
        raise ValueError("give --policies or --configs, not both")
    configs = (policy_configs(args.policies) if args.policies else
               parse_configs(args.configs) if args.configs else
               policy_configs("static,fcfs"))
    check_args(args)
    for c in configs:
        engine_config(run_args(args, c, ""))
    return configs


def record_runs(args: argparse.Namespace, configs: list[RunConfig], out: Path,
                host_speed=None) -> list[Path] | int:
    """Run the workload under each config with ``batchscope run``'s machinery (a progress bar
    each), recording to ``out/<n>-<slug>.sqlite`` with the run's printed summary in ``.txt``
    next to it. Runs on the wall clock also time the host before and after each run
    (``host_speed()``, default ``app.host_speed.host_speed_ms``) and say when its speed changed
    (``app.host_speed.speed_change_note``): other work on the machine, not the config. Returns
    the recordings, or an exit code when a run failed (its output shown)."""
    from app.args import engine_config
    from app.commands.run import run_headless
    from app.host_speed import host_speed_ms, speed_change_note

    out.mkdir(parents=True, exist_ok=True)
    paths, checks = [], []
    for i, c in enumerate(configs, 1):
        path = out / f"{i}-{c.slug}.sqlite"
        print(f"[{i}/{len(configs)}] {c.label} -> {path}", file=sys.stderr)
        run = run_args(args, c, str(path))
        timed = engine_config(run).clock == "wall"      # (sim runs: simulated seconds)
        before = (host_speed or host_speed_ms)() if timed else None
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            code = run_headless(run)
        path.with_suffix(".txt").write_text(log.getvalue())
        if code != 0:
            print(log.getvalue(), end="")
            return _fail(f"run {i} ({c.label}) failed (exit {code}); the recordings so far are in {out}",
                         code if code == 130 else 1)
        if timed:
            checks.append((c.label, before, (host_speed or host_speed_ms)()))
            print(f"  host speed check {checks[-1][1]:.1f} ms before, {checks[-1][2]:.1f} ms after "
                  "(lower is faster)", file=sys.stderr)
        paths.append(path)
    note = speed_change_note(checks)
    if note:
        print(f"batchscope compare: note: {note}", file=sys.stderr)
    return paths


def print_comparison(c, top: int) -> None:
    """The headline table with ratios, who got slower and why (run 2 vs run 1, ...), fairness."""
    from tabulate import tabulate

    from recordings.compare.tables import cause_summary, delta_table, fairness_table, headline_table

    sim = " (simulated seconds)" if c.headlines[0].simulated else ""
    print(f"workload {c.digest}: {c.headlines[0].num_requests} requests, clock {c.headlines[0].clock}{sim}")
    headers, rows = headline_table(c)
    print(tabulate(rows, headers=headers, disable_numparse=True))
    for line in rejection_lines(c):
        print(line)
    for k, deltas in enumerate(c.deltas, 1):
        a, b = c.headlines[0].name, c.headlines[k].name
        print(f"\nper request, B = {b} vs A = {a}: {cause_summary(deltas)}")
        for slower in (True, False):
            headers, rows = delta_table(deltas, c.time_unit, top, slower)
            if rows:
                print(f"most {'slowed down' if slower else 'sped up'}:")
                print(tabulate(rows, headers=headers, disable_numparse=True))
    headers, rows = fairness_table(c)
    print("\nfairness:")
    print(tabulate(rows, headers=headers, disable_numparse=True))


def run_compare(args: argparse.Namespace) -> int:
    """``batchscope compare``; returns the exit code (see the module doc)."""
    from engine.config import ConfigError

    if args.top < 0:
        return _fail(f"--top must be >= 0, got {args.top}", 2)
    from app.usage import UsageError, check_output, check_output_folder
    try:
        if args.report:       # a report is replaced; the recordings' folder must be new or empty
            check_output(args.report, overwrite=True)
        if not args.recordings:
            check_output_folder(args.out if args.out else default_out_dir().parent)
    except UsageError as e:
        return _fail(str(e), 2)
    if args.recordings:
        if args.policies or args.configs or args.trace:
            return _fail("give recordings, or --trace/--policies/--configs to run, not both", 2)
        if len(args.recordings) < 2:
            return _fail(f"compare needs two or more recordings, got {len(args.recordings)}", 2)
        missing = [r for r in args.recordings if not Path(r).is_file()]
        if missing:
            return _fail(f"no such recording: {', '.join(missing)}")
        paths, names = [Path(r) for r in args.recordings], None
    else:
        try:
            configs = plan_runs(args)
        except (ValueError, ConfigError) as e:
            return _fail(str(e), 2)
        if args.trace and not Path(args.trace).is_file():
            return _fail(f"trace file not found: {args.trace}")
        out = Path(args.out) if args.out else default_out_dir()
        if out.exists() and any(out.glob("*.sqlite")):
            return _fail(f"{out} already holds recordings; choose a new --out folder", 2)
        paths = record_runs(args, configs, out)
        if isinstance(paths, int):
            return paths
        names = [c.label for c in configs]
        print(f"recordings and each run's own summary (.txt): {out}", file=sys.stderr)
    return show_comparison(paths, names, args)


def show_comparison(paths: list[Path], names: list[str] | None, args: argparse.Namespace) -> int:
    """Compare the recordings, print, write the report, open the window (unless --no-window)."""
    from recordings.errors import RecordingError
    from recordings.compare.comparison import compare_recordings
    from recordings.compare.fingerprint import WorkloadMismatch

    try:
        comparison = compare_recordings(paths, names)
    except WorkloadMismatch as e:
        return _fail(f"{e}. Compare runs of the same trace, limit and scaling flags.")
    except RecordingError as e:
        return _fail(str(e))
    print_comparison(comparison, args.top)
    if args.report:
        from app.commands.compare.report_html import write_report
        write_report(comparison, Path(args.report))
        print(f"\nreport: {args.report}")
    if args.no_window:
        return 0
    if args.report and not interactive_display():
        # the report is what a headless run is for: never wait on a window nobody can see
        print(f"no display (DISPLAY/WAYLAND_DISPLAY unset, or Qt's {os.environ.get('QT_QPA_PLATFORM') or 'no'} "
              "platform): the compare window is not opened; the report holds the comparison", file=sys.stderr)
        return 0
    return open_compare_window(paths, comparison)


def interactive_display() -> bool:
    """Whether a window opened here can be seen: not Qt's offscreen or minimal platform, and on
    Linux a display (DISPLAY or WAYLAND_DISPLAY)."""
    if os.environ.get("QT_QPA_PLATFORM", "").split(":")[0] in ("offscreen", "minimal"):
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def open_compare_window(paths: list[Path], comparison) -> int:
    """Open the compare window on the recordings (returns when it closes; 1 without a display)."""
    from app.commands.window import _has_display

    if not _has_display():
        return _fail("no display found (DISPLAY/WAYLAND_DISPLAY unset): use --no-window, run it on a "
                     "desktop or under Xvfb, or headless with QT_QPA_PLATFORM=offscreen")


    from recordings.file.open_reader import open_reader
    from ui.compare.window import CompareWindow

    from ui.qt_app import qt_application

    app = qt_application(sys.argv[:1])
    names = [h.name for h in comparison.headlines]
    win = CompareWindow([open_reader(p) for p in paths], names, comparison,
                        title=f"BatchScope — compare: {' vs '.join(names)}")
    win.show()
    return app.exec()
