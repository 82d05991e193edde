"""A step record packed so that the cyclic garbage collector never has to look at it.

A :class:`engine.outputs.StepRecord` at 256 running holds ~512 ``BatchEntry`` / ``NewToken``
named tuples; CPython's collector keeps tracking named tuples (it stops tracking only exact
tuples whose items are untracked), so ``app.live.source.LiveSource``'s ring of 1,024 records
kept ~530k tracked objects, and every full (generation 2) collection walked them all: 80-100 ms
(up to ~500 ms on a loaded machine) in whichever frame it fell. A packed step holds the batch and
the tokens as numpy columns and every other item as plain tuples of strings and numbers, which
the collector stops tracking when a collection finds them holding nothing it tracks
(``gc.is_tracked`` False; one pass per level of nesting at most, usually the young collections
it survives anyway): no full collection walks it. See the
CPython notes on ``gc.is_tracked`` / ``gc.freeze`` (docs.python.org/3/library/gc.html).

``pack(record)`` runs on the engine thread once per step (~0.1 ms at 256 running);
``unpack(packed)`` rebuilds the identical record (``unpack(pack(r)) == r``, named tuple types
included) for the rare reads of whole records (a past state advanced through the newest steps, the
"why" of one step); :func:`batch_columns` gives the window's step views their columns directly
from the packed steps, equal to :func:`recordings.file.step_batches.batch_columns` of the records.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from engine.outputs import (Arrival, BatchEntry, BlockEvent, NewToken, RequestEvent, StepRecord,
                            Transition)
from engine.vocab import BlockEventKind, EventKind, NotAdmittedReason, RequestStatus, word
from recordings.file.step_batches import ENTRY_FIELDS, LIST_FIELDS, STEP_FIELDS, step_batch_columns

FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))
# fields of named tuples kept as plain tuples (a few per step), rebuilt with their type
_PLAIN = {"arrivals": Arrival, "events": RequestEvent, "block_events": BlockEvent,
          "transitions": Transition}
_BATCH = FIELDS.index("scheduled")         # packed: (request_id, slot, num_tokens, ncomputed, prefill)
_TOKENS = FIELDS.index("new_tokens")       # packed: (request_id, index, token_id, text)
_STEP = FIELDS.index("step")
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_TOKEN_FIELDS = (("request_id", object), ("index", np.int64), ("token_id", np.int64),
                 ("text", object))
_new = tuple.__new__
# the vocabulary's members in a record (objects the collector tracks) travel as their plain text:
# named-tuple field -> (position of the word in each item, its enum)
_WORDS = {"events": (1, EventKind), "block_events": (0, BlockEventKind), "transitions": (1, RequestStatus)}
_NOT_ADMITTED = FIELDS.index("not_admitted")      # ((request_id, NotAdmittedReason), ...)
_WAITING_REASON = FIELDS.index("waiting_reason")
_text = str.__str__                                 # a StrEnum member's value as an exact str

PackedStep = tuple
"""A packed :class:`StepRecord`: its fields in ``dataclasses.fields`` order, ``scheduled`` as
five aligned numpy columns (``request_id`` object, ``slot``, ``num_tokens``,
``num_computed_tokens`` int64, ``is_prefill`` bool), ``new_tokens`` as four (``request_id``
object, ``index``, ``token_id`` int64, ``text`` object), the named-tuple fields as tuples of plain
tuples."""


def pack(record: StepRecord) -> PackedStep:
    """``record`` as a :data:`PackedStep` (no named tuple, no list: nothing the collector keeps
    tracking)."""
    values = [getattr(record, name) for name in FIELDS]
    for name in _PLAIN:       # items first, then their tuple: one pass of the collector untracks both
        i = _INDEX[name]
        at = _WORDS.get(name, (None,))[0]
        values[i] = tuple([tuple(x) if at is None else (*x[:at], _text(x[at]), *x[at + 1:]) for x in values[i]])
    values[_NOT_ADMITTED] = tuple([(rid, _text(reason)) for rid, reason in values[_NOT_ADMITTED]])
    values[_WAITING_REASON] = _text(values[_WAITING_REASON])
    values[_BATCH] = _columns(record.scheduled, ENTRY_FIELDS)
    values[_TOKENS] = _columns(record.new_tokens, _TOKEN_FIELDS)
    return tuple(values)


def _columns(items: Sequence[tuple], fields) -> tuple[np.ndarray, ...]:
    columns = list(zip(*items)) if items else [()] * len(fields)
    return tuple(np.array(values, dtype).reshape(len(items))
                 for (_, dtype), values in zip(fields, columns))


def unpack(packed: PackedStep) -> StepRecord:
    """The :class:`StepRecord` that was packed (equal to it, with the same named tuple types)."""
    values = list(packed)
    for name, cls in _PLAIN.items():
        i = _INDEX[name]
        at, kind = _WORDS.get(name, (None, None))
        values[i] = tuple(_new(cls, t if at is None else (*t[:at], word(kind, t[at]), *t[at + 1:]))
                          for t in values[i])
    values[_NOT_ADMITTED] = tuple((rid, word(NotAdmittedReason, reason)) for rid, reason in values[_NOT_ADMITTED])
    values[_WAITING_REASON] = word(NotAdmittedReason, values[_WAITING_REASON])
    values[_BATCH] = _rows(BatchEntry, packed[_BATCH])
    values[_TOKENS] = _rows(NewToken, packed[_TOKENS])
    return StepRecord(*values)


def _rows(cls, columns: tuple[np.ndarray, ...]) -> tuple:
    return tuple(_new(cls, t) for t in zip(*(c.tolist() for c in columns)))


def step_of(packed: PackedStep) -> int:
    """The step a packed record is of."""
    return packed[_STEP]


def token_texts(packed: PackedStep, request_id: str) -> list[str]:
    """The text deltas of ``request_id``'s tokens sampled in the packed step, in order."""
    ids, _, _, texts = packed[_TOKENS]
    return texts[ids == request_id].tolist() if len(ids) else []


def has_events_of(packed: PackedStep, request_id: str) -> bool:
    """True when the packed step has lifecycle events of ``request_id``."""
    return any(e[0] == request_id for e in packed[_INDEX["events"]])


def batch_columns(steps: Sequence[PackedStep]) -> dict[str, Any]:
    """The columns of ``recordings.file.reader.Reader.step_batches`` for ``steps`` (packed, in step order):
    equal to :func:`recordings.file.step_batches.batch_columns` of their records, without rebuilding them
    (the batch arrays are concatenated), built by :func:`recordings.file.step_batches.step_batch_columns`."""
    derived = {
        "num_new_tokens": lambda s: len(s[_TOKENS][0]),
        "num_arrivals": lambda s: len(s[_INDEX["arrivals"]]),
        "num_scheduled_tokens": lambda s: int(s[_BATCH][2].sum()),
        # StepRecord.num_preemptions of the packed events
        "num_preemptions": lambda s: sum(1 for e in s[_INDEX["events"]] if e[1] == EventKind.PREEMPTED),
    }
    columns: dict[str, Any] = {}
    for name, _ in STEP_FIELDS:
        value = derived.get(name)
        i = _INDEX.get(name)
        columns[name] = [value(s) for s in steps] if value else [s[i] for s in steps]
    for name in LIST_FIELDS:
        i = _INDEX[name]
        columns[name] = [s[i] for s in steps]
    entries = {name: np.concatenate([s[_BATCH][j] for s in steps]) if steps else np.zeros(0, dtype)
               for j, (name, dtype) in enumerate(ENTRY_FIELDS)}
    return step_batch_columns(columns, [len(s[_BATCH][1]) for s in steps], entries)
