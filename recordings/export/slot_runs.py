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

from engine.outputs import StepRecord


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
    """Feed steps in order with :meth:`add`; each run is handed to ``on_run`` once it ends (its
    request left the slot or skipped a step) and the open ones by :meth:`close`. Holds one open
    run per slot and the last slot of each request until :meth:`forget`."""

    def __init__(self, max_num_seqs: int, on_run: Callable[[SlotRun], None]) -> None:
        self.max_num_seqs = max_num_seqs
        self.on_run = on_run
        self._open: dict[int, SlotRun] = {}
        self._last_slot: dict[str, int] = {}

    def add(self, record: StepRecord) -> None:
        """Extend or start the runs of ``record``'s batch; end those of the slots it left idle."""
        k = record.step
        seen: set[int] = set()
        for e in record.scheduled:
            if not 0 <= e.slot < self.max_num_seqs or e.slot in seen:
                continue
            seen.add(e.slot)
            run = self._open.get(e.slot)
            if run is None or run.request_id != e.request_id or run.last_step != k - 1:
                if run is not None:
                    self.on_run(run)
                run = self._open[e.slot] = SlotRun(e.slot, e.request_id, k, k, record.clock,
                                                   record.token_time)
            run.last_step, run.end = k, record.token_time
            run.num_tokens += e.num_tokens
            if e.is_prefill:
                run.num_prefill_tokens += e.num_tokens
                run.num_prefill_steps += 1
            self._last_slot[e.request_id] = e.slot
        for slot in [s for s, r in self._open.items() if r.last_step < k]:
            self.on_run(self._open.pop(slot))

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
