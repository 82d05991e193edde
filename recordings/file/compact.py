"""Schema 4's binary coding of a step's batch and block events (``steps.batch``,
``block_events.data``), both :mod:`recordings.file.packing` blobs; docs/recording.md has the layout.

A step's batch is seven aligned arrays, in batch order (``n`` = ``num_scheduled_requests``):

0. ``seq`` as differences (the first from 0): the requests' arrival numbers
1. ``slot``
2. ``num_tokens`` scheduled
3. ``num_computed_tokens`` (as it is: a step decodes without the ``requests`` table, so a file
   that lost request rows still says what ran)
4. ``is_prefill`` (0 / 1)
5. ``token_id + 1`` of the token the entry sampled (0 = none)
6. the sampled tokens' indexes, or empty when each follows from the batch
   (``num_computed_tokens + num_tokens - num_prompt_tokens``, always today)

A step's block events are six arrays, in event order: 0. ``kind`` (index in
:data:`BLOCK_EVENT_CODES`), 1. ``seq`` as differences from the previous event's (the
first from 0; ``-1`` = the pool's own event), 2. the number of block ids of each event, 3. all the
events' block ids one after the other, as differences from the previous id (the first from 0: a
run of consecutive blocks is a run of 1s, which zlib squeezes to a few bytes), 4. the number of
prefix hashes of each event (as many as its blocks for ``cached``, else 0), 5. the hashes
(int64) one after the other.

Source: the delta-and-deflate layout is the one of column stores' integer encodings (e.g. Apache
Parquet's DELTA_BINARY_PACKED, then a general-purpose codec) at the size of one step.
"""
from __future__ import annotations

import json
from itertools import repeat
from typing import Callable, Sequence

import numpy as np

from engine.outputs import BatchEntry, BlockEvent, NewToken, StepRecord
from engine.vocab import BlockEventKind, word
from recordings.file.packing import pack, unpack

NO_REQUEST = -1       # the seq of a block event that belongs to no request (the pool resized)
# A block event's kind code in the blob (the file format: codes are only ever appended)
BLOCK_EVENT_CODES = ("allocated", "freed", "hit", "cached", "evicted", "swapped_out", "swapped_in",
                     "reserved", "unreserved", "forked")
_KIND_CODE = {kind: i for i, kind in enumerate(BLOCK_EVENT_CODES)}
_KINDS = tuple(word(BlockEventKind, k) for k in BLOCK_EVENT_CODES)
BATCH_ARRAYS = 7
BLOCK_ARRAYS = 6


def batch_blob(record: StepRecord, seq_of: Callable[[str], int],
               num_prompt_of: Callable[[str], int]) -> bytes | None:
    """The ``steps.batch`` blob of ``record`` (None for an empty batch: ``num_scheduled_requests``
    0). Raises ``ValueError`` when the tokens are not in batch order, ``KeyError`` for an unknown
    request."""
    batch = record.scheduled
    if not batch:
        if record.new_tokens:
            raise ValueError(f"step {record.step}: tokens without a batch")
        return None
    tok = {t.request_id: t for t in record.new_tokens}
    aligned = [tok.get(e.request_id) for e in batch]
    if tuple(t for t in aligned if t is not None) != record.new_tokens:
        raise ValueError(f"step {record.step}: tokens are not in batch order")
    n = len(batch)
    rids, slots, num_tokens, computed, prefill = zip(*batch)
    seq = np.fromiter(map(seq_of, rids), np.int64, n)
    prompt = np.fromiter(map(num_prompt_of, rids), np.int64, n)
    num_tokens = np.fromiter(num_tokens, np.int64, n)
    computed = np.fromiter(computed, np.int64, n)
    token_id = np.fromiter((0 if t is None else t.token_id + 1 for t in aligned), np.int64, n)
    index = np.fromiter((-1 if t is None else t.index for t in aligned), np.int64, n)
    has = token_id > 0
    derived = np.array_equal(index[has], (computed + num_tokens - prompt)[has])
    return pack([np.diff(seq, prepend=0), np.fromiter(slots, np.int64, n), num_tokens,
                 computed, np.fromiter(prefill, np.int64, n), token_id,
                 () if derived else index])


