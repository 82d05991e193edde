"""The KV block map under swap preemption and live knobs: the CPU swap pool drawn under the GPU
blocks in its owners' colours (hover names the owner and its swapped tokens, a click selects
it), and blocks taken out of use drawn hatched. States come from the real engine with the fake
runner."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from engine.state.state import RESERVED
from tests.support.fakes import FakeSource, swap_source
from ui.views.block_image import (MARK_CACHED_FREE, MARK_RESERVED, MARK_SHARED, RESERVED_BG,
                            RESERVED_HATCH, BlockImage, _hatch, render)
from ui.style.colors import FREE, packed, request_rgb
from ui.views.block_map import KVBlockMap

WHITE = packed((255, 255, 255))


def seq_ids(state) -> dict[int, str]:
    return {int(s): rid for rid, s in zip(state.request_ids, state.columns["seq"].tolist())}


def legend(w: KVBlockMap) -> str:
    return w.legend.text().replace("&nbsp;", " ")


def cpu_owners(state) -> list[str | None]:
    """The owner id of each CPU swap block, from the state alone (None free)."""
    ids = seq_ids(state)
    return [ids[s] if s >= 0 else None for s in state.cpu_owner.tolist()]


def shown_map(qtbot, state, size=(600, 420)) -> KVBlockMap:
    w = KVBlockMap()
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    w.set_state(state)
    QApplication.processEvents()      # the legend's new lines re-lay the view out: fit to it
    return w


def swapped_state(source: FakeSource):
    """The first state with a request swapped out."""
    return next(s for s in source.states if len(s.queue_rows("swapped")))


def shrunk_swap_state():
    """The pool shrunk to 12 of 20 blocks after step 14 of :func:`fakes.swap_source` with 16 CPU
    blocks: the three requests that fit in the CPU pool are swapped out, the fourth falls back
    to recompute (the engine's state between steps)."""
    source = swap_source(15, num_cpu_blocks=16)
    source.engine.set_knobs(num_usable_blocks=12)
    return source.state_at(source.latest_step())


def test_cpu_pool_cells_are_coloured_by_owner_and_framed_when_selected(qtbot):
    state = shrunk_swap_state()
    owners = cpu_owners(state)
    assert len({o for o in owners if o}) == 3 and None in owners   # three owners, a free block
    w = shown_map(qtbot, state)
    cpu = w.cpu
    assert cpu.item.isVisible() and cpu.image.shape[1] == w.image.shape[1]
    assert cpu.item.pos().y() >= w.image.shape[0] + w.px  # under the GPU grid, with a gap
    for c, owner in enumerate(owners):
        x, y = cpu.cell_origin(c)
        mid = x + (w.px - 1) // 2
        colour = packed(request_rgb(owner) if owner else FREE)
        assert cpu.image[y + w.px - 2, mid] == colour and cpu.image[y, mid] == colour, c
        assert cpu.owner_of(c) == owner
    swapped = next(o for o in owners if o)
    w.set_selected(swapped)
    for c, owner in enumerate(owners):
        x, y = cpu.cell_origin(c)
        assert (cpu.image[y, x] == WHITE) == (owner == swapped), c
    assert "CPU swap pool" in legend(w)
    assert cpu.label.toPlainText() == (f"CPU swap pool: {sum(o is not None for o in owners)} / "
                                       f"{len(owners)} blocks hold swapped-out KV")


def test_a_run_without_a_swap_pool_draws_no_cpu_grid(qtbot, source):
    state = source.state_at(20)
    w = shown_map(qtbot, state)
    assert not w.cpu.item.isVisible() and w.cpu.num_blocks == 0
    assert w._shape == w.image.shape                      # nothing under the GPU grid
    assert not w.cpu.label.isVisible() and "CPU swap" not in legend(w)
    assert "out of use" not in legend(w)


def move_mouse(widget, pos) -> None:
    QTest.qWait(25)                                       # past pyqtgraph's rate limit
    ev = QMouseEvent(QEvent.MouseMove, QPointF(pos), QPointF(widget.mapToGlobal(pos)),
                     Qt.NoButton, Qt.NoButton, Qt.NoModifier)
    QApplication.sendEvent(widget, ev)


def test_hover_names_the_cpu_block_owner_and_its_swapped_tokens_and_click_selects(qtbot):
    source = swap_source(30)
    state = swapped_state(source)
    w = shown_map(qtbot, state)
    c = next(i for i, o in enumerate(cpu_owners(state)) if o)
    owner = cpu_owners(state)[c]
    x, y = w.cpu.cell_origin(c)
    centre = QPointF(x + (w.px - 1) / 2, w.cpu.top + y + (w.px - 1) / 2)
    pos = w.plot.mapFromScene(w.view.mapViewToScene(centre))
    move_mouse(w.plot.viewport(), pos)
    qtbot.waitUntil(lambda: QToolTip.isVisible() and QToolTip.text().startswith(f"CPU block {c} "),
                    timeout=2000)
    lines = QToolTip.text().split("\n")
    row = state.row(owner)
    held = int(np.count_nonzero(state.cpu_owner == state.columns["seq"][row]))
    tokens = int(state.columns["num_computed_tokens"][row])
    assert lines[1] == f"owner {owner} (swapped out)"
    assert lines[2] == f"{held} CPU blocks hold its {tokens} swapped tokens of KV"
    assert held == -(-tokens // state.block_size)          # as many blocks as its KV fills
    free = next((i for i, o in enumerate(cpu_owners(state)) if o is None), None)
    if free is not None:
        assert w.cpu.describe(free).split("\n")[1] == "free"
    with qtbot.waitSignal(w.requestSelected) as sig:
        qtbot.mouseClick(w.plot.viewport(), Qt.LeftButton, pos=pos)
    assert sig.args == [owner]


def test_blocks_out_of_use_are_hatched_and_described(qtbot):
    source = FakeSource(12)
    source.engine.set_knobs(num_usable_blocks=40)
    state = source.state_at(source.latest_step())          # the engine's state after the change
    reserved = state.block_owner == RESERVED
    assert reserved.sum() == 64 - 40
    w = shown_map(qtbot, state)
    hatch = _hatch(w.px)
    inner = w.px - 1
    for b in range(state.num_total_blocks):
        x, y = w.cell_origin(b)
        tile = w.image[y:y + inner, x:x + inner]
        if reserved[b]:
            np.testing.assert_array_equal(
                tile, np.where(hatch[:inner, :inner], packed(RESERVED_HATCH), packed(RESERVED_BG)))
        else:
            assert not np.isin(tile, [packed(RESERVED_BG), packed(RESERVED_HATCH)]).any(), b
    b = int(np.flatnonzero(reserved)[0])
    assert w.describe(b).split("\n")[1].startswith("out of use: the usable KV pool was shrunk to 40 ")
    assert w.owner_of(b) is None and w.num_reserved == 24
    assert "out of use (24 blocks: pool shrunk)" in legend(w)
    source.engine.set_knobs(num_usable_blocks=64)          # given back: drawn as before
    w.set_state(source.state_at(source.latest_step()))
    assert w.num_reserved == 0 and not np.isin(w.image, [packed(RESERVED_BG)]).any()


def test_repainting_changed_cells_with_marks_equals_a_full_render():
    rng = np.random.default_rng(1)
    n, cols, px = 300, 20, 8
    pal, fill = rng.integers(-1, 20, n), rng.integers(0, 17, n)
    marks = rng.choice([0, MARK_SHARED, MARK_CACHED_FREE, MARK_RESERVED], n).astype(np.int8)
    painter = BlockImage()
    first = painter.update(pal, fill, 16, cols, px, None, marks)
    for _ in range(5):
        b = rng.integers(0, n, 20)
        marks[b] = rng.choice([0, MARK_RESERVED], 20)
        pal[b] = np.where(marks[b] == MARK_RESERVED, -1, rng.integers(-1, 20, 20))
        img = painter.update(pal, fill, 16, cols, px, None, marks)
        assert img is first                                  # repainted in place
        np.testing.assert_array_equal(img, render(pal, fill, 16, cols, px, None, marks))
