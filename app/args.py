"""The engine, simulator, workload and SLO flags shared by ``batchscope`` subcommands, and the
:class:`EngineConfig` built from them. A leaf of ``app``: the commands import it, never ``app.cli``."""
from __future__ import annotations

import argparse

from engine.config import ADMISSION_MODES, POLICIES, PREEMPTION_MODES, ConfigError, EngineConfig
from engine.sim.hardware import known_devices
from engine.sim.model_shapes import known_models

DEMO_NUM_GPU_BLOCKS = 112   # tight enough that the demo shows the cache filling and a few preemptions


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
    add_admission_args(p)
    add_sim_args(p)


def add_admission_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine admission control and thrash (see docs/scheduling.md)")
    g.add_argument("--max-queue-time", type=float, metavar="S",
                   help="reject a request still waiting for its first admission S after its arrival "
                        "(engine clock: seconds, steps under --clock virtual), recorded as timed out "
                        "(default: wait forever, as vLLM)")
    g.add_argument("--admission", choices=ADMISSION_MODES, default="all",
                   help="all = admit every request that fits (vLLM); slo = at arrival predict the "
                        "request's TTFT from the queue ahead and the step-time model (--sim-cost's fit, "
                        "else the simulator's roofline) and reject it when over --slo-ttft, as "
                        "Mooncake's early rejection (default: %(default)s)")
    g.add_argument("--kv-watermark", type=float, default=0.0, metavar="F",
                   help="fraction of the KV blocks kept free when a request is admitted while others "
                        "run: room for their decode, less thrash (vLLM v0's watermark, 0.01 there) "
                        "(default: %(default)s)")
    g.add_argument("--max-preemptions-per-request", type=int, default=0, metavar="N",
                   help="a request preempted N times is no longer chosen as the victim when the KV "
                        "cache runs out (another running request is), 0 = no cap (default: %(default)s)")


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


def add_slo_args(p: argparse.ArgumentParser) -> None:
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
                 long_prefill_token_threshold=a.long_prefill_token_threshold, clock=clock,
                 max_queue_time=getattr(a, "max_queue_time", None), admission=getattr(a, "admission", "all"),
                 slo_ttft_ms=getattr(a, "slo_ttft", None), kv_watermark=getattr(a, "kv_watermark", 0.0),
                 max_preemptions_per_request=getattr(a, "max_preemptions_per_request", 0))
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


