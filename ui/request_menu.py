"""Pause / resume / abort / set priority / move to the front of the queue: the actions on one
request, shared by the tables and the inspector."""
from __future__ import annotations

from PySide6.QtWidgets import QInputDialog, QMenu, QWidget

from engine.outputs import RequestView
from engine.state.source import EngineControl
from engine.vocab import RequestStatus

PRIORITY_RANGE = (-1_000_000, 1_000_000)   # what the "Set priority…" box accepts


def allowed_actions(view: RequestView | None) -> dict[str, bool]:
    """Which of pause / resume / abort make sense for ``view``'s status."""
    if view is None or view.is_finished:
        return {"pause": False, "resume": False, "abort": False}
    return {"pause": view.status in (RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED),
            "resume": view.status == RequestStatus.PAUSED, "abort": True}


def run_action(control: EngineControl, name: str, request_id: str) -> None:
    {"pause": control.pause_request, "resume": control.resume_request,
     "abort": control.abort_request}[name](request_id)


def ask_priority(parent: QWidget, request_id: str, current: int) -> int | None:
    """Ask for ``request_id``'s new priority (a modal box starting at ``current``); None if
    cancelled."""
    value, ok = QInputDialog.getInt(parent, "Set priority", f"Priority of {request_id} "
                                    "(lower value runs first):", current, *PRIORITY_RANGE)
    return value if ok else None


def set_priority(control: EngineControl, request_id: str, current: int, parent: QWidget) -> None:
    """Ask for a new priority and hand it to ``control.set_priority`` (unchanged: nothing sent).
    The engine's answer (e.g. a refusal) comes back through ``control.last_error()``, which the
    window shows in its error banner."""
    value = ask_priority(parent, request_id, current)
    if value is not None and value != current:
        control.set_priority(request_id, value)


MOVE_TO_FRONT_TEXT = "Move to front of the queue"


def can_move_to_front(view: RequestView | None) -> bool:
    """Whether ``view``'s request waits in the queue (new or preempted), so it can be moved to
    its front."""
    return view is not None and view.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def request_menu(control: EngineControl, view: RequestView, parent: QWidget,
                 priority: int | None = None, move_to_front: bool = False) -> QMenu:
    """The context menu of ``view``'s request. ``priority`` (its current priority; give it only
    when the run's policy is ``priority``) adds "Set priority…" for a live request;
    ``move_to_front`` (the run's policy is ``fcfs``) adds "Move to front of the queue", enabled
    for a waiting request (``control.move_to_front``: the engine records it as the request's
    ``moved_to_front`` event)."""
    menu = QMenu(parent)
    menu.addSection(view.request_id)
    for name, ok in allowed_actions(view).items():
        act = menu.addAction(f"{name.capitalize()} request")
        act.setEnabled(ok)
        act.triggered.connect(lambda _=False, n=name: run_action(control, n, view.request_id))
    if priority is not None:
        act = menu.addAction(f"Set priority… (now {priority})")
        act.setEnabled(not view.is_finished)
        act.triggered.connect(lambda _=False: set_priority(control, view.request_id, priority, parent))
    if move_to_front:
        act = menu.addAction(MOVE_TO_FRONT_TEXT)
        act.setEnabled(can_move_to_front(view))
        act.setToolTip("Serve this request next: ahead of everyone waiting (policy fcfs)")
        act.triggered.connect(lambda _=False: control.move_to_front(view.request_id))
    return menu
