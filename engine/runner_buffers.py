"""Host-to-device plumbing of the model runner: preallocated staging buffers for the packed step
inputs."""
from __future__ import annotations

import numpy as np
import torch


STAGED = ("input_ids", "positions", "slot_mapping", "logits_idx", "block_tables")


class StagingBuffers:
    """One preallocated int64 buffer per packed input (:data:`STAGED`), ``capacity`` entries
    each to start with (the step's token budget; a buffer doubles when a step needs more). On a
    CUDA ``device`` the host side is pinned and each :meth:`put` is one host copy plus one
    asynchronous device copy into a preallocated device buffer (vLLM's ``CpuGpuBuffer``
    pattern); on the CPU the host buffer is what the model reads (one copy, no allocation per
    step)."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.device = device
        self._pin = device.type == "cuda"
        self._on_device = device.type != "cpu"
        self.host: dict[str, torch.Tensor] = {}
        self.dev: dict[str, torch.Tensor] = {}
        self._host_np: dict[str, np.ndarray] = {}
        for name in STAGED:
            self._alloc(name, max(1, capacity))

    def _alloc(self, name: str, capacity: int) -> None:
        host = torch.zeros(capacity, dtype=torch.int64, pin_memory=self._pin)
        self.host[name], self._host_np[name] = host, host.numpy()
        self.dev[name] = torch.zeros(capacity, dtype=torch.int64, device=self.device) if self._on_device else host

    def put(self, name: str, values: np.ndarray) -> torch.Tensor:
        """Copy ``values`` (int, any shape) into buffer ``name``; returns them on the device in
        that shape, int64 (valid until the next ``put`` of that name)."""
        n = values.size
        if n > len(self.host[name]):
            self._alloc(name, max(n, 2 * len(self.host[name])))
        self._host_np[name][:n] = values.reshape(-1)
        host = self.host[name][:n].view(values.shape)
        if not self._on_device:
            return host
        out = self.dev[name][:n].view(values.shape)
        out.copy_(host, non_blocking=True)
        return out
