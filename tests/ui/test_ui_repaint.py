"""What is on screen after a run of frames equals a fresh render of the same step.

The views repaint only what changed: table cells announced per column and rows added or removed
at the end (``QueueView``), slot-timeline columns changed in place, block-map cells. A change
they forgot to announce would leave stale pixels on screen that no state comparison sees, so
these tests compare the window's backing store (``QScreen.grabWindow``) with each view
rendered from scratch (``QWidget.grab``), frame after frame, on a run whose queues change
every step (requests of mixed lengths through 12 slots: one finishes, another is admitted)."""
from __future__ import annotations

import random

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication

from tests.support.fakes import FakeSource
from ui import MainWindow

# 80 requests of mixed prompt and output lengths, two arriving per step
CHURN = tuple((24 + (37 * i) % 90, 4 + (5 * i) % 13, i // 2) for i in range(80))


@pytest.fixture
def churn_window(qtbot):
    source = FakeSource(70, num_blocks=96, max_num_seqs=12, budget=128, workload=CHURN)
    w = MainWindow(source, None, window=32)
    w.timer.stop()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w, source


def stale_views(w: MainWindow) -> list[str]:
    """The views whose pixels on screen differ from a fresh render of them."""
    shot = QApplication.primaryScreen().grabWindow(w.winId()).toImage()
    views = {"table": w.queues.tabs.currentWidget().viewport(), "timeline": w.timeline.plot.viewport(),
             "block map": w.block_map.plot.viewport(), "metrics": w.metrics.layout_widget.viewport()}
    stale = []
    for name, view in views.items():
        at = view.mapTo(w, QPoint(0, 0))
        on_screen = shot.copy(at.x(), at.y(), view.width(), view.height())
        if on_screen != view.grab().toImage().convertToFormat(on_screen.format()):
            stale.append(name)
    return stale


def test_playing_forward_and_back_leaves_nothing_stale(churn_window):
    w, source = churn_window
    w.show_step(5)
    QApplication.processEvents()
    w.select_request(w.queues.models["running"].request_id(3))
    for k in [*range(6, 60), *range(58, 40, -1)]:       # forward (the timeline pages), back
        w.show_step(k)
        QApplication.processEvents()
        assert stale_views(w) == [], k


def test_a_random_walk_leaves_nothing_stale(churn_window):
    """Steps forward and back, jumps, other tabs, the tables scrolled, requests selected."""
    w, _source = churn_window
    rng, k = random.Random(7), 10
    for i in range(150):
        op = rng.random()
        if op < 0.45:
            k = min(69, k + 1)
        elif op < 0.6:
            k = max(0, k - 1)
        elif op < 0.7:
            k = rng.randrange(70)
        elif op < 0.78:
            w.queues.tabs.setCurrentWidget(w.queues.views[rng.choice(("running", "waiting", "finished"))])
        elif op < 0.88:
            bar = w.queues.tabs.currentWidget().verticalScrollBar()
            bar.setValue(rng.randint(0, max(bar.maximum(), 0)))
        else:
            model = w.queues.tabs.currentWidget().model()
            w.select_request(model.request_id(rng.randrange(model.rowCount()))
                             if model.rowCount() and op < 0.96 else None)
        w.show_step(k)
        QApplication.processEvents()
        assert stale_views(w) == [], (i, k)
