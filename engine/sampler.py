"""Token sampling: repetition / frequency / presence penalties (``engine.penalties``), then greedy,
temperature, top-k, top-p (nucleus; Holtzman et al., ICLR 2020), with a per-request
``torch.Generator`` so a seeded request samples the same tokens whatever shares its batch."""
from __future__ import annotations

from typing import Sequence

import torch

from engine.penalties import apply_penalties, token_ids_tensor
from engine.request import SamplingParams


class Sampler:
    """Samples one token per row of a logits matrix.

    Generators are created lazily per request id from ``SamplingParams.seed`` (or ``base_seed``
    mixed with a per-request counter) and kept until :meth:`forget`, as are the prompt token ids
    of requests with penalties (as a tensor of distinct ids, built once per request).
    """

    def __init__(self, base_seed: int = 0) -> None:
        self.base_seed = base_seed
        self._generators: dict[str, torch.Generator] = {}
        self._prompt_ids: dict[str, torch.Tensor] = {}
        self._counter = 0

    def _generator(self, request_id: str, params: SamplingParams, device: torch.device) -> torch.Generator:
        g = self._generators.get(request_id)
        if g is None:
            g = torch.Generator(device=device)
            self._counter += 1
            g.manual_seed(params.seed if params.seed is not None else self.base_seed * 1_000_003 + self._counter)
            self._generators[request_id] = g
        return g

    def forget(self, request_id: str) -> None:
        self._generators.pop(request_id, None)
        self._prompt_ids.pop(request_id, None)

    def sample(self, logits: torch.Tensor, request_ids: list[str], params: list[SamplingParams],
               prompt_token_ids: Sequence[Sequence[int]] | None = None,
               output_token_ids: Sequence[Sequence[int]] | None = None) -> list[int]:
        """``logits`` ``[N, vocab]`` (any float dtype) -> one token id per row (Python ints).

        ``prompt_token_ids[i]`` / ``output_token_ids[i]`` are row i's prompt and output so far;
        they are read only for rows whose params have penalties (then they are required: raises
        ``ValueError`` without them)."""
        logits = self._penalized(logits, request_ids, params, prompt_token_ids, output_token_ids)
        out = logits.argmax(dim=-1).tolist()
        for i, (rid, p) in enumerate(zip(request_ids, params)):
            if not p.is_greedy:
                out[i] = self._sample_row(logits[i].float(), p, self._generator(rid, p, logits.device))
        return out

    def _penalized(self, logits: torch.Tensor, request_ids: list[str], params: list[SamplingParams],
                   prompts: Sequence[Sequence[int]] | None,
                   outputs: Sequence[Sequence[int]] | None) -> torch.Tensor:
        """``logits`` with the penalties of the rows that have any applied (one batched call over
        those rows); ``logits`` itself when no row has penalties."""
        rows = [i for i, p in enumerate(params) if p.has_penalties]
        if not rows:
            return logits
        if prompts is None or outputs is None:
            raise ValueError("sampling penalties need each request's prompt and output token ids")
        ps = [params[i] for i in rows]
        every_row = len(rows) == len(params)
        # One copy of what is penalized: the whole matrix, or the selected rows (indexing copies).
        sub = logits if every_row else logits[rows].float()
        penalized = apply_penalties(
            sub, [self._prompt_tensor(request_ids[i], prompts[i]) for i in rows],
            [token_ids_tensor(outputs[i]) for i in rows], [p.repetition_penalty for p in ps],
            [p.frequency_penalty for p in ps], [p.presence_penalty for p in ps], inplace=not every_row)
        if every_row:
            return penalized
        logits = logits.to(torch.float32, copy=True)     # the caller's tensor stays as it was
        logits[rows] = penalized
        return logits

    def _prompt_tensor(self, request_id: str, prompt: Sequence[int]) -> torch.Tensor:
        t = self._prompt_ids.get(request_id)
        if t is None:
            t = self._prompt_ids[request_id] = torch.unique(token_ids_tensor(prompt))
        return t

    @staticmethod
    def _sample_row(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> int:
        logits = logits / p.temperature
        if p.top_k and p.top_k < logits.numel():
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if p.top_p < 1.0:
            sp, idx = torch.sort(probs, descending=True)
            keep = sp.cumsum(0) - sp < p.top_p          # always keeps the most likely token
            sp = sp * keep
            return int(idx[torch.multinomial(sp / sp.sum(), 1, generator=gen)])
        return int(torch.multinomial(probs, 1, generator=gen))
