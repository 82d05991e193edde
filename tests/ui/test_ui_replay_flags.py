"""``batchscope replay --at / --speed / --play`` (app.commands.window.start_replay) on a real recording."""
from __future__ import annotations

import argparse

import pytest

from app.cli import REPLAY_SPEEDS, build_parser
from app.commands.window import start_replay
from ui.transport import SPEEDS


@pytest.fixture
def window(replay_window):
    return replay_window


def test_every_speed_flag_is_a_window_speed():
    assert [s for s in REPLAY_SPEEDS if s != "every"] == [str(s) for s in SPEEDS if s != "max"]
    args = build_parser().parse_args(["replay", "r.sqlite", "--at", "t=3", "--speed", "every", "--play"])
    assert (args.at, args.speed, args.play) == ("t=3", "every", True)


def test_at_and_speed_open_the_window_there(window):
    assert start_replay(window, argparse.Namespace(at="7", speed="every", play=False))
    assert window.shown_step == 7 and window.transport.speed.currentText() == "every step"
    assert not window.transport.play_btn.isChecked()


def test_at_a_request_selects_it(window):
    assert start_replay(window, argparse.Namespace(at="req-2", speed="300", play=False))
    assert window.selected == "req-2" and window.transport.speed.currentText() == "300 steps/s"


def test_play_starts_playing(window):
    assert start_replay(window, argparse.Namespace(at="0", speed="30", play=True))
    assert window.transport.play_btn.isChecked()


def test_an_unknown_place_is_refused(window, capsys):
    assert not start_replay(window, argparse.Namespace(at="no-such", speed="10", play=False))
    assert "--at no-such: no request 'no-such' in this recording" in capsys.readouterr().err
