"""Running / waiting / swapped / paused / finished tables: a QTableView over a virtual
``ui.request_table.RequestTableModel`` each (10k waiting rows cost one array comparison a frame).
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
from PySide6.QtCore import QEvent, QObject, QPoint, QSize, Qt, Signal
from PySide6.QtGui import QFontMetrics, QPainter, QPalette, QPen, QStaticText
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QStackedWidget, QStyle,
                               QStyledItemDelegate, QTabBar, QTableView, QVBoxLayout, QWidget)

from engine.outputs import StepRecord
from engine.source import EngineControl
from engine.state import EngineState
from ui.request_menu import request_menu
from ui.colors import color_index
from ui.request_table import (_ERROR_COLOR, _RIGHT, _SWATCHES, PRIORITY_COLUMN, REASON_COLUMN,
                              REASON_TEXTS, RequestTableModel)
from ui.step_summary import StepSummary
from ui.theme import dark_palette

QUEUES = ("running", "waiting", "swapped", "paused", "finished")
_NO_ROWS = np.zeros(0, np.int64)
# starting widths (user-resizable) in characters of content, or the header's width if wider;
# ResizeToContents would re-query every row on each frame
WIDTH_CHARS = (7, 8, 4, 9, 6, 6, 3, 3)
HELD = "held"              # in a tab's title while the pointer holds its rows still
HOLD_S = 2.0               # seconds a table's rows hold still after the pointer last moved on it


def visible_rows(view: QTableView) -> tuple[int, int]:
    """(first, last) model rows on screen in ``view`` ((0, -1) when hidden or empty)."""
    if not view.isVisible():
        return 0, -1
    n = view.model().rowCount()
    first = view.rowAt(0)
    last = view.rowAt(view.viewport().height() - 1)
    return (max(first, 0), n - 1 if last < 0 else last) if n else (0, -1)


_PLAIN = (QStyle.StateFlag.State_Selected | QStyle.StateFlag.State_HasFocus).value
_LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
# (a PySide6 enum member costs microseconds to look up: once here, not per paint)
_GROUP_ACTIVE, _GROUP_INACTIVE = QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive
_ALTERNATE, _HIGHLIGHT = QPalette.ColorRole.AlternateBase, QPalette.ColorRole.Highlight
_HIGHLIGHTED_TEXT = QPalette.ColorRole.HighlightedText
PAD = 4          # pixels between a cell's edge and its text
SWATCH = 16      # side of the colour square before a request id (as Qt draws a colour icon)
MAX_TEXTS = 4096  # laid-out cell texts a table keeps


class CellDelegate(QStyledItemDelegate):
    """Paints a cell's text (and the id column's colour square) straight from the model's
    per-frame texts (:meth:`RequestTableModel.texts`). Qt's own delegate asks the model for
    seven roles per cell through Qt's type system and lays each text out with ``QTextLayout``:
    ~25 us a cell, 3 ms for a table of ~130 visible cells, repainted on most frames when the
    queues change every step; this one paints a cell in ~5 us, drawing each text from its
    ``QStaticText`` (laid out once per distinct text, not once per paint). Selected or focused cells (one
    row at most) and anything this delegate does not handle go Qt's way (same look); the
    model still answers every role (tooltips, tests, accessibility)."""

    def __init__(self, model: RequestTableModel, view: QTableView):
        super().__init__(view)
        self.model = model
        self.pen = QPen(view.palette().color(QPalette.ColorRole.Text))
        self.error_pen = QPen(_ERROR_COLOR)
        self.metrics = QFontMetrics(view.font())
        self.font = view.font()
        self._texts: dict[str, tuple[QStaticText, int]] = {}     # text -> (laid out, width)

    def paint(self, painter, option, index) -> None:
        if option.state.value & _PLAIN:
            return super().paint(painter, option, index)
        r = option.rect
        self.draw(painter, r.x(), r.y(), r.width(), r.height(), index.row(), index.column())

    def draw(self, painter, x: int, y: int, w: int, h: int, row: int, col: int,
             pen: QPen | None = None) -> None:
        """Paint the text (and the id column's colour square) of cell (``row``, ``col``) in the
        viewport rectangle (``x``, ``y``, ``w``, ``h``); ``pen``: the text's (default: the
        palette's text colour, the error colour for an error)."""
        text = self.model.texts(row)[col]
        x, w = x + PAD, w - 2 * PAD
        if col == 0:
            painter.fillRect(x, y + (h - SWATCH) // 2, SWATCH, SWATCH,
                             _SWATCHES[color_index(self.model.request_id(row))])
            x, w = x + SWATCH + PAD + 2, w - SWATCH - PAD - 2
        laid = self._texts.get(text)
        if laid is None:
            laid = self._laid_out(text)
        static, width = laid
        if width > w:
            static, width = self._laid_out(
                self.metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(w, 0)), keep=False)
        if pen is None:
            pen = self.error_pen if col == REASON_COLUMN and self.model.view(row).error else self.pen
        painter.setPen(pen)
        if 2 <= col < REASON_COLUMN:                       # numbers: right-aligned
            x += w - width
        painter.drawStaticText(x, y + (h - self.metrics.height()) // 2, static)

    def _laid_out(self, text: str, keep: bool = True) -> tuple[QStaticText, int]:
        """``text`` laid out once (``QStaticText``: drawn ~4x faster than ``drawText`` lays it
        out again every paint) and its width; kept for later frames (at most
        :data:`MAX_TEXTS` texts, then the cache starts over)."""
        static = QStaticText(text)
        static.setTextFormat(Qt.TextFormat.PlainText)      # a recorded id is never markup
        static.prepare(font=self.font)
        laid = (static, self.metrics.horizontalAdvance(text))
        if keep:
            if len(self._texts) >= MAX_TEXTS:
                self._texts.clear()
            self._texts[text] = laid
        return laid


class QueueView(QTableView):
    """A ``QTableView`` that repaints only the rows that came or went when its model added or
    removed rows at the end. ``QTableView`` lays its items out again and repaints the whole
    viewport whenever the row count changes, which at scale is most frames (a request finishes,
    another is admitted); the model lays the view out at once (``executeDelayedItemsLayout``,
    before the layout timer would) and then announces the cells that changed in the rows that
    stayed (:meth:`RequestTableModel.set_state_rows`).

    The reason column is shown third, after the state (why a request waits is what the
    table is read for), and is as wide as ``reason_width`` or the room left, whichever is more
    (a horizontal scroll bar for the numbers when the table is narrower): never squeezed as
    Qt's stretched last section would be."""

    reason_width = 0

    def paintEvent(self, event) -> None:
        """Paint the rows in the update region in one pass (:meth:`CellDelegate.draw` per
        cell): ``QTableView`` calls the delegate once per cell through Qt's type system, with
        a style option built for each (~15 us a cell, ~1.5 ms a frame for a table of ~110
        cells that all change). Rows alternate the palette's base colours; the selected row
        is the highlight colour with highlighted text, as Qt's style draws it. A view with
        another delegate or with its grid shown paints Qt's way."""
        delegate, model = self.itemDelegate(), self.model()
        if not isinstance(delegate, CellDelegate) or self.showGrid():
            return super().paintEvent(event)
        rect, n = event.rect(), model.rowCount()
        top = self.rowAt(rect.top())
        if top < 0 or not n:
            return                                     # below the rows: the background only
        bottom = self.rowAt(rect.bottom())
        bottom = n - 1 if bottom < 0 else bottom
        left, right = rect.left(), rect.right()
        columns = []
        for c in range(model.columnCount()):
            if not self.isColumnHidden(c):
                x, w = self.columnViewportPosition(c), self.columnWidth(c)
                if x <= right and x + w > left:
                    columns.append((c, x, w))
        pal = self.palette()
        group = _GROUP_ACTIVE if self.isActiveWindow() else _GROUP_INACTIVE
        alternate, highlight = pal.brush(group, _ALTERNATE), pal.brush(group, _HIGHLIGHT)
        highlighted = QPen(pal.color(group, _HIGHLIGHTED_TEXT))
        selected = {i.row() for i in self.selectionModel().selectedRows()}
        painter = QPainter(self.viewport())
        h, y = self.rowHeight(top), self.rowViewportPosition(top)
        for row in range(top, bottom + 1):
            pen = None
            if row in selected:
                painter.fillRect(left, y, right - left + 1, h, highlight)
                pen = highlighted
            elif row % 2:
                painter.fillRect(left, y, right - left + 1, h, alternate)
            for c, x, w in columns:
                delegate.draw(painter, x, y, w, h, row, c, pen)
            y += h
        painter.end()

    def fit_reason_column(self) -> None:
        """Give the reason column ``reason_width`` or all the room the others leave."""
        header = self.horizontalHeader()
        if header.isSectionHidden(REASON_COLUMN):
            return
        others = sum(header.sectionSize(c) for c in range(header.count())
                     if c != REASON_COLUMN and not header.isSectionHidden(c))
        width = max(self.reason_width, self.viewport().width() - others)
        if header.sectionSize(REASON_COLUMN) != width:
            header.blockSignals(True)
            header.resizeSection(REASON_COLUMN, width)
            header.blockSignals(False)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit_reason_column()

    def doItemsLayout(self) -> None:
        model = self.model()
        resized = getattr(model, "resized_rows", None)
        if resized is None:
            return super().doItemsLayout()
        header, vp = self.verticalHeader(), self.viewport()
        scrolled = header.offset()
        self.updateGeometries()
        header.setUpdatesEnabled(True)                     # QTableView turns it off on removal
        if header.offset() != scrolled:
            # fewer rows pulled the view up: the scroll moved pixels of rows that changed
            vp.update()
            return
        first = min(resized)
        y = self.rowViewportPosition(first) if first < model.rowCount() else (
            self.rowViewportPosition(first - 1) + self.rowHeight(first - 1) if first > 0 else 0)
        if y < vp.height():
            vp.update(0, max(y, 0), vp.width(), vp.height() - max(y, 0))


class QueueTabs(QWidget):
    """A tab bar over a stack of pages (what the tables need of ``QTabWidget``). The tab titles
    carry the queue counts, which change every step: a ``QTabWidget`` repaints its whole pane
    (the tables' frames and scroll bars) whenever a title changes, and a tab bar in a layout
    re-lays out the whole window (its size hint changed). Here the bar and the stack are placed
    by hand: a title change repaints the bar and nothing else."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.bar = QTabBar(self)
        self.bar.setExpanding(False)
        self.bar.setDrawBase(False)
        self.stack = QStackedWidget(self)
        self.stack.setObjectName("queuePane")
        self.bar.currentChanged.connect(self.stack.setCurrentIndex)

    def _bar_height(self) -> int:
        return self.bar.sizeHint().height()

    def sizeHint(self) -> QSize:
        return QSize(self.stack.sizeHint().width(), self._bar_height() + self.stack.sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        m = self.stack.minimumSizeHint()
        return QSize(m.width(), self._bar_height() + m.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        h = self._bar_height()
        self.bar.setGeometry(0, 0, self.width(), h)
        self.stack.setGeometry(0, h, self.width(), max(self.height() - h, 0))

    def addTab(self, page: QWidget, title: str) -> int:
        self.stack.addWidget(page)
        index = self.bar.addTab(title)
        self.updateGeometry()
        return index

    def count(self) -> int:
        return self.bar.count()

    def tabBar(self) -> QTabBar:
        return self.bar

    def tabText(self, index: int) -> str:
        return self.bar.tabText(index)

    def setTabText(self, index: int, title: str) -> None:
        self.bar.setTabText(index, title)

    def currentIndex(self) -> int:
        return self.bar.currentIndex()

    def setCurrentIndex(self, index: int) -> None:
        self.bar.setCurrentIndex(index)

    def currentWidget(self) -> QWidget | None:
        return self.stack.currentWidget()

    def setCurrentWidget(self, page: QWidget) -> None:
        self.bar.setCurrentIndex(self.stack.indexOf(page))


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
            view.verticalHeader().setSectionResizeMode(QHeaderView.Fixed)
            view.verticalHeader().setDefaultSectionSize(22)
            hh = view.horizontalHeader()
            hh.setSectionResizeMode(QHeaderView.Interactive)
            hh.sectionResized.connect(lambda *_a, v=view: v.fit_reason_column())
            view.reason_width = max((view.fontMetrics().horizontalAdvance(t) for t in REASON_TEXTS[name]),
                                    default=0) + 2 * PAD + 6
            if REASON_TEXTS[name]:
                hh.moveSection(hh.visualIndex(REASON_COLUMN), 2)
            else:               # (hidden where it is: a moved hidden section leaves a gap in Qt 6)
                view.setColumnHidden(REASON_COLUMN, True)
                hh.setSectionResizeMode(1, QHeaderView.Stretch)    # the state takes the room left
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
        """Starting widths: :data:`WIDTH_CHARS` of content or the header's text (with its unit),
        whichever is wider; the reason column then takes what is left."""
        for name, view in self.views.items():
            model = self.models[name]
            fm, hfm = view.fontMetrics(), view.horizontalHeader().fontMetrics()
            for col, chars in enumerate(WIDTH_CHARS):
                swatch = 22 if col == 0 else 0
                header = model.headerData(col, Qt.Orientation.Horizontal)
                view.setColumnWidth(col, max(fm.horizontalAdvance("0" * chars) + 14 + swatch,
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
            view.setColumnHidden(PRIORITY_COLUMN, policy != "priority")
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
        priority = model.priority(index.row()) if self.policy == "priority" else None
        menu = request_menu(self.control, model.view(index.row()), view, priority=priority,
                            move_to_front=self.policy == "fcfs")
        menu.exec(view.viewport().mapToGlobal(pos))