class Batch:
    """A decoded ``steps.batch`` blob: int64 arrays ``seq``, ``slot``, ``num_tokens``,
    ``num_computed_tokens``, ``token_id`` (-1 = no token), ``token_index`` (-1 = no token) and
    bool ``is_prefill``, aligned in batch order. ``num_prompt_of_seqs(seq)`` gives the prompt
    lengths of an array of arrival numbers; without it ``token_index`` is None when the blob
    leaves the indexes to be derived (what needs only who ran and what they sampled skips the
    lookups).
    Raises ``ValueError`` for a damaged blob."""

    __slots__ = ("seq", "slot", "num_tokens", "num_computed_tokens", "is_prefill", "token_id",
                 "token_index")

    def __init__(self, blob: bytes | None,
                 num_prompt_of_seqs: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        if blob is None:
            empty = np.zeros(0, np.int64)
            self.seq = self.slot = self.num_tokens = self.num_computed_tokens = empty
            self.token_id = self.token_index = empty
            self.is_prefill = np.zeros(0, bool)
            return
        arrays = unpack(blob)
        if len(arrays) != BATCH_ARRAYS:
            raise ValueError(f"a batch blob of {len(arrays)} arrays, not {BATCH_ARRAYS}")
        seq_delta, self.slot, self.num_tokens, self.num_computed_tokens, prefill, token_id, index = arrays
        n = len(seq_delta)
        if any(len(a) != n for a in arrays[1:6]) or len(index) not in (0, n):
            raise ValueError("batch arrays of different lengths")
        self.seq = np.cumsum(seq_delta)
        self.is_prefill = prefill.astype(bool)
        self.token_id = token_id - 1
        has = token_id > 0
        if len(index):
            self.token_index = np.where(has, index, -1)
        elif num_prompt_of_seqs is None:
            self.token_index = None
        else:
            prompt = num_prompt_of_seqs(self.seq)
            self.token_index = np.where(has, self.num_computed_tokens + self.num_tokens - prompt, -1)

    @classmethod
    def of_json(cls, seq_json: str, prefill_json: str, num_tokens_json: str | None,
                token_id_json: str) -> "Batch":
        """The ``seq``, ``is_prefill``, ``num_tokens`` and ``token_id`` of a schema-2/3 step from
        its JSON arrays (``num_computed_tokens`` and ``token_index`` None). Raises
        ``ValueError`` on malformed arrays."""
        self = cls.__new__(cls)
        self.seq = np.asarray(json.loads(seq_json), np.int64).reshape(-1)
        n = len(self.seq)
        self.token_id = np.asarray(json.loads(token_id_json), np.int64).reshape(-1)
        self.is_prefill = np.zeros(n, bool)
        self.num_tokens = np.ones(n, np.int64) if num_tokens_json is None else \
            np.asarray(json.loads(num_tokens_json), np.int64).reshape(-1)
        for p in json.loads(prefill_json or "[]"):   # [[index, num_tokens], ...] (legacy: indexes)
            i = p[0] if isinstance(p, list) else p
            self.is_prefill[i] = True
            if isinstance(p, list) and num_tokens_json is None:
                self.num_tokens[i] = p[1]
        if len(self.token_id) != n or len(self.num_tokens) != n:
            raise ValueError("batch arrays of different lengths")
        self.slot = self.num_computed_tokens = self.token_index = None
        return self

    def entries(self, ids: Sequence[str]) -> tuple[tuple[BatchEntry, ...], tuple[NewToken, ...]]:
        """``StepRecord.scheduled`` and ``new_tokens`` (text ``texts`` empty) of this batch,
        ``ids`` the request ids of ``seq``."""
        # tuple.__new__ makes the named tuples without their Python-level __new__ (3x faster)
        scheduled = tuple(map(tuple.__new__, repeat(BatchEntry), zip(
            ids, self.slot.tolist(), self.num_tokens.tolist(), self.num_computed_tokens.tolist(),
            self.is_prefill.tolist())))
        has = np.flatnonzero(self.token_id >= 0)
        tokens = tuple(map(tuple.__new__, repeat(NewToken), zip(
            [ids[i] for i in has.tolist()], self.token_index[has].tolist(),
            self.token_id[has].tolist(), repeat(""))))
        return scheduled, tokens


def block_events_blob(events: Sequence[BlockEvent], seq_of: Callable[[str], int]) -> bytes | None:
    """The ``block_events.data`` blob of a step's block ``events`` (None when there are none).
    Raises ``KeyError`` for an unknown kind or request."""
    if not events:
        return None
    seq = np.fromiter((seq_of(e.request_id) if e.request_id else NO_REQUEST for e in events),
                      np.int64, len(events))
    ids = np.fromiter((b for e in events for b in e.block_ids), np.int64)
    return pack([[_KIND_CODE[e.kind] for e in events], np.diff(seq, prepend=0),
                 [len(e.block_ids) for e in events], np.diff(ids, prepend=0),
                 [len(e.block_hashes) for e in events],
                 np.fromiter((h for e in events for h in e.block_hashes), np.int64)])


def block_events_from_blob(blob: bytes | None, id_of: Callable[[int], str]) -> tuple[BlockEvent, ...]:
    """The block events :func:`block_events_blob` stored (``id_of``: arrival number -> request id).
    Raises ``ValueError`` for a damaged blob."""
    kinds, seqs, counts, ids, hash_counts, hashes = block_event_columns(blob)
    ids, hashes = ids.tolist(), hashes.tolist()
    out, at, hat = [], 0, 0
    for kind, seq, count, hcount in zip(kinds, seqs.tolist(), counts.tolist(), hash_counts.tolist()):
        out.append(BlockEvent(kind, "" if seq == NO_REQUEST else id_of(seq),
                              tuple(ids[at:at + count]), tuple(hashes[hat:hat + hcount])))
        at += count
        hat += hcount
    return tuple(out)


def block_event_columns(blob: bytes | None) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray, np.ndarray]:
    """The block events :func:`block_events_blob` stored, as columns in event order: kinds (a
    list of str), then int64 arrays: arrival numbers (:data:`NO_REQUEST` for the pool's own
    events), the number of block ids of each event, all the block ids one event after the
    other, the number of prefix hashes of each event and the hashes. What
    ``StateTimeline.apply_columns`` takes, without building a :class:`BlockEvent` or looking up a
    request id. Raises ``ValueError`` for a damaged blob."""
    if blob is None:
        empty = np.zeros(0, np.int64)
        return [], empty, empty, empty, empty, empty
    arrays = unpack(blob)
    if len(arrays) != BLOCK_ARRAYS:
        raise ValueError(f"a block-events blob of {len(arrays)} arrays, not {BLOCK_ARRAYS}")
    kinds, seq_delta, counts, id_delta, hash_counts, hashes = arrays
    n = len(kinds)
    if len(seq_delta) != n or len(counts) != n or len(hash_counts) != n:
        raise ValueError("block-event arrays of different lengths")
    if counts.sum() != len(id_delta) or hash_counts.sum() != len(hashes) or (counts < 0).any() \
            or (hash_counts < 0).any() or kinds.max(initial=0) >= len(_KINDS) or kinds.min(initial=0) < 0:
        raise ValueError("block-event arrays that do not add up")
    return ([_KINDS[k] for k in kinds.tolist()], np.cumsum(seq_delta), counts, np.cumsum(id_delta),
            hash_counts, hashes)


