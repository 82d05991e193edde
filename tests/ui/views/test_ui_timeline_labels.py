"""The slot timeline names its rows by slot number without the labels running into each other:
at 8-pixel rows (256 busy slots scrolling) every row was labelled and the numbers overlapped."""
from __future__ import annotations

import pytest

from tests.support.fakes import FakeSource
from tests.ui.views.test_ui_timeline import shown_widget
from ui.views.slot_timeline import TICK_LABEL_PX, SlotTimeline

SLOTS = 48


@pytest.fixture(scope="module")
def busy():
    """Every one of 48 slots busy: compact mode has nothing to leave out."""
    return FakeSource(6, num_blocks=1024, max_num_seqs=SLOTS, budget=4096,
                      workload=tuple((16, 40, 0) for _ in range(SLOTS)))


@pytest.mark.parametrize("height", [260, 420, 900])
def test_slot_labels_are_at_least_a_label_apart_on_screen(qtbot, busy, height):
    w = shown_widget(qtbot, SlotTimeline(window=40), 700, height)
    k = busy.latest_step()
    w.set_records(busy.records(0, k + 1), k, SLOTS, k)
    rows = min(len(w.shown_slots), w.visible_rows)
    assert rows > 16
    px_per_row = w.plot.getPlotItem().getViewBox().height() / rows
    ticks = w.plot.getPlotItem().getAxis("left")._tickLevels[0]
    rows_apart = {b[0] - a[0] for a, b in zip(ticks, ticks[1:])}
    assert len(rows_apart) == 1 and min(rows_apart) * px_per_row >= TICK_LABEL_PX
    assert [int(t) for _, t in ticks] == [int(w.shown_slots[i]) for i, _ in ticks]   # named by slot
    assert len(ticks) >= 8                         # still a ruler to read slots off
