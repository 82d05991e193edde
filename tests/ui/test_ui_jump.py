"""Scale features: the "jump to" box (step, engine time, request id) and replay speeds."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.support.fakes import FakeSource
from ui import MainWindow
from ui.jump import Jump, parse_jump, step_at_time
from ui.transport import SPEEDS


@pytest.mark.parametrize("text, jump", [
    ("123", Jump("step", 123)), (" step 12 ", Jump("step", 12)), ("#7", Jump("step", 7)),
    ("t=12.5", Jump("time", 12.5)), ("t 3", Jump("time", 3.0)), ("@0.25s", Jump("time", 0.25)),
    ("T=1e3", Jump("time", 1000.0)), ("req-5", Jump("request", "req-5")),
    ("r0055", Jump("request", "r0055")), ("id=42", Jump("request", "42")),
    ("req 42", Jump("request", "42")), ("t1", Jump("request", "t1")),
])
def test_parse_the_three_forms(text, jump):
    assert parse_jump(text) == jump


def test_an_empty_box_is_an_error():
    with pytest.raises(ValueError, match="step number"):
        parse_jump("   ")


def test_time_finds_the_step_running_then(source):
    # virtual clock: step k starts at time k
    assert [step_at_time(source, t) for t in (-1, 0, 0.5, 12, 12.9, 39, 1e9)] == [0, 0, 0, 12, 12, 39, 39]


def jump(window: MainWindow, text: str) -> bool:
    window.transport.jump.setText(text)
    ok = []
    window.transport.jumpRequested.connect(lambda _t: ok.append(window.transport.jump.styleSheet() == ""))
    window.transport.jump.returnPressed.emit()
    return ok[-1]


def test_jump_box_moves_the_shown_step(window, source):
    assert jump(window, "12") and window.shown_step == 12 and not window.following
    assert window.state == source.state_at(12)
    assert jump(window, "t=20.5") and window.shown_step == 20
    arrival = source.state_at(39).view("req-5").arrival_step
    assert jump(window, "req-5") and window.shown_step == arrival == 11
    assert window.selected == "req-5" and window.block_map.selected == "req-5"
    assert jump(window, "999") and window.shown_step == source.latest_step()   # clamped
    assert not jump(window, "nope-7")                                           # unknown id
    assert window.shown_step == source.latest_step()
    assert "no request 'nope-7'" in window.transport.jump.toolTip()
    window.transport.jump.textEdited.emit("x")
    assert window.transport.jump.styleSheet() == ""


@dataclass(frozen=True)
class Info:
    arrival_step: int


class RecordingLike(FakeSource):
    """A source that knows every request's arrival, as ``recordings.file.reader.Reader.request_info``."""

    def request_info(self, request_id):
        return Info(3) if request_id == "gone-1" else None


def test_jump_asks_the_source_for_requests_it_no_longer_holds(qtbot):
    src = RecordingLike(num_steps=20)
    w = MainWindow(src, None)
    w.timer.stop()
    qtbot.addWidget(w)
    assert w.jump_to("gone-1") and w.shown_step == 3
    assert w.jump_to("req-0") and w.shown_step == 0         # not in request_info: the states


def test_ctrl_g_focuses_the_jump_box(window):
    window.actions["jump"].trigger()
    assert window.transport.jump.hasFocus() or window.focusWidget() is window.transport.jump


def play(qtbot, window: MainWindow, num_steps: int, speed) -> list[int]:
    """Replay a ``num_steps`` run from step 0 at ``speed`` to the end; the steps it showed."""
    window.set_source(FakeSource(num_steps=num_steps))
    t = window.transport
    shown: list[int] = []
    t.seekRequested.connect(shown.append)
    t.speed.setCurrentIndex(SPEEDS.index(speed))
    t.play_btn.click()                             # at the end: plays from step 0
    qtbot.waitUntil(lambda: not t.play_btn.isChecked(), timeout=10_000)
    assert window.shown_step == num_steps - 1
    return shown


def test_replay_at_max_speed_shows_every_step(qtbot, window):
    assert play(qtbot, window, 30, "max") == list(range(0, 30))
    assert window.transport.steps_per_second() is None


def test_replay_faster_than_frames_skips_steps_on_the_clock(qtbot, window):
    shown = play(qtbot, window, 40, 300)
    assert shown[0] == 0 and shown[-1] == 39
    assert len(shown) < 40 and shown == sorted(shown)     # ~10 steps a frame, in order
    window.transport.speed.setCurrentIndex(SPEEDS.index(10))
    assert window.transport.timer.interval() == 100


def test_speed_box_offers_max_and_steps_per_second(window):
    items = [window.transport.speed.itemText(i) for i in range(window.transport.speed.count())]
    assert items[-1] == "every step" and "1,000 steps/s" in items and "10 steps/s" in items
    assert window.transport.speed.currentText() == "10 steps/s"
    assert window.transport.jump.placeholderText().startswith("jump")


@pytest.mark.parametrize("text", ["t=abc", "t=", "@x", "T: soon"])
def test_a_time_that_is_no_number_says_so(text):
    with pytest.raises(ValueError, match="t= needs a number"):
        parse_jump(text)
