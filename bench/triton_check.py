"""Triton paged-attention kernels vs the torch reference on the GPU, at realistic shapes; installs
nothing, about a minute on an H200 (most of it the first-call compiles):

    python bench/triton_check.py                 # CUDA, Llama-3.2-1B attention shapes, bf16
    python bench/triton_check.py --small         # tiny shapes; on a CPU it runs the interpreter

Fresh random bf16 inputs: 32 query heads, 8 KV heads, head_dim 64, 16-token blocks, shuffled block
tables. For each case it prints ‖out − ref‖ / ‖ref‖ against the reference run in fp32 on the same
(bf16) values (and, for scale, the bf16 reference's own error), whether any NaN appeared, the first
call's time (Triton compiles then) and the median time of one layer's attention call (store of the
new K/V included) for Triton and for the reference, timed with CUDA events. Exit code 1 when a case
is over 1e-2 or has NaN. :func:`check_triton_kernels` returns the rows for a larger GPU check.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 64, 16
TOLERANCE = 1e-2


def _cases(small: bool) -> list[tuple[str, list[tuple[int, int]], dict]]:
    """(name, [(new tokens, context length after the step)], kwargs for the Triton call)."""
    rng = random.Random(0)
    if small:
        dec = [(1, rng.randint(1, 80)) for _ in range(6)]
        return [("decode x6 <=80", dec, {}),
                ("decode x6 split 3", dec, {"num_splits": 3}),
                ("prefill 2x40", [(40, 40)] * 2, {}),
                ("chunk 24 after 37", [(24, 61)], {}),
                ("mixed", dec + [(24, 61)], {})]
    dec256 = [(1, rng.randint(1, 4096)) for _ in range(256)]
    return [
        ("decode x256 ctx<=4k", dec256, {}),
        ("decode x256 split 4", dec256, {"num_splits": 4}),
        ("decode x8 ctx 4k", [(1, 4096)] * 8, {}),
        ("decode x8 ctx 4k 1 split", [(1, 4096)] * 8, {"num_splits": 1}),
        ("prefill 4x2k", [(2048, 2048)] * 4, {}),
        ("chunks 2x512 after 1500", [(512, 2012)] * 2, {}),
        ("mixed 256 dec + 512 chunk", dec256 + [(512, 2012)], {}),
    ]


def _make_step(requests, device, gen, dev_gen):
    from engine.runner.attention import PagedAttentionMetadata
    num_blocks = sum(-(-ctx // BLOCK_SIZE) for _, ctx in requests) + 1
    perm = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    tables = [[perm.pop() for _ in range(-(-ctx // BLOCK_SIZE))] for _, ctx in requests]
    t = sum(nq for nq, _ in requests)

    def randn(*shape):
        return torch.randn(*shape, generator=dev_gen, device=device).to(torch.bfloat16)
    k_cache = randn(num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    v_cache = randn(num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    # the model's layouts: [1, heads, T, D] views of [T, heads, D] memory
    q, k, v = (randn(t, h, HEAD_DIM).transpose(0, 1)[None] for h in (HEADS, KV_HEADS, KV_HEADS))

    def meta(dtype):
        caches = [(k_cache.to(dtype).clone(), v_cache.to(dtype).clone())]
        return PagedAttentionMetadata.build([nq for nq, _ in requests], [c for _, c in requests], tables,
                                            caches, BLOCK_SIZE, torch.device(device))
    return q, k, v, meta


def _timed(fn, device: str, iters: int) -> float:
    """Median milliseconds of ``fn()`` (CUDA events on a GPU, wall clock elsewhere); NaN for 0 ``iters``."""
    if iters < 1:
        return float("nan")
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check_triton_kernels(device: str = "cuda", small: bool = False, iters: int = 20) -> list[dict]:
    """One row per case: name, tokens, rel_err, rel_err_bf16_ref, nan, first_s, triton_ms, ref_ms."""
    from engine.runner.attention.reference import paged_attention
    from engine.runner.attention.triton_attention import paged_attention_triton
    gen = torch.Generator().manual_seed(0)
    dev_gen = torch.Generator(device=device).manual_seed(0)
    scale = HEAD_DIM ** -0.5
    rows = []
    for name, requests, kw in _cases(small):
        q, k, v, meta = _make_step(requests, device, gen, dev_gen)
        with torch.inference_mode():
            ref32 = paged_attention(q.float(), k.float(), v.float(), meta(torch.float32), 0, scale)[0].float()
            ref_meta = meta(torch.bfloat16)
            ref16 = paged_attention(q, k, v, ref_meta, 0, scale)[0].float()
            tri_meta = meta(torch.bfloat16)
            _sync(device)
            t0 = time.perf_counter()
            out = paged_attention_triton(q, k, v, tri_meta, 0, scale, **kw)[0].float()
            _sync(device)
            first_s = time.perf_counter() - t0
            norm = ref32.norm().item()
            n = iters if not small else min(iters, 2)
            rows.append(dict(
                name=name, tokens=q.shape[2], kv_tokens=sum(c for _, c in requests),
                rel_err=(out - ref32).norm().item() / norm, rel_err_bf16_ref=(ref16 - ref32).norm().item() / norm,
                nan=bool(out.isnan().any().item()), first_s=first_s,
                triton_ms=_timed(lambda: paged_attention_triton(q, k, v, tri_meta, 0, scale, **kw), device, n),
                ref_ms=_timed(lambda: paged_attention(q, k, v, ref_meta, 0, scale), device, n)))
        del q, k, v, meta, ref_meta, tri_meta, ref32, ref16, out
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def print_table(rows: list[dict]) -> None:
    head = f"{'case':<28}{'q tok':>7}{'kv tok':>9}{'rel err':>10}{'bf16 ref':>10}{'NaN':>5}" \
           f"{'1st s':>7}{'triton ms':>11}{'ref ms':>9}{'speedup':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['name']:<28}{r['tokens']:>7}{r['kv_tokens']:>9}{r['rel_err']:>10.2e}{r['rel_err_bf16_ref']:>10.2e}"
              f"{'yes' if r['nan'] else 'no':>5}{r['first_s']:>7.1f}{r['triton_ms']:>11.3f}{r['ref_ms']:>9.3f}"
              f"{r['ref_ms'] / max(r['triton_ms'], 1e-9):>8.1f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes (the interpreter on a CPU)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per case (median; 0: correctness only)")
    args = ap.parse_args(argv)
    if args.device != "cuda":
        if not args.small:
            ap.error("realistic shapes need CUDA; use --small on a CPU")
        os.environ["TRITON_INTERPRET"] = "1"        # before the kernels module is imported
    t0 = time.perf_counter()
    rows = check_triton_kernels(args.device, args.small, args.iters)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (Triton interpreter)"
    import triton
    print(f"\nTriton paged attention vs torch reference — {name}, torch {torch.__version__}, "
          f"triton {triton.__version__}; H={HEADS} Hkv={KV_HEADS} D={HEAD_DIM} block {BLOCK_SIZE}, bf16; "
          f"rel err vs fp32 reference (limit {TOLERANCE:g}); {time.perf_counter() - t0:.0f} s")
    print_table(rows)
    bad = [r["name"] for r in rows if r["nan"] or not r["rel_err"] < TOLERANCE]
    if bad:
        print("FAILED:", ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
