"""The KV block map: its pixels are the state's block arrays, hover names the exact block at any
zoom, a click selects the owner."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent, QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from ui.style.colors import BACKGROUND, FREE, mix, packed, request_rgb, unpack
from ui.views.block_image import TINT, BlockImage, cell_px, render
from ui.views.block_map import KVBlockMap

WHITE = packed((255, 255, 255))


def expected(state):
    """Per block, from the state alone: (owner id or None, fill, position in its table)."""
    rows, fill = state.owner_rows(), state.block_fill()
    owners = [state.request_ids[r] if r >= 0 else None for r in rows.tolist()]
    return owners, fill, state.block_pos


def owners_of(state) -> list:
    return expected(state)[0]


def check_pixels(w: KVBlockMap, state, selected: str | None = None) -> None:
    """Every block's cell: free blocks in the free colour, owned ones in the owner's colour up to
    their fill (bottom row: any token; top row: only a full block), the tint above; the selected
    request's blocks (and only those) framed in white; the gaps background."""
    owners, fill, _pos = expected(state)
    n, px = state.num_total_blocks, w.px
    b = np.arange(n)
    x, y = (b % w.columns) * px, (b // w.columns) * px
    inner, mid = px - 1, (b % w.columns) * px + (px - 1) // 2
    own = packed(np.array([request_rgb(o) if o else FREE for o in owners]))
    tint = packed(np.array([mix(request_rgb(o), FREE, TINT) if o else FREE for o in owners]))
    owned = np.array([o is not None for o in owners])
    full = fill == state.block_size
    framed = np.zeros(n, bool)
    if selected:
        framed[list(state.block_ids(selected))] = True
    nf = ~framed
    top, bottom = w.image[y, mid], w.image[y + inner - 1, mid]
    np.testing.assert_array_equal(bottom[nf], np.where(fill > 0, own, tint)[nf])
    np.testing.assert_array_equal(top[nf & full], own[nf & full])
    np.testing.assert_array_equal(top[nf & owned & ~full], tint[nf & owned & ~full])
    np.testing.assert_array_equal(top[~owned], np.full((~owned).sum(), packed(FREE)))
    np.testing.assert_array_equal(top == WHITE, framed)
    np.testing.assert_array_equal(w.image[y + inner, mid], np.full(n, packed(BACKGROUND)))
    np.testing.assert_array_equal(w.image[y, x + inner], np.full(n, packed(BACKGROUND)))


def test_pixels_are_the_block_arrays_step_by_step(qtbot, source):
    w = KVBlockMap()
    qtbot.addWidget(w)
    for k in (0, 4, 12, 20, 33):
        state = source.state_at(k)
        assert state.num_used_blocks > 0
        w.set_state(state)
        assert w.px == 12 and w.image.shape == (w.px * -(-64 // w.columns), w.px * w.columns)
        assert owners_of(state) == [c.request_id for c in state.block_map()]
        check_pixels(w, state)
    state = source.state_at(20)
    w.set_state(state)
    w.set_selected("req-2")
    assert len(state.block_ids("req-2")) > 0
    check_pixels(w, state, "req-2")


def test_pixels_at_production_scale(qtbot, big):
    state = big.state_at(big.latest_step())
    w = KVBlockMap(state)
    qtbot.addWidget(w)
    rid = state.request_ids[int(state.queue_rows("running")[100])]
    w.set_selected(rid)
    assert state.num_total_blocks == 16_384 and w.px == cell_px(16_384) == 4
    check_pixels(w, state, rid)
    counts = np.unique(w.image, return_counts=True)[1]
    assert len(counts) > 20                            # many request colours, not a flat image


def test_render_scales_and_frames():
    pal = np.array([-1, 3, 3, 7], np.int16)
    img = render(pal, np.array([0, 16, 1, 8]), 16, columns=2, px=8, framed=np.array([0, 1, 1, 0], bool))
    assert img.shape == (16, 16) and img.dtype == np.uint32
    assert tuple(unpack(img[3, 3])) == FREE                    # block 0: free, not framed
    assert img[0, 8] == WHITE and img[8, 0] == WHITE          # blocks 1, 2: framed
    assert img[0 + 3, 8 + 3] != WHITE                         # ... only on their edge


def test_incremental_image_equals_a_full_render():
    rng = np.random.default_rng(1)
    n, cols, px = 5000, 80, 6
    pal, fill = rng.integers(-1, 20, n).astype(np.int16), rng.integers(0, 17, n)
    framed = rng.random(n) < 0.01
    painter = BlockImage()
    first = painter.update(pal, fill, 16, cols, px, framed)
    for _ in range(5):                         # a few cells change a step: repainted in place
        b = rng.integers(0, n, 40)
        pal[b], fill[b] = rng.integers(-1, 20, 40), rng.integers(0, 17, 40)
        framed[rng.integers(0, n, 3)] ^= True
        img = painter.update(pal, fill, 16, cols, px, framed)
        assert img is first
        np.testing.assert_array_equal(img, render(pal, fill, 16, cols, px, framed))
    pal[:] = -1                                # most changed: a full render
    np.testing.assert_array_equal(painter.update(pal, fill, 16, cols, px, None),
                                  render(pal, fill, 16, cols, px, None))


@pytest.fixture
def big_map(qtbot, big):
    """The production-sized map at full zoom-out in a 600x400 widget (blocks ~3 screen px)."""
    state = big.state_at(big.latest_step())
    w = KVBlockMap(state)
    qtbot.addWidget(w)
    w.resize(600, 400)
    w.show()
    qtbot.waitExposed(w)
    w.set_state(state)
    return w, state


def viewport_point(w: KVBlockMap, block: int) -> QPoint:
    x, y = w.cell_origin(block)
    scene = w.view.mapViewToScene(QPointF(x + (w.px - 1) / 2, y + (w.px - 1) / 2))
    return w.plot.mapFromScene(scene)


def screen_px_per_block(w: KVBlockMap) -> float:
    a, b = (w.view.mapViewToScene(QPointF(v, 0)) for v in (0, w.px))
    return b.x() - a.x()


def move_mouse(widget, pos: QPoint) -> None:
    """A mouse-move event at ``pos``, after pyqtgraph's rate limit (it drops moves that come
    within 10 ms of the previous one)."""
    QTest.qWait(25)
    ev = QMouseEvent(QEvent.MouseMove, QPointF(pos), QPointF(widget.mapToGlobal(pos)),
                     Qt.NoButton, Qt.NoButton, Qt.NoModifier)
    QApplication.sendEvent(widget, ev)


def hover(qtbot, w: KVBlockMap, pos: QPoint, block: int) -> str:
    """Move the pointer to ``pos``; the tooltip text once it names ``block`` (fails if the
    tooltip names another block)."""
    move_mouse(w.plot.viewport(), pos)
    qtbot.waitUntil(lambda: QToolTip.isVisible() and QToolTip.text().startswith("block "),
                    timeout=2000)
    qtbot.waitUntil(lambda: QToolTip.text().split("\n")[0] == f"block {block}", timeout=2000)
    return QToolTip.text()


def describes(text: str, state, block: int) -> None:
    owners, fill, pos = expected(state)
    lines = text.split("\n")
    assert lines[0] == f"block {block}"
    if owners[block] is None:
        assert lines[1] == "free"
        return
    table = state.block_ids(owners[block])
    assert lines[1] == f"owner {owners[block]}"
    assert lines[2] == f"block {int(pos[block]) + 1} of {len(table)} in its table"
    assert table[int(pos[block])] == block
    assert lines[3] == f"{int(fill[block])} / {state.block_size} tokens written"


def test_hover_names_the_exact_block_zoomed_out_and_in(qtbot, big_map):
    w, state = big_map
    assert 2 <= screen_px_per_block(w) < 5             # 16k blocks in one view
    rng = np.random.default_rng(0)
    for block in [0, 16_383, *rng.integers(0, 16_384, 4).tolist()]:
        pos = viewport_point(w, block)
        p = w.view.mapSceneToView(w.plot.mapToScene(pos))
        assert w.block_at(p.x(), p.y()) == block       # the rounded pointer is still inside
        text = hover(qtbot, w, pos, block)
        assert text == w.describe(block)
        describes(text, state, block)
    # zoom in around one block (as the mouse wheel does): single blocks are large, hover exact
    block = 5000
    x, y = w.cell_origin(block)
    w.view.scaleBy((0.05, 0.05), center=QPointF(x, y))
    assert screen_px_per_block(w) > 40
    text = hover(qtbot, w, viewport_point(w, block), block)
    describes(text, state, block)
    w.fit()
    assert 2 <= screen_px_per_block(w) < 5


def test_wheel_zooms_and_double_click_fits(qtbot, big_map):
    w, _state = big_map
    before = screen_px_per_block(w)
    pos = viewport_point(w, 8000)
    for _ in range(6):
        ev = QWheelEvent(QPointF(pos), QPointF(w.plot.viewport().mapToGlobal(pos)), QPoint(0, 0),
                         QPoint(0, 120), Qt.NoButton, Qt.NoModifier, Qt.NoScrollPhase, False)
        QApplication.sendEvent(w.plot.viewport(), ev)
    assert screen_px_per_block(w) > 2 * before and w.zoomed
    qtbot.mouseDClick(w.plot.viewport(), Qt.LeftButton, pos=pos)   # the second press of a
    qtbot.mouseRelease(w.plot.viewport(), Qt.LeftButton, pos=pos)  # double click, released
    (x0, x1), (y0, y1) = w.view.viewRange()
    h, wd = w.image.shape
    assert not w.zoomed and x0 <= 0 and y0 <= 0 and x1 >= wd and y1 >= h   # the whole cache
    assert screen_px_per_block(w) == pytest.approx(before, rel=0.1)


def test_click_selects_the_owner(qtbot, source):
    w = KVBlockMap(source.state_at(20))
    qtbot.addWidget(w)
    w.resize(500, 400)
    w.show()
    qtbot.waitExposed(w)
    block = next(b for b in range(64) if w.owner_of(b))
    with qtbot.waitSignal(w.requestSelected) as sig:
        qtbot.mouseClick(w.plot.viewport(), Qt.LeftButton, pos=viewport_point(w, block))
    assert sig.args == [w.owner_of(block)]
    assert sig.args[0] == source.state_at(20).request_ids[int(source.state_at(20).owner_rows()[block])]


def test_block_owners_found_among_the_holders_equal_the_states(big, source):
    """``ui.state_lookup.block_holders`` (owners among the requests holding blocks, no search
    of all live rows) gives ``EngineState.owner_rows`` and ``block_fill`` exactly."""
    from ui.state_lookup import block_fill, block_holders
    for state in (big.state_at(big.latest_step()), *(source.state_at(k) for k in (-1, 0, 7, 20, 39))):
        holders, at = block_holders(state)
        np.testing.assert_array_equal(np.append(holders, -1)[at], state.owner_rows())
        fill = block_fill(state, holders, at)
        np.testing.assert_array_equal(fill, state.block_fill())
        assert fill.dtype == state.block_fill().dtype


def test_request_rows_found_in_each_state_asked(source):
    """``ui.state_lookup.find_row`` answers for the state it is given, however the views
    interleave their questions (it keeps its last answer): a request's row moves as earlier
    requests leave, and it has none before it arrives and after it finishes."""
    from ui.state_lookup import find_row
    states = [source.state_at(k) for k in range(-1, source.latest_step() + 1)]
    ids = sorted({rid for s in states for rid in s.request_ids})
    for rid in ids:
        want = [s.request_ids.index(rid) if rid in s.request_ids else None for s in states]
        assert len(set(want)) > 1, rid                     # arrives, moves or leaves meanwhile
        for s, w in zip(states, want):
            assert find_row(s, rid) == w == find_row(s, rid)
        for s, w in zip(reversed(states), reversed(want)):
            assert find_row(s, "not-a-request") is None and find_row(s, rid) == w
