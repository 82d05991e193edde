"""Token sampling: greedy, temperature, top-k, top-p (nucleus; Holtzman et al., ICLR 2020), with a
per-request ``torch.Generator`` so a seeded request samples the same tokens whatever shares its batch."""
from __future__ import annotations

import torch

from engine.request import SamplingParams


class Sampler:
    """Samples one token per row of a logits matrix.

    Generators are created lazily per request id from ``SamplingParams.seed`` (or ``base_seed``
    mixed with a per-request counter) and kept until :meth:`forget`.
    """

    def __init__(self, base_seed: int = 0) -> None:
        self.base_seed = base_seed
        self._generators: dict[str, torch.Generator] = {}
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

    def sample(self, logits: torch.Tensor, request_ids: list[str],
               params: list[SamplingParams]) -> list[int]:
        """``logits`` ``[N, vocab]`` (any float dtype) -> one token id per row (Python ints)."""
        out = logits.argmax(dim=-1).tolist()
        for i, (rid, p) in enumerate(zip(request_ids, params)):
            if not p.is_greedy:
                out[i] = self._sample_row(logits[i].float(), p, self._generator(rid, p, logits.device))
        return out

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
