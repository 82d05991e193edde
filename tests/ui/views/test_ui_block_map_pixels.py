"""The block map at the size a production cache has (26,000 blocks) in a small view: every cell
covers the same whole device pixels (drawn at a fraction of a pixel per image pixel, the 1-pixel
gaps aliased into moiré bands), hover still names the exact block; below 3 pixels a cell has no
gap, and the cell size follows the view."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from tests.support.fakes import big_source
from tests.ui.views.test_ui_block_map import hover, viewport_point
from tests.ui.views.test_ui_block_map_swap import shown_map
from ui.views.block_image import device_scale, fitted_cell_px, painted_px, render
from ui.style.colors import BACKGROUND, FREE, packed
from ui.views.block_map import KVBlockMap

NUM_BLOCKS = 26_000


@pytest.fixture(scope="module")
def state26k():
    src = big_source(num_blocks=NUM_BLOCKS, running=64, waiting=0)
    return src.state_at(src.latest_step())


def device_x(w: KVBlockMap, x: float) -> float:
    """Device x (in the plot's viewport) of image x."""
    return w.plot.mapFromScene(w.view.mapViewToScene(QPointF(x, 0))).x() * w.plot.devicePixelRatioF()


def gap_columns(w: KVBlockMap, row: int) -> np.ndarray:
    """Device x of the background-coloured pixels along the middle of cell row ``row`` across
    the grid, as painted on screen."""
    image = w.plot.grab().toImage()
    ratio = w.plot.devicePixelRatioF()
    y = w.plot.mapFromScene(w.view.mapViewToScene(QPointF(0, (row + 0.4) * w.px))).y() * ratio
    left, right = device_x(w, 0), device_x(w, w.columns * w.px)
    bg = QColor(*BACKGROUND)
    return np.array([x for x in range(int(round(left)), int(round(right)))
                     if image.pixelColor(x, int(y)) == bg])


def check_cells(qtbot, state, size) -> int:
    """Show ``state`` at ``size``; assert its cells cover the same whole device pixels each
    (with a gap each, evenly spaced, or none at 2 pixels or less). Returns the cell size."""
    w = shown_map(qtbot, state, size)
    step = device_x(w, w.px) - device_x(w, 0)                   # device pixels per block
    assert step == round(step) >= 2 and device_x(w, 0) == round(device_x(w, 0))
    rows = -(-NUM_BLOCKS // w.columns)
    gaps = gap_columns(w, rows - 2)                              # a full row of cells
    if painted_px(w.px) < w.px:
        assert len(gaps) == w.columns                            # one gap per cell, none lost
        assert set(np.diff(gaps).tolist()) == {round(step)}      # evenly spaced: no moiré
    else:
        assert len(gaps) == 0                                    # cells of 2 pixels: no gaps
    view = w.view.size()
    assert w.columns * step <= view.width() and rows * step <= view.height()   # all of it shown
    return w.px


@pytest.mark.slow
def test_every_cell_covers_the_same_whole_device_pixels(qtbot, state26k):
    sizes = [check_cells(qtbot, state26k, size) for size in ((600, 400), (700, 470), (900, 610), (1300, 900))]
    assert {painted_px(px) < px for px in sizes} == {True, False}      # cells with and without gaps
    assert sizes == sorted(sizes)                                      # a larger view: larger cells


def test_hover_names_the_exact_block_at_26k_blocks(qtbot, state26k):
    w = shown_map(qtbot, state26k)
    rng = np.random.default_rng(3)
    for block in [0, NUM_BLOCKS - 1, *rng.integers(0, NUM_BLOCKS, 4).tolist()]:
        assert hover(qtbot, w, viewport_point(w, block), block) == w.describe(block)


def test_a_resize_lays_the_cells_out_again(qtbot, state26k):
    w = shown_map(qtbot, state26k, (600, 400))
    small = w.px
    w.resize(1200, 800)
    QApplication.processEvents()
    assert w.px > small
    w.resize(600, 400)
    QApplication.processEvents()
    assert w.px == small


def test_cells_fit_in_whole_pixels():
    assert fitted_cell_px(200, 130, 596, 356) == 2           # 26k blocks: 2 px, not 2.7
    assert fitted_cell_px(10, 7, 596, 356) == 12             # few blocks: at most 12, scaled up
    assert fitted_cell_px(1000, 1000, 300, 200) == 1         # more blocks than pixels
    assert device_scale(400, 260, 596, 356) == 1.0
    assert device_scale(120, 84, 596, 356) == 4.0            # a whole number when scaled up
    assert device_scale(1000, 1000, 300, 200) == pytest.approx(0.2)   # only when it must shrink
    assert [painted_px(px) for px in (1, 2, 3, 4)] == [1, 2, 2, 3]


def test_cells_of_two_pixels_or_less_have_no_gap():
    pal = np.array([-1, 3, 3, 7], np.int16)
    fill = np.array([0, 16, 1, 8])
    one = render(pal, fill, 16, columns=2, px=1)
    assert one.shape == (2, 2) and packed(BACKGROUND) not in one      # every pixel a block
    assert one[0, 0] == packed(FREE) and len({int(v) for v in one.ravel()}) == 3
    two = render(pal, fill, 16, columns=2, px=2)
    assert two.shape == (4, 4) and packed(BACKGROUND) not in two
    three = render(pal, fill, 16, columns=2, px=3)
    assert (three[2::3] == packed(BACKGROUND)).all() and (three[:, 2::3] == packed(BACKGROUND)).all()


@pytest.mark.parametrize("block_size,inner", [(16, 2), (16, 1), (1, 3), (7, 11), (32, 5)])
def test_fill_rows_paints_any_token_and_only_a_full_block_whole(block_size, inner):
    """``fill_rows`` (worked out on the blocks with tokens only) against the rule written
    directly over every block: 0 tokens -> 0 rows; otherwise the rounded share of ``inner``
    rows, at least 1, at most ``inner - 1`` (or 1 for a one-row cell) until the block is full."""
    from ui.views.block_image import fill_rows
    rng = np.random.default_rng(block_size * 100 + inner)
    fill = np.concatenate([np.arange(block_size + 1), rng.integers(0, block_size + 1, 5000),
                           np.zeros(3000, np.int64)])
    expected = np.array([0 if f == 0 else inner if f >= block_size else
                         min(max(int(np.rint(f * inner / block_size)), 1), max(inner - 1, 1))
                         for f in fill.tolist()])
    got = fill_rows(fill, block_size, inner)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.int64 and len(got) == len(fill)
