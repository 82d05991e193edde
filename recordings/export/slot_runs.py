"""Runs of steps in which one request held one batch slot: the slices of the slot timeline.

The slot of a batch entry is the one the scheduler gave the request and the recording stores
(``StepRecord.scheduled[i].slot``, ``steps.batch_slot_json``); the window's slot timeline
(``ui/views/slot_timeline.py``) draws one cell per (slot, step) from the same entries. A *run* is a
maximal sequence of consecutive steps in which the same request holds the same slot: a cell
sequence of one colour in the window. Entries with a slot outside ``[0, max_num_seqs)`` are not
drawn by the window and are skipped here too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from recordings.export.step_chunks import StepChunk


@dataclass
class SlotRun:
    """Request ``request_id`` in slot ``slot`` in every step ``first_step..last_step``
    (inclusive); ``start`` is the first step's ``clock`` and ``end`` the last step's
    ``token_time`` (engine clock); ``num_tokens`` the tokens it computed in the run, of which
    ``num_prefill_tokens`` in prefill chunks (``num_prefill_steps`` steps)."""

    slot: int
    request_id: str
    first_step: int
    last_step: int
    start: float
    end: float
    num_tokens: int = 0
    num_prefill_tokens: int = 0
    num_prefill_steps: int = 0

    @property
    def num_steps(self) -> int:
        return self.last_step - self.first_step + 1


class SlotRuns:
    """The slot runs of a run, fed a chunk at a time (:meth:`begin`, then :meth:`step` for each
    of its steps in order, then :meth:`end`); each run is handed to ``on_run`` once it ends (its
    request left the slot or skipped a step), in the order the steps meet their ends: runs
    replaced by a new request in batch order, then the slots left idle (in the order their runs
    were opened), and the open ones by :meth:`close`, by slot. Per chunk the runs are found
    column-wise on a (step x slot) grid of who held each slot; only a run's start and end are
    Python work. Holds one open run per slot and the last slot of each request until
    :meth:`forget`."""

    def __init__(self, max_num_seqs: int, on_run: Callable[[SlotRun], None]) -> None:
        self.max_num_seqs = max_num_seqs
        self.on_run = on_run
        self._open: dict[int, SlotRun] = {}
        self._from: dict[int, int] = {}            # slot -> first chunk row not yet in its run's sums
        self._last_slot: dict[str, int] = {}
        self._prev = np.full(max_num_seqs, -1, np.int64)    # who held each slot in the last step
        self._c: StepChunk | None = None

    def begin(self, chunk: StepChunk) -> None:
        """Find the runs that start and end in ``chunk`` (the steps after the last chunk's)."""
        n, width = len(chunk), self.max_num_seqs
        row, slot = chunk.entry_row, chunk.slot
        valid = np.flatnonzero((slot >= 0) & (slot < width))
        entry = np.full((n + 1, width), -1, np.int64)      # row k + 1: the entry of step k in each slot
        entry[row[valid[::-1]] + 1, slot[valid[::-1]]] = valid[::-1]
        if not np.array_equal(entry[row[valid] + 1, slot[valid]], valid):   # slots taken twice
            cell = row[valid] * width + slot[valid]
            valid = np.sort(valid[np.unique(cell, return_index=True)[1]])   # the first entry wins
            entry[row[valid] + 1, slot[valid]] = valid
        owner = np.full((n + 1, width), -1, np.int64)     # who held each slot
        at = (row[valid] + 1, slot[valid])
        owner[at] = chunk.request[valid]
        owner[0] = self._prev
        tokens = np.zeros((3, n + 1, width), np.int64)     # cumulative tokens, prefill tokens, prefill steps
        prefill = chunk.is_prefill[valid]
        tokens[0][at] = chunk.num_tokens[valid]
        tokens[1][at] = np.where(prefill, chunk.num_tokens[valid], 0)
        tokens[2][at] = prefill
        self._sums = np.cumsum(tokens, axis=1)
        starts = (owner[1:] >= 0) & (owner[1:] != owner[:-1])
        first = entry[1:][starts]
        first.sort()
        self._starts = np.split(first, np.searchsorted(row[first], np.arange(1, n)))
        idle_row, idle_slot = np.nonzero((owner[1:] < 0) & (owner[:-1] >= 0))
        self._idle = np.split(idle_slot, np.searchsorted(idle_row, np.arange(1, n)))
        moved = chunk.changed_entries(slot, valid)
        self._moved = np.split(moved, np.searchsorted(row[moved], np.arange(1, n)))
        self._prev = owner[-1].copy()
        self._c = chunk

    def step(self, k: int) -> None:
        """The runs of step ``k`` of the chunk (its ``k``-th): end and start runs where the
        slot's request changed, record each request's slot, end the runs of the slots it left
        idle."""
        c = self._c
        for i in self._starts[k].tolist():
            s = int(c.slot[i])
            run = self._open.get(s)
            if run is not None:
                self._ended(run, k - 1)
            self._open[s] = SlotRun(s, c.names[int(c.request[i])], int(c.step[k]), int(c.step[k]),
                                    float(c.clock[k]), float(c.token_time[k]))
            self._from[s] = k
        for i in self._moved[k].tolist():
            self._last_slot[c.names[int(c.request[i])]] = int(c.slot[i])
        if len(self._idle[k]):
            idle = set(self._idle[k].tolist())
            for s in [s for s in self._open if s in idle]:
                self._ended(self._open.pop(s), k - 1)

    def _ended(self, run: SlotRun, last: int) -> None:
        """Complete ``run`` up to chunk row ``last`` (-1: it ended with the last chunk) and
        hand it over."""
        self._sum(run, last)
        self.on_run(run)

    def _sum(self, run: SlotRun, last: int) -> None:
        """Add the chunk rows ``self._from[slot] .. last`` to ``run``."""
        lo = self._from[run.slot]
        if last >= lo:
            total, prefill, steps = (self._sums[:, last + 1, run.slot] - self._sums[:, lo, run.slot]).tolist()
            run.num_tokens += total
            run.num_prefill_tokens += prefill
            run.num_prefill_steps += steps
            run.last_step, run.end = int(self._c.step[last]), float(self._c.token_time[last])

    def end(self) -> None:
        """Close the chunk: the open runs take its last steps."""
        last = len(self._c) - 1
        for run in self._open.values():
            self._sum(run, last)
            self._from[run.slot] = 0
        self._c = None

    def last_slot(self, request_id: str) -> int | None:
        """The slot ``request_id`` last ran in (None: never, or forgotten)."""
        return self._last_slot.get(request_id)

    def forget(self, request_id: str) -> None:
        """Drop what is kept of a request that left the run (finished)."""
        self._last_slot.pop(request_id, None)

    def close(self) -> None:
        """Hand over the runs still open (the recording's last steps)."""
        for slot in sorted(self._open):
            self.on_run(self._open.pop(slot))
