"""The invariants of ``recordings.check.invariants`` checked on a schema-4 recording at thousands
of steps a second: an incremental array checker inside a columnar replay.

:class:`StateChecker` checks each step's whole state (O(live requests + blocks) numpy work on a
state object the replay builds per step): ~330 steps/s on a 100k-step, 256-slot recording.
:func:`stream_check` replays the steps from their columns instead (the batch and block-event
blobs decoded to arrays, request numbers instead of ids, no :class:`engine.outputs.StepRecord` or
:class:`engine.state.state.EngineState` per step) and checks, on every step, what the step
changed: the blocks its events name, the requests whose holdings, status or slot it changed, and
the counts kept up to date on the way (held, reserved and cached-free blocks, queue sizes, the
running requests per slot). Per request it keeps the number of blocks it holds and an additive
hash of their table positions (``sum h(pos)`` over its holdings, 64-bit, wrapping; ``h`` a
64-bit mix of the position), so "the table has exactly ``num_blocks`` blocks at positions
``0..num_blocks-1``" is one comparison with ``sum h(0..n-1)`` (a multiset hash, as in
incremental set hashing, Bellare & Micciancio 1997; a wrong table passes with probability
~2^-64).

What it finds is exactly what :class:`StateChecker` finds: the fast path only decides that a
step is clean. At the first step it cannot call clean (a violation, a row it cannot decode, a
feature it leaves to the reference: parallel-sampling groups' shared blocks, a CPU swap pool
whose swapped requests hold no CPU blocks), the check goes back to its last checkpoint (the
state of a clean step at most ``CHECKPOINT_STEPS`` earlier, kept as arrays) and runs
:func:`recordings.check.invariants.check_recording` 's reference path (``StateTimeline`` replay +
``StateChecker``) from there to the end, so the problems and their messages are the
reference's. Memory: the block arrays and ~40 bytes per request of the run (its status, slot,
block count, holdings, position hash, CPU blocks: O(requests), not O(steps)).
"""
from __future__ import annotations

import json
from collections import deque
from typing import Callable

import numpy as np

from engine.outputs import RequestView
from engine.state.state import COLUMNS, NUM_RECENTLY_FINISHED, RESERVED, STATUS_CODE, EngineState
from engine.vocab import EventKind, RequestStatus
from recordings.file import codec
from recordings.file.compact import BLOCK_ARRAYS, BLOCK_EVENT_CODES, NO_REQUEST, Batch
from recordings.file.packing import unpack

CHUNK_STEPS = 1024          # steps read per query
CHECKPOINT_STEPS = 256      # a clean step's state is kept this often (where a reference re-check starts)
_CODE = {kind: i for i, kind in enumerate(BLOCK_EVENT_CODES)}
_ALLOC, _FREE, _HIT, _CACHED, _EVICT = (_CODE[k] for k in ("allocated", "freed", "hit", "cached", "evicted"))
_SWAP_OUT, _SWAP_IN, _RESERVE, _UNRESERVE, _FORK = (_CODE[k] for k in ("swapped_out", "swapped_in", "reserved",
                                                                      "unreserved", "forked"))
_WAITING, _RUNNING, _PREEMPTED, _PAUSED, _SWAPPED = (STATUS_CODE[s] for s in (
    RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED, RequestStatus.PAUSED,
    RequestStatus.SWAPPED))
_LIVE_STATUS = {str(s.value): STATUS_CODE[s] for s in RequestStatus if not s.is_finished}
_FINISHED_STATUS = {str(s.value) for s in RequestStatus if s.is_finished}
_FINISH_KINDS = tuple(str(k.value) for k in (EventKind.FINISHED, EventKind.ABORTED, EventKind.FAILED,
                                             EventKind.REJECTED))
_M64 = (1 << 64) - 1


class Doubt(Exception):
    """The fast path cannot call this step clean: the reference checks it (internal)."""


