"""A list of findings about a recording, each at a step: the problems ``batchscope check``
found (``ui.check_worker``) or the requests a run cut short left unfinished (``ui.run_end``).
Clicking a row asks the window to show its step (and select its request, if any)."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QLabel,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)
from ui.style.theme import follow_window


class Finding(NamedTuple):
    """One row: the ``step`` it concerns (-1: none), its ``kind`` (an invariant such as G1, or a
    request's status), the ``message``, and the ``request_id`` to select (or None)."""

    step: int
    kind: str
    message: str
    request_id: str | None = None


def problem_findings(problems) -> list[Finding]:
    """``recordings.check.invariants.Problem`` s as rows."""
    return [Finding(p.step, p.invariant, p.message) for p in problems]


def unfinished_findings(end) -> list[Finding]:
    """The unfinished requests of a ``ui.run_end.RunEnd`` as rows at its last step."""
    return [Finding(end.last_step, v.status.lower(), f"{v.request_id}: arrived at step {v.arrival_step}, "
                    f"{v.num_output_tokens} / {v.max_tokens} tokens generated", v.request_id)
            for v in end.unfinished]


MAX_ROWS = 2000         # rows listed (a run cut short may leave 10k requests unfinished)


class FindingsDialog(QDialog):
    """``FindingsDialog(title, summary, findings, parent=None)``: non-modal; lists the first
    :data:`MAX_ROWS` findings (the summary then says how many are left out); emits
    ``jumpRequested(step, request_id or "")`` when a row with a step is clicked."""

    jumpRequested = Signal(int, str)
    HEADERS = ("step", "kind", "what")

    def __init__(self, title: str, summary: str, findings: Sequence[Finding],
                 parent: QWidget | None = None):
        super().__init__(parent)
        follow_window(self, parent)
        self.setWindowTitle(title)
        self.resize(760, 420)
        findings = list(findings)
        self.findings = findings[:MAX_ROWS]
        if len(findings) > MAX_ROWS:
            summary += f" (the first {MAX_ROWS:,} listed, {len(findings) - MAX_ROWS:,} more left out)"
        self.summary = QLabel(summary)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)
        self.table = QTableWidget(len(self.findings), len(self.HEADERS))
        self.table.setHorizontalHeaderLabels(self.HEADERS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        for row, f in enumerate(self.findings):
            for col, text in enumerate((str(f.step) if f.step >= 0 else "–", f.kind, f.message)):
                item = QTableWidgetItem(text)           # plain text, never rich text
                item.setToolTip(text)
                if col == 0:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.cellClicked.connect(lambda row, _col: self.jump(row))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(self.table, 1)
        hint = QLabel("Click a row to show its step" + (" and select its request" if any(
            f.request_id for f in self.findings) else "") + " in the window.")
        hint.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(hint)
        lay.addWidget(buttons)

    def jump(self, row: int) -> None:
        """Ask the window to show row ``row``'s step (a row without one: nothing)."""
        f = self.findings[row]
        if f.step >= 0:
            self.jumpRequested.emit(f.step, f.request_id or "")
