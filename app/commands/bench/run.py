"""The run of ``batchscope bench`` (its flags checked by ``app.commands.bench.command.check_bench_usage`` first):
measure the peaks, build the engine, warm it up, serve the workload with a progress bar, print the
figures."""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from app.commands.bench.command import anchor_limit, model_shape_name
from app.commands.bench.figures import bench_figures, format_figures
from app.peaks import measure_peaks
from app.args import engine_config
from app.factory import build_engine, resolve_device, resolve_dtype
from app.commands.run import fit_kv_to_workload
from app.workload_setup import add_workload, load_workload, read_trace
from engine.engine import LLMEngine
from engine.plural import plural
from engine.request import SamplingParams
from engine.sim.cost_model import CostModel
from engine.sim.model_shapes import ModelShape
from recordings.metrics.roofline import roofline_info

WARMUP_REQUESTS = 4
WARMUP_TOKENS = 4


def bench(args: argparse.Namespace) -> int:
    """Run the benchmark of ``args``; prints the figures (and writes ``--json``, ``--record``).
    Returns 0, or 1 on a runtime failure (model, device, trace, recording)."""
    from engine.model.files import ModelLoadError
    from recordings.errors import RecordingError
    from recordings.workloads.traces import TraceFormatError

    try:
        return _bench(args)
    except (ModelLoadError, TraceFormatError, RecordingError, OSError, RuntimeError, ValueError) as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 1


def _bench(args: argparse.Namespace) -> int:
    shape = model_shape_name(args)
    config = engine_config(argparse.Namespace(**{**vars(args), "model": args.model or "default"}))
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    print(f"measuring the peaks of {device} ({str(dtype).removeprefix('torch.')})…", file=sys.stderr)
    peaks = measure_peaks(device, dtype)
    if shape is not None:
        from app.commands.bench.model import random_engine
        print(f"building a random-weight {shape} model on {device}…", file=sys.stderr)
        built = random_engine(shape, config.replace(device=str(device)), device, dtype)
    else:
        print(f"loading model {config.model!r}…", file=sys.stderr)
        built = build_engine(config, peaks=peaks)
    requests, trace_info, notes = _workload(args, built)
    if args.num_gpu_blocks is None:
        built = fit_kv_to_workload(built, requests)
    for line in notes:
        print(f"  - {line}", file=sys.stderr)
    runner = built.engine.runner
    model_config = runner.model.config.to_dict()
    cost = CostModel(ModelShape.from_config(model_config, built.run_info.model_name).with_dtype(built.config.dtype),
                     peaks)
    _warm_up(built, requests)
    writer = None
    if args.record:
        from recordings.file.writer import RecordingWriter
        info = built.run_info.replace(trace=trace_info, bench={"peaks": peaks.to_dict()},
                                      roofline=roofline_info(cost.shape, peaks))
        writer = RecordingWriter(args.record, info, store_prompt_token_ids=False)
    eng = LLMEngine(built.config, runner, built.config.num_gpu_blocks, tokenizer=built.tokenizer,
                    eos_token_id=built.engine.eos_token_id, recorder=writer)
    gc.collect()
    gc.freeze()               # model and workload live for the whole run: out of the full GC passes
    compiled_before = _compiled_variants(device)
    t0 = time.perf_counter()
    add_workload(eng, requests, clock=eng.config.clock)
    records = _serve(eng, len(requests))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    duration = time.perf_counter() - t0
    compiled_after = _compiled_variants(device)
    compiles = None if compiled_before is None or compiled_after is None else compiled_after - compiled_before
    if writer is not None:
        writer.close()
    figures = bench_figures(records, cost, duration, num_requests=len(requests),
                            num_prompt_tokens=sum(r.num_prompt_tokens for r in requests))
    print(f"model: {built.run_info.model_name} on {device} ({built.config.dtype}); "
          f"max_num_seqs {built.config.max_num_seqs}, max_num_batched_tokens {built.config.max_num_batched_tokens}, "
          f"{plural(built.config.num_gpu_blocks, 'KV block')} of {plural(built.config.block_size, 'token')}; workload {trace_info['name']}; "
          f"recording {'to ' + args.record if args.record else 'off'}")
    for line in format_figures(figures):
        print(line)
    if compiles is not None:
        print(f"{'kernel compiles':<21}{compiles} during the timed run (Triton; 0 expected after warm-up)")
    prediction = predict(built.config, cost, requests) if getattr(args, "predict", False) else None
    if prediction is not None:
        p = prediction
        print(f"{'predicted (sim)':<21}{p['output_tokens_per_s']:,.1f} output tokens/s, {p['duration_s']:.4g} s, "
              f"{p['num_steps']} steps; measured / predicted time {duration / p['duration_s']:.2f}")
    if args.json:
        out = {"figures": figures.to_dict(), "peaks": peaks.to_dict(), "config": built.config.to_dict(),
               "model": built.run_info.model, "workload": trace_info, "recording": args.record,
               "recorder_error": eng.recorder_error, "kernel_compiles_during_run": compiles,
               "prediction": prediction}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if eng.recorder_error:
        print(f"batchscope: {eng.recorder_error}", file=sys.stderr)
        return 1
    return 0


