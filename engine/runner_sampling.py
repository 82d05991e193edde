"""The model runner's sampling: one batched call per step over the rows that sample, with every
parameter read from the runner's :class:`engine.input_batch.InputBatch` columns by one numpy
index (no ``SamplingParams`` objects, no per-request Python, nothing kept per request here).

Penalties first (``engine.penalties.apply_penalties_pairs`` on the (row, token) pairs of the
penalized rows, built from the batch's token rows with numpy), then
``Sampler.sample_tensors`` with the rows' seeds (set once when each request was added) and
counters (each row's number of output tokens so far), so a request's draws depend only on its
logits, parameters, seed and position in its output: not on its batch, and not on whether it was
preempted and recomputed. vLLM v1 splits the same way (its ``InputBatch`` builds
``SamplingMetadata`` from per-row arrays; its ``Sampler`` only reads tensors).
"""
from __future__ import annotations

import numpy as np
import torch

from engine.input_batch import InputBatch
from engine.penalties import apply_penalties_pairs
from engine.sampler import Sampler, penalize_rows
from engine.sampling_tensors import SamplingTensors


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


def sample_rows(logits: torch.Tensor, batch: InputBatch, rows: np.ndarray) -> torch.Tensor:
    """One token per row of ``logits`` ``[S, vocab]`` (any float dtype; row i belongs to batch
    row ``rows[i]``, int64 [S]; parallel sampling's further sequences are rows of their own,
    their logits a copy of their head's): ``int64 [S]`` on ``logits``' device, not read back
    (the caller syncs once).

    Penalties (:func:`penalized_rows`), then one ``Sampler.sample_tensors`` call whose
    :class:`SamplingTensors` come from the rows' columns (``temperature``, ``top_k``,
    ``top_p``, ``seed``) and ``InputBatch.sampling_counters``. A batch with no sampled row
    takes the argmax directly (what ``sample_tensors`` does then, without building tensors).
    """
    logits = penalized_rows(logits, batch, rows)
    temperature = batch.temperature[rows]
    if not (temperature > 0).any():
        return logits.argmax(dim=-1)
    st = SamplingTensors.from_arrays(temperature, batch.top_k[rows], batch.top_p[rows], batch.seed[rows],
                                     batch.sampling_counters(rows), logits.device)
    return Sampler.sample_tensors(logits, st)
