"""A step range's scalars and batches as numpy columns, as the window's step views need them
(``StepSource.step_batches``). :func:`step_batch_columns` is the one place they are built; what
differs is where the values come from: the ``steps`` table's rows (:func:`columns_from_rows`, for
:meth:`recordings.file.reader.Reader.step_batches`, without decoding whole records),
:class:`engine.outputs.StepRecord` s (:func:`batch_columns`, for sources that hold records) or
a live run's packed steps (``app.live.step_ring.batch_columns``). All give the same columns.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import numpy as np

from engine.outputs import StepRecord
from recordings.file import codec
from recordings.file.compact import Batch
from engine.vocab import NotAdmittedReason

STEP_FIELDS = (("step", np.int64), ("start_ns", np.int64), ("end_ns", np.int64),
               ("clock", np.float64), ("token_time", np.float64), ("num_waiting", np.int64),
               ("num_running", np.int64), ("num_paused", np.int64), ("num_finished", np.int64),
               ("num_free_blocks", np.int64), ("num_total_blocks", np.int64),
               ("schedule_ns", np.int64), ("forward_ns", np.int64), ("update_ns", np.int64),
               ("recorder_wait_ns", np.int64), ("num_scheduled_tokens", np.int64),
               ("num_new_tokens", np.int64), ("num_preemptions", np.int64), ("num_arrivals", np.int64))
# Columns the steps table does not have, as SQL over the file: a step's arrivals (its record's
# ``arrivals``, counted through the index on requests.arrival_step)
STEP_SQL = {"num_arrivals": "(SELECT count(*) FROM requests WHERE requests.arrival_step = steps.step) "
                            "AS num_arrivals"}
BATCH_FIELDS = tuple(STEP_SQL.get(n, n) for n, _ in STEP_FIELDS) + (
    "error", "num_scheduled_requests", "batch_seq_json", "batch_slot_json",
    "batch_num_tokens_json", "batch_num_computed_json", "batch_prefill_json", "preempted_json",
    "not_admitted_json", "waiting_reason", "knobs_json")
# Schema 4: the batch is one blob (recordings.file.compact)
V4_BATCH_FIELDS = tuple(STEP_SQL.get(n, n) for n, _ in STEP_FIELDS) + (
    "error", "num_scheduled_requests", "batch", "preempted_json", "not_admitted_json",
    "waiting_reason", "knobs_json")
ENTRY_FIELDS = (("request_id", object), ("slot", np.int64), ("num_tokens", np.int64),
                ("num_computed_tokens", np.int64), ("is_prefill", bool))
# per-step values kept as lists, as in StepRecord
LIST_FIELDS = ("error", "preempted_ids", "not_admitted", "waiting_reason", "knobs")


def step_batch_columns(steps: dict[str, Sequence[Any]], batch_sizes: Sequence[int] | np.ndarray,
                       entries: dict[str, Sequence[Any] | np.ndarray]) -> dict[str, Any]:
    """The step-batch columns of ``n = len(batch_sizes)`` steps: ``steps`` maps each
    :data:`STEP_FIELDS` name to ``n`` numbers (made numpy int64 / float64 arrays) and each
    :data:`LIST_FIELDS` name to ``n`` values (kept as lists); ``batch_sizes`` is each step's number
    of batch entries; ``entries`` maps each :data:`ENTRY_FIELDS` name to every step's entries,
    concatenated in step and batch order (made arrays of the field's dtype). Adds
    ``batch_start`` (int64, ``n + 1``: step ``i``'s entries are ``batch_start[i]:batch_start[i + 1]``).
    Arrays already of their dtype are not copied. Raises ``ValueError`` when an entry column's
    length is not the sum of ``batch_sizes``."""
    n = len(batch_sizes)
    out: dict[str, Any] = {name: np.asarray(steps[name], dtype).reshape(n) for name, dtype in STEP_FIELDS}
    for name in LIST_FIELDS:
        values = steps[name]
        out[name] = values if isinstance(values, list) else list(values)
    first = np.zeros(n + 1, np.int64)
    np.cumsum(np.asarray(batch_sizes, np.int64).reshape(n), out=first[1:])
    out["batch_start"] = first
    for name, dtype in ENTRY_FIELDS:
        column = np.asarray(entries[name], dtype)
        if column.shape != (first[-1],):
            raise ValueError(f"step-batch column {name} holds {column.shape} entries, the batches "
                             f"{int(first[-1])}")
        out[name] = column
    return out


def columns_from_rows(rows: Sequence[tuple], id_of: Callable[[int], str]) -> dict[str, Any]:
    """The columns of :meth:`recordings.file.reader.Reader.step_batches` from ``rows`` of the
    ``steps`` table (the :data:`BATCH_FIELDS` columns, in step order); ``id_of`` maps an arrival
    number to its request id. Raises ``ValueError`` / ``IndexError`` / ``KeyError`` on malformed
    rows (the reader turns them into a ``RecordingError``)."""
    n = len(rows)
    cols = list(zip(*rows)) if rows else [()] * len(BATCH_FIELDS)
    steps: dict[str, Any] = {name: cols[i] for i, (name, _) in enumerate(STEP_FIELDS)}
    (error, counts, seq_json, slot_json, n_json, nc_json, prefill_json, preempted_json,
     not_admitted_json, waiting_reason, knobs_json) = cols[len(STEP_FIELDS):]
    sizes = np.array(counts, np.int64).reshape(n)
    first = np.concatenate([[0], np.cumsum(sizes)])
    seq, slot, computed = (_joined_ints(c) for c in (seq_json, slot_json, nc_json))
    if not len(seq) == len(slot) == len(computed) == first[-1]:
        raise ValueError("batch arrays of different lengths")
    num_tokens, prefill = np.ones(len(seq), np.int64), np.zeros(len(seq), bool)
    odd = [i for i, (p, nt) in enumerate(zip(prefill_json, n_json)) if nt is not None or p != "[]"]
    # [[index, num_tokens], ...] of the prefill entries (legacy: plain indexes)
    for i, entries in zip(odd, json.loads("[" + ",".join(prefill_json[i] for i in odd) + "]")):
        lo, hi = int(first[i]), int(first[i + 1])
        if n_json[i] is not None:
            num_tokens[lo:hi] = json.loads(n_json[i])
        for p in entries:
            at = lo + (p[0] if isinstance(p, list) else p)
            if not lo <= at < hi:
                raise IndexError(f"step {steps['step'][i]}: prefill entry {p} outside the batch")
            prefill[at] = True
            if isinstance(p, list) and n_json[i] is None:
                num_tokens[at] = p[1]
    steps.update(
        error=list(error),
        preempted_ids=[() if p == "[]" else tuple(id_of(s) for s in json.loads(p))
                       for p in preempted_json],
        not_admitted=[() if p == "[]" else tuple((id_of(s), why) for s, why in json.loads(p))
                      for p in not_admitted_json],
        waiting_reason=[w or NotAdmittedReason.BEHIND for w in waiting_reason],
        knobs=[codec.knobs_from_json(k) for k in knobs_json])
    return step_batch_columns(steps, sizes, dict(request_id=_names(seq, id_of), slot=slot, num_tokens=num_tokens,
                                                 num_computed_tokens=computed, is_prefill=prefill))


def columns_from_v4_rows(rows: Sequence[tuple], id_of: Callable[[int], str],
                         num_prompt_of_seqs: Callable[[np.ndarray], np.ndarray]) -> dict[str, Any]:
    """:func:`columns_from_rows` of a schema-4 file (``rows`` of :data:`V4_BATCH_FIELDS`);
    ``num_prompt_of_seqs`` gives the prompt lengths of arrival numbers. Raises ``ValueError`` /
    ``KeyError`` on malformed rows."""
    n = len(rows)
    cols = list(zip(*rows)) if rows else [()] * len(V4_BATCH_FIELDS)
    out: dict[str, Any] = {name: np.array(cols[i], dtype).reshape(n)
                           for i, (name, dtype) in enumerate(STEP_FIELDS)}
    error, counts, blobs, preempted_json, not_admitted_json, waiting_reason, knobs_json = \
        cols[len(STEP_FIELDS):]
    batches = [Batch(b, num_prompt_of_seqs) for b in blobs]
    first = np.zeros(n + 1, np.int64)
    np.cumsum([len(b.seq) for b in batches], out=first[1:])
    if not np.array_equal(first[1:] - first[:-1], np.array(counts, np.int64).reshape(n)):
        raise ValueError("a batch blob of another length than num_scheduled_requests")

    def joined(name: str, dtype) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in batches]).astype(dtype) if batches \
            else np.zeros(0, dtype)
    seq = joined("seq", np.int64)
    out.update(
        error=list(error), batch_start=first,
        preempted_ids=[tuple(id_of(s) for s in json.loads(p)) if p else () for p in preempted_json],
        not_admitted=[tuple((id_of(s), why) for s, why in json.loads(p)) if p else ()
                      for p in not_admitted_json],
        waiting_reason=[w or NotAdmittedReason.BEHIND for w in waiting_reason],
        knobs=[codec.knobs_from_json(k) for k in knobs_json],
        request_id=_names(seq, id_of), slot=joined("slot", np.int64),
        num_tokens=joined("num_tokens", np.int64),
        num_computed_tokens=joined("num_computed_tokens", np.int64),
        is_prefill=joined("is_prefill", bool))
    return out


def _joined_ints(texts: Sequence[str]) -> np.ndarray:
    """The JSON integer arrays ``texts`` concatenated (int64), parsed in one pass. Raises
    ``ValueError`` on anything else."""
    inner = (t.strip()[1:-1].strip() for t in texts)
    return np.fromstring(",".join(t for t in inner if t), dtype=np.int64, sep=",")


def _names(seq: np.ndarray, id_of) -> np.ndarray:
    """``id_of(s)`` for each arrival number in ``seq`` (object array), one call per distinct
    number (a step range's batches repeat the same running requests)."""
    if not len(seq):
        return np.zeros(0, object)
    lo, hi = int(seq.min()), int(seq.max())
    if hi - lo > 8 * len(seq):
        uniq, inverse = np.unique(seq, return_inverse=True)
    else:                                   # dense numbers: no sort
        present = np.zeros(hi - lo + 1, bool)
        present[seq - lo] = True
        uniq = np.flatnonzero(present) + lo
        inverse = (np.cumsum(present) - 1)[seq - lo]
    return np.array([id_of(s) for s in uniq.tolist()], object)[inverse.reshape(-1)]


def batch_columns(records: Sequence[StepRecord]) -> dict[str, Any]:
    """The columns :meth:`Reader.step_batches` reads, computed from ``records`` (in step order):
    for sources that hold :class:`StepRecord` s (another schema's reader, test sources)."""
    steps: dict[str, Any] = {name: [getattr(r, name) for r in records] for name, _ in STEP_FIELDS
                             if name not in ("num_new_tokens", "num_scheduled_tokens", "num_arrivals")}
    steps["num_scheduled_tokens"] = [r.total_num_scheduled_tokens for r in records]
    steps["num_new_tokens"] = [len(r.new_tokens) for r in records]
    steps["num_arrivals"] = [len(r.arrivals) for r in records]
    steps.update(error=[r.error for r in records], waiting_reason=[r.waiting_reason for r in records],
                 preempted_ids=[tuple(r.preempted_ids) for r in records],
                 not_admitted=[tuple(r.not_admitted) for r in records], knobs=[tuple(r.knobs) for r in records])
    entries = [e for r in records for e in r.scheduled]
    columns = list(zip(*entries)) if entries else [()] * len(ENTRY_FIELDS)
    return step_batch_columns(steps, [len(r.scheduled) for r in records],
                              {name: values for (name, _), values in zip(ENTRY_FIELDS, columns)})
