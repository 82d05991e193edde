"""Waiting / running / paused / finished tables: a QTableView over a virtual
``ui.request_table.RequestTableModel`` each (10k waiting rows cost one array comparison a frame).

Selecting a row emits ``requestSelected``; the selection survives updates. A right-click on a
row opens the request menu (pause / resume / abort) when a live engine is attached.
"""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QTableView, QTabWidget, QVBoxLayout,
                               QWidget)

from engine.outputs import StepRecord
from engine.source import EngineControl
from engine.state import EngineState
from ui.request_menu import request_menu
from ui.request_table import COLUMNS, RequestTableModel
from ui.theme import dark_palette

QUEUES = ("running", "waiting", "paused", "finished")
# starting widths (user-resizable) in characters of content; ResizeToContents would re-query
# every row on each frame
WIDTH_CHARS = (7, 8, 4, 9, 7, 7, 3)


def visible_rows(view: QTableView) -> tuple[int, int]:
    """(first, last) model rows on screen in ``view`` ((0, -1) when hidden or empty)."""
    if not view.isVisible():
        return 0, -1
    n = view.model().rowCount()
    first = view.rowAt(0)
    last = view.rowAt(view.viewport().height() - 1)
    return (max(first, 0), n - 1 if last < 0 else last) if n else (0, -1)


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
            model, view = RequestTableModel(self, reasons=name == "waiting"), QTableView()
            view.setModel(model)
            view.setSelectionBehavior(QAbstractItemView.SelectRows)
            view.setSelectionMode(QAbstractItemView.SingleSelection)
            view.setAlternatingRowColors(True)
            view.setPalette(dark_palette())     # a window style sheet does not pass palettes on
            view.setShowGrid(False)
            view.setWordWrap(False)             # one line per cell
            view.verticalHeader().hide()
            view.verticalHeader().setSectionResizeMode(QHeaderView.Fixed)
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
            model.visible_rows = lambda v=view: visible_rows(v)
            self.models[name], self.views[name] = model, view
            self.tabs.addTab(view, name)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.tabs)

    def set_control(self, control: EngineControl | None) -> None:
        self.control = control

    def set_state(self, state: EngineState, record: StepRecord | None = None) -> None:
        """Show ``state``'s queues; ``record`` (the shown step's) says why waiting requests
        were not admitted."""
        for i, name in enumerate(QUEUES):
            model = self.models[name]
            if name == "finished":                  # newest first
                reset = model.set_views(state.recently_finished[::-1])
            else:
                reset = model.set_state_rows(state, state.queue_rows(name), record)
            if reset:
                self._restore(name)
            title = f"{name.capitalize()} ({model.rowCount():,})"
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
        menu = request_menu(self.control, self.models[name].view(index.row()), view)
        menu.exec(view.viewport().mapToGlobal(pos))
