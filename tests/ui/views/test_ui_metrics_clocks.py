"""The metrics panel keeps wall time and simulated time apart: step time is on the run's clock
(labelled simulated in a simulated run), the engine's wait for the recorder, always wall time,
has a plot and axis of its own."""
from __future__ import annotations

import numpy as np

from engine.run_info import RunInfo
from ui.views.metrics_plots import MetricsPlots


def _plot_of(w: MetricsPlots, curve_name: str) -> str:
    curve = w.curves[curve_name]
    return next(key for key, plot in w.plots.items() if curve in plot.listDataItems())


def test_recorder_wait_and_step_time_do_not_share_an_axis(qtbot, source):
    w = MetricsPlots()
    qtbot.addWidget(w)
    recs = source.records(0, 31)
    w.set_records(recs, 30, 39)
    assert _plot_of(w, "step_ms") == "time" and _plot_of(w, "recorder_wait_ms") == "recorder"
    assert w.plots["recorder"].getAxis("left") is not w.plots["time"].getAxis("left")
    _x, y = w.curves["recorder_wait_ms"].getData()
    np.testing.assert_allclose(y, [r.recorder_wait_ns / 1e6 for r in recs])
    assert "wall" in w.plots["recorder"].getAxis("left").labelText
    assert "wall" in w.plots["time"].getAxis("left").labelText     # a wall-clock run: both wall


def test_a_simulated_run_labels_step_time_simulated_and_the_recorder_wait_wall(qtbot, source):
    w = MetricsPlots()
    qtbot.addWidget(w)
    w.set_run_info(RunInfo(simulated=True))
    w.set_records(source.records(0, 31), 30, 39)
    assert "simulated" in w.plots["time"].titleLabel.text
    assert "sim" in w.plots["time"].getAxis("left").labelText
    assert "simulated" not in w.plots["recorder"].titleLabel.text
    assert "wall" in w.plots["recorder"].titleLabel.text and "wall" in w.plots["recorder"].getAxis("left").labelText
    w.set_run_info(RunInfo())                                                    # another run: wall again
    assert "simulated" not in w.plots["time"].titleLabel.text
    assert "wall" in w.plots["time"].getAxis("left").labelText
