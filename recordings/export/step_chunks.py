"""A recording's steps in chunks of columns, for exporters that walk a whole run (the Perfetto
export, :mod:`recordings.export.perfetto`).

A :class:`StepChunk` holds, for a range of consecutive steps, each step's scalars, the arrivals
and request events recorded with it and two values of the state after it (cached-free KV blocks
and swapped requests, which the ``steps`` table does not store), and every batch entry's request,
slot, tokens and phase as numpy columns: an exporter works on the entries column-wise and turns
only the few that change something into Python objects.

Two sources give equal chunks (``tests/recordings/export/test_export_paths.py`` holds them to it):

- :func:`column_chunks`, for schema-4 files: the batch blobs decoded column-wise
  (``Reader.batches``), the events, arrivals and transitions as rows, and the two state values
  from a :class:`engine.state.timeline.StateTimeline` fed only the arrivals, block events and
  transitions (no batch entries, no tokens, no per-step snapshot);
- :func:`replayed_chunks`, for any readable recording: the full replay of
  :mod:`recordings.export.replay` (a record and a state snapshot per step), grouped.

Memory follows one chunk and the live requests, never the whole recording.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from engine.outputs import Arrival, RequestEvent, Transition
from engine.state.timeline import StateTimeline
from engine.vocab import EventKind, RequestStatus, word
from recordings.errors import RecordingError
from recordings.file import codec, compact
from recordings.export.replay import Progress, replay

CHUNK_STEPS = 512       # steps per chunk
FULL_COUNT_BLOCKS = 1 << 17   # pools up to this many blocks: cached-free blocks counted over all of them

_STEP_SCALARS = ("step", "start_ns", "end_ns", "clock", "token_time", "num_waiting", "num_running",
                 "num_paused", "num_free_blocks", "num_total_blocks")
_ARRIVALS_SQL = ("SELECT seq, request_id, arrival_step, arrival_time, num_prompt_tokens, max_tokens, "
                 "json_extract(sampling_json, '$.priority') FROM requests "
                 "WHERE arrival_step >= ? AND arrival_step < ? ORDER BY seq")


@dataclass
class StepChunk:
    """Steps ``step[0] .. step[-1]`` (consecutive; ``n`` of them) and their ``m`` batch entries.

    Per step (length ``n``): ``step``, ``start_ns``, ``end_ns``, ``num_waiting``,
    ``num_running``, ``num_paused``, ``num_free_blocks``, ``num_total_blocks``,
    ``num_new_tokens`` (tokens sampled), ``num_preemptions`` (``StepRecord.preempted_ids``),
    ``cached_free`` (blocks held by nobody that still cache a prefix, after the step) and
    ``swapped`` (requests swapped out, after the step) as int64 arrays; ``clock`` and
    ``token_time`` (engine clock) as float64; ``error`` (str or None), ``arrivals`` (lists of
    ``(number, Arrival)``) and ``events`` (lists of ``(number, RequestEvent)``) as lists.

    Per entry (length ``m``, in step then batch order): ``request`` (int64, a number per
    request: its arrival number, or one the source gives it; the same request has the same number
    in every chunk of one source while it runs), ``slot``, ``num_tokens`` (int64) and
    ``is_prefill`` (bool); ``batch_start`` (int64, ``n + 1``): step ``i``'s entries are
    ``batch_start[i]:batch_start[i + 1]``. ``names`` maps every request number used here to
    its request id."""

    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    clock: np.ndarray
    token_time: np.ndarray
    num_waiting: np.ndarray
    num_running: np.ndarray
    num_paused: np.ndarray
    num_free_blocks: np.ndarray
    num_total_blocks: np.ndarray
    num_new_tokens: np.ndarray
    num_preemptions: np.ndarray
    cached_free: np.ndarray
    swapped: np.ndarray
    error: list
    arrivals: list
    events: list
    batch_start: np.ndarray
    request: np.ndarray
    slot: np.ndarray
    num_tokens: np.ndarray
    is_prefill: np.ndarray
    names: dict

    def __len__(self) -> int:
        return len(self.step)

    @property
    def entry_row(self) -> np.ndarray:
        """int64 [m]: the step index (0 .. n-1 in this chunk) of each batch entry."""
        return np.repeat(np.arange(len(self.step)), np.diff(self.batch_start))

    def changed_entries(self, value: np.ndarray, entries: np.ndarray | None = None) -> np.ndarray:
        """The indexes (ascending) among ``entries`` (entry indexes in batch order; default all)
        of the entries whose ``value`` (an array over all entries) may differ from what the
        request's previous entry left: the request's first among ``entries`` in this chunk, a
        ``value`` other than its previous entry's, or an arrival or event of the request recorded
        with a step from its previous entry's to this one (inclusive). Every other entry repeats
        its previous entry with nothing in between that concerns the request."""
        idx = np.arange(len(self.request)) if entries is None else np.asarray(entries, np.int64)
        if not len(idx):
            return idx
        req, row, val = self.request[idx], self.entry_row[idx], value[idx]
        order = np.argsort(req, kind="stable")
        req, row, val = req[order], row[order], val[order]
        repeat = (req[1:] == req[:-1]) & (val[1:] == val[:-1])
        touched = self._touch_keys()
        if len(touched):
            width = len(self.step) + 1
            lo = np.searchsorted(touched, req[1:] * width + row[:-1], "left")
            hi = np.searchsorted(touched, req[1:] * width + row[1:], "right")
            repeat &= lo == hi
        changed = np.ones(len(idx), bool)
        changed[1:] = ~repeat
        out = np.zeros(len(idx), bool)
        out[order] = changed
        return idx[out]

    def _touch_keys(self) -> np.ndarray:
        """Sorted ``request * (n + 1) + step index`` of every arrival and event."""
        pairs = [(num, k) for k, items in enumerate(self.arrivals) for num, _ in items]
        pairs += [(num, k) for k, items in enumerate(self.events) for num, _ in items]
        if not pairs:
            return np.zeros(0, np.int64)
        keys = np.array(pairs, np.int64)
        return np.sort(keys[:, 0] * (len(self.step) + 1) + keys[:, 1])


def chunks(reader, progress: Progress | None = None, chunk_steps: int | None = None) -> Iterator[StepChunk]:
    """The recording's steps in chunks of ``chunk_steps`` (default :data:`CHUNK_STEPS`):
    :func:`column_chunks` where the file allows it (schema 4), else :func:`replayed_chunks`."""
    if has_columns(reader):
        return column_chunks(reader, progress, chunk_steps)
    return replayed_chunks(reader, progress, chunk_steps)


def has_columns(reader) -> bool:
    """Whether ``reader`` reads a schema-4 file through ``recordings.file.reader.Reader`` (the
    batches as blobs with slots, what :func:`column_chunks` reads)."""
    from recordings.file.reader import Reader
    return type(reader) is Reader and reader.execute("PRAGMA user_version")[0][0] >= 4


# --- the reference: the full replay ------------------------------------------------------------
def replayed_chunks(reader, progress: Progress | None = None,
                    chunk_steps: int | None = None) -> Iterator[StepChunk]:
    """Chunks of ``chunk_steps`` steps from the full replay (:func:`recordings.export.replay.replay`:
    each step's record and the state after it). Any readable recording. Raises
    ``RecordingError`` as the replay does."""
    chunk_steps = chunk_steps or CHUNK_STEPS
    numbers: dict[str, int] = {}
    pairs: list = []
    for pair in replay(reader):
        pairs.append(pair)
        if len(pairs) == chunk_steps:
            yield _chunk_of(pairs, numbers)
            _done(progress, len(pairs))
            pairs = []
    if pairs:
        yield _chunk_of(pairs, numbers)
        _done(progress, len(pairs))


def _chunk_of(pairs: list, numbers: dict[str, int]) -> StepChunk:
    """A chunk of (state, record) pairs; ``numbers`` numbers the requests, new ones from
    ``numbers[""]`` on (request ids are not empty), and keeps them for the requests of the last
    step's batch (the next chunk may continue their slot runs)."""
    records = [r for _, r in pairs]

    def number(rid: str) -> int:
        num = numbers.get(rid)
        if num is None:
            num = numbers[rid] = numbers.setdefault("", 0)
            numbers[""] = num + 1
        return num
    entries = [e for r in records for e in r.scheduled]
    request = np.fromiter((number(e.request_id) for e in entries), np.int64, len(entries))
    arrivals = [[(number(a.request_id), a) for a in r.arrivals] for r in records]
    events = [[(number(e.request_id), e) for e in r.events] for r in records]
    names = {num: rid for rid, num in numbers.items() if rid}
    keep = {e.request_id for e in records[-1].scheduled} | {""}
    for rid in [rid for rid in numbers if rid not in keep]:
        del numbers[rid]
    scalars = {name: np.array([getattr(r, name) for r in records], np.float64 if name in ("clock", "token_time")
                              else np.int64) for name in _STEP_SCALARS}
    return StepChunk(
        **scalars,
        num_new_tokens=np.array([len(r.new_tokens) for r in records], np.int64),
        num_preemptions=np.array([len(r.preempted_ids) for r in records], np.int64),
        cached_free=np.array([np.count_nonzero(s.cached_free_mask()) for s, _ in pairs], np.int64),
        swapped=np.array([len(s.queue_rows("swapped")) for s, _ in pairs], np.int64),
        error=[r.error for r in records], arrivals=arrivals, events=events,
        batch_start=np.concatenate([[0], np.cumsum([len(r.scheduled) for r in records])]).astype(np.int64),
        request=request, slot=np.array([e.slot for e in entries], np.int64).reshape(-1),
        num_tokens=np.array([e.num_tokens for e in entries], np.int64).reshape(-1),
        is_prefill=np.array([e.is_prefill for e in entries], bool).reshape(-1), names=names)


# --- schema 4: columns ---------------------------------------------------------------------------
def column_chunks(reader, progress: Progress | None = None,
                  chunk_steps: int | None = None) -> Iterator[StepChunk]:
    """Chunks of ``chunk_steps`` steps of a schema-4 file (see the module doc), equal to
    :func:`replayed_chunks` of it. Raises ``RecordingError`` naming the step where a row does not
    decode, a step is missing or the changes cannot be applied."""
    chunk_steps = chunk_steps or CHUNK_STEPS
    latest = reader.latest_step()
    state = _StateValues(reader)
    for lo in range(0, latest + 1, chunk_steps):
        hi = min(lo + chunk_steps, latest + 1)
        try:
            chunk = _column_chunk(reader, lo, hi, state)
        except (KeyError, ValueError, IndexError, TypeError, AttributeError, OverflowError) as e:
            raise RecordingError(f"{reader.path}: cannot export past steps {lo}..{hi - 1}: "
                                 f"{type(e).__name__}: {e}") from e
        yield chunk
        _done(progress, len(chunk))


def _done(progress: Progress | None, n: int) -> None:
    if progress is not None:
        progress(n)


def _column_chunk(reader, lo: int, hi: int, state: "_StateValues") -> StepChunk:
    rows = reader.batches(lo, hi, (*_STEP_SCALARS, "error", "preempted_json"))
    steps = [r[0][0] for r in rows]
    if steps != list(range(lo, lo + len(steps))) or len(steps) != hi - lo:
        missing = next((k for k, s in zip(range(lo, hi), steps + [None] * (hi - lo)) if k != s), lo)
        raise RecordingError(f"{reader.path}: cannot export past step {missing}: step {missing} is missing")
    n = len(rows)
    cols = list(zip(*(r[0] for r in rows)))
    scalars = {name: np.array(cols[i], np.float64 if name in ("clock", "token_time") else np.int64)
               for i, name in enumerate(_STEP_SCALARS)}
    batches = [b for _, b in rows]
    sizes = np.fromiter((len(b.seq) for b in batches), np.int64, n)

    def joined(name: str, dtype) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in batches]).astype(dtype, copy=False)
    request = joined("seq", np.int64)
    ids: dict[int, str] = {}

    def id_of(seq: int) -> str:
        name = ids.get(seq)
        if name is None:
            name = ids[seq] = reader.request_ids_of([seq])[0]
        return name
    uniq = np.unique(request)
    ids.update(zip(uniq.tolist(), reader.request_ids_of(uniq)))
    arrivals: list[list] = [[] for _ in range(n)]
    for row in reader.execute(_ARRIVALS_SQL, (lo, hi)):
        ids[row[0]] = row[1]
        arrivals[row[2] - lo].append((row[0], codec.arrival_from_row(row[1:])))
    events: list[list] = [[] for _ in range(n)]
    for step, seq, kind, detail in reader.execute(
            "SELECT step, seq, kind, detail FROM events WHERE step >= ? AND step < ? ORDER BY step, ord", (lo, hi)):
        events[step - lo].append((seq, RequestEvent(id_of(seq), word(EventKind, kind), detail or "")))
    transitions: list[list] = [[] for _ in range(n)]
    for step, seq, status, slot, nc, npre, err in reader.execute(
            f"SELECT {', '.join(codec.TRANSITION_COLUMNS)} FROM transitions WHERE step >= ? AND step < ? "
            "ORDER BY step, ord", (lo, hi)):
        transitions[step - lo].append((seq, Transition(id_of(seq), word(RequestStatus, status), slot, nc,
                                                       npre, err)))
    blocks = dict(reader.execute("SELECT step, data FROM block_events WHERE step >= ? AND step < ?", (lo, hi)))
    first = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=first[1:])
    cached, swapped = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for k in range(n):
        cached[k], swapped[k] = state.advance(lo + k, [a for _, a in arrivals[k]], blocks.get(lo + k),
                                              transitions[k], request[first[k]:first[k + 1]], id_of)
    preempted = cols[len(_STEP_SCALARS) + 1]
    return StepChunk(
        **scalars,
        num_new_tokens=np.fromiter((int(np.count_nonzero(b.token_id >= 0)) for b in batches), np.int64, n),
        num_preemptions=np.fromiter((len(json.loads(p)) if p else 0 for p in preempted), np.int64, n),
        cached_free=cached, swapped=swapped, error=list(cols[len(_STEP_SCALARS)]),
        arrivals=arrivals, events=events, batch_start=first, request=request,
        slot=joined("slot", np.int64), num_tokens=joined("num_tokens", np.int64),
        is_prefill=joined("is_prefill", bool), names=ids)


