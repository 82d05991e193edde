"""Schema-v3 conversions between the engine's frozen objects and the recording's rows.

The writer calls the ``*_rows`` / ``*_blob`` functions, the reader the ``*_from_*`` ones; both
directions live here so a read-back object equals the one written. Requests are referred to by
their arrival number ``seq`` (the ``requests`` table's key) rather than their id text. A step's
batch and tokens are stored as aligned JSON arrays in its ``steps`` row (SQL can expand them with
``json_each``; the ``tokens`` and ``step_requests`` views do), so a step of 256 decoding requests
costs a few kB. What follows from other columns is left out (NULL), and the views and
:func:`record_from_rows` fill it in: ``batch_num_tokens_json`` is NULL when every entry outside
``batch_prefill_json`` (``[[index, num_tokens], ...]``) computes one token (always, for a decode),
and ``token_index_json`` is NULL when each token's index is ``num_computed_tokens + num_tokens -
num_prompt_tokens`` (always, today: the chunk that samples ends at the request's last known token).
Keyframes are engine states stored as a NumPy ``.npz`` (``allow_pickle`` off, integers in the
narrowest type that holds them). Version 3 only added columns (prefix-cache counters, the hashes
of ``cached`` block events): the reader selects :data:`V2_DEFAULTS` in their place on a
version-2 file.
"""
from __future__ import annotations

import dataclasses
import io
import json
import zipfile
import zlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from engine.outputs import Arrival, BatchEntry, BlockEvent, NewToken, RequestEvent, RequestView, StepRecord, Transition
from engine.request import SamplingParams
from engine.state.state import COLUMNS, EngineState
from engine.vocab import BlockEventKind, EventKind, NotAdmittedReason, RequestStatus, word
from recordings.file import compact
from recordings.file.event_details import load_detail, store_detail

SeqOf = Callable[[str], int]
IdOf = Callable[[int], str]
NumPromptOf = Callable[[int], int]    # arrival number -> number of prompt tokens


def dumps(obj: Any) -> str:
    """Compact JSON text; tuples become lists, anything else unknown becomes ``str(obj)``."""
    return json.dumps(obj, separators=(",", ":"), default=str)


def strict_dumps(obj: Any) -> str:
    """Compact JSON text; raises ``TypeError`` for values JSON cannot hold."""
    return json.dumps(obj, separators=(",", ":"))


# --- requests ----------------------------------------------------------------------------------
_TOKEN_DTYPES = {2: "<u2", 4: "<i4"}   # tag byte -> dtype of the ids after it


def token_blob(token_ids: Sequence[int]) -> bytes:
    """Prompt token ids as a tag byte (2 or 4) then little-endian uint16 (every id < 65536: most
    vocabularies) or int32 ids. The tagged blob has an odd length, a legacy one (plain int32,
    written before the tag) an even one."""
    ids = np.asarray(token_ids, dtype=np.int64)
    size = 2 if not len(ids) or (ids.min() >= 0 and ids.max() < 1 << 16) else 4
    return bytes([size]) + ids.astype(_TOKEN_DTYPES[size]).tobytes()


def tokens_from_blob(blob: bytes | None) -> tuple[int, ...] | None:
    """The token ids :func:`token_blob` stored (None stays None). Raises ``ValueError`` for a
    damaged blob."""
    if blob is None:
        return None
    if len(blob) % 2 == 0:  # legacy: plain int32
        return tuple(np.frombuffer(blob, dtype="<i4").tolist())
    dtype = _TOKEN_DTYPES.get(blob[0])
    if dtype is None:
        raise ValueError(f"prompt token blob with unknown tag {blob[0]}")
    return tuple(np.frombuffer(blob[1:], dtype=dtype).tolist())


