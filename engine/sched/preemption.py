"""Preemption forensics: why a request lost its KV, for whom, and what it costs to get it back.

Every preemption is a ``RequestEvent(request_id, EventKind.PREEMPTED, detail)`` whose ``detail`` is the
compact JSON of a :class:`PreemptionInfo`, so the recording's ``events`` table answers "why was it
preempted?" with plain SQL (``json_extract(detail, '$.reason')``) and the window shows the same.
Older recordings hold free text there; :func:`preemption_info` reads both.
"""
from __future__ import annotations

import json
from typing import NamedTuple
from engine.vocab import PreemptionMode, PreemptionReason

# Why a request was preempted (``PreemptionInfo.reason``).



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
        why = {PreemptionReason.NEEDED_BLOCKS: "no free KV blocks", PreemptionReason.FOR_PRIORITY: "higher priority",
               PreemptionReason.PAUSED_KV: "KV of a paused request taken", PreemptionReason.POOL_SHRUNK: "KV pool shrunk",
               PreemptionReason.SLOTS_CUT: "max_num_seqs lowered"}.get(
                   self.reason, self.reason)
        who = f" for {self.for_request}" if self.for_request else ""
        nth = "" if self.count <= 1 else f", preemption #{self.count}"
        if self.mode == PreemptionMode.SWAP_FALLBACK:
            return f"recompute {self.num_tokens} tokens (CPU swap pool full; {why}{who}){nth}"
        mode = "swap out" if self.mode == PreemptionMode.SWAP else self.mode
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
