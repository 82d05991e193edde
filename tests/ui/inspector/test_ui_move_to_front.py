"""Move a waiting request to the front of the FCFS queue from the window: the table's context
menu and the inject dialog's "Inject at front"."""
from __future__ import annotations

from tests.support.fakes import FakeControl, FakeSource, shown_window
from ui import request_menu
from ui.dialogs.inject import InjectDialog
from ui.request_menu import MOVE_TO_FRONT_TEXT

# eight requests at once through 2 slots: six wait
QUEUE = tuple((40, 12, 0) for _ in range(8))


class NoMenu:
    def exec(self, *args) -> None:
        pass


def queue_order(source: FakeSource) -> list[str]:
    return [r.request_id for r in source.engine.scheduler.waiting]


def open_menu(w, monkeypatch, queue: str, rid: str):
    menus = []
    monkeypatch.setattr("ui.views.queue_tables.request_menu", lambda *a, **kw: menus.append(
        request_menu.request_menu(*a, **kw)) or NoMenu())
    model, view = w.queues.models[queue], w.queues.views[queue]
    w.queues.tabs.setCurrentWidget(view)
    w.queues._menu(queue, view.visualRect(model.index(model.row_of(rid), 0)).center())
    menu, = menus
    return {a.text(): a for a in menu.actions() if a.text()}


def test_move_to_front_from_the_menu_serves_the_request_next(qtbot, monkeypatch):
    source = FakeSource(2, max_num_seqs=2, workload=QUEUE)
    control = FakeControl(source)
    w = shown_window(qtbot, source, control)
    last = queue_order(source)[-1]
    acts = open_menu(w, monkeypatch, "waiting", last)
    assert acts[MOVE_TO_FRONT_TEXT].isEnabled()
    acts[MOVE_TO_FRONT_TEXT].trigger()
    assert control.calls[-1] == ("move_to_front", last)
    assert queue_order(source)[0] == last and w.banner.isHidden()
    waiting = queue_order(source)
    admitted: list[str] = []
    while not admitted:                 # the first step that admits any of them admits it first
        control.step_once()
        admitted = [x.request_id for x in source.history[-1].scheduled if x.request_id in waiting]
    assert admitted[0] == last, admitted
    # recorded as a user action of the step it preceded
    assert ("moved_to_front" in [e.kind for e in source.request_timeline(last)])
    # a running request has nothing to move
    w.refresh()
    running = w.queues.models["running"].request_id(0)
    assert not open_menu(w, monkeypatch, "running", running)[MOVE_TO_FRONT_TEXT].isEnabled()


def test_no_move_to_front_under_the_priority_policy(qtbot, monkeypatch):
    source = FakeSource(2, max_num_seqs=2, workload=QUEUE, policy="priority")
    w = shown_window(qtbot, source, FakeControl(source))
    acts = open_menu(w, monkeypatch, "waiting", queue_order(source)[-1])
    assert MOVE_TO_FRONT_TEXT not in acts and any(t.startswith("Set priority") for t in acts)


def test_inject_at_front(qtbot):
    source = FakeSource(2, max_num_seqs=2, workload=QUEUE)
    control = FakeControl(source)
    d = InjectDialog(control, policy="fcfs")
    qtbot.addWidget(d)
    d.prompt.setPlainText("a late but urgent question")
    d.at_front.setChecked(True)
    d.accept()
    assert [c[0] for c in control.calls] == ["add_request", "move_to_front"]
    assert queue_order(source)[0] == d.request_id
    plain = InjectDialog(control, policy="fcfs")
    qtbot.addWidget(plain)
    plain.prompt.setPlainText("no hurry")
    plain.accept()
    assert queue_order(source)[-1] == plain.request_id and control.calls[-1][0] == "add_request"
    assert not InjectDialog(control, policy="priority").at_front.isEnabled()
