"""Replay a schema-4+ recording's steps onto a :class:`engine.state.timeline.StateTimeline` from
their columns (``StateTimeline.apply_columns``), without rebuilding each step's
:class:`engine.outputs.StepRecord`.

A seek replays the ~40-90 steps after its keyframe. Through records, each step of a 256-slot
run builds ~256 ``BatchEntry`` / ``NewToken`` tuples, ~14 ``BlockEvent`` s and looks up every
request id, then the timeline maps the ids back to rows: two thirds of the replay's time, and
allocations enough to start the garbage collector's passes inside a seek. Here only what the
state after a step depends on is decoded: the batch blob's arrays (looked up by arrival number in
the timeline's ``seq`` column), the block events as columns, the ``priority`` events, the
transitions and arrivals; the token texts, preemption and admission lists, timings and the
other events' details, which no state holds, are not. ``tests/recordings/file/test_rec_column_replay.py`` holds the
result equal to the replay through records on every step.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterator, Sequence

from engine.state.timeline import StateTimeline
from engine.vocab import EventKind, RequestStatus, word
from recordings.file import codec, compact

Rows = Callable[[str, Sequence], list]            # (SQL, parameters) -> rows: the reader's query
ArrivalsByStep = Callable[[int, int], dict]      # (lo, hi) -> {step: [Arrival, ...]}

_STEP_SQL = ("SELECT step, clock, token_time, batch, knobs_json FROM steps "
             "WHERE step >= ? AND step < ? ORDER BY step")
# every event row of the range is read (by the table's key, a few a step), the priority ones
# applied: a damaged ``events`` page fails the seek as it fails the step's record (the damage
# report, ``recordings.damage.report``, holds the two to the same steps)
_EVENTS_SQL = "SELECT step, seq, kind, detail FROM events WHERE step >= ? AND step <= ? ORDER BY step, ord"
_TRANSITION_SQL = (f"SELECT {', '.join(codec.TRANSITION_COLUMNS)} FROM transitions "
                   "WHERE step >= ? AND step <= ? ORDER BY step, ord")
_BLOCKS_SQL = "SELECT step, data FROM block_events WHERE step >= ? AND step <= ?"


def replay_columns(timeline: StateTimeline, rows: Rows, arrivals_by_step: ArrivalsByStep,
                   start: int, stop: int) -> Iterator[int]:
    """Apply the recorded steps ``start <= step < stop`` of a schema-4+ file to ``timeline`` (at
    the step before the first), one at a time, yielding each step's number once it is applied
    (the timeline then holds the state after it). ``rows`` runs the reader's queries,
    ``arrivals_by_step`` gives the :class:`engine.outputs.Arrival` s of a step range by step.
    Raises ``ValueError`` / ``KeyError`` / ``TypeError`` on rows that do not decode or changes
    that do not fit the state (the reader turns them into ``RecordingError``)."""
    steps = rows(_STEP_SQL, (start, stop))
    if not steps:
        return
    lo, hi = steps[0][0], steps[-1][0]
    priorities = defaultdict(list)
    for step, seq, kind, detail in rows(_EVENTS_SQL, (lo, hi)):
        if kind == EventKind.PRIORITY:
            priorities[step].append((seq, int(detail or "")))
    transitions = defaultdict(list)
    for step, seq, status, slot, nc, npre, err in rows(_TRANSITION_SQL, (lo, hi)):
        transitions[step].append((seq, word(RequestStatus, status), slot, nc, npre, err))
    blocks = dict(rows(_BLOCKS_SQL, (lo, hi)))
    arrivals = arrivals_by_step(lo, hi)
    for step, clock, token_time, batch_blob, knobs in steps:
        batch = compact.Batch(batch_blob)
        timeline.apply_columns(
            step, clock, arrivals.get(step, ()), priorities.get(step, ()),
            (batch.seq, batch.slot, batch.num_tokens, batch.num_computed_tokens, batch.token_id >= 0),
            token_time, compact.block_event_columns(blocks.get(step)), transitions.get(step, ()),
            codec.knobs_from_json(knobs))
        yield step