def position_hash(pos: np.ndarray) -> np.ndarray:
    """``h(pos)``: a 64-bit mix of each table position (uint64; splitmix64's finaliser, Steele et
    al. 2014), wrapping."""
    with np.errstate(over="ignore"):
        z = pos.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class _Tables:
    """``sum h(0..n-1)`` for table sizes ``n`` and ``h(pos)`` (tables grown on demand)."""

    def __init__(self) -> None:
        self.sums = np.zeros(1, np.uint64)
        self.hashes = position_hash(np.arange(1024))

    def hash_of(self, pos: np.ndarray) -> np.ndarray:
        """``h(pos)`` (uint64) of positions ``pos`` (int64, any values)."""
        if len(pos) and (pos.min() < 0 or pos.max() >= len(self.hashes)):
            if pos.min() < 0 or pos.max() >= 1 << 22:
                return position_hash(pos)
            self.hashes = position_hash(np.arange(2 * int(pos.max()) + 1))
        return self.hashes[pos]

    def __getitem__(self, n: np.ndarray) -> np.ndarray:
        top = int(n.max(initial=0))
        if top >= len(self.sums):
            size = max(top + 1, 2 * len(self.sums))
            with np.errstate(over="ignore"):
                self.sums = np.concatenate([[np.uint64(0)], np.cumsum(position_hash(np.arange(size - 1)),
                                                                      dtype=np.uint64)])
        return self.sums[n]


