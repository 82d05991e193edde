"""EngineState: the immutable picture of the engine after a step, shared by live view and replay.

The UI draws only ``EngineState`` and ``StepRecord`` objects, so it cannot tell live from replay.
A state holds live requests only (waiting, running, paused) as numpy columns, one row per request
in arrival order, plus the block map as two arrays over the physical blocks, plus the last few
finished requests. Its size grows with what is live, never with the run's history. States are
made by ``engine.state.timeline.StateTimeline`` (one implementation of "state + step record").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

from engine.outputs import RequestView
from engine.vocab import FINISH_REASON_OF, STATUS_CODES, RequestStatus

# Request status <-> int8 code in the ``status`` column (engine.vocab.STATUS_CODES: appended only).
STATUS_CODE: dict[str, int] = {status: i for i, status in enumerate(STATUS_CODES)}
_QUEUE_CODES = {"waiting": (STATUS_CODE[RequestStatus.WAITING], STATUS_CODE[RequestStatus.PREEMPTED]),
                "running": (STATUS_CODE[RequestStatus.RUNNING],), "paused": (STATUS_CODE[RequestStatus.PAUSED],),
                "swapped": (STATUS_CODE[RequestStatus.SWAPPED],)}

# Column name -> dtype. Times are on the engine clock; NaN = not yet; slot -1 = none.
COLUMNS: dict[str, np.dtype] = {
    "seq": np.dtype(np.int64),               # arrival number: colours, block owners
    "status": np.dtype(np.int8),
    "slot": np.dtype(np.int32),
    "arrival_step": np.dtype(np.int64),
    "arrival_time": np.dtype(np.float64),
    "num_prompt_tokens": np.dtype(np.int64),
    "max_tokens": np.dtype(np.int64),
    "num_computed_tokens": np.dtype(np.int64),
    "num_output_tokens": np.dtype(np.int64),
    "num_preemptions": np.dtype(np.int64),
    "num_blocks": np.dtype(np.int64),
    "priority": np.dtype(np.int64),          # policy priority: lower value first
    "first_token_time": np.dtype(np.float64),
    "last_token_time": np.dtype(np.float64),
    # thrash: the most tokens it ever had computed, and the tokens it computed again below that
    # (after recompute preemptions; a prefix-cache hit at re-admission is not computed again)
    "max_computed_tokens": np.dtype(np.int64),
    "num_recomputed_tokens": np.dtype(np.int64),
}
RESERVED = -2                # block_owner of a block taken out of use (the user shrank the pool)
NUM_RECENTLY_FINISHED = 64   # finished requests a state keeps for the window's "finished" table


def _opt(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def row_view(request_id: str, cols: Mapping[str, np.ndarray], i: int, *, status: str | None = None,
             error: str | None = None) -> RequestView:
    """The :class:`RequestView` of row ``i`` of ``cols`` (``status`` overrides the column)."""
    st = status if status is not None else STATUS_CODES[int(cols["status"][i])]
    n_out = int(cols["num_output_tokens"][i])
    first, last = float(cols["first_token_time"][i]), float(cols["last_token_time"][i])
    arrival = float(cols["arrival_time"][i])
    slot = int(cols["slot"][i])
    return RequestView(
        request_id=request_id, status=st, arrival_step=int(cols["arrival_step"][i]),
        arrival_time=arrival, num_prompt_tokens=int(cols["num_prompt_tokens"][i]),
        num_output_tokens=n_out, num_computed_tokens=int(cols["num_computed_tokens"][i]),
        max_tokens=int(cols["max_tokens"][i]), slot=None if slot < 0 else slot,
        num_preemptions=int(cols["num_preemptions"][i]),
        ttft=None if math.isnan(first) else first - arrival,
        mean_itl=(last - first) / (n_out - 1) if n_out >= 2 else None,
        finish_reason=FINISH_REASON_OF.get(st), error=error,
        num_recomputed_tokens=int(cols["num_recomputed_tokens"][i]))


@dataclass(frozen=True)
class BlockCell:
    """One physical KV block: owner request (None = free) and fill (tokens with KV, 0..block_size)."""

    block_id: int
    request_id: str | None
    num_tokens: int


class EngineState:
    """State after step ``step`` (-1 = before the first step). Immutable: never change the arrays.

    ``request_ids`` (live requests, arrival order) and ``columns`` (name -> array of the same
    length, see :data:`COLUMNS`) describe the live requests. ``block_owner[b]`` is the ``seq`` of
    the request holding physical block ``b`` (-1 = free; for a block shared by prefix caching
    or by the sequences of a parallel-sampling group, its oldest holder) and ``block_pos[b]`` its index in every holder's block table (a shared
    block is the same prefix block for all; a cached-free block keeps it). The other holders of
    shared blocks are the pairs ``(shared_seq[k], shared_block[k])`` (sorted; empty without
    sharing). ``block_hash[b]`` is the prefix hash a cached block is tagged with (0 = none): a
    block with ``block_owner`` -1 and a hash is cached-free (evictable, reusable on a hit).
    ``cpu_owner[c]`` is the ``seq`` of the swapped-out request whose KV CPU swap block ``c``
    holds (-1 = free; empty without a swap pool). A block the user took out of use (live knob
    ``num_usable_blocks``) has ``block_owner`` :data:`RESERVED` (-2).
    ``recently_finished`` keeps the final views of the last
    :data:`NUM_RECENTLY_FINISHED` finished requests, oldest first. ``next_seq`` is the arrival
    number the next request gets.
    """

    __slots__ = ("step", "clock", "num_total_blocks", "block_size", "max_num_seqs", "next_seq",
                 "request_ids", "columns", "block_owner", "block_pos", "recently_finished",
                 "block_hash", "shared_seq", "shared_block", "cpu_owner", "_rows", "_fill")

    def __init__(self, step: int, clock: float, num_total_blocks: int, block_size: int,
                 max_num_seqs: int, *, next_seq: int = 0, request_ids: tuple[str, ...] = (),
                 columns: Mapping[str, np.ndarray] | None = None,
                 block_owner: np.ndarray | None = None, block_pos: np.ndarray | None = None,
                 recently_finished: tuple[RequestView, ...] = (), block_hash: np.ndarray | None = None,
                 shared_seq: np.ndarray | None = None, shared_block: np.ndarray | None = None,
                 cpu_owner: np.ndarray | None = None) -> None:
        n = len(request_ids)
        self.step, self.clock = int(step), float(clock)
        self.num_total_blocks, self.block_size = int(num_total_blocks), int(block_size)
        self.max_num_seqs, self.next_seq = int(max_num_seqs), int(next_seq)
        self.request_ids = tuple(request_ids)
        cols = {k: np.zeros(n, dt) for k, dt in COLUMNS.items()} if columns is None else columns
        for k, dt in COLUMNS.items():
            arr = np.asarray(cols[k], dtype=dt)
            if arr.shape != (n,):
                raise ValueError(f"column {k!r} has shape {arr.shape}, expected ({n},)")
            arr.flags.writeable = False
            cols[k] = arr
        self.columns = dict(cols)
        nb = self.num_total_blocks
        self.block_owner = np.full(nb, -1, np.int64) if block_owner is None else np.asarray(block_owner, np.int64)
        self.block_pos = np.zeros(nb, np.int64) if block_pos is None else np.asarray(block_pos, np.int64)
        self.block_hash = np.zeros(nb, np.int64) if block_hash is None else np.asarray(block_hash, np.int64)
        for arr in (self.block_owner, self.block_pos, self.block_hash):
            if arr.shape != (nb,):
                raise ValueError(f"block arrays need shape ({nb},), got {arr.shape}")
            arr.flags.writeable = False
        empty = np.zeros(0, np.int64)
        self.shared_seq = empty if shared_seq is None else np.asarray(shared_seq, np.int64)
        self.shared_block = empty if shared_block is None else np.asarray(shared_block, np.int64)
        if self.shared_seq.shape != self.shared_block.shape or self.shared_seq.ndim != 1:
            raise ValueError(f"shared holdings of shapes {self.shared_seq.shape} and {self.shared_block.shape}")
        self.shared_seq.flags.writeable = self.shared_block.flags.writeable = False
        self.cpu_owner = empty if cpu_owner is None else np.asarray(cpu_owner, np.int64)
        self.cpu_owner.flags.writeable = False
        self.recently_finished = tuple(recently_finished)
        self._rows: dict[str, int] | None = None
        self._fill: np.ndarray | None = None

    # --- requests -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.request_ids)

    def row(self, request_id: str) -> int | None:
        """Row of a live request in ``columns``, or None."""
        if self._rows is None:
            self._rows = {rid: i for i, rid in enumerate(self.request_ids)}
        return self._rows.get(request_id)

    def view(self, request_id: str) -> RequestView | None:
        """The view of a live or recently finished request, or None."""
        i = self.row(request_id)
        if i is not None:
            return row_view(request_id, self.columns, i)
        for v in reversed(self.recently_finished):
            if v.request_id == request_id:
                return v
        return None

    def views(self, rows: np.ndarray | list[int] | None = None) -> list[RequestView]:
        """Views of the given rows (default: every live request), in row order."""
        idx = range(len(self)) if rows is None else rows
        return [row_view(self.request_ids[i], self.columns, int(i)) for i in idx]

    @property
    def requests(self) -> dict[str, RequestView]:
        """Every live request's view by id, in arrival order. O(live): for tests and small runs;
        views should use :meth:`queue_rows` and the columns."""
        return {v.request_id: v for v in self.views()}

    def queue_rows(self, name: str) -> np.ndarray:
        """Rows of queue ``name`` (waiting incl. preempted, running, paused), arrival order."""
        return np.flatnonzero(np.isin(self.columns["status"], _QUEUE_CODES[name]))

    def queue(self, name: str) -> list[RequestView]:
        """Views of queue ``name``; ``finished`` gives the recently finished ones."""
        if name == "finished":
            return list(self.recently_finished)
        return self.views(self.queue_rows(name))

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

    def slots(self) -> list[str | None]:
        """Request id in each batch slot (None = idle), length ``max_num_seqs``."""
        out: list[str | None] = [None] * self.max_num_seqs
        slot = self.columns["slot"]
        for i in self.queue_rows("running"):
            s = int(slot[i])
            if 0 <= s < self.max_num_seqs:
                out[s] = self.request_ids[i]
        return out

    # --- KV cache -------------------------------------------------------------------------
    def owner_rows(self) -> np.ndarray:
        """Row of each block's owner in ``columns`` (-1 = free), int64 [num_total_blocks]."""
        seq = self.columns["seq"]
        held = self.block_owner >= 0
        rows = np.full(self.num_total_blocks, -1, np.int64)
        if held.any() and len(seq):
            idx = np.searchsorted(seq, self.block_owner[held])
            rows[held] = np.minimum(idx, len(seq) - 1)
        return rows

    def block_fill(self) -> np.ndarray:
        """Tokens with KV in each block, int64 [num_total_blocks] (0 for free blocks): the part of
        the owner's ``num_computed_tokens`` that falls into it."""
        if self._fill is None:
            rows = self.owner_rows()
            held = rows >= 0
            fill = np.zeros(self.num_total_blocks, np.int64)
            ncomp = self.columns["num_computed_tokens"][rows[held]]
            fill[held] = np.clip(ncomp - self.block_pos[held] * self.block_size, 0, self.block_size)
            fill.flags.writeable = False
            self._fill = fill
        return self._fill

    def block_ids(self, request_id: str) -> tuple[int, ...]:
        """The block table of a live request (physical ids in table order); () if none."""
        i = self.row(request_id)
        if i is None:
            return ()
        seq = self.columns["seq"][i]
        blocks = np.flatnonzero(self.block_owner == seq)
        if len(self.shared_seq):
            blocks = np.concatenate([blocks, self.shared_block[self.shared_seq == seq]])
        return tuple(int(b) for b in blocks[np.argsort(self.block_pos[blocks], kind="stable")])

    def block_ref_cnt(self) -> np.ndarray:
        """Live requests holding each block, int64 [num_total_blocks] (> 1: shared by prefix
        caching; 0: free or cached-free)."""
        ref = (self.block_owner >= 0).astype(np.int64)
        if len(self.shared_block):
            ref += np.bincount(self.shared_block, minlength=self.num_total_blocks)
        return ref

    def block_holders(self, block_id: int) -> list[str]:
        """Ids of the live requests holding ``block_id``, oldest first ([] if none)."""
        seqs = [int(self.block_owner[block_id])] if self.block_owner[block_id] >= 0 else []
        seqs += self.shared_seq[self.shared_block == block_id].tolist()
        rows = np.searchsorted(self.columns["seq"], sorted(seqs))
        return [self.request_ids[int(r)] for r in rows]

    def cached_free_mask(self) -> np.ndarray:
        """bool [num_total_blocks]: blocks held by nobody that still cache a prefix."""
        return (self.block_owner < 0) & (self.block_hash != 0)

    def block_map(self) -> list[BlockCell]:
        """One cell per physical block, in block-id order (O(blocks) Python objects: for tests;
        views draw from ``block_owner`` / :meth:`block_fill`)."""
        rows, fill = self.owner_rows(), self.block_fill()
        return [BlockCell(b, self.request_ids[r] if r >= 0 else None, int(f))
                for b, (r, f) in enumerate(zip(rows.tolist(), fill.tolist()))]

    @property
    def num_used_blocks(self) -> int:
        return int(np.count_nonzero(self.block_owner >= 0))

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of physical blocks held by live requests, in [0, 1]."""
        return self.num_used_blocks / self.num_total_blocks if self.num_total_blocks else 0.0

    # --- comparison -----------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.step, self.clock, self.num_total_blocks, self.block_size, self.max_num_seqs,
                self.next_seq, self.request_ids, self.recently_finished)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EngineState):
            return NotImplemented
        return (self._key() == other._key()
                and all(np.array_equal(self.columns[k], other.columns[k],
                                       equal_nan=COLUMNS[k].kind == "f") for k in COLUMNS)
                and np.array_equal(self.block_owner, other.block_owner)
                and np.array_equal(self.block_pos, other.block_pos)
                and np.array_equal(self.block_hash, other.block_hash)
                and np.array_equal(self.shared_seq, other.shared_seq)
                and np.array_equal(self.shared_block, other.shared_block)
                and np.array_equal(self.cpu_owner, other.cpu_owner))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"EngineState(step={self.step}, clock={self.clock}, live={len(self)}, "
                f"used_blocks={self.num_used_blocks}/{self.num_total_blocks})")

    def __iter__(self) -> Iterator[str]:
        return iter(self.request_ids)
