"""``batchscope bench``: the engine's speed on the anchor workload (or any trace), headless, with
its roofline efficiency. This module only parses and checks the command line (nothing heavy is
imported here: a bad flag exits 2 before torch loads); the run is :mod:`app.commands.bench.run`."""
from __future__ import annotations

import argparse
from pathlib import Path

from app.usage import UsageError
from engine.vocab import Clock, Executor

SMALL_SHAPE = "tiny"
SMALL_LIMIT = 16               # --small without --limit: the anchor's first 16 requests
ANCHOR_SHAPE = "llama-3.2-1b"

FIGURES_HELP = """\
figures printed (and written by --json):
  output tokens/s     output tokens / the measured time, from the first submission to the last
                      completion (model loaded and warmed up before; EOS off: every request makes
                      exactly its output length)
  TTFT p50/p99        time to first token per request: first token time - arrival (seconds)
  TPOT p50/p99        time per output token after the first: (last - first token time) /
                      (output tokens - 1), requests with >= 2 output tokens (seconds)
  steps/s             engine steps (one forward pass each) / the measured time
  roofline floor      sum over the steps actually run of max(FLOPs / peak FLOP/s, bytes / bandwidth)
                      per operator: the simulated executor's cost model (engine/sim/cost_model.py)
                      at 100% of both peaks and no per-step or per-request overhead, fed each step's
                      scheduled tokens and context lengths (num_computed_tokens)
  roofline efficiency floor / measured time, in (0, 1]: 1 would be a run at the device's limits
  peaks               measured at start on the run's device: one large device copy (bandwidth,
                      read + write) and one large matmul in the run's dtype (FLOP/s); on a CPU in
                      float32 the simulator's own measurement (engine/sim/hardware.py)

on a CPU: use --small (a 2-layer random Llama, hidden 128, the first 16 anchor requests: seconds), or
--model default (SmolLM2-135M, fp32) on a trace scaled as in docs/bench.md (the anchor's prompts of up
to 1,024 tokens take minutes there); the anchor shape (Llama-3.2-1B, the default) is for a GPU,
where it runs in bfloat16."""


