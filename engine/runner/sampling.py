"""The model runner's sampling: one batched call per step over the rows that sample, with every
parameter read from the runner's :class:`engine.runner.input_batch.InputBatch` columns by one numpy
index (no ``SamplingParams`` objects, no per-request Python, nothing kept per request here).

Penalties first (``engine.runner.penalties.apply_penalties_pairs`` on the (row, token) pairs of the
penalized rows, built from the batch's token rows with numpy), then
``Sampler.sample_tensors`` with the rows' seeds (set once when each request was added) and
counters (each row's number of output tokens so far), so a request's draws depend only on its
logits, parameters, seed and position in its output: not on its batch, and not on whether it was
preempted and recomputed. vLLM v1 splits the same way (its ``InputBatch`` builds
``SamplingMetadata`` from per-row arrays; its ``Sampler`` only reads tensors).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.runner.input_batch import InputBatch
from engine.runner.penalties import apply_penalties_pairs
from engine.runner.sampler import Sampler, penalize_rows
from engine.runner.buffers import StepUpload
from engine.runner.sampling_tensors import SamplingTensors, StagedSampling
from engine.sequence_group import parallel_sample_rows


def penalized_rows(logits: torch.Tensor, batch: InputBatch, rows: np.ndarray) -> torch.Tensor:
    """``logits`` ``[S, vocab]`` (row i belongs to batch row ``rows[i]``, int64 [S]) with the
    penalties of the rows that have any applied, as one batched call (a float32 copy; the
    caller's tensor is not modified); ``logits`` itself when none has. Raises ``ValueError``
    when a seen token id is outside the vocabulary."""
    rep, freq, pres = (batch.repetition_penalty[rows], batch.frequency_penalty[rows],
                       batch.presence_penalty[rows])
    sel = np.flatnonzero((rep != 1) | (freq != 0) | (pres != 0))
    if not len(sel):
        return logits
    which = rows[sel]
    out_i, out_ids = batch.token_pairs(which, prompt=False)
    prompt_i, prompt_ids = batch.token_pairs(which, prompt=True)
    return penalize_rows(logits, sel, lambda sub, inplace: apply_penalties_pairs(
        sub, torch.from_numpy(out_i), torch.from_numpy(out_ids), torch.from_numpy(prompt_i),
        torch.from_numpy(prompt_ids), rep[sel], freq[sel], pres[sel], inplace=inplace))


def stage_sampling(upload: StepUpload, batch: InputBatch, rows: np.ndarray) -> StagedSampling | None:
    """Add the sampling parameters of batch rows ``rows`` (int64 [S]) to the step's ``upload``
    (``temperature``, ``top_k``, ``top_p``, ``seed`` columns and ``InputBatch.sampling_counters``,
    one numpy index each; see ``SamplingTensors.stage``), or nothing and None when no row samples
    (the step takes the argmax). Raises what ``SamplingTensors.stage`` raises."""
    temperature = batch.temperature[rows]
    if not (temperature > 0).any():
        return None
    return SamplingTensors.stage(upload, temperature, batch.top_k[rows], batch.top_p[rows], batch.seed[rows],
                                 batch.sampling_counters(rows))


def sample_rows(logits: torch.Tensor, batch: InputBatch, rows: np.ndarray,
                st: SamplingTensors | None = None) -> torch.Tensor:
    """One token per row of ``logits`` ``[S, vocab]`` (any float dtype; row i belongs to batch
    row ``rows[i]``, int64 [S]; parallel sampling's further sequences are rows of their own,
    their logits a copy of their head's): ``int64 [S]`` on ``logits``' device, not read back
    (the caller syncs once).

    Penalties (:func:`penalized_rows`), then one ``Sampler.sample_tensors`` call over ``st``,
    the rows' parameters already on the device (the runner stages them with the step's inputs,
    :func:`stage_sampling`); when ``st`` is None they are staged and sent here, in one copy. A
    batch with no sampled row takes the argmax directly (what ``sample_tensors`` does then,
    without building tensors).
    """
    logits = penalized_rows(logits, batch, rows)
    if st is None:
        upload = StepUpload(logits.device, capacity_bytes=64 * max(1, len(rows)), pin=False)
        staged = stage_sampling(upload, batch, rows)
        if staged is None:
            return logits.argmax(dim=-1)
        st = staged.tensors(upload.send())
    return Sampler.sample_tensors(logits, st)


@dataclass(frozen=True)
class SamplePlan:
    """Who samples in a step, decided before its forward pass so the parameters travel with the
    step's inputs: ``rows`` int64 [S'] the batch rows (the requests whose chunk ends their known
    tokens, then parallel sampling's further sequences), ``req_ids`` their ids, ``staged`` their
    staged parameters (None: all greedy), ``num_heads`` how many of the rows have logits of
    their own (the rest take a copy of their head's row, staged as ``parallel_src``)."""

    rows: np.ndarray
    req_ids: list[str]
    staged: StagedSampling | None
    num_heads: int

    @classmethod
    def stage(cls, upload: StepUpload, batch: InputBatch, rows: np.ndarray, parallel_samples) -> "SamplePlan":
        """The plan for the sampling batch rows ``rows`` (int64 [S]) and the scheduler's
        ``parallel_samples`` (``(head id, further sequence ids)`` pairs), its index and
        parameters added to ``upload``. Raises ``KeyError`` for a parallel sample whose head does
        not sample (see ``engine.sequence_group.parallel_sample_rows``)."""
        ids = [batch.req_ids[r] for r in rows.tolist()]
        heads = len(ids)
        if parallel_samples:            # further sequences sample from their head's last row
            extra = parallel_sample_rows(parallel_samples, ids)
            upload.add("parallel_src", [i for i, _ in extra], np.int64)
            ids += [rid for _, rid in extra]
            rows = np.concatenate([rows, np.fromiter((batch.req_id_to_index[rid] for _, rid in extra),
                                                     dtype=np.int64, count=len(extra))])
        return cls(rows, ids, stage_sampling(upload, batch, rows), heads)

    def sample(self, logits: torch.Tensor, batch: InputBatch, views: dict[str, torch.Tensor]) -> torch.Tensor:
        """One token per planned row (``int64 [S']``, on the device, not read back) from the
        heads' ``logits`` ``[S, vocab]`` and the step's sent tensors ``views``."""
        if len(self.rows) > self.num_heads:
            logits = torch.cat([logits, logits[views["parallel_src"]]])
        st = self.staged.tensors(views) if self.staged is not None else None
        return sample_rows(logits, batch, self.rows, st)
