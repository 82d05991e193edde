"""Waiting / running / paused / finished tables (QTableView + one QAbstractTableModel each).

Selecting a row emits ``requestSelected``; the selection survives updates. A right-click on a
row opens the request menu (pause / resume / abort) when a live engine is attached.
"""
from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPoint, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QTabWidget, QVBoxLayout, QWidget

from engine.outputs import (NOT_ADMITTED_BEHIND, NOT_ADMITTED_NO_FREE_BLOCKS, NOT_ADMITTED_SEQ_CAP,
                            NOT_ADMITTED_TOKEN_BUDGET, RequestView)
from engine.source import EngineControl
from engine.state import EngineState
from ui.colors import ERROR, request_qcolor
from ui.request_menu import request_menu

QUEUES = ("running", "waiting", "paused", "finished")
COLUMNS = ("id", "state", "prompt", "output", "TTFT", "ITL", "preempt", "reason")
# why a waiting request was not admitted in the shown step (SchedulerOutput.not_admitted)
NOT_ADMITTED_TEXT = {
    NOT_ADMITTED_TOKEN_BUDGET: "token budget spent",
    NOT_ADMITTED_NO_FREE_BLOCKS: "no free KV blocks",
    NOT_ADMITTED_SEQ_CAP: "batch slots full",
    NOT_ADMITTED_BEHIND: "behind older request",
}
# starting widths (user-resizable) in characters of content; ResizeToContents would re-query
# every row on each frame
WIDTH_CHARS = (7, 8, 4, 9, 7, 7, 3)


def _num(x: float | None, unit: str = "") -> str:
    return "–" if x is None else f"{x:.3g}{unit}"


def reason_text(r: RequestView, not_admitted: str | None = None) -> str:
    """The error, the finish reason, or why the request still waits ('' if none)."""
    if r.error or r.finish_reason:
        return r.error or f"finished: {r.finish_reason}"
    return NOT_ADMITTED_TEXT.get(not_admitted, not_admitted or "")


def cell_text(r: RequestView, column: int, not_admitted: str | None = None) -> str:
    """Text of ``column`` for request ``r`` (times in engine clock units)."""
    if column == 0:
        return r.request_id
    if column == 1:
        return r.status.lower().removeprefix("finished_") if r.is_finished else r.status.lower()
    if column == 2:
        return str(r.num_prompt_tokens)
    if column == 3:
        return f"{r.num_output_tokens} / {r.max_tokens}"
    if column == 4:
        return _num(r.ttft)
    if column == 5:
        return _num(r.mean_itl)
    if column == 6:
        return str(r.num_preemptions)
    return reason_text(r, not_admitted)


# PySide6 hands data() its role as a plain int, and comparing with a Qt enum attribute costs
# microseconds: data() runs hundreds of times a frame, so it compares ints.
_R = Qt.ItemDataRole
DISPLAY, DECORATION, FOREGROUND, TOOLTIP, ALIGN, USER = (int(r) for r in (
    _R.DisplayRole, _R.DecorationRole, _R.ForegroundRole, _R.ToolTipRole, _R.TextAlignmentRole,
    _R.UserRole))
_ROLES = (DISPLAY, DECORATION, FOREGROUND, TOOLTIP, ALIGN, USER)
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_ERROR_COLOR = QColor(*ERROR)
_HORIZONTAL = Qt.Orientation.Horizontal


