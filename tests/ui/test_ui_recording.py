"""End to end: the engine run of the fake source recorded by recordings.file.writer.RecordingWriter (as the
engine's recorder), replayed in the window through recordings.file.reader.Reader, shows the same states as
the live run; the jump box finds requests through the Reader's request_info."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.fakes import FakeSource
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader
from ui import MainWindow
from ui.views.metrics_plots import TPS_WINDOW


@pytest.fixture
def replay(qtbot, tmp_path):
    path = tmp_path / "fake.sqlite"
    source = FakeSource(record_to=path)
    source.close()
    reader = open_reader(path)
    w = MainWindow(reader, None, open_recording=Reader)
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w, source
    w.close()
    reader.close()


def test_replay_of_a_recording_matches_the_live_run(replay):
    replay, source = replay
    assert replay.shown_step == source.latest_step()
    for k in (3, 17, 20, 38):
        replay.show_step(k)
        assert replay.state == source.states[k + 1]
        assert [r.step for r in replay.records] == [r.step for r in source.records(k - replay.window, k + 1)]
        assert [r.scheduled for r in replay.records] == [r.scheduled for r in source.records(k - replay.window, k + 1)]
        replay.select_request("req-2")
        assert replay.inspector.text.toPlainText() == source.request_text("req-2", k)
    image = replay.grab().toImage()
    colours = {image.pixel(x, y) for x in range(0, image.width(), 4)
               for y in range(0, image.height(), 4)}
    assert len(colours) > 50
    assert not replay.banner.isVisible()


def test_jump_to_a_finished_request_in_a_recording(replay):
    replay, source = replay
    assert replay.jump_to("req-1")                 # finished long before the last step
    assert replay.shown_step == 0 and replay.selected == "req-1"
    replay.jump_to("t=9")
    assert replay.shown_step == 9


def test_a_simulated_recording_says_so(qtbot, tmp_path):
    """A recording made by the simulated executor is marked in the status bar and the title."""
    from app.cli import main
    from recordings.workloads.workload import DEMO_TRACE

    path = tmp_path / "sim.sqlite"
    assert main(["run", "--trace", str(DEMO_TRACE), "--limit", "6", "--executor", "sim", "--sim-model",
                 "llama-3.2-1b", "--sim-device", "h200", "--num-gpu-blocks", "64", "--record", str(path)]) == 0
    reader = open_reader(path)
    w = MainWindow(reader, None, open_recording=Reader)
    w.timer.stop()
    qtbot.addWidget(w)
    w.refresh(force=True)
    assert "SIMULATED" in w.status["mode"].text() and "sim:h200" in w.status["mode"].toolTip()
    assert "simulated replay" in w.windowTitle()
    assert w.time_unit == "sim s"
    assert w.inspector.text.placeholderText() == "a simulated run has no text: its sampled tokens are synthetic ids"
    # tokens/s and step times in simulated seconds (token_time - clock), not the wall time the
    # simulation took
    recs = reader.records(0, reader.latest_step() + 1)
    w.show_step(recs[-1].step)
    w.refresh(force=True)
    shown = [r for r in recs if r.step <= w.shown_step][-len(w.metrics.metrics["new"]):]
    new = np.array([len(r.new_tokens) for r in shown], float)
    sec = np.array([r.token_time - r.clock for r in shown])
    assert len(shown) > 3 and new.max() > 0
    # output tok/s: tokens over simulated time of the TPS_WINDOW steps up to each step
    want = [new[max(0, i + 1 - TPS_WINDOW):i + 1].sum() / sec[max(0, i + 1 - TPS_WINDOW):i + 1].sum()
            for i in range(len(shown))]
    assert np.allclose(w.metrics.metrics["output"], want)
    assert w.status["tps"].text() == f"{want[-1]:,.0f} output tok/s ({TPS_WINDOW}-step mean)"
    w.close()
    reader.close()


def test_a_jump_outside_the_recording_says_what_it_shows(replay):
    replay, source = replay
    last = source.latest_step()
    assert replay.jump_to("999999999") and replay.shown_step == last
    assert replay.statusBar().currentMessage() == (f"step 999,999,999 is outside this run (steps 0–{last:,} so far): "
                                                   f"showing step {last:,}")
    assert not replay.jump_to("no-such-request")
    assert replay.statusBar().currentMessage() == "no request 'no-such-request' in this recording"