class StreamState:
    """The replayed state of a run as arrays, the reference's (``StateTimeline``) rules applied to
    request numbers, with the bookkeeping the incremental checks need. Raises :class:`Doubt` for
    a record the reference would reject or a step it cannot call clean."""

    def __init__(self, config, state: EngineState, num_requests: int) -> None:
        self.total = int(config["num_gpu_blocks"])
        self.max_num_seqs = int(config["max_num_seqs"])
        self.max_num_batched_tokens = int(config["max_num_batched_tokens"])
        self.caching = bool(config.get("enable_prefix_caching", False))
        if state.num_total_blocks != self.total or len(state) or len(state.recently_finished) \
                or len(state.shared_seq) or state.next_seq != 0 or np.any(state.block_owner >= 0):
            raise Doubt("the first keyframe is not an empty engine")
        n = num_requests
        self.status = np.full(n, -1, np.int8)            # -1: not live
        self.slot = np.full(n, -1, np.int64)
        self.num_blocks = np.zeros(n, np.int64)
        self.held = np.zeros(n, np.int64)                # holdings (owned + shared), from the block map
        self.pos_sum = np.zeros(n, np.uint64)            # sum of h(pos) over the holdings
        self.cpu_held = np.zeros(n, np.int64)
        self.owner = state.block_owner.copy()
        self.pos = state.block_pos.copy()
        self.hash = state.block_hash.copy()
        self.cpu_owner = state.cpu_owner.copy()
        self.extra: dict[int, dict[int, None]] = {}      # seq -> further-held blocks (as the timeline)
        self.extra_by_block: dict[int, list[int]] = {}
        self.next_seq = 0
        self.num_used = 0
        self.num_reserved = int(np.count_nonzero(self.owner == RESERVED))
        self.num_cached_free = int(np.count_nonzero((self.owner == -1) & (self.hash != 0)))
        self.queue = np.zeros(16, np.int64)              # live requests per status code
        self.slot_users = np.zeros(self.max_num_seqs, np.int64)    # running requests per slot
        self.bad_slots = 0                               # running requests with a slot outside 0..cap-1
        self.finished: deque = deque(maxlen=NUM_RECENTLY_FINISHED)   # (seq, status) of the last finishing
        self.tables = _Tables()

    # --- one step ---------------------------------------------------------------------------
    def step(self, k: int, arrivals: int, batch: Batch, blocks: bytes | None, transitions: list,
             finish_events: list, knobs, counts: tuple[int, int, int, int, int]) -> None:
        """Apply and check step ``k``: ``arrivals`` new requests, its ``batch``, its block-event
        blob, its ``transitions`` rows (seq, status, slot), the request numbers of its finishing
        events, its knob changes and (num_waiting, num_running, num_paused, num_free_blocks,
        num_total_blocks). Raises :class:`Doubt`."""
        free, total = counts[3], counts[4]
        if total != self.total:
            raise Doubt("block count")
        for name, value in knobs:
            if name == "max_num_seqs":
                self.max_num_seqs = int(value)
                self._recount_slots()
            elif name == "max_num_batched_tokens":
                self.max_num_batched_tokens = int(value)
        touched = [np.arange(self.next_seq, self.next_seq + arrivals)]
        if arrivals:
            if self.next_seq + arrivals > len(self.status):
                raise Doubt("more arrivals than requests")
            new = slice(self.next_seq, self.next_seq + arrivals)
            self.status[new] = _WAITING
            self.slot[new] = -1
            self.num_blocks[new] = 0
            self.queue[_WAITING] += arrivals
            self.next_seq += arrivals
        seq = batch.seq
        if len(seq):
            if len(seq) > self.max_num_seqs or int(batch.num_tokens.sum()) > self.max_num_batched_tokens:
                raise Doubt("G4")
            if seq.min() < 0 or seq.max() >= self.next_seq or np.any(self.status[seq] < 0):
                raise Doubt("a batch entry of a request that is not live")
            moved = (self.status[seq] != _RUNNING) | (self.slot[seq] != batch.slot)
            if moved.any():
                self._set(seq[moved], np.full(int(moved.sum()), _RUNNING, np.int8), batch.slot[moved])
            touched.append(seq)
        if blocks is not None:
            touched.append(self._blocks(blocks))
        for s, status, slot in transitions:
            if not 0 <= s < self.next_seq or self.status[s] < 0:
                raise Doubt("a transition of a request that is not live")
            if status in _FINISHED_STATUS:
                if slot >= 0 or self.cpu_held[s] or self.held[s]:
                    raise Doubt("G3 / G1 at finishing")
                self._set1(s, -1, slot)
                self.finished.append((s, status))
            else:
                code = _LIVE_STATUS.get(status)
                if code is None:
                    raise Doubt("unknown status")
                self._set1(s, code, slot)
            touched.append(np.array([s]))
        for s in finish_events:
            if 0 <= s < len(self.status) and self.status[s] >= 0:
                raise Doubt("G3: a finished request is live")
        self._check(np.concatenate(touched), counts, free)

    def _set(self, seqs: np.ndarray, status: np.ndarray, slot: np.ndarray) -> None:
        """New status (-1: gone) and slot of ``seqs`` (distinct), with the queue and slot counts."""
        old_status, old_slot = self.status[seqs], self.slot[seqs]
        np.subtract.at(self.queue, old_status[old_status >= 0], 1)
        self._slot_count(old_slot[old_status == _RUNNING], -1)
        self.status[seqs] = status
        self.slot[seqs] = slot
        np.add.at(self.queue, status[status >= 0], 1)
        self._slot_count(slot[status == _RUNNING], 1)

    def _set1(self, s: int, status: int, slot: int) -> None:
        """:meth:`_set` of one request (Python scalars)."""
        old, old_slot = int(self.status[s]), int(self.slot[s])
        if old >= 0:
            self.queue[old] -= 1
        if old == _RUNNING:
            self._slot1(old_slot, -1)
        self.status[s], self.slot[s] = status, slot
        if status >= 0:
            self.queue[status] += 1
        if status == _RUNNING:
            self._slot1(slot, 1)

    def _slot1(self, slot: int, by: int) -> None:
        if 0 <= slot < len(self.slot_users):
            self.slot_users[slot] += by
        else:
            self.bad_slots += by

    def _slot_count(self, slots: np.ndarray, by: int) -> None:
        inside = (slots >= 0) & (slots < len(self.slot_users))
        np.add.at(self.slot_users, slots[inside], by)
        self.bad_slots += by * int(np.count_nonzero(~inside))

    def _recount_slots(self) -> None:
        running = np.flatnonzero(self.status[:self.next_seq] == _RUNNING)
        self.slot_users = np.zeros(self.max_num_seqs, np.int64)
        self.bad_slots = 0
        self._slot_count(self.slot[running], 1)

    # --- block events -----------------------------------------------------------------------
    def _blocks(self, blob: bytes) -> np.ndarray:
        """Apply a step's block events as ``StateTimeline`` does, checking each as
        ``StateChecker._check_block_events`` does; returns the request numbers whose holdings
        changed."""
        arrays = unpack(blob)
        if len(arrays) != BLOCK_ARRAYS:
            raise Doubt("block-event blob")
        kinds, seq_delta, counts, id_delta, hash_counts, hashes = arrays
        if not len(kinds) == len(seq_delta) == len(counts) == len(hash_counts) \
                or counts.sum() != len(id_delta) or hash_counts.sum() != len(hashes) \
                or (counts < 0).any() or (hash_counts < 0).any() or kinds.max(initial=0) >= len(BLOCK_EVENT_CODES) \
                or kinds.min(initial=0) < 0:
            raise Doubt("block-event blob")
        ids = np.cumsum(id_delta)
        seqs = np.cumsum(seq_delta)
        swaps = (kinds == _SWAP_OUT) | (kinds == _SWAP_IN)
        gpu = ids[~np.repeat(swaps, counts)] if swaps.any() else ids
        if len(gpu) and (gpu.min() < 0 or gpu.max() >= self.total):
            raise Doubt("a block outside the pool")
        dirty = np.unique(gpu)          # once each: the counts below take each block's part away once
        before = self._holdings(dirty)
        self._count_blocks(dirty, -1)
        at = hat = 0
        cpu_before: list[np.ndarray] = []
        owner, pos, num_blocks, live = self.owner, self.pos, self.num_blocks, self.status
        shared = self.extra_by_block
        for kind, s, n, h in zip(kinds.tolist(), seqs.tolist(), counts.tolist(), hash_counts.tolist()):
            if n == 1 and kind in (_ALLOC, _FREE) and not shared and not self.extra:     # the common case, as scalars
                x = int(ids[at])
                at += 1
                hat += h
                if not 0 <= s < self.next_seq or live[s] < 0:
                    raise Doubt("a block event of a request that is not live")
                if kind == _ALLOC:
                    if owner[x] >= 0:
                        raise Doubt("G1: allocated a held block")
                    owner[x] = s
                    pos[x] = num_blocks[s]
                    num_blocks[s] += 1
                else:
                    if owner[x] != s:
                        raise Doubt("G1: freed blocks it does not hold")
                    owner[x] = -1
                    if not self.hash[x]:
                        pos[x] = 0
                    num_blocks[s] -= 1
                continue
            b = ids[at:at + n]
            at += n
            if kind in (_RESERVE, _UNRESERVE):
                if s != NO_REQUEST and not 0 <= s < len(self.status):
                    raise Doubt("a pool event of an unknown request")
                if np.any(owner[b] >= 0) or (shared and any(x in shared for x in b.tolist())):
                    raise Doubt("G1: blocks taken out of use while held")
                owner[b] = RESERVED if kind == _RESERVE else -1
                self.hash[b] = 0
                pos[b] = 0
                hat += h
                continue
            if not 0 <= s < self.next_seq or live[s] < 0:
                raise Doubt("a block event of a request that is not live")
            if kind == _CACHED:
                if h != n:
                    raise Doubt("cached event without its hashes")
                self.hash[b] = hashes[hat:hat + h]
            elif kind == _EVICT:
                self.hash[b] = 0
                pos[b] = 0
            elif kind in (_HIT, _FORK):
                start = int(num_blocks[s])
                for j, x in enumerate(b.tolist()):
                    if owner[x] < 0:
                        owner[x] = s
                        pos[x] = start + j
                    else:
                        self.extra.setdefault(s, {})[x] = None
                        shared.setdefault(x, []).append(s)
                num_blocks[s] = start + n
            elif kind == _SWAP_OUT or kind == _SWAP_IN:
                if len(b) and (b.min() < 0 or b.max() >= len(self.cpu_owner)):
                    raise Doubt("a CPU block outside the pool")
                old = self.cpu_owner[b]
                np.subtract.at(self.cpu_held, old[old >= 0], 1)
                cpu_before.append(old[old >= 0])
                self.cpu_owner[b] = s if kind == _SWAP_OUT else -1
                if kind == _SWAP_OUT:
                    self.cpu_held[s] += n
            elif kind == _ALLOC:
                if np.any(owner[b] >= 0) or (shared and any(x in shared for x in b.tolist())):
                    raise Doubt("G1: allocated a held block")
                start = int(num_blocks[s])
                owner[b] = s
                pos[b] = np.arange(start, start + n)
                num_blocks[s] = start + n
            elif kind == _FREE:
                if shared or self.extra:
                    self._free_shared(s, b)
                else:
                    if np.any(owner[b] != s) or len(np.unique(b)) != n:
                        raise Doubt("G1: freed blocks it does not hold")
                    owner[b] = -1
                    pos[b] = np.where(self.hash[b] != 0, pos[b], 0)
                num_blocks[s] -= n
            hat += h
        self._count_blocks(dirty, 1)
        after = self._holdings(dirty)
        return np.concatenate([before, after, seqs[seqs >= 0], *cpu_before])

    def _free_shared(self, s: int, b: np.ndarray) -> None:
        """``StateTimeline._free_shared`` (a free while some blocks are shared)."""
        extra = self.extra.pop(s, {})
        if set(extra) - set(b.tolist()):   # shared blocks its free leaves out: the reference judges
            raise Doubt("G1: shared blocks left behind")
        for x in b.tolist():
            holders = self.extra_by_block.get(x, [])
            if x in extra:
                holders.remove(s)
                if not holders:
                    del self.extra_by_block[x]
                continue
            if self.owner[x] != s:
                raise Doubt("G1: freed blocks it does not hold")
            if holders:
                heir = min(holders)
                holders.remove(heir)
                if not holders:
                    del self.extra_by_block[x]
                del self.extra[heir][x]
                if not self.extra[heir]:
                    del self.extra[heir]
                self.owner[x] = heir
            else:
                self.owner[x] = -1
                if not self.hash[x]:
                    self.pos[x] = 0

    def _holdings(self, blocks: np.ndarray) -> np.ndarray:
        """The holders (owners and further holders) of ``blocks``."""
        owners = self.owner[blocks]
        out = [owners[owners >= 0]]
        if self.extra_by_block:
            out.append(np.array([s for x in blocks.tolist() for s in self.extra_by_block.get(x, ())], np.int64))
        return np.concatenate(out)

    def _count_blocks(self, blocks: np.ndarray, by: int) -> None:
        """Add (``by`` 1) or take away (-1) what ``blocks`` count for: each holder's holdings and
        position hash, and the used, reserved and cached-free counts."""
        owner, h = self.owner[blocks], self.tables.hash_of(self.pos[blocks])
        held = owner >= 0
        self.num_used += by * int(np.count_nonzero(held))
        self.num_reserved += by * int(np.count_nonzero(owner == RESERVED))
        self.num_cached_free += by * int(np.count_nonzero((owner == -1) & (self.hash[blocks] != 0)))
        holders, hs = owner[held], h[held]
        if self.extra_by_block:
            pairs = [(s, i) for i, x in enumerate(blocks.tolist()) for s in self.extra_by_block.get(x, ())]
            if pairs:
                if not self.caching or np.any(self.hash[blocks[[i for _, i in pairs]]] == 0) \
                        or np.any(owner[[i for _, i in pairs]] < 0):
                    raise Doubt("G2: shared blocks the reference must judge")
                holders = np.concatenate([holders, np.array([s for s, _ in pairs], np.int64)])
                hs = np.concatenate([hs, h[[i for _, i in pairs]]])
        np.add.at(self.held, holders, by)
        with np.errstate(over="ignore"):
            if by > 0:
                np.add.at(self.pos_sum, holders, hs)
            else:
                np.subtract.at(self.pos_sum, holders, hs)

    # --- the step's checks ------------------------------------------------------------------
    def _check(self, touched: np.ndarray, counts, free: int) -> None:
        waiting, running, paused = counts[:3]
        q = self.queue
        if (int(q[_WAITING] + q[_PREEMPTED]), int(q[_RUNNING]), int(q[_PAUSED])) != (waiting, running, paused):
            raise Doubt("G3: queue sizes")
        if int(q[_RUNNING]) > self.max_num_seqs or self.bad_slots or self.slot_users.max(initial=0) > 1:
            raise Doubt("G4: slots")
        if self.num_used + free + self.num_reserved != self.total or self.num_cached_free > free \
                or (self.num_cached_free and not self.caching):
            raise Doubt("G1: block counts")
        if not len(touched):
            return
        s = touched
        n = self.num_blocks[s]
        live = self.status[s] >= 0
        with np.errstate(over="ignore"):
            bad = (n < 0) | (self.held[s] != np.where(live, n, 0)) \
                | (self.pos_sum[s] != np.where(live, self.tables[np.maximum(n, 0)], np.uint64(0))) \
                | ((self.cpu_held[s] > 0) != (self.status[s] == _SWAPPED))
        if bad.any():
            raise Doubt("G1: block tables")

    # --- checkpoints: the reference's view of this state --------------------------------------
    def snapshot(self) -> dict:
        """A copy of what :meth:`engine_state` needs (O(live requests + blocks))."""
        live = np.flatnonzero(self.status[:self.next_seq] >= 0)
        return dict(live=live, status=self.status[live], slot=self.slot[live], num_blocks=self.num_blocks[live],
                    owner=self.owner.copy(), pos=self.pos.copy(), hash=self.hash.copy(),
                    cpu_owner=self.cpu_owner.copy(), next_seq=self.next_seq, finished=tuple(self.finished),
                    extra_by_block={x: list(h) for x, h in self.extra_by_block.items()},
                    knobs=(self.max_num_seqs, self.max_num_batched_tokens))


