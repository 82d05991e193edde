"""The selected request's forensics, as rows of the inspector's form: its priority (policy
``priority``), its prefix-cache hit (with prefix caching) and its preemptions with the work they
wasted. Texts come from :mod:`ui.inspector.explain`; the request's history is read from the source
only when the request, its status or its preemption count changes, not every frame."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout

from engine.outputs import RequestView
from engine.state.state import EngineState
from ui.inspector.explain import RequestHistory, load_history, preemption_text, prefix_text
from ui.state_lookup import find_row
from ui.plain_text import PlainLabel
from engine.vocab import Policy

ROWS = ("priority", "prefix cache", "preemptions")


class RequestForensics:
    """Adds the rows of :data:`ROWS` to ``form`` (their value labels are ``values[row]``; a row
    that does not apply to the run is hidden). ``show_request(source, view, state, step)``
    fills them; ``history`` is the loaded :class:`RequestHistory`."""

    def __init__(self, form: QFormLayout):
        self.form = form
        self.values = {name: PlainLabel("–") for name in ROWS}
        self.history = RequestHistory()
        self.config: dict = {}
        self._key: tuple | None = None
        for name, label in self.values.items():
            label.setTextInteractionFlags(Qt.TextSelectableByMouse)
            label.setWordWrap(True)
            form.addRow(name + ":", label)
        self._set_rows(policy="", caching=False)

    def _set_rows(self, policy: str, caching: bool) -> None:
        self.form.setRowVisible(self.values["priority"], policy == Policy.PRIORITY)
        self.form.setRowVisible(self.values["prefix cache"], caching)

    def is_shown(self, row: str) -> bool:
        """Whether ``row`` (one of :data:`ROWS`) applies to the run and is shown."""
        return self.form.isRowVisible(self.values[row])

    def show_request(self, source, view: RequestView | None, state: EngineState, step: int) -> None:
        """Explain ``view`` (None: nothing selected) in ``state`` after ``step`` of ``source``."""
        if view is None:
            self._key = None
            for label in self.values.values():
                label.setText("–")
            return
        # a preemption made between steps (a live knob) is in the state before its event is
        # recorded with the next step: read the history again each step until it is there
        pending = view.num_preemptions - len(self.history.preemptions)
        key = (id(source), view.request_id, view.status, view.num_preemptions,
               step if pending > 0 else None)
        if key != self._key or not self.config:
            self._key = key
            self.config = dict(source.run_info().config)
            self._set_rows(self.config.get("policy", "fcfs"), bool(self.config.get("enable_prefix_caching")))
            self.history = load_history(source, view.request_id, step, state.block_size)
            self.values["prefix cache"].setText(prefix_text(self.history, view))
            text = preemption_text(self.history)
            pending = view.num_preemptions - len(self.history.preemptions)
            if pending > 0:
                more = (f"{pending} preemption{'s' * (pending != 1)} between steps (a live knob "
                        "change): its details come with the next step's record")
                text = more if text == "none" else f"{text}\n{more}"
            self.values["preemptions"].setText(text)
        row = find_row(state, view.request_id)
        self.values["priority"].setText(
            "– (finished)" if row is None else
            f"{int(state.columns['priority'][row])} (lower value runs first)")
