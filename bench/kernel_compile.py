"""Compile every Triton kernel of the engine for a GPU, without one: ``triton.compile`` with a
``GPUTarget`` (Triton's own ahead-of-time path: its MLIR passes, then ``ptxas`` from the Triton
wheel), at the exact compile-time constants and argument types the launchers of
:mod:`engine.runner.attention.triton_attention` and :mod:`engine.runner.forward.triton_layers` (the
fused forward's residual add + RMSNorm and RoPE) produce for real model shapes.

    python bench/kernel_compile.py                       # sm_90 and sm_80, four shapes, bf16 + fp16
    python bench/kernel_compile.py --targets 90 --dtypes bfloat16 --shapes llama-3.2-1b --json out.json

How the constants are found: the launchers run on small CPU tensors of the shape's head counts,
head dim and cache block size, with the kernels module replaced by recorders (nothing executes);
each recorded launch gives the kernel, its arguments (pointer dtypes, integer and float scalars)
and its constexprs and ``num_warps``. Decode launches are recorded at every split count the
engine uses (:data:`engine.runner.attention.triton_attention.SPLIT_BUCKETS`).

Fails (exit 1) on a compile error or when a kernel needs more shared memory than the target has
(:data:`SHARED_MEMORY_LIMIT`: the opt-in maximum per block, CUDA C Programming Guide, "Technical
Specifications per Compute Capability"). Must run with ``TRITON_INTERPRET`` unset or 0 (the
interpreter replaces the kernels with Python functions that cannot be compiled).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

SHAPES = ("smollm2-135m", "llama-3.2-1b", "qwen2.5-7b", "llama-3.1-8b")
DTYPES = ("bfloat16", "float16")
TARGETS = (90, 80)
SHARED_MEMORY_LIMIT = {90: 227 * 1024, 89: 99 * 1024, 86: 99 * 1024, 80: 163 * 1024}   # bytes per block
BLOCK_SIZE = 16                 # the engine's default cache block size (tokens)
_TRITON_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                 torch.int32: "i32", torch.int64: "i64"}


class _Recorder:
    """Stands in for one ``@triton.jit`` kernel: ``kernel[grid](*args, **kwargs)`` records the call."""

    def __init__(self, fn, calls: list) -> None:
        self.fn, self.calls = fn, calls

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((self.fn, args, kwargs))


def record_launches(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                    block_size: int = BLOCK_SIZE, hidden_size: int | None = None) -> list[tuple]:
    """(jit function, positional args, keyword args) of every launch the engine's attention makes
    for one layer of this shape: the K/V store, the decode kernel at each split count (with its
    reduction), the prefill kernel; with ``hidden_size``, the fused forward's kernels too (the
    residual add + RMSNorm with and without a residual, RoPE over the query and key heads). CPU
    tensors of the right dtypes and layouts stand in."""
    from engine.runner.attention import triton_attention as ta
    from engine.runner.attention import triton_kernels

    calls: list = []
    stub = SimpleNamespace(**{name: _Recorder(getattr(triton_kernels, name), calls)
                              for name in ("store_kvcache_kernel", "paged_decode_kernel", "decode_reduce_kernel",
                                           "paged_prefill_kernel")})
    saved = ta._kernels, ta._interpreting
    ta._kernels, ta._interpreting = (lambda: stub), (lambda: False)
    try:
        t, width = 4, 8
        q = torch.zeros(t, num_heads, head_dim, dtype=dtype)
        k_cache = torch.zeros(3, block_size, num_kv_heads, head_dim, dtype=dtype)
        v_cache = torch.zeros_like(k_cache)
        tables = torch.zeros(2, width, dtype=torch.int64)
        new_kv = torch.zeros(t, num_kv_heads, head_dim, dtype=dtype)
        ta.store_kvcache(new_kv, new_kv, k_cache, v_cache, torch.zeros(t, dtype=torch.int64))
        decode = torch.zeros(2, 3, dtype=torch.int32)
        for splits in ta.SPLIT_BUCKETS:
            ta.decode_attention(torch.empty_like(q), q, k_cache, v_cache, tables, decode, 0.125, splits)
        ta.prefill_attention(torch.empty_like(q), q, k_cache, v_cache, tables, torch.zeros(1, 4, dtype=torch.int32),
                             ta.prefill_block_q(num_heads // num_kv_heads), 0.125)
    finally:
        ta._kernels, ta._interpreting = saved
    if hidden_size is not None:
        calls += _record_forward_launches(num_heads, num_kv_heads, head_dim, dtype, hidden_size)
    return calls


def _record_forward_launches(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                             hidden_size: int) -> list[tuple]:
    """The launches of :mod:`engine.runner.forward.triton_layers` for one layer of this shape."""
    from engine.runner.forward import triton_kernels as fk
    from engine.runner.forward import triton_layers as fl

    calls: list = []
    stub = SimpleNamespace(**{name: _Recorder(getattr(fk, name), calls) for name in ("add_rms_norm_kernel", "rope_kernel")})
    saved = fl._kernels
    fl._kernels = lambda: stub
    try:
        t, heads = 4, num_heads + 2 * num_kv_heads
        x = torch.zeros(t, hidden_size, dtype=dtype)
        weight = torch.zeros(hidden_size, dtype=dtype)
        fl.add_rms_norm_triton(x, None, weight, 1e-5)
        fl.add_rms_norm_triton(x, x, weight, 1e-5)
        qkv = torch.zeros(t, heads, head_dim, dtype=dtype)            # the forward's strided view of Q and K
        fl.apply_rope_triton(qkv[:, :num_heads + num_kv_heads], torch.zeros(64, head_dim, dtype=dtype),
                             torch.zeros(t, dtype=torch.int64))
    finally:
        fl._kernels = saved
    return calls


def _source(fn, args: tuple, kwargs: dict):
    """The ``ASTSource`` of one recorded launch and its compile options (``num_warps``)."""
    from triton.compiler import ASTSource

    names = fn.arg_names
    constexpr_names = {p.name for p in fn.params if p.is_constexpr}
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    signature, constexprs = {}, {}
    for name in names:
        v = values[name]
        if name in constexpr_names:
            signature[name], constexprs[name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            signature[name] = "*" + _TRITON_TYPES[v.dtype]
        elif isinstance(v, bool):
            signature[name] = "i1"
        elif isinstance(v, int):
            signature[name] = "i64" if not -2**31 <= v < 2**31 else "i32"
        elif isinstance(v, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} of type {type(v).__name__} is not handled")
    options = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages")}
    return ASTSource(fn, signature, constexprs), options, constexprs


def compile_all(shapes=SHAPES, dtypes=DTYPES, targets=TARGETS) -> list[dict]:
    """One row per distinct (kernel, constants, argument types, target): compiled or the error,
    shared memory in bytes and the target's limit, seconds."""
    import triton
    from triton.backends.compiler import GPUTarget

    from engine.sim.model_shapes import MODELS

    rows, seen = [], set()
    for shape_name in shapes:
        shape = MODELS[shape_name]
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for fn, args, kwargs in record_launches(shape.num_attention_heads, shape.num_key_value_heads,
                                                    shape.head_dim, dtype, hidden_size=shape.hidden_size):
                src, options, consts = _source(fn, args, kwargs)
                for cc in targets:
                    key = (fn.__name__, tuple(sorted(src.signature.items())), repr(sorted(consts.items())),
                           tuple(sorted(options.items())), cc)
                    if key in seen:
                        continue
                    seen.add(key)
                    row = {"kernel": fn.__name__, "shape": shape_name, "dtype": dtype_name, "target": f"sm_{cc}",
                           "constexprs": {k: v for k, v in consts.items()}, **options}
                    t0 = time.perf_counter()
                    try:
                        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
                        row["shared_bytes"] = int(compiled.metadata.shared)
                        row["limit_bytes"] = SHARED_MEMORY_LIMIT[cc]
                        row["ok"] = row["shared_bytes"] <= row["limit_bytes"]
                        if not row["ok"]:
                            row["error"] = f"needs {row['shared_bytes']} B of shared memory, sm_{cc} has {row['limit_bytes']}"
                    except Exception as e:       # noqa: BLE001 - reported per kernel, the run goes on
                        row["ok"], row["error"] = False, f"{type(e).__name__}: {str(e)[-800:]}"
                    row["seconds"] = round(time.perf_counter() - t0, 2)
                    rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of engine.sim.model_shapes names")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--targets", default=",".join(map(str, TARGETS)), help="compute capabilities, e.g. 90,80")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        ap.error("TRITON_INTERPRET is set: the interpreter's kernels cannot be compiled (unset it)")
    for cc in map(int, args.targets.split(",")):
        if cc not in SHARED_MEMORY_LIMIT:
            ap.error(f"no shared-memory limit known for sm_{cc}: known {sorted(SHARED_MEMORY_LIMIT)}")
    t0 = time.perf_counter()
    rows = compile_all(args.shapes.split(","), args.dtypes.split(","), [int(c) for c in args.targets.split(",")])
    import triton
    bad = [r for r in rows if not r["ok"]]
    for r in rows:
        print(f"{'ok ' if r['ok'] else 'BAD'} {r['target']} {r['shape']:<13} {r['dtype']:<8} {r['kernel']:<22} "
              f"splits={r['constexprs'].get('NUM_SPLITS', '-'):<3} shared={r.get('shared_bytes', '?'):>6} B "
              f"{r['seconds']:5.1f} s" + (f"  {r['error']}" if "error" in r else ""))
    print(f"{len(rows)} kernels compiled with triton {triton.__version__} in {time.perf_counter() - t0:.0f} s; "
          f"{len(bad)} failed")
    if args.json:
        args.json.write_text(json.dumps({"triton": triton.__version__, "rows": rows}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
