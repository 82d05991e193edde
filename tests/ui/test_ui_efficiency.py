"""The metrics panel's roofline efficiency: one point per step, each the step's floor over its time,
from a recording whose provenance names a shape and peaks; the reason when it names none."""
from __future__ import annotations


import numpy as np
import pytest

from engine.run_info import RunInfo  # noqa: E402
from tests.support.engine_driver import SMALL_SEED, run_engine  # noqa: E402

from engine.sim.cost_model import CostModel, CostParams  # noqa: E402
from engine.sim.hardware import DevicePeaks  # noqa: E402
from engine.sim.model_shapes import ModelShape  # noqa: E402
from recordings.file.reader import Reader  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.metrics.roofline import roofline_info  # noqa: E402
from ui.views.metrics_plots import MetricsPlots  # noqa: E402
from ui.record_cache import step_span  # noqa: E402
from ui.step_summary import fetch_summaries  # noqa: E402

SHAPE = ModelShape("toy", 2, 64, 128, 4, 2, 16, 1000, bytes_per_param=4)
PEAKS = DevicePeaks("cpu", 2e10, 1e10, 1 << 30)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("eff")
    run_engine(d / "peaks.sqlite", seed=SMALL_SEED, run_info={"roofline": roofline_info(SHAPE, PEAKS)},
               keep_states=False)
    run_engine(d / "bare.sqlite", seed=SMALL_SEED, keep_states=False)
    return d / "peaks.sqlite", d / "bare.sqlite"


def show(qtbot, path, shown: int | None = None) -> tuple[MetricsPlots, Reader, int]:
    reader = open_reader(path)
    latest = reader.latest_step()
    shown = latest if shown is None else shown
    w = MetricsPlots(window=200)
    qtbot.addWidget(w)
    w.set_run_info(reader.run_info())
    w.set_records(fetch_summaries(reader, 0, latest + 1), shown, latest)
    return w, reader, shown


def test_one_point_per_step_each_the_floor_over_the_steps_time(qtbot, recordings):
    w, reader, shown = show(qtbot, recordings[0], shown=30)
    first, span = step_span(shown, reader.latest_step(), 200)
    records = [r for r in reader.records(0, shown + 1) if r.step > shown - span]
    floor = CostModel(SHAPE, PEAKS, CostParams(0.0, 0.0, 1.0, 1.0))
    want = [100 * floor.step_time(r.scheduled, len(r.new_tokens)) / max((r.end_ns - r.start_ns) * 1e-9, 1e-9)
            for r in records]
    x, y = w.curves["efficiency"].getData()
    assert len(x) == len(records) == 31                    # one point per step in view
    np.testing.assert_allclose(x * (span / 200), [r.step - shown for r in records])
    np.testing.assert_allclose(y, want, rtol=1e-9)
    assert max(want) > 0 and not w.efficiency_note.isVisible()
    assert "measured step time" in w.plots["efficiency"].titleLabel.text


def test_without_peaks_the_plot_says_why_instead_of_a_blank(qtbot, recordings):
    w, _reader, _shown = show(qtbot, recordings[1])
    x, _y = w.curves["efficiency"].getData()
    assert x is None or len(x) == 0
    assert w.efficiency_note.isVisible()
    note = w.efficiency_note.textItem.toPlainText()
    assert note.startswith("No roofline efficiency:") and "names no device peaks and model shape" in note
    assert "not shown" in w.plots["efficiency"].titleLabel.text
    assert "names no device peaks" in w.plots["efficiency"].toolTip()
    w.set_run_info(RunInfo(roofline=roofline_info(SHAPE, PEAKS)))   # a live run's info once the model loaded
    assert not w.efficiency_note.isVisible()


def test_a_simulated_run_is_labelled_as_such(qtbot):
    w = MetricsPlots()
    qtbot.addWidget(w)
    w.set_run_info(RunInfo(simulated=True, sim={"model": SHAPE.to_dict(), "device": PEAKS.to_dict()}))
    assert w.simulated and w.roofline.simulated
    assert "simulated" in w.plots["efficiency"].titleLabel.text


def test_the_window_hands_the_recordings_provenance_to_the_panel(qtbot, recordings):
    from ui import MainWindow

    reader = open_reader(recordings[0])
    win = MainWindow(reader, None)
    win.timer.stop()
    qtbot.addWidget(win)
    win.refresh(force=True)
    assert win.metrics.roofline.cost is not None and win.metrics.roofline.cost.shape == SHAPE
