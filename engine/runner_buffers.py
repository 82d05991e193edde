"""Host-to-device plumbing of the model runner: preallocated staging buffers for the packed step
inputs, and a lazy view of the runner's token rows for the sampler's penalties."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from engine.input_batch import InputBatch

STAGED = ("input_ids", "positions", "slot_mapping", "logits_idx")


class StagingBuffers:
    """One preallocated int64 buffer per packed input (:data:`STAGED`), ``capacity`` tokens each
    (the step's token budget; doubled when a step needs more). On a CUDA ``device`` the host side
    is pinned and each :meth:`put` is one host copy plus one asynchronous device copy into a
    preallocated device buffer (vLLM's ``CpuGpuBuffer`` pattern); on the CPU the host buffer is
    what the model reads (one copy, no allocation per step)."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.device = device
        self._on_device = device.type != "cpu"
        self._alloc(max(1, capacity))

    def _alloc(self, capacity: int) -> None:
        self.capacity = capacity
        pin = self.device.type == "cuda"
        self.host = {k: torch.zeros(capacity, dtype=torch.int64, pin_memory=pin) for k in STAGED}
        self._host_np = {k: t.numpy() for k, t in self.host.items()}
        self.dev = ({k: torch.zeros(capacity, dtype=torch.int64, device=self.device) for k in STAGED}
                    if self._on_device else self.host)

    def put(self, name: str, values: np.ndarray) -> torch.Tensor:
        """Copy ``values`` (int [n]) into buffer ``name``; returns its first ``n`` entries on the
        device (valid until the next ``put`` of that name)."""
        n = len(values)
        if n > self.capacity:
            self._alloc(max(n, 2 * self.capacity))
        self._host_np[name][:n] = values
        if not self._on_device:
            return self.host[name][:n]
        out = self.dev[name][:n]
        out.copy_(self.host[name][:n], non_blocking=True)
        return out


class RowTokens(Sequence):
    """``InputBatch`` rows' prompt (``prompt=True``) or output token ids, one int32 numpy view
    per row, read only when indexed (the sampler reads them for rows with penalties only)."""

    def __init__(self, batch: InputBatch, rows: Sequence[int], prompt: bool) -> None:
        self._batch, self._rows, self._prompt = batch, rows, prompt

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        row = self._rows[i]
        b = self._batch
        return b.prompt_token_ids(row) if self._prompt else b.output_token_ids(row)
