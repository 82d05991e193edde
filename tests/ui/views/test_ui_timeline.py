"""Slot timeline and metrics: what they draw is what the step records say."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtWidgets import QWidget

from ui.style.colors import FREE, IDLE, PALETTE, packed, request_qcolor, request_rgb, unpack
from ui.views.metrics_plots import MetricsPlots, nice_ceiling
from ui.record_cache import step_span
from ui.request_menu import request_menu
from ui.views.slot_timeline import SCROLL_ROW_PX, SlotTimeline, decode_rgb, prefill_rgb


def shown_widget(qtbot, w: QWidget, width: int, height: int) -> QWidget:
    """``w`` at ``width`` x ``height``, shown and exposed."""
    qtbot.addWidget(w)
    w.resize(width, height)
    w.show()
    qtbot.waitExposed(w)
    return w


def rgb(img, y, x):
    return tuple(int(v) for v in unpack(img[y, x]))


def test_request_colours_are_stable_and_distinct():
    assert request_rgb("req-3") == request_rgb("req-3") == PALETTE[3]
    assert len({request_rgb(f"req-{i}") for i in range(len(PALETTE))}) == len(PALETTE)
    assert request_rgb("a-uuid-like-id") == request_rgb("a-uuid-like-id")
    assert FREE not in PALETTE and IDLE not in PALETTE
    assert request_qcolor("req-1").getRgb()[:3] == PALETTE[1]
    assert rgb(packed(np.array([[(1, 2, 3)]])), 0, 0) == (1, 2, 3)


def check_cells(w: SlotTimeline, records, shown: int) -> None:
    """Every (slot, step) cell of the window: the request's decode colour on the solid rows,
    its prefill colour on the striped rows of a prefill chunk (on the one row of a cell with
    ``row_px`` 1), idle elsewhere."""
    scheduled = {(r.step, e.slot): e for r in records for e in r.scheduled}
    for step in range(w.first_step, w.first_step + w.span):
        for slot in range(w.max_num_seqs):
            y, x = w.pixel_of(slot, step)
            e = scheduled.get((step, slot)) if step <= shown else None
            stripe = rgb(w.image, y, x)
            if w.row_px == 1:
                assert stripe == (IDLE if e is None else prefill_rgb(e.request_id) if e.is_prefill
                                  else decode_rgb(e.request_id)), (step, slot)
                continue
            solid = rgb(w.image, y + 1, x)
            if e is None:
                assert stripe == solid == IDLE, (step, slot)
            else:
                assert solid == decode_rgb(e.request_id), (step, slot)
                assert stripe == (prefill_rgb(e.request_id) if e.is_prefill
                                  else decode_rgb(e.request_id)), (step, slot)


def test_cells_are_the_records(qtbot, source):
    w = SlotTimeline(window=200)
    qtbot.addWidget(w)
    k = 25
    records = source.records(k - 200, k + 1)
    w.set_records(records, k, 4, source.latest_step())
    assert (w.first_step, w.span) == (0, 50) and w.image.shape == (4 * w.row_px, 50)
    assert any(e.is_prefill for r in records for e in r.scheduled)
    assert any(not e.is_prefill for r in records for e in r.scheduled)
    check_cells(w, records, k)
    first = records[0].scheduled[0]
    assert "prefill" in w.describe(0, first.slot) and first.request_id in w.describe(0, first.slot)
    assert w.entry_at(0, first.slot) == first


def test_cells_at_production_scale(qtbot, big):
    w = SlotTimeline(window=200)
    qtbot.addWidget(w)
    k = big.latest_step()
    records = big.records(k - 200, k + 1)
    w.set_records(records, k, 256, k)
    assert w.scrolling and w.row_px == SCROLL_ROW_PX                # 256 busy rows: they scroll
    assert w.image.shape == (256 * SCROLL_ROW_PX, w.span)
    check_cells(w, records, k)
    w.set_fit_rows(True)                                            # every row in view: hairlines
    assert not w.scrolling and w.row_px == 1 and w.image.shape == (256, w.span)
    check_cells(w, records, k)


def test_drawing_step_by_step_equals_drawing_at_once(qtbot, source):
    """The timeline redraws only the columns whose step changed (and pages its grid): after any
    walk, forward, back, across pages, its grid and image are those of a fresh timeline."""
    w = SlotTimeline(window=16)
    qtbot.addWidget(w)
    latest = source.latest_step()
    for k in [*range(0, 40), *range(39, 20, -1), 5, 33, 34, 12, 39]:
        records = source.records(k - 16, k + 1)
        w.set_records(records, k, 4, latest)
        fresh = SlotTimeline(window=16)
        qtbot.addWidget(fresh)
        fresh.set_records(records, k, 4, latest)
        assert (w.first_step, w.span) == (fresh.first_step, fresh.span), k
        np.testing.assert_array_equal(w.image, fresh.image, err_msg=str(k))
        check_cells(w, records, k)
    w.set_selected("req-2")
    fresh.set_selected("req-2")
    np.testing.assert_array_equal(w.image, fresh.image)


def test_selection_fades_other_requests(qtbot, source):
    w = SlotTimeline()
    qtbot.addWidget(w)
    w.set_records(source.records(0, 21), 20, 4)
    e = source.records(10, 11)[0].scheduled
    sel, other = e[0], e[1]
    w.set_selected(sel.request_id)
    y, x = w.pixel_of(sel.slot, 10)
    assert rgb(w.image, y + 1, x) == decode_rgb(sel.request_id)
    y, x = w.pixel_of(other.slot, 10)
    assert rgb(w.image, y + 1, x) != decode_rgb(other.request_id)


def test_window_pages_a_quarter_at_a_time():
    assert step_span(10, 20, 200) == (0, 50)                 # short run: the whole run
    assert step_span(60, 60, 200) == (0, 100)                 # ... in quarter-window grains
    assert step_span(150, 150, 200) == (0, 200)
    assert step_span(3, 5, 32) == (0, 32)                     # at least 32 steps
    spans = {step_span(k, 5000, 200) for k in range(1000, 1050)}
    assert spans == {(850, 200)}                              # one axis for 50 steps
    for k in range(200, 2000, 7):
        x0, w = step_span(k, 5000, 200)
        assert x0 + 150 <= k < x0 + 200                       # shown step in the last quarter


def test_metrics_plot_the_records(qtbot, source):
    w = MetricsPlots()
    qtbot.addWidget(w)
    recs = source.records(0, 31)
    w.set_records(recs, 30, 39)
    m = w.metrics
    np.testing.assert_array_equal(m["step"], [r.step for r in recs])
    np.testing.assert_array_equal(m["new"], [len(r.new_tokens) for r in recs])
    np.testing.assert_array_equal(m["scheduled"], [len(r.scheduled) for r in recs])
    np.testing.assert_array_equal(m["tokens"], [sum(e.num_tokens for e in r.scheduled) for r in recs])
    np.testing.assert_allclose(m["kv"], [100 * r.kv_cache_usage for r in recs])
    np.testing.assert_allclose(m["recorder_wait_ms"], [r.recorder_wait_ns / 1e6 for r in recs])
    x, y = w.curves["recorder_wait_ms"].getData()
    np.testing.assert_allclose(y, m["recorder_wait_ms"])
    assert "Recorder wait" in w.plots["recorder"].titleLabel.text
    assert [nice_ceiling(v) for v in (0.3, 1, 1.2, 3, 7, 24, 260)] == [1, 1, 2, 5, 10, 25, 500]


def test_metrics_fill_the_plot_and_label_steps_while_the_run_is_short(qtbot, source):
    """While the run is shorter than the window the curves span the plots' width, and the step
    axis still reads steps before the shown step, whatever the span."""
    w = shown_widget(qtbot, MetricsPlots(window=200), 560, 400)
    recs = source.records(0, 40)
    for shown in (20, 39):
        _first, span = step_span(shown, shown, 200)
        w.set_records(recs, shown, shown)
        axis = w.plots["time"].getAxis("bottom")
        (left, right), _ = w.plots["time"].viewRange()
        x, _y = w.curves["step_ms"].getData()
        steps_back = x * axis.scale
        np.testing.assert_allclose(steps_back, [r.step - shown for r in recs if r.step <= shown])
        assert left * axis.scale == pytest.approx(-span, abs=1) and right * axis.scale < 1
        levels = axis.tickValues(left, right, 300)          # as the axis draws them
        labels = {t for spacing, values in levels for t in axis.tickStrings(values, axis.scale, spacing)}
        assert labels >= {"0", "-10", "-20"}
        assert all(left <= v <= right for _spacing, values in levels for v in values)


def test_request_menu_offers_what_the_status_allows(qtbot, source, control):
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


def test_a_page_relabels_the_step_axis_and_hover_follows(qtbot, source):
    """After the window pages, the view is in window columns: the axis still reads the steps
    (ticks on round steps inside the window), the marker sits on the shown step's column, and a
    point of the view is the cell of the step under it."""
    w = shown_widget(qtbot, SlotTimeline(window=16), 600, 300)
    records = source.records(0, 40)
    for shown in (10, 33):
        w.set_records(records, shown, 4, 39)
        x0, span = w.first_step, w.span
        assert (x0, span) == step_span(shown, 39, 16)
        (left, right), _ = w.plot.getPlotItem().viewRange()
        assert (left, right) == (-0.5, span - 0.5)
        axis = w.step_axis
        levels = axis.tickValues(left, right, 500)
        spacing, values = levels[0]
        steps = [v + x0 for v in values]
        assert steps and all(x0 - 0.5 <= s <= x0 + span - 0.5 for s in steps)
        assert all(s % spacing == 0 for s in steps)            # round steps, whatever the page
        assert axis.tickStrings(values, 1, spacing) == [str(int(s)) for s in steps]
        assert w.marker.value() == shown - x0
        e = records[shown].scheduled[0]
        assert w.cell_at(shown - x0, e.slot) == (shown, e.slot)
        assert w.entry_at(*w.cell_at(shown - x0, e.slot)) == e
    assert x0 > 0                                                # it paged


def test_metrics_curves_are_bounded_by_their_view(qtbot, source):
    """A curve's bounding rectangle is its view's visible one (not recomputed from its data each
    frame), follows the y range when it grows, and holds every point in view."""
    w = shown_widget(qtbot, MetricsPlots(window=200), 560, 400)
    recs = source.records(0, 40)
    for shown in (5, 20, 39):
        w.set_records(recs, shown, shown)
        for key, plot in w.plots.items():
            view = plot.getViewBox().viewRect()
            for name, curve in w.curves.items():
                if curve.getViewBox() is not plot.getViewBox():
                    continue
                assert curve.boundingRect() == view, (shown, key, name)
                x, y = curve.getData()
                assert all(view.contains(a, b) for a, b in zip(x, y)), (shown, key, name)
