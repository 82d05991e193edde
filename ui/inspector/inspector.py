"""The selected request: identity, state, counts, latencies, why it waits or how it ended, its
priority, prefix-cache hits and preemptions (``ui.inspector.forensics``), and its generated text
as it streams (``source.request_text(id, shown_step)``). Pause / resume / abort buttons act on a
live engine and are hidden in replay."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QTextCursor
from PySide6.QtWidgets import (QFormLayout, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QVBoxLayout, QWidget)

from engine.outputs import RequestView, StepRecord
from engine.state.source import EngineControl, StepSource
from engine.state.state import EngineState
from recordings.numbers import clock_text
from ui.style.colors import ERROR, css, request_rgb
from ui.inspector.explain import explain_waiting
from ui.inspector.forensics import RequestForensics
from ui.request_menu import allowed_actions, run_action
from ui.views.request_table import cell_text
from ui.state_lookup import block_ids, find_view
from ui.plain_text import PlainLabel, rich_escape
from engine.plural import plural

FIELDS = ("state", "arrival", "tokens", "KV", "latency", "reason")
MIN_WIDTH_TEXT = "preemptions:   step 88,888 (clock"
TEXT_PLACEHOLDER = "generated text appears here as it streams"
NO_TEXT = "text not recorded (--no-text): token ids and lengths only"


class RequestInspector(QWidget):
    """``set_state(state, step)`` refreshes the shown request; ``set_selected(id)`` picks it."""

    time_unit = ""   # "s" or "steps": the run's clock unit, set by the main window

    def __init__(self, source: StepSource, control: EngineControl | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.source, self.control = source, control
        self.selected: str | None = None
        self.view: RequestView | None = None
        self.block_ids: tuple[int, ...] = ()
        self.step = -1
        self.state: EngineState | None = None
        self.record: StepRecord | None = None
        self._text_key: tuple | None = None
        self._shown_text = ""
        self.header = QLabel("No request selected: click a block, a slot cell or a table row")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.RichText)
        self.values = {f: PlainLabel("–") for f in FIELDS}
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        form.setHorizontalSpacing(12)
        form.setVerticalSpacing(2)
        for f, lab in self.values.items():
            lab.setTextInteractionFlags(Qt.TextSelectableByMouse)
            lab.setWordWrap(True)
            form.addRow(f + ":", lab)
        self.forensics = RequestForensics(form)      # priority, prefix-cache hit, preemptions
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlaceholderText(TEXT_PLACEHOLDER)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.Monospace)
        self.text.setFont(mono)
        self.buttons = {n: QPushButton(n.capitalize()) for n in ("pause", "resume", "abort")}
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for n, b in self.buttons.items():
            b.clicked.connect(lambda _=False, n=n: self._act(n))
            row.addWidget(b)
        row.addStretch(1)
        self.actions_row = QWidget()
        self.actions_row.setLayout(row)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 2)
        lay.addWidget(self.header)
        lay.addLayout(form)
        lay.addWidget(QLabel("generated text:"))
        lay.addWidget(self.text, 1)
        lay.addWidget(self.actions_row)
        # the field names and a short value side by side (narrower, values wrapped a word a line)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance(MIN_WIDTH_TEXT) + 24)
        self.set_control(control)

    def set_source(self, source: StepSource, control: EngineControl | None = None) -> None:
        self.source = source
        self._no_text = source.run_info().text_stored is False     # recorded with --no-text
        self.set_text_note(None)
        self.set_control(control)
        self.set_selected(None)

    def set_control(self, control: EngineControl | None) -> None:
        self.control = control
        self.actions_row.setVisible(control is not None)
        self._update_buttons()

    def set_text_note(self, note: str | None) -> None:
        """Why the generated-text box stays empty for this run (``None``: none, unless the
        recording was made with ``--no-text``)."""
        self.text.setPlaceholderText(note or (NO_TEXT if getattr(self, "_no_text", False) else TEXT_PLACEHOLDER))

    def set_selected(self, request_id: str | None) -> None:
        self.selected = request_id
        self._text_key = None

    def set_state(self, state: EngineState, step: int, record: StepRecord | None = None) -> None:
        """Show the selected request in ``state`` (after ``step``); ``record`` (that step's)
        says why a waiting request was not admitted."""
        self.step, self.state = step, state
        self.record = record
        self.view = find_view(state, self.selected)
        self.block_ids = block_ids(state, self.selected) if self.view is not None else ()
        self._show()

    def _show(self) -> None:
        v = self.view
        if v is None:
            if self.selected:
                self.header.setText(f"<b>{rich_escape(self.selected)}</b> is not live at step {self.step} "
                                    "(not arrived yet, or finished before the last 64)")
            for lab in self.values.values():
                lab.setText("–")
            self.text.setPlainText("")
            self._text_key = None
            self.forensics.show_request(self.source, None, self.state, self.step)
            self._update_buttons()
            return
        sw = css(request_rgb(v.request_id))
        self.header.setText(f"<span style='color:{sw}; font-size:14pt'>&#9632;</span> "
                            f"<b style='font-size:12pt'>{rich_escape(v.request_id)}</b> &nbsp; at step {self.step}")
        where = f"slot {v.slot}" if v.slot is not None else "no slot"
        self.values["state"].setText(f"{v.status.lower()} · {where} · {plural(v.num_preemptions, 'preemption')}")
        self.values["arrival"].setText(f"step {v.arrival_step:,} (clock {clock_text(v.arrival_time, self.time_unit)})")
        self.values["tokens"].setText(
            f"prompt {v.num_prompt_tokens:,} · generated {v.num_output_tokens:,} / {v.max_tokens:,}"
            f" · KV written {v.num_computed_tokens:,}")
        blocks = self.block_ids
        ids = ", ".join(map(str, blocks[:12])) + (" …" if len(blocks) > 12 else "")
        self.values["KV"].setText(f"{plural(len(blocks), 'block')} [{ids}]" if blocks else "no blocks")
        u = self.time_unit
        self.values["latency"].setText(f"TTFT {cell_text(v, 4, unit=u)} · mean ITL {cell_text(v, 5, unit=u)}"
                                       + ("" if u in ("s", "sim s") else f" ({u or 'engine clock units'})"))
        self.values["reason"].setText(explain_waiting(self.record, v, self.state) or "–")
        style = f"color: {css(ERROR)};" if v.error else ""
        if self.values["reason"].styleSheet() != style:     # a new style sheet re-polishes
            self.values["reason"].setStyleSheet(style)
        self.forensics.show_request(self.source, v, self.state, self.step)
        key = (v.request_id, self.step, v.num_output_tokens)
        if key != self._text_key:
            same_request = self._text_key is not None and self._text_key[0] == v.request_id
            self._text_key = key
            self._show_text(self.source.request_text(v.request_id, self.step), same_request)
        self._update_buttons()

    def _show_text(self, text: str, same_request: bool) -> None:
        """Show ``text``; while it streams (the shown text is a prefix of it) append only the
        new characters instead of laying out the whole document again."""
        shown = self._shown_text if same_request else None
        if shown is not None and text.startswith(shown):
            if len(text) > len(shown):
                self.text.moveCursor(QTextCursor.End)
                self.text.insertPlainText(text[len(shown):])
        else:
            self.text.setPlainText(text)
        self._shown_text = text
        self.text.moveCursor(QTextCursor.End)

    def _update_buttons(self) -> None:
        for n, ok in allowed_actions(self.view).items():
            self.buttons[n].setEnabled(ok and self.control is not None)

    def _act(self, name: str) -> None:
        if self.control is not None and self.view is not None:
            run_action(self.control, name, self.view.request_id)