class RequestTableModel(QAbstractTableModel):
    """Rows are RequestViews. ``set_rows`` keeps row identity when the ids do not change
    (``dataChanged`` only), otherwise resets the model."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[RequestView] = []
        self.reasons: dict[str, str] = {}

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    time_unit = ""        # "s" (wall clock) or "steps" (virtual clock), shown in the TTFT/ITL headers

    def headerData(self, section, orientation, role=DISPLAY):
        if role == DISPLAY and orientation == _HORIZONTAL:
            if COLUMNS[section] in ("TTFT", "ITL") and self.time_unit:
                return f"{COLUMNS[section]} ({self.time_unit})"
            return COLUMNS[section]
        return None

    def set_time_unit(self, unit: str) -> None:
        """Name the unit of the TTFT and ITL columns."""
        if unit != self.time_unit:
            self.time_unit = unit
            self.headerDataChanged.emit(_HORIZONTAL, 0, len(COLUMNS) - 1)

    def data(self, index: QModelIndex, role=DISPLAY):
        if role not in _ROLES or not index.isValid():
            return None
        r, col = self.rows[index.row()], index.column()
        if role == DISPLAY:
            return cell_text(r, col, self.reasons.get(r.request_id))
        if role == USER:
            return r.request_id
        if role == DECORATION:
            return request_qcolor(r.request_id) if col == 0 else None
        if role == ALIGN:
            return _RIGHT if 2 <= col <= 6 else None
        if col == 7 and role == TOOLTIP:
            return reason_text(r, self.reasons.get(r.request_id)) or None
        if col == 7 and r.error and role == FOREGROUND:
            return _ERROR_COLOR
        return None

    def set_rows(self, rows: Sequence[RequestView], reasons: dict[str, str] | None = None) -> bool:
        """Replace the rows (and the not-admitted reasons by request id); returns True if the
        model was reset (row ids changed)."""
        rows, old = list(rows), self.reasons
        self.reasons = reasons or {}
        if [r.request_id for r in rows] == [r.request_id for r in self.rows]:
            changed = [i for i, (a, b) in enumerate(zip(self.rows, rows)) if a != b
                       or old.get(a.request_id) != self.reasons.get(a.request_id)]
            self.rows = rows
            if changed:
                self.dataChanged.emit(self.index(min(changed), 0),
                                      self.index(max(changed), len(COLUMNS) - 1))
            return False
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()
        return True

    def row_of(self, request_id: str | None) -> int | None:
        for i, r in enumerate(self.rows):
            if r.request_id == request_id:
                return i
        return None


class QueueTables(QWidget):
    """Tabs of request tables, titled with their counts. ``set_state`` updates them all."""

    requestSelected = Signal(str)

    def __init__(self, control: EngineControl | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.control = control
        self.selected: str | None = None
        self.models: dict[str, RequestTableModel] = {}
        self.views: dict[str, QTableView] = {}
        self.tabs = QTabWidget()
        for name in QUEUES:
            model, view = RequestTableModel(self), QTableView()
            view.setModel(model)
            view.setSelectionBehavior(QAbstractItemView.SelectRows)
            view.setSelectionMode(QAbstractItemView.SingleSelection)
            view.setAlternatingRowColors(True)
            view.setShowGrid(False)
            view.verticalHeader().hide()
            view.verticalHeader().setDefaultSectionSize(22)
            hh = view.horizontalHeader()
            hh.setSectionResizeMode(QHeaderView.Interactive)
            hh.setStretchLastSection(True)
            fm, hfm = view.fontMetrics(), hh.fontMetrics()
            for col, chars in enumerate(WIDTH_CHARS):
                swatch = 22 if col == 0 else 0
                view.setColumnWidth(col, max(fm.horizontalAdvance("0" * chars) + 14 + swatch,
                                             hfm.horizontalAdvance(COLUMNS[col]) + 20))
            view.setContextMenuPolicy(Qt.CustomContextMenu)
            view.customContextMenuRequested.connect(lambda p, n=name: self._menu(n, p))
            view.selectionModel().selectionChanged.connect(lambda *_a, n=name: self._picked(n))
            self.models[name], self.views[name] = model, view
            self.tabs.addTab(view, name)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.tabs)

    def set_control(self, control: EngineControl | None) -> None:
        self.control = control

    def set_state(self, state: EngineState, not_admitted: dict[str, str] | None = None) -> None:
        """Show ``state``'s queues; ``not_admitted`` maps waiting ids to NOT_ADMITTED_* reasons."""
        for i, name in enumerate(QUEUES):
            rows = state.queue(name)
            if name == "finished":
                rows = rows[::-1]                   # newest first
            if self.models[name].set_rows(rows, not_admitted if name == "waiting" else None):
                self._restore(name)
            title = f"{name.capitalize()} ({len(rows)})"
            if self.tabs.tabText(i) != title:
                self.tabs.setTabText(i, title)

    def set_time_unit(self, unit: str) -> None:
        """``s`` or ``steps``: the unit of the run's clock, for the TTFT and ITL columns."""
        for m in self.models.values():
            m.set_time_unit(unit)

    def row_counts(self) -> dict[str, int]:
        return {n: m.rowCount() for n, m in self.models.items()}

    def set_selected(self, request_id: str | None) -> None:
        if request_id == self.selected:
            return
        self.selected = request_id
        for name in QUEUES:
            self._restore(name)

    def select_row(self, queue: str, row: int) -> None:
        """Select ``row`` of ``queue`` as a user click would (emits ``requestSelected``)."""
        self.tabs.setCurrentWidget(self.views[queue])
        self.views[queue].selectRow(row)

    def _restore(self, name: str) -> None:
        view, row = self.views[name], self.models[name].row_of(self.selected)
        sm = view.selectionModel()
        sm.blockSignals(True)
        if row is None:
            sm.clearSelection()
        else:
            view.selectRow(row)
        sm.blockSignals(False)
        view.viewport().update()

    def _picked(self, name: str) -> None:
        rows = self.views[name].selectionModel().selectedRows()
        rid = rows[0].data(Qt.UserRole) if rows else None
        if rid and rid != self.selected:
            self.selected = rid
            for other in QUEUES:
                if other != name:
                    self._restore(other)
            self.requestSelected.emit(rid)

    def _menu(self, name: str, pos: QPoint) -> None:
        view = self.views[name]
        index = view.indexAt(pos)
        if self.control is None or not index.isValid():
            return
        menu = request_menu(self.control, self.models[name].rows[index.row()], view)
        menu.exec(view.viewport().mapToGlobal(pos))
