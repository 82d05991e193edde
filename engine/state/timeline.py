"""StateTimeline: the one implementation of "state before a step + its StepRecord = state after".

The engine applies every record it makes to its own timeline and publishes snapshots; the
recording's reader starts a timeline from a keyframe (a snapshot) and applies the recorded steps.
So the live view and a replay are equal by construction (the round-trip tests check it).

Storage is columnar (numpy arrays with spare capacity, one row per request in arrival order, rows
of finished requests dropped and compacted away), so a step costs O(requests in the step) Python
work and a snapshot O(live requests) array copies: memory follows what is live, not history.
"""
from __future__ import annotations

import math
import operator
from collections import deque
from typing import Iterable, Sequence

import numpy as np

from engine.outputs import Arrival, BlockEvent, RequestEvent, StepRecord, Transition
from engine.state.state import (COLUMNS, RESERVED, NUM_RECENTLY_FINISHED, STATUS_CODE, STATUS_CODES, EngineState,
                          row_view)
from engine.vocab import BlockEventKind, EventKind, RequestStatus

_RUNNING = STATUS_CODE[RequestStatus.RUNNING]
_WAITING = STATUS_CODE[RequestStatus.WAITING]
_MIN_CAPACITY = 64
_REQUEST_ID = operator.attrgetter("request_id")
_POOL_KINDS = frozenset((BlockEventKind.RESERVED, BlockEventKind.UNRESERVED))   # the usable pool changed
_CACHE_KINDS = (BlockEventKind.HIT, BlockEventKind.CACHED, BlockEventKind.EVICTED, BlockEventKind.FORKED)   # FORKED shares as HIT