class _StateValues:
    """The cached-free block count and the number of swapped requests after each step, kept by
    applying only what changes them. A block is cached-free once a ``cached`` block event gave
    it a prefix hash and no request holds it: until the first such event the count is 0 and
    nothing is kept; from then on the arrivals, block events and transitions go to a
    :class:`StateTimeline` (block owners and prefix hashes, as the replay keeps them), started
    from ``reader.state_at`` the step before. A request is swapped from a transition to
    ``swapped`` until it is scheduled again or a transition says otherwise (the statuses the
    timeline gives)."""

    def __init__(self, reader) -> None:
        initial = reader.state_at(-1)
        self.reader = reader
        self.timeline: StateTimeline | None = None
        self.cached = int(np.count_nonzero(initial.cached_free_mask()))
        if initial.block_hash.any():
            self.timeline = StateTimeline.from_state(initial)
        rows = initial.queue_rows("swapped")
        self.swapped: set[int] = set(initial.columns["seq"][rows].tolist())

    def _cached_among(self, ids: np.ndarray) -> int:
        tl = self.timeline
        return int(np.count_nonzero((tl.block_owner[ids] < 0) & (tl.block_hash[ids] != 0)))

    def advance(self, step: int, arrivals: list[Arrival], block_blob: bytes | None,
                transitions: list[tuple[int, Transition]], batch_seqs: np.ndarray,
                id_of: Callable[[int], str]) -> tuple[int, int]:
        """Apply step ``step``'s changes (``transitions`` as (request number, transition));
        (cached-free blocks, swapped requests) after it."""
        if self.swapped and len(batch_seqs):
            self.swapped.difference_update(batch_seqs.tolist())      # scheduled: running
        if self.timeline is None and block_blob is not None and compact.blocks_by_request(block_blob, "cached"):
            self.timeline = StateTimeline.from_state(self.reader.state_at(step - 1))
        if self.timeline is not None:
            tl = self.timeline
            block_events = compact.block_events_from_blob(block_blob, id_of)
            if len(tl.block_owner) <= FULL_COUNT_BLOCKS:       # two passes over the pool: cheap
                tl.apply_changes(arrivals, block_events, [t for _, t in transitions])
                self.cached = int(np.count_nonzero((tl.block_owner < 0) & (tl.block_hash != 0)))
            else:                                               # count again where events were
                touched = np.unique(np.fromiter((b for ev in block_events for b in ev.block_ids), np.int64))
                before = self._cached_among(touched)
                tl.apply_changes(arrivals, block_events, [t for _, t in transitions])
                self.cached += self._cached_among(touched) - before
        for seq, t in transitions:
            if t.status == RequestStatus.SWAPPED:
                self.swapped.add(seq)
            else:
                self.swapped.discard(seq)
        return self.cached, len(self.swapped)
