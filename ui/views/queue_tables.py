"""Running / waiting / swapped / paused / finished tables: a QTableView over a virtual
``ui.views.request_table.RequestTableModel`` each (10k waiting rows cost one array comparison a frame).
The swapped tab (requests preempted to the CPU swap pool: vLLM's ``swapped`` queue, resumed
before any admission) shows only in runs with a swap pool.

Selecting a row emits ``requestSelected``; the selection follows its request through updates (a
row is a position: when the queue changes the selection moves to the request's new row). While
the pointer moves over a table, and for :data:`HOLD_S` seconds after it last moved, and while a
button is held down, its rows hold still (the table shows the state it showed when the pointer
came in; the tab's count goes on and says "held"): a request that finishes or is admitted does
not shift the rows under the cursor, so a click picks the request the user aimed at. The table
catches up when the pointer leaves or rests. The reason column comes third, starts wide
enough for every fixed reason of its queue and takes the width left over; longer texts (errors)
are elided, whole in the tooltip (the running table has none: a running request has no reason). A
right-click on a row opens the request menu (pause / resume / abort; set priority under the
priority policy, move to the front of the queue under fcfs) when a live engine is attached.
"""
from __future__ import annotations

import math
import time

import numpy as np
from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QVBoxLayout, QWidget

from engine.outputs import StepRecord
from engine.state.source import EngineControl
from engine.state.state import EngineState
from ui.request_menu import request_menu
from ui.views.queue_view import PAD, SWATCH, CellDelegate, QueueTabs, QueueView, visible_rows  # noqa: F401 (re-exported)
from ui.views.request_table import (PRIORITY_COLUMN, REASON_COLUMN, REASON_TEXTS, RequestTableModel,
                                    widest_texts)
from ui.step_summary import StepSummary
from ui.style.theme import dark_palette
from engine.vocab import Policy

QUEUES = ("running", "waiting", "swapped", "paused", "finished")
_NO_ROWS = np.zeros(0, np.int64)
HELD = "held"              # in a tab's title while the pointer holds its rows still
HOLD_S = 2.0               # seconds a table's rows hold still after the pointer last moved on it


_T = QEvent.Type
_ACTIVE = frozenset((_T.Enter, _T.MouseMove, _T.MouseButtonRelease, _T.Wheel))


class _PointerWatch(QObject):
    """Tells ``QueueTables.hold`` what the pointer does on a table's viewport: comes in or
    moves (hold), presses a button (hold until released), leaves (catch up)."""

    def __init__(self, tables: "QueueTables", name: str):
        super().__init__(tables)
        self.tables, self.name = tables, name

    def eventFilter(self, obj, event) -> bool:
        kind = event.type()
        if kind in _ACTIVE:
            self.tables.hold(self.name, True)
        elif kind == _T.MouseButtonPress:
            self.tables.hold(self.name, True, pressed=True)
        elif kind == _T.Leave:
            self.tables.hold(self.name, False)
        return False


