"""The engine, simulator, workload and SLO flags shared by ``batchscope`` subcommands, and the
:class:`EngineConfig` built from them. A leaf of ``app``: the commands import it, never ``app.cli``."""
from __future__ import annotations

import argparse

from engine.config import POLICIES, PREEMPTION_MODES, ConfigError, EngineConfig
from engine.sim.config import SIM_MAX_NUM_BATCHED_TOKENS, SIM_MAX_NUM_SEQS, sim_default_knobs
from engine.sim.hardware import known_devices
from engine.sim.model_shapes import known_models

DEMO_NUM_GPU_BLOCKS = 112   # tight enough that the demo shows the cache filling and a few preemptions
# What --max-num-seqs, --max-num-batched-tokens and --max-model-len mean when neither a flag nor a preset
# sets them on the model executor (a small CPU run); --executor sim takes vLLM's (engine.sim.config).
MODEL_KNOBS = {"max_num_seqs": 16, "max_num_batched_tokens": 256, "max_model_len": 2048}


def add_engine_args(p: argparse.ArgumentParser, *, num_gpu_blocks: int | None, clock: str) -> None:
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
    g.add_argument("--max-num-seqs", type=int, default=None,
                   help=f"batch slots: running requests per step (default: {MODEL_KNOBS['max_num_seqs']}; "
                        f"with --executor sim vLLM's {SIM_MAX_NUM_SEQS})")
    g.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help=f"token budget of one step (default: {MODEL_KNOBS['max_num_batched_tokens']}; with "
                        f"--executor sim vLLM's {SIM_MAX_NUM_BATCHED_TOKENS}, or --max-model-len without "
                        f"chunked prefill)")
    g.add_argument("--max-model-len", type=int, default=None,
                   help=f"max prompt + output tokens per request (default: {MODEL_KNOBS['max_model_len']}; "
                        f"with --executor sim the simulated model's own, from its config.json)")
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
    add_sim_args(p)


def add_sim_args(p: argparse.ArgumentParser) -> None:
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


def add_workload_args(p: argparse.ArgumentParser, *, time_scale: float, prompt_scale: float = 1.0,
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
    g.add_argument("--strict", action="store_true",
                   help="refuse a Mooncake trace whose rows carry keys the format does not define (a "
                        "misspelt output_lenght); without it such rows are kept and every unknown key is "
                        "reported with its lines (BatchScope's JSONL format always refuses such a line)")


def add_slo_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("goodput: completed requests meeting both SLOs, per second")
    g.add_argument("--slo-ttft", type=float, metavar="MS", help="time-to-first-token SLO in milliseconds")
    g.add_argument("--slo-tpot", type=float, metavar="MS", help="time-per-output-token SLO in milliseconds")


def sized_knobs(a: argparse.Namespace) -> dict[str, int]:
    """``max_num_seqs``, ``max_num_batched_tokens`` and ``max_model_len`` of a run: each as a flag or
    a preset set it, else (None) the executor's default: :data:`MODEL_KNOBS` on the model executor,
    vLLM's for the simulated model with ``--executor sim`` (``engine.sim.config.sim_default_knobs``:
    256 slots, 8,192 tokens per step, the model config's length). Raises ConfigError for an unknown
    simulated model."""
    given = {k: getattr(a, k, None) for k in MODEL_KNOBS}
    if all(v is not None for v in given.values()):
        return given
    if getattr(a, "executor", "model") != "sim":
        return {k: MODEL_KNOBS[k] if v is None else v for k, v in given.items()}
    try:
        defaults = sim_default_knobs(getattr(a, "sim_model", None) or a.model,
                                     enable_chunked_prefill=not a.no_chunked_prefill,
                                     max_model_len=given["max_model_len"])
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return {k: defaults[k] if v is None else v for k, v in given.items()}


def engine_config(a: argparse.Namespace) -> EngineConfig:
    """EngineConfig from parsed arguments (a ``SimConfig`` with ``--executor sim``); knobs no flag or
    preset set take the executor's defaults (:func:`sized_knobs`). Raises ConfigError with the knob
    and its limit, or the known names of a simulated model or device."""
    sim = getattr(a, "executor", "model") == "sim"
    clock = "sim" if sim and a.clock == "wall" else a.clock   # real seconds mean nothing to a simulation
    knobs = dict(model=a.model, device=a.device, dtype=a.dtype, seed=a.seed, block_size=a.block_size,
                 num_gpu_blocks=a.num_gpu_blocks, **sized_knobs(a),
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