class StateTimeline:
    """The mutable state of one run, advanced one :class:`StepRecord` at a time.

    Not thread-safe: one thread applies records; :meth:`snapshot` hands immutable copies to
    others. Raises ``KeyError`` when a record names a request the state does not hold (a corrupt
    or out-of-order record) and ``ValueError`` for a block event of an unknown kind.
    """

    def __init__(self, num_total_blocks: int, block_size: int, max_num_seqs: int,
                 num_cpu_blocks: int = 0) -> None:
        self.start(EngineState(-1, 0.0, num_total_blocks, block_size, max_num_seqs,
                               cpu_owner=np.full(num_cpu_blocks, -1, np.int64)))

    @classmethod
    def from_state(cls, state: EngineState) -> "StateTimeline":
        """A timeline that continues from ``state`` (a keyframe or a snapshot)."""
        tl = cls.__new__(cls)
        tl.start(state)
        return tl

    def start(self, state: EngineState) -> None:
        """Reset to ``state``."""
        n = len(state)
        cap = max(_MIN_CAPACITY, 2 * n)
        self.step, self.clock = state.step, state.clock
        self.layout = (state.num_total_blocks, state.block_size, state.max_num_seqs)
        self.next_seq = state.next_seq
        self._cols = {k: np.zeros(cap, dt) for k, dt in COLUMNS.items()}
        for k in COLUMNS:
            self._cols[k][:n] = state.columns[k]
        self._ids: list[str | None] = list(state.request_ids)
        self._alive = np.zeros(cap, bool)
        self._alive[:n] = True
        self._row = dict(zip(state.request_ids, range(n)))
        self._n = n
        self.block_owner = state.block_owner.copy()
        self.block_pos = state.block_pos.copy()
        self.block_hash = state.block_hash.copy()
        self.cpu_owner = state.cpu_owner.copy()
        # Prefix-shared blocks: holders other than block_owner, by request and by block.
        self._extra: dict[int, dict[int, None]] = {}
        self._extra_by_block: dict[int, list[int]] = {}
        self._shared: tuple[np.ndarray, np.ndarray] | None = None    # snapshot arrays of _extra
        for seq, b in zip(state.shared_seq.tolist(), state.shared_block.tolist()):
            self._extra.setdefault(seq, {})[b] = None
            self._extra_by_block.setdefault(b, []).append(seq)
        self.finished: deque = deque(state.recently_finished, maxlen=NUM_RECENTLY_FINISHED)
        self.last_finished: list = []   # final views of the requests the last apply finished

    # --- reading ---------------------------------------------------------------------------
    @property
    def num_live(self) -> int:
        return len(self._row)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._row

    def snapshot(self) -> EngineState:
        """An immutable copy of the current state (O(live requests + blocks))."""
        n = self._n
        nb, bs, mns = self.layout
        if len(self._row) == n:            # no dead rows: copies of the slices (C speed)
            ids = tuple(self._ids[:n])
            columns = {k: c[:n].copy() for k, c in self._cols.items()}
        else:
            rows = np.flatnonzero(self._alive[:n])
            ids = tuple(map(self._ids.__getitem__, rows.tolist()))
            columns = {k: c[rows] for k, c in self._cols.items()}
        shared_seq, shared_block = self._shared_arrays()
        return EngineState(self.step, self.clock, nb, bs, mns, next_seq=self.next_seq,
                           request_ids=ids, columns=columns,
                           block_owner=self.block_owner.copy(), block_pos=self.block_pos.copy(),
                           recently_finished=tuple(self.finished),
                           block_hash=self.block_hash.copy(),
                           shared_seq=shared_seq, shared_block=shared_block,
                           cpu_owner=self.cpu_owner.copy())

    def _shared_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The further holders of shared blocks as sorted (seq, block) int64 arrays, rebuilt only
        after a hit or free changed them (O(shared holdings) numpy work then)."""
        if self._shared is None:
            seqs = list(self._extra)
            lens = [len(self._extra[q]) for q in seqs]
            blocks = np.fromiter((b for q in seqs for b in self._extra[q]), np.int64, sum(lens))
            seq = np.repeat(np.asarray(seqs, np.int64), lens)
            order = np.lexsort((blocks, seq))
            self._shared = (seq[order], blocks[order])
            for a in self._shared:
                a.flags.writeable = False
        return self._shared

    def seq_of(self, request_id: str) -> int | None:
        """Arrival number of a live request, or None."""
        i = self._row.get(request_id)
        return None if i is None else int(self._cols["seq"][i])

    def values(self, request_id: str) -> tuple[str, int, int, int, int]:
        """(status, slot, num_computed_tokens, num_output_tokens, num_preemptions) of a live
        request (slot -1 = none). Raises ``KeyError`` if it is not live."""
        i, c = self._row[request_id], self._cols
        return (STATUS_CODES[int(c["status"][i])], int(c["slot"][i]), int(c["num_computed_tokens"][i]),
                int(c["num_output_tokens"][i]), int(c["num_preemptions"][i]))

    # --- advancing -------------------------------------------------------------------------
    def apply(self, record: StepRecord) -> None:
        """Advance to the state after ``record``'s step."""
        self.apply_changes(record.arrivals, record.block_events, record.transitions,
                           record.scheduled, record.new_tokens, record.token_time, record.events,
                           record.knobs)
        self.step, self.clock = record.step, record.clock

    def apply_changes(self, arrivals: Iterable[Arrival], block_events: Iterable[BlockEvent],
                      transitions: Iterable[Transition], scheduled=(), new_tokens=(),
                      token_time: float = math.nan, events: Iterable[RequestEvent] = (),
                      knobs: Iterable[tuple[str, int]] = ()) -> None:
        """Apply a step's changes in their fixed order: arrivals, priority changes (``priority``
        events), batch entries, tokens, block events, transitions (last, so they are the values
        after the step). Also used for the changes a user makes between steps (they are
        recorded with the next step)."""
        self._arrive(knobs, arrivals)
        for ev in events:
            if ev.kind == EventKind.PRIORITY and ev.request_id in self._row:
                self._cols["priority"][self._row[ev.request_id]] = int(ev.detail)
        row = self._row      # after the arrivals: an arrival may compact the rows
        # Batch entries and tokens column-wise: one row lookup per request, the rest in numpy.
        if scheduled:
            n = len(scheduled)
            ids, slots, num_tokens, num_computed, _ = zip(*scheduled)
            self._schedule(np.fromiter(map(row.__getitem__, ids), np.intp, n), np.fromiter(slots, np.int32, n),
                           np.fromiter(num_tokens, np.int64, n), np.fromiter(num_computed, np.int64, n))
        if new_tokens:
            self._sample(np.fromiter(map(row.__getitem__, map(_REQUEST_ID, new_tokens)), np.intp,
                                     len(new_tokens)), token_time)
        for ev in block_events:
            self._blocks(ev.kind, -1 if ev.kind in _POOL_KINDS else row[ev.request_id], ev.block_ids,
                         ev.block_hashes)
        for t in transitions:       # a finish may compact the rows: looked up one at a time
            self._transition(self._row[t.request_id], t.status, t.slot, t.num_computed_tokens,
                             t.num_preemptions, t.error)

    def apply_columns(self, step: int, clock: float, arrivals: Iterable[Arrival] = (),
                      priorities: Iterable[tuple[int, int]] = (), batch: Sequence[np.ndarray] | None = None,
                      token_time: float = math.nan, block_events: tuple = ((),),
                      transitions: Iterable[tuple] = (), knobs: Iterable[tuple[str, int]] = ()) -> None:
        """Advance to the state after step ``step`` (engine clock ``clock``) from its changes as
        columns, with requests named by arrival number (``seq``) instead of id: what
        :meth:`apply` does with the step's :class:`StepRecord`, without building it (a recording's
        reader replays the steps after a keyframe this way; the two are held equal by
        ``tests/recordings/file/test_rec_column_replay.py``).

        ``arrivals``: the step's :class:`Arrival` s in order; ``priorities``: ``(seq, priority)``
        of its ``priority`` events in order; ``batch``: ``(seq, slot, num_tokens,
        num_computed_tokens, sampled)`` arrays aligned in batch order (int64, ``sampled`` bool:
        the entry sampled a token at ``token_time``), None for an empty batch; ``block_events``:
        the step's block events as columns ``(kinds, seqs, counts, block_ids, hash_counts,
        hashes)`` in event order: kinds (a list of str), their requests' arrival numbers (any
        value for the pool's own ``reserved`` / ``unreserved``), how many blocks each names, all
        their block ids one event after the other, how many prefix hashes each carries and the
        hashes (int64 arrays);
        ``transitions``:
        ``(seq, status, slot, num_computed_tokens, num_preemptions, error)`` in order.
        Raises ``KeyError`` for a request number that is not live, ``ValueError`` as
        :meth:`apply` does."""
        self._arrive(knobs, arrivals)
        for seq, value in priorities:
            i = self._row_of_seq(seq, None)
            if i is not None:
                self._cols["priority"][i] = value
        if batch is not None and len(batch[0]):
            seq, slot, num_tokens, num_computed, sampled = batch
            rows = self._rows_of_seqs(seq)
            self._schedule(rows, slot, num_tokens, num_computed)
            if sampled.any():
                self._sample(rows[sampled], token_time)
        if block_events[0]:
            self._block_columns(*block_events)
        for seq, status, slot, num_computed, num_preemptions, error in transitions:
            self._transition(self._row_of_seq(seq), status, slot, num_computed, num_preemptions, error)
        self.step, self.clock = step, clock

    def _block_columns(self, kinds: Sequence[str], seqs: np.ndarray, counts: np.ndarray, block_ids: np.ndarray,
                       hash_counts: np.ndarray, hashes: np.ndarray) -> None:
        """A step's block events as columns (see :meth:`apply_columns`), in order: the rows of
        their requests looked up at once, then each event as :meth:`apply` applies it (applying
        a step's events at once in numpy was slower: ~14 events a step, most of one block)."""
        m = len(kinds)
        held = np.fromiter(map(_POOL_KINDS.__contains__, kinds), bool, m)
        np.logical_not(held, out=held)
        rows = np.full(m, -1, np.intp)
        rows[held] = self._rows_of_seqs(seqs[held])
        ids, hashes = block_ids.tolist(), hashes.tolist()
        at = hat = 0
        for kind, i, n, h in zip(kinds, rows.tolist(), counts.tolist(), hash_counts.tolist()):
            self._blocks(kind, i, ids[at:at + n], hashes[hat:hat + h])
            at += n
            hat += h

    def _arrive(self, knobs: Iterable[tuple[str, int]], arrivals: Iterable[Arrival]) -> None:
        """The start of a step's changes: its knobs and arrivals."""
        self.last_finished = []
        for name, value in knobs:
            if name == "max_num_seqs":            # the batch slots a state shows
                self.layout = (self.layout[0], self.layout[1], int(value))
        for a in arrivals:
            self._add(a)

    def _schedule(self, rows: np.ndarray, slots: np.ndarray, num_tokens: np.ndarray,
                  num_computed: np.ndarray) -> None:
        """Batch entries of the requests in ``rows`` (int64 arrays aligned with them)."""
        c = self._cols
        end = num_computed + num_tokens
        c["num_computed_tokens"][rows] = end
        high = c["max_computed_tokens"][rows]       # computed before: computed again now
        c["num_recomputed_tokens"][rows] += np.maximum(np.minimum(end, high) - num_computed, 0)
        c["max_computed_tokens"][rows] = np.maximum(high, end)
        c["slot"][rows] = slots
        c["status"][rows] = _RUNNING

    def _sample(self, rows: np.ndarray, token_time: float) -> None:
        """A token sampled at ``token_time`` for each request in ``rows``."""
        c = self._cols
        c["num_output_tokens"][rows] += 1
        first = c["first_token_time"]
        first[rows[np.isnan(first[rows])]] = token_time
        c["last_token_time"][rows] = token_time

    def _row_of_seq(self, seq: int, missing: object = KeyError) -> int:
        """The row of the live request with arrival number ``seq``; ``missing`` when there is
        none (raises ``KeyError`` by default)."""
        n = self._n
        i = int(np.searchsorted(self._cols["seq"][:n], seq))
        if i < n and self._cols["seq"][i] == seq and self._alive[i]:
            return i
        if missing is KeyError:
            raise KeyError(f"request number {seq} is not live")
        return missing

    def _rows_of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        """The rows of the live requests with arrival numbers ``seqs`` (the rows' ``seq`` are
        ascending: arrival order). Raises ``KeyError`` when one is not live."""
        n = self._n
        col = self._cols["seq"][:n]
        rows = np.searchsorted(col, seqs)
        found = rows < n
        found[found] &= col[rows[found]] == seqs[found]
        found[found] &= self._alive[rows[found]]
        if not found.all():
            raise KeyError(f"request number {int(seqs[~found][0])} is not live")
        return rows

    def _add(self, a: Arrival) -> None:
        if a.request_id in self._row:
            raise ValueError(f"request {a.request_id!r} arrived twice")
        if self._n == len(self._alive):
            self._grow()
        i = self._n
        self._n += 1
        c = self._cols
        c["seq"][i] = self.next_seq
        self.next_seq += 1
        c["status"][i] = _WAITING
        c["slot"][i] = -1
        c["arrival_step"][i] = a.arrival_step
        c["arrival_time"][i] = a.arrival_time
        c["num_prompt_tokens"][i] = a.num_prompt_tokens
        c["max_tokens"][i] = a.max_tokens
        c["priority"][i] = a.priority
        for k in ("num_computed_tokens", "num_output_tokens", "num_preemptions", "num_blocks",
                  "max_computed_tokens", "num_recomputed_tokens"):
            c[k][i] = 0
        c["first_token_time"][i] = c["last_token_time"][i] = math.nan
        self._ids.append(a.request_id)
        self._alive[i] = True
        self._row[a.request_id] = i

    def _blocks(self, kind: str, i: int, block_ids: Sequence[int], block_hashes: Sequence[int]) -> None:
        """A block event of ``kind`` naming ``block_ids`` (and ``block_hashes``, for ``cached``)
        of the request in row ``i`` (-1 for the pool's own events)."""
        if kind in _POOL_KINDS:     # the usable pool changed
            ids = np.asarray(block_ids, np.int64)
            self.block_owner[ids] = RESERVED if kind == BlockEventKind.RESERVED else -1
            self.block_hash[ids] = 0
            self.block_pos[ids] = 0
            return
        nblocks = self._cols["num_blocks"]
        ids, n = block_ids, len(block_ids)
        if kind == BlockEventKind.FREED and (self._extra or self._extra_by_block):
            self._shared = None
            self._free_shared(int(self._cols["seq"][i]), ids)
            nblocks[i] -= n
            return
        if kind in _CACHE_KINDS:
            self._cache_event(i, kind, block_ids, block_hashes)
            return
        if kind == BlockEventKind.SWAPPED_OUT:       # the CPU side; the GPU table was freed before
            self.cpu_owner[np.asarray(ids, np.int64)] = self._cols["seq"][i]
            return
        if kind == BlockEventKind.SWAPPED_IN:
            self.cpu_owner[np.asarray(ids, np.int64)] = -1
            return
        if n == 1:              # the common case (a decode crossing a block boundary): scalars
            ids = ids[0]
        else:
            ids = np.asarray(ids, np.int64)
        if kind == BlockEventKind.ALLOCATED:
            start = int(nblocks[i])
            self.block_owner[ids] = self._cols["seq"][i]
            self.block_pos[ids] = start if n == 1 else np.arange(start, start + n)
            nblocks[i] = start + n
        elif kind == BlockEventKind.FREED:
            self.block_owner[ids] = -1
            # a cached block keeps its position: it still holds that prefix block's tokens
            self.block_pos[ids] = np.where(self.block_hash[ids] != 0, self.block_pos[ids], 0)
            nblocks[i] -= n
        else:
            raise ValueError(f"unknown block event kind {kind!r}")

    def _cache_event(self, i: int, kind: str, block_ids: Sequence[int], block_hashes: Sequence[int]) -> None:
        """A prefix-cache block event (hit, cached, evicted) for the request in row ``i``, or a
        parallel-sampling fork (shared into the table like a hit)."""
        ids = np.asarray(block_ids, np.int64)
        if kind == BlockEventKind.CACHED:
            if len(block_hashes) != len(ids):
                raise ValueError(f"cached event with {len(ids)} blocks and {len(block_hashes)} hashes")
            self.block_hash[ids] = block_hashes
        elif kind == BlockEventKind.EVICTED:
            self.block_hash[ids] = 0
            self.block_pos[ids] = 0
        else:                                   # hit or forked: shared into the table's head
            self._shared = None
            nblocks = self._cols["num_blocks"]
            seq, start = int(self._cols["seq"][i]), int(nblocks[i])
            for k, b in enumerate(block_ids):
                if self.block_owner[b] < 0:             # cached-free: it becomes the owner
                    self.block_owner[b] = seq
                    self.block_pos[b] = start + k
                else:
                    self._extra.setdefault(seq, {})[b] = None
                    self._extra_by_block.setdefault(b, []).append(seq)
            nblocks[i] = start + len(ids)

    def _free_shared(self, seq: int, block_ids) -> None:
        """Request ``seq`` releases its table ``block_ids`` while some blocks are shared: a block
        it held as a further holder just loses it; a block it owned passes to its oldest other
        holder, or becomes free (cached-free if it has a hash)."""
        extra = self._extra.pop(seq, {})
        for b in block_ids:
            if b in extra:
                holders = self._extra_by_block[b]
                holders.remove(seq)
                if not holders:
                    del self._extra_by_block[b]
                continue
            holders = self._extra_by_block.get(b)
            if holders:
                heir = min(holders)
                holders.remove(heir)
                if not holders:
                    del self._extra_by_block[b]
                del self._extra[heir][b]
                if not self._extra[heir]:
                    del self._extra[heir]
                self.block_owner[b] = heir
            else:
                self.block_owner[b] = -1
                if not self.block_hash[b]:
                    self.block_pos[b] = 0

    def _transition(self, i: int, status: str, slot: int, num_computed_tokens: int,
                    num_preemptions: int, error: str | None) -> None:
        """The request in row ``i`` moved to ``status`` with these values (a finish removes it)."""
        c = self._cols
        c["slot"][i] = slot
        c["num_computed_tokens"][i] = num_computed_tokens
        c["num_preemptions"][i] = num_preemptions
        if status.startswith("FINISHED"):
            request_id = self._ids[i]
            view = row_view(request_id, c, i, status=status, error=error)
            self.finished.append(view)
            self.last_finished.append(view)
            self._remove(request_id)
            return
        c["status"][i] = STATUS_CODE[status]

    def _remove(self, request_id: str) -> None:
        i = self._row.pop(request_id)
        self._alive[i] = False
        self._ids[i] = None
        if self._n > 2 * _MIN_CAPACITY and len(self._row) * 2 < self._n:
            self._compact()

    def _grow(self) -> None:
        live = len(self._row)
        if live * 2 < self._n:
            self._compact()
            if self._n < len(self._alive):
                return
        cap = 2 * len(self._alive)
        for k, col in self._cols.items():
            new = np.zeros(cap, col.dtype)
            new[:self._n] = col[:self._n]
            self._cols[k] = new
        alive = np.zeros(cap, bool)
        alive[:self._n] = self._alive[:self._n]
        self._alive = alive

    def _compact(self) -> None:
        rows = np.flatnonzero(self._alive[:self._n])
        m = len(rows)
        for col in self._cols.values():
            col[:m] = col[rows]
        self._ids = [self._ids[i] for i in rows]
        self._alive[:] = False
        self._alive[:m] = True
        self._row = {rid: j for j, rid in enumerate(self._ids)}
        self._n = m
