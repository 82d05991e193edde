"""Each view on its own: what it paints is what the state and the records say."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, Qt

from engine.state import BlockCell
from ui.colors import FREE, IDLE, PALETTE, mix, request_qcolor, request_rgb
from ui.kv_block_map import CELL, INNER, TINT, KVBlockMap, render
from ui.queue_tables import QueueTables
from ui.slot_timeline import ROW_PX, SlotTimeline, decode_rgb, prefill_rgb


def rgb(img, y, x):
    return tuple(int(v) for v in img[y, x, :3])


def test_request_colours_are_stable_and_distinct():
    assert request_rgb("req-3") == request_rgb("req-3") == PALETTE[3]
    assert len({request_rgb(f"req-{i}") for i in range(len(PALETTE))}) == len(PALETTE)
    assert request_rgb("a-uuid-like-id") == request_rgb("a-uuid-like-id")
    assert FREE not in PALETTE and IDLE not in PALETTE
    assert request_qcolor("req-1").getRgb()[:3] == PALETTE[1]


def test_block_map_paints_owners_exactly_where_block_map_says(qtbot, source):
    w = KVBlockMap()
    qtbot.addWidget(w)
    for k in (0, 4, 12, 20, 33):
        state = source.state_at(k)
        w.set_state(state)
        cells = state.block_map()
        assert any(c.request_id for c in cells)
        for c in cells:
            x, y = w.cell_origin(c.block_id)
            top, bottom = rgb(w.image, y, x + 4), rgb(w.image, y + INNER - 1, x + 4)
            gap = rgb(w.image, y + INNER, x + 4)
            if c.request_id is None:
                assert top == bottom == FREE, (k, c)
                continue
            own = request_rgb(c.request_id)
            tint = mix(own, FREE, TINT)
            assert bottom == (own if c.num_tokens > 0 else tint), (k, c)
            assert top == (own if c.num_tokens == state.block_size else tint), (k, c)
            assert gap != own
        assert w.describe(cells[0].block_id).startswith(f"block {cells[0].block_id}")


def test_block_map_render_scales_to_thousands_of_blocks():
    cells = [BlockCell(i, f"r{i % 37}" if i % 4 else None, i % 17) for i in range(5000)]
    img = render(cells, 16, 64, selected="r5")
    assert img.shape == (79 * CELL, 64 * CELL, 4)
    assert rgb(img, 0, 0) == FREE                         # block 0: free
    assert rgb(img, 0, 5 * CELL) == (255, 255, 255)       # block 5 (r5, selected): framed
    assert rgb(img, INNER - 1, 1 * CELL + 4) == request_rgb("r1")   # block 1: 1 token
    assert rgb(img, 0, CELL - 1) != FREE                  # the gap column between cells


@pytest.fixture
def shown_map(qtbot, source):
    """A block map at step 20 on screen, its first owned block, and that block's centre in
    viewport coordinates."""
    w = KVBlockMap(source.state_at(20))
    qtbot.addWidget(w)
    w.resize(500, 400)
    w.show()
    qtbot.waitExposed(w)
    owned = next(c for c in w.cells if c.request_id)
    x, y = w.cell_origin(owned.block_id)
    pos = w.plot.mapFromScene(w.view.mapViewToScene(QPointF(x + CELL / 2, y + CELL / 2)))
    return w, owned, pos


def test_block_map_click_selects_owner(qtbot, shown_map):
    w, owned, pos = shown_map
    with qtbot.waitSignal(w.requestSelected) as sig:
        qtbot.mouseClick(w.plot.viewport(), Qt.LeftButton, pos=pos)
    assert sig.args == [owned.request_id]


def test_slot_timeline_cells_match_scheduled_slots(qtbot, source):
    w = SlotTimeline(window=200)
    qtbot.addWidget(w)
    k = 25
    records = source.records(k - 200, k + 1)
    w.set_records(records, k, 4, source.latest_step())
    assert w.first_step == 0 and w.image.shape[0] == 4 * ROW_PX
    scheduled = {(r.step, s.slot): s for r in records for s in r.scheduler_output.scheduled}
    assert any(s.is_prefill for s in scheduled.values())
    assert any(not s.is_prefill for s in scheduled.values())
    for step in range(0, source.latest_step() + 1):
        for slot in range(4):
            y, x = w.pixel_of(slot, step)
            stripe, solid = rgb(w.image, y, x), rgb(w.image, y + 1, x)
            s = scheduled.get((step, slot)) if step <= k else None
            if s is None:
                assert stripe == solid == IDLE, (step, slot)
            else:
                assert solid == decode_rgb(s.request_id), (step, slot)
                assert stripe == (prefill_rgb(s.request_id) if s.is_prefill
                                  else decode_rgb(s.request_id)), (step, slot)
    assert "prefill" in w.describe(0, 0) and "req-0" in w.describe(0, 0)


def test_slot_timeline_selection_fades_other_requests(qtbot, source):
    w = SlotTimeline()
    qtbot.addWidget(w)
    w.set_records(source.records(0, 21), 20, 4)
    w.set_selected("req-2")
    y, x = w.pixel_of(2, 10)                   # req-2 decodes in slot 2 at step 10
    assert rgb(w.image, y + 1, x) == decode_rgb("req-2")
    y, x = w.pixel_of(0, 10)                   # req-0 in slot 0: faded
    assert rgb(w.image, y + 1, x) != decode_rgb("req-0")


def test_queue_tables_keep_selection_across_updates(qtbot, source):
    w = QueueTables()
    qtbot.addWidget(w)
    w.set_state(source.state_at(10))
    model = w.models["running"]
    assert model.data(model.index(0, 0), Qt.DecorationRole) == request_qcolor(model.rows[0].request_id)
    with qtbot.waitSignal(w.requestSelected) as sig:
        w.select_row("running", 1)
    rid = sig.args[0]
    assert rid == model.rows[1].request_id
    for k in (11, 12, 16, 30):                 # it moves to the finished table on the way
        state = source.state_at(k)
        w.set_state(state)
        queue = next(q for q in ("running", "waiting", "finished") if rid in
                     [r.request_id for r in state.queue(q)])
        view = w.views[queue]
        rows = view.selectionModel().selectedRows()
        assert [i.data(Qt.UserRole) for i in rows] == [rid], (k, queue)
    assert w.row_counts() == {q: len(state.queue(q)) for q in w.models}


def test_hovering_a_block_shows_its_details(qtbot, shown_map):
    from PySide6.QtWidgets import QToolTip
    w, owned, pos = shown_map
    qtbot.mouseMove(w.plot.viewport(), pos)
    qtbot.waitUntil(QToolTip.isVisible, timeout=2000)
    assert QToolTip.text() == w.describe(owned.block_id)
    assert f"owner {owned.request_id}" in QToolTip.text()


def test_request_menu_offers_what_the_status_allows(qtbot, source, control):
    from PySide6.QtWidgets import QWidget

    from ui.request_menu import request_menu
    parent = QWidget()
    qtbot.addWidget(parent)
    state = source.state_at(20)
    running, finished = state.running[0], state.finished[0]
    menu = request_menu(control, running, parent)
    acts = {a.text(): a for a in menu.actions() if a.text()}
    assert acts["Pause request"].isEnabled() and not acts["Resume request"].isEnabled()
    acts["Abort request"].trigger()
    assert control.calls == [("abort_request", running.request_id)]
    menu = request_menu(control, finished, parent)
    assert not any(a.isEnabled() for a in menu.actions() if a.text().endswith("request"))
