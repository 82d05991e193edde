"""The anchor workload of the benchmarks (``../shared/bench/README.md``), drawn exactly as its
peer script ``hf_peer.py`` draws it, so every engine sees the same requests and token ids.

With ``random.Random(0)``, for each request in order: prompt length ``randint(64, 1024)``, output
length ``min(512, max(8, int(expovariate(1/160))))``, then its prompt tokens ``randint(10,
vocab_size - 10)`` each. All arrive at t=0; EOS is off (every request makes its output length).
For the Llama-3.2-1B vocabulary (128,256) and 512 requests: 272,018 prompt and 77,888 output tokens.
"""
from __future__ import annotations

import random

from recordings.workloads.workload import WorkloadRequest

ANCHOR_NUM_REQUESTS = 512


def anchor_requests(vocab_size: int, num_requests: int = ANCHOR_NUM_REQUESTS) -> list[WorkloadRequest]:
    """The first ``num_requests`` anchor requests, ids ``anchor-<i>``. Raises ``ValueError`` for
    ``num_requests`` < 1 or a vocabulary of at most 20 ids (token ids are drawn in [10, vocab - 10])."""
    if num_requests < 1:
        raise ValueError(f"num_requests must be >= 1, got {num_requests}")
    if vocab_size <= 20:
        raise ValueError(f"vocab_size must be > 20, got {vocab_size}")
    rng = random.Random(0)
    out = []
    for i in range(num_requests):
        prompt_len = rng.randint(64, 1024)
        output_len = min(512, max(8, int(rng.expovariate(1 / 160))))
        prompt = [rng.randint(10, vocab_size - 10) for _ in range(prompt_len)]
        out.append(WorkloadRequest(request_id=f"anchor-{i}", arrival_s=0.0, prompt_text=None,
                                   prompt_token_ids=prompt, max_tokens=output_len, source_line=i + 1))
    return out


def anchor_info(requests: list[WorkloadRequest]) -> dict:
    """The workload's provenance for a recording (``RunInfo.trace``)."""
    return {"name": "anchor", "format": "anchor (../shared/bench/README.md)", "num_rows": len(requests),
            "num_malformed_rows": 0, "seed": 0,
            "scaling": [f"first {len(requests)} of the anchor's {ANCHOR_NUM_REQUESTS} requests, all at t=0, EOS off"],
            "prompt_tokens": sum(len(r.prompt_token_ids) for r in requests),
            "output_tokens": sum(r.max_tokens for r in requests)}
