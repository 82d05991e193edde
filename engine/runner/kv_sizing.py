"""Sizing the paged KV cache from the memory the device has free."""
from __future__ import annotations

import os

import torch

from engine.config import EngineConfig
from engine.runner.model_runner import kv_bytes_per_block


def available_memory_bytes(device: torch.device) -> int:
    """Free memory on ``device`` in bytes: CUDA's free memory, else the host's available RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def size_num_blocks(model_config, config: EngineConfig, device: torch.device, dtype: torch.dtype) -> int:
    """Number of KV blocks: ``kv_cache_memory_fraction`` of free memory, but never more than
    ``max_num_seqs`` requests of ``max_model_len`` tokens need (more could never be used).
    Raises ``RuntimeError`` if not even one request of ``max_model_len`` tokens fits."""
    per_block = kv_bytes_per_block(model_config, config.block_size, dtype)
    by_memory = int(available_memory_bytes(device) * config.kv_cache_memory_fraction) // per_block
    blocks_per_seq = -(-config.max_model_len // config.block_size)
    need = config.max_num_seqs * blocks_per_seq
    n = min(by_memory, need)
    if n < blocks_per_seq:
        raise RuntimeError(
            f"KV cache too small: {by_memory} blocks of {per_block} bytes fit in "
            f"{config.kv_cache_memory_fraction:.0%} of free memory on {device}, but one request of "
            f"max_model_len={config.max_model_len} tokens needs {blocks_per_seq}; lower max_model_len "
            "or raise kv_cache_memory_fraction")
    return n
