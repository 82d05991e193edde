"""The by-request block map painted per segment (``ui.views.run_image``): pixel for pixel the
image of every cell rendered on its own, at any cell size and band, with the selection framed
(its shared blocks in other runs too); and from one state to the next only what changed moves:
a request that gains a block grows its run by that cell, the runs before it keep their pixels
(physical: only the new block's cell changes)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.state.state import EngineState
from tests.support.fakes import big_source
from tests.ui.views.test_ui_block_map_layouts import shown
from tests.ui.views.test_ui_block_map_prefix import shared_prefix_states
from ui.state_lookup import block_fill, block_holders
from ui.style.colors import BACKGROUND, color_indices, packed
from ui.views.block_grid import BlockGrid
from ui.views.block_image import render
from ui.views.request_runs import cells, cells_of_blocks, request_runs, segments
from ui.views.run_image import segment_image


@pytest.fixture(scope="module")
def busy_state():
    src = big_source(num_blocks=2048, running=24, waiting=0)
    src.advance(5)                               # decoding: partly written last blocks
    return src.state_at(src.latest_step())


def reference(state, runs, colours, sel_run, extra, grid: BlockGrid) -> np.ndarray:
    """Every cell rendered on its own, laid out in ``grid`` (places past the cells blank)."""
    pal, fill, marks, framed = cells(runs, colours, state.block_size, sel_run)
    framed[extra] = True
    order = grid.order()
    at, blank = np.maximum(order, 0), order < 0
    image = render(np.where(blank, -1, pal[at]).astype(np.int16), np.where(blank, 0, fill[at]),
                   state.block_size, grid.columns, grid.px, framed[at] & ~blank,
                   np.where(blank, 0, marks[at]).astype(np.int8))
    rows, cols = np.divmod(np.flatnonzero(blank), grid.columns)
    image.reshape(grid.rows, grid.px, grid.columns, grid.px)[rows, :, cols, :] = packed(BACKGROUND)
    return image


@pytest.mark.parametrize("which", ["prefix", "busy"])
def test_segments_paint_the_image_of_every_cell(which, busy_state):
    states = [s for s in shared_prefix_states()[1:] if len(s.shared_seq)][:1] if which == "prefix" \
        else [busy_state]
    state = states[0]
    holders, at = block_holders(state)
    fill = block_fill(state, holders, at)
    runs = request_runs(state, holders, at, fill)
    colours = color_indices([state.request_ids[r] for r in runs.rows.tolist()])
    n = state.num_total_blocks
    # the selection: the last run (a later holder of the shared prefix, when there is one)
    sel_run = len(runs.rows) - 1
    row = runs.rows[sel_run]
    mine = state.shared_block[state.shared_seq == state.columns["seq"][row]]
    extra = cells_of_blocks(state, runs, at, fill, mine) if len(mine) else np.zeros(0, np.int64)
    if which == "prefix":
        assert len(extra)                       # framed cells in another run than the selection's
    for px, band, columns in [(1, 1, 64), (1, 7, 50), (2, 5, 33), (4, 9, 40), (7, 3, 16)]:
        grid = BlockGrid(n, columns, px, 1, band)
        looks = segments(runs, colours, state.block_size, sel_run)
        got = segment_image(*looks, state.block_size, grid, extra)
        np.testing.assert_array_equal(got, reference(state, runs, colours, sel_run, extra, grid),
                                      err_msg=f"px {px} band {band}")
    with pytest.raises(ValueError, match="per_pixel"):
        segment_image(*looks, state.block_size, BlockGrid(n, 8, 1, 2))
    with pytest.raises(ValueError, match="cells for a grid"):
        segment_image(*looks, state.block_size, BlockGrid(n + 1, 8))


def one_more_block(state: EngineState, row: int) -> tuple[EngineState, int]:
    """``state`` with request ``row`` holding one more (unwritten) block, the lowest free one."""
    block = int(np.flatnonzero((state.block_owner == -1) & (state.block_hash == 0))[0])
    owner, pos = state.block_owner.copy(), state.block_pos.copy()
    owner[block] = state.columns["seq"][row]
    pos[block] = state.columns["num_blocks"][row]
    columns = {k: v.copy() for k, v in state.columns.items()}
    columns["num_blocks"][row] += 1
    return EngineState(state.step + 1, state.clock, state.num_total_blocks, state.block_size,
                       state.max_num_seqs, next_seq=state.next_seq, request_ids=state.request_ids,
                       columns=columns, block_owner=owner, block_pos=pos,
                       block_hash=state.block_hash, shared_seq=state.shared_seq,
                       shared_block=state.shared_block), block


def test_a_request_that_gains_a_block_grows_its_run_and_the_runs_before_keep_their_pixels(
        qtbot, busy_state):
    w = shown(qtbot, busy_state, "request")
    runs = w.runs
    middle = len(runs.rows) // 2
    row = int(runs.rows[middle])
    before = w.image.copy()
    grid = w.grid
    after_state, block = one_more_block(busy_state, row)
    w.set_state(after_state)
    assert w.grid == grid                                           # same grid: pixels compare
    after = w.image
    first, end = int(w.runs.starts[middle]), int(w.runs.starts[middle + 1])
    assert end - first == int(runs.starts[middle + 1] - runs.starts[middle]) + 1
    assert w.cell_of(block) == end - 1                              # the new cell ends its run
    same = np.ones(before.shape, bool)
    for cell in range(first, grid.num_cells):                       # from the grown run on ...
        x, y = grid.cell_origin(cell)
        same[y:y + grid.px, x:x + grid.px] = False
    np.testing.assert_array_equal(after[same], before[same])         # ... the rest is unchanged
    x, y = grid.cell_origin(end - 1)
    assert (after[y:y + grid.px, x:x + grid.px] != before[y:y + grid.px, x:x + grid.px]).any()


def test_physical_a_new_block_repaints_only_its_cell(qtbot, busy_state):
    w = shown(qtbot, busy_state, "physical")
    before = w.image.copy()
    row = int(busy_state.queue_rows("running")[3])
    after_state, block = one_more_block(busy_state, row)
    w.set_state(after_state)
    x, y = w.cell_origin(block)
    cell = np.zeros(before.shape, bool)
    cell[y:y + w.px, x:x + w.px] = True
    np.testing.assert_array_equal(w.image[~cell], before[~cell])
    assert (w.image[cell] != before[cell]).any()


def test_auto_layout_checks_the_button_of_the_layout_it_draws(qtbot):
    from ui.views.block_map import AUTO_REQUEST_BLOCKS, KVBlockMap
    w = KVBlockMap(layout="auto")
    qtbot.addWidget(w)
    assert w.layout_buttons["physical"].isChecked()                  # no state: physical
    w.set_state(EngineState(0, 0.0, AUTO_REQUEST_BLOCKS, 16, 4))
    assert w.layout_name == "request" and w.runs is not None
    assert w.layout_buttons["request"].isChecked() and not w.layout_buttons["physical"].isChecked()
