"""The ``batchscope`` command: live demo window, headless trace replay, recording replay."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

PROCESS_START = time.perf_counter()   # for "first token after N s" (import of torch etc. included)

from app.exit_quiet import quiet_triton_teardown
from app.privacy import add_recording_privacy_args
from app.presets import add_preset_arg, apply_preset, preset_name
from app.usage import UsageError, check_usage
from engine.config import POLICIES, PREEMPTION_MODES, ConfigError, EngineConfig
from engine.sim.hardware import known_devices
from engine.sim.model_shapes import known_models

DEMO_NUM_GPU_BLOCKS = 112   # tight enough that the demo shows the cache filling and a few preemptions


def _engine_args(p: argparse.ArgumentParser, *, num_gpu_blocks: int | None, clock: str) -> None:
    g = p.add_argument_group("engine (vLLM's knob names)")
    g.add_argument("--model", default="default",
                   help="'default' = embedded SmolLM2-135M-Instruct, or a local transformers "
                        "Llama-family model folder (default: %(default)s)")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: %(default)s)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto = float32 on CPU, bfloat16 on GPU (default: %(default)s)")
    g.add_argument("--threads", type=int, metavar="N",
                   help="torch's CPU threads for the forward pass (torch.set_num_threads; default: torch's "
                        "choice, one per core). On a machine busy with other work, fewer threads than "
                        "cores (e.g. 1 on 2 cores) avoid the threads waiting on each other")
    g.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default: %(default)s)")
    g.add_argument("--num-gpu-blocks", type=int, default=num_gpu_blocks,
                   help="physical KV blocks; omit to size from free memory (default: %(default)s)")
    g.add_argument("--max-num-seqs", type=int, default=16,
                   help="batch slots: running requests per step (default: %(default)s)")
    g.add_argument("--max-num-batched-tokens", type=int, default=256,
                   help="token budget of one step (default: %(default)s)")
    g.add_argument("--max-model-len", type=int, default=2048,
                   help="max prompt + output tokens per request (default: %(default)s)")
    g.add_argument("--long-prefill-token-threshold", type=int, default=0,
                   help="cap on one request's prefill chunk per step, 0 = none (default: %(default)s)")
    g.add_argument("--no-chunked-prefill", action="store_true", help="admit only whole prompts")
    g.add_argument("--enable-prefix-caching", action="store_true",
                   help="reuse the KV of full blocks whose whole prefix an earlier step computed "
                        "(automatic prefix caching, vLLM v1 style; off by default)")
    g.add_argument("--policy", choices=POLICIES, default="fcfs",
                   help="which waiting request gets a batch slot: fcfs = by arrival (continuous batching); "
                        "priority = by the request's priority, lower value first, ties by arrival, and a "
                        "strictly higher-priority waiting request may preempt the lowest-priority running "
                        "one (trace requests all have priority 0, so a replay runs as fcfs); static = the "
                        "baseline without continuous batching: a batch of up to --max-num-seqs requests is "
                        "admitted only when the whole previous batch finished (default: %(default)s)")
    g.add_argument("--preemption-mode", choices=PREEMPTION_MODES, default="recompute",
                   help="what happens to a request preempted when the KV cache runs out: recompute = its "
                        "KV is dropped and computed again; swap = copied to a CPU pool of "
                        "--num-cpu-blocks blocks and back (recompute when that pool is full) "
                        "(default: %(default)s)")
    g.add_argument("--num-cpu-blocks", type=int, default=0,
                   help="KV blocks of the CPU swap pool (only with --preemption-mode swap; default: "
                        "%(default)s)")
    g.add_argument("--check-invariants", action="store_true",
                   help="check the global invariants (block conservation, queue exclusivity, limits; "
                        "G1-G4 of the scheduler cases) after every step; the first violation stops the "
                        "run with its step and invariant (slower; the recording keeps the steps so far)")
    g.add_argument("--clock", choices=["wall", "virtual", "sim"], default=clock,
                   help="wall: arrivals in real seconds; virtual: arrivals in steps, reproducible "
                        "schedules; sim: simulated seconds from --executor sim's step times, idle gaps "
                        "skipped; with --executor sim, wall means sim (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="engine seed (default: %(default)s)")
    g.add_argument("--cuda-graphs", choices=["on", "off"], default="off",
                   help="on: decode-only steps run padded to a ladder of batch sizes (1, 2, 4, 8, 16, 24, ... "
                        "up to --max-num-seqs) and replay CUDA graphs captured at start-up, decoding with our "
                        "Triton kernel (BATCHSCOPE_ATTENTION=reference: the torch reference); on a CPU the same "
                        "padded path runs without graphs, slower (it is there to be tested); off until verified "
                        "on a GPU (default: %(default)s)")
    _sim_args(p)


def _sim_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulated executor (no model is loaded; each step's duration comes from a "
                             "roofline cost model, sampled tokens are synthetic; see docs/sim.md)")
    g.add_argument("--executor", choices=["model", "sim"], default="model",
                   help="model: run the model's forward pass; sim: the real scheduler and KV cache with "
                        "simulated step times, to replay big traces fast (default: %(default)s)")
    g.add_argument("--sim-model", metavar="NAME",
                   help=f"architecture to simulate: {', '.join(known_models())}, or a transformers folder "
                        f"/ config.json (default: --model, i.e. the embedded SmolLM2-135M)")
    g.add_argument("--sim-device", metavar="NAME",
                   help=f"device to simulate: {', '.join(known_devices())} (cpu = this machine, measured "
                        f"at start; GPU peaks from the vendors' datasheets) (default: h100)")
    g.add_argument("--sim-cost", metavar="FIT.json",
                   help="overheads (per step, per scheduled request) and efficiency factors written by "
                        "'batchscope fit' (default: 2 ms per step, 10 us per request, 50%% of peak FLOP/s, "
                        "80%% of peak bandwidth)")


def _workload_args(p: argparse.ArgumentParser, *, time_scale: float, prompt_scale: float = 1.0,
                   output_scale: float = 1.0, min_prompt: int = 4, max_prompt: int | None = None,
                   min_output: int = 1, max_output: int | None = None) -> None:
    g = p.add_argument_group("workload scaling (make a production trace fit this machine)")
    g.add_argument("--time-scale", type=float, default=time_scale,
                   help="multiply trace arrival times (0.1 = 10x faster arrivals) (default: %(default)s)")
    g.add_argument("--prompt-scale", type=float, default=prompt_scale,
                   help="multiply prompt lengths (default: %(default).4g)")
    g.add_argument("--output-scale", type=float, default=output_scale,
                   help="multiply output lengths (default: %(default).4g)")
    g.add_argument("--min-prompt-tokens", type=int, default=min_prompt, help="clip prompt lengths below (default: %(default)s)")
    g.add_argument("--max-prompt-tokens", type=int, default=max_prompt, help="clip prompt lengths above (default: %(default)s)")
    g.add_argument("--min-output-tokens", type=int, default=min_output, help="clip output lengths below (default: %(default)s)")
    g.add_argument("--max-output-tokens", type=int, default=max_output, help="clip output lengths above (default: %(default)s)")
    g.add_argument("--steps-per-second", type=float, default=None,
                   help="--clock virtual only: trace seconds -> steps (default: 10); refused on the "
                        "wall and sim clocks, which keep the trace's seconds")
    g = p.add_argument_group("workload source (see docs/workloads.md)")
    g.add_argument("--request-rate", type=float, metavar="R",
                   help="Poisson arrivals at R requests/s (exponential gaps seeded by --seed) instead of "
                        "the trace's timestamps; lengths (and Mooncake hash_ids) still come from the "
                        "trace; inf = every request at t=0; --time-scale is then not applied "
                        "(default: the trace's own times)")
    g.add_argument("--lengths", choices=["sharegpt"],
                   help="no trace: draw prompt/output lengths from the shipped ShareGPT length table "
                        "(30,731 conversations) with arrivals from --request-rate (default inf)")
    g.add_argument("--num-requests", type=int, metavar="N",
                   help="requests drawn with --lengths (default: 1000)")


def _slo_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("goodput: completed requests meeting both SLOs, per second")
    g.add_argument("--slo-ttft", type=float, metavar="MS", help="time-to-first-token SLO in milliseconds")
    g.add_argument("--slo-tpot", type=float, metavar="MS", help="time-per-output-token SLO in milliseconds")


def engine_config(a: argparse.Namespace) -> EngineConfig:
    """EngineConfig from parsed arguments (a ``SimConfig`` with ``--executor sim``). Raises
    ConfigError with the knob and its limit, or the known names of a simulated model or device."""
    sim = getattr(a, "executor", "model") == "sim"
    clock = "sim" if sim and a.clock == "wall" else a.clock   # real seconds mean nothing to a simulation
    knobs = dict(model=a.model, device=a.device, dtype=a.dtype, seed=a.seed, block_size=a.block_size,
                 num_gpu_blocks=a.num_gpu_blocks, max_model_len=a.max_model_len,
                 max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_num_batched_tokens,
                 enable_chunked_prefill=not a.no_chunked_prefill,
                 enable_prefix_caching=a.enable_prefix_caching, policy=a.policy,
                 preemption_mode=a.preemption_mode, num_cpu_blocks=a.num_cpu_blocks,
                 check_invariants=a.check_invariants, cuda_graphs=getattr(a, "cuda_graphs", "off") == "on",
                 long_prefill_token_threshold=a.long_prefill_token_threshold, clock=clock)
    sim_flags = {k: getattr(a, k, None) for k in ("sim_model", "sim_device", "sim_cost")}
    if not sim:
        given = [f"--{k.replace('_', '-')}" for k, v in sim_flags.items() if v is not None]
        if given or clock == "sim":
            raise ConfigError(f"{', '.join(given) or '--clock sim'} needs --executor sim")
        return EngineConfig(**knobs)
    if knobs["cuda_graphs"]:
        raise ConfigError("--cuda-graphs on needs --executor model (the simulated executor runs no forward pass)")
    from engine.sim.config import SimConfig
    return SimConfig(**knobs, sim_model=sim_flags["sim_model"] or a.model,
                     sim_device=sim_flags["sim_device"] or "h100", sim_cost=sim_flags["sim_cost"])


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
    add_compare_parser(sub, _engine_args, _workload_args, _slo_args, preset)
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
    _engine_args(demo, num_gpu_blocks=DEMO_NUM_GPU_BLOCKS, clock="wall")
    # Sized for SmolLM2-135M on 2 CPU cores: the 16 slots fill within ~2 s (see recordings/workloads/workload.py).
    _workload_args(demo, time_scale=0.1, prompt_scale=1 / 12, output_scale=0.25, min_prompt=8, max_prompt=96,
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
    _engine_args(run, num_gpu_blocks=None, clock="wall")
    _workload_args(run, time_scale=1.0)
    _slo_args(run)
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
    _slo_args(summ)


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
    command means ``demo`` (``batchscope --paused`` = ``batchscope demo --paused``). Exits 2 with
    argparse's message on a usage error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _parser_and_commands(preset_name(argv))
    i = next((k for k, a in enumerate(argv) if a not in ("-v", "--verbose")), len(argv))
    if i == len(argv) or (argv[i] not in commands and argv[i] not in ("-h", "--help")):
        argv = [*argv[:i], "demo", *argv[i:]]
    return parser.parse_args(argv)


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
    if getattr(args, "threads", None):
        import torch
        torch.set_num_threads(args.threads)
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
        return run_check(args.recording, max_problems=args.max_problems)
    if command == "replay" and args.check_invariants:
        from app.commands.check import warn_before_replay
        warn_before_replay(args.recording)          # the window opens on a bad file too
    from app.commands.window import launch
    return launch(args, command)


def console_main() -> int:
    """The ``batchscope`` console script: :func:`main`, quiet when the reader of its output goes
    away (``batchscope summary run.sqlite | head``: exit status 1, no traceback), and without
    Triton's teardown report at exit (:mod:`app.exit_quiet`)."""
    quiet_triton_teardown()
    try:
        return main()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # Python's documented recipe
        return 1


if __name__ == "__main__":
    sys.exit(console_main())
