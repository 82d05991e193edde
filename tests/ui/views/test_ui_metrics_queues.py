"""The Queues plot: a curve per queue (waiting, running, swapped, paused), each named in the
title's legend. No step column holds the swapped queue: its curve is worked out from the recorded
counts and must equal the swapped queue of the state after every step, live and replayed."""
from __future__ import annotations

import numpy as np

from tests.support.fakes import FakeControl, FakeSource, show, shown_window, swap_source
from recordings.file.open_reader import open_reader
from ui import MainWindow
from ui.views.metrics_plots import PLOTS, MetricsPlots

QUEUES = ("waiting", "running", "swapped", "paused")


def _swapped_truth(source, steps) -> list[int]:
    return [len(source.state_at(int(s)).queue_rows("swapped")) for s in steps]


def _check_window(w, source) -> int:
    """Show every step; assert each queue curve against the states. Returns the most swapped."""
    most = 0
    for k in range(source.latest_step() + 1):
        show(w, k)
        m = w.metrics.metrics
        steps = m["step"]
        assert steps[-1] == k
        truth = _swapped_truth(source, steps)
        np.testing.assert_array_equal(m["swapped"], truth)
        _x, y = w.metrics.curves["swapped"].getData()
        np.testing.assert_array_equal(y, truth)
        for name in ("waiting", "running", "paused"):
            np.testing.assert_array_equal(
                m[name], [len(source.state_at(int(s)).queue_rows(name)) for s in steps])
        most = max(most, max(truth))
    return most


def test_every_queue_has_a_curve_and_a_legend_entry(qtbot):
    w = shown_window(qtbot, FakeSource())
    (series,) = [s for key, *_rest, s in PLOTS if key == "queues"]
    assert tuple(name for name, _c in series) == QUEUES
    colors = [c for _n, c in series]
    assert len(set(colors)) == len(colors)                          # told apart
    plot = w.metrics.plots["queues"]
    title = plot.titleLabel.text
    for name in QUEUES:
        assert w.metrics.curves[name] in plot.listDataItems()
        assert name in title


def test_the_swapped_curve_follows_the_swapped_queue_live(qtbot):
    source = swap_source()
    w = shown_window(qtbot, source)
    assert _check_window(w, source) >= 1                            # the run swaps out


def test_the_swapped_curve_follows_the_swapped_queue_in_a_replay(qtbot, tmp_path):
    path = tmp_path / "swap.sqlite"
    source = swap_source(record_to=path)
    source.close()
    reader = open_reader(path)
    try:
        w = MainWindow(reader, None)
        w.timer.stop()
        qtbot.addWidget(w)
        w.show()
        assert _check_window(w, source) >= 1
    finally:
        reader.close()


def test_without_the_swapped_count_there_is_no_swapped_curve(qtbot):
    source = swap_source()
    w = MetricsPlots()
    qtbot.addWidget(w)
    w.set_records(source.records(0, 31), 30, 60)
    assert len(w.metrics["swapped"]) == 0 and len(w.curves["swapped"].getData()[1]) == 0
    w.set_records(source.records(0, 31), 30, 60, num_swapped=len(source.state_at(30).queue_rows("swapped")))
    np.testing.assert_array_equal(w.metrics["swapped"], _swapped_truth(source, w.metrics["step"]))


def test_a_request_injected_since_the_last_step_is_not_counted_as_swapped(qtbot):
    source = swap_source(25)
    state = source.state_at(source.latest_step())
    swapped = len(state.queue_rows("swapped"))
    assert swapped >= 1                                          # the newest step has swapped out
    w = shown_window(qtbot, source, FakeControl(source))
    w.refresh(force=True)
    FakeControl(source).add_request("one more request", 4)      # waiting, in no step yet
    w.refresh()
    assert len(w.state.request_ids) == len(state.request_ids) + 1
    assert w.metrics.metrics["swapped"][-1] == swapped
    np.testing.assert_array_equal(w.metrics.metrics["swapped"], _swapped_truth(source, w.metrics.metrics["step"]))
