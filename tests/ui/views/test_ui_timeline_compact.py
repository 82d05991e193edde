"""The slot timeline at batch sizes where most slots idle: compact mode draws only the slots
used in the window (auto on when most are idle), each cell still the request that held it;
the occupancy strip shows per step how many slots decoded and how many ran prefill."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.fakes import FakeSource
from tests.ui.views.test_ui_timeline import check_cells, shown_widget
from ui.style.colors import IDLE, packed, unpack
from ui.views.slot_timeline import (STRIP_DECODE, STRIP_PREFILL, STRIP_PX, SlotTimeline,
                                    decode_rgb, prefill_rgb)

SLOTS = 64
# 5 requests of a prompt chunked over a few steps, then decoding: 5 of 64 slots used
WORKLOAD = tuple((48, 12, 2 * i) for i in range(5))


@pytest.fixture(scope="module")
def sparse():
    return FakeSource(30, num_blocks=256, max_num_seqs=SLOTS, budget=32, workload=WORKLOAD)


def used_slots(records, first: int, last: int) -> list[int]:
    return sorted({e.slot for r in records if first <= r.step <= last for e in r.scheduled})


def test_compact_shows_only_the_used_slots_and_maps_them_back(qtbot, sparse):
    w = shown_widget(qtbot, SlotTimeline(window=40), 700, 300)
    k = sparse.latest_step()
    records = sparse.records(0, k + 1)
    w.set_records(records, k, SLOTS, k)
    used = used_slots(records, w.first_step, k)
    assert w.compact and w.compact_button.isChecked()                  # auto: most slots idle
    assert w.shown_slots.tolist() == used and 0 < len(used) <= 5
    assert w.row_px == 8 and w.image.shape == (len(used) * 8, w.span)  # tall rows: stripes
    ticks = w.plot.getPlotItem().getAxis("left")._tickLevels[0]     # rows named by their slot
    assert ticks == [(row, str(slot)) for row, slot in enumerate(used)]
    # each shown row holds its slot's cells; hover maps a row back to its slot
    scheduled = {(r.step, e.slot): e for r in records for e in r.scheduled}
    for row, slot in enumerate(used):
        assert w.cell_at(3, row) == (w.first_step + 3, slot)
        for step in range(w.first_step, k + 1):
            e = scheduled.get((step, slot))
            if e is not None:
                assert e.request_id in w.describe(step, slot)
    with pytest.raises(ValueError, match="not shown"):
        w.pixel_of(next(s for s in range(SLOTS) if s not in used), k)
    check_shown_cells(w, records, k)
    w.set_compact(False)                                               # all slots, as before
    assert not w.compact and w.shown_slots.tolist() == list(range(SLOTS))
    assert w.image.shape == (SLOTS * w.row_px, w.span)
    check_cells(w, records, k)
    w.set_compact(None)
    assert w.compact


def check_shown_cells(w: SlotTimeline, records, shown: int) -> None:
    """Each shown row: its slot's request colour (decode on the solid rows, the prefill
    stripe on the first), idle where the slot was."""
    scheduled = {(r.step, e.slot): e for r in records for e in r.scheduled}
    for slot in w.shown_slots.tolist():
        for step in range(w.first_step, shown + 1):
            y, x = w.pixel_of(slot, step)
            e = scheduled.get((step, slot))
            stripe, solid = (tuple(int(v) for v in unpack(w.image[yy, x])) for yy in (y, y + 1))
            if e is None:
                assert stripe == solid == IDLE, (step, slot)
            else:
                assert solid == decode_rgb(e.request_id), (step, slot)
                assert stripe == (prefill_rgb(e.request_id) if e.is_prefill else solid), (step, slot)


def test_a_full_batch_is_not_compacted(qtbot):
    full = FakeSource(12, num_blocks=256, max_num_seqs=4, budget=64, workload=((16, 20, 0),) * 8)
    w = shown_widget(qtbot, SlotTimeline(window=20), 500, 200)
    k = full.latest_step()
    w.set_records(full.records(0, k + 1), k, 4, k)
    assert not w.compact and w.shown_slots.tolist() == [0, 1, 2, 3]


def test_the_occupancy_strip_counts_decode_and_prefill_slots(qtbot, sparse):
    w = shown_widget(qtbot, SlotTimeline(window=40), 700, 300)
    k = sparse.latest_step()
    records = sparse.records(0, k + 1)
    w.set_records(records, k, SLOTS, k)
    img = w.strip_image
    assert img.shape == (STRIP_PX, w.span)
    by_step = {r.step: r for r in records}
    seen_prefill = False
    for col in range(w.span):
        r = by_step.get(w.first_step + col)
        n_pre = sum(e.is_prefill for e in r.scheduled) if r else 0
        n_dec = (len(r.scheduled) if r else 0) - n_pre
        column = img[::-1, col]                                        # from the bottom
        assert np.count_nonzero(column == packed(STRIP_DECODE)) == round(n_dec * STRIP_PX / SLOTS)
        assert np.count_nonzero(column == packed(STRIP_PREFILL)) == (
            round((n_dec + n_pre) * STRIP_PX / SLOTS) - round(n_dec * STRIP_PX / SLOTS))
        assert (column[round((n_dec + n_pre) * STRIP_PX / SLOTS):] == packed(IDLE)).all()
        seen_prefill |= n_pre > 0
    assert seen_prefill


def test_many_busy_slots_scroll_in_rows_tall_enough_for_stripes(qtbot, big):
    """256 busy slots in a 300-pixel view: rows of SCROLL_ROW_PX screen pixels (prefill striped),
    as many as fit, a scroll bar over all of them; the wheel and the bar move the rows, hover
    names the slot of the row under the pointer; ids are written only on rows tall enough."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent

    from ui.views.slot_timeline import LABEL_ROW_PX, MIN_ROW_PX, SCROLL_ROW_PX, WHEEL_ROWS
    w = shown_widget(qtbot, SlotTimeline(window=60), 900, 360)
    k = big.latest_step()
    records = big.records(k - 60, k + 1)
    w.set_records(records, k, 256, k)
    vb = w.plot.getPlotItem().getViewBox()
    assert not w.compact and len(w.shown_slots) == 256 and vb.height() / 256 < MIN_ROW_PX
    assert w.scrolling and w.scroll_bar.isVisible()
    assert w.visible_rows == int(vb.height() // SCROLL_ROW_PX) < 256
    assert w.scroll_bar.maximum() == 256 - w.visible_rows
    (_x0, _x1), (y0, y1) = vb.viewRange()
    assert (y0, y1) == (-0.5, w.visible_rows - 0.5)
    assert SCROLL_ROW_PX < LABEL_ROW_PX and not any(t.isVisible() for t in w.labels)
    check_cells(w, records, k)                                       # stripes: row_px > 1
    wheel = QWheelEvent(QPointF(100, 100), QPointF(100, 100), QPoint(), QPoint(0, -120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    from PySide6.QtWidgets import QApplication
    QApplication.sendEvent(w.plot.viewport(), wheel)                  # a notch down
    assert w.first_row == WHEEL_ROWS
    w.scroll_bar.setValue(100)
    (_x0, _x1), (y0, y1) = vb.viewRange()
    assert w.first_row == 100 and (y0, y1) == (99.5, 99.5 + w.visible_rows)
    assert w.cell_at(3, 100.2) == (w.first_step + 3, 100)
    # the next step keeps the scroll position
    w.set_records(big.records(k - 59, k + 1), k, 256, k)
    assert w.first_row == 100
