"""The queue tables' view parts: ``QueueView`` (a QTableView that paints the rows of its update
region in one pass through ``CellDelegate``, from cached laid-out texts), ``QueueTabs`` (a tab bar
over a stack of pages, placed by hand so a title change repaints only the bar) and
``visible_rows``. Used by ``ui.views.queue_tables``."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontMetrics, QPainter, QPalette, QPen, QStaticText
from PySide6.QtWidgets import (QStackedWidget, QStyle, QStyledItemDelegate, QTabBar, QTableView,
                               QWidget)

from ui.style.colors import color_index
from ui.views.request_table import _ERROR_COLOR, _SWATCHES, REASON_COLUMN, RequestTableModel


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