def engine_state(snap: dict, step: int, layout: tuple[int, int, int], ids_of: Callable[[np.ndarray], list[str]]
                 ) -> EngineState:
    """The :class:`EngineState` of a :meth:`StreamState.snapshot` after ``step`` (``layout``:
    num_total_blocks, block_size, max_num_seqs): the columns the checks read (seq, status, slot,
    num_blocks), the others zero; ``ids_of`` maps request numbers to ids."""
    live = snap["live"]
    n = len(live)
    columns = {k: (np.full(n, np.nan) if dt.kind == "f" else np.zeros(n, dt)) for k, dt in COLUMNS.items()}
    columns.update(seq=live, status=snap["status"], slot=snap["slot"], num_blocks=snap["num_blocks"])
    pairs = sorted((s, x) for x, holders in snap["extra_by_block"].items() for s in holders)
    finished = snap["finished"]
    names = ids_of(np.array([s for s, _ in finished], np.int64))
    views = tuple(RequestView(request_id=rid, status=status, arrival_step=0, arrival_time=0.0,
                              num_prompt_tokens=0, num_output_tokens=0, num_computed_tokens=0, max_tokens=0,
                              slot=None, num_preemptions=0, ttft=None, mean_itl=None, finish_reason=None,
                              error=None)
                  for rid, (_, status) in zip(names, finished))
    return EngineState(step, 0.0, *layout, next_seq=snap["next_seq"], request_ids=tuple(ids_of(live)),
                       columns=columns, block_owner=snap["owner"], block_pos=snap["pos"],
                       block_hash=snap["hash"], recently_finished=views,
                       shared_seq=np.array([s for s, _ in pairs], np.int64),
                       shared_block=np.array([x for _, x in pairs], np.int64), cpu_owner=snap["cpu_owner"])


