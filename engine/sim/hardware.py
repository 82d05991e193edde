"""Device peaks for the roofline: dense matrix FLOP/s, memory bandwidth and memory size.

GPU numbers are the vendors' datasheet values for dense (no 2:4 sparsity) BF16/FP16 tensor-core
math, i.e. half the "with sparsity" figure the datasheets print, and the HBM/GDDR bandwidth:

==========  ==============  ============  ========  ===============================================
name        dense bf16      bandwidth     memory    source
==========  ==============  ============  ========  ===============================================
a100        312 TFLOP/s     2,039 GB/s    80 GB     NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)
h100        989.4 TFLOP/s   3,350 GB/s    80 GB     NVIDIA H100 Tensor Core GPU datasheet (H100 SXM)
h200        989.4 TFLOP/s   4,800 GB/s    141 GB    NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)
l40s        362.05 TFLOP/s  864 GB/s      48 GB     NVIDIA L40S datasheet (BF16, FP32 accumulate)
==========  ==============  ============  ========  ===============================================

``cpu`` is this machine, measured once per process (a fraction of a second, numpy): the best of a
few float32 1024x1024 matmuls (2 n^3 FLOPs each) and the best of a few 64 MiB array copies (2 x 64
MiB moved each: read + write). Memory is the host's physical RAM. Memory sizes are decimal GB.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeaks:
    """``peak_flops`` in FLOP/s, ``mem_bandwidth`` in bytes/s, ``memory_bytes`` in bytes,
    ``host_bandwidth`` the device <-> host link in bytes/s one way (what swap preemption's copies
    move over: the PCIe x16 generation's nominal rate; for the CPU itself its memory bandwidth)."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: int
    description: str = ""
    host_bandwidth: float = 32e9

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_GB = 10**9
DEVICES: dict[str, DevicePeaks] = {d.name: d for d in (
    DevicePeaks("a100", 312e12, 2039e9, 80 * _GB, "NVIDIA A100 80GB SXM (datasheet)", 32e9),   # PCIe 4
    DevicePeaks("h100", 989.4e12, 3350e9, 80 * _GB, "NVIDIA H100 SXM 80GB (datasheet)", 64e9),  # PCIe 5
    DevicePeaks("h200", 989.4e12, 4800e9, 141 * _GB, "NVIDIA H200 SXM 141GB (datasheet)", 64e9),
    DevicePeaks("l40s", 362.05e12, 864e9, 48 * _GB, "NVIDIA L40S 48GB (datasheet)", 32e9),
)}
CPU = "cpu"


def known_devices() -> list[str]:
    return [*sorted(DEVICES), CPU]


def get_device(name: str) -> DevicePeaks:
    """Peaks of device ``name`` (case-insensitive); ``cpu`` measures this machine (once).
    Raises ``ValueError`` naming the known devices."""
    key = name.strip().lower()
    if key in DEVICES:
        return DEVICES[key]
    if key == CPU:
        return measure_cpu()
    raise ValueError(f"unknown sim device {name!r}: known devices are {', '.join(known_devices())}")


def check_device_name(name: str) -> None:
    """Raise ``ValueError`` (naming the known ones) if ``name`` is not a device; measures nothing."""
    if name.strip().lower() not in (*DEVICES, CPU):
        get_device(name)


@functools.lru_cache(maxsize=1)
def measure_cpu(matmul_n: int = 1024, copy_mib: int = 64, repeats: int = 5) -> DevicePeaks:
    """This CPU's float32 peaks, cached: matmul FLOP/s as the best of ``repeats`` ``n x n``
    products in numpy and in torch (the model runs on torch's kernels, which can beat numpy's
    BLAS: a peak below what the model reaches would put steps above 100% efficiency), and
    bandwidth in bytes/s as the best of a copy (read + write counted) and a read-only sum of a
    ``copy_mib`` buffer (weights are streamed read-only). A loaded machine still measures low."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)
    b = rng.standard_normal((matmul_n, matmul_n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    best = min(_best_of(lambda: a @ b, repeats), _best_of(lambda: ta @ tb, repeats))
    flops = 2.0 * matmul_n**3 / best
    src = np.ones(copy_mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    bandwidth = max(2.0 * src.nbytes / _best_of(lambda: np.copyto(dst, src), repeats),
                    src.nbytes / _best_of(lambda: torch.from_numpy(src).sum(), repeats))
    return DevicePeaks(CPU, flops, bandwidth, host_memory_bytes(),
                       f"this CPU, measured: {flops / 1e9:.0f} GFLOP/s fp32, {bandwidth / 1e9:.1f} GB/s",
                       bandwidth)


def _best_of(fn, repeats: int) -> float:
    """Shortest time of ``fn`` in seconds over ``repeats`` runs, after one warm-up run (BLAS
    threads started, pages faulted in)."""
    fn()
    return min(_timed(fn) for _ in range(repeats))


def host_memory_bytes() -> int:
    """Physical RAM of this machine in bytes (16 GB if the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 16 * _GB


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return max(time.perf_counter() - t0, 1e-9)
