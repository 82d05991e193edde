"""The device's peaks, measured at the start of ``batchscope bench``: what the roofline floor of a
run is computed against.

- Bandwidth: the best of a few copies of one large buffer (``copy_bytes``) on the device; each
  copy reads and writes it, so it moves ``2 * copy_bytes`` bytes (as ``hf_peer.py`` counts).
- FLOP/s: the best of a few ``n x n`` matmuls in the run's dtype, ``2 n^3`` FLOPs each.

On a CPU in float32 the simulator's own measurement is reused (``engine.sim.hardware.measure_cpu``,
numpy, cached per process) so the bench and ``--sim-device cpu`` see one CPU.
"""
from __future__ import annotations

import time

import torch

from engine.sim.hardware import CPU, DevicePeaks, host_memory_bytes, measure_cpu

GPU_COPY_BYTES = 2 << 30         # 2 GiB, as hf_peer.py
GPU_MATMUL_N = 8192
CPU_COPY_BYTES = 64 << 20
CPU_MATMUL_N = 1024


def measure_peaks(device: torch.device, dtype: torch.dtype, repeats: int = 5) -> DevicePeaks:
    """Peak matmul FLOP/s in ``dtype`` and copy bandwidth (bytes/s, read + write) of ``device``,
    best of ``repeats`` after one warm-up each. ``memory_bytes`` is the device's memory."""
    if device.type == "cpu" and dtype == torch.float32:
        return measure_cpu()
    gpu = device.type == "cuda"
    n = GPU_MATMUL_N if gpu else CPU_MATMUL_N
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    flops = 2.0 * n**3 / _best(lambda: a @ b, device, repeats)
    del a, b
    src = torch.empty((GPU_COPY_BYTES if gpu else CPU_COPY_BYTES), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    bandwidth = 2.0 * src.numel() / _best(lambda: dst.copy_(src), device, repeats)
    del src, dst
    if gpu:
        torch.cuda.empty_cache()    # give the buffers back: the KV cache is sized from free memory next
    memory = torch.cuda.get_device_properties(device).total_memory if gpu else host_memory_bytes()
    name = torch.cuda.get_device_name(device) if gpu else CPU
    return DevicePeaks(name, flops, bandwidth, int(memory),
                       f"{name}, measured: {flops / 1e12:.3g} TFLOP/s {str(dtype).removeprefix('torch.')}, "
                       f"{bandwidth / 1e9:.4g} GB/s copy", bandwidth)


def _best(fn, device: torch.device, repeats: int) -> float:
    """Shortest wall time of ``fn`` in seconds over ``repeats`` runs (after one warm-up), each
    synchronised with the device."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)
