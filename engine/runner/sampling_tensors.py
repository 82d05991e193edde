"""Per-row sampling parameters of one step as device tensors (the input of
``Sampler.sample_tensors``), plus the few host-side summaries the sampler needs to choose its
work without reading the tensors back (no device -> host sync on the hot path). vLLM v1 keeps the
same split in its ``SamplingMetadata`` (tensors + ``all_greedy`` / ``no_top_p``-style flags)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from engine.runner.buffers import StepUpload

_INT64_SPAN = 1 << 64


def seed_to_int64(seed: int) -> int:
    """A Python int seed of any size as the int64 with the same low 64 bits (seeds are taken
    modulo 2**64)."""
    s = seed % _INT64_SPAN
    return s - _INT64_SPAN if s >= 1 << 63 else s


DERIVED_SEED_STRIDE = 1_000_003


def derived_seed(base_seed: int, k: int) -> int:
    """The seed of the ``k``-th unseeded request (k = 1, 2, ...) of a runner or sampler whose
    base seed is ``base_seed``: ``base_seed * 1_000_003 + k`` (distinct streams per request, the
    same ones in every run with that base seed and order of requests)."""
    return base_seed * DERIVED_SEED_STRIDE + k


@dataclass(frozen=True)
class SamplingTensors:
    """Sampling parameters of ``N`` rows, on one device.

    Tensors (all ``[N]``, on the logits' device):
    ``temperature`` float32, >= 0 (0 = greedy: the row takes the argmax);
    ``top_k`` int64, >= 0 (0, or >= vocab size, = off);
    ``top_p`` float32 in (0, 1] (1 = off);
    ``seed`` int64 (the row's random stream);
    ``counter`` int64 (the draw's position in that stream, e.g. the number of output tokens so
    far: each (seed, counter) pair gives one fixed uniform number, see ``engine.runner.sampling_rng``).

    Host-side summaries (must agree with the tensors; :meth:`from_lists` computes them):
    ``sampled_rows`` an int64 index tensor (on the device) of the rows with temperature > 0, or
    None to draw for every row (right either way: greedy rows still take the argmax, the
    index only saves the work of drawing for them); ``top_p_rows`` an int64 index tensor of the sampled rows with
    ``top_p`` < 1, as positions AMONG THE SAMPLED ROWS (into ``sampled_rows``, or into all rows
    when that is None), or None when there are none; ``max_top_k`` >= every row's ``top_k`` (0
    when no row has one). A too large ``max_top_k`` or extra rows in ``top_p_rows`` only cost
    time; the other direction is wrong.

    Raises ``ValueError`` if a tensor has the wrong shape or dtype.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    seed: torch.Tensor
    counter: torch.Tensor
    sampled_rows: torch.Tensor | None
    top_p_rows: torch.Tensor | None
    max_top_k: int

    def __post_init__(self) -> None:
        n = self.temperature.shape[0] if self.temperature.dim() == 1 else -1
        want = {"temperature": torch.float32, "top_k": torch.int64, "top_p": torch.float32,
                "seed": torch.int64, "counter": torch.int64}
        for name, dtype in want.items():
            t = getattr(self, name)
            if t.dim() != 1 or t.shape[0] != n or t.dtype != dtype:
                raise ValueError(f"SamplingTensors.{name} must be a 1-D {dtype} tensor of {max(n, 0)} rows "
                                 f"like temperature, got {t.dtype} of shape {tuple(t.shape)}")
        for name in ("sampled_rows", "top_p_rows"):
            t = getattr(self, name)
            if t is not None and (t.dim() != 1 or t.dtype != torch.int64):
                raise ValueError(f"SamplingTensors.{name} must be a 1-D int64 index tensor or None, got "
                                 f"{t.dtype} of shape {tuple(t.shape)}")
        if self.max_top_k < 0:
            raise ValueError(f"SamplingTensors.max_top_k must be >= 0, got {self.max_top_k}")

    @property
    def all_greedy(self) -> bool:
        """No row samples (read from index shapes: no device sync)."""
        return self.num_rows == 0 or (self.sampled_rows is not None and self.sampled_rows.numel() == 0)

    def sampled(self) -> "SamplingTensors":
        """The sampled rows only (``self`` when every row samples): tensors gathered with
        ``sampled_rows``; ``top_p_rows`` already counts among them."""
        rows = self.sampled_rows
        if rows is None:
            return self
        return SamplingTensors(self.temperature[rows], self.top_k[rows], self.top_p[rows], self.seed[rows],
                               self.counter[rows], None, self.top_p_rows, self.max_top_k)

    @property
    def num_rows(self) -> int:
        return self.temperature.shape[0]

    @classmethod
    def from_lists(cls, temperature: Sequence[float], top_k: Sequence[int], top_p: Sequence[float],
                   seed: Sequence[int], counter: Sequence[int],
                   device: torch.device | str = "cpu") -> "SamplingTensors":
        """Build from host values (lists or numpy arrays of one value per row): as
        :meth:`from_arrays`, but ``seed`` values may be any Python ints (taken modulo 2**64, see
        :func:`seed_to_int64`). Raises what :meth:`from_arrays` raises."""
        n = len(temperature)
        lengths = {"top_k": len(top_k), "top_p": len(top_p), "seed": len(seed), "counter": len(counter)}
        if any(v != n for v in lengths.values()):
            raise ValueError(f"SamplingTensors.from_lists: {n} temperatures but {lengths}")
        return cls.from_arrays(np.asarray(temperature, dtype=np.float32), np.asarray(top_k, dtype=np.int64),
                               np.asarray(top_p, dtype=np.float32),
                               np.fromiter((seed_to_int64(int(x)) for x in seed), dtype=np.int64, count=n),
                               np.asarray(counter, dtype=np.int64), device)

    @classmethod
    def from_arrays(cls, temperature: np.ndarray, top_k: np.ndarray, top_p: np.ndarray,
                    seed: np.ndarray, counter: np.ndarray,
                    device: torch.device | str = "cpu") -> "SamplingTensors":
        """Build from numpy arrays ``[N]`` (any int / float dtypes; ``seed`` int64, e.g. an
        ``InputBatch``'s columns indexed by the step's rows): :meth:`stage` into a one-off
        :class:`engine.runner.buffers.StepUpload` (one host-to-device copy for all fields; on
        the CPU the tensors share the arrays' memory when the dtypes already match, so pass
        arrays the caller will not modify, such as fancy-indexed copies). Raises what
        :meth:`stage` raises."""
        upload = StepUpload(device, capacity_bytes=64 * max(1, len(temperature)), pin=False)
        staged = cls.stage(upload, temperature, top_k, top_p, seed, counter)
        return staged.tensors(upload.send())

    @staticmethod
    def stage(upload: StepUpload, temperature: np.ndarray, top_k: np.ndarray, top_p: np.ndarray,
              seed: np.ndarray, counter: np.ndarray, prefix: str = "sampling.") -> "StagedSampling":
        """The host half: validate the fields (numpy arrays ``[N]`` as in :meth:`from_arrays`),
        compute the summaries, and add every tensor to ``upload`` under ``prefix`` + its name;
        :meth:`StagedSampling.tensors` then takes the sent tensors.

        Raises ``ValueError`` naming the field and its limit: lengths differ, a temperature < 0
        or not finite, a ``top_k`` < 0, a ``top_p`` outside (0, 1].
        """
        n = len(temperature)
        if not len(top_k) == len(top_p) == len(seed) == len(counter) == n:
            raise ValueError(f"SamplingTensors.from_arrays: {n} temperatures but {len(top_k)} top_k, "
                             f"{len(top_p)} top_p, {len(seed)} seeds, {len(counter)} counters")
        temp = np.asarray(temperature, dtype=np.float32).reshape(n)
        k = np.asarray(top_k, dtype=np.int64).reshape(n)
        p = np.asarray(top_p, dtype=np.float32).reshape(n)
        bad = ~(np.isfinite(temp) & (temp >= 0))
        if bad.any():
            raise ValueError(f"temperature must be finite and >= 0, got {temp[bad][0]}")
        if (k < 0).any():
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {k[k < 0][0]}")
        bad = ~((p > 0) & (p <= 1))
        if bad.any():
            raise ValueError(f"top_p must be in (0, 1], got {p[bad][0]}")
        sampled_rows = np.flatnonzero(temp > 0)
        p_rows = np.flatnonzero(p[sampled_rows] < 1)
        fields = [("temperature", temp, np.float32), ("top_k", k, np.int64), ("top_p", p, np.float32),
                  ("seed", np.asarray(seed).reshape(n), np.int64), ("counter", np.asarray(counter).reshape(n), np.int64)]
        if len(sampled_rows) != n:
            fields.append(("sampled_rows", sampled_rows, np.int64))
        if len(p_rows):
            fields.append(("top_p_rows", p_rows, np.int64))
        for name, values, dtype in fields:
            upload.add(prefix + name, values, dtype)
        return StagedSampling(prefix, int(k.max()) if n else 0)


@dataclass(frozen=True)
class StagedSampling:
    """The host half of a :class:`SamplingTensors` (see :meth:`SamplingTensors.stage`): the
    names its tensors were staged under (``prefix`` + field name; ``sampled_rows`` /
    ``top_p_rows`` absent when None) and ``max_top_k``."""

    prefix: str
    max_top_k: int

    def tensors(self, views: dict[str, torch.Tensor]) -> SamplingTensors:
        """The :class:`SamplingTensors` over the sent tensors ``views`` (``StepUpload.send``)."""
        p = self.prefix
        return SamplingTensors(views[p + "temperature"], views[p + "top_k"], views[p + "top_p"], views[p + "seed"],
                               views[p + "counter"], sampled_rows=views.get(p + "sampled_rows"),
                               top_p_rows=views.get(p + "top_p_rows"), max_top_k=self.max_top_k)
