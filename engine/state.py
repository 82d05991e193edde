"""EngineState: the immutable picture of the engine after a step, shared by live view and replay.

The UI draws only ``EngineState`` and ``StepRecord`` objects, so it cannot tell live from replay.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterable, Mapping

from engine.outputs import RequestView, StepRecord

_QUEUE_OF = {"WAITING": "waiting", "PREEMPTED": "waiting", "RUNNING": "running", "PAUSED": "paused"}


@dataclass(frozen=True)
class BlockCell:
    """One physical KV block as the block map shows it: owner request (None = free) and fill
    (tokens with KV written, 0 .. block_size)."""

    block_id: int
    request_id: str | None
    num_tokens: int


@dataclass(frozen=True)
class EngineState:
    """State after step ``step`` (-1 = before the first step).

    ``requests`` maps request id -> :class:`RequestView` for every request the engine has seen,
    in arrival order. ``num_total_blocks``/``block_size``/``max_num_seqs`` come from the config.
    """

    step: int
    clock: float
    num_total_blocks: int
    block_size: int
    max_num_seqs: int
    requests: Mapping[str, RequestView] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.requests, MappingProxyType):
            object.__setattr__(self, "requests", MappingProxyType(dict(self.requests)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EngineState):
            return NotImplemented
        return (self.step, self.clock, self.num_total_blocks, self.block_size, self.max_num_seqs,
                list(self.requests.items())) == (
            other.step, other.clock, other.num_total_blocks, other.block_size, other.max_num_seqs,
            list(other.requests.items()))

    __hash__ = None  # type: ignore[assignment]

    # --- queues -------------------------------------------------------------------------
    def queue(self, name: str) -> list[RequestView]:
        """Requests in queue ``name``: waiting (incl. preempted), running, paused or finished."""
        if name == "finished":
            return [r for r in self.requests.values() if r.is_finished]
        return [r for r in self.requests.values() if _QUEUE_OF.get(r.status) == name]

    @property
    def waiting(self) -> list[RequestView]:
        return self.queue("waiting")

    @property
    def running(self) -> list[RequestView]:
        return self.queue("running")

    @property
    def paused(self) -> list[RequestView]:
        return self.queue("paused")

    @property
    def finished(self) -> list[RequestView]:
        return self.queue("finished")

    # --- KV cache -----------------------------------------------------------------------
    def block_map(self) -> list[BlockCell]:
        """One cell per physical block, in block-id order. A block's fill is the part of the
        owner's ``num_computed_tokens`` that falls into it."""
        owner: dict[int, tuple[str, int]] = {}
        bs = self.block_size
        for r in self.requests.values():
            if r.is_finished:
                continue
            for i, b in enumerate(r.block_ids):
                owner[b] = (r.request_id, max(0, min(bs, r.num_computed_tokens - i * bs)))
        return [BlockCell(b, *owner.get(b, (None, 0))) for b in range(self.num_total_blocks)]

    @property
    def num_used_blocks(self) -> int:
        return len({b for r in self.requests.values() if not r.is_finished for b in r.block_ids})

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of physical blocks held by live requests, in [0, 1]."""
        return self.num_used_blocks / self.num_total_blocks if self.num_total_blocks else 0.0

    def slots(self) -> list[str | None]:
        """Request id in each batch slot (None = idle), length ``max_num_seqs``."""
        out: list[str | None] = [None] * self.max_num_seqs
        for r in self.running:
            if r.slot is not None and 0 <= r.slot < self.max_num_seqs:
                out[r.slot] = r.request_id
        return out

    # --- evolution ----------------------------------------------------------------------
    def with_views(self, views: Iterable[RequestView], step: int, clock: float) -> "EngineState":
        """A new state at ``step`` with ``views`` replacing (or adding) requests."""
        reqs = dict(self.requests)
        for v in views:
            reqs[v.request_id] = v
        return replace(self, step=step, clock=clock, requests=reqs)

    def apply(self, record: StepRecord) -> "EngineState":
        """The state after ``record``'s step, given this state before it."""
        return self.with_views(record.changed, record.step, record.clock)
