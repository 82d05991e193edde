"""Repetition, frequency and presence penalties on a batch of logits, with vLLM's semantics.

Applied before temperature / top-k / top-p (vLLM v1 applies them in the same place), so they also
steer greedy decoding:

- ``repetition_penalty`` r > 0 (Keskar et al., "CTRL", 2019, as vLLM and transformers apply it): for
  every token seen in the prompt OR the output so far, a positive logit is divided by r and a
  negative one multiplied by r (r > 1 makes seen tokens less likely whatever their sign).
- ``frequency_penalty`` f and ``presence_penalty`` p (OpenAI API semantics), over the OUTPUT tokens
  only: ``logit -= f * count(token in output) + p * (count > 0)``.

Repetition first, then frequency and presence. Everything is batched: one gather of the logits of
every (row, token) pair seen in the batch, the penalties on those values, one scatter back; no
Python work per token.
"""
from __future__ import annotations

from typing import Sequence

import torch


def token_ids_tensor(token_ids: Sequence[int]) -> torch.Tensor:
    """A 1-D int64 CPU tensor of ``token_ids`` (a list, or a compact ``array('i')``)."""
    if isinstance(token_ids, torch.Tensor):
        return token_ids.to(dtype=torch.long, device="cpu").reshape(-1)
    try:                                      # array('i') and other buffers: no per-item loop
        buf = memoryview(token_ids)
    except TypeError:
        return torch.tensor(list(token_ids), dtype=torch.long)
    if buf.format in ("i", "l", "q") and buf.ndim == 1 and len(buf):
        return torch.frombuffer(bytearray(buf), dtype={4: torch.int32, 8: torch.int64}[buf.itemsize]).long()
    return torch.tensor(buf.tolist(), dtype=torch.long)


def _flatten(rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row index, token id) of every id in ``rows`` (1-D int64 CPU tensors), as two flat tensors."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    flat = torch.cat(list(rows)) if rows else torch.zeros(0, dtype=torch.long)
    return torch.repeat_interleave(torch.arange(len(rows)), lengths), flat


def apply_penalties(logits: torch.Tensor, prompt_ids: Sequence[torch.Tensor],
                    output_ids: Sequence[torch.Tensor], repetition_penalty: Sequence[float],
                    frequency_penalty: Sequence[float], presence_penalty: Sequence[float], *,
                    inplace: bool = False) -> torch.Tensor:
    """Penalized ``logits``: a float32 copy on the same device, or with ``inplace`` (float32
    ``logits`` only) ``logits`` itself, modified.

    ``logits``: ``[N, vocab]``, any float dtype, any device. ``prompt_ids[i]`` / ``output_ids[i]``: row i's prompt and
    output-so-far token ids, 1-D int64 CPU tensors (see :func:`token_ids_tensor`; duplicates in the
    prompt do not matter). The three penalty sequences have one value per row (1.0, 0.0, 0.0 leave
    a row unchanged). Raises ``ValueError`` if the lengths disagree or a token id is outside the
    vocabulary.

    Only the (row, token) pairs seen in a prompt or an output are touched: their keys
    ``row * vocab + token`` are made unique (with the output count of each) on the CPU, then one
    gather reads those logits, the penalties are applied to them, and one scatter writes them back.
    The work is O(prompt + output tokens) beyond the copy, not O(N * vocab).
    """
    n = logits.shape[0]
    if not (len(prompt_ids) == len(output_ids) == len(repetition_penalty) == len(frequency_penalty)
            == len(presence_penalty) == n):
        raise ValueError(f"apply_penalties: {n} logit rows but {len(prompt_ids)} prompts, "
                         f"{len(output_ids)} outputs and {len(repetition_penalty)}/"
                         f"{len(frequency_penalty)}/{len(presence_penalty)} penalty values")
    out_rows, out_ids = _flatten(output_ids)
    prompt_rows, prompt_ids_flat = _flatten(prompt_ids)
    return apply_penalties_pairs(logits, out_rows, out_ids, prompt_rows, prompt_ids_flat,
                                 repetition_penalty, frequency_penalty, presence_penalty, inplace=inplace)


def apply_penalties_pairs(logits: torch.Tensor, out_rows: torch.Tensor, out_ids: torch.Tensor,
                          prompt_rows: torch.Tensor, prompt_ids: torch.Tensor,
                          repetition_penalty: Sequence[float], frequency_penalty: Sequence[float],
                          presence_penalty: Sequence[float], *, inplace: bool = False) -> torch.Tensor:
    """:func:`apply_penalties` on flat (row, token id) pairs: ``out_rows`` / ``out_ids`` int64
    CPU ``[P_out]`` (one pair per output token so far, repeats counted), ``prompt_rows`` /
    ``prompt_ids`` int64 CPU ``[P_prompt]`` (repeats do not matter). Rows index ``logits``
    ``[N, vocab]``; the penalty values are one per row (sequences or arrays of length N). The
    model runner builds the pairs straight from its ``InputBatch`` rows with numpy; the result
    and the errors are those of :func:`apply_penalties`.
    """
    vocab = logits.shape[1]
    ids = torch.cat([out_ids, prompt_ids])
    bad = (ids < 0) | (ids >= vocab)
    if bool(bad.any()):
        raise ValueError(f"token id {int(ids[bad][0])} is outside the vocabulary [0, {vocab}): "
                         f"cannot apply sampling penalties")
    keys = torch.cat([out_rows, prompt_rows]) * vocab + ids
    seen, inverse = torch.unique(keys, return_inverse=True)          # every (row, token) seen
    counts = torch.zeros(len(seen)).index_add_(0, inverse[:len(out_ids)], torch.ones(len(out_ids)))
    dev = logits.device
    seen, counts = seen.to(dev), counts.to(dev)
    row = seen // vocab

    def per_row(values: Sequence[float]) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.float32).to(dev)[row]

    if inplace and logits.dtype != torch.float32:
        raise ValueError(f"apply_penalties(inplace=True) needs float32 logits, got {logits.dtype}")
    out = logits if inplace else logits.to(torch.float32, copy=True)
    flat = out.view(-1)
    vals = flat[seen]
    rep = per_row(repetition_penalty)
    vals = torch.where(vals > 0, vals / rep, vals * rep)
    flat[seen] = vals - per_row(frequency_penalty) * counts - per_row(presence_penalty) * (counts > 0)
    return out