def knobs_of(text: str | None):
    """A step's knob changes (``codec.knobs_from_json``); :class:`Doubt` if they do not decode."""
    try:
        return codec.knobs_from_json(text)
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise Doubt("knobs") from e


# --- the replay over a file ---------------------------------------------------------------------
def requests_in_order(reader) -> int:
    """The number of requests of a file whose arrival numbers are 0..n-1 in arrival order (so the
    numbers in its rows are the ones a replay gives its arrivals) and whose arrival rows decode;
    :class:`Doubt` otherwise."""
    (n, lo, hi, first), = reader.execute("SELECT count(*), min(seq), max(seq), min(arrival_step) FROM requests")
    if n and (lo != 0 or hi != n - 1 or first is None or first < 0):
        raise Doubt("request numbers")
    (odd,), = reader.execute(
        "SELECT count(*) FROM (SELECT arrival_step, lag(arrival_step) OVER (ORDER BY seq) AS prev, "
        "arrival_time, num_prompt_tokens, max_tokens, sampling_json FROM requests) WHERE arrival_step < prev "
        "OR typeof(arrival_step) != 'integer' OR typeof(arrival_time) NOT IN ('real', 'integer') "
        "OR typeof(num_prompt_tokens) != 'integer' OR typeof(max_tokens) != 'integer' "
        "OR (sampling_json IS NOT NULL AND NOT json_valid(sampling_json)) "
        "OR typeof(json_extract(sampling_json, '$.priority')) NOT IN ('null', 'integer')")
    if odd:
        raise Doubt("request rows")
    return n