def blocks_by_request(blob: bytes, kind: str) -> dict[int, int]:
    """How many blocks the block events of ``kind`` in a ``block_events.data`` blob name, per
    arrival number (without building the events). Raises ``ValueError`` for a damaged blob."""
    kinds, seq_delta, counts = unpack(blob)[:3]
    pick = kinds == _KIND_CODE[kind]
    out: dict[int, int] = {}
    for seq, n in zip(np.cumsum(seq_delta)[pick].tolist(), counts[pick].tolist()):
        out[seq] = out.get(seq, 0) + n
    return out


_HASH_CLEARED = {_KIND_CODE[k] for k in ("evicted", "reserved", "unreserved")}


def apply_hash_events(block_hash: np.ndarray, blob: bytes) -> None:
    """Change ``block_hash`` (int64 over the physical blocks, in place) as the block events in a
    ``block_events.data`` blob change the prefix-hash tags, in their order: ``cached`` tags its
    blocks, ``evicted`` / ``reserved`` / ``unreserved`` clear them (as
    ``engine.state.timeline.StateTimeline`` does). Raises ``ValueError`` for a damaged blob or a
    block outside ``block_hash``."""
    kinds, _, counts, id_delta, hash_counts, hashes = unpack(blob)
    if counts.sum() != len(id_delta) or hash_counts.sum() != len(hashes):
        raise ValueError("block-event arrays that do not add up")
    ids = np.cumsum(id_delta)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(block_hash)):
        raise ValueError("a block event names a block outside the pool")
    at = hat = 0
    for kind, n, h in zip(kinds.tolist(), counts.tolist(), hash_counts.tolist()):
        if kind == _KIND_CODE["cached"]:
            if h != n:
                raise ValueError(f"a cached event of {n} blocks with {h} hashes")
            block_hash[ids[at:at + n]] = hashes[hat:hat + h]
        elif kind in _HASH_CLEARED:
            block_hash[ids[at:at + n]] = 0
        at += n
        hat += h
