"""Objects that live as long as the window kept out of the cyclic garbage collector's full passes.

Once start-up is over (the model, tokenizer and workload of a live run; Qt wrappers, pyqtgraph
and a reader's tables: 90k-450k objects), :func:`freeze_long_lived` collects once and moves
everything left into the collector's permanent generation (``gc.freeze``, as vLLM does after
start-up; CPython's notes on it: docs.python.org/3/library/gc.html#gc.freeze): a full
(generation 2) collection then walks only what was made since, not those objects, in whichever
frame it falls.

It also raises the oldest generation's threshold from CPython's 10 to
:data:`FULL_COLLECTION_EVERY` younger (generation 1) collections. The reason: CPython runs a full
collection once generation 1 was collected ``threshold2`` times *and* the objects promoted into
the oldest generation since the last full one reach 25% of those it holds. After the freeze the
oldest generation holds only a few thousand objects, so the 25% rule stops mattering: every 10th
generation-1 collection was a full one. Scrubbing a run of 256 running requests back makes ~500
short-lived tracked objects a step (a step record decoded or unpacked to replay it), ~2 young
collections a frame, so a full pass landed in a scrub frame every 50 frames or so (measured
with ``bench/bench_ui_frame.py``, which prints every collection). With 100 it is 10x rarer,
while young collections, which free almost all of that garbage, run as before; cyclic garbage
that reached the oldest generation waits longer for its collection (it is rare: the engine's
and the window's objects are freed by reference counting).
"""
from __future__ import annotations

import gc

FULL_COLLECTION_EVERY = 100   # generation-1 collections between full ones, at least (CPython: 10)


def freeze_long_lived() -> None:
    """Collect, then freeze what is left (``gc.freeze``) and set the oldest generation's
    threshold to :data:`FULL_COLLECTION_EVERY` (the younger two unchanged). Call it once start-up
    is done, on any thread (the collector is process-wide)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
