"""The ``batchscope`` command: live demo window, headless trace replay, recording replay."""
from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys

from app.args import (DEMO_NUM_GPU_BLOCKS, add_engine_args, add_slo_args, add_workload_args,  # noqa: F401
                      engine_config)
from app.exit_quiet import quiet_triton_teardown
from app.malloc_arenas import limit_malloc_arenas
from app.privacy import add_recording_privacy_args
from app.presets import add_preset_arg, apply_preset, preset_name
from app.usage import UsageError, check_usage
from engine.config import ConfigError
from engine.sim.hardware import known_devices
from engine.sim.model_shapes import known_models


def build_parser(preset: str | None = None) -> argparse.ArgumentParser:
    """The ``batchscope`` argument parser; ``preset`` (a name of ``app.presets.PRESETS``) becomes
    the defaults of ``run``, ``demo`` and ``compare`` (flags given on the command line still win)."""
    return _parser_and_commands(preset)[0]


def _parser_and_commands(preset: str | None) -> tuple[argparse.ArgumentParser, dict]:
    """The parser and its subcommand parsers by name."""
    p = argparse.ArgumentParser(
        prog="batchscope",
        description="See inside continuous batching. With no command: open the window and serve the "
                    "built-in demo workload (Azure conversation trace) on the embedded SmolLM2-135M. "
                    "On a CPU, `run --preset cpu` sizes a trace replay for this machine (scaled lengths, "
                    "10x faster arrivals, 200 requests) and `--preset sim` replays it at full scale on "
                    "the simulated executor; without a preset `run` replays the trace as it is.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  batchscope                                  live demo window\n"
               "  batchscope demo --policy static             the demo without continuous batching: watch\n"
               "                                              slots idle until the whole batch finished\n"
               "  batchscope demo --paused --time-scale 0.02  start paused, arrivals 5x faster than the demo's\n"
               "  batchscope run --preset cpu --trace conv.csv --record run.sqlite\n"
               "                                              headless replay sized for a CPU\n"
               "  batchscope replay run.sqlite                step through a recording\n"
               "  batchscope summary run.sqlite               print a recording's metrics\n"
               "  batchscope check run.sqlite                 verify a recording end to end\n"
               "  batchscope recover bad.sqlite good.sqlite   save what still reads of a damaged recording\n"
               "  batchscope run --preset cpu --trace conv.csv --record static.sqlite --policy static\n"
               "                                              the static-batching baseline\n"
               "  batchscope run --preset sim --trace conv.csv --record sim.sqlite\n"
               "                                              simulated Llama-3.1-8B on an H100 (no model, "
               "roofline step times)\n"
               "  batchscope fit run.sqlite -o fit.json       fit the simulator's cost parameters to a real run\n"
               "  batchscope compare --executor sim --trace conv.csv --policies static,fcfs\n"
               "                                              the same workload under two policies, side by side\n"
               "  batchscope export run.sqlite --format perfetto -o run.trace.json\n"
               "                                              open a run in ui.perfetto.dev")
    p.add_argument("-v", "--verbose", action="store_true", help="log engine details")
    sub = p.add_subparsers(dest="command")
    add_demo_parser(sub, preset)
    add_run_parser(sub, preset)
    add_replay_parser(sub)
    add_check_parser(sub)
    add_summary_parser(sub)
    add_fit_parser(sub)
    from app.commands.bench.command import add_bench_parser
    from app.commands.compare.command import add_compare_parser
    from app.commands.export import add_export_parser
    add_export_parser(sub)
    add_compare_parser(sub, add_engine_args, add_workload_args, add_slo_args, preset)
    add_bench_parser(sub)
    from app.commands.recover import add_recover_parser
    add_recover_parser(sub)
    return p, sub.choices


def add_demo_parser(sub, preset: str | None = None) -> None:
    """``batchscope demo``: the live window (the default command)."""
    demo = sub.add_parser("demo", help="live window on the built-in demo workload (the default command)")
    demo.add_argument("--trace", help="use this Azure/Mooncake trace or BatchScope JSONL workload instead of the "
                                      "built-in slice")
    demo.add_argument("--limit", type=int, default=200,
                      help="number of trace requests (the built-in slice has 400) (default: %(default)s)")
    demo.add_argument("--record", help="recording path (default: a new file under runs/ of the cache folder: "
                                       "$BATCHSCOPE_CACHE, else $XDG_CACHE_HOME/batchscope, else "
                                       "~/.cache/batchscope)")
    demo.add_argument("--paused", action="store_true", help="start paused (single-step from the first step)")
    add_preset_arg(demo)
    add_recording_privacy_args(demo)
    add_engine_args(demo, num_gpu_blocks=DEMO_NUM_GPU_BLOCKS, clock="wall")
    # Sized for SmolLM2-135M on 2 CPU cores: the 16 slots fill within ~2 s (see recordings/workloads/workload.py).
    add_workload_args(demo, time_scale=0.1, prompt_scale=1 / 12, output_scale=0.25, min_prompt=8, max_prompt=96,
                   min_output=8, max_output=64)
    apply_preset(demo, preset)


