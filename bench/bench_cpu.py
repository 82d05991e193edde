"""CPU benchmark: BatchScope's engine vs HF transformers static `generate` and HF continuous
batching, on the CPU workload of ../shared/bench/README.md (first 64 Azure conv requests, lengths
scaled, random prompt tokens, all at t=0, EOS off), SmolLM2-135M fp32, one process, back to back.

Usage: .venv/bin/python bench/bench_cpu.py [--trace PATH] [--skip-hf] [--record-overhead] [--compare-impls]
Prints output tokens/s of each and the ratios (targets: engine >= 3x static, >= 1.5x HF CB), with
--record-overhead the engine's steps/s with the recorder on vs off, and with --compare-impls the
engine's output tokens/s with its own fused forward vs transformers' forward (``model_impl``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from app.factory import build_engine  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from recordings.workloads.workload import bench_cpu_workload  # noqa: E402

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def run_engine(reqs, recorder_path: str | None = None, **knobs) -> dict:
    """Engine on the workload; returns out tok/s, steps/s and wall time (model already loaded)."""
    cfg = EngineConfig(dtype="float32", device="cpu", clock="virtual", **knobs)
    factory = None
    if recorder_path:
        from recordings.file.writer import RecordingWriter
        factory = lambda info: RecordingWriter(recorder_path, info)  # noqa: E731
    built = build_engine(cfg, recorder_factory=factory, progress=False)
    eng = built.engine
    done = eng.collect_finished()
    warm = eng.add_request(list(reqs[0][0]), SamplingParams(max_tokens=4, ignore_eos=True), request_id="warmup")
    eng.run_until_done()
    steps0 = eng.step_index
    t0 = time.perf_counter()
    for i, (p, o) in enumerate(reqs):
        eng.add_request(list(p), SamplingParams(max_tokens=o, ignore_eos=True), request_id=f"b{i}")
    eng.run_until_done()
    dt = time.perf_counter() - t0
    if eng.recorder is not None:
        eng.recorder.close()
    toks = sum(done[f"b{i}"].num_output_tokens for i in range(len(reqs)))
    assert warm in done
    return {"run_s": dt, "out_tokens": toks, "out_tok_per_s": toks / dt,
            "steps": eng.step_index - steps0, "steps_per_s": (eng.step_index - steps0) / dt}


def run_hf(reqs, model_folder: str) -> dict:
    """HF static generate (batches of 16) and HF continuous batching, as ../shared/bench/hf_peer_cpu.py."""
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    model = AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32).eval()
    useful = sum(o for _, o in reqs)
    res = {}
    gc = GenerationConfig(do_sample=False, max_new_tokens=64, eos_token_id=-1, pad_token_id=0)
    cbc = ContinuousBatchingConfig(num_blocks=512, block_size=32, max_batch_tokens=512)
    with model.continuous_batching_context_manager(generation_config=gc, continuous_batching_config=cbc) as m:
        t1 = time.perf_counter()
        for p, o in reqs:
            m.add_request(p, max_new_tokens=o, eos_token_id=-1)
        got = toks = 0
        while got < len(reqs):
            r = m.get_result(timeout=120)
            if r is None:
                break
            if r.is_finished():
                got += 1
                toks += len(r.generated_tokens)
        dt = time.perf_counter() - t1
    res["hf_cb"] = {"run_s": dt, "finished": got, "out_tok_per_s": toks / dt}
    t0 = time.perf_counter()
    for s in range(0, len(reqs), 16):
        ch = reqs[s:s + 16]
        width = max(len(p) for p, _ in ch)
        mo = max(o for _, o in ch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in ch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in ch])
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=mo, min_new_tokens=mo,
                       do_sample=False, eos_token_id=None, pad_token_id=0)
    dt = time.perf_counter() - t0
    res["hf_static"] = {"run_s": dt, "out_tok_per_s": useful / dt}
    return res


def compare_impls(reqs, repeats: int, **knobs) -> dict:
    """The engine's output tokens/s with its own fused forward and with transformers' forward,
    ``repeats`` runs each, alternating (single runs on this machine vary by ~10%); the ratio of
    the medians (> 1: the fused forward is faster)."""
    runs = {"batchscope": [], "transformers": []}
    for _ in range(repeats):
        for impl, tok_s in runs.items():
            tok_s.append(run_engine(reqs, model_impl=impl, **knobs)["out_tok_per_s"])
    med = {impl: statistics.median(v) for impl, v in runs.items()}
    return {"out_tok_per_s": runs, "median": med, "ratio_batchscope_vs_transformers": med["batchscope"] / med["transformers"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: all cores)")
    ap.add_argument("--record-overhead", action="store_true",
                    help="also time the engine with the recorder on (alternating with off runs)")
    ap.add_argument("--repeats", type=int, default=3, help="on/off pairs for --record-overhead and --compare-impls")
    ap.add_argument("--compare-impls", action="store_true",
                    help="also time the engine with model_impl batchscope vs transformers (alternating runs)")
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(args.threads or os.cpu_count() or 2)
    wl = bench_cpu_workload(args.trace)
    reqs = [(w.prompt_token_ids, w.max_tokens) for w in wl.requests]
    knobs = dict(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                 block_size=16, num_gpu_blocks=1024, max_model_len=2048)
    res = {"requests": len(reqs), "prompt_tokens": sum(len(p) for p, _ in reqs),
           "out_tokens": sum(o for _, o in reqs), "threads": torch.get_num_threads(), "knobs": knobs}
    res["engine"] = run_engine(reqs, **knobs)
    if args.record_overhead:
        # Alternate off/on runs and compare medians: single runs on this machine vary by ~10%.
        off, on = [res["engine"]["steps_per_s"]], []
        with tempfile.TemporaryDirectory() as d:
            for i in range(args.repeats):
                on.append(run_engine(reqs, recorder_path=os.path.join(d, f"b{i}.sqlite"), **knobs)["steps_per_s"])
                if i + 1 < args.repeats:
                    off.append(run_engine(reqs, **knobs)["steps_per_s"])
        res["recording"] = {"steps_per_s_off": off, "steps_per_s_on": on,
                            "median_off": statistics.median(off), "median_on": statistics.median(on),
                            "slowdown": 1 - statistics.median(on) / statistics.median(off)}
    if args.compare_impls:
        res["model_impl"] = compare_impls(reqs, args.repeats, **knobs)
    if not args.skip_hf:
        from engine.model.loader import resolve_model
        res.update(run_hf(reqs, str(resolve_model("default", progress=False).folder)))
        e = res["engine"]["out_tok_per_s"]
        res["ratio_vs_hf_static"] = e / res["hf_static"]["out_tok_per_s"]
        res["ratio_vs_hf_cb"] = e / res["hf_cb"]["out_tok_per_s"]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
