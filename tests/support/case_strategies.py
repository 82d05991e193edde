"""A hypothesis strategy for scheduler cases in the data format of
``tests/data/cases/scheduler-cases.json`` (see ``case_runner``): engine knobs around the cases'
edges (block sizes 1-16, caches from one block up, token budgets below a block, chunked prefill
on and off, every policy, swap and recompute preemption, prefix caching), requests arriving over
the first steps with prompts that are new or ``same_as`` / ``prefix_of`` / extend an earlier one
(prefix-cache sharing chains), one-token prompts, zero ``max_tokens``, parallel sampling, and
pauses, resumes and aborts at arbitrary steps (mid-prefill chunk, while swapped, the step a
request finishes)."""
from __future__ import annotations

from hypothesis import strategies as st

from engine.config import POLICIES


def rare(draw) -> bool:
    """True about one draw in eight: the edges (empty prompts, zero ``max_tokens``, a tiny
    ``max_model_len``) that would otherwise reject a request in nearly every case."""
    return draw(st.sampled_from(range(8))) == 7


@st.composite
def knobs(draw) -> dict:
    """An ``EngineConfig`` as a case's ``config`` dict (valid by construction)."""
    chunked = draw(st.booleans())
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    cache_tokens = draw(st.integers(8, 48) if rare(draw) else st.integers(48, 192))
    max_model_len = draw(st.integers(8, 64) if rare(draw) else st.integers(64, 200))
    swap = draw(st.booleans())
    return {
        "block_size": block_size,
        "num_gpu_blocks": max(1, cache_tokens // block_size),
        "max_model_len": max_model_len,
        "max_num_seqs": draw(st.integers(1, 8)),
        # with chunked prefill: budgets from 1 token (below a block, below a prompt) up
        "max_num_batched_tokens": (draw(st.integers(1, 128)) if chunked
                                   else draw(st.integers(max_model_len, max_model_len + 32))),
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 1, 4, 16, 48])),
        "policy": draw(st.sampled_from(POLICIES)),
        "preemption_mode": "swap" if swap else "recompute",
        "num_cpu_blocks": draw(st.integers(1, max(1, 64 // block_size))) if swap else 0,
        "enable_prefix_caching": draw(st.booleans()),
    }


@st.composite
def prompt_of(draw, index: int) -> dict:
    """Request ``index``'s prompt: ``prompt_len`` (its own tokens; 0 and 1 included) or, when
    there is an earlier request, a phrase sharing a prefix with it."""
    kind = draw(st.sampled_from(["own", "own", "same_as", "prefix_of", "extends"] if index else ["own"]))
    if kind == "own":
        return {"prompt_len": draw(st.integers(0, 2) if rare(draw) else st.integers(3, 64))}
    j = draw(st.integers(0, index - 1))
    if kind == "same_as":
        return {"prompt": f"same_as R{j}"}
    if kind == "prefix_of":
        return {"prompt": f"prefix_of R{j} {draw(st.integers(1, 48))} tokens + {draw(st.integers(0, 24))} new"}
    return {"prompt": f"R{j} + {draw(st.integers(1, 24))} tokens"}


@st.composite
def cases(draw, max_requests: int = 8) -> dict:
    """A whole case: ``config``, ``requests`` and (sometimes) case-level ``actions``."""
    config = draw(knobs())
    policy = config["policy"]
    requests = []
    num = draw(st.integers(1, max_requests))
    for i in range(num):
        r = {"id": f"R{i}", "arrive_step": draw(st.integers(0, 12)), **draw(prompt_of(i)),
             "max_tokens": draw(st.integers(0, 1) if rare(draw) else st.integers(2, 40))}
        if policy == "priority":
            r["priority"] = draw(st.integers(0, 3))
        n = draw(st.sampled_from([1, 1, 1, 1, 2, 3]))
        if n > 1:
            r["n"] = n
            if draw(st.booleans()):
                r["seed"] = draw(st.integers(0, 50))
        for kind in ("pause", "resume", "abort"):
            if draw(st.integers(0, 3)) == 0:
                r[f"{kind}_step"] = r["arrive_step"] + draw(st.integers(0, 20))
        requests.append(r)
    ids = [r["id"] for r in requests]
    kinds = {"fcfs": ["move_to_front", "max_num_seqs"], "priority": ["set_priority", "max_num_seqs"],
             "static": ["max_num_seqs"]}[policy]
    actions = draw(st.lists(st.fixed_dictionaries({
        "step": st.integers(0, 30), "kind": st.sampled_from(kinds), "id": st.sampled_from(ids),
        "value": st.integers(1, 6)}), max_size=2))
    return {"id": "generated", "kind": "generated", "config": config, "requests": requests,
            "actions": actions}
