"""The peers on the anchor workload: HF transformers continuous batching (``ContinuousBatchingManager``
through ``model.continuous_batching_context_manager``) at one or more settings, and HF static batching
(``generate`` on batches in arrival order, each until its longest request), on the same random-weight
model and the same requests as ``batchscope bench`` (``app.commands.bench``), in one process.

    python bench/hf_peer.py --json out/peer.json                   # GPU: the anchor, 512 requests
    python bench/hf_peer.py --small --limit 4 --json peer.json     # CPU smoke: the tiny shape

Output tokens per second are counted as the bench counts them: the requests' own output lengths
(EOS off) over the time from the first submission to the last completion, model built and warm.
For static batching a batch runs until its longest request, so shorter ones make tokens nobody asked
for; only the requested ones count. The reference numbers of ``../shared/bench/README.md`` come from
that folder's ``hf_peer.py``; this one is the repository's own, so the GPU check carries it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

VARIANTS = {"default": {}, "graphs": {"use_cuda_graph": True}}   # ContinuousBatchingConfig keywords
SMALL_CACHE = {"num_blocks": 64, "block_size": 32, "max_batch_tokens": 256}   # the tiny model on a CPU


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def continuous_batching(model, requests, device: torch.device, variant: str, small: bool, timeout_s: float) -> dict:
    """HF continuous batching over ``requests`` ((prompt ids, output length) pairs) at the
    setting ``variant`` (a key of :data:`VARIANTS`); returns its figures or ``error``."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    settings = {**VARIANTS[variant], **(SMALL_CACHE if small else {})}
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(o for _, o in requests), eos_token_id=-1,
                           pad_token_id=0)
    t0 = time.perf_counter()
    with model.continuous_batching_context_manager(generation_config=gen,
                                                   continuous_batching_config=ContinuousBatchingConfig(**settings)) as m:
        t1 = time.perf_counter()
        for prompt, out in requests:
            m.add_request(prompt, max_new_tokens=out, eos_token_id=-1)
        finished = tokens = 0
        while finished < len(requests):
            r = m.get_result(timeout=timeout_s)
            if r is None:
                break
            if r.is_finished():
                finished += 1
                tokens += len(r.generated_tokens)
        _sync(device)
        t2 = time.perf_counter()
    return {"settings": settings, "setup_s": t1 - t0, "run_s": t2 - t1, "finished": finished,
            "out_tokens": tokens, "out_tok_per_s": tokens / (t2 - t1)}


def static_batching(model, requests, device: torch.device, batch: int) -> dict:
    """HF ``generate`` on batches of ``batch`` requests in arrival order (left-padded, greedy, each
    batch for its longest output); returns the figures, counting only the requested tokens."""
    model.set_attn_implementation("sdpa")
    t0 = time.perf_counter()
    steps = 0
    for s in range(0, len(requests), batch):
        chunk = requests[s:s + batch]
        width = max(len(p) for p, _ in chunk)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in chunk], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk], device=device)
        longest = max(o for _, o in chunk)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
                           do_sample=False, eos_token_id=None, pad_token_id=0)
        steps += longest
    _sync(device)
    dt = time.perf_counter() - t0
    useful = sum(o for _, o in requests)
    return {"batch": batch, "run_s": dt, "decode_steps": steps, "out_tokens": useful, "out_tok_per_s": useful / dt}


def main(argv: list[str] | None = None) -> int:
    from app.commands.bench.command import ANCHOR_SHAPE, SMALL_SHAPE
    from app.commands.bench.model import random_model
    from app.commands.bench.workload import ANCHOR_NUM_REQUESTS, anchor_requests

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help=f"the {SMALL_SHAPE} model (CPU smoke run)")
    ap.add_argument("--limit", type=int, default=ANCHOR_NUM_REQUESTS, help="first N anchor requests (default: all)")
    ap.add_argument("--cb-variants", default="graphs", help=f"comma list of {', '.join(VARIANTS)} (default: %(default)s)")
    ap.add_argument("--static-batch", type=int, default=64, help="0: skip static batching (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one CB result")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    unknown = set(args.cb_variants.split(",")) - set(VARIANTS) - {""}
    if unknown:
        ap.error(f"unknown --cb-variants {', '.join(sorted(unknown))}: known {', '.join(VARIANTS)}")
    import transformers
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = SMALL_SHAPE if args.small else ANCHOR_SHAPE
    model = random_model(shape, device, dtype)
    requests = [(r.prompt_token_ids, r.max_tokens) for r in anchor_requests(model.config.vocab_size, args.limit)]
    res = {"torch": torch.__version__, "transformers": transformers.__version__, "device": str(device),
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None, "shape": shape,
           "requests": len(requests), "prompt_tokens": sum(len(p) for p, _ in requests),
           "output_tokens": sum(o for _, o in requests)}
    print(res, flush=True)
    for variant in filter(None, args.cb_variants.split(",")):
        key = "hf_cb" if variant == "default" else f"hf_cb_{variant}"
        try:
            res[key] = continuous_batching(model, requests, device, variant, args.small, args.timeout)
        except Exception as e:          # noqa: BLE001 - a failed setting is a result; the others go on
            res[key] = {"error": repr(e)[:500]}
        print(key, res[key], flush=True)
    if args.static_batch:
        res["hf_static"] = static_batching(model, requests, device, args.static_batch)
        print("hf_static", res["hf_static"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