def undecodable_steps(reader, num_requests: int) -> set[int]:
    """Steps whose rows name request numbers the file does not have, or hold JSON or values the
    reference's decoding or replay would fail on (events, transitions, preempted and
    not-admitted lists); the fast path leaves them to the reference."""
    bad = f"(typeof({{0}}) != 'integer' OR {{0}} < 0 OR {{0}} >= {int(num_requests)})"
    first = "json_extract(j.value, '$[0]')"
    queries = [
        f"SELECT DISTINCT step FROM events WHERE {bad.format('seq')}",
        f"SELECT DISTINCT step FROM transitions WHERE {bad.format('seq')} OR typeof(slot) != 'integer'",
        "SELECT step FROM steps WHERE preempted_json IS NOT NULL AND (NOT json_valid(preempted_json) OR "
        f"json_type(preempted_json) != 'array' OR EXISTS (SELECT 1 FROM json_each(preempted_json) j "
        f"WHERE {bad.format('j.value')}))",
        "SELECT step FROM steps WHERE not_admitted_json IS NOT NULL AND (NOT json_valid(not_admitted_json) "
        "OR json_type(not_admitted_json) != 'array' OR EXISTS (SELECT 1 FROM json_each(not_admitted_json) j "
        f"WHERE j.type != 'array' OR json_array_length(j.value) != 2 OR "
        f"{bad.format(first)}))",
    ]
    return {step for q in queries for (step,) in reader.execute(q)}