def add_bench_parser(sub) -> None:
    """Register ``batchscope bench`` on the subparsers ``sub``: engine knobs (as ``run``, with
    GPU-sized defaults), workload source and scaling, model choice, recording, outputs."""
    from app.args import add_engine_args, add_workload_args

    bench = sub.add_parser(
        "bench", help="headless benchmark: the anchor workload (or a trace) through the engine; prints "
                      "output tokens/s, TTFT, TPOT, steps/s and roofline efficiency",
        description="Run the anchor workload of the benchmarks (512 requests arriving at t=0, prompt "
                    "64-1024 and output 8-512 tokens drawn from random.Random(0), EOS off) through the "
                    "engine on a random-weight model of the Llama-3.2-1B shape (no download), or a trace "
                    "with --trace, and print its speed and how close it came to the device's roofline.",
        epilog=FIGURES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = bench.add_argument_group("model (random weights of a shape, or a model folder)")
    from engine.sim.model_shapes import known_models
    g.add_argument("--model-shape", metavar="NAME",
                   help=f"random-weight Llama of this shape (torch.manual_seed(0)): {SMALL_SHAPE} (2 layers, "
                        f"hidden 128, vocab 1000), {', '.join(known_models())} (default: {ANCHOR_SHAPE}, "
                        "the anchor's; not with --model)")
    g.add_argument("--small", action="store_true", help=f"= --model-shape {SMALL_SHAPE} and, without --limit, the anchor's first "
                                                            f"{SMALL_LIMIT} requests: seconds on a CPU")
    g = bench.add_argument_group("workload (default: the anchor workload)")
    g.add_argument("--trace", help="run this Azure CSV / Mooncake / BatchScope JSONL trace instead, with the "
                                   "scaling flags below (arrivals at the trace's times unless --request-rate)")
    g.add_argument("--limit", type=int, help="first N requests only (of the anchor workload or the trace)")
    g = bench.add_argument_group("recording and output")
    rec = g.add_mutually_exclusive_group()
    rec.add_argument("--record", metavar="PATH", help="record every step to this new .sqlite file")
    rec.add_argument("--no-record", action="store_true", help="no recording (the default)")
    g.add_argument("--json", metavar="OUT", help="also write the figures to this JSON file")
    g.add_argument("--predict", action="store_true",
                   help="also print the simulated executor's prediction for the same requests on the measured "
                        "peaks (engine/sim: the roofline cost model with its default calibration, the same "
                        "scheduler and knobs) next to the measurement; `batchscope fit` tunes the calibration "
                        "from a recorded run")
    add_engine_args(bench, num_gpu_blocks=None, clock="wall")
    add_workload_args(bench, time_scale=1.0)
    bench.set_defaults(model=None, max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=2048)
    for action in bench._actions:                # the defaults above, said in --help
        if action.dest == "model":
            action.help = ("a local transformers Llama-family folder or 'default' (SmolLM2-135M) with its "
                           "real weights, instead of --model-shape")
        elif action.dest in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            action.help = action.help.split(" (default")[0] + " (default: %(default)s)"


def model_shape_name(args: argparse.Namespace) -> str | None:
    """The random-weight shape to build, or None when ``--model`` names real weights."""
    if args.model is not None:
        return None
    return SMALL_SHAPE if args.small else (args.model_shape or ANCHOR_SHAPE)


def anchor_limit(args: argparse.Namespace) -> int | None:
    """How many anchor requests to run: ``--limit``, else :data:`SMALL_LIMIT` with ``--small``,
    else None (all 512)."""
    return args.limit if args.limit is not None else (SMALL_LIMIT if args.small else None)


def check_bench_usage(args: argparse.Namespace) -> None:
    """Check ``bench``'s flags without importing torch. Raises :class:`UsageError` (or
    ``engine.config.ConfigError`` for an engine knob), naming the flag and its limit."""
    from engine.sim.model_shapes import MODELS

    if args.model is not None and (args.model_shape or args.small):
        raise UsageError("--model loads real weights: give it or --model-shape/--small, not both")
    if args.small and args.model_shape and args.model_shape != SMALL_SHAPE:
        raise UsageError(f"--small means --model-shape {SMALL_SHAPE}; got also --model-shape {args.model_shape}")
    shape = model_shape_name(args)
    if shape is not None and shape != SMALL_SHAPE and shape not in MODELS:
        raise UsageError(f"unknown --model-shape {shape!r}: known shapes are {SMALL_SHAPE}, "
                         f"{', '.join(sorted(MODELS))}")
    if args.executor != Executor.MODEL:
        raise UsageError("bench measures real forward passes: --executor sim is for 'batchscope run'")
    if args.clock != Clock.WALL:
        raise UsageError("bench times in real seconds: --clock must be wall")
    anchor = not (args.trace or args.lengths)
    if anchor:
        scaling = [f for f, v, d in (("--time-scale", args.time_scale, 1.0), ("--prompt-scale", args.prompt_scale, 1.0),
                                     ("--output-scale", args.output_scale, 1.0),
                                     ("--max-prompt-tokens", args.max_prompt_tokens, None),
                                     ("--max-output-tokens", args.max_output_tokens, None),
                                     ("--request-rate", args.request_rate, None)) if v != d]
        if scaling:
            raise UsageError(f"{', '.join(scaling)} scale a --trace; the anchor workload is fixed "
                             "(shorten it with --limit N)")
    if args.json is not None and not Path(args.json).parent.is_dir():
        raise UsageError(f"cannot write --json {args.json}: folder {Path(args.json).parent} does not exist")
    run_like = argparse.Namespace(**{**vars(args), "command": "bench", "model": args.model or "default"})
    from app.usage import _check_engine_run       # the knobs, --trace, --record and scaling flags
    _check_engine_run(run_like)
