"""The compare window on two recordings of one workload (the real engine with the fake runner)."""
from __future__ import annotations


import numpy as np
import pytest

from tests.support.engine_driver import run_engine  # noqa: E402


from recordings.file.open_reader import open_reader
from recordings.compare.comparison import HEADLINE_FIELDS, compare_recordings  # noqa: E402
from ui.compare.sync import SyncClock  # noqa: E402
from ui.compare.window import CompareWindow  # noqa: E402


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One workload with 4 slots and with 1: the second run takes more steps."""
    d = tmp_path_factory.mktemp("cmp")
    paths = []
    for name, seqs in (("four", 4), ("one", 1)):
        run = run_engine(d / f"{name}.sqlite", seed=3, num_requests=12, fail_steps=(), p_action=0.0,
                         keep_states=False, arrivals_per_step=2.0, max_num_seqs=seqs, num_gpu_blocks=20)
        paths.append(run.path)
    return paths


@pytest.fixture
def window(qtbot, two_runs):
    c = compare_recordings(two_runs, ["four <slots>", "one"])
    w = CompareWindow([open_reader(p) for p in two_runs], [h.name for h in c.headlines], c)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def _clocks(path) -> np.ndarray:
    return np.array([c for (c,) in open_reader(path).execute("SELECT clock FROM steps ORDER BY step")])


def test_the_window_opens_at_step_0_of_every_run(window):
    assert window.tick == 0
    assert [p.shown for p in window.panes] == [0, 0]
    assert all(p.where.text().startswith(f"step 0 of {p.latest}") for p in window.panes)


def test_sync_by_time_shows_the_step_each_run_was_running(window, two_runs):
    a, b = _clocks(two_runs[0]), _clocks(two_runs[1])
    assert len(b) > len(a)                       # one slot: more steps
    assert window.sync.last_tick == len(np.unique(np.r_[a, b])) - 1
    for tick in (0, 5, window.sync.last_tick // 2, window.sync.last_tick):
        window.seek(tick)
        t = window.sync.x_at(tick)
        for pane, clocks in zip(window.panes, (a, b)):
            expected = int(np.flatnonzero(clocks <= t)[-1]) if (clocks <= t).any() else 0
            assert pane.shown == expected
            assert pane.block_map.state.step == expected
            assert pane.where.text().startswith(f"step {expected} of {len(clocks) - 1}")
        assert window.metrics.cursors["kv"].value() == pytest.approx(t)
    # the header holds every ratio of the second run, and the run names escaped
    text = window.header.text()
    assert "four &lt;slots&gt;" in text and "<slots>" not in text
    ratios = compare_recordings(two_runs).ratios(1)
    base = ("output_tokens_per_s", "requests_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
            "slot_occupancy")                   # defined for every run (goodput needs an SLO, ...)
    assert all(ratios[attr] is not None for attr in base)
    for attr, ratio in ratios.items():
        if ratio is not None:
            assert f"{ratio:.3g}x" in text, attr


def test_sync_by_step_keeps_the_first_runs_step_and_aligns_the_others(window, qtbot):
    window.seek(window.sync.last_tick // 3)
    first = window.panes[0].shown
    window.sync_btn.click()
    assert window.sync.by == "step" and window.panes[0].shown == first
    assert window.panes[1].shown == first
    window.seek(10_000)                                        # past the shorter run's end
    latest = [p.latest for p in window.panes]
    assert [p.shown for p in window.panes] == [min(max(latest), x) for x in latest]
    assert window.metrics.plots["kv"].getAxis("bottom").labelText == "step"
    window.sync_btn.click()
    assert window.sync.by == "time"


def test_selection_and_jumps_reach_every_run(window):
    window.panes[1].timeline.requestSelected.emit("r3")
    assert all(p.block_map.selected == "r3" and p.timeline.selected == "r3" for p in window.panes)
    assert window.jump_to("t=4")
    assert window.sync.x_at(window.tick) <= 4 < window.sync.x_at(window.tick + 1)
    assert window.jump_to("7") and window.panes[0].shown == 7
    assert not window.jump_to("r3")                            # request ids are not positions here


def test_the_window_draws_something(window):
    window.seek(window.sync.last_tick // 2)
    img = window.grab().toImage()
    colors = {img.pixel(x, y) for x in range(0, img.width(), 13) for y in range(0, img.height(), 13)}
    assert len(colors) > 20


def test_sync_clock_by_time_and_by_step():
    clocks = [np.array([0.0, 1.0, 2.0]), np.array([0.5, 3.0])]
    t = SyncClock(clocks, "time")
    assert list(t.ticks) == [0.0, 0.5, 1.0, 2.0, 3.0]
    # before its first step a run shows its step 0, never the empty step -1
    assert [t.steps_at(k) for k in range(5)] == [[0, 0], [0, 0], [1, 0], [2, 0], [2, 1]]
    assert SyncClock([np.array([1.0]), np.zeros(0)], "time").steps_at(0) == [0, -1]
    assert t.tick_at_time(2.5) == 3 and t.tick_at_step(1) == 2
    s = SyncClock(clocks, "step")
    assert s.last_tick == 2 and s.steps_at(2) == [2, 1] and s.tick_at_time(1.5) == 1
    with pytest.raises(ValueError, match="choose from time, step"):
        SyncClock(clocks, "token")


def test_the_request_panel_lists_every_delta_and_selects_in_every_run(window, two_runs):
    table = window.deltas.table
    deltas = window.deltas.comparison.deltas[0]
    assert table.rowCount() == len(deltas) > 0
    assert [table.item(r, 0).text() for r in range(table.rowCount())] == [d.request_id for d in deltas]
    worst = deltas[0]
    assert worst.cause in table.item(0, 2).text() and table.item(0, 1).text().startswith("+")
    window.seek(window.sync.last_tick)
    table.selectRow(0)
    assert all(p.block_map.selected == worst.request_id for p in window.panes)
    arrival = open_reader(two_runs[0]).request_info(worst.request_id).arrival_step
    assert window.panes[0].shown == arrival           # the moment it arrived, in the first run


def test_run_columns_read_in_chunks_match_the_steps_and_throughput_keeps_every_token(two_runs, monkeypatch):
    import ui.compare.metrics as cm

    monkeypatch.setattr(cm, "CHUNK", 7)
    reader = open_reader(two_runs[1])
    cols = cm.run_columns(reader)
    rows = reader.execute("SELECT step, clock, token_time, num_new_tokens, num_running, num_waiting FROM steps "
                          "ORDER BY step")
    assert len(rows) > 7 and cols["step"].tolist() == [r[0] for r in rows]
    for i, name in enumerate(("clock", "token_time", "new", "running", "waiting"), 1):
        assert cols[name].tolist() == [float(r[i]) for r in rows], name
    for by in ("time", "step"):
        x, tput = cm.run_series(cols, by, num_bins=10)["throughput"]
        assert len(x) == 10 and np.all(tput >= 0)
    x, tput = cm.run_series(cols, "time", num_bins=10)["throughput"]
    width = cols["token_time"].max() / 10
    assert float(np.sum(tput * width)) == pytest.approx(cols["new"].sum())      # every token in a bin


def test_headline_values_and_ratios_sit_in_their_own_columns(two_runs):
    import re

    from ui.compare.window import header_html

    c = compare_recordings(two_runs, ["a", "b"])
    text = header_html(c, [(0, 0, 0), (1, 1, 1)])
    rows = re.findall(r"<tr>(.*?)</tr>", text)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows[1:]]
    n = len(HEADLINE_FIELDS)
    assert [len(r) for r in cells] == [1 + 2 * n] * 2                 # name, then value | ratio
    for attr_i in range(n):
        value_a, ratio_a = cells[0][1 + 2 * attr_i], cells[0][2 + 2 * attr_i]
        value_b, ratio_b = cells[1][1 + 2 * attr_i], cells[1][2 + 2 * attr_i]
        assert "x</b>" not in value_b and ratio_a == ""                  # ratios apart from values
        assert re.search(r"(\dx|-)</b>", ratio_b), ratio_b