def request_row(seq: int, request_id: str, arrival_step: int, arrival_time: float,
                prompt_token_ids: Sequence[int] | None, num_prompt_tokens: int, prompt_text: str | None,
                sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The ``requests`` row of an arrival (outcome columns still empty); the
    ``prompt_token_ids`` column is NULL when ``prompt_token_ids`` is None (not stored)."""
    return {"seq": seq, "request_id": request_id, "arrival_step": arrival_step,
            "arrival_time": arrival_time, "num_prompt_tokens": num_prompt_tokens,
            "max_tokens": sampling.get("max_tokens"),
            "prompt_token_ids": None if prompt_token_ids is None else token_blob(prompt_token_ids),
            "prompt_text": prompt_text,
            "sampling_json": dumps(stored_sampling(sampling))}


# SamplingParams' fields at their defaults (a sequence as a list, as JSON gives it back)
_SAMPLING_DEFAULTS = {f.name: list(f.default) if isinstance(f.default, tuple) else f.default
                      for f in dataclasses.fields(SamplingParams)
                      if f.default is not dataclasses.MISSING}


def stored_sampling(sampling: Mapping[str, Any]) -> dict[str, Any]:
    """What ``requests.sampling_json`` stores of a request's sampling dict (schema 5): every key
    but those at ``engine.request.SamplingParams``' default (``max_tokens`` always stays). A
    conversation trace's requests differ only in ``max_tokens``: 20 bytes instead of ~220."""
    return {k: v for k, v in sampling.items()
            if k == "max_tokens" or k not in _SAMPLING_DEFAULTS
            or (list(v) if isinstance(v, tuple) else v) != _SAMPLING_DEFAULTS[k]}


def outcome_row(view: RequestView, step: int) -> dict[str, Any]:
    """Outcome columns of a request that finished in ``step``, from its final view."""
    return {"request_id": view.request_id, "status": view.status,
            "finish_reason": view.finish_reason, "finish_step": step,
            "num_output_tokens": view.num_output_tokens, "ttft": view.ttft,
            "mean_itl": view.mean_itl, "num_preemptions": view.num_preemptions,
            "error": view.error}


def arrival_from_row(row: Sequence[Any]) -> Arrival:
    """An :class:`Arrival` from (request_id, arrival_step, arrival_time, num_prompt_tokens,
    max_tokens, priority); a NULL priority (files written before priorities) is 0."""
    rid, step, at, n, m, prio = row
    return Arrival(rid, int(step), float(at), int(n), int(m), int(prio or 0))


# --- steps -------------------------------------------------------------------------------------
def step_rows(record: StepRecord, seq_of: SeqOf,
              num_prompt_of: Callable[[str], int]) -> dict[str, list[dict[str, Any]]]:
    """Rows of every table one step writes in schema 4, keyed by table name
    (``num_prompt_of(request_id)``: its prompt length): the batch and the block events as
    :mod:`recordings.file.compact` blobs. Raises ``KeyError`` for a request the writer was never
    told about and ``TypeError`` for a value JSON cannot hold."""
    step = record.step
    texts = [t.text for t in record.new_tokens]
    steps_row = {
        "step": step, "start_ns": record.start_ns, "end_ns": record.end_ns,
        "clock": record.clock, "token_time": record.token_time,
        "num_scheduled_tokens": record.total_num_scheduled_tokens,
        "num_scheduled_requests": len(record.scheduled), "num_new_tokens": len(record.new_tokens),
        "num_waiting": record.num_waiting, "num_running": record.num_running,
        "num_paused": record.num_paused, "num_finished": record.num_finished,
        "num_free_blocks": record.num_free_blocks, "num_total_blocks": record.num_total_blocks,
        "kv_cache_usage": record.kv_cache_usage, "num_preemptions": record.num_preemptions,
        "schedule_ns": record.schedule_ns, "forward_ns": record.forward_ns,
        "update_ns": record.update_ns, "recorder_wait_ns": record.recorder_wait_ns,
        "error": record.error,
        "num_prefill_tokens": sum(e.num_tokens for e in record.scheduled if e.is_prefill),
        "batch": compact.batch_blob(record, seq_of, num_prompt_of),
        # the new tokens' text, in token order (NULL when all are empty)
        "token_text_json": strict_dumps(texts) if any(texts) else None,
        "preempted_json": strict_dumps([seq_of(r) for r in record.preempted_ids])
        if record.preempted_ids else None,
        "not_admitted_json": strict_dumps([[seq_of(r), why] for r, why in record.not_admitted])
        if record.not_admitted else None,
        "waiting_reason": None if record.waiting_reason == NotAdmittedReason.BEHIND else record.waiting_reason,
        "knobs_json": strict_dumps(record.knobs) if record.knobs else None,
        "prefix_cache_queries": record.prefix_cache_queries,
        "prefix_cache_hits": record.prefix_cache_hits,
    }
    blocks = compact.block_events_blob(record.block_events, seq_of)
    return {
        "steps": [steps_row],
        "events": [{"step": step, "ord": i, "seq": seq_of(e.request_id), "kind": e.kind,
                    "detail": store_detail(e.kind, e.detail)} for i, e in enumerate(record.events)],
        "block_events": [] if blocks is None else [{"step": step, "data": blocks}],
        "transitions": [{"step": step, "ord": i, "seq": seq_of(t.request_id), "status": t.status,
                         "slot": t.slot, "num_computed_tokens": t.num_computed_tokens,
                         "num_preemptions": t.num_preemptions, "error": t.error}
                        for i, t in enumerate(record.transitions)],
    }


# Schema 4: the steps columns the reader selects (record_from_v4_row unpacks them in this order).
V4_STEP_COLUMNS = ("step", "start_ns", "end_ns", "clock", "token_time", "num_waiting", "num_running",
                   "num_paused", "num_finished", "num_free_blocks", "num_total_blocks",
                   "schedule_ns", "forward_ns", "update_ns", "recorder_wait_ns", "error", "batch",
                   "token_text_json", "preempted_json", "not_admitted_json", "waiting_reason",
                   "prefix_cache_queries", "prefix_cache_hits", "knobs_json")


def record_from_v4_row(row: Sequence[Any], arrivals: Sequence[Arrival], events: Sequence[Sequence],
                       block_blob: bytes | None, transitions: Sequence[Sequence], id_of: IdOf,
                       num_prompt_of_seqs: Callable[[np.ndarray], np.ndarray],
                       ids_of_seqs: Callable[[np.ndarray], list[str]]) -> StepRecord:
    """Rebuild one :class:`StepRecord` of a schema-4 file from its ``steps`` row
    (:data:`V4_STEP_COLUMNS`), its arrivals, events and transitions rows (as in
    :func:`record_from_rows`) and its ``block_events.data`` blob (None: none);
    ``num_prompt_of_seqs`` / ``ids_of_seqs`` map an array of arrival numbers to prompt lengths /
    request ids. Raises ``ValueError`` / ``KeyError`` / ``TypeError`` on bad rows."""
    (step, start_ns, end_ns, clock, token_time, num_waiting, num_running, num_paused,
     num_finished, num_free, num_total, schedule_ns, forward_ns, update_ns, wait_ns, error,
     batch_blob, t_text, preempted, not_admitted, waiting_reason, prefix_cache_queries,
     prefix_cache_hits, knobs) = row
    batch = compact.Batch(batch_blob, num_prompt_of_seqs)
    ids = ids_of_seqs(batch.seq)
    scheduled, tokens = batch.entries(ids)
    if t_text is not None:
        texts = json.loads(t_text)
        if len(texts) != len(tokens):
            raise ValueError(f"step {step}: {len(texts)} token texts for {len(tokens)} tokens")
        tokens = tuple(t._replace(text=text or "") for t, text in zip(tokens, texts))
    return StepRecord(
        step=step, start_ns=start_ns, end_ns=end_ns, clock=clock, token_time=token_time,
        arrivals=tuple(arrivals), scheduled=scheduled, new_tokens=tokens,
        events=tuple(RequestEvent(id_of(seq), word(EventKind, kind), load_detail(kind, detail or ""))
                     for _, seq, kind, detail in events),
        block_events=compact.block_events_from_blob(block_blob, id_of),
        transitions=tuple(Transition(id_of(seq), word(RequestStatus, status), slot, nc, npre, err)
                          for _, seq, status, slot, nc, npre, err in transitions),
        preempted_ids=tuple(id_of(s) for s in json.loads(preempted)) if preempted else (),
        not_admitted=tuple((id_of(s), why) for s, why in json.loads(not_admitted)) if not_admitted else (),
        num_waiting=num_waiting, num_running=num_running, num_paused=num_paused,
        num_finished=num_finished, num_free_blocks=num_free, num_total_blocks=num_total,
        schedule_ns=schedule_ns, forward_ns=forward_ns, update_ns=update_ns,
        recorder_wait_ns=wait_ns, error=error, waiting_reason=waiting_reason or NotAdmittedReason.BEHIND,
        prefix_cache_queries=prefix_cache_queries, prefix_cache_hits=prefix_cache_hits,
        knobs=knobs_from_json(knobs))


# Column order the reader selects; record_from_rows unpacks rows in exactly this order.
STEP_COLUMNS = ("step", "start_ns", "end_ns", "clock", "token_time", "num_waiting", "num_running",
                "num_paused", "num_finished", "num_free_blocks", "num_total_blocks",
                "schedule_ns", "forward_ns", "update_ns", "recorder_wait_ns", "error",
                "batch_seq_json", "batch_slot_json", "batch_num_tokens_json",
                "batch_num_computed_json", "batch_prefill_json", "token_index_json",
                "token_id_json", "token_text_json", "preempted_json", "not_admitted_json",
                "waiting_reason", "prefix_cache_queries", "prefix_cache_hits", "knobs_json")
EVENT_COLUMNS = ("step", "seq", "kind", "detail")
BLOCK_EVENT_COLUMNS = ("step", "kind", "seq", "block_ids_json", "block_hashes_json")
# What a version-2 file is read as, for the columns version 3 added.
V2_DEFAULTS = {"prefix_cache_queries": "0", "prefix_cache_hits": "0", "block_hashes_json": "NULL",
               "waiting_reason": "NULL", "knobs_json": "NULL"}
NO_REQUEST = -1     # the seq of a block event that belongs to no request (the pool resized)
TRANSITION_COLUMNS = ("step", "seq", "status", "slot", "num_computed_tokens", "num_preemptions",
                      "error")


def record_from_rows(row: Sequence[Any], arrivals: Sequence[Arrival], events: Sequence[Sequence],
                     block_events: Sequence[Sequence], transitions: Sequence[Sequence],
                     id_of: IdOf, num_prompt_of: NumPromptOf) -> StepRecord:
    """Rebuild one :class:`StepRecord` from its rows (columns as in the ``*_COLUMNS`` tuples,
    child rows in ``ord`` order). Raises ``ValueError``/``KeyError``/``TypeError`` on bad rows."""
    (step, start_ns, end_ns, clock, token_time, num_waiting, num_running, num_paused,
     num_finished, num_free, num_total, schedule_ns, forward_ns, update_ns, wait_ns, error,
     b_seq, b_slot, b_n, b_nc, b_pre, t_idx, t_id, t_text, preempted, not_admitted,
     waiting_reason, prefix_cache_queries, prefix_cache_hits, knobs) = row
    seqs, slots, ncs, ids = (json.loads(x) for x in (b_seq, b_slot, b_nc, t_id))
    prefill_rows = json.loads(b_pre)  # [[index, num_tokens], ...] (a plain index: legacy)
    prefill = {p[0] if isinstance(p, list) else p for p in prefill_rows}
    if b_n is not None:
        ns = json.loads(b_n)
    else:
        ns = [1] * len(seqs)
        for i, n in (p for p in prefill_rows if isinstance(p, list)):
            ns[i] = n
    if t_idx is not None:
        idxs = json.loads(t_idx)
    else:
        idxs = [-1 if tid < 0 else nc + n - num_prompt_of(seq)
                for seq, n, nc, tid in zip(seqs, ns, ncs, ids)]
    texts = json.loads(t_text) if t_text is not None else [""] * len(seqs)
    if not (len(seqs) == len(slots) == len(ns) == len(ncs) == len(idxs) == len(ids) == len(texts)):
        raise ValueError(f"step {step}: batch arrays of different lengths")
    rids = [id_of(s) for s in seqs]
    return StepRecord(
        step=step, start_ns=start_ns, end_ns=end_ns, clock=clock, token_time=token_time,
        arrivals=tuple(arrivals),
        scheduled=tuple(BatchEntry(rid, slot, n, nc, i in prefill)
                        for i, (rid, slot, n, nc) in enumerate(zip(rids, slots, ns, ncs))),
        new_tokens=tuple(NewToken(rid, idx, tid, text or "")
                         for rid, idx, tid, text in zip(rids, idxs, ids, texts) if idx >= 0),
        events=tuple(RequestEvent(id_of(seq), word(EventKind, kind), detail or "") for _, seq, kind, detail in events),
        block_events=tuple(BlockEvent(word(BlockEventKind, kind), "" if seq == NO_REQUEST else id_of(seq),
                                      tuple(json.loads(blocks)),
                                      tuple(json.loads(hashes)) if hashes else ())
                           for _, kind, seq, blocks, hashes in block_events),
        transitions=tuple(Transition(id_of(seq), word(RequestStatus, status), slot, nc, npre, err)
                          for _, seq, status, slot, nc, npre, err in transitions),
        preempted_ids=tuple(id_of(s) for s in json.loads(preempted)),
        not_admitted=tuple((id_of(s), word(NotAdmittedReason, why)) for s, why in json.loads(not_admitted)),
        num_waiting=num_waiting, num_running=num_running, num_paused=num_paused,
        num_finished=num_finished, num_free_blocks=num_free, num_total_blocks=num_total,
        schedule_ns=schedule_ns, forward_ns=forward_ns, update_ns=update_ns,
        recorder_wait_ns=wait_ns, error=error, waiting_reason=word(NotAdmittedReason, waiting_reason) if waiting_reason else NotAdmittedReason.BEHIND,
        prefix_cache_queries=prefix_cache_queries, prefix_cache_hits=prefix_cache_hits,
        knobs=knobs_from_json(knobs))


def knobs_from_json(text: str | None) -> tuple[tuple[str, int], ...]:
    """``StepRecord.knobs`` from a ``steps.knobs_json`` value (NULL: no change)."""
    return () if text is None else tuple((str(k), int(v)) for k, v in json.loads(text))


# --- keyframes ---------------------------------------------------------------------------------
# Columns a keyframe leaves out: the requests table holds them (``StaticOf`` looks them up).
STATIC_COLUMNS = ("arrival_step", "arrival_time", "num_prompt_tokens", "max_tokens")
StaticOf = Callable[[np.ndarray], tuple[tuple[str, ...], dict[str, np.ndarray]]]


HashesOf = Callable[[int, int], np.ndarray]   # (base keyframe step, step) -> block_hash at step
BlockMap = tuple[int, np.ndarray, np.ndarray]   # (keyframe step, block_owner, block_pos)
MapOf = Callable[[int], BlockMap]               # keyframe step -> its block map


def state_blob(state: EngineState, hash_base: int | None = None,
               map_base: BlockMap | None = None) -> tuple[bytes, str]:
    """A keyframe of ``state``: (compressed ``.npz`` of its arrays and scalars, None), the
    ``keyframes`` row's ``state_npz`` and ``finished_json``: schema 5 keeps the JSON of the
    recently finished views (:func:`finished_json`) in the ``.npz`` as UTF-8 bytes
    (``finished_json``), deflated with the rest, and leaves the column NULL. Request ids and the static columns (:data:`STATIC_COLUMNS`) are
    not repeated in every keyframe: the ``requests`` table has them, by ``seq`` (stored as
    differences, which compress to almost nothing). With ``hash_base`` (schema 4: the step of an
    earlier keyframe that holds its ``block_hash``) the prefix hashes (8 random bytes a cached
    block, most of a keyframe under prefix caching) are left out and stored as that step
    (``hash_base``): they are the base's, changed by the ``cached`` / ``evicted`` /
    ``reserved`` / ``unreserved`` block events of the steps after it (:func:`apply_hash_events`).
    With ``map_base`` (schema 5: the step, ``block_owner`` and ``block_pos`` of the previous
    keyframe, the same number of blocks) the block map is stored as its changes since that
    keyframe (:func:`map_changes`): most blocks keep their holder between two keyframes, and a
    fragmented cache's map does not compress (~42 kB at 16,384 blocks)."""
    buf = io.BytesIO()
    seq = state.columns["seq"]
    hashes = {"block_hash": state.block_hash} if hash_base is None else \
        {"hash_base": np.array([hash_base], np.int64)}
    block_map = {"block_owner": _narrow(state.block_owner), "block_pos": _narrow(state.block_pos)} \
        if map_base is None else map_changes(map_base, state.block_owner, state.block_pos)
    np.savez_compressed(
        buf, scalars=np.array([state.step, state.num_total_blocks, state.block_size,
                               state.max_num_seqs, state.next_seq], np.int64),
        clock=np.array([state.clock], np.float64),
        seq_delta=_narrow(np.diff(seq, prepend=0)), **block_map, **hashes,
        finished_json=np.frombuffer(finished_json(state.recently_finished).encode(), np.uint8), shared_seq=_narrow(state.shared_seq),
        shared_block=_narrow(state.shared_block), cpu_owner=_narrow(state.cpu_owner),
        **{f"col_{k}": _narrow(v) for k, v in state.columns.items()
           if k != "seq" and k not in STATIC_COLUMNS})
    return buf.getvalue(), None


def finished_json(views: Sequence[RequestView]) -> str:
    """The JSON of a keyframe's recently finished views: one array per view, in
    :class:`RequestView`'s field order (schema 4 stored it in ``keyframes.finished_json``,
    schema 5 in the keyframe's ``.npz``, where it is deflated: ~8 kB -> ~2.7 kB)."""
    return strict_dumps([[v.request_id, v.status, v.arrival_step, v.arrival_time, v.num_prompt_tokens,
                          v.num_output_tokens, v.num_computed_tokens, v.max_tokens, v.slot,
                          v.num_preemptions, v.ttft, v.mean_itl, v.finish_reason, v.error,
                          v.num_recomputed_tokens]      # (older files end at error: read as 0)
                         for v in views])


def map_changes(base: BlockMap, block_owner: np.ndarray, block_pos: np.ndarray) -> dict[str, np.ndarray]:
    """The keyframe arrays of a block map stored as its changes since the keyframe ``base``
    (step, ``block_owner``, ``block_pos``): ``map_base`` (that step), ``map_changed`` (the blocks
    whose owner or position differ, ascending, as differences: the first from 0) and their new
    ``map_owner`` / ``map_pos``. Raises ``ValueError`` when the maps are of different sizes."""
    step, owner, pos = base
    if len(owner) != len(block_owner) or len(pos) != len(block_pos):
        raise ValueError(f"a block map of {len(block_owner)} blocks against a base of {len(owner)}")
    changed = np.flatnonzero((owner != block_owner) | (pos != block_pos))
    return {"map_base": np.array([step], np.int64), "map_changed": _narrow(np.diff(changed, prepend=0)),
            "map_owner": _narrow(block_owner[changed]), "map_pos": _narrow(block_pos[changed])}


def apply_map_changes(base: BlockMap, z) -> tuple[np.ndarray, np.ndarray]:
    """``block_owner`` and ``block_pos`` (int64) of a keyframe ``z`` (an opened ``.npz``) stored as
    :func:`map_changes` against ``base``, its ``map_base``. Raises ``ValueError`` for changes
    that do not fit the base."""
    _, owner, pos = base
    changed = np.cumsum(z["map_changed"].astype(np.int64))
    new_owner, new_pos = z["map_owner"], z["map_pos"]
    if len(new_owner) != len(changed) or len(new_pos) != len(changed) or \
            (len(changed) and (changed[0] < 0 or changed[-1] >= len(owner))):
        raise ValueError("block-map changes that do not fit their base")
    owner, pos = owner.copy(), pos.copy()
    owner[changed], pos[changed] = new_owner, new_pos
    return owner, pos


def _narrow(a: np.ndarray) -> np.ndarray:
    """An integer array in the narrowest type that holds its values (a keyframe compresses
    better); other arrays as they are. ``state_from_blob`` widens them back."""
    if a.dtype.kind not in "iu" or not len(a):
        return a
    return a.astype(np.result_type(np.min_scalar_type(a.min()), np.min_scalar_type(a.max())))


def _column(z, name: str, n: int) -> np.ndarray:
    """Keyframe column ``name`` of ``n`` rows; zeros for a column added after the keyframe was
    written (e.g. ``priority``, which older files of the same schema version lack)."""
    key = f"col_{name}"
    return z[key] if key in z.files else np.zeros(n, COLUMNS[name])


def state_from_blob(blob: bytes, finished: str | None, static_of: StaticOf,
                    hashes_of: HashesOf | None = None, map_of: MapOf | None = None) -> EngineState:
    """The :class:`EngineState` a :func:`state_blob` keyframe holds (``finished``: its
    ``finished_json`` column; NULL: the ``.npz`` holds the views); ``static_of(seqs)`` gives
    the request ids and static columns of those arrival numbers (from the ``requests`` table),
    ``hashes_of(base, step)`` the block hashes of a keyframe stored with a ``hash_base``,
    ``map_of(step)`` the block map of the keyframe a ``map_base`` names.
    Keyframes that carry them themselves (written earlier in this schema's life) are read as
    they are. Raises ``ValueError`` / ``KeyError`` for a damaged keyframe (never unpickles)."""
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            step, nb, bs, mns, next_seq = (int(x) for x in z["scalars"])
            if "request_ids" in z.files:
                ids = tuple(str(x) for x in z["request_ids"])
                columns = {k: _column(z, k, len(ids)) for k in COLUMNS}
            else:
                seq = np.cumsum(z["seq_delta"].astype(np.int64))
                ids, static = static_of(seq)
                columns = {k: _column(z, k, len(seq)) for k in COLUMNS if k != "seq" and k not in static}
                columns.update(static, seq=seq)
            extra = {k: z[k].astype(np.int64) for k in ("block_hash", "shared_seq", "shared_block",
                                                         "cpu_owner") if k in z.files}
            if "hash_base" in z.files:
                if hashes_of is None:
                    raise ValueError("a keyframe whose block hashes are an earlier keyframe's")
                extra["block_hash"] = hashes_of(int(z["hash_base"][0]), step)
            owner, pos = block_map_of(z, map_of)
            return EngineState(
                step, float(z["clock"][0]), nb, bs, mns, next_seq=next_seq,
                request_ids=ids, columns=columns,
                block_owner=owner, block_pos=pos, recently_finished=tuple(RequestView(*v) for v in json.loads(
                    z["finished_json"].tobytes() if finished is None else finished)),
                # prefix caching and swap (keyframes written before them have none of these)
                **extra)
    except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, OverflowError) as exc:
        # a damaged zip or deflate stream (bad header, unknown method, "encrypted" flag...)
        raise ValueError(f"damaged keyframe: {type(exc).__name__}: {exc}") from exc


def block_map_of(z, map_of: MapOf | None) -> tuple[np.ndarray, np.ndarray]:
    """``block_owner`` and ``block_pos`` (int64) of the keyframe ``z`` (an opened ``.npz``): its
    own, or its ``map_base``'s (``map_of(step)``) changed by its :func:`map_changes`. Raises
    ``ValueError`` when it names a base and ``map_of`` is None or gives another step."""
    if "map_base" not in z.files:
        return z["block_owner"].astype(np.int64), z["block_pos"].astype(np.int64)
    if map_of is None:
        raise ValueError("a keyframe whose block map is stored against an earlier keyframe's")
    step = int(z["map_base"][0])
    base = map_of(step)
    if base[0] != step:
        raise ValueError(f"a keyframe's block-map base, keyframe {step}, is missing")
    return apply_map_changes(base, z)
