"""Repetition, frequency and presence penalties on a batch of logits, with vLLM's semantics.

Applied before temperature / top-k / top-p (vLLM v1 applies them in the same place), so they also
steer greedy decoding:

- ``repetition_penalty`` r > 0 (Keskar et al., "CTRL", 2019, as vLLM and transformers apply it): for
  every token seen in the prompt OR the output so far, a positive logit is divided by r and a
  negative one multiplied by r (r > 1 makes seen tokens less likely whatever their sign).
- ``frequency_penalty`` f and ``presence_penalty`` p (OpenAI API semantics), over the OUTPUT tokens
  only: ``logit -= f * count(token in output) + p * (count > 0)``.

Repetition first, then frequency and presence. Everything is batched: each call does one scatter
of the batch's output tokens into a ``[rows, vocab]`` count matrix and one of the prompt tokens
into a ``[rows, vocab]`` mask, then elementwise ops; no Python work per token.
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


def scatter_rows(rows: Sequence[torch.Tensor], vocab_size: int, device: torch.device,
                 accumulate: bool) -> torch.Tensor:
    """``[len(rows), vocab_size]`` float32 on ``device``: entry (i, t) is how many times token t
    occurs in ``rows[i]`` (``accumulate``) or 1.0 if it occurs at all. ``rows`` are 1-D int64 CPU
    tensors. One ``index_put_`` for the whole batch. Raises ``ValueError`` naming the first token
    id outside ``[0, vocab_size)``."""
    out = torch.zeros(len(rows), vocab_size, dtype=torch.float32, device=device)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    if not int(lengths.sum()):
        return out
    flat = torch.cat(list(rows))
    bad = (flat < 0) | (flat >= vocab_size)
    if bool(bad.any()):
        raise ValueError(f"token id {int(flat[bad][0])} is outside the vocabulary [0, {vocab_size}): "
                         f"cannot apply sampling penalties")
    row_index = torch.repeat_interleave(torch.arange(len(rows)), lengths)
    ones = torch.ones(flat.numel(), dtype=torch.float32, device=device)
    out.index_put_((row_index.to(device), flat.to(device)), ones, accumulate=accumulate)
    return out


def apply_penalties(logits: torch.Tensor, prompt_ids: Sequence[torch.Tensor],
                    output_ids: Sequence[torch.Tensor], repetition_penalty: Sequence[float],
                    frequency_penalty: Sequence[float], presence_penalty: Sequence[float]) -> torch.Tensor:
    """Penalized copy of ``logits``.

    ``logits``: ``[N, vocab]``, any float dtype, any device; the result is float32 on the same
    device (the input is not modified). ``prompt_ids[i]`` / ``output_ids[i]``: row i's prompt and
    output-so-far token ids, 1-D int64 CPU tensors (see :func:`token_ids_tensor`; duplicates in the
    prompt do not matter). The three penalty sequences have one value per row (1.0, 0.0, 0.0 leave
    a row unchanged). Raises ``ValueError`` if the lengths disagree or a token id is outside the
    vocabulary.
    """
    n, vocab = logits.shape
    if not (len(prompt_ids) == len(output_ids) == len(repetition_penalty) == len(frequency_penalty)
            == len(presence_penalty) == n):
        raise ValueError(f"apply_penalties: {n} logit rows but {len(prompt_ids)} prompts, "
                         f"{len(output_ids)} outputs and {len(repetition_penalty)}/"
                         f"{len(frequency_penalty)}/{len(presence_penalty)} penalty values")
    dev = logits.device
    logits = logits.float()
    counts = scatter_rows(output_ids, vocab, dev, accumulate=True)          # [N, V]
    in_output = counts > 0
    seen = in_output | (scatter_rows(prompt_ids, vocab, dev, accumulate=False) > 0)

    def column(values: Sequence[float]) -> torch.Tensor:
        return torch.tensor(list(values), dtype=torch.float32, device=dev).unsqueeze(1)

    rep = column(repetition_penalty)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits = torch.where(seen, penalized, logits)
    return logits - column(frequency_penalty) * counts - column(presence_penalty) * in_output
