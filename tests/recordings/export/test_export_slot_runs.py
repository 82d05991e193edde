"""Slot runs found column-wise on a chunk's (step x slot) grid: maximal runs of one request in one
slot across chunk borders, the first entry winning a slot taken twice in a step, slots outside
the batch skipped, and each request's last slot."""
from __future__ import annotations

import numpy as np

from recordings.export.slot_runs import SlotRuns
from recordings.export.step_chunks import StepChunk


def _chunk(first_step: int, batches: list[list[tuple[int, int, int, bool]]]) -> StepChunk:
    """Steps from ``first_step``, each a batch of (request number, slot, tokens, prefill)."""
    n = len(batches)
    entries = [e for b in batches for e in b]
    steps = np.arange(first_step, first_step + n)
    zeros = np.zeros(n, np.int64)
    cols = list(zip(*entries)) if entries else [(), (), (), ()]
    return StepChunk(step=steps, start_ns=zeros, end_ns=zeros, clock=steps.astype(float),
                     token_time=steps + 1.0, num_waiting=zeros, num_running=zeros, num_paused=zeros,
                     num_free_blocks=zeros, num_total_blocks=zeros, num_new_tokens=zeros,
                     num_preemptions=zeros, cached_free=zeros, swapped=zeros, error=[None] * n,
                     arrivals=[[] for _ in range(n)], events=[[] for _ in range(n)],
                     batch_start=np.concatenate([[0], np.cumsum([len(b) for b in batches])]).astype(np.int64),
                     request=np.array(cols[0], np.int64), slot=np.array(cols[1], np.int64),
                     num_tokens=np.array(cols[2], np.int64), is_prefill=np.array(cols[3], bool),
                     names={r: f"r{r}" for r in cols[0]})


def _runs(chunks: list[StepChunk], max_num_seqs: int = 2):
    runs = []
    tracker = SlotRuns(max_num_seqs, runs.append)
    last = []
    for c in chunks:
        tracker.begin(c)
        for k in range(len(c)):
            tracker.step(k)
        tracker.end()
        last.append({f"r{r}": tracker.last_slot(f"r{r}") for r in range(4)})
    tracker.close()
    return [(r.slot, r.request_id, r.first_step, r.last_step, r.num_tokens, r.num_prefill_tokens,
             r.num_prefill_steps, r.end) for r in runs], last


def test_runs_cross_chunk_borders_and_end_where_the_slot_changes_hands():
    a = _chunk(0, [[(0, 0, 8, True), (1, 1, 4, True)], [(0, 0, 1, False), (1, 1, 1, False)]])
    b = _chunk(2, [[(0, 0, 1, False)], [(2, 0, 5, True), (1, 1, 1, False)]])
    runs, last = _runs([a, b])
    assert runs == [
        (1, "r1", 0, 1, 5, 4, 1, 2.0),       # slot 1 idle at step 2: ends after step 1
        (0, "r0", 0, 2, 10, 8, 1, 3.0),      # r2 takes slot 0 at step 3
        (0, "r2", 3, 3, 5, 5, 1, 4.0),       # open at the end, handed over by close (by slot)
        (1, "r1", 3, 3, 1, 0, 0, 4.0),
    ]
    assert last[-1] == {"r0": 0, "r1": 1, "r2": 0, "r3": None}


def test_a_slot_taken_twice_goes_to_the_first_entry_and_outside_slots_are_skipped():
    c = _chunk(0, [[(0, 0, 2, True), (3, 0, 7, False), (1, 5, 3, False)], [(0, 1, 1, False)]])
    runs, last = _runs([c])
    assert runs == [(0, "r0", 0, 0, 2, 2, 1, 1.0), (1, "r0", 1, 1, 1, 0, 0, 2.0)]
    assert last[-1] == {"r0": 1, "r1": None, "r2": None, "r3": None}     # a skipped entry is not a slot
