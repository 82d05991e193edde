"""``compare`` of wall-clock runs says when the host's speed changed between them (app.host_speed)."""
from __future__ import annotations

import pytest

import itertools

from app.host_speed import CHANGE_RATIO, host_speed_ms, speed_change_note


def test_a_steady_host_says_nothing_and_a_slowed_one_says_by_how_much():
    assert speed_change_note([]) is None
    assert speed_change_note([("static", 10.0, 10.4), ("fcfs", 10.2, 11.0)]) is None
    note = speed_change_note([("static", 10.0, 10.4), ("fcfs", 10.2, 31.0)])
    assert note and "10.0 ms before static and 31.0 ms after fcfs (3.1x slower" in note
    assert "--clock virtual" in note and "--executor sim" in note
    assert speed_change_note([("a", 10.0, 10.0), ("b", 10.0 * CHANGE_RATIO, 10.0)]) is not None


def test_the_check_measures_something():
    assert 0 < host_speed_ms() < 10_000


@pytest.mark.slow
def test_compare_on_the_wall_clock_checks_the_host_around_each_run(tiny_model, tmp_path, capsys, monkeypatch):
    from app.cli import main
    import app.host_speed

    speeds = itertools.chain([10.0, 10.2, 10.1, 35.0], itertools.repeat(10.0))
    monkeypatch.setattr(app.host_speed, "host_speed_ms", lambda: next(speeds))
    out = tmp_path / "out"
    assert main(["compare", "--model", str(tiny_model), "--limit", "4", "--threads", "1",
                 "--max-prompt-tokens", "16", "--max-output-tokens", "4", "--num-gpu-blocks", "40",
                 "--max-num-seqs", "4", "--policies", "static,fcfs", "--out", str(out), "--no-window"]) == 0
    err = capsys.readouterr().err
    assert err.count("host speed check") == 2
    assert "the host's speed changed during these runs" in err and "after fcfs (3.5x slower" in err