def add_run_parser(sub, preset: str | None = None) -> None:
    """``batchscope run``: a headless trace replay."""
    run = sub.add_parser("run", help="headless: replay a trace through the engine and record it (on a CPU: "
                                     "--preset cpu or --preset sim)",
                         description="Replay a trace through the engine without a window, record every step "
                                     "and print the run's metrics. Without --preset the trace is replayed as it "
                                     "is: real lengths, real arrival times; on a CPU that takes as long as the "
                                     "trace and requests over --max-model-len are rejected, so start from "
                                     "--preset cpu (SmolLM2 on this CPU) or --preset sim (simulated GPU).")
    run.add_argument("--trace", help="Azure CSV, Mooncake JSONL or BatchScope JSONL workload (or --lengths)")
    run.add_argument("--limit", type=int, help="first N requests only")
    run.add_argument("--record", required=True, help="output recording (.sqlite)")
    add_preset_arg(run)
    add_recording_privacy_args(run)
    add_engine_args(run, num_gpu_blocks=None, clock="wall")
    add_workload_args(run, time_scale=1.0)
    add_slo_args(run)
    apply_preset(run, preset)


REPLAY_SPEEDS = ("1", "2", "5", "10", "30", "100", "300", "1000", "3000", "every")   # ui.transport.SPEEDS


def add_replay_parser(sub) -> None:
    """``batchscope replay``: a recording in the window."""
    rep = sub.add_parser("replay", help="open a recording in the window, step by step",
                         description="Open a recording (.sqlite from run, demo, compare or bench --record) in the "
                                     "window: play, pause, step, scrub and jump to any step, time or "
                                     "request id. The file is opened read-only and checked in the "
                                     "background; a run cut short is marked incomplete.")
    rep.add_argument("recording", help="the recording file (.sqlite)")
    rep.add_argument("--check-invariants", action="store_true",
                     help="first replay every step and check the invariants (G1 blocks, G3 queues, G4 "
                          "limits, G6 drain), print each violation with its step, then open the window")
    rep.add_argument("--at", metavar="WHERE",
                     help="open at this step (a number), engine time (t=12.5) or request id (its arrival "
                          "step, selected), as the window's jump box takes them (default: the last step)")
    rep.add_argument("--speed", choices=REPLAY_SPEEDS, default="10",
                     help="replay speed in steps/s, or 'every' (each step drawn, one per frame) "
                          "(default: %(default)s)")
    rep.add_argument("--play", action="store_true",
                     help="start playing at once (from --at, or from step 0 when opened at the end)")


def add_check_parser(sub) -> None:
    """``batchscope check``: a recording verified end to end (docs/trust.md)."""
    check_help = ("verify a recording end to end: SQLite integrity check, schema version and tables, every "
                  "step's rows present, the global invariants replayed on each step (G1 block conservation, "
                  "G3 queue exclusivity, G4 limits of the run's config, G6 drain at the end of a finished "
                  "run), each finished request's metrics recomputed and compared with its stored outcome, "
                  "and whether the run was cut short; exit 0 when clean, 1 with one line per problem "
                  "(step and kind); on a damaged file, also which steps still read and the "
                  "`batchscope recover` command that saves them")
    chk = sub.add_parser("check", help=check_help, description=check_help)
    chk.add_argument("recording", help="a recording (.sqlite)")
    chk.add_argument("--max-problems", type=int, default=100,
                     help="stop after this many problems (default: %(default)s)")
    chk.add_argument("--quick", action="store_true",
                     help="sample: the invariants only on every 32nd keyframe interval (128 steps by "
                          "default) and the last, each replayed from its keyframe (a violation that "
                          "begins and ends in a skipped interval is not found); SQLite's quick_check "
                          "instead of integrity_check (pages, not index contents); schema, rows, "
                          "metrics and cut short on the whole file. It prints which steps it checked. "
                          "Default: complete, every step")


def add_summary_parser(sub) -> None:
    """``batchscope summary``: a recording's metrics."""
    summ = sub.add_parser("summary", help="print the metrics of a recording, recomputed from its rows",
                          description="Print a recording's metrics recomputed from its rows: TTFT, "
                                      "ITL, TPOT, E2E and queue time percentiles, batching, "
                                      "preemptions, goodput under --slo-ttft/--slo-tpot, roofline "
                                      "efficiency, rejected requests by reason, and the run's "
                                      "provenance. Whether the run is complete comes first.")
    summ.add_argument("recording", help="the recording file (.sqlite)")
    summ.add_argument("--json", action="store_true", help="print the summary as JSON (as 'export --format json')")
    add_slo_args(summ)


