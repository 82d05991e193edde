"""The compare window's per-request panel: every request's E2E change between two runs, most
slowed down first, with its cause and evidence (``recordings.compare.comparison``). Clicking a row emits
``requestSelected(request_id)``; the window selects it in every run and shows its arrival."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHeaderView, QLabel, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from recordings.compare.comparison import Comparison
from recordings.compare.tables import cause_summary, delta_table
from ui.style.colors import MUTED, css
from ui.style.theme import dark_palette

SHOWN = ("request", "change", "why")          # the columns of delta_table shown; all in the tooltip
SLOWER, FASTER = QColor(225, 87, 89), QColor(89, 161, 79)


class RequestDeltas(QWidget):
    """``set_comparison(c)``: the deltas of run k+1 against the first run (``pair`` combo box
    when there are more than two runs). ``table`` is public for tests."""

    requestSelected = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.comparison: Comparison | None = None
        self.pair = QComboBox()
        self.pair.currentIndexChanged.connect(self._show_pair)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet(f"color: {css(MUTED)};")
        self.table = QTableWidget(0, len(SHOWN))
        self.table.setHorizontalHeaderLabels(list(SHOWN))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setPalette(dark_palette())     # a window style sheet does not pass palettes on
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.itemSelectionChanged.connect(self._selected)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        title = QLabel("<b>Per request: E2E change and why</b>")
        for w in (title, self.pair, self.summary, self.table):
            lay.addWidget(w)
        lay.setStretchFactor(self.table, 1)

    def set_comparison(self, c: Comparison) -> None:
        self.comparison = c
        self.pair.blockSignals(True)
        self.pair.clear()
        self.pair.addItems([f"{h.name} vs {c.headlines[0].name}" for h in c.headlines[1:]])
        self.pair.blockSignals(False)
        self.pair.setVisible(len(c.headlines) > 2)
        self._show_pair(0)

    def _show_pair(self, k: int) -> None:
        c = self.comparison
        if c is None or not 0 <= k < len(c.deltas):
            return
        deltas = c.deltas[k]
        headers, rows = delta_table(deltas, c.time_unit, top=None, slower=None)
        cols = [headers.index(name) for name in SHOWN]
        self.summary.setText(f"{c.headlines[k + 1].name} vs {c.headlines[0].name}: {cause_summary(deltas)}")
        self.table.setRowCount(len(rows))
        for r, (row, d) in enumerate(zip(rows, deltas)):
            tip = "\n".join(f"{h}: {v}" for h, v in zip(headers, row))
            for col, i in enumerate(cols):
                item = QTableWidgetItem(row[i])
                item.setToolTip(tip)
                item.setData(Qt.UserRole, d.request_id)
                if i == headers.index("change") and d.cause != "unchanged":
                    item.setForeground(SLOWER if d.delta > 0 else FASTER)
                self.table.setItem(r, col, item)

    def _selected(self) -> None:
        items = self.table.selectedItems()
        if items:
            self.requestSelected.emit(items[0].data(Qt.UserRole))