def replay_fast(reader, config, on_step: Callable[[int], None] | None = None
                ) -> tuple[int, dict | None, bool]:
    """Replay and check the steps of a schema-4 recording on the fast path, from the first
    keyframe. Returns (step, snapshot, clean): ``clean`` True when every step was found clean
    (``step`` is the last one, ``snapshot`` its :meth:`StreamState.snapshot`), else the last
    checkpoint before the first step it could not call clean (``snapshot`` None: from the first
    keyframe), where the reference takes over. ``on_step(k)`` after each step found clean."""
    try:
        num_requests = requests_in_order(reader)
        state = StreamState(config, reader.state_at(-1), num_requests)
        bad = undecodable_steps(reader, num_requests)
    except Exception:  # noqa: BLE001 - anything odd: the reference, from the start, says what
        return -1, None, False
    checkpoint: tuple[int, dict | None] = (-1, None)
    latest = reader.latest_step()
    k = -1
    try:
        for lo in range(0, latest + 1, CHUNK_STEPS):
            hi = min(lo + CHUNK_STEPS, latest + 1)
            span = (lo, hi)
            rows = reader.execute(
                "SELECT step, num_waiting, num_running, num_paused, num_free_blocks, num_total_blocks, "
                "batch, knobs_json, token_text_json FROM steps WHERE step >= ? AND step < ? ORDER BY step", span)
            blocks = dict(reader.execute("SELECT step, data FROM block_events WHERE step >= ? AND step < ?", span))
            arrivals = dict(reader.execute("SELECT arrival_step, count(*) FROM requests WHERE arrival_step >= ? "
                                           "AND arrival_step < ? GROUP BY arrival_step", span))
            transitions: dict[int, list] = {}
            for step, seq, status, slot in reader.execute(
                    "SELECT step, seq, status, slot FROM transitions WHERE step >= ? AND step < ? "
                    "ORDER BY step, ord", span):
                transitions.setdefault(step, []).append((seq, status, slot))
            finishing: dict[int, list] = {}
            for step, seq in reader.execute(
                    f"SELECT step, seq FROM events WHERE step >= ? AND step < ? AND kind IN "
                    f"({', '.join('?' * len(_FINISH_KINDS))})", span + _FINISH_KINDS):
                finishing.setdefault(step, []).append(seq)
            for step, waiting, running, paused, free, total, blob, knobs, texts in rows:
                if step != k + 1 or step in bad:
                    raise Doubt(f"step {step}")
                batch = Batch(blob)
                if texts is not None and len(json.loads(texts)) != int(np.count_nonzero(batch.token_id >= 0)):
                    raise Doubt("token texts")
                state.step(step, arrivals.get(step, 0), batch, blocks.get(step), transitions.get(step, ()),
                           finishing.get(step, ()), knobs_of(knobs), (waiting, running, paused, free, total))
                k = step
                if on_step is not None:
                    on_step(step)
                if (step + 1) % CHECKPOINT_STEPS == 0:
                    checkpoint = (step, state.snapshot())
        if k != latest:
            raise Doubt("steps missing at the end")
    except Exception:  # noqa: BLE001 - a violation or a row the fast path does not take
        return checkpoint[0], checkpoint[1], False
    return k, state.snapshot(), True
