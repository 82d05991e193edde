"""Prefix-cache explainer: how much of a request's prefix a lookup found cached, and why the match
stopped where it did ("why is my prefix-cache hit rate 0%?").

At each admission with prefix caching on, the scheduler records a
``RequestEvent(request_id, EventKind.PREFIX_CACHE, detail)`` whose detail is the compact JSON of a
:class:`PrefixMatch`; the window lists it in the request inspector, live and in replay, and SQL can
read it (``json_extract(detail, '$.stop')``). In each step a waiting request fails admission it
records what its lookup found as an ``EventKind.PREFIX_CACHE_WAITING`` event (the detail's
``not_admitted`` naming the reason), when that differs from the last one recorded
since it began waiting: why a request with a cached prefix still waits. The block-level reasons follow from the chained
hashes (vLLM v1's prefix caching): block ``k`` can only hit if blocks ``0..k-1`` did.
"""
from __future__ import annotations

import json
from typing import NamedTuple

from engine.plural import plural


STOP_ALL = "all_matched"           # every block a lookup may use was cached
STOP_SHORT = "shorter_than_block"  # fewer than block_size + 1 tokens: no block may be looked up
STOP_DIFFERS = "block_differs"     # block k's chained hash was not cached: its tokens (or an
                                   # earlier block's) differ from anything computed and kept
STOP_EVICTED = "block_evicted"     # block k was cached but evicted (its block reused) at a step


class PrefixMatch(NamedTuple):
    """One prefix-cache lookup at admission: ``num_matched_blocks`` of the
    ``num_lookup_blocks`` whole blocks a lookup may use (``(num_tokens - 1) // block_size``: the
    last token is always computed) hit, covering ``num_matched_tokens`` tokens; ``stop`` says why
    it ended (``STOP_*``), ``at_token`` is the first token of the block that missed (-1 if none)
    and ``evicted_step`` the step that evicted that block (-1 unless ``stop`` is
    :data:`STOP_EVICTED`). ``not_admitted`` is the reason (an ``engine.vocab.NotAdmittedReason``) a
    waiting request's lookup did not lead to an admission; empty at an admission."""

    num_matched_blocks: int
    num_lookup_blocks: int
    num_matched_tokens: int
    stop: str
    at_token: int = -1
    evicted_step: int = -1
    not_admitted: str = ""

    def to_detail(self) -> str:
        d = {"blocks": self.num_matched_blocks, "of": self.num_lookup_blocks,
             "tokens": self.num_matched_tokens, "stop": self.stop,
             "at_token": self.at_token, "evicted_step": self.evicted_step}
        if self.not_admitted:
            d["not_admitted"] = self.not_admitted
        return json.dumps(d, separators=(",", ":"))

    def describe(self) -> str:
        """One line for people, e.g. 'prefix cache: 3 of 7 blocks hit (48 tokens); block 4
        (tokens 48..63) was evicted at step 120', led by 'still waiting (no_free_blocks): ' for
        the lookup of a request that was not admitted."""
        line = self._describe()
        if self.not_admitted:
            return f"still waiting ({self.not_admitted}) with {line}"
        return line

    def _describe(self) -> str:
        head = (f"prefix cache: {self.num_matched_blocks} of {plural(self.num_lookup_blocks, 'block')} hit "
                f"({plural(self.num_matched_tokens, 'token')})")
        if self.stop == STOP_SHORT:
            return "prefix cache: prompt shorter than one block + 1 token, nothing to look up"
        if self.stop == STOP_ALL:
            return head + "; every block it could use was cached"
        k = self.num_matched_blocks
        where = f"block {k + 1} (from token {self.at_token})"
        if self.stop == STOP_EVICTED:
            return f"{head}; {where} was cached but evicted at step {self.evicted_step}"
        return f"{head}; {where} differs from every cached block"


def prefix_match(detail: str) -> PrefixMatch | None:
    """The :class:`PrefixMatch` of a ``prefix_cache`` event's detail, or None if damaged."""
    try:
        d = json.loads(detail)
        return PrefixMatch(int(d["blocks"]), int(d["of"]), int(d["tokens"]), str(d["stop"]),
                           int(d.get("at_token", -1)), int(d.get("evicted_step", -1)),
                           str(d.get("not_admitted", "")))
    except (ValueError, KeyError, TypeError):
        return None


def describe_detail(detail: str) -> str:
    """The line for a ``prefix_cache`` event's detail (the window's explainer hook)."""
    m = prefix_match(detail)
    return m.describe() if m is not None else f"prefix cache: {detail}"
