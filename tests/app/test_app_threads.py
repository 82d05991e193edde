"""torch's thread count on a busy CPU (app.threads): chosen from the cores and the other
processes' load at start, re-checked while running, ``--threads`` wins, shown in the status bar."""
from __future__ import annotations

import pytest

from app.threads import RECHECK_S, ThreadGovernor, choose_num_threads


@pytest.mark.parametrize("cores, load, want", [
    (2, 0.0, 2), (2, 1.0, 1), (2, 1.4, 1), (2, 0.4, 2), (2, 5.0, 1), (8, 2.6, 5), (4, None, 4),
    (4, float("nan"), 4), (1, 0.0, 1),
])
def test_choose_leaves_the_busy_cores_to_the_others(cores, load, want):
    assert choose_num_threads(cores, load) == want


class Host:
    """A fake host: its cores, load average, wall clock and this process's CPU clock."""

    def __init__(self, cores: int, load: float) -> None:
        self.cores, self.load, self.wall, self.cpu = cores, load, 0.0, 0.0
        self.set_calls: list[int] = []

    def governor(self, fixed=None) -> ThreadGovernor:
        return ThreadGovernor(fixed, set_threads=self.set_calls.append, cores=lambda: self.cores,
                              load=lambda: self.load, clock=lambda: self.wall, cpu_clock=lambda: self.cpu)

    def run(self, seconds: float, own_cores: float, load: float) -> None:
        self.wall += seconds
        self.cpu += seconds * own_cores
        self.load = load


def test_another_busy_process_at_start_means_fewer_threads_and_its_end_gives_them_back():
    host = Host(cores=2, load=1.1)                  # another CPU-bound process
    gov = host.governor()
    assert gov.num_threads == 1 and host.set_calls == [1]
    assert gov.describe() == "threads 1 of 2 (auto, others' load 1.1)"
    host.run(RECHECK_S / 2, own_cores=1.0, load=2.0)
    assert not gov.maybe_recheck()                  # not due yet
    host.run(RECHECK_S, own_cores=1.0, load=2.0)    # we use 1 core, the other still 1
    assert not gov.maybe_recheck() and gov.num_threads == 1
    host.run(RECHECK_S, own_cores=1.0, load=1.0)    # the other process ended: only our load
    assert gov.maybe_recheck() and gov.num_threads == 2 and host.set_calls == [1, 2]
    host.run(RECHECK_S, own_cores=2.0, load=3.0)    # it is back
    assert gov.maybe_recheck() and gov.num_threads == 1


def test_threads_flag_overrides_and_is_never_rechecked():
    host = Host(cores=2, load=1.5)
    gov = host.governor(fixed=2)
    assert gov.num_threads == 2 and gov.describe() == "threads 2 (--threads)"
    host.run(10 * RECHECK_S, own_cores=2.0, load=4.0)
    assert not gov.maybe_recheck() and host.set_calls == [2]
    with pytest.raises(ValueError, match="--threads must be >= 1, got 0"):
        host.governor(fixed=0)


def test_the_live_window_shows_the_thread_count(qtbot):
    from tests.support.fakes import FakeControl, FakeSource, shown_window

    source = FakeSource(5)
    control = FakeControl(source)
    w = shown_window(qtbot, source, control)
    w.refresh()
    assert w.status["threads"].text() == ""                     # no governor: nothing shown
    control.threads_status = lambda: "threads 1 of 2 (auto, others' load 1.1)"
    w.refresh()
    assert w.status["threads"].text() == "threads 1 of 2 (auto, others' load 1.1)"


def test_the_engine_worker_reports_its_governor():
    from app.live.bridge import EngineWorker
    from app.live.source import LiveSource
    from app.live.bridge import empty_state

    host = Host(cores=2, load=1.2)
    gov = host.governor()
    worker = EngineWorker(lambda: None, LiveSource(empty_state()), threads=gov)
    assert worker.threads_status() == "threads 1 of 2 (auto, others' load 1.2)"
    assert EngineWorker(lambda: None, LiveSource(empty_state())).threads_status() is None
