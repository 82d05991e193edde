"""The block map's two layouts and its area-averaged pixels: by request, every block of the
state appears exactly once, each request's blocks as one run of as many cells as it holds, in
slot order, the shared prefix as a marked segment, then the cached-free and free regions; hover
and click map back to the exact block in both layouts and at any density; a selection frames
the same blocks in both; when blocks outnumber pixels each pixel is the mean of its blocks."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QApplication

from tests.support.fakes import big_source
from tests.ui.views.test_ui_block_map import hover
from tests.ui.views.test_ui_block_map_prefix import shared_prefix_states
from ui.state_lookup import block_fill, block_holders
from ui.style.colors import BACKGROUND, color_indices, packed, unpack
from ui.views.block_grid import BlockGrid, band_rows
from ui.views.block_image import MARK_SHARED, SELECTED, block_rgb, dense_image
from ui.views.block_map import KVBlockMap
from ui.views.request_runs import (EMPTY, FULL, PARTIAL, SHARED, block_at_cell, blocks_in_order,
                                   cell_of_block, cells, request_runs)


@pytest.fixture(scope="module")
def prefix_states():
    return shared_prefix_states()


@pytest.fixture(scope="module")
def busy_state():
    src = big_source(num_blocks=2048, running=24, waiting=0)
    src.advance(5)                               # decoding: partly written last blocks
    return src.state_at(src.latest_step())


def layout_of(state):
    holders, at = block_holders(state)
    fill = block_fill(state, holders, at)
    runs = request_runs(state, holders, at, fill)
    return runs, at, fill, blocks_in_order(state, runs, at, fill)


def check_layout(state) -> None:
    runs, at, fill, order = layout_of(state)
    n = state.num_total_blocks
    assert runs.num_blocks == n and np.array_equal(np.sort(order), np.arange(n))   # each block once
    seq, slot = state.columns["seq"], state.columns["slot"]
    ref = state.block_ref_cnt()
    for r, row in enumerate(runs.rows.tolist()):
        blocks = order[runs.starts[r]:runs.starts[r + 1]]
        # one run per request, as long as the blocks it owns (areas proportional to blocks)
        assert np.array_equal(np.sort(blocks), np.flatnonzero(state.block_owner == seq[row]))
        a = runs.starts[r]
        shared, full, partial, empty = (blocks[sum(runs.parts[r, :j]):sum(runs.parts[r, :j + 1])]
                                        for j in (SHARED, FULL, PARTIAL, EMPTY))
        assert (ref[shared] > 1).all() and (ref[np.concatenate([full, partial, empty])] == 1).all()
        assert (fill[full] == state.block_size).all() and (fill[empty] == 0).all()
        assert ((fill[partial] > 0) & (fill[partial] < state.block_size)).all() and len(partial) <= 1
        for part in (shared, full, partial, empty):      # block-table order within a part
            assert (np.diff(state.block_pos[part]) > 0).all()
        assert a == runs.starts[r]
    slots = slot[runs.rows]
    held = slots[slots >= 0]
    assert (np.diff(held) > 0).all() and (slots[len(held):] < 0).all()          # slot order
    assert (np.diff(runs.rows[len(held):]) > 0).all()                             # then arrival
    rs = runs.region_starts
    cached = order[rs[0]:rs[1]]
    assert np.array_equal(cached, np.flatnonzero(state.cached_free_mask()))
    assert np.array_equal(order[rs[1]:rs[2]], np.flatnonzero((state.block_owner == -1) & (state.block_hash == 0)))
    # the cells' looks are those of the blocks they stand for
    colours = color_indices([state.request_ids[r] for r in runs.rows.tolist()])
    pal, cfill, marks, framed = cells(runs, colours, state.block_size)
    owner_pal = np.append(color_indices([state.request_ids[r] for r in range(len(seq))]), -1)
    rows = state.owner_rows()
    assert np.array_equal(pal, owner_pal[rows[order]]) and not framed.any()
    assert np.array_equal(marks == MARK_SHARED, ref[order] > 1)
    not_shared = ref[order] <= 1
    assert np.array_equal(cfill[not_shared], fill[order][not_shared])
    for i in range(0, n, max(1, n // 64)):                # the exact lookups agree with the order
        assert block_at_cell(state, runs, at, fill, i) == order[i]
        assert cell_of_block(state, runs, at, fill, int(order[i])) == i


def test_by_request_every_block_once_in_one_run_per_request_in_slot_order(prefix_states, busy_state):
    sharing = [s for s in prefix_states if len(s.shared_block)]
    caching = [s for s in prefix_states if s.cached_free_mask().any()]
    assert sharing and caching
    for state in sharing[:3] + caching[:2] + [busy_state]:
        check_layout(state)


def shown(qtbot, state, layout, size=(700, 460), plot_size=None) -> KVBlockMap:
    w = KVBlockMap(layout=layout)
    qtbot.addWidget(w)
    if plot_size:
        w.plot.setFixedSize(*plot_size)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    w.set_state(state)
    QApplication.processEvents()
    return w


def test_hover_and_click_name_the_exact_block_by_request(qtbot, busy_state):
    w = shown(qtbot, busy_state, "request")
    assert w.layout_name == "request" and w.grid.band > 1 and w.grid.per_pixel == 1
    n = busy_state.num_total_blocks
    assert all(w.block_at(*w.block_point(b)) == b for b in range(n))
    rng = np.random.default_rng(5)
    got = []
    w.requestSelected.connect(got.append)
    for block in rng.choice(np.flatnonzero(busy_state.block_owner >= 0), 3, replace=False).tolist():
        x, y = w.block_point(block)
        pos = w.plot.mapFromScene(w.view.mapViewToScene(QPointF(x, y)))
        assert hover(qtbot, w, pos, block) == w.describe(block)
        qtbot.mouseClick(w.plot.viewport(), Qt.LeftButton, pos=pos)
        assert got[-1] == w.owner_of(block)


def test_labels_sit_on_their_own_run(qtbot, busy_state):
    w = shown(qtbot, busy_state, "request", size=(1400, 900))
    labels = w.run_labels()
    assert labels and [t.isVisible() for t in w.labels[:len(labels)]] == [True] * len(labels)
    runs = w.runs
    for x, y, text in labels:
        block = w.block_at(x + 0.5, y + 0.5)
        head = text.split(" ")[0]
        if head in ("cached-free", "free"):
            assert w.owner_of(block) is None
        elif head in busy_state.request_ids:
            assert w.owner_of(block) == head
            if " · " in text:
                r = busy_state.request_ids.index(head)
                count = int(np.diff(runs.starts)[list(runs.rows).index(r)])
                assert text == f"{head} · {count:,}" == f"{head} · {int(busy_state.columns['num_blocks'][r]):,}"


def framed_blocks(w: KVBlockMap) -> set[int]:
    """The blocks whose cell has the white selection frame on screen."""
    n = len(w.fill)
    return {b for b in range(n) if w.image[w.cell_origin(b)[1], w.cell_origin(b)[0]] == packed(SELECTED)}


def test_a_selection_frames_the_same_blocks_in_both_layouts(qtbot, prefix_states):
    state = next(s for s in prefix_states if len(s.shared_block) and len(np.unique(s.shared_seq)) > 0)
    rid = state.request_ids[int(np.searchsorted(state.columns["seq"], state.shared_seq[0]))]
    want = set(state.block_ids(rid))
    assert any(state.block_owner[b] != state.columns["seq"][state.request_ids.index(rid)] for b in want)
    for layout in ("physical", "request"):
        w = shown(qtbot, state, layout)
        w.set_selected(rid)
        assert framed_blocks(w) == want, layout


def test_the_layout_buttons_switch_layouts(qtbot, busy_state):
    w = shown(qtbot, busy_state, "physical")
    physical = w.image.copy()
    w.layout_buttons["request"].click()
    assert w.layout_name == "request" and w.runs is not None and not np.array_equal(w.image, physical)
    assert w.layout_buttons["request"].isChecked() and not w.layout_buttons["physical"].isChecked()
    w.layout_buttons["physical"].click()
    assert w.layout_name == "physical" and w.runs is None
    with pytest.raises(ValueError, match="layout 'treemap'"):
        w.set_layout("treemap")
    auto = KVBlockMap(layout="auto")
    qtbot.addWidget(auto)
    auto.set_state(busy_state)
    assert auto.layout_name == "physical"           # a small cache: where its blocks sit


def test_area_average_is_the_mean_of_each_pixels_blocks():
    rng = np.random.default_rng(1)
    rgb = rng.uniform(0, 255, (1000, 3)).astype(np.float32)
    framed = np.zeros(1000, bool)
    framed[517] = True
    img = dense_image(rgb, columns=7, per_pixel=6, framed=framed).reshape(-1)
    for p in range(-(-1000 // 6)):
        mean = rgb[p * 6:(p + 1) * 6].mean(axis=0)
        if p == 517 // 6:
            mean = mean * 0.4 + 255 * 0.6
        assert img[p] == packed(np.rint(mean)), p
    assert (img[-(-1000 // 6):] == packed(BACKGROUND)).all()
    with pytest.raises(ValueError, match="per_pixel"):
        dense_image(rgb, 7, 0)


@pytest.mark.parametrize("layout", ["physical", "request"])
def test_more_blocks_than_pixels_are_area_averaged_and_still_exact(qtbot, busy_state, layout):
    w = shown(qtbot, busy_state, layout, plot_size=(40, 26))
    g = w.grid
    assert g.per_pixel > 1 and g.px == 1
    pal, fill, marks, framed = w._cells()
    # reference: each block's mean colour on its own, averaged over the blocks of each pixel
    rgb = np.array([block_rgb(pal[i:i + 1], fill[i:i + 1], busy_state.block_size,
                              None if marks is None else marks[i:i + 1])[0] for i in range(len(pal))])
    order = g.order()
    flat = w.image.reshape(-1)
    for place in range(0, len(order), 7):
        p = order[place]
        if p < 0:
            assert flat[place] == packed(BACKGROUND)
        else:
            cells_of_p = rgb[p * g.per_pixel:(p + 1) * g.per_pixel]
            assert np.abs(unpack(flat[place]).astype(float)
                          - np.rint(cells_of_p.mean(axis=0))).max() <= 1, place
    n = busy_state.num_total_blocks
    assert all(w.block_at(*w.block_point(b)) == b for b in range(0, n, 3))   # zoomed in: exact
    text = w._describe_key(("gpu", 100))
    assert text.startswith(f"pixel of {g.per_pixel} blocks") and text.endswith(w.describe(100))


def test_the_grid_maps_positions_both_ways():
    for grid in (BlockGrid(1000, 17, 3, 1, 1), BlockGrid(1000, 17, 1, 4, 5), BlockGrid(5, 3, 2, 1, 4)):
        order = grid.order()
        shown_positions = order[order >= 0]
        assert np.array_equal(np.sort(shown_positions), np.arange(grid.num_positions))
        rows, cols = grid.position(np.arange(grid.num_positions))
        assert (grid.index(rows, cols) == np.arange(grid.num_positions)).all()
        assert rows.max() < grid.rows and cols.max() < grid.columns
        for i in range(grid.num_cells):
            assert grid.cell_at(*grid.cell_point(i)) == i
    assert band_rows(26_000, 36) == 27 and band_rows(10, 0) == 1
    with pytest.raises(ValueError, match="columns"):
        BlockGrid(10, 0)