def predict(config, cost: CostModel, requests: list) -> dict:
    """The simulated executor's prediction (``engine.sim.executor.SimExecutor``) for ``requests``
    under ``config`` (same scheduler and knobs, virtual clock: every anchor request arrives at 0),
    on ``cost``'s shape and peaks with the simulator's default calibration (``CostParams``):
    predicted seconds (the sum of its step times), steps and output tokens per second."""
    from engine.sim.cost_model import CostParams
    from engine.sim.executor import SimExecutor

    sim = SimExecutor(cost.with_params(CostParams()), seed=config.seed, block_size=config.block_size)
    eng = LLMEngine(config.replace(clock="virtual"), sim, config.num_gpu_blocks)
    done = eng.collect_finished()
    add_workload(eng, requests, clock=eng.config.clock)
    eng.run_until_done()
    tokens = sum(done[r.request_id].num_output_tokens for r in requests)
    return {"duration_s": sim.total_time_s, "num_steps": sim.num_steps, "num_output_tokens": tokens,
            "output_tokens_per_s": tokens / sim.total_time_s if sim.total_time_s > 0 else None,
            "cost_params": "default (engine.sim.cost_model.CostParams)"}


def _compiled_variants(device: torch.device) -> int | None:
    """Compiled variants of our Triton kernels in this process (CUDA only; None elsewhere)."""
    if device.type != "cuda":
        return None
    from engine.runner.attention.triton_attention import compiled_variants
    return compiled_variants()


def _workload(args: argparse.Namespace, built) -> tuple[list, dict, list[str]]:
    """The requests (``recordings.workloads.workload.WorkloadRequest``), their provenance and notes: the
    anchor workload, or ``--trace`` / ``--lengths`` scaled as ``batchscope run`` scales them."""
    if not (args.trace or args.lengths):
        from app.commands.bench.workload import ANCHOR_NUM_REQUESTS, anchor_info, anchor_requests
        requests = anchor_requests(built.vocab_size, anchor_limit(args) or ANCHOR_NUM_REQUESTS)
        return requests, anchor_info(requests), []
    wl = load_workload(args, read_trace(args), built.tokenizer, built.vocab_size)
    return wl.requests, wl.trace_info, wl.notes


def _warm_up(built, requests: list) -> None:
    """A few short requests through a throwaway engine on the same runner (first kernels,
    allocator), so the measured run starts warm; the runner forgets them."""
    warm = LLMEngine(built.config, built.engine.runner, built.config.num_gpu_blocks)
    for i, r in enumerate(requests[:WARMUP_REQUESTS]):
        warm.add_request(list(r.prompt_token_ids), SamplingParams(max_tokens=WARMUP_TOKENS, ignore_eos=True),
                         request_id=f"warmup-{i}")
    warm.run_until_done()


def _serve(eng: LLMEngine, total: int) -> list:
    """Step until every request finished (sleeping through idle gaps before future arrivals),
    with a progress bar; returns the step records."""
    records = []
    with tqdm(disable=None, total=total, unit="req", desc="bench", dynamic_ncols=True, file=sys.stderr) as bar:
        done = 0
        while eng.has_unfinished:
            eng.admit_due()
            s = eng.scheduler
            if not (s.waiting or s.running) and eng.next_arrival_time is not None:
                time.sleep(max(0.0, min(0.05, eng.next_arrival_time - eng.now())))
                continue
            rec = eng.step()
            records.append(rec)
            if rec.num_finished != done:
                bar.update(rec.num_finished - done)
                done = rec.num_finished
    return records
