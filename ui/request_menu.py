"""Pause / resume / abort actions for one request, shared by the tables and the inspector."""
from __future__ import annotations

from PySide6.QtWidgets import QMenu, QWidget

from engine.outputs import RequestView
from engine.source import EngineControl


def allowed_actions(view: RequestView | None) -> dict[str, bool]:
    """Which of pause / resume / abort make sense for ``view``'s status."""
    if view is None or view.is_finished:
        return {"pause": False, "resume": False, "abort": False}
    return {"pause": view.status in ("WAITING", "RUNNING", "PREEMPTED"),
            "resume": view.status == "PAUSED", "abort": True}


def run_action(control: EngineControl, name: str, request_id: str) -> None:
    {"pause": control.pause_request, "resume": control.resume_request,
     "abort": control.abort_request}[name](request_id)


def request_menu(control: EngineControl, view: RequestView, parent: QWidget) -> QMenu:
    menu = QMenu(parent)
    menu.addSection(view.request_id)
    for name, ok in allowed_actions(view).items():
        act = menu.addAction(f"{name.capitalize()} request")
        act.setEnabled(ok)
        act.triggered.connect(lambda _=False, n=name: run_action(control, n, view.request_id))
    return menu
