"""``app.long_lived.freeze_long_lived``: what start-up made leaves the collector's generations
(full passes no longer walk it, reference counting still frees it) and full passes run at most
once per ``FULL_COLLECTION_EVERY`` generation-1 collections."""
from __future__ import annotations

import gc

import pytest

from app.long_lived import FULL_COLLECTION_EVERY, freeze_long_lived


@pytest.fixture
def collector():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_up_objects_leave_the_full_passes(collector):
    made = [[i] for i in range(1000)]                     # tracked containers of start-up
    young, middle, _ = gc.get_threshold()
    frozen = gc.get_freeze_count()
    freeze_long_lived()
    assert gc.get_freeze_count() >= frozen + len(made)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(m) in tracked for m in made)
    assert gc.get_threshold() == (young, middle, FULL_COLLECTION_EVERY)
    full = []
    gc.callbacks.append(cb := lambda phase, info: full.append(info["generation"])
                        if phase == "start" else None)
    try:
        for _ in range(12 * young * middle):              # 12 generation-1 collections' worth
            made.append([[]])                             # each kept: promoted, never freed
    finally:
        gc.callbacks.remove(cb)
    assert full.count(1) >= 10 and full.count(2) == 0     # CPython's default would have run one