class QueueTables(QWidget):
    """Tabs of request tables, titled with their counts. ``set_state`` updates them all but the
    one held by the pointer (``hold``)."""

    requestSelected = Signal(str)

    def __init__(self, control: EngineControl | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.control = control
        self.policy = ""                          # the run's scheduling policy (set_policy)
        self.selected: str | None = None
        self._restoring = False                   # selecting rows for the model, not the user
        # tables the pointer is over -> when it last moved there (inf: a button is down)
        self.held: dict[str, float] = {}
        self.clock = time.monotonic               # (tests give their own)
        self._pending: tuple | None = None        # (state, record) a held table has not shown
        self.models: dict[str, RequestTableModel] = {}
        self.views: dict[str, QTableView] = {}
        self.tabs = QueueTabs()
        for name in QUEUES:
            model, view = RequestTableModel(self, reasons=name == "waiting"), QueueView()
            view.setModel(model)
            view.setSelectionBehavior(QAbstractItemView.SelectRows)
            view.setSelectionMode(QAbstractItemView.SingleSelection)
            view.setAlternatingRowColors(True)
            view.setPalette(dark_palette())     # a window style sheet does not pass palettes on
            view.setItemDelegate(CellDelegate(model, view))   # after the palette: its colours
            view.setShowGrid(False)
            view.setWordWrap(False)             # one line per cell
            view.verticalHeader().hide()
            # a fixed scroll-bar gutter: a queue crossing a screenful neither shifts the columns
            # nor relays out the viewport (Qt shows or hides an as-needed bar one event pass later)
            view.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOn)
            bar = view.verticalScrollBar()           # nothing to scroll: an empty groove (theme)
            bar.rangeChanged.connect(lambda lo, hi, b=bar: b.setEnabled(hi > lo))
            bar.setEnabled(False)
            view.verticalHeader().setSectionResizeMode(QHeaderView.Fixed)
            view.verticalHeader().setDefaultSectionSize(22)
            hh = view.horizontalHeader()
            hh.setSectionResizeMode(QHeaderView.Interactive)
            # a header click sorts the rows (the model orders them: RequestTableModel.sort);
            # arrival order until then
            hh.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
            view.setSortingEnabled(True)
            hh.sectionResized.connect(lambda *_a, v=view: v.fit_reason_column())
            view.reason_width = max((view.fontMetrics().horizontalAdvance(t) for t in REASON_TEXTS[name]),
                                    default=0) + 2 * PAD + 6
            if REASON_TEXTS[name]:
                hh.moveSection(hh.visualIndex(REASON_COLUMN), 2)
            else:               # (hidden where it is: a moved hidden section leaves a gap in Qt 6)
                view.setColumnHidden(REASON_COLUMN, True)
                # the last column takes the room left; the state keeps its width (stretched, it
                # was the one squeezed to "tat" / "r…" in a narrow window)
                hh.setStretchLastSection(True)
            view.setMouseTracking(True)             # moves without a button count as activity
            view.viewport().installEventFilter(_PointerWatch(self, name))
            view.setContextMenuPolicy(Qt.CustomContextMenu)
            view.customContextMenuRequested.connect(lambda p, n=name: self._menu(n, p))
            view.selectionModel().selectionChanged.connect(lambda *_a, n=name: self._picked(n))
            model.visible_rows = lambda v=view: visible_rows(v)
            model.lay_out = view.executeDelayedItemsLayout
            self.models[name], self.views[name] = model, view
            self.tabs.addTab(view, name)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.tabs)
        self.set_policy("")
        self._fit_columns()
        self.tabs.bar.setTabVisible(QUEUES.index("swapped"), False)

    def _fit_columns(self) -> None:
        """Starting widths (user-resizable): the widest text a column's cells hold in the
        clock's unit (``ui.views.request_table.widest_texts``: TTFT and ITL as ``8,889 sim s``)
        or the header's text (with its unit), whichever is wider; the reason column then takes
        what is left. (ResizeToContents would re-query every row on each frame.)"""
        for name, view in self.views.items():
            model = self.models[name]
            fm, hfm = view.fontMetrics(), view.horizontalHeader().fontMetrics()
            for col, text in enumerate(widest_texts(model.time_unit)[:REASON_COLUMN]):
                swatch = SWATCH + PAD + 2 if col == 0 else 0
                header = model.headerData(col, Qt.Orientation.Horizontal)
                view.setColumnWidth(col, max(fm.horizontalAdvance(text) + 2 * PAD + 6 + swatch,
                                             hfm.horizontalAdvance(header) + 20))
            view.fit_reason_column()

    def set_control(self, control: EngineControl | None) -> None:
        self.control = control

    def set_policy(self, policy: str) -> None:
        """The run's scheduling policy: the priority column shows only under ``priority`` (any
        other policy rejects nonzero priorities, so there it would be a column of zeros taking
        the reason column's width), and so does the request menu's "Set priority…"."""
        self.policy = policy
        for view in self.views.values():
            view.setColumnHidden(PRIORITY_COLUMN, policy != Policy.PRIORITY)
            view.fit_reason_column()

    def set_state(self, state: EngineState, record: StepRecord | StepSummary | None = None) -> None:
        """Show ``state``'s queues; ``record`` (the shown step's record or summary) says why
        waiting requests were not admitted."""
        self._pending = (state, record) if self.held else None
        now = self.clock()
        for i, name in enumerate(QUEUES):
            model = self.models[name]
            if now - self.held.get(name, -math.inf) < HOLD_S:    # rows hold still under the pointer
                n = len(state.recently_finished) if name == "finished" else len(self._rows(state, name))
                self._set_title(i, f"{name.capitalize()} ({n:,} · {HELD})")
                continue
            # Qt moves a selection whose row is removed to a neighbour: that is not a user's pick
            self._restoring = True
            try:
                if name == "finished":                  # newest first
                    moved = model.set_views(state.recently_finished[::-1])
                else:
                    moved = model.set_state_rows(state, self._rows(state, name), record) or model.moved
            finally:
                self._restoring = False
            if moved and (self.selected is not None or self.views[name].selectionModel().hasSelection()):
                self._restore(name)
            if name == "swapped" and self.tabs.bar.isTabVisible(i) != bool(len(state.cpu_owner)):
                self.tabs.bar.setTabVisible(i, bool(len(state.cpu_owner)))   # runs with a pool
            self._set_title(i, self._title(name, model.rowCount(), record))

    @staticmethod
    def _title(name: str, rows: int, record) -> str:
        """The tab's text: the queue and its row count; the finished tab, which keeps only the
        most recent, also says how many finished in all (``record.num_finished``)."""
        total = getattr(record, "num_finished", rows) if name == "finished" else rows
        if total > rows:
            return f"Finished (last {rows:,} of {total:,})"
        return f"{name.capitalize()} ({rows:,})"

    def _set_title(self, index: int, title: str) -> None:
        if self.tabs.tabText(index) != title:
            self.tabs.setTabText(index, title)

    def catch_up(self) -> None:
        """Show the newest state given to a table whose hold ran out (the pointer rested for
        :data:`HOLD_S` seconds) while no new state came: the window calls this on still frames."""
        now = self.clock()
        rested = [name for name, t in self.held.items() if now - t >= HOLD_S]
        if self._pending is not None and rested:
            for name in rested:
                del self.held[name]                 # it moves again: hold() from the next move
            self.set_state(*self._pending)

    def hold(self, name: str, on: bool, pressed: bool = False) -> None:
        """Hold table ``name``'s rows still for :data:`HOLD_S` seconds from now (``on``: the
        pointer came over it or moved; ``pressed``: until the next call, a button is down), or
        let it catch up with the newest state it was given (the pointer left)."""
        if on:
            self.held[name] = math.inf if pressed else self.clock()
            return
        self.held.pop(name, None)
        if self._pending is not None:
            self.set_state(*self._pending)

    @staticmethod
    def _rows(state: EngineState, name: str) -> np.ndarray:
        """``state.queue_rows(name)``; the swapped queue is found without a pass over every
        row when no CPU swap block is held (a swapped-out request always holds some)."""
        if name == "swapped" and not (state.cpu_owner >= 0).any():
            return _NO_ROWS
        return state.queue_rows(name)

    def set_time_unit(self, unit: str) -> None:
        """``s`` or ``steps``: the unit of the run's clock, for the TTFT and ITL columns (their
        widths fit the headers' new text)."""
        if unit == self.models["running"].time_unit:
            return
        for m in self.models.values():
            m.set_time_unit(unit)
        self._fit_columns()

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
        """Select the selected request's row in ``name`` (none if it is not there)."""
        view, row = self.views[name], self.models[name].row_of(self.selected)
        sm = view.selectionModel()
        if [i.row() for i in sm.selectedRows()] == ([] if row is None else [row]):
            return
        self._restoring = True
        try:
            if row is None:
                sm.clearSelection()
            else:
                view.selectRow(row)
        finally:
            self._restoring = False

    def _picked(self, name: str) -> None:
        if self._restoring:
            return
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
        model = self.models[name]
        priority = model.priority(index.row()) if self.policy == Policy.PRIORITY else None
        menu = request_menu(self.control, model.view(index.row()), view, priority=priority,
                            move_to_front=self.policy == Policy.FCFS)
        menu.exec(view.viewport().mapToGlobal(pos))
