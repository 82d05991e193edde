"""Every Triton kernel of the engine compiles for the GPUs it is meant for, without one: sm_90
(H100/H200) and sm_80 (A100), at the compile-time constants the launchers produce for SmolLM2-135M,
Llama-3.2-1B, Qwen2.5-7B and Llama-3.1-8B in bf16 and fp16, within each target's shared memory
(``bench/kernel_compile.py``: ``triton.compile`` with a ``GPUTarget``, ptxas from the Triton wheel).
The compiles run in child processes without ``TRITON_INTERPRET`` (the interpreter's kernels cannot
be compiled), one per target, side by side. Skipped where triton or its CUDA backend is missing."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

triton = pytest.importorskip("triton")


def _cuda_backend() -> bool:
    try:
        from triton.backends import backends
    except ImportError:
        return False
    return "nvidia" in backends


@pytest.mark.slow
@pytest.mark.skipif(not _cuda_backend(), reason="triton has no CUDA backend here")
def test_every_kernel_compiles_for_sm90_and_sm80_within_shared_memory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")       # compile for real, not from an earlier run's cache
    procs = {cc: subprocess.Popen([sys.executable, "bench/kernel_compile.py", "--targets", str(cc),
                                   "--json", str(tmp_path / f"sm{cc}.json")], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cc in (90, 80)}
    for cc, p in procs.items():
        out, _ = p.communicate(timeout=1200)
        assert p.returncode == 0, out[-4000:]
        rows = json.loads((tmp_path / f"sm{cc}.json").read_text())["rows"]
        assert all(r["ok"] and r["target"] == f"sm_{cc}" for r in rows)
        seen = {(r["kernel"], r["shape"], r["dtype"]) for r in rows}
        for shape in ("smollm2-135m", "llama-3.2-1b", "qwen2.5-7b", "llama-3.1-8b"):
            for dtype in ("bfloat16", "float16"):
                for kernel in ("store_kvcache_kernel", "paged_decode_kernel", "decode_reduce_kernel",
                               "paged_prefill_kernel", "add_rms_norm_kernel", "rope_kernel"):
                    assert (kernel, shape, dtype) in seen or kernel == "decode_reduce_kernel", (kernel, shape, dtype)
        splits = {r["constexprs"]["NUM_SPLITS"] for r in rows if r["kernel"] == "paged_decode_kernel"}
        assert splits == {1, 2, 4, 8, 16, 32}
        assert max(r["shared_bytes"] for r in rows if r["kernel"] == "paged_prefill_kernel") > 0
