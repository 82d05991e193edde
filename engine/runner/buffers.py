"""Host-to-device plumbing of the model runner: one preallocated staging buffer that every per-step
input (packed token ids, positions, slot mapping, block tables, the logits rows, the decode
groups, the sampling parameters) is packed into, so a step costs ONE host-to-device copy, not one
per array (each small copy is a driver call and a DMA of its own: several microseconds of host
time apiece on a GPU, more than moving a few kB takes). vLLM keeps the same host/device pairs (``CpuGpuBuffer``; its
v2 runner's UVA buffers); packing mixed dtypes into one byte buffer is our own."""
from __future__ import annotations

import numpy as np
import torch

ALIGN = 16                      # bytes: every entry starts 16-byte aligned, so any <= 8-byte dtype views it and
                                # Triton specializes each pointer the same way every step (no recompiles)

_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
                 np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                 np.dtype(np.bool_): torch.bool, np.dtype(np.uint8): torch.uint8}


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class StepUpload:
    """Packs a step's host arrays into one preallocated byte buffer and moves them to ``device``
    with one copy.

    Use: :meth:`add` each array under a name (a dtype from :data:`_TORCH_DTYPES`: int64, int32,
    float32, float64, bool, uint8; converted while packed), then :meth:`send`, which returns
    ``{name: tensor}`` on the device in each array's shape and dtype, views of one device buffer,
    valid until the next :meth:`send` (the step's kernels, queued before the next copy on the
    same stream, still read the right values). ``sends`` counts the copies made.

    On a CUDA ``device`` the host buffer is pinned and the copy asynchronous; an event recorded
    after it is waited on before the host buffer is written again (normally long done: the step
    reads its sampled tokens back). On the CPU (``copy`` False, the default there) nothing is
    packed: each array becomes a tensor over its own memory (no copy; pass arrays the caller will
    not change before the step ends, e.g. fresh fancy-indexed ones). ``copy=True`` packs and
    copies on any device (the tests check the packing on a CPU that way); ``pin=False`` keeps
    the host buffer pageable (for a one-off upload: pinning costs more than it saves). Buffers
    start at ``capacity_bytes`` and double when a step needs more. Raises ``ValueError`` on a duplicate
    name or an unsupported dtype.
    """

    def __init__(self, device: torch.device | str, capacity_bytes: int = 1 << 16, *,
                 copy: bool | None = None, pin: bool | None = None) -> None:
        self.device = torch.device(device)
        self.copy = self.device.type != "cpu" if copy is None else copy
        self._pin = self.device.type == "cuda" if pin is None else pin and self.device.type == "cuda"
        self.sends = 0
        self._entries: list[tuple[str, int, int, torch.dtype, tuple[int, ...]]] = []
        self._direct: dict[str, torch.Tensor] = {}
        self._names: set[str] = set()
        self._size = 0
        self._copied = None                      # the CUDA event after the last copy
        self._host = self._host_np = self._dev = None
        if self.copy:
            self._host = torch.zeros(max(ALIGN, capacity_bytes), dtype=torch.uint8, pin_memory=self._pin)
            self._host_np = self._host.numpy()

    def add(self, name: str, values, dtype=np.int64) -> None:
        """Stage ``values`` (an array-like of any shape) as ``dtype`` under ``name``."""
        dt = np.dtype(dtype)
        if dt not in _TORCH_DTYPES:
            raise ValueError(f"StepUpload.add({name!r}): dtype {dt} is not one of "
                             f"{sorted(str(d) for d in _TORCH_DTYPES)}")
        if not self.copy:                        # the CPU: the array itself, as a tensor
            if name in self._direct:
                raise ValueError(f"StepUpload.add: {name!r} is already staged in this step")
            self._direct[name] = torch.from_numpy(np.ascontiguousarray(values, dtype=dt))
            return
        if name in self._names:
            raise ValueError(f"StepUpload.add: {name!r} is already staged in this step")
        self._names.add(name)
        a = np.asarray(values)
        if not self._entries and self._copied is not None:
            self._copied.synchronize()           # the previous step's copy has left the host buffer
        off = self._size
        end = off + a.size * dt.itemsize
        if end > len(self._host_np):
            self._grow_host(end)
        self._host_np[off:end].view(dt)[:] = a.reshape(-1)
        self._entries.append((name, off, end, _TORCH_DTYPES[dt], a.shape))
        self._size = _aligned(end)

    def reset(self) -> None:
        """Drop whatever was staged and not sent (a step that failed halfway), so the next step
        starts empty."""
        self._entries, self._size, self._direct, self._names = [], 0, {}, set()

    def _grow_host(self, need: int) -> None:
        host = torch.zeros(max(need, 2 * len(self._host_np)), dtype=torch.uint8, pin_memory=self._pin)
        host.numpy()[:self._size] = self._host_np[:self._size]
        self._host, self._host_np = host, host.numpy()

    def send(self) -> dict[str, torch.Tensor]:
        """Copy what was staged to the device (one copy; none on the CPU unless ``copy``) and
        return it by name; the next :meth:`add` starts a new step."""
        if not self.copy:
            out, self._direct = self._direct, {}
            return out
        self._names = set()
        size = self._size
        if self._dev is None or size > len(self._dev):
            self._dev = torch.empty(len(self._host_np), dtype=torch.uint8, device=self.device)
        if size:
            self._dev[:size].copy_(self._host[:size], non_blocking=self._pin)
            self.sends += 1
            if self._pin:
                if self._copied is None:
                    self._copied = torch.cuda.Event()
                self._copied.record()
        out = {}
        for name, off, end, dtype, shape in self._entries:
            out[name] = self._dev[off:end].view(dtype).view(shape)
        self._entries, self._size = [], 0
        return out
