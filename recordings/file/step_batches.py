"""A step range's scalars and batches as numpy columns, as the window's step views need them:
from the ``steps`` table's rows (:meth:`recordings.file.reader.Reader.step_batches`, without decoding
whole records) or from :class:`engine.outputs.StepRecord` s (:func:`batch_columns`, for sources
that hold records). Both give the same columns.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import numpy as np

from engine.outputs import StepRecord
from recordings.file import codec
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
ENTRY_FIELDS = (("request_id", object), ("slot", np.int64), ("num_tokens", np.int64),
                ("num_computed_tokens", np.int64), ("is_prefill", bool))


def columns_from_rows(rows: Sequence[tuple], id_of: Callable[[int], str]) -> dict[str, Any]:
    """The columns of :meth:`recordings.file.reader.Reader.step_batches` from ``rows`` of the
    ``steps`` table (the :data:`BATCH_FIELDS` columns, in step order); ``id_of`` maps an arrival
    number to its request id. Raises ``ValueError`` / ``IndexError`` / ``KeyError`` on malformed
    rows (the reader turns them into a ``RecordingError``)."""
    n = len(rows)
    cols = list(zip(*rows)) if rows else [()] * len(BATCH_FIELDS)
    out: dict[str, Any] = {name: np.array(cols[i], dtype).reshape(n)
                           for i, (name, dtype) in enumerate(STEP_FIELDS)}
    (error, counts, seq_json, slot_json, n_json, nc_json, prefill_json, preempted_json,
     not_admitted_json, waiting_reason, knobs_json) = cols[len(STEP_FIELDS):]
    first = np.zeros(n + 1, np.int64)
    np.cumsum(np.array(counts, np.int64).reshape(n), out=first[1:])
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
                raise IndexError(f"step {out['step'][i]}: prefill entry {p} outside the batch")
            prefill[at] = True
            if isinstance(p, list) and n_json[i] is None:
                num_tokens[at] = p[1]
    out.update(
        error=list(error), batch_start=first,
        preempted_ids=[() if p == "[]" else tuple(id_of(s) for s in json.loads(p))
                       for p in preempted_json],
        not_admitted=[() if p == "[]" else tuple((id_of(s), why) for s, why in json.loads(p))
                      for p in not_admitted_json],
        waiting_reason=[w or NotAdmittedReason.BEHIND for w in waiting_reason],
        knobs=[codec.knobs_from_json(k) for k in knobs_json],
        request_id=_names(seq, id_of), slot=slot, num_tokens=num_tokens,
        num_computed_tokens=computed, is_prefill=prefill)
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
    for sources that hold :class:`StepRecord` s (a live engine, another schema's reader)."""
    n = len(records)
    out: dict[str, Any] = {
        name: np.array([getattr(r, name) for r in records], dtype).reshape(n)
        for name, dtype in STEP_FIELDS if name not in ("num_new_tokens", "num_scheduled_tokens", "num_arrivals")}
    out["num_scheduled_tokens"] = np.array([r.total_num_scheduled_tokens for r in records], np.int64).reshape(n)
    out["num_new_tokens"] = np.array([len(r.new_tokens) for r in records], np.int64).reshape(n)
    out["num_arrivals"] = np.array([len(r.arrivals) for r in records], np.int64).reshape(n)
    out["error"] = [r.error for r in records]
    out["preempted_ids"] = [tuple(r.preempted_ids) for r in records]
    out["not_admitted"] = [tuple(r.not_admitted) for r in records]
    out["waiting_reason"] = [r.waiting_reason for r in records]
    out["knobs"] = [tuple(r.knobs) for r in records]
    first = np.zeros(n + 1, np.int64)
    np.cumsum([len(r.scheduled) for r in records], out=first[1:])
    out["batch_start"] = first
    entries = [e for r in records for e in r.scheduled]
    columns = list(zip(*entries)) if entries else [()] * len(ENTRY_FIELDS)
    for (name, dtype), values in zip(ENTRY_FIELDS, columns):
        out[name] = np.array(values, dtype).reshape(len(entries))
    return out
