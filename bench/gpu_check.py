"""GPU check, one command, installs nothing (run it on the lent H200 through the device tool):

    python bench/gpu_check.py            # ~3-5 minutes on an H200

1. Output equality (fp32): 16 mixed-length greedy requests through the engine together, with
   chunked prefill and recompute preemption, vs transformers `generate()` on each alone, on the GPU.
2. Headless trace replay (bf16): a random-weight Llama-3.2-1B-shaped model (the anchor architecture
   of ../shared/bench/README.md) serving Azure conv requests, lengths clipped, all at t=0.
Prints a short table of figures. ``--device cpu --small`` runs the same code paths on a CPU.
"""
from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.model_runner import ModelRunner  # noqa: E402
from engine.request import SamplingParams  # noqa: E402

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def make_engine(model, *, num_blocks: int, **knobs) -> LLMEngine:
    cfg = EngineConfig(num_gpu_blocks=num_blocks, clock="virtual", **knobs)
    return LLMEngine(cfg, ModelRunner(model, num_blocks, cfg.block_size), num_blocks)


def check_equality(device: str, small: bool) -> dict:
    """Greedy engine outputs == per-request generate(), fp32."""
    cfg = LlamaConfig(hidden_size=128 if small else 512, intermediate_size=256 if small else 1536,
                      num_hidden_layers=2 if small else 6, num_attention_heads=4 if small else 8,
                      num_key_value_heads=2, vocab_size=1000 if small else 32000, max_position_embeddings=1024)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.float32).eval()
    rng = random.Random(1)
    reqs = [([rng.randint(3, cfg.vocab_size - 1) for _ in range(rng.randint(5, 120))], rng.randint(4, 24))
            for _ in range(16)]
    eng = make_engine(model, num_blocks=20, block_size=8, max_num_batched_tokens=64, max_num_seqs=16)
    done = eng.collect_finished()
    for i, (p, o) in enumerate(reqs):
        eng.add_request(p, SamplingParams(max_tokens=o, ignore_eos=True), request_id=f"r{i}")
    recs = eng.run_until_done()
    preemptions = sum(r.num_preemptions for r in recs)
    ok = 0
    model.set_attn_implementation("sdpa")      # the reference runs transformers' own attention
    with torch.inference_mode():
        for i, (p, o) in enumerate(reqs):
            ref = model.generate(torch.tensor([p], device=device), max_new_tokens=o, do_sample=False,
                                 eos_token_id=-1, pad_token_id=0)[0, len(p):].tolist()
            ok += ref == done[f"r{i}"].output_token_ids
    rejected = sum(done[f"r{i}"].status.value == "FINISHED_ERROR" for i in range(len(reqs)))
    return {"equal": ok, "requests": len(reqs), "preemptions": preemptions, "steps": len(recs),
            "rejected": rejected}


def azure_rows(n: int) -> list[tuple[int, int]]:
    """(prompt, output) token counts of the first n conv rows (the shipped 400-row slice when
    ../shared is not there)."""
    path = TRACE if TRACE.is_file() else Path(__file__).resolve().parents[1] / "recordings" / "data" / "azure_conv_demo.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))[:n]
    return [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows]


def replay(device: str, small: bool, n: int) -> dict:
    """Headless replay in bf16 (fp32 on CPU) of n Azure conv requests, prompts <= 1024, outputs <= 256."""
    if small:
        cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096)
    else:
        cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                          num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                          tie_word_embeddings=True, rope_theta=500000.0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    rng = random.Random(0)
    work = [([rng.randint(10, cfg.vocab_size - 10) for _ in range(max(8, min(1024, p)))], max(4, min(256, o)))
            for p, o in azure_rows(n)]
    eng = make_engine(model, num_blocks=4096, block_size=16, max_num_batched_tokens=2048, max_num_seqs=128,
                      max_model_len=2048)
    eng.add_request(work[0][0], SamplingParams(max_tokens=4, ignore_eos=True), request_id="warmup")
    eng.run_until_done()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    done = eng.collect_finished()
    for i, (p, o) in enumerate(work):
        eng.add_request(p, SamplingParams(max_tokens=o, ignore_eos=True), request_id=f"w{i}")
    recs = eng.run_until_done()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = sum(done[f"w{i}"].num_output_tokens for i in range(len(work)))
    ttft = sorted(done[f"w{i}"].ttft for i in range(len(work)))
    fwd = sum(r.forward_ns for r in recs) / 1e9
    return {"requests": len(work), "prompt_tokens": sum(len(p) for p, _ in work), "out_tokens": out,
            "run_s": dt, "out_tok_per_s": out / dt, "steps": len(recs), "steps_per_s": len(recs) / dt,
            "forward_share": fwd / dt, "ttft_steps_p50": statistics.median(ttft),
            "ttft_steps_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
            "preemptions": sum(r.num_preemptions for r in recs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny models, for a CPU smoke run")
    ap.add_argument("--n", type=int, default=256, help="requests in the replay (default: %(default)s)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}  device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""))
    t = time.perf_counter()
    eq = check_equality(args.device, args.small)
    print(f"equality fp32 : {eq['equal']}/{eq['requests']} requests token-identical to generate(), "
          f"{eq['preemptions']} preemptions, {eq['rejected']} rejected, {eq['steps']} steps "
          f"({time.perf_counter() - t:.1f} s)")
    rp = replay(args.device, args.small, args.n)
    print("replay        : " + "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in rp.items()))
    sys.exit(0 if eq["equal"] == eq["requests"] else 1)


if __name__ == "__main__":
    main()
