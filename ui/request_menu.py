"""Pause / resume / abort / set priority actions for one request, shared by the tables and the
inspector."""
from __future__ import annotations

from PySide6.QtWidgets import QInputDialog, QMenu, QWidget

from engine.outputs import RequestView
from engine.source import EngineControl

PRIORITY_RANGE = (-1_000_000, 1_000_000)   # what the "Set priority…" box accepts


def allowed_actions(view: RequestView | None) -> dict[str, bool]:
    """Which of pause / resume / abort make sense for ``view``'s status."""
    if view is None or view.is_finished:
        return {"pause": False, "resume": False, "abort": False}
    return {"pause": view.status in ("WAITING", "RUNNING", "PREEMPTED"),
            "resume": view.status == "PAUSED", "abort": True}


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


def request_menu(control: EngineControl, view: RequestView, parent: QWidget,
                 priority: int | None = None) -> QMenu:
    """The context menu of ``view``'s request. ``priority`` (its current priority; give it only
    when the run's policy is ``priority``) adds "Set priority…" for a live request."""
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
    return menu
