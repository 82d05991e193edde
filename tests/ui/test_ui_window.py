"""The main window on the fake run: rendering, scrubbing, following, transport, selection,
errors and File > Open."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from engine.run_info import RunInfo
from tests.support.fakes import FakeControl, FakeSource, settle, show
from tests.support.screenshot import grab_window
from ui import MainWindow
from ui.style.colors import request_rgb
from ui.views.request_table import REASON_COLUMN
from ui.transport import SPEEDS


def distinct_colours(image, step: int = 4) -> set:
    return {image.pixel(x, y) for x in range(0, image.width(), step)
            for y in range(0, image.height(), step)}


def test_window_renders_a_full_picture(window, tmp_path):
    window.show_step(20)
    image = window.grab().toImage()
    assert image.width() >= 1200 and image.height() >= 800
    colours = distinct_colours(image)
    assert len(colours) > 50
    # every running request's colour is on screen (block map, slot timeline, table swatches)
    on_screen = {(c >> 16 & 255, c >> 8 & 255, c & 255) for c in colours}
    for r in window.state.running:
        assert request_rgb(r.request_id) in on_screen, r.request_id
    path = tmp_path / "shot.png"
    grab_window(str(path))
    assert path.stat().st_size > 20_000


def test_scrubbing_shows_exactly_state_at_k(window, source):
    for k in (0, 5, 12, 20, 33, 39):
        show(window, k)
        state = source.state_at(k)
        assert window.shown_step == k and not window.following
        assert window.state == state
        assert (window.block_map.owner_rows == state.owner_rows()).all()
        assert (window.block_map.fill == state.block_fill()).all()
        assert window.queues.row_counts() == {
            "running": len(state.running), "waiting": len(state.waiting),
            "swapped": len(state.queue("swapped")), "paused": len(state.paused),
            "finished": len(state.finished)}
        assert [r.step for r in window.records] == list(range(max(0, k - window.window), k + 1))
        assert window.transport.spin.value() == k and window.transport.slider.value() == k
    window.transport.slider.setValue(7)            # the scrubber itself
    assert window.state == source.state_at(7)
    window.transport.spin.setValue(9)
    assert window.state == source.state_at(9)


def test_following_live_shows_the_newest_step(window, source, control):
    assert window.following and window.shown_step == source.latest_step()
    source.advance(3)
    window.refresh()
    assert window.shown_step == source.latest_step() == 42
    assert window.state == source.state_at(42)
    window.show_step(10)
    source.advance(1)
    window.refresh()
    assert window.shown_step == 10                 # scrubbed: stays put
    window.transport.live_btn.click()
    assert window.following and window.shown_step == source.latest_step()


def test_step_button_steps_the_engine_exactly_once(window, control, qtbot):
    t = window.transport
    assert not t.step_btn.isEnabled()             # running: single step makes no sense
    qtbot.mouseClick(t.pause_btn, Qt.LeftButton)
    assert control.names() == ["pause"] and t.step_btn.isEnabled()
    latest = window.source.latest_step()
    qtbot.mouseClick(t.step_btn, Qt.LeftButton)
    assert control.names().count("step_once") == 1
    window.refresh()
    assert window.shown_step == latest + 1
    qtbot.mouseClick(t.pause_btn, Qt.LeftButton)
    assert control.names() == ["pause", "step_once", "resume"]


def test_keyboard_actions(window, control):
    window.actions["pause"].trigger()              # Space
    window.actions["step"].trigger()               # S / Right
    assert control.names() == ["pause", "step_once"]
    window.show_step(15)
    window.actions["back"].trigger()               # Left
    assert window.shown_step == 14
    assert window.actions["pause"].shortcut().toString() == "Space"
    assert window.actions["inject"].shortcut().toString() == "Ctrl+I"


def test_selecting_a_table_row_selects_everywhere(window, source, qtbot):
    window.show_step(20)
    view = window.queues.views["running"]
    index = view.model().index(0, 0)
    rid = index.data(Qt.UserRole)
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.visualRect(index).center())
    assert window.selected == rid
    assert window.block_map.selected == window.timeline.selected == rid
    assert rid in window.inspector.header.text()
    text = source.request_text(rid, 20)
    assert text and window.inspector.text.toPlainText() == text
    window.show_step(25)                           # the text streams with the shown step
    assert window.inspector.text.toPlainText() == source.request_text(rid, 25) != text


def test_clicking_a_slot_cell_selects_its_request(window, qtbot):
    window.show_step(20)
    tl = window.timeline
    vb = tl.plot.getPlotItem().getViewBox()
    from PySide6.QtCore import QPointF
    pos = tl.plot.mapFromScene(vb.mapViewToScene(QPointF(10, 2)))
    qtbot.mouseClick(tl.plot.viewport(), Qt.LeftButton, pos=pos)
    assert window.selected == tl.entry_at(10, 2).request_id == "req-2"


def test_inspector_buttons_act_on_the_selected_request(window, control):
    window.show_step(20)
    window.select_request("req-2")
    insp = window.inspector
    assert insp.actions_row.isVisible()
    assert not insp.buttons["resume"].isEnabled()
    insp.buttons["pause"].click()
    insp.buttons["abort"].click()
    assert control.calls == [("pause_request", "req-2"), ("abort_request", "req-2")]


def test_errors_show_in_the_window(qtbot):
    source = FakeSource(fail_steps=(10,))
    control = FakeControl(source)
    w = MainWindow(source, control)
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    w.show_step(5)
    assert not w.banner.isVisible()
    w.show_step(15)
    assert w.banner.isVisible() and "step 10" in w.banner.label.text()
    assert "injected failure at step 10" in w.banner.label.text()
    control.error = "engine thread died: ValueError: boom"
    w.refresh()
    assert "boom" in w.banner.label.text()
    w.banner.dismiss()
    w.refresh()
    assert not w.banner.isVisible()


def test_file_open_error_is_shown_in_a_message_box(window, monkeypatch, source):
    shown = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: ("/nope/run.sqlite", "")))
    monkeypatch.setattr(QMessageBox, "critical", staticmethod(lambda *a: shown.append(a)))

    def broken(path):
        raise FileNotFoundError(f"no such recording: {path}")

    window.open_recording = broken
    window.actions["open"].setEnabled(True)
    window.actions["open"].trigger()
    assert len(shown) == 1 and "no such recording: /nope/run.sqlite" in shown[0][2]
    assert window.source is source                 # nothing swapped


def test_file_open_swaps_to_a_replay(window, monkeypatch, qtbot):
    replay = FakeSource(num_steps=30)
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: ("/runs/a.sqlite", "")))
    window.open_recording = lambda path: replay
    with qtbot.waitSignal(window.sourceChanged):
        window.open_recording_dialog()
    assert window.source is replay and window.control is None
    t = window.transport
    assert not t.pause_btn.isVisibleTo(window) and t.play_btn.isVisibleTo(window)
    assert not window.actions["inject"].isEnabled()
    assert not window.inspector.actions_row.isVisibleTo(window)
    assert window.shown_step == 29 and "REPLAY" in window.status["mode"].text()
    window.actions["step"].trigger()               # replay: Right shows the next step
    window.show_step(3)
    window.actions["step"].trigger()
    assert window.shown_step == 4


def test_replay_play_advances_through_the_recording(window, qtbot):
    replay = FakeSource(num_steps=12)
    window.set_source(replay)
    t = window.transport
    t.speed.setCurrentIndex(len(SPEEDS) - 1)
    t.play_btn.click()                             # at the end: plays from step 0
    assert window.shown_step == 0
    qtbot.waitUntil(lambda: window.shown_step == 11, timeout=5000)
    qtbot.waitUntil(lambda: not t.play_btn.isChecked(), timeout=2000)


def test_waiting_requests_say_why_they_were_not_admitted(window, source):
    window.show_step(10)                           # req-4 waits: all four slots are busy
    model = window.queues.models["waiting"]
    row = model.row_of("req-4")
    assert model.data(model.index(row, REASON_COLUMN)) == "batch slots full"
    window.select_request("req-4")
    assert window.inspector.values["reason"].text() == "batch slots full"
    window.show_step(38)
    window.select_request("req-0")
    assert window.inspector.values["reason"].text() == "finished: length"


class LateSource(FakeSource):
    """Like a live engine's source: no steps and no run info while the model loads; its newest
    state changes between steps (a request added while the engine is paused)."""

    def __init__(self):
        super().__init__(num_steps=0)
        self.loaded = False

    def run_info(self):
        return super().run_info() if self.loaded else RunInfo()


def test_live_source_that_loads_late_and_changes_between_steps(qtbot):
    source = LateSource()
    w = MainWindow(source, FakeControl(source))
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    assert w.shown_step == w.state.step == -1 and not w.banner.isVisible()
    assert w.status["run"].text() == ""
    source.loaded = True
    source.advance(3)
    w.refresh()
    assert w.shown_step == 2 and "fake/SmolLM2-135M" in w.status["run"].text()
    assert "fake/SmolLM2-135M" in w.windowTitle()
    rid = source.add(10, 5)                        # between steps, as the inject dialog does
    w.refresh()                                    # no new step, yet the new request shows
    settle(w)                                      # its table a frame later while frames stream
    assert w.shown_step == 2 and w.queues.models["waiting"].row_of(rid) is not None


def test_live_button_only_live_and_loading_before_the_first_step(qtbot):
    from tests.support.fakes import shown_window
    source = FakeSource(0)                        # a live engine that has not stepped yet
    w = shown_window(qtbot, source, FakeControl(source))
    assert w.status["step"].text() == "loading…" and "-1" not in w.status["step"].text()
    assert w.transport.spin.text() == "loading…" and w.transport.latest_label.text() == "of –"
    assert w.transport.live_btn.isVisible()
    source.advance(2)
    w.refresh()
    assert w.status["step"].text() == "step 1 of 1" and w.transport.spin.text() == "step 1"
    w.set_source(FakeSource(4), control=None)     # a replay: nothing newer to follow
    assert w.transport.live_btn.isHidden() and w.transport.play_btn.isVisible()
    assert w.transport.spin.text() == "step 3"


def test_a_live_engine_that_failed_to_start_says_so_where_the_step_goes(qtbot):
    """Not "loading…" for ever: once the control reports it failed to start (its error is in
    the banner), the status bar and the step box say so."""
    from tests.support.fakes import shown_window
    source = FakeSource(0)
    control = FakeControl(source)
    w = shown_window(qtbot, source, control)
    assert w.status["step"].text() == "loading…"
    control.status = lambda: "failed to start"
    w.refresh()
    assert w.status["step"].text() == "failed to start" and w.transport.spin.text() == "failed to start"
