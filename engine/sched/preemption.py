"""Preemption forensics: why a request lost its KV, for whom, and what it costs to get it back.

Every preemption is a ``RequestEvent(request_id, "preempted", detail)`` whose ``detail`` is the
compact JSON of a :class:`PreemptionInfo`, so the recording's ``events`` table answers "why was it
preempted?" with plain SQL (``json_extract(detail, '$.reason')``) and the window shows the same.
Older recordings hold free text there; :func:`preemption_info` reads both.
"""
from __future__ import annotations

import json
from typing import NamedTuple

# Why a request was preempted (``PreemptionInfo.reason``).
NEEDED_BLOCKS = "no_free_blocks"     # a running request needed a block and none was free
FOR_PRIORITY = "priority"            # made room for a waiting request of strictly higher priority
PAUSED_KV = "paused_kv_taken"        # a user-paused request's KV was taken so others can run
POOL_SHRUNK = "kv_pool_shrunk"       # the user shrank the usable KV pool
SLOTS_CUT = "max_num_seqs_lowered"   # the user lowered max_num_seqs below its batch slot

MODE_RECOMPUTE = "recompute"
MODE_SWAP = "swap"
MODE_SWAP_FALLBACK = "recompute_fallback"   # swap mode, but the CPU swap pool had no room


class PreemptionInfo(NamedTuple):
    """One preemption: ``mode`` (``recompute``, ``swap``, or ``recompute_fallback`` when swap
    mode found the CPU pool full), ``reason`` (one of the constants above),
    ``for_request`` (the request it made room for, '' if none), ``num_tokens`` (tokens of KV
    dropped, which a recompute computes again, or copied to the CPU by a swap) and ``count`` (this request's preemptions so far,
    this one included)."""

    mode: str
    reason: str
    for_request: str
    num_tokens: int
    count: int

    def to_detail(self) -> str:
        """The event detail: compact JSON."""
        return json.dumps({"mode": self.mode, "reason": self.reason, "for": self.for_request,
                           "tokens": self.num_tokens, "count": self.count}, separators=(",", ":"))

    def describe(self) -> str:
        """One line for people: 'recompute 120 tokens (no free blocks for R3), 2nd time'."""
        why = {NEEDED_BLOCKS: "no free KV blocks", FOR_PRIORITY: "higher priority",
               PAUSED_KV: "KV of a paused request taken", POOL_SHRUNK: "KV pool shrunk",
               SLOTS_CUT: "max_num_seqs lowered"}.get(
                   self.reason, self.reason)
        who = f" for {self.for_request}" if self.for_request else ""
        nth = "" if self.count <= 1 else f", preemption #{self.count}"
        if self.mode == MODE_SWAP_FALLBACK:
            return f"recompute {self.num_tokens} tokens (CPU swap pool full; {why}{who}){nth}"
        mode = "swap out" if self.mode == MODE_SWAP else self.mode
        return f"{mode} {self.num_tokens} tokens ({why}{who}){nth}"


def preemption_info(detail: str) -> PreemptionInfo | None:
    """The :class:`PreemptionInfo` of a ``preempted`` event's detail, or None for free text
    (recordings made before forensics) or damaged JSON."""
    if not detail.startswith("{"):
        return None
    try:
        d = json.loads(detail)
        return PreemptionInfo(str(d["mode"]), str(d["reason"]), str(d.get("for") or ""),
                              int(d["tokens"]), int(d.get("count", 0)))
    except (ValueError, KeyError, TypeError):
        return None