def add_fit_parser(sub) -> None:
    """``batchscope fit``: the simulator's cost parameters fitted to a real recording."""
    fit = sub.add_parser("fit", help="fit the simulated executor's overheads and efficiency factors to a real "
                                     "recording's step times",
                         description="Fit the simulated executor's cost model (a per-step and a per-request "
                                     "overhead, and the fraction of peak FLOP/s and of peak bandwidth reached) "
                                     "to the forward times of a real run's steps, print the fit with its "
                                     "relative errors, and save it for 'run --executor sim --sim-cost FIT.json'. "
                                     "A fit holds for the model and device it was measured on: --check predicts "
                                     "other real recordings of them, to see how well it carries over "
                                     "(docs/sim.md).")
    fit.add_argument("recording", help="a recording of a real (not simulated) run")
    fit.add_argument("-o", "--output", required=True, metavar="FIT.json", help="where to write the fit (JSON)")
    fit.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    fit.add_argument("--sim-model", metavar="NAME",
                     help=f"model shape: {', '.join(known_models())} or a transformers folder / config.json "
                          f"(default: the recording's model)")
    fit.add_argument("--sim-device", metavar="NAME",
                     help=f"device peaks: {', '.join(known_devices())} (default: the recording's device)")
    fit.add_argument("--check", nargs="+", metavar="REC.sqlite",
                     help="also print the fit's relative errors on these recordings (same model and device)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` (default ``sys.argv[1:]``): ``--preset`` values become the defaults, and no
    command means ``demo`` (``batchscope --paused`` = ``batchscope demo --paused``); a ``.sqlite``
    path in the command's place means ``replay`` it. Exits 2 with argparse's message on a usage
    error; an unknown command is named with the closest command (``summarize``: ``summary``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _parser_and_commands(preset_name(argv))
    i = next((k for k, a in enumerate(argv) if a not in ("-v", "--verbose")), len(argv))
    if i < len(argv) and argv[i] not in commands and not argv[i].startswith("-"):
        if argv[i].endswith(".sqlite"):             # `batchscope run.sqlite`: open the replay
            return parser.parse_args([*argv[:i], "replay", *argv[i:]])
        close = difflib.get_close_matches(argv[i], list(commands), n=1, cutoff=0.6)
        parser.error(f"unknown command {argv[i]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                     + f"; commands: {', '.join(commands)}")
    if i == len(argv) or (argv[i] not in commands and argv[i] not in ("-h", "--help")):
        argv = [*argv[:i], "demo", *argv[i:]]
    return parser.parse_args(argv)


MODEL_COMMANDS = ("demo", "run", "bench", "compare")     # the commands that may run a model on torch


def main(argv: list[str] | None = None) -> int:
    """The ``batchscope`` command. Arguments are checked before anything heavy (torch, Qt) is
    imported. Exit codes: 0 done, 2 usage error (bad flag or value, a file named on the command
    line missing), 1 runtime failure, 130 interrupted."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    command = args.command
    try:
        check_usage(args)
        if command == "bench":
            from app.commands.bench.command import check_bench_usage
            check_bench_usage(args)
        if command == "recover":
            from app.commands.recover import check_recover_usage
            check_recover_usage(args)
    except ConfigError as e:
        print(f"batchscope: bad setting: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 2
    if (command in MODEL_COMMANDS and getattr(args, "executor", "model") != "sim"
            and not getattr(args, "recordings", None)):
        from app.threads import ThreadGovernor       # torch's threads: --threads, or cores and load
        args.thread_governor = ThreadGovernor(getattr(args, "threads", None))
        print(f"batchscope: torch {args.thread_governor.describe()}"
              + ("" if args.thread_governor.fixed else "; --threads N to set it"), file=sys.stderr)
    if command == "run":
        from app.commands.run import run_headless
        return run_headless(args)
    if command == "bench":
        from app.commands.bench.run import bench
        return bench(args)
    if command == "compare":
        from app.commands.compare.command import run_compare
        return run_compare(args)
    if command == "fit":
        from app.commands.fit import run_fit
        return run_fit(args)
    if command == "summary":
        from app.commands.run import print_summary
        return print_summary(args.recording, slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot,
                             as_json=args.json)
    if command == "export":
        from app.commands.export import run_export
        return run_export(args)
    if command == "recover":
        from app.commands.recover import run_recover
        return run_recover(args)
    if command == "check":
        from app.commands.check import run_check
        return run_check(args.recording, max_problems=args.max_problems, quick=args.quick)
    if command == "replay" and args.check_invariants:
        from app.commands.check import warn_before_replay
        warn_before_replay(args.recording)          # the window opens on a bad file too
    from app.commands.window import launch
    return launch(args, command)


def console_main() -> int:
    """The ``batchscope`` console script: :func:`main`, quiet when the reader of its output goes
    away (``batchscope summary run.sqlite | head``: exit status 1, no traceback), and without
    Triton's teardown report at exit (:mod:`app.exit_quiet`), with glibc's malloc arenas capped
    before any thread starts (:mod:`app.malloc_arenas`: peak RSS follows what is live)."""
    limit_malloc_arenas()
    quiet_triton_teardown()
    try:
        return main()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # Python's documented recipe
        return 1


if __name__ == "__main__":
    sys.exit(console_main())
